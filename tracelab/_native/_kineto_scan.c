/* Fast path of the Kineto parser: one piece of the traceEvents array (`[` + events + `]`) straight into
 * column buffers, without a Python object per event.
 *
 * scan(piece) -> None | (n, strings, columns)
 *   n        number of elements of the array
 *   strings  the distinct strings of ph / cat / name / args.cuda_sync_kind, in first-seen order
 *   columns  dict of Column objects (the scan's own buffers, handed over without a copy: read-only
 *            bytes through the buffer protocol for np.frombuffer; len() is the byte count), each n
 *            items: ph (int8 code), cat, name, sync, pid_s, tid_s (int32 ids into strings; sync -1
 *            when absent, pid_s / tid_s the id of a pid / tid given as a string, else -1), pid, tid,
 *            device, stream, correlation, context, bytes, registers, shared, grid (3 per event),
 *            block (3 per event) (int64; -1 when absent or null), ts (float64, NaN when absent), dur
 *            (float64, 0 when absent); mem: one record of 7 int64 per instant ("ph" "i" / "I") that has
 *            an args object, in row order: its row, then args "Device Type", "Device Id", "Bytes", "Total
 *            Allocated", "Total Reserved", "Addr" (the profiler's `[memory]` instants; absent: 1, -1, 0,
 *            -1, -1, 0; null: -1).
 *
 * It returns None ("declined") for anything outside the common, strictly valid case: the caller then
 * decodes the piece with msgspec (tracelab/parsers/kineto.py), which gives the reference result or the
 * reference error. So an accepted piece must give exactly what the msgspec path gives, and every doubt is
 * a decline: a field of another type than the strict decoder takes (a float where an int goes, a string
 * in an int field), a duplicate field, an escape in a key, a \u escape of a surrogate, an integer of more
 * than 18 digits, a number that overflows, invalid UTF-8 in a kept string, nesting deeper than 64, a
 * string-table lookup that visits more than 256 slots (crafted hash collisions), anything that is not
 * JSON. The scan holds no Python object and runs without the GIL; it reads only inside the buffer it was
 * given.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64
#define MAX_NUM 64
#define MAX_PROBES 256 /* slots one string-table lookup may visit */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cur;

/* ---- growable buffers ------------------------------------------------------------------------ */
typedef struct {
    unsigned char *data;
    size_t size, cap;
} Buf;

static int buf_put(Buf *b, const void *src, size_t len) {
    if (!len) return 0; /* b->data may still be NULL: no memcpy(NULL, ...), no NULL + 0 (both UB) */
    if (b->size + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->size + len) cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->size, src, len);
    b->size += len;
    return 0;
}

/* ---- the distinct strings of a piece (open addressing on a 64-bit hash) ------------------------ */
typedef struct {
    uint64_t hash;
    uint32_t off, len;
    int32_t id;
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, count;
    Buf pool;  /* the bytes of every distinct string, back to back */
    Buf index; /* per id: uint32 offset, uint32 length */
} Table;

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    /* eight bytes at a time, multiply-mix (only equality matters: strings are compared on a hit) */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xC2B2AE3D27D4EB4FULL);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ (v * 0x87C37B91114253D5ULL)) * 0x4CF5AD432745937FULL;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ (v * 0x87C37B91114253D5ULL)) * 0x4CF5AD432745937FULL;
    return h ^ (h >> 29);
}

static int table_grow(Table *t) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    Slot *s = calloc(cap, sizeof(Slot));
    if (!s) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].id == 0) continue; /* id stored +1: 0 = empty */
        size_t j = t->slots[i].hash & (cap - 1);
        while (s[j].id) j = (j + 1) & (cap - 1);
        s[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 0;
}

