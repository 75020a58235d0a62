/* A caller's pre-roll, the last frames it sent, as a ring in C: part of
 * callhook.media._inlet (built with _inlet.c, which adds the type to the module and
 * whose usual packet pushes into it: see _preroll.h).  Sans-IO.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_preroll.h"

static int Preroll_init(Preroll *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"maxlen", NULL};
    Py_ssize_t maxlen;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", keywords, &maxlen))
        return -1;
    if (maxlen <= 0 || self->payloads != NULL) {
        PyErr_SetString(PyExc_ValueError, "Preroll(maxlen): maxlen > 0, set once");
        return -1;
    }
    self->timestamps = PyMem_Calloc((size_t)maxlen, sizeof(long long));
    self->payloads = PyMem_Calloc((size_t)maxlen, sizeof(PyObject *));
    if (self->timestamps == NULL || self->payloads == NULL) {
        PyMem_Free(self->timestamps);
        PyMem_Free(self->payloads);
        self->timestamps = NULL;
        self->payloads = NULL;
        PyErr_NoMemory();
        return -1;
    }
    self->maxlen = maxlen;
    return 0;
}

static void Preroll_drop(Preroll *self) {
    for (Py_ssize_t i = 0; i < self->size; i++)
        Py_CLEAR(self->payloads[(self->head + i) % self->maxlen]);
    self->head = 0;
    self->size = 0;
}

static void Preroll_dealloc(Preroll *self) {
    if (self->payloads != NULL)
        Preroll_drop(self);
    PyMem_Free(self->timestamps);
    PyMem_Free(self->payloads);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

void callhook_preroll_push(Preroll *self, long long timestamp, PyObject *payload) {
    Py_ssize_t slot;
    PyObject *old = NULL;
    if (self->size == self->maxlen) {
        slot = self->head;
        old = self->payloads[slot];
        self->head = (self->head + 1) % self->maxlen;
    } else {
        slot = (self->head + self->size) % self->maxlen;
        self->size += 1;
    }
    Py_INCREF(payload);
    self->payloads[slot] = payload;
    self->timestamps[slot] = timestamp;
    Py_XDECREF(old); /* last: bytes run no code when freed, but the ring is whole */
}

static int check_ready(Preroll *self) {
    if (self->payloads == NULL) {
        PyErr_SetString(PyExc_ValueError, "Preroll was not initialised");
        return -1;
    }
    return 0;
}

static PyObject *Preroll_append(Preroll *self, PyObject *item) {
    if (check_ready(self) < 0)
        return NULL;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
        !PyLong_Check(PyTuple_GET_ITEM(item, 0)) ||
        !PyObject_CheckBuffer(PyTuple_GET_ITEM(item, 1))) {
        PyErr_SetString(PyExc_TypeError, "Preroll.append((timestamp: int, payload: bytes))");
        return NULL;
    }
    long long timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
    if (timestamp == -1 && PyErr_Occurred())
        return NULL;
    /* Kept as exact bytes (a bytearray or a view is copied): they refer to nothing. */
    PyObject *payload = PyTuple_GET_ITEM(item, 1);
    if (PyBytes_CheckExact(payload))
        Py_INCREF(payload);
    else if ((payload = PyBytes_FromObject(payload)) == NULL)
        return NULL;
    callhook_preroll_push(self, timestamp, payload);
    Py_DECREF(payload);
    Py_RETURN_NONE;
}

static PyObject *Preroll_clear(Preroll *self, PyObject *Py_UNUSED(ignored)) {
    if (self->payloads != NULL)
        Preroll_drop(self);
    Py_RETURN_NONE;
}

/* The frames as a list of (timestamp, payload), oldest first. */
static PyObject *Preroll_list(Preroll *self) {
    PyObject *list = PyList_New(self->size);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->size; i++) {
        Py_ssize_t slot = (self->head + i) % self->maxlen;
        PyObject *timestamp = PyLong_FromLongLong(self->timestamps[slot]);
        PyObject *item = timestamp == NULL ? NULL : PyTuple_Pack(2, timestamp,
                                                                 self->payloads[slot]);
        Py_XDECREF(timestamp);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyObject *Preroll_iter(Preroll *self) {
    PyObject *list = Preroll_list(self);
    if (list == NULL)
        return NULL;
    PyObject *it = PyObject_GetIter(list); /* a snapshot: appending meanwhile is safe */
    Py_DECREF(list);
    return it;
}

static Py_ssize_t Preroll_len(Preroll *self) {
    return self->size;
}

static PySequenceMethods Preroll_sequence = {
    .sq_length = (lenfunc)Preroll_len,
};

static PyMethodDef Preroll_methods[] = {
    {"append", (PyCFunction)Preroll_append, METH_O,
     "append((timestamp, payload)): add a frame; the oldest goes when full."},
    {"clear", (PyCFunction)Preroll_clear, METH_NOARGS, "clear(): no frames."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Preroll_members[] = {
    {"maxlen", T_PYSSIZET, offsetof(Preroll, maxlen), READONLY, "the most frames kept"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject callhook_PrerollType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.media._inlet.Preroll",
    .tp_doc = "Preroll(maxlen): the last frames a caller sent, (timestamp, payload), oldest "
              "first: a bounded deque kept in C.",
    .tp_basicsize = sizeof(Preroll),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Preroll_init,
    .tp_dealloc = (destructor)Preroll_dealloc,
    .tp_as_sequence = &Preroll_sequence,
    .tp_iter = (getiterfunc)Preroll_iter,
    .tp_methods = Preroll_methods,
    .tp_members = Preroll_members,
};
