/* Every conference room's mix of a media tick in C: callhook.media._mixing.  Sans-IO.
 *
 * mixing.py's mix() gives each participant of a room the sum of the room's mixed rows less
 * its own, saturated to 16 bits, in numpy, one room at a time.  mix_rooms() does every room
 * of the tick in one call: the rooms' participants are consecutive rows of one array,
 * `bounds` says where each room's rows begin and end.  The sums are of int16 samples in a
 * 32-bit integer (exact for up to 65536 rows), so the answer is mix()'s to the bit
 * (tests/unit/media/test_mixing.py compares the two on random rooms).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define FRAME 160

static int16_t saturate(int32_t value) {
    if (value > INT16_MAX)
        return INT16_MAX;
    if (value < INT16_MIN)
        return INT16_MIN;
    return (int16_t)value;
}

/* mix_rooms(frames, mixed, bounds, out) -> None: see the module method's doc. */
static PyObject *mix_rooms(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "mix_rooms(frames, mixed, bounds, out) takes 4 arguments");
        return NULL;
    }
    Py_buffer frames = {0}, mixed = {0}, bounds = {0}, out = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &frames, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &mixed, PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (PyObject_GetBuffer(args[2], &bounds, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto done;
    if (PyObject_GetBuffer(args[3], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (frames.itemsize != sizeof(int16_t) || frames.len % (FRAME * sizeof(int16_t)) != 0) {
        PyErr_SetString(PyExc_ValueError, "mix_rooms: frames are not rows of 160 int16 samples");
        goto done;
    }
    Py_ssize_t rows = frames.len / (Py_ssize_t)(FRAME * sizeof(int16_t));
    if (mixed.len != rows || mixed.itemsize != 1) {
        PyErr_SetString(PyExc_ValueError, "mix_rooms: not one mixed flag (a byte) a row");
        goto done;
    }
    if (out.len != frames.len || out.itemsize != sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "mix_rooms: out is not the frames' shape in int16");
        goto done;
    }
    if (bounds.itemsize != sizeof(int64_t) || bounds.len < (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "mix_rooms: bounds are not int64, first row first");
        goto done;
    }
    const int16_t *in = (const int16_t *)frames.buf;
    const unsigned char *use = (const unsigned char *)mixed.buf;
    const int64_t *edge = (const int64_t *)bounds.buf;
    Py_ssize_t rooms = bounds.len / (Py_ssize_t)sizeof(int64_t) - 1;
    int16_t *heard = (int16_t *)out.buf;
    /* Checked whole first: a bad bound writes nothing. */
    if (edge[0] != 0 || edge[rooms] != rows) {
        PyErr_SetString(PyExc_ValueError, "mix_rooms: bounds do not run from 0 to the rows");
        goto done;
    }
    for (Py_ssize_t r = 0; r < rooms; r++) {
        if (edge[r + 1] < edge[r]) {
            PyErr_SetString(PyExc_ValueError, "mix_rooms: bounds go back");
            goto done;
        }
    }
    for (Py_ssize_t r = 0; r < rooms; r++) {
        int32_t total[FRAME] = {0};
        for (int64_t i = edge[r]; i < edge[r + 1]; i++) {
            if (!use[i])
                continue;
            const int16_t *row = in + i * FRAME;
            for (int k = 0; k < FRAME; k++)
                total[k] += row[k];
        }
        for (int64_t i = edge[r]; i < edge[r + 1]; i++) {
            const int16_t *row = in + i * FRAME;
            int16_t *to = heard + i * FRAME;
            if (use[i]) {
                for (int k = 0; k < FRAME; k++)
                    to[k] = saturate(total[k] - row[k]);
            } else {
                for (int k = 0; k < FRAME; k++)
                    to[k] = saturate(total[k]);
            }
        }
    }
    result = Py_NewRef(Py_None);
done:
    if (frames.obj != NULL)
        PyBuffer_Release(&frames);
    if (mixed.obj != NULL)
        PyBuffer_Release(&mixed);
    if (bounds.obj != NULL)
        PyBuffer_Release(&bounds);
    if (out.obj != NULL)
        PyBuffer_Release(&out);
    return result;
}

static PyMethodDef module_methods[] = {
    {"mix_rooms", (PyCFunction)(void (*)(void))mix_rooms, METH_FASTCALL,
     "mix_rooms(frames, mixed, bounds, out) -> None: `frames` holds a row of 160 int16 "
     "samples a participant, every room's participants consecutive; room r's rows are "
     "bounds[r] to bounds[r+1] (int64, from 0 to the rows); `mixed` a byte a row (not 0: "
     "in its room's sum).  Row i of `out` gets its room's sum less row i where it is in "
     "it, saturated to 16 bits: mixing.py's mix(), every room at once."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.media._mixing",
    .m_doc = "Every conference room's mix of a media tick (see mixing.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__mixing(void) { return PyModule_Create(&module); }