/* id of the string s[0:n] (added when new), or -1 (decline): out of memory, or a lookup past MAX_PROBES */
static int32_t table_id(Table *t, const unsigned char *s, size_t n) {
    if (n > 0x7FFFFFFF || t->pool.size + n > 0xFFFFFFFFu || t->count >= 0x7FFFFFFE) return -1;
    if ((t->count + 1) * 2 > t->cap && table_grow(t) < 0) return -1;
    uint64_t h = hash_bytes(s, n);
    size_t j = h & (t->cap - 1);
    for (int probes = 0; t->slots[j].id; probes++) {
        Slot *sl = &t->slots[j];
        if (sl->hash == h && sl->len == n && (!n || memcmp(t->pool.data + sl->off, s, n) == 0))
            return sl->id - 1; /* (n == 0: the pool may be NULL) */
        /* The hash is fixed and invertible, so strings can be made to share a slot: every lookup would
         * walk one growing cluster (quadratic: 80,000 such names took 7 s). At a load of at most 1/2 an
         * honest cluster this long never happens: decline, msgspec (Python's seeded hashing) decides. */
        if (probes == MAX_PROBES) return -1;
        j = (j + 1) & (t->cap - 1);
    }
    uint32_t off = (uint32_t)t->pool.size;
    if (buf_put(&t->pool, s, n) < 0) return -1;
    uint32_t entry[2] = {off, (uint32_t)n};
    if (buf_put(&t->index, entry, sizeof entry) < 0) return -1;
    int32_t id = (int32_t)t->count;
    t->slots[j].hash = h;
    t->slots[j].off = off;
    t->slots[j].len = (uint32_t)n;
    t->slots[j].id = id + 1;
    t->count++;
    return id;
}

/* ---- per-event columns ------------------------------------------------------------------------ */
enum { C_PID, C_TID, C_DEVICE, C_STREAM, C_CORR, C_CONTEXT, C_BYTES, C_REGS, C_SHARED, N_INT };
static const char *INT_NAMES[N_INT] = {"pid",   "tid",   "device",    "stream", "correlation",
                                       "context", "bytes", "registers", "shared"};

#define N_MEM 6 /* the [memory] args kept per instant: Device Type, Device Id, Bytes, Total Allocated, ... */

typedef struct {
    Buf ph, cat, name, sync, pid_s, tid_s, ts, dur, grid, block;
    Buf ints[N_INT];
    Buf mem; /* (row, N_MEM values) per instant with args: few per piece, so not a column of every row */
    Table strings;
    Buf scratch; /* unescaped string */
    int32_t empty_id; /* id of "" (the default ph / cat / name) */
    locale_t c_locale;
    size_t rows, cap; /* events written, room for (every column) */
} Out;

/* Room for at least `want` events in every column (at least double the current room). */
static int out_grow(Out *o, size_t want) {
    size_t cap = o->cap ? o->cap * 2 : 1024;
    while (cap < want) cap *= 2;
    Buf *b1[] = {&o->ph};
    Buf *b4[] = {&o->cat, &o->name, &o->sync, &o->pid_s, &o->tid_s};
    Buf *b8[] = {&o->ts, &o->dur};
    Buf *b24[] = {&o->grid, &o->block};
    struct { Buf **bufs; size_t n, width; } groups[] = {{b1, 1, 1}, {b4, 5, 4}, {b8, 2, 8}, {b24, 2, 24}};
    for (size_t g = 0; g < 4; g++)
        for (size_t i = 0; i < groups[g].n; i++) {
            Buf *b = groups[g].bufs[i];
            unsigned char *d = realloc(b->data, cap * groups[g].width);
            if (!d) return -1;
            b->data = d;
            b->cap = cap * groups[g].width;
        }
    for (int k = 0; k < N_INT; k++) {
        unsigned char *d = realloc(o->ints[k].data, cap * 8);
        if (!d) return -1;
        o->ints[k].data = d;
        o->ints[k].cap = cap * 8;
    }
    o->cap = cap;
    return 0;
}

/* ---- JSON scanning ---------------------------------------------------------------------------- */
static inline void skip_ws(Cur *c) { /* one comparison for the usual non-blank byte */
    while (c->p < c->end && *c->p <= ' ' && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static inline int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* The first byte at or after p that ends the plain run of a string: a quote, a backslash or a control
 * character (< 0x20). Eight bytes at a time (bytes >= 0x80 are plain). */
static inline const unsigned char *find_special(const unsigned char *p, const unsigned char *end) {
#ifdef __SSE2__
    /* sixteen bytes at a time: x < 0x20 as (x ^ 0x80) < (0x20 ^ 0x80) in signed bytes */
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    const __m128i flip = _mm_set1_epi8((char)0x80), ctl = _mm_set1_epi8((char)(0x20 ^ 0x80));
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                   _mm_cmplt_epi8(_mm_xor_si128(v, flip), ctl));
        int mask = _mm_movemask_epi8(hit);
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        uint64_t q = v ^ (0x22 * ones), b = v ^ (0x5C * ones);
        uint64_t hit = (((q - ones) & ~q) | ((b - ones) & ~b) | ((v - 0x20 * ones) & ~v)) & high;
        if (hit) return p + (__builtin_ctzll(hit) >> 3); /* the lowest hit is a true one */
        p += 8;
    }
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20) p++;
    return p;
}

