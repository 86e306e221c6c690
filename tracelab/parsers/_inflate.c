/* Gzip inflation into a buffer the caller owns, without holding the GIL (tracelab.parsers.block_reader).
 *
 * Python's zlib module inflates without the GIL too, but it builds each result from a chain of growing
 * blocks and joins them into a new bytes object with the GIL held: for a 4 MiB block that is a fresh
 * 4 MiB allocation, its page faults and a copy, during which the main thread (importing numpy, or
 * building columns) waits for the GIL. Here the reading thread inflates straight into a bytearray
 * that is one block long plus room in front of it, where the parser later puts the unfinished end of
 * the previous block: the piece it scans is then contiguous without copying the new block.
 *
 * empty(n) -> bytearray of n bytes, not initialized (bytearray(n) would zero it with the GIL held).
 * Gunzip() -> one gzip member at a time (windowBits 31: the header is parsed, the trailer's CRC-32 and
 *   length are checked by zlib).
 *   .inflate_into(src, out, offset) -> (used, made, ended): inflates from the buffer src into the
 *     writable buffer out from `offset` on, until src is used up, out is full or the member ends. used:
 *     bytes of src consumed; made: bytes written; ended: the member's trailer was read and checked.
 *     Raises ValueError with zlib's message for corrupt data (bad header, bad CRC, ...).
 *   .reset() -> None: ready for the next member.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <zlib.h>

typedef struct {
    PyObject_HEAD
    z_stream zs;
    int ready; /* inflateInit2 succeeded */
    int ended; /* the current member's trailer was read; reset() before inflating again */
} Gunzip;

static PyObject *gunzip_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Gunzip() takes no arguments");
        return NULL;
    }
    Gunzip *self = (Gunzip *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    memset(&self->zs, 0, sizeof self->zs);
    if (inflateInit2(&self->zs, 31) != Z_OK) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->ready = 1;
    return (PyObject *)self;
}

static void gunzip_dealloc(PyObject *obj) {
    Gunzip *self = (Gunzip *)obj;
    if (self->ready) inflateEnd(&self->zs);
    Py_TYPE(obj)->tp_free(obj);
}

static PyObject *gunzip_reset(PyObject *obj, PyObject *unused) {
    Gunzip *self = (Gunzip *)obj;
    if (inflateReset(&self->zs) != Z_OK) {
        PyErr_SetString(PyExc_ValueError, "cannot reset the inflater");
        return NULL;
    }
    self->ended = 0;
    Py_RETURN_NONE;
}

static PyObject *gunzip_inflate_into(PyObject *obj, PyObject *args) {
    Gunzip *self = (Gunzip *)obj;
    Py_buffer src, out;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "y*w*n:inflate_into", &src, &out, &offset)) return NULL;
    PyObject *result = NULL;
    if (offset < 0 || offset > out.len) {
        PyErr_SetString(PyExc_ValueError, "offset outside the output buffer");
        goto done;
    }
    if (self->ended) {
        PyErr_SetString(PyExc_ValueError, "the member has ended: reset() first");
        goto done;
    }
    const unsigned char *in = (const unsigned char *)src.buf;
    unsigned char *dst = (unsigned char *)out.buf + offset;
    size_t in_left = (size_t)src.len, out_left = (size_t)(out.len - offset);
    size_t used = 0, made = 0;
    int rc = Z_OK;
    Py_BEGIN_ALLOW_THREADS
    while (in_left && out_left) {
        /* avail_in / avail_out are 32-bit: feed at most 1 GiB a step */
        uInt give = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
        uInt room = out_left > (1u << 30) ? (1u << 30) : (uInt)out_left;
        self->zs.next_in = (Bytef *)(in + used);
        self->zs.avail_in = give;
        self->zs.next_out = dst + made;
        self->zs.avail_out = room;
        rc = inflate(&self->zs, Z_NO_FLUSH);
        size_t took = give - self->zs.avail_in, wrote = room - self->zs.avail_out;
        used += took;
        made += wrote;
        in_left -= took;
        out_left -= wrote;
        if (rc == Z_STREAM_END) break;
        if (rc == Z_BUF_ERROR && !took && !wrote) break; /* no progress possible: reported below */
        if (rc != Z_OK && rc != Z_BUF_ERROR) break;
    }
    Py_END_ALLOW_THREADS
    if (rc == Z_STREAM_END) {
        self->ended = 1;
    } else if (rc == Z_NEED_DICT) {
        PyErr_SetString(PyExc_ValueError, "a preset dictionary is needed");
        goto done;
    } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && (in_left == 0 || out_left == 0))) {
        PyErr_SetString(PyExc_ValueError, self->zs.msg ? self->zs.msg : "invalid compressed data");
        goto done;
    }
    result = Py_BuildValue("nnO", (Py_ssize_t)used, (Py_ssize_t)made, self->ended ? Py_True : Py_False);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *empty(PyObject *module, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

static PyMethodDef GUNZIP_METHODS[] = {
    {"inflate_into", gunzip_inflate_into, METH_VARARGS,
     "inflate_into(src, out, offset) -> (used, made, ended): inflate src into out[offset:]."},
    {"reset", gunzip_reset, METH_NOARGS, "reset() -> None: ready for the next gzip member."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GUNZIP_TYPE = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracelab.parsers._inflate.Gunzip",
    .tp_basicsize = sizeof(Gunzip),
    .tp_dealloc = gunzip_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Gunzip(): inflates one gzip member at a time into buffers the caller owns.",
    .tp_methods = GUNZIP_METHODS,
    .tp_new = gunzip_new,
};

static PyMethodDef METHODS[] = {
    {"empty", empty, METH_O, "empty(n) -> bytearray of n bytes, not initialized."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_inflate", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__inflate(void) {
    if (PyType_Ready(&GUNZIP_TYPE) < 0) return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    Py_INCREF(&GUNZIP_TYPE);
    if (PyModule_AddObject(m, "Gunzip", (PyObject *)&GUNZIP_TYPE) < 0) {
        Py_DECREF(&GUNZIP_TYPE);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
