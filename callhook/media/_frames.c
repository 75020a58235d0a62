/* Every call's 20 ms G.711 frame of a media tick decoded and measured in C:
 * callhook.media._frames.  Sans-IO.
 *
 * What this is for: frames.py's measure() decodes every call's frame of the tick
 * through the law's table and takes each one's mean square.  In numpy that is a join,
 * a table look-up, a float64 copy of every sample and a row-wise product: about 1 µs a
 * frame in isolation (0.7-1.1), and three to four times that in a loaded serve, where
 * its temporaries (eleven bytes of memory written per sample: the joined codes, the
 * int16 samples, their float64 copy) run cold (issue 19).  Here one pass over
 * each payload writes its samples into the caller's array and sums their squares.
 *
 * The power is the sum of the squares in a 64-bit integer (exact: 160 squares of int16
 * are below 2**38) divided by the frame's length in double, which is what numpy's
 * float64 product gives for the same frame, to the bit (every partial sum of that
 * product is an integer below 2**53, so exact, in any order).  frames.py's numpy path
 * stays the reference (tests/unit/media/test_frames.py compares the two).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* decode_measure(table, payloads, out) -> [power]: see the module method's doc. */
static PyObject *decode_measure(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_measure(table, payloads: list, out) takes 3 arguments");
        return NULL;
    }
    PyObject *payloads = args[1];
    Py_buffer table = {0}, out = {0};
    PyObject *powers = NULL;
    if (PyObject_GetBuffer(args[0], &table, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (table.len != 256 * (Py_ssize_t)sizeof(int16_t) || table.itemsize != sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "decode_measure: the table is not 256 int16 samples");
        goto done;
    }
    if (out.itemsize != sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "decode_measure: out is not of int16 samples");
        goto done;
    }
    Py_ssize_t n = PyList_GET_SIZE(payloads);
    if (n == 0) {
        powers = PyList_New(0);
        goto done;
    }
    /* Every payload the same length, the frame's: out holds n frames of it. */
    PyObject *first = PyList_GET_ITEM(payloads, 0);
    if (!PyBytes_Check(first)) {
        PyErr_SetString(PyExc_TypeError, "decode_measure: a payload that is not bytes");
        goto done;
    }
    Py_ssize_t frame = PyBytes_GET_SIZE(first);
    if (frame == 0) {
        PyErr_SetString(PyExc_ValueError, "decode_measure: an empty payload");
        goto done;
    }
    if (out.len != n * frame * (Py_ssize_t)sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "decode_measure: out is not one int16 row a payload");
        goto done;
    }
    powers = PyList_New(n);
    if (powers == NULL)
        goto done;
    const int16_t *decode = (const int16_t *)table.buf;
    int16_t *row = (int16_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++, row += frame) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        if (!PyBytes_Check(payload)) {
            PyErr_SetString(PyExc_TypeError, "decode_measure: a payload that is not bytes");
            Py_CLEAR(powers);
            goto done;
        }
        if (PyBytes_GET_SIZE(payload) != frame) {
            PyErr_SetString(PyExc_ValueError, "decode_measure: payloads of different lengths");
            Py_CLEAR(powers);
            goto done;
        }
        const unsigned char *codes = (const unsigned char *)PyBytes_AS_STRING(payload);
        int64_t sum = 0;
        for (Py_ssize_t k = 0; k < frame; k++) {
            int32_t sample = decode[codes[k]];
            row[k] = (int16_t)sample;
            sum += (int64_t)(sample * sample);
        }
        PyObject *power = PyFloat_FromDouble((double)sum / (double)frame);
        if (power == NULL) {
            Py_CLEAR(powers);
            goto done;
        }
        PyList_SET_ITEM(powers, i, power);
    }
done:
    if (table.obj != NULL)
        PyBuffer_Release(&table);
    if (out.obj != NULL)
        PyBuffer_Release(&out);
    return powers;
}

static PyMethodDef module_methods[] = {
    {"decode_measure", (PyCFunction)(void (*)(void))decode_measure, METH_FASTCALL,
     "decode_measure(table, payloads, out) -> [power]: each payload (bytes, all of one "
     "length) decoded through `table` (the law's 256 int16 samples) into its row of `out` "
     "(a writable C-contiguous int16 buffer of len(payloads) rows), and each row's mean "
     "square, as frames.py's numpy path gives it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.media._frames",
    .m_doc = "Every call's G.711 frame of a media tick decoded and measured (see frames.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__frames(void) { return PyModule_Create(&module); }