/* A string starting at the opening quote. On success *s / *n hold its content (unescaped into
 * `scratch` when it has escapes, when scratch is given); returns 0, or -1 to decline. Without
 * scratch, escapes are only checked (a skipped value). */
static int scan_string(Cur *c, Buf *scratch, const unsigned char **s, size_t *n) {
    if (c->p >= c->end || *c->p != '"') return -1;
    const unsigned char *start = ++c->p;
    const unsigned char *p = find_special(start, c->end);
    if (p >= c->end || *p < 0x20) return -1;
    if (*p == '"') { /* the common case: no escapes */
        *s = start;
        *n = (size_t)(p - start);
        c->p = p + 1;
        return 0;
    }
    if (scratch) {
        scratch->size = 0;
        if (buf_put(scratch, start, (size_t)(p - start)) < 0) return -1;
    }
    while (p < c->end) {
        unsigned char ch = *p;
        if (ch == '"') break;
        if (ch < 0x20) return -1;
        if (ch != '\\') {
            const unsigned char *q = find_special(p, c->end);
            if (scratch && buf_put(scratch, p, (size_t)(q - p)) < 0) return -1;
            p = q;
            continue;
        }
        if (p + 1 >= c->end) return -1;
        unsigned char e = p[1], out;
        switch (e) {
            case '"': out = '"'; break;
            case '\\': out = '\\'; break;
            case '/': out = '/'; break;
            case 'b': out = '\b'; break;
            case 'f': out = '\f'; break;
            case 'n': out = '\n'; break;
            case 'r': out = '\r'; break;
            case 't': out = '\t'; break;
            case 'u': {
                if (p + 6 > c->end) return -1;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(p[k]);
                    if (h < 0) return -1;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return -1; /* surrogates: msgspec decides */
                if (scratch) {
                    unsigned char u[3];
                    size_t k;
                    if (v < 0x80) { u[0] = (unsigned char)v; k = 1; }
                    else if (v < 0x800) { u[0] = 0xC0 | (v >> 6); u[1] = 0x80 | (v & 0x3F); k = 2; }
                    else { u[0] = 0xE0 | (v >> 12); u[1] = 0x80 | ((v >> 6) & 0x3F); u[2] = 0x80 | (v & 0x3F); k = 3; }
                    if (buf_put(scratch, u, k) < 0) return -1;
                }
                p += 6;
                continue;
            }
            default: return -1;
        }
        if (scratch && buf_put(scratch, &out, 1) < 0) return -1;
        p += 2;
    }
    if (p >= c->end) return -1;
    c->p = p + 1;
    if (scratch) {
        *s = scratch->data;
        *n = scratch->size;
    } else {
        *s = start;
        *n = 0;
    }
    return 0;
}

/* The JSON number grammar; *is_int: no fraction and no exponent; *digits: the digits before any
 * fraction. Returns the length or -1. Lengths are ptrdiff_t / size_t: a number of 2^32 + k digits
 * (a 4 GiB buffer) must not read as one of k digits. */
static ptrdiff_t scan_number(Cur *c, int *is_int, size_t *digits) {
    const unsigned char *p = c->p, *e = c->end;
    *is_int = 1;
    if (p < e && *p == '-') p++;
    const unsigned char *d0 = p;
    if (p >= e) return -1;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < e && *p >= '0' && *p <= '9') p++;
    else return -1;
    *digits = (size_t)(p - d0);
    if (p < e && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= e || *p < '0' || *p > '9') return -1;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') return -1;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    ptrdiff_t len = p - c->p;
    c->p = p;
    return len;
}

/* After a value inside an array or object: 1 when `close` ends it, 0 after a ',' (and whitespace),
 * -1 for anything else. */
static int next_item(Cur *c, unsigned char close) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == close) {
        c->p++;
        return 1;
    }
    if (*c->p != ',') return -1;
    c->p++;
    skip_ws(c);
    return 0;
}

static int skip_value(Cur *c, int depth);

