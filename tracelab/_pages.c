/* A numpy data allocator that keeps the pages of freed big arrays and hands them to the next big array,
 * instead of giving them back to the kernel and taking fresh ones (see docs/DECISIONS.md, "Reused
 * pages").
 *
 * numpy's default allocator gets every array of more than glibc's mmap threshold (at most 32 MiB: a
 * column of 4.5 M int64 is 36 MiB) from a fresh anonymous mapping and unmaps it when the array dies.
 * Every page of the next one is then faulted in and zeroed by the kernel again; on the VMs tracelab is
 * measured on, whose guest pages the host backs only when first touched, zeroing fresh huge pages was
 * 38-44 % of all the CPU time of parsing, storing and analysing a 1M-kernel nsys export (perf). Arrays
 * made on threads do not even reach glibc's reuse (a thread's arena maps big blocks anew).
 *
 * handler() -> capsule "mem_handler" (numpy's PyDataMem_Handler, version 1) for
 *   PyDataMem_SetHandler, which numpy scopes to the current context (each thread sets it itself).
 *   Requests of THRESHOLD bytes or more are served from the cache of freed blocks: the smallest
 *   block that holds them (split: the rest stays cached), else the biggest block grown with mremap
 *   (its pages move, only the new tail is fresh), else a new mapping. Freed blocks go back to the
 *   cache; past `limit` cached bytes, the oldest are unmapped. Smaller requests, and any pointer this
 *   allocator did not map (it keeps a table of its live blocks), go to the handler that was current
 *   when the module was set up (numpy's default), so arrays made before or by other handlers are freed
 *   the way they were allocated.
 * setup(api_capsule, madvise_hugepage) -> None: numpy's C-API table (the `_ARRAY_API` capsule of
 *   numpy._core._multiarray_umath) and whether to ask for huge pages on new mappings (numpy's own
 *   setting, `_get_madvise_hugepage()`). Called once, before handler().
 * set_handler(capsule) -> previous capsule: PyDataMem_SetHandler through that table.
 * set_limit(bytes) -> None: the most bytes the cache keeps (0: keep nothing; blocks are unmapped now).
 * stats() -> dict: counters (bytes and counts of reused, grown and new blocks, cached and live bytes).
 * release() -> int: unmap every cached block; returns the bytes given back.
 * _api: a capsule ("tracelab._pages._api") of alloc / realloc / free for C code that fills buffers
 *   itself without the GIL (the nsys b-tree reader's columns): the same cache, malloc below 1 MiB.
 *
 * One mutex guards the tables; no system call is made while it is held. A child made by fork()
 * starts with a fresh mutex (pthread_atfork).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MREMAP_MAYMOVE
#define MREMAP_MAYMOVE 1
#endif

#define THRESHOLD ((size_t)1 << 20) /* requests from 1 MiB up are this allocator's */
#define GRAIN ((size_t)1 << 16)     /* blocks are multiples of 64 KiB (so any split is page-aligned) */
#define HUGE_FROM ((size_t)4 << 20) /* ask for huge pages on new mappings from 4 MiB, as numpy does */
#define MAX_FREE 256                /* cached blocks at most (more: the oldest is unmapped) */

/* numpy's handler structs (ndarraytypes.h, version 1); their layout is part of numpy's ABI */
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} DataMemAllocator;

typedef struct {
    char name[127];
    uint8_t version;
    DataMemAllocator allocator;
} DataMemHandler;

/* numpy C-API slots (numpy/__multiarray_api.h; fixed by numpy's ABI since 1.22) */
#define SLOT_SET_HANDLER 304
#define SLOT_GET_HANDLER 305

typedef struct {
    char *addr;
    size_t size;
    uint64_t stamp;
} Block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Block cached[MAX_FREE];
static int n_cached;
static size_t cached_bytes, limit = (size_t)512 << 20;
static uint64_t clock_;
static int hugepage = 1;

