/* Fast path of the nsys reader: the integer columns of one rowid range of an SQLite table straight into
 * int64 buffers, without SQLite printing every value as text and numpy parsing it back (what the
 * reference path, nsys_db.fetch_int_columns' group_concat query, does).
 *
 * connect(uri) -> handle | None
 *   A read-only connection (SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, `PRAGMA query_only = ON`) to the
 *   URI the Python side built (mode=ro&immutable=1 for the user's file, mode=ro for a private copy),
 *   so nothing is ever created beside the input. None when SQLite cannot open it (the caller then uses
 *   the reference path, which raises the reference error). The handle closes its connection when freed;
 *   one handle is used by one thread at a time. close(handle) closes it at once (read then declines).
 *
 * read(handle, sql, lo, hi, nulls, deadline, hint) -> None | (n, [bytearray] * ncols)
 *   Runs `sql` (ncols result columns, two parameters bound to lo and hi) and returns n rows as ncols
 *   bytearrays of n native int64 each; a NULL in column j is written as nulls[j] (`nulls` is ncols native
 *   int64s: SQL's coalesce(column j, nulls[j]), done without the VM ops). The GIL is released while SQLite steps, so several threads read
 *   at once. A progress handler interrupts the statement once CLOCK_MONOTONIC (what Python's
 *   time.monotonic reads) passes `deadline`, as the reference path's handler does. `hint` is the number
 *   of rows expected (the buffers grow past it).
 *
 * It returns None ("declined") for anything but the plain case: a value that is not an SQLite INTEGER
 * (TEXT, REAL, BLOB: the reference path has its own rules for those), any SQLite error (corrupt file,
 * interrupted by the deadline, a statement that does not prepare), a result of another width, or no
 * memory. The caller then reads the same range with the reference path, which gives the reference
 * result or raises the reference error; so an accepted range always gives exactly what the reference
 * path gives.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAPSULE "tracelab.sqlite_columns.handle"
#define PROGRESS_OPS 20000 /* VM steps between deadline checks (nsys_db._PROGRESS_OPS) */
#define MAX_COLS 64

typedef struct {
    sqlite3 *db; /* NULL once closed */
} Handle;

static void handle_free(PyObject *capsule) {
    Handle *h = PyCapsule_GetPointer(capsule, CAPSULE);
    if (!h) return;
    sqlite3_close_v2(h->db); /* a harmless no-op on NULL */
    free(h);
}

static PyObject *py_close(PyObject *self, PyObject *capsule) {
    Handle *h = PyCapsule_GetPointer(capsule, CAPSULE);
    if (!h) return NULL;
    sqlite3_close_v2(h->db);
    h->db = NULL;
    Py_RETURN_NONE;
}

static PyObject *py_connect(PyObject *self, PyObject *args) {
    const char *uri;
    if (!PyArg_ParseTuple(args, "s", &uri)) return NULL;
    sqlite3 *db = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "PRAGMA query_only = ON", NULL, NULL, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        sqlite3_close_v2(db); /* a harmless no-op on NULL */
        Py_RETURN_NONE;
    }
    Handle *h = malloc(sizeof(Handle));
    if (!h) {
        sqlite3_close_v2(db);
        return PyErr_NoMemory();
    }
    h->db = db;
    PyObject *cap = PyCapsule_New(h, CAPSULE, handle_free);
    if (!cap) {
        sqlite3_close_v2(db);
        free(h);
    }
    return cap;
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int past_deadline(void *arg) { return monotonic_s() > *(const double *)arg ? 1 : 0; }

/* Steps the statement into cols[0..ncols) (each cap int64s, grown by doubling). Returns the row count,
 * or -1 to decline. Runs without the GIL: touches no Python object. */