static int skip_literal(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return -1;
    c->p += n;
    return 0;
}

static int skip_value(Cur *c, int depth) {
    if (depth > MAX_DEPTH || c->p >= c->end) return -1;
    const unsigned char *s;
    size_t n, digits;
    int is_int;
    switch (*c->p) {
        case '"': return scan_string(c, NULL, &s, &n);
        case 't': return skip_literal(c, "true", 4);
        case 'f': return skip_literal(c, "false", 5);
        case 'n': return skip_literal(c, "null", 4);
        case '[':
            c->p++;
            skip_ws(c);
            if (c->p < c->end && *c->p == ']') { c->p++; return 0; }
            for (;;) {
                if (skip_value(c, depth + 1) < 0) return -1;
                int r = next_item(c, ']');
                if (r) return r < 0 ? -1 : 0;
            }
        case '{':
            c->p++;
            skip_ws(c);
            if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
            for (;;) {
                if (scan_string(c, NULL, &s, &n) < 0) return -1;
                skip_ws(c);
                if (c->p >= c->end || *c->p != ':') return -1;
                c->p++;
                skip_ws(c);
                if (skip_value(c, depth + 1) < 0) return -1;
                int r = next_item(c, '}');
                if (r) return r < 0 ? -1 : 0;
            }
        default:
            return scan_number(c, &is_int, &digits) < 0 ? -1 : 0;
    }
}

/* The value of an integer literal of at most 18 digits (checked by the caller), [p, end). */
static int64_t int_value(const unsigned char *p, const unsigned char *end) {
    int neg = *p == '-';
    int64_t x = 0;
    for (p += neg; p < end; p++) x = x * 10 + (*p - '0');
    return neg ? -x : x;
}

/* An integer field (`int | None` in the strict decoder): an integer literal of at most 18 digits, or
 * null (-1). Anything else declines. */
/* An integer literal of at most 18 digits at c->p, read in one pass: 1 with *v (c->p moved past it), 0
 * when the number there is not such an integer (a fraction, an exponent, more digits: c->p unmoved, the
 * caller reads it by the full grammar), -1 when no number starts there. */
static inline int fast_int(Cur *c, int64_t *v) {
    const unsigned char *p = c->p, *e = c->end;
    int neg = p < e && *p == '-';
    p += neg;
    const unsigned char *d0 = p;
    uint64_t x = 0;
    if (p >= e) return -1;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9')
        for (; p < e && *p >= '0' && *p <= '9'; p++) x = x * 10 + (uint64_t)(*p - '0'); /* wraps past 19 digits: refused below */
    else return -1;
    if ((p < e && (*p == '.' || *p == 'e' || *p == 'E')) || p - d0 > 18) return 0;
    *v = neg ? -(int64_t)x : (int64_t)x;
    c->p = p;
    return 1;
}

static int read_int(Cur *c, int64_t *v) {
    if (c->p < c->end && *c->p == 'n') {
        if (skip_literal(c, "null", 4) < 0) return -1;
        *v = -1;
        return 0;
    }
    return fast_int(c, v) == 1 ? 0 : -1; /* a fraction, an exponent or over 18 digits: not an int field */
}

/* A float field (ts, dur): a number; integers convert as msgspec does (exactly, then to double). */
static int read_float(Out *o, Cur *c, double *v) {
    int64_t whole;
    int r = fast_int(c, &whole);
    if (r < 0) return -1;
    if (r) { /* an integer: exactly, then to double */
        *v = (double)whole;
        return 0;
    }
    const unsigned char *start = c->p;
    int is_int;
    size_t digits;
    ptrdiff_t len = scan_number(c, &is_int, &digits);
    if (len < 0) return -1;
    if (is_int) {
        if (digits > 18) return -1;
        *v = (double)int_value(start, c->p);
        return 0;
    }
    if (len >= MAX_NUM) return -1;
    char tmp[MAX_NUM];
    memcpy(tmp, start, (size_t)len);
    tmp[len] = 0;
    char *endp = NULL;
    double x = o->c_locale ? strtod_l(tmp, &endp, o->c_locale) : strtod(tmp, &endp);
    if (endp != tmp + len || !isfinite(x)) return -1; /* out of range: msgspec decides */
    *v = x;
    return 0;
}