/* live blocks: open addressing, key = address (NULL empty, TOMB deleted) */
#define TOMB ((char *)1)
static char **live_key;
static size_t *live_size;
static size_t live_cap, live_used, live_tombs, live_bytes;

typedef struct {
    uint64_t reused, reused_bytes, grown, grown_bytes, fresh, fresh_bytes, unmapped, unmapped_bytes;
} Stats;
static Stats st;

static PyObject *api_capsule, *prev_capsule, *own_capsule;
static void **api;
static DataMemHandler *prev; /* the handler small requests go to */

static size_t round_grain(size_t n) { return (n + GRAIN - 1) & ~(GRAIN - 1); }

static size_t slot_of(char *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p >> 12;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

/* lock held. 0 when the table cannot grow (no memory) */
static int live_grow(void) {
    size_t cap = live_cap ? live_cap * 2 : 1024;
    if (live_used + 1 < live_cap / 2)
        cap = live_cap; /* only tombstones to clear */
    char **k = calloc(cap, sizeof *k);
    size_t *s = calloc(cap, sizeof *s);
    if (!k || !s) {
        free(k);
        free(s);
        return 0;
    }
    for (size_t i = 0; i < live_cap; i++) {
        if (live_key[i] && live_key[i] != TOMB) {
            size_t j = slot_of(live_key[i], cap);
            while (k[j])
                j = (j + 1) & (cap - 1);
            k[j] = live_key[i];
            s[j] = live_size[i];
        }
    }
    free(live_key);
    free(live_size);
    live_key = k;
    live_size = s;
    live_cap = cap;
    live_tombs = 0;
    return 1;
}

static int live_put(char *p, size_t size) {
    if ((live_used + live_tombs + 1) * 4 >= live_cap * 3 && !live_grow())
        return 0;
    size_t j = slot_of(p, live_cap);
    while (live_key[j] && live_key[j] != TOMB)
        j = (j + 1) & (live_cap - 1);
    if (live_key[j] == TOMB)
        live_tombs--;
    live_key[j] = p;
    live_size[j] = size;
    live_used++;
    live_bytes += size;
    return 1;
}

/* the slot of p, or (size_t)-1 */
static size_t live_find(char *p) {
    if (!live_cap)
        return (size_t)-1;
    size_t j = slot_of(p, live_cap);
    while (live_key[j]) {
        if (live_key[j] == p)
            return j;
        j = (j + 1) & (live_cap - 1);
    }
    return (size_t)-1;
}

static void live_drop(size_t j) {
    live_bytes -= live_size[j];
    live_key[j] = TOMB;
    live_used--;
    live_tombs++;
}

static void cache_remove(int i) {
    cached_bytes -= cached[i].size;
    cached[i] = cached[--n_cached];
}

static int evict(Block *out, int max_out);

/* lock held: put a block in the cache; blocks pushed out (over the limit or the count) are written to
 * out[] for the caller to unmap once the lock is released */
static int cache_put(char *addr, size_t size, Block *out, int max_out) {
    /* coalesce with the cached neighbours on either side (pieces of one earlier block come back
     * together); cached blocks never touch each other, so there is at most one on each side */
    for (int merged = 1; merged;) {
        merged = 0;
        for (int i = 0; i < n_cached; i++) {
            if (cached[i].addr + cached[i].size == addr) {
                addr = cached[i].addr;
                size += cached[i].size;
            } else if (addr + size == cached[i].addr) {
                size += cached[i].size;
            } else {
                continue;
            }
            cache_remove(i);
            merged = 1;
            break;
        }
    }
    cached[n_cached++] = (Block){addr, size, ++clock_};
    cached_bytes += size;
    return evict(out, max_out);
}

/* lock held: take the oldest blocks out of the cache (into out[], for the caller to unmap once the lock
 * is released) while it holds more than the limit or too many blocks; how many */
static int evict(Block *out, int max_out) {
    int n_out = 0;
    while ((cached_bytes > limit || n_cached >= MAX_FREE) && n_cached > 0 && n_out < max_out) {
        int oldest = 0;
        for (int i = 1; i < n_cached; i++)
            if (cached[i].stamp < cached[oldest].stamp)
                oldest = i;
        out[n_out++] = cached[oldest];
        st.unmapped++;
        st.unmapped_bytes += cached[oldest].size;
        cache_remove(oldest);
    }
    return n_out;
}

static void unmap_all(Block *b, int n) {
    for (int i = 0; i < n; i++)
        munmap(b[i].addr, b[i].size);
}

/* huge pages for a big block, as numpy asks for its own */
static void advise(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    if (hugepage && size >= HUGE_FROM)
        madvise(p, size, MADV_HUGEPAGE);
#endif
}

static char *new_mapping(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    advise(p, size);
    return p;
}

/* A block of `have` bytes (not in the tables) grown to `need`: its pages move with it, only the tail is
 * fresh. MAP_FAILED (the block untouched) when the kernel cannot. Lock not held. */
static void *grow(char *addr, size_t have, size_t need) {
    void *q = mremap(addr, have, need, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        return q;
    advise(q, need);
    pthread_mutex_lock(&lock);
    st.grown++;
    st.grown_bytes += need - have; /* the new, fresh tail */
    pthread_mutex_unlock(&lock);
    return q;
}

/* A block of `need` bytes (a multiple of GRAIN) and whether its pages are all fresh (zero). */
static char *take(size_t need, int *fresh) {
    Block out[MAX_FREE + 1];
    int n_out = 0;
    char *p = NULL;
    pthread_mutex_lock(&lock);
    int best = -1, biggest = -1;
    for (int i = 0; i < n_cached; i++) {
        if (cached[i].size >= need && (best < 0 || cached[i].size < cached[best].size))
            best = i;
        if (biggest < 0 || cached[i].size > cached[biggest].size)
            biggest = i;
    }
    if (best >= 0) {
        Block b = cached[best];
        cache_remove(best);
        if (b.size > need) /* the tail stays cached */
            n_out = cache_put(b.addr + need, b.size - need, out, MAX_FREE + 1);
        p = b.addr;
        st.reused++;
        st.reused_bytes += need;
        *fresh = 0;
        pthread_mutex_unlock(&lock);
    } else if (biggest >= 0) {
        Block b = cached[biggest];
        cache_remove(biggest);
        pthread_mutex_unlock(&lock);
        void *q = grow(b.addr, b.size, need);
        *fresh = q == MAP_FAILED;
        if (*fresh)
            munmap(b.addr, b.size);
        p = *fresh ? new_mapping(need) : q;
    } else {
        pthread_mutex_unlock(&lock);
        p = new_mapping(need);
        *fresh = 1;
    }
    unmap_all(out, n_out);
    if (!p)
        return NULL;
    pthread_mutex_lock(&lock);
    if (*fresh) {
        st.fresh++;
        st.fresh_bytes += need;
    }
    int ok = live_put(p, need);
    pthread_mutex_unlock(&lock);
    if (!ok) {
        munmap(p, need);
        return NULL;
    }
    return p;
}

static void *h_malloc(void *ctx, size_t size) {
    (void)ctx;
    if (size < THRESHOLD)
        return prev->allocator.malloc(prev->allocator.ctx, size);
    int fresh;
    return take(round_grain(size), &fresh);
}

static void *h_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    if (elsize && nelem > SIZE_MAX / elsize)
        return NULL;
    size_t size = nelem * elsize;
    if (size < THRESHOLD)
        return prev->allocator.calloc(prev->allocator.ctx, nelem, elsize);
    size_t need = round_grain(size);
    int fresh;
    char *p = take(need, &fresh);
    if (p && !fresh)
        memset(p, 0, size);
    return p;
}

/* Put a block of this allocator back in the cache: 1, or 0 when ptr is not one of its blocks. */
static int give_back(void *ptr) {
    Block out[MAX_FREE + 1];
    pthread_mutex_lock(&lock);
    size_t j = live_find(ptr);
    if (j == (size_t)-1) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    size_t have = live_size[j];
    live_drop(j);
    int n_out = cache_put(ptr, have, out, MAX_FREE + 1);
    pthread_mutex_unlock(&lock);
    unmap_all(out, n_out);
    return 1;
}

/* Resize a block of this allocator (*ours = 1), or set *ours = 0 when ptr is not one of its blocks.
 * A smaller size keeps the block in place and caches its tail; a bigger one moves its pages (mremap).
 * NULL (and the block untouched) when it cannot. */
static void *resize(void *ptr, size_t new_size, int *ours) {
    Block out[MAX_FREE + 1];
    int n_out = 0;
    pthread_mutex_lock(&lock);
    size_t j = live_find(ptr);
    if (j == (size_t)-1) {
        pthread_mutex_unlock(&lock);
        *ours = 0;
        return NULL;
    }
    *ours = 1;
    size_t have = live_size[j];
    size_t need = round_grain(new_size ? new_size : 1);
    if (need == have) {
        pthread_mutex_unlock(&lock);
        return ptr;
    }
    if (need < have) { /* the tail goes to the cache: no system call, its pages kept */
        live_size[j] = need;
        live_bytes -= have - need;
        n_out = cache_put((char *)ptr + need, have - need, out, MAX_FREE + 1);
        pthread_mutex_unlock(&lock);
        unmap_all(out, n_out);
        return ptr;
    }
    live_drop(j);
    pthread_mutex_unlock(&lock);
    void *q = grow(ptr, have, need);
    pthread_mutex_lock(&lock);
    int ok = live_put(q == MAP_FAILED ? ptr : q, q == MAP_FAILED ? have : need);
    pthread_mutex_unlock(&lock);
    if (q == MAP_FAILED)
        return NULL; /* realloc's contract: the old block is untouched */
    if (!ok) {
        munmap(q, need);
        return NULL;
    }
    return q;
}

static void h_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    if (ptr && !give_back(ptr))
        prev->allocator.free(prev->allocator.ctx, ptr, size);
}

