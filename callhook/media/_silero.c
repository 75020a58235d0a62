/* callhook.media._silero: the Silero VAD network at 8 kHz in C (_silero.h), as a Python
 * type.  Network(*weights) takes the model file's arrays (sileronet.py reads them) and
 * window(input, state) runs one window.  The GIL is kept: a window takes tens of
 * microseconds, less than handing the GIL to another thread and back would cost. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#include "_silero.h"

typedef struct {
    PyObject_HEAD
    silero_weights *weights;
} Network;

/* The arrays Network() takes, in order, and their sizes in floats. */
static const Py_ssize_t sizes[] = {
    2 * SILERO_BINS * SILERO_TAPS,         /* stft.forward_basis_buffer (130, 1, 128) */
    128 * SILERO_BINS * 3, 128,            /* encoder.0 (128, 65, 3), bias */
    64 * 128 * 3, 64,                      /* encoder.1 (64, 128, 3) */
    64 * 64 * 3, 64,                       /* encoder.2 (64, 64, 3) */
    128 * 64 * 3, 128,                     /* encoder.3 (128, 64, 3) */
    4 * SILERO_UNITS * SILERO_UNITS,       /* decoder.rnn.weight_ih (512, 128) */
    4 * SILERO_UNITS * SILERO_UNITS,       /* decoder.rnn.weight_hh (512, 128) */
    4 * SILERO_UNITS, 4 * SILERO_UNITS,    /* bias_ih, bias_hh */
    SILERO_UNITS, 1,                       /* decoder.decoder.2 weight (1, 128, 1), bias */
};
#define ARRAYS ((Py_ssize_t)(sizeof sizes / sizeof sizes[0]))

/* A conv1d weight (cout, cin, 3) as [in][tap][out]. */
static void conv_weights(float *dst, const float *src, int cout, int cin) {
    for (int o = 0; o < cout; o++)
        for (int i = 0; i < cin; i++)
            for (int k = 0; k < 3; k++)
                dst[((size_t)i * 3 + (size_t)k) * (size_t)cout + (size_t)o] =
                    src[((size_t)o * (size_t)cin + (size_t)i) * 3 + (size_t)k];
}

/* A (rows, cols) matrix as (cols, rows). */
static void transpose(float *dst, const float *src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)c * (size_t)rows + (size_t)r] = src[(size_t)r * (size_t)cols + (size_t)c];
}

static void load(silero_weights *w, const float *const *a) {
    transpose(w->basis, a[0], 2 * SILERO_BINS, SILERO_TAPS);
    conv_weights(w->w0, a[1], 128, SILERO_BINS);
    memcpy(w->b0, a[2], sizeof w->b0);
    conv_weights(w->w1, a[3], 64, 128);
    memcpy(w->b1, a[4], sizeof w->b1);
    conv_weights(w->w2, a[5], 64, 64);
    memcpy(w->b2, a[6], sizeof w->b2);
    conv_weights(w->w3, a[7], 128, 64);
    memcpy(w->b3, a[8], sizeof w->b3);
    transpose(w->wih, a[9], 4 * SILERO_UNITS, SILERO_UNITS);
    transpose(w->whh, a[10], 4 * SILERO_UNITS, SILERO_UNITS);
    for (int r = 0; r < 4 * SILERO_UNITS; r++)
        w->bias[r] = a[11][r] + a[12][r];
    memcpy(w->wout, a[13], sizeof w->wout);
    w->bout = a[14][0];
}

static int network_init(Network *self, PyObject *args, PyObject *kwds) {
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Network() takes no keyword arguments");
        return -1;
    }
    if (PyTuple_GET_SIZE(args) != ARRAYS) {
        PyErr_Format(PyExc_TypeError, "Network() takes %zd arrays", ARRAYS);
        return -1;
    }
    Py_buffer views[sizeof sizes / sizeof sizes[0]];
    const float *arrays[sizeof sizes / sizeof sizes[0]];
    Py_ssize_t got = 0;
    int ok = -1;
    for (; got < ARRAYS; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, got), &views[got],
                               PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto done;
        Py_buffer *v = &views[got];
        if (v->itemsize != sizeof(float) || v->format == NULL || strcmp(v->format, "f") != 0 ||
            v->len != sizes[got] * (Py_ssize_t)sizeof(float)) {
            PyErr_Format(PyExc_ValueError, "Network(): array %zd is not %zd float32", got,
                         sizes[got]);
            got++;
            goto done;
        }
        arrays[got] = (const float *)v->buf;
    }
    silero_weights *w = PyMem_Malloc(sizeof *w);
    if (w == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    load(w, arrays);
    PyMem_Free(self->weights);
    self->weights = w;
    ok = 0;
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    return ok;
}

static void network_dealloc(Network *self) {
    PyMem_Free(self->weights);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *network_window(Network *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "window(input, state) takes 2 arguments");
        return NULL;
    }
    if (self->weights == NULL) {
        PyErr_SetString(PyExc_ValueError, "window(): the network has no weights");
        return NULL;
    }
    Py_buffer input, state;
    if (PyObject_GetBuffer(args[0], &input, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &state, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) <
        0) {
        PyBuffer_Release(&input);
        return NULL;
    }
    PyObject *result = NULL;
    if (input.len != SILERO_INPUT * (Py_ssize_t)sizeof(float) || input.format == NULL ||
        strcmp(input.format, "f") != 0)
        PyErr_SetString(PyExc_ValueError, "window(): input is not 288 float32");
    else if (state.len != SILERO_STATE * (Py_ssize_t)sizeof(float) || state.format == NULL ||
             strcmp(state.format, "f") != 0)
        PyErr_SetString(PyExc_ValueError, "window(): state is not 256 float32");
    else
        result = PyFloat_FromDouble(
            (double)silero_window(self->weights, (const float *)input.buf, (float *)state.buf));
    PyBuffer_Release(&input);
    PyBuffer_Release(&state);
    return result;
}

static PyMethodDef network_methods[] = {
    {"window", (PyCFunction)(void (*)(void))network_window, METH_FASTCALL,
     "window(input, state) -> float: the probability that input's window (288 float32: "
     "32 of context, 256 new) is speech; state (256 float32: h, c) becomes the next."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NetworkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.media._silero.Network",
    .tp_basicsize = sizeof(Network),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Network(*arrays): the Silero VAD network at 8 kHz with the model file's weights.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)network_init,
    .tp_dealloc = (destructor)network_dealloc,
    .tp_methods = network_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "callhook.media._silero",
    "The Silero VAD network at 8 kHz in C (callhook/media/sileronet.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__silero(void) {
    if (PyType_Ready(&NetworkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&NetworkType);
    if (PyModule_AddObject(m, "Network", (PyObject *)&NetworkType) < 0) {
        Py_DECREF(&NetworkType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