static int read_str_id(Out *o, Cur *c, int32_t *id) {
    const unsigned char *s;
    size_t n;
    if (scan_string(c, &o->scratch, &s, &n) < 0) return -1;
    *id = table_id(&o->strings, s, n);
    return *id < 0 ? -1 : 0;
}

/* pid / tid (`int | str | None`): an integer as read_int, null (-1), or a string, kept in the table
 * (*s = its id) for the caller to read as the Python parser does. */
static int read_id(Out *o, Cur *c, int64_t *v, int32_t *s) {
    if (c->p < c->end && *c->p == '"') {
        *v = -1;
        return read_str_id(o, c, s);
    }
    return read_int(c, v);
}

static int read_triple(Cur *c, int64_t v[3]) {
    if (c->p < c->end && *c->p == 'n') {
        if (skip_literal(c, "null", 4) < 0) return -1;
        v[0] = v[1] = v[2] = -1;
        return 0;
    }
    if (c->p >= c->end || *c->p != '[') return -1;
    c->p++;
    for (int k = 0; k < 3; k++) {
        skip_ws(c);
        if (c->p < c->end && *c->p == 'n') return -1; /* null inside: not an int */
        if (read_int(c, &v[k]) < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end || *c->p != (k < 2 ? ',' : ']')) return -1;
        c->p++;
    }
    return 0;
}


/* A key: a string without escapes (an escaped key could spell a field name: declined). */
static int ascii(const unsigned char *s, size_t n) {
    uint64_t high = 0;
    for (; n >= 8; s += 8, n -= 8) { /* eight bytes at a time */
        uint64_t v;
        memcpy(&v, s, 8);
        high |= v;
    }
    for (; n; s++, n--) high |= *s;
    return !(high & 0x8080808080808080ULL);
}

static int read_key(Cur *c, const unsigned char **k, size_t *n) {
    const unsigned char *q = c->p;
    if (scan_string(c, NULL, k, n) < 0) return -1;
    if ((size_t)(c->p - q) != *n + 2 || !ascii(*k, *n)) return -1; /* escaped or non-ASCII key */
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_ws(c);
    return 0;
}

/* The fields of one event, as the strict decoder's structs declare them (tracelab/parsers/kineto.py). */
typedef struct {
    int8_t ph;
    int32_t cat, name, sync, pid_s, tid_s;
    int64_t ints[N_INT];
    int64_t grid[3], block[3];
    double ts, dur;
    int64_t mem[N_MEM];
    int8_t has_args;
} Event;

typedef int (*FieldReader)(Out *o, Cur *c, Event *e, int field);

/* An object whose members named in `names` are read by `read` (each at most once: a duplicate
 * declines) and whose other members are skipped; null when `nullable`. */
static int read_object(Out *o, Cur *c, Event *e, const char *const *names, int count, FieldReader read,
                       int nullable, int depth) {
    if (nullable && c->p < c->end && *c->p == 'n') return skip_literal(c, "null", 4);
    if (c->p >= c->end || *c->p != '{') return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    unsigned seen = 0;
    for (;;) {
        const unsigned char *k;
        size_t n;
        if (read_key(c, &k, &n) < 0) return -1;
        int f = -1;
        for (int i = 0; i < count; i++) /* first byte before the length: most keys differ there */
            if (n && k[0] == (unsigned char)names[i][0] && n == strlen(names[i]) && memcmp(k, names[i], n) == 0) {
                f = i;
                break;
            }
        int rc;
        if (f >= 0) {
            if (seen & (1u << f)) return -1; /* duplicate field */
            seen |= 1u << f;
            rc = read(o, c, e, f);
        } else {
            rc = skip_value(c, depth);
        }
        if (rc < 0) return -1;
        int r = next_item(c, '}');
        if (r) return r < 0 ? -1 : 0;
    }
}

static const char *const ARG_NAMES[] = {"device", "stream", "correlation", "context", "bytes",
                                        "registers per thread", "shared memory", "grid", "block",
                                        "cuda_sync_kind", "Device Type", "Device Id", "Bytes",
                                        "Total Allocated", "Total Reserved", "Addr"};
#define N_ARG_NAMES 16
#define FIRST_MEM_ARG 10
static const int ARG_INT[] = {C_DEVICE, C_STREAM, C_CORR, C_CONTEXT, C_BYTES, C_REGS, C_SHARED};