static void *h_realloc(void *ctx, void *ptr, size_t new_size) {
    if (!ptr)
        return h_malloc(ctx, new_size);
    int ours;
    void *q = resize(ptr, new_size, &ours);
    return ours ? q : prev->allocator.realloc(prev->allocator.ctx, ptr, new_size);
}

/* The same for C code that fills buffers itself (tracelab/parsers/_sqlite_btree.c), through the capsule
 * `_api`: big blocks from the cache, anything else from malloc; safe without the GIL. */
static void *c_alloc(size_t size) {
    if (size < THRESHOLD)
        return malloc(size);
    int fresh;
    return take(round_grain(size), &fresh);
}

static void *c_realloc(void *ptr, size_t size) {
    if (!ptr)
        return c_alloc(size);
    int ours;
    void *q = resize(ptr, size, &ours);
    return ours ? q : realloc(ptr, size);
}

static void c_free(void *ptr) {
    if (ptr && !give_back(ptr))
        free(ptr);
}

typedef struct {
    void *(*alloc)(size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
} PagesApi;

static PagesApi c_api = {c_alloc, c_realloc, c_free};

static DataMemHandler own = {
    "tracelab_reused_pages", 1, {NULL, h_malloc, h_calloc, h_realloc, h_free}};

static void after_fork_child(void) { pthread_mutex_init(&lock, NULL); }

static PyObject *py_setup(PyObject *self, PyObject *args) {
    PyObject *cap;
    int huge;
    if (!PyArg_ParseTuple(args, "Op", &cap, &huge))
        return NULL;
    if (own_capsule) {
        hugepage = huge;
        Py_RETURN_NONE;
    }
    void **table = PyCapsule_GetPointer(cap, NULL);
    if (!table)
        return NULL;
    PyObject *(*get)(void) = (PyObject * (*)(void)) table[SLOT_GET_HANDLER];
    PyObject *current = get(); /* new reference */
    if (!current)
        return NULL;
    DataMemHandler *h = PyCapsule_GetPointer(current, "mem_handler");
    if (!h || h->version != 1) {
        Py_DECREF(current);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "numpy's memory handler is not of version 1");
        return NULL;
    }
    own_capsule = PyCapsule_New(&own, "mem_handler", NULL);
    if (!own_capsule) {
        Py_DECREF(current);
        return NULL;
    }
    Py_INCREF(cap);
    api_capsule = cap;
    api = table;
    prev_capsule = current; /* kept for good: arrays allocated with it stay valid */
    prev = h;
    hugepage = huge;
    pthread_atfork(NULL, NULL, after_fork_child);
    Py_RETURN_NONE;
}

