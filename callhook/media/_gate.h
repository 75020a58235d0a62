/* The C layout of a call's voice-activity detector (vad.py's VoiceActivityDetector
 * derives from GateCore, defined by _gate.c): shared with the media thread's receive
 * (edge/_rxpy.c), which copies the fields of the usual frame's path in and out. */
#ifndef CALLHOOK_MEDIA_GATE_H
#define CALLHOOK_MEDIA_GATE_H

#include <Python.h>

typedef struct {
    PyObject_HEAD
    PyObject *model;   /* None: the energy detector alone (not taken here) */
    PyObject *preroll; /* deque of frames kept while the gate is closed */
    PyObject *blocks;  /* deque of the last blocks' minimum powers (the noise floor) */
    long long run;
    long long gate_quiet;
    long long closed_for;
    long long block_count;
    long long hangover_frames;
    long long block_frames;   /* BLOCK_FRAMES */
    long long closed_long;    /* PREROLL + 1: "closed long ago" */
    double block_min;
    double history_floor;
    double margin;
    double min_power;
    double start_power;
    double gain_floor;
    double hold;    /* the gate's lower threshold while open, as a factor */
    double release; /* while active, a frame must be this far over the floor's threshold */
    char model_holds;
    char paused;
    char active;
    char gate;
    char prior;
    char says_speech;
} GateCore;

/* callhook.media._gate's GateCore type: the type, or NULL with an exception (the module
 * is missing, or was built from another layout than this header's). A new reference. */
static inline PyTypeObject *import_gate_type(void) {
    PyObject *module = PyImport_ImportModule("callhook.media._gate");
    if (module == NULL)
        return NULL;
    PyObject *type = PyObject_GetAttrString(module, "GateCore");
    Py_DECREF(module);
    if (type == NULL)
        return NULL;
    if (!PyType_Check(type) ||
        ((PyTypeObject *)type)->tp_basicsize != (Py_ssize_t)sizeof(GateCore)) {
        Py_DECREF(type);
        PyErr_SetString(PyExc_ImportError,
                        "callhook.media._gate was built from another layout: rebuild");
        return NULL;
    }
    return (PyTypeObject *)type;
}

#endif