static int read_arg(Out *o, Cur *c, Event *e, int field) {
    switch (field) {
        case 7: return read_triple(c, e->grid);
        case 8: return read_triple(c, e->block);
        case 9:
            if (c->p < c->end && *c->p == 'n') return skip_literal(c, "null", 4);
            return read_str_id(o, c, &e->sync);
        default:
            if (field >= FIRST_MEM_ARG) return read_int(c, &e->mem[field - FIRST_MEM_ARG]);
            return read_int(c, &e->ints[ARG_INT[field]]);
    }
}

static int8_t ph_code(const unsigned char *s, size_t n) {
    if (n != 1) return 0;
    switch (s[0]) {
        case 'X': return 1;
        case 'i': case 'I': return 2;
        case 's': case 'f': case 't': return 3;
        default: return 0;
    }
}

static const char *const EVENT_NAMES[] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args"};

static int read_field(Out *o, Cur *c, Event *e, int field) {
    switch (field) {
        case 0: { /* ph: only its code is kept; msgspec checks its UTF-8, so ASCII only */
            const unsigned char *s, *q = c->p;
            size_t m;
            if (c->p >= c->end || *c->p != '"' || scan_string(c, NULL, &s, &m) < 0) return -1;
            if (c->p - q != (ptrdiff_t)(m + 2) || !ascii(s, m)) return -1; /* escaped or non-ASCII */
            e->ph = ph_code(s, m);
            return 0;
        }
        case 1: return (c->p < c->end && *c->p == '"') ? read_str_id(o, c, &e->cat) : -1;
        case 2: return (c->p < c->end && *c->p == '"') ? read_str_id(o, c, &e->name) : -1;
        case 3: return read_id(o, c, &e->ints[C_PID], &e->pid_s);
        case 4: return read_id(o, c, &e->ints[C_TID], &e->tid_s);
        case 5: return read_float(o, c, &e->ts);
        case 6: return read_float(o, c, &e->dur);
        default:
            if (c->p < c->end && *c->p == '{') e->has_args = 1;
            return read_object(o, c, e, ARG_NAMES, N_ARG_NAMES, read_arg, 1, 2);
    }
}

static int read_event(Out *o, Cur *c) {
    Event e = {.ph = 0, .cat = o->empty_id, .name = o->empty_id, .sync = -1, .pid_s = -1, .tid_s = -1,
               .grid = {-1, -1, -1}, .block = {-1, -1, -1}, .ts = NAN, .dur = 0.0,
               .mem = {1, -1, 0, -1, -1, 0}, .has_args = 0};
    for (int k = 0; k < N_INT; k++) e.ints[k] = -1;
    if (read_object(o, c, &e, EVENT_NAMES, 8, read_field, 0, 1) < 0) return -1;
    if (o->rows == o->cap && out_grow(o, 0) < 0) return -1;
    size_t r = o->rows++;
    ((int8_t *)o->ph.data)[r] = e.ph;
    ((int32_t *)o->cat.data)[r] = e.cat;
    ((int32_t *)o->name.data)[r] = e.name;
    ((int32_t *)o->sync.data)[r] = e.sync;
    ((int32_t *)o->pid_s.data)[r] = e.pid_s;
    ((int32_t *)o->tid_s.data)[r] = e.tid_s;
    ((double *)o->ts.data)[r] = e.ts;
    ((double *)o->dur.data)[r] = e.dur;
    memcpy((int64_t *)o->grid.data + 3 * r, e.grid, 24);
    memcpy((int64_t *)o->block.data + 3 * r, e.block, 24);
    for (int k = 0; k < N_INT; k++) ((int64_t *)o->ints[k].data)[r] = e.ints[k];
    if (e.ph == 2 && e.has_args) { /* an instant with args: maybe a [memory] one (the parser checks the name) */
        int64_t rec[1 + N_MEM] = {(int64_t)r};
        memcpy(rec + 1, e.mem, sizeof e.mem);
        if (buf_put(&o->mem, rec, sizeof rec) < 0) return -1;
    }
    return 0;
}

/* 0: the whole piece was read; -1: declined. `rest`: the piece starts after the ',' that follows an
 * element (no '['), and holds at least one more element before the ']' */