static PyObject *py_handler(PyObject *self, PyObject *noargs) {
    if (!own_capsule) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return NULL;
    }
    Py_INCREF(own_capsule);
    return own_capsule;
}

static PyObject *py_set_handler(PyObject *self, PyObject *cap) {
    if (!api) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return NULL;
    }
    PyObject *(*set)(PyObject *) = (PyObject * (*)(PyObject *)) api[SLOT_SET_HANDLER];
    return set(cap == Py_None ? NULL : cap);
}

static PyObject *py_set_limit(PyObject *self, PyObject *arg) {
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);
    if (n == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Block out[MAX_FREE + 1];
    pthread_mutex_lock(&lock);
    limit = (size_t)n;
    int n_out = evict(out, MAX_FREE + 1);
    pthread_mutex_unlock(&lock);
    unmap_all(out, n_out);
    Py_RETURN_NONE;
}

static PyObject *py_release(PyObject *self, PyObject *noargs) {
    Block out[MAX_FREE];
    size_t total = 0;
    pthread_mutex_lock(&lock);
    int n_out = n_cached;
    memcpy(out, cached, sizeof(Block) * (size_t)n_cached);
    for (int i = 0; i < n_out; i++) {
        total += out[i].size;
        st.unmapped++;
        st.unmapped_bytes += out[i].size;
    }
    n_cached = 0;
    cached_bytes = 0;
    pthread_mutex_unlock(&lock);
    unmap_all(out, n_out);
    return PyLong_FromSize_t(total);
}

