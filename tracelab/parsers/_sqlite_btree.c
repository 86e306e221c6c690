/* Fastest path of the nsys reader: integer columns of one rowid range of an SQLite table decoded
 * straight from the table's b-tree pages (the SQLite file format, https://sqlite.org/fileformat.html),
 * without SQLite's virtual machine stepping every row and column (what _sqlite_columns.c does, ~50 ns
 * per value; here a few ns).
 *
 * read(path, root, lo, hi, spec, deadline, hint, reuse=False) -> None | (n, [Column] * ncols)
 *   Walks the table b-tree rooted at page `root` of the database file `path` in rowid order and, for
 *   every row with lo <= rowid <= hi, writes one int64 per output column. `spec` is 4 native int64 per
 *   output column: (op, a, b, null) where a and b are record field indexes:
 *     OP_PLAIN    field a; NULL -> null;                       other types: decline
 *     OP_INT_ELSE field a if it is an integer, else null       (CASE WHEN typeof(a)='integer' THEN a ELSE null END)
 *     OP_COALESCE field a, else (a NULL) field b, else null;   other types: decline
 *     OP_SUM      (a, NULL -> 0) + (b, NULL -> 0);             other types or int64 overflow: decline
 *   `deadline` is a CLOCK_MONOTONIC time (Python's time.monotonic) past which it declines; `hint` the
 *   number of rows expected.
 *
 * It returns None ("declined") for anything it does not read exactly as SQLite would: a file that is
 * not a rollback-journal database (WAL mode: the newest pages may be in the -wal file), a page that is
 * not a table b-tree page, any out-of-range offset, cell or varint, a cycle (more pages visited than
 * the file holds), a record with an overflow page or with fewer fields than asked for (SQLite would
 * give the column's DEFAULT), a value of another type than the op accepts, the deadline, or no memory.
 * The caller then reads the range through SQLite (the C column reader or the reference path), which
 * gives the reference result or raises the reference error; so an accepted range always gives exactly
 * what they give. The Python side (nsys_btree.py) only asks for columns whose values SQLite returns as
 * stored (no REAL affinity, no generated columns, not the rowid alias) and for queries without WHERE.
 * The GIL is released while it reads; it touches no Python object then.
 *
 * Each column comes back as a `Column`: a writable buffer (np.frombuffer reads it without a copy) that
 * owns the array the reader filled, so the values are written once and never copied into a bytearray.
 * With reuse, the arrays are blocks of tracelab._pages's cache (the pages of freed big arrays; the
 * process has installed that allocator), given back to it when the Column dies.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_COLS 64
#define MAX_DEPTH 20 /* SQLite's BTCURSOR_MAX_DEPTH */
#define MAX_FIELDS 2000 /* SQLite's default SQLITE_MAX_COLUMN */
#define OP_PLAIN 0
#define OP_INT_ELSE 1
#define OP_COALESCE 2
#define OP_SUM 3

/* tracelab._pages's alloc / realloc / free (the cache of freed big blocks), when that module is built:
 * read(..., reuse=True) fills its columns in blocks from there and a Column gives its block back. */
typedef struct {
    void *(*alloc)(size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
} PagesApi;

static const PagesApi plain_api = {malloc, realloc, free};
static const PagesApi *pages_api; /* NULL without tracelab._pages */

typedef struct {
    int fd;
    uint32_t page_size, usable;
    uint64_t npages, visited;
    double deadline;
    int ncols;
    int64_t spec[MAX_COLS][4];
    int max_field; /* the highest field index any op reads */
    int64_t lo, hi;
    int64_t **cols;
    const PagesApi *mem; /* allocates cols */
    Py_ssize_t rows, cap;
    uint8_t *pages; /* MAX_DEPTH page buffers */
    int64_t *ftype; /* per field: serial type, and offset into the body */
    int64_t *foff;
} Reader;

/* An owning, writable buffer of int64 values (one output column). */
typedef struct {
    PyObject_HEAD
    int64_t *data;
    Py_ssize_t n;
    const PagesApi *mem; /* what allocated data */
} Column;

static int column_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Column *c = (Column *)self;
    return PyBuffer_FillInfo(view, self, c->data, c->n * (Py_ssize_t)sizeof(int64_t), 0, flags);
}

static void column_dealloc(PyObject *self) {
    Column *c = (Column *)self;
    c->mem->free(c->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs column_as_buffer = {column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sqlite_btree.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "int64 values read from b-tree pages (a buffer: np.frombuffer(col, np.int64))",
};

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A varint at p (at most end - p bytes); its length, or 0 when it runs past end. */
static int get_varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end) return 0;
    *out = (v << 8) | p[8];
    return 9;
}