static int scan_piece(Out *o, Cur *c, int rest, Py_ssize_t *count) {
    Py_ssize_t n = 0;
    skip_ws(c);
    if (!rest) {
        if (c->p >= c->end || *c->p != '[') return -1;
        c->p++;
        skip_ws(c);
    }
    if (!rest && c->p < c->end && *c->p == ']') {
        c->p++;
    } else {
        for (;;) {
            if (read_event(o, c) < 0) return -1;
            n++;
            int r = next_item(c, ']');
            if (r < 0) return -1;
            if (r) break;
        }
    }
    skip_ws(c);
    if (c->p != c->end) return -1; /* trailing bytes */
    *count = n;
    return 0;
}

static void out_free(Out *o) {
    Buf *all[] = {&o->ph, &o->cat, &o->name, &o->sync, &o->pid_s, &o->tid_s, &o->ts, &o->dur, &o->grid, &o->block,
                  &o->mem, &o->scratch, &o->strings.pool, &o->strings.index};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) free(all[k]->data);
    for (int k = 0; k < N_INT; k++) free(o->ints[k].data);
    free(o->strings.slots);
}

/* A column handed to Python without a copy: owns the malloc'd buffer the scan wrote (freed with the
 * object) and exposes its first `len` bytes, read-only, through the buffer protocol (np.frombuffer). */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t len;
} Column;

static int column_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Column *c = (Column *)self;
    return PyBuffer_FillInfo(view, self, c->data, c->len, 1, flags);
}