static Py_ssize_t step_all(sqlite3 *db, const char *sql, Py_ssize_t sql_len, sqlite3_int64 lo, sqlite3_int64 hi,
                           int ncols, const int64_t *nulls, double *deadline, int64_t **cols, Py_ssize_t *cap) {
    sqlite3_stmt *st = NULL;
    Py_ssize_t n = -1;
    sqlite3_progress_handler(db, PROGRESS_OPS, past_deadline, deadline);
    if (sqlite3_prepare_v2(db, sql, (int)sql_len, &st, NULL) != SQLITE_OK || st == NULL) goto done;
    if (sqlite3_column_count(st) != ncols || sqlite3_bind_parameter_count(st) != 2) goto done;
    if (sqlite3_bind_int64(st, 1, lo) != SQLITE_OK || sqlite3_bind_int64(st, 2, hi) != SQLITE_OK) goto done;
    Py_ssize_t rows = 0;
    for (;;) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) goto done;
        if (rows == *cap) {
            if (*cap > PY_SSIZE_T_MAX / 16) goto done;
            Py_ssize_t grown = *cap * 2;
            for (int j = 0; j < ncols; j++) {
                int64_t *p = realloc(cols[j], (size_t)grown * sizeof(int64_t));
                if (!p) goto done;
                cols[j] = p;
            }
            *cap = grown;
        }
        for (int j = 0; j < ncols; j++) {
            sqlite3_value *v = sqlite3_column_value(st, j);
            int type = sqlite3_value_type(v);
            if (type == SQLITE_INTEGER)
                cols[j][rows] = (int64_t)sqlite3_value_int64(v);
            else if (type == SQLITE_NULL)
                cols[j][rows] = nulls[j];
            else
                goto done;
        }
        rows++;
    }
    n = rows;
done:
    sqlite3_finalize(st); /* a harmless no-op on NULL */
    sqlite3_progress_handler(db, 0, NULL, NULL);
    return n;
}

static PyObject *py_read(PyObject *self, PyObject *args) {
    PyObject *cap_obj;
    const char *sql;
    Py_ssize_t sql_len, hint;
    long long lo, hi;
    Py_buffer nulls_buf;
    double deadline;
    if (!PyArg_ParseTuple(args, "Os#LLy*dn", &cap_obj, &sql, &sql_len, &lo, &hi, &nulls_buf, &deadline, &hint))
        return NULL;
    int64_t nulls[MAX_COLS];
    Py_ssize_t nbytes = nulls_buf.len;
    if (nbytes % (Py_ssize_t)sizeof(int64_t) || nbytes > (Py_ssize_t)sizeof(nulls)) nbytes = 0;
    if (nbytes) memcpy(nulls, nulls_buf.buf, (size_t)nbytes);
    PyBuffer_Release(&nulls_buf);
    int ncols = (int)(nbytes / (Py_ssize_t)sizeof(int64_t));
    Handle *h = PyCapsule_GetPointer(cap_obj, CAPSULE);
    if (!h) return NULL;
    sqlite3 *db = h->db;
    if (!db || ncols < 1 || ncols > MAX_COLS || sql_len > INT32_MAX) Py_RETURN_NONE;
    Py_ssize_t cap = hint < 16 ? 16 : (hint > (1 << 24) ? (1 << 24) : hint);
    int64_t *cols[MAX_COLS] = {0};
    for (int j = 0; j < ncols; j++) {
        cols[j] = malloc((size_t)cap * sizeof(int64_t));
        if (!cols[j]) {
            for (int k = 0; k < j; k++) free(cols[k]);
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    n = step_all(db, sql, sql_len, (sqlite3_int64)lo, (sqlite3_int64)hi, ncols, nulls, &deadline, cols, &cap);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL, *list = NULL;
    if (n < 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    list = PyList_New(ncols);
    if (!list) goto done;
    for (int j = 0; j < ncols; j++) {
        PyObject *ba = PyByteArray_FromStringAndSize((const char *)cols[j], n * (Py_ssize_t)sizeof(int64_t));
        if (!ba) goto done;
        PyList_SET_ITEM(list, j, ba);
        free(cols[j]);
        cols[j] = NULL;
    }
    out = Py_BuildValue("(nO)", n, list);
done:
    Py_XDECREF(list);
    for (int j = 0; j < ncols; j++) free(cols[j]);
    return out;
}

static PyMethodDef methods[] = {
    {"connect", py_connect, METH_VARARGS, "connect(uri) -> handle | None: a read-only connection"},
    {"close", py_close, METH_O, "close(handle): closes the connection now (read then declines)"},
    {"read", py_read, METH_VARARGS,
     "read(handle, sql, lo, hi, nulls, deadline, hint) -> None | (n, [bytearray]): int64 columns of a query"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sqlite_columns", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sqlite_columns(void) { return PyModule_Create(&module); }
