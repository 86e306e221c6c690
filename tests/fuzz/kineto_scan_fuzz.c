/* libFuzzer target for the Kineto C scanner (tracelab/_native/_kineto_scan.c), built with
 * AddressSanitizer + UBSan by tests/fuzz/run_kineto_scan_fuzz.py (read that file to run it).
 *
 * Each input is one piece of traceEvents (the bytes as they are). The scanner's source is included
 * here, so only the scanner (and this file) is coverage-instrumented: the fuzzer steers by the C
 * code's branches. Two modes:
 *   default         scan(piece) through the module's Python entry point, then the differential oracle
 *                   tests/kineto_scan_oracle.py: check(piece, result) (msgspec reference). A Python
 *                   exception (scan raising, or the oracle finding a difference) aborts: a crash input.
 *   KSCAN_C_ONLY=1  scan_buffer() alone, no Python at all, so LeakSanitizer checks every decline path
 *                   for leaks (run with -detect_leaks=1).
 */
#include "../../tracelab/_native/_kineto_scan.c"

static PyObject *CHECK = NULL;
static int C_ONLY = 0;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *mode = getenv("KSCAN_C_ONLY");
    C_ONLY = mode && *mode == '1';
    if (!C_LOCALE) C_LOCALE = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (C_ONLY) return 0;
    Py_Initialize(); /* sys.path from PYTHONPATH: the repository root, tests/ and the venv */
    /* the scanner under test is the copy compiled into this binary: keep the built extension (maybe
     * built with another ASan runtime) out of the process; kineto_rows then imports without it */
    if (PyRun_SimpleString("import sys; sys.modules['tracelab._native._kineto_scan'] = None") < 0) abort();
    PyObject *mod = PyImport_ImportModule("kineto_scan_oracle");
    if (!mod) {
        PyErr_Print();
        abort();
    }
    CHECK = PyObject_GetAttrString(mod, "check");
    Py_DECREF(mod);
    if (!CHECK) {
        PyErr_Print();
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (C_ONLY) {
        Out o;
        Py_ssize_t n = 0;
        for (int rest = 0; rest < 2; rest++) { /* a piece with its '[', and one after a ',' (scan_rest) */
            scan_buffer(&o, data, size, rest, &n);
            out_free(&o);
        }
        return 0;
    }
    /* a view of libFuzzer's own buffer (exactly `size` bytes, no copy, no trailing NUL): ASan sees
     * a read one byte past the piece */
    PyObject *piece = PyMemoryView_FromMemory((char *)data, (Py_ssize_t)size, PyBUF_READ);
    if (!piece) abort();
    PyObject *got = scan(NULL, piece);
    if (!got) { /* the scanner must decline, never raise, on any bytes */
        PyErr_Print();
        abort();
    }
    PyObject *r = PyObject_CallFunctionObjArgs(CHECK, piece, got, NULL);
    if (!r) {
        PyErr_Print();
        fprintf(stderr, "kineto_scan_fuzz: the scanner and msgspec differ on this input\n");
        abort();
    }
    Py_DECREF(r);
    Py_DECREF(got);
    PyObject *done = PyObject_CallMethod(piece, "release", NULL); /* nothing may keep the view */
    if (!done) {
        PyErr_Print();
        abort();
    }
    Py_DECREF(done);
    Py_DECREF(piece);
    return 0;
}