static void column_dealloc(PyObject *self) {
    free(((Column *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static Py_ssize_t column_length(PyObject *self) { return ((Column *)self)->len; }

static PyBufferProcs COLUMN_BUFFER = {column_getbuffer, NULL};
static PySequenceMethods COLUMN_SEQUENCE = {.sq_length = column_length};

static PyTypeObject COLUMN_TYPE = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracelab._native._kineto_scan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_buffer = &COLUMN_BUFFER,
    .tp_as_sequence = &COLUMN_SEQUENCE,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One column of a scanned piece: its bytes, read through the buffer protocol.",
};

/* d[key] = a Column owning b's buffer (b no longer holds it), trimmed to b->size bytes. */
static int put_column(PyObject *d, const char *key, Buf *b) {
    Column *c = PyObject_New(Column, &COLUMN_TYPE);
    if (!c) return -1;
    c->data = NULL;
    c->len = 0;
    size_t size = b->size ? b->size : 1;
    void *data = b->data ? realloc(b->data, size) : malloc(size); /* give back the room not used */
    if (!data) data = b->data;
    if (!data) {
        Py_DECREF(c);
        PyErr_NoMemory();
        return -1;
    }
    c->data = data;
    c->len = (Py_ssize_t)b->size;
    b->data = NULL;
    b->size = b->cap = 0;
    int rc = PyDict_SetItemString(d, key, (PyObject *)c);
    Py_DECREF(c);
    return rc;
}

static locale_t C_LOCALE = (locale_t)0;

/* The scan of buf[0:len] into *o (zeroed here; the caller frees it with out_free, whatever the result):
 * 0 with *n events, or -1 to decline. Pure C: no Python object, no GIL needed. */
static int scan_buffer(Out *o, const unsigned char *buf, size_t len, int rest, Py_ssize_t *n) {
    memset(o, 0, sizeof *o);
    o->c_locale = C_LOCALE;
    Cur c = {buf, buf + len};
    o->empty_id = table_id(&o->strings, (const unsigned char *)"", 0);
    if (o->empty_id < 0) return -1;
    size_t want = 0; /* room for about one event per 160 bytes, grown by doubling if short */
    while (want * 160 < len && want < ((size_t)1 << 26)) want = want ? want * 2 : 1024;
    if (want && out_grow(o, want) < 0) return -1; /* one allocation per column at that size */
    return scan_piece(o, &c, rest, n);
}

static PyObject *scan_any(PyObject *arg, int rest) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Out o;
    Py_ssize_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_buffer(&o, (const unsigned char *)view.buf, (size_t)view.len, rest, &n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc < 0) {
        out_free(&o);
        Py_RETURN_NONE;
    }
    {
        Buf *w1[] = {&o.ph}, *w4[] = {&o.cat, &o.name, &o.sync, &o.pid_s, &o.tid_s}, *w8[] = {&o.ts, &o.dur};
        w1[0]->size = o.rows;
        for (int k = 0; k < 5; k++) w4[k]->size = o.rows * 4;
        for (int k = 0; k < 2; k++) w8[k]->size = o.rows * 8;
        o.grid.size = o.block.size = o.rows * 24;
        for (int k = 0; k < N_INT; k++) o.ints[k].size = o.rows * 8;
    }
    PyObject *strings = PyList_New((Py_ssize_t)o.strings.count);
    PyObject *cols = PyDict_New();
    if (!strings || !cols) goto fail;
    const uint32_t *index = (const uint32_t *)o.strings.index.data;
    for (size_t i = 0; i < o.strings.count; i++) {
        uint32_t len = index[2 * i + 1]; /* the pool is NULL while it holds only "" */
        const char *text = len ? (const char *)o.strings.pool.data + index[2 * i] : "";
        PyObject *s = PyUnicode_DecodeUTF8(text, len, NULL);
        if (!s) { /* invalid UTF-8 in a kept string: the msgspec path says so */
            PyErr_Clear();
            Py_DECREF(strings);
            Py_DECREF(cols);
            out_free(&o);
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(strings, (Py_ssize_t)i, s);
    }
    if (put_column(cols, "ph", &o.ph) < 0 || put_column(cols, "cat", &o.cat) < 0 ||
        put_column(cols, "name", &o.name) < 0 || put_column(cols, "sync", &o.sync) < 0 ||
        put_column(cols, "pid_s", &o.pid_s) < 0 || put_column(cols, "tid_s", &o.tid_s) < 0 ||
        put_column(cols, "ts", &o.ts) < 0 || put_column(cols, "dur", &o.dur) < 0 ||
        put_column(cols, "grid", &o.grid) < 0 || put_column(cols, "block", &o.block) < 0 ||
        put_column(cols, "mem", &o.mem) < 0)
        goto fail;
    for (int k = 0; k < N_INT; k++)
        if (put_column(cols, INT_NAMES[k], &o.ints[k]) < 0) goto fail;
    out_free(&o);
    return Py_BuildValue("(nNN)", n, strings, cols);
fail:
    Py_XDECREF(strings);
    Py_XDECREF(cols);
    out_free(&o);
    return NULL;
}

/* The index just after the '[' that opens the value of the first key "traceEvents" of the top-level
 * object that buf starts with ('{' at buf[0]), or -1 when buf does not show one: the key is not in buf
 * (not read yet, or absent), its value is not an array, or buf does not start with '{'. Strings are
 * skipped with their escapes; only a key at depth 1 (a string followed by ':') counts. */
static Py_ssize_t find_array_start(const unsigned char *buf, size_t len) {
    const unsigned char *p = buf, *end = buf + len;
    if (p >= end || *p != '{') return -1;
    Py_ssize_t depth = 0;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            const unsigned char *s = ++p;
            while (p < end && *p != '"') {
                if (*p == '\\' && end - p < 2) return -1; /* the escaped byte is not read yet */
                p += (*p == '\\') ? 2 : 1;
            }
            if (p >= end) return -1;
            size_t n = (size_t)(p - s);
            p++;
            if (depth == 1 && n == 11 && memcmp(s, "traceEvents", 11) == 0) {
                const unsigned char *q = p;
                while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) q++;
                if (q < end && *q == ':') {
                    q++;
                    while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) q++;
                    return (q < end && *q == '[') ? (Py_ssize_t)(q + 1 - buf) : -1;
                }
            }
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0) return -1;
        }
        p++;
    }
    return -1;
}

static PyObject *array_start(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t at = find_array_start((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(at);
}

static PyObject *scan(PyObject *self, PyObject *arg) { return scan_any(arg, 0); }

static PyObject *scan_rest(PyObject *self, PyObject *arg) { return scan_any(arg, 1); }

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_O,
     "scan(piece) -> None | (n, strings, columns): one piece of traceEvents into column buffers "
     "(None: declined, decode it with msgspec)."},
    {"array_start", array_start, METH_O,
     "array_start(buf) -> the index after the '[' of the top-level traceEvents array, or -1 when buf "
     "(starting with '{') does not show it."},
    {"scan_rest", scan_rest, METH_O,
     "scan_rest(piece) -> as scan, for a piece that starts after the ',' following an element (no '['): "
     "one or more elements, then ']'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_kineto_scan", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    C_LOCALE = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (PyType_Ready(&COLUMN_TYPE) < 0) return NULL;
    return PyModule_Create(&MODULE);
}