static int read_page(Reader *r, uint64_t pgno, uint8_t *buf) {
    if (pgno < 1 || pgno > r->npages) return -1;
    if (++r->visited > r->npages) return -1; /* a cycle: a tree visits each page once */
    if ((r->visited & 63) == 0 && monotonic_s() > r->deadline) return -1;
    off_t at = (off_t)(pgno - 1) * r->page_size;
    size_t got = 0;
    while (got < r->page_size) {
        ssize_t k = pread(r->fd, buf + got, r->page_size - got, at + (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Big-endian signed integer of serial type t (1..6, 8, 9) at p; the body has been bounds-checked. */
static inline int64_t int_value(int64_t t, const uint8_t *p) {
    switch (t) {
    case 1:
        return (int8_t)p[0];
    case 2:
        return (int16_t)(uint16_t)(((uint32_t)p[0] << 8) | p[1]);
    case 3: {
        uint32_t v = ((uint32_t)p[0] << 16) | ((uint32_t)p[1] << 8) | p[2];
        return (int64_t)(int32_t)(v << 8) >> 8; /* sign extension of 24 bits */
    }
    case 4:
        return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
    case 5: {
        uint64_t v = ((uint64_t)p[0] << 40) | ((uint64_t)p[1] << 32) | ((uint64_t)p[2] << 24) |
                     ((uint64_t)p[3] << 16) | ((uint64_t)p[4] << 8) | p[5];
        return (int64_t)(v << 16) >> 16; /* sign extension of 48 bits */
    }
    case 6: {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
        return (int64_t)v;
    }
    case 8:
        return 0;
    default: /* 9 */
        return 1;
    }
}

static int64_t body_size(int64_t t) {
    static const int width[] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0};
    if (t < 10) return width[t];
    if (t < 12) return -1; /* reserved */
    return (t - 12) / 2;
}

/* body_size of the serial types 0..127 */
static int8_t SMALL_SIZE[128];

static void init_sizes(void) {
    for (int t = 0; t < 128; t++) SMALL_SIZE[t] = (int8_t)body_size(t);
}

static int is_int(int64_t t) { return (t >= 1 && t <= 6) || t == 8 || t == 9; }

/* One leaf cell's record into the output row; -1 to decline. */
static int take_row(Reader *r, const uint8_t *rec, uint64_t size) {
    const uint8_t *end = rec + size;
    uint64_t hsize;
    int k = get_varint(rec, end, &hsize);
    if (!k || hsize > size || hsize < (uint64_t)k) return -1;
    const uint8_t *h = rec + k, *hend = rec + hsize;
    int64_t off = (int64_t)hsize;
    int nf = 0;
    while (h < hend && nf <= r->max_field) {
        uint64_t t;
        int64_t len;
        if (*h < 0x80) { /* a one-byte serial type: every integer, NULL and short text or blob */
            t = *h++;
            len = SMALL_SIZE[t];
        } else {
            int m = get_varint(h, hend, &t);
            if (!m || t > INT64_MAX / 2) return -1;
            h += m;
            len = body_size((int64_t)t);
        }
        if (len < 0) return -1;
        r->ftype[nf] = (int64_t)t;
        r->foff[nf] = off;
        off += len;
        if (off > (int64_t)size) return -1;
        nf++;
    }
    if (nf <= r->max_field) return -1; /* a short record: SQLite gives the column DEFAULT */
    if (r->rows == r->cap) {
        if (r->cap > PY_SSIZE_T_MAX / 16) return -1;
        Py_ssize_t grown = r->cap * 2;
        for (int j = 0; j < r->ncols; j++) {
            int64_t *p = r->mem->realloc(r->cols[j], (size_t)grown * sizeof(int64_t));
            if (!p) return -1;
            r->cols[j] = p;
        }
        r->cap = grown;
    }
    for (int j = 0; j < r->ncols; j++) {
        const int64_t *s = r->spec[j];
        int64_t ta = r->ftype[s[1]], tb = s[0] >= OP_COALESCE ? r->ftype[s[2]] : 0, v;
        const uint8_t *pa = rec + r->foff[s[1]];
        switch (s[0]) {
        case OP_PLAIN:
            if (is_int(ta)) v = int_value(ta, pa);
            else if (ta == 0) v = s[3];
            else return -1;
            break;
        case OP_INT_ELSE:
            v = is_int(ta) ? int_value(ta, pa) : s[3];
            break;
        case OP_COALESCE:
            if (is_int(ta)) v = int_value(ta, pa);
            else if (ta != 0) return -1;
            else if (is_int(tb)) v = int_value(tb, rec + r->foff[s[2]]);
            else if (tb == 0) v = s[3];
            else return -1;
            break;
        case OP_SUM: {
            int64_t a = 0, b = 0;
            if (is_int(ta)) a = int_value(ta, pa);
            else if (ta != 0) return -1;
            if (is_int(tb)) b = int_value(tb, rec + r->foff[s[2]]);
            else if (tb != 0) return -1;
            if (__builtin_add_overflow(a, b, &v)) return -1; /* SQLite turns it into a REAL */
            break;
        }
        default:
            return -1;
        }
        r->cols[j][r->rows] = v;
    }
    r->rows++;
    return 0;
}

/* The rows of the subtree at pgno (depth: its buffer) in rowid order; 1 once past hi, -1 to decline.
 * Every key and rowid on the page must lie in (floor, ceil] (floor excluded only when has_floor) and
 * increase strictly: the search-tree order SQLite's seek relies on, so both visit the same rows. */
static int walk(Reader *r, uint64_t pgno, int depth, int has_floor, int64_t floor, int64_t ceil) {
    if (depth >= MAX_DEPTH) return -1; /* SQLite calls a deeper tree corrupt */
    uint8_t *pg = r->pages + (size_t)depth * r->page_size;
    if (read_page(r, pgno, pg) < 0) return -1;
    const uint8_t *end = pg + r->usable;
    uint32_t hdr = pgno == 1 ? 100 : 0;
    if (hdr + 12 > r->usable) return -1;
    uint8_t type = pg[hdr];
    uint32_t ncell = ((uint32_t)pg[hdr + 3] << 8) | pg[hdr + 4];
    if (type != 0x05 && type != 0x0D) return -1; /* not a table b-tree page */
    if (ncell == 0 && (depth > 0 || type == 0x05)) return -1; /* SQLite calls an empty child corrupt */
    uint32_t head = type == 0x05 ? 12 : 8;
    const uint8_t *ptrs = pg + hdr + head;
    uint32_t first = hdr + head + 2 * ncell;
    if (first > r->usable - 4) return -1;
    /* the largest local payload of a leaf cell (file format 1.6): bigger ones spill to overflow pages */
    uint32_t max_local = r->usable - 35;
    int has_prev = has_floor;
    int64_t prev = floor;
    for (uint32_t i = 0; i < ncell; i++) {
        uint32_t at = ((uint32_t)ptrs[2 * i] << 8) | ptrs[2 * i + 1];
        if (at < first || at > r->usable - 4) return -1;
        const uint8_t *c = pg + at;
        if (type == 0x05) {
            uint64_t child = ((uint64_t)c[0] << 24) | ((uint64_t)c[1] << 16) | ((uint64_t)c[2] << 8) | c[3];
            uint64_t ukey;
            if (!get_varint(c + 4, end, &ukey)) return -1;
            int64_t key = (int64_t)ukey;
            if ((has_prev && key <= prev) || key > ceil) return -1;
            if (key >= r->lo) { /* the child holds rowids in (prev, key]: skip it when all are below lo */
                int rc = walk(r, child, depth + 1, has_prev, prev, key);
                if (rc) return rc;
            }
            if (key >= r->hi) return 1; /* the rest is past hi */
            has_prev = 1;
            prev = key;
        } else {
            uint64_t psize, urowid;
            int k = get_varint(c, end, &psize);
            if (!k) return -1;
            int m = get_varint(c + k, end, &urowid);
            if (!m) return -1;
            int64_t rowid = (int64_t)urowid;
            if ((has_prev && rowid <= prev) || rowid > ceil) return -1;
            if (rowid > r->hi) return 1;
            has_prev = 1;
            prev = rowid;
            if (rowid < r->lo) continue;
            if (psize > max_local) return -1; /* overflow pages: decline */
            const uint8_t *rec = c + k + m;
            if (psize > (uint64_t)(end - rec)) return -1;
            if (take_row(r, rec, psize) < 0) return -1;
        }
    }
    if (type == 0x05) {
        const uint8_t *p = pg + hdr + 8;
        uint64_t right = ((uint64_t)p[0] << 24) | ((uint64_t)p[1] << 16) | ((uint64_t)p[2] << 8) | p[3];
        return walk(r, right, depth + 1, 1, prev, ceil);
    }
    return 0;
}

/* Opens and checks the file header; 0 when it is a rollback-journal database this reader can walk. */
static int open_db(Reader *r, const char *path) {
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) return -1;
    uint8_t h[100];
    if (pread(r->fd, h, 100, 0) != 100) return -1;
    if (memcmp(h, "SQLite format 3\0", 16) != 0) return -1;
    if (h[18] != 1 || h[19] != 1) return -1; /* WAL mode (2) or unknown versions */
    uint32_t ps = ((uint32_t)h[16] << 8) | h[17];
    if (ps == 1) ps = 65536;
    if (ps < 512 || ps > 65536 || (ps & (ps - 1))) return -1;
    if (h[20] > ps - 480) return -1; /* reserved bytes: the usable size is at least 480 */
    struct stat st;
    if (fstat(r->fd, &st) != 0 || st.st_size < (off_t)ps) return -1;
    r->page_size = ps;
    r->usable = ps - h[20];
    r->npages = (uint64_t)st.st_size / ps;
    return 0;
}

static PyObject *py_read(PyObject *self, PyObject *args) {
    const char *path;
    unsigned long long root;
    long long lo, hi;
    Py_buffer spec_buf;
    double deadline;
    Py_ssize_t hint;
    int reuse = 0;
    if (!PyArg_ParseTuple(args, "sKLLy*dn|p", &path, &root, &lo, &hi, &spec_buf, &deadline, &hint, &reuse))
        return NULL;
    Reader r;
    memset(&r, 0, sizeof(r));
    r.fd = -1;
    r.mem = reuse && pages_api ? pages_api : &plain_api;
    Py_ssize_t nbytes = spec_buf.len;
    int ok = nbytes > 0 && nbytes % (Py_ssize_t)(4 * sizeof(int64_t)) == 0 &&
             nbytes <= (Py_ssize_t)sizeof(r.spec);
    if (ok) memcpy(r.spec, spec_buf.buf, (size_t)nbytes);
    PyBuffer_Release(&spec_buf);
    if (!ok) Py_RETURN_NONE;
    r.ncols = (int)(nbytes / (Py_ssize_t)(4 * sizeof(int64_t)));
    for (int j = 0; j < r.ncols; j++) {
        int64_t op = r.spec[j][0], a = r.spec[j][1], b = r.spec[j][2];
        if (op < OP_PLAIN || op > OP_SUM || a < 0 || a >= MAX_FIELDS || b < 0 || b >= MAX_FIELDS) Py_RETURN_NONE;
        if (a > r.max_field) r.max_field = (int)a;
        if (op >= OP_COALESCE && b > r.max_field) r.max_field = (int)b;
    }
    r.lo = lo;
    r.hi = hi;
    r.deadline = deadline;
    r.cap = hint < 16 ? 16 : (hint > (1 << 24) ? (1 << 24) : hint);
    int64_t *cols[MAX_COLS] = {0};
    r.cols = cols;
    int rc = -1;
    Py_BEGIN_ALLOW_THREADS
    if (open_db(&r, path) == 0) {
        r.pages = malloc((size_t)MAX_DEPTH * r.page_size);
        r.ftype = malloc((size_t)(r.max_field + 1) * sizeof(int64_t));
        r.foff = malloc((size_t)(r.max_field + 1) * sizeof(int64_t));
        rc = r.pages && r.ftype && r.foff ? 0 : -1;
        for (int j = 0; rc == 0 && j < r.ncols; j++)
            if (!(cols[j] = r.mem->alloc((size_t)r.cap * sizeof(int64_t)))) rc = -1;
        if (rc == 0 && lo <= hi) rc = walk(&r, root, 0, 0, 0, INT64_MAX);
        if (rc == 1) rc = 0;
        if (rc == 0 && monotonic_s() > deadline) rc = -1;
    }
    if (r.fd >= 0) close(r.fd);
    free(r.pages);
    free(r.ftype);
    free(r.foff);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL, *list = NULL;
    if (rc != 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    list = PyList_New(r.ncols);
    if (!list) goto done;
    for (int j = 0; j < r.ncols; j++) {
        Column *c = PyObject_New(Column, &ColumnType);
        if (!c) goto done;
        if (r.rows < r.cap) { /* give the unused tail back (a shrinking realloc keeps the values) */
            int64_t *p = r.mem->realloc(cols[j], (size_t)(r.rows > 0 ? r.rows : 1) * sizeof(int64_t));
            if (p) cols[j] = p;
        }
        c->data = cols[j];
        c->mem = r.mem;
        c->n = r.rows;
        cols[j] = NULL;
        PyList_SET_ITEM(list, j, (PyObject *)c);
    }
    out = Py_BuildValue("(nO)", r.rows, list);
done:
    Py_XDECREF(list);
    for (int j = 0; j < r.ncols; j++) r.mem->free(cols[j]);
    return out;
}

static PyMethodDef methods[] = {
    {"read", py_read, METH_VARARGS,
     "read(path, root, lo, hi, spec, deadline, hint, reuse=False) -> None | (n, [Column]): int64 columns from "
     "b-tree pages (reuse: in blocks of tracelab._pages's cache)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sqlite_btree", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sqlite_btree(void) {
    init_sizes();
    pages_api = PyCapsule_Import("tracelab._pages._api", 0);
    if (!pages_api) PyErr_Clear(); /* not built: read(..., reuse=True) uses malloc */
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ColumnType);
    if (PyModule_AddObject(m, "Column", (PyObject *)&ColumnType) < 0) {
        Py_DECREF(&ColumnType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