static PyObject *py_stats(PyObject *self, PyObject *noargs) {
    pthread_mutex_lock(&lock);
    Stats s = st;
    size_t cb = cached_bytes, lb = live_bytes, lim = limit;
    int nc = n_cached;
    size_t nl = live_used;
    pthread_mutex_unlock(&lock);
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:n,s:i,s:n,s:n,s:n,s:n}", "reused", s.reused, "reused_bytes",
        s.reused_bytes, "grown", s.grown, "grown_bytes", s.grown_bytes, "fresh", s.fresh, "fresh_bytes",
        s.fresh_bytes, "unmapped", s.unmapped, "unmapped_bytes", s.unmapped_bytes, "cached_bytes",
        (Py_ssize_t)cb, "cached_blocks", nc, "live_bytes", (Py_ssize_t)lb, "live_blocks", (Py_ssize_t)nl,
        "limit", (Py_ssize_t)lim, "threshold", (Py_ssize_t)THRESHOLD);
}

static PyMethodDef methods[] = {
    {"setup", py_setup, METH_VARARGS, "setup(api_capsule, madvise_hugepage): once, before handler()"},
    {"handler", py_handler, METH_NOARGS, "the allocator's mem_handler capsule"},
    {"set_handler", py_set_handler, METH_O, "numpy's PyDataMem_SetHandler; returns the previous capsule"},
    {"set_limit", py_set_limit, METH_O, "the most bytes kept in the cache"},
    {"release", py_release, METH_NOARGS, "unmap every cached block; returns the bytes given back"},
    {"stats", py_stats, METH_NOARGS, "counters"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pages", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pages(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    PyObject *cap = PyCapsule_New(&c_api, "tracelab._pages._api", NULL);
    if (!cap || PyModule_AddObject(m, "_api", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
