/* A call's usual frame through the voice-activity gate in C: callhook.media._gate.  Sans-IO.
 *
 * What this is for: every call's received frame goes through its voice-activity
 * detector every 20 ms (callhook/media/vad.py), to track the noise floor even while
 * nothing listens.  Almost every frame is the usual one: the detector paused (a
 * prompt, digit entry), listening to a quiet line with its gate closed, or in an
 * utterance the model confirmed, which the energy holds (no model run).  In Python
 * that frame cost MediaSession.detect, VoiceActivityDetector.feed and its _gated and
 * _edge: a tenth of a loaded serve's CPU (profiled at 200 calls, issue 19).  Here the
 * detector's fields live in a C struct that is the base of the Python class
 * (VoiceActivityDetector derives from GateCore), and feed_all() takes the usual frame
 * of every call of a media tick in one call.  Whether a session hears its frames with
 * its detector alone is read from the session's struct (_inlet.h).
 *
 * The rule, as in _inlet.c: a frame is taken only when every condition of that path in
 * Python holds (no model run, no edge, no gain to judge: a frame that completes a block
 * of the noise floor is taken too, the floor moved as Python moves it), and then
 * exactly what Python would change is changed; any other frame is
 * left to Python, untouched (tests/unit/media/test_gate.py compares the two field by field).
 * vad.py is the reference: a change to its feed() is made here too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_inlet.h"
#include "_gate.h"

static int GateCore_traverse(GateCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->model);
    Py_VISIT(self->preroll);
    Py_VISIT(self->blocks);
    return 0;
}

static int GateCore_clear(GateCore *self) {
    Py_CLEAR(self->model);
    Py_CLEAR(self->preroll);
    Py_CLEAR(self->blocks);
    return 0;
}

static void GateCore_dealloc(GateCore *self) {
    PyObject_GC_UnTrack(self);
    GateCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef GateCore_members[] = {
    {"model", T_OBJECT, offsetof(GateCore, model), 0, "the speech model, or None"},
    {"_preroll", T_OBJECT, offsetof(GateCore, preroll), 0, NULL},
    {"_blocks", T_OBJECT, offsetof(GateCore, blocks), 0, NULL},
    {"_run", T_LONGLONG, offsetof(GateCore, run), 0, NULL},
    {"_gate_quiet", T_LONGLONG, offsetof(GateCore, gate_quiet), 0, NULL},
    {"_closed_for", T_LONGLONG, offsetof(GateCore, closed_for), 0, NULL},
    {"_block_count", T_LONGLONG, offsetof(GateCore, block_count), 0, NULL},
    {"hangover_frames", T_LONGLONG, offsetof(GateCore, hangover_frames), 0, "release after"},
    {"_block_frames", T_LONGLONG, offsetof(GateCore, block_frames), 0, NULL},
    {"_closed_long", T_LONGLONG, offsetof(GateCore, closed_long), 0, NULL},
    {"_block_min", T_DOUBLE, offsetof(GateCore, block_min), 0, NULL},
    {"_history_floor", T_DOUBLE, offsetof(GateCore, history_floor), 0, NULL},
    {"_margin", T_DOUBLE, offsetof(GateCore, margin), 0, NULL},
    {"_min_power", T_DOUBLE, offsetof(GateCore, min_power), 0, NULL},
    {"_start_power", T_DOUBLE, offsetof(GateCore, start_power), 0, NULL},
    {"_gain_floor", T_DOUBLE, offsetof(GateCore, gain_floor), 0, NULL},
    {"_hold", T_DOUBLE, offsetof(GateCore, hold), 0, NULL},
    {"_release", T_DOUBLE, offsetof(GateCore, release), 0, NULL},
    {"model_holds", T_BOOL, offsetof(GateCore, model_holds), 0, "the model ends utterances"},
    {"paused", T_BOOL, offsetof(GateCore, paused), 0, "the model rests (nothing listens)"},
    {"_active", T_BOOL, offsetof(GateCore, active), 0, NULL},
    {"_gate", T_BOOL, offsetof(GateCore, gate), 0, NULL},
    {"_prior", T_BOOL, offsetof(GateCore, prior), 0, NULL},
    {"_says_speech", T_BOOL, offsetof(GateCore, says_speech), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};


static PyObject *copy_name, *append_name, *clear_name, *maxlen_name;
static InletTypes types; /* the session's C layout (_inlet.h) */

/* The floor of the blocks once `block_min` joins them (vad.py's feed(): the blocks
 * without the oldest when full, or none while the prior stands, and `block_min`): 0 and
 * *floor set, or -1 with an exception.  Only reads; self->blocks is set. */
static int next_floor(GateCore *self, double block_min, double *floor) {
    *floor = block_min;
    if (self->prior)
        return 0; /* the prior is cleared: the new block alone */
    PyObject *bound = PyObject_GetAttr(self->blocks, maxlen_name);
    if (bound == NULL)
        return -1;
    Py_ssize_t maxlen = bound == Py_None ? -1 : PyLong_AsSsize_t(bound);
    Py_DECREF(bound);
    if (maxlen == -1 && PyErr_Occurred())
        return -1;
    Py_ssize_t size = PyObject_Length(self->blocks);
    if (size < 0)
        return -1;
    /* Appending to a full deque drops its oldest: the first one is not counted. */
    Py_ssize_t skip = maxlen >= 0 && size >= maxlen ? size - maxlen + 1 : 0;
    PyObject *it = PyObject_GetIter(self->blocks);
    if (it == NULL)
        return -1;
    PyObject *item;
    for (Py_ssize_t i = 0; (item = PyIter_Next(it)) != NULL; i++) {
        double value = PyFloat_AsDouble(item);
        Py_DECREF(item);
        if (value == -1.0 && PyErr_Occurred()) {
            Py_DECREF(it);
            return -1;
        }
        if (i >= skip && value < *floor)
            *floor = value;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* The block completed, as feed() ends it: the prior cleared (once), the block's
 * minimum `value` (made beforehand) among the blocks, the floor `floor` (next_floor's),
 * a new block begun.  0, or -1 with an exception: only if a deque finds no memory for
 * a new block of its own (it keeps spare ones), the blocks then cleared or not. */
static int complete_block(GateCore *self, PyObject *value, double floor) {
    if (self->prior) {
        PyObject *done = PyObject_CallMethodNoArgs(self->blocks, clear_name);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
    }
    PyObject *done = PyObject_CallMethodOneArg(self->blocks, append_name, value);
    if (done == NULL)
        return -1; /* (the prior stands: Python's feed() clears them again) */
    Py_DECREF(done);
    self->prior = 0;
    self->history_floor = floor;
    self->block_min = Py_HUGE_VAL;
    self->block_count = 0;
    return 0;
}

/* vad.py's feed(frame, power) when it returns None with no model run: 1 taken, 0 left
 * to Python (nothing changed), -1 an exception (nothing changed but in the case
 * complete_block() says). Every object is made before anything changes. */
static int feed(GateCore *self, PyObject *frame, double power) {
    if (self->model == NULL || self->model == Py_None)
        return 0; /* the energy detector alone */
    Py_ssize_t size = PyObject_Length(frame);
    if (size <= 0) {
        if (size < 0)
            return -1;
        return 0; /* no audio: Python's feed() says nothing either */
    }
    /* The noise floor (feed()): this frame's floor is the blocks' and this block's so
     * far; a frame that completes a block moves the blocks' floor, and ends the prior. */
    double block_min = power < self->block_min ? power : self->block_min;
    long long block_count = self->block_count + 1;
    double floor = self->history_floor < block_min ? self->history_floor : block_min;
    int completes = block_count >= self->block_frames;
    double history_floor = self->history_floor;
    char prior = self->prior;
    PyObject *block = NULL, *copy = NULL; /* the completed block's minimum; the pre-roll's */
    int result = 0;
    if (completes) {
        if (self->blocks == NULL)
            return 0; /* Python's feed() meets it */
        if (next_floor(self, block_min, &history_floor) < 0)
            return -1;
        prior = 0;
        block = PyFloat_FromDouble(block_min);
        if (block == NULL)
            return -1;
    }
    /* What the frame changes of the floor, once it is taken. */
#define TAKE_FLOOR()                                                        \
    do {                                                                    \
        if (completes) {                                                    \
            if (complete_block(self, block, history_floor) < 0) {           \
                result = -1;                                                \
                goto out;                                                   \
            }                                                               \
        } else {                                                            \
            self->block_min = block_min;                                    \
            self->block_count = block_count;                                \
        }                                                                   \
    } while (0)
    if (self->paused) {
        /* _gated(): no speech; _edge(False): a hangover frame, or none. */
        long long run = self->active ? self->run + 1 : 0;
        if (self->active && run >= self->hangover_frames)
            goto out; /* activity ends: an edge, and the model is reset */
        TAKE_FLOOR();
        self->gate = 0;
        self->closed_for = self->closed_long;
        self->run = run;
        result = 1;
        goto out;
    }
    double minimum = prior ? self->start_power : self->min_power;
    double threshold = floor * self->margin;
    if (minimum > threshold)
        threshold = minimum;
    if (self->gate && self->active && !self->model_holds) {
        /* An utterance the model confirmed, held by the energy (_gated(), no model run). */
        double open = threshold * self->hold;
        int loud = power > (self->min_power > open ? self->min_power : open);
        long long gate_quiet = loud ? 0 : self->gate_quiet + 1;
        if (gate_quiet >= self->hangover_frames)
            goto out; /* the gate closes: Python's (vad.py, _gated: the utterance ends) */
        double keep = threshold * self->release;
        int speech = loud && power > (self->min_power > keep ? self->min_power : keep);
        long long run = speech ? 0 : self->run + 1;
        if (run >= self->hangover_frames)
            goto out; /* the utterance ends: an edge, and the model is reset */
        TAKE_FLOOR();
        self->gate_quiet = gate_quiet;
        self->run = run;
        result = 1;
        goto out;
    }
    if (self->gate || self->active)
        goto out;
    if (power > threshold)
        goto out; /* loud: the gate opens */
    /* _follow_floor() (after the floor moved) must have nothing to do. */
    if (!(prior || self->says_speech || self->run || history_floor == self->gain_floor))
        goto out;
    /* The gate stays closed: the frame joins its pre-roll (a copy: the buffer is shared). */
    if (self->preroll == NULL)
        goto out;
    copy = PyObject_CallMethodNoArgs(frame, copy_name);
    if (copy == NULL) {
        result = -1;
        goto out;
    }
    TAKE_FLOOR();
    PyObject *done = PyObject_CallMethodOneArg(self->preroll, append_name, copy);
    if (done == NULL) {
        result = -1; /* (as complete_block(): a deque with no memory for a block) */
        goto out;
    }
    Py_DECREF(done);
    self->closed_for += 1;
    self->run = 0;
    result = 1;
out:
    Py_XDECREF(block);
    Py_XDECREF(copy);
    return result;
#undef TAKE_FLOOR
}

static PyObject *GateCore_feed_usual(GateCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "feed_usual(frame, power) takes 2 arguments");
        return NULL;
    }
    if (args[1] == Py_None)
        Py_RETURN_FALSE; /* not measured: feed() measures it */
    double power = PyFloat_AsDouble(args[1]);
    if (power == -1.0 && PyErr_Occurred())
        return NULL;
    int taken = feed(self, args[0], power);
    if (taken < 0)
        return NULL;
    return PyBool_FromLong(taken);
}

static PyMethodDef GateCore_methods[] = {
    {"feed_usual", (PyCFunction)(void (*)(void))GateCore_feed_usual, METH_FASTCALL,
     "feed_usual(frame, power) -> bool: feed() of a frame that changes no edge and runs "
     "no model, taken; False and nothing changed for any other frame."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GateCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.media._gate.GateCore",
    .tp_doc = "The fields of VoiceActivityDetector that the usual frame reads or changes, in C.",
    .tp_basicsize = sizeof(GateCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)GateCore_dealloc,
    .tp_traverse = (traverseproc)GateCore_traverse,
    .tp_clear = (inquiry)GateCore_clear,
    .tp_members = GateCore_members,
    .tp_methods = GateCore_methods,
};

/* Whether `session` hears its frames with its detector alone (session.py's detect()):
 * 1 yes (*vad a new reference to its detector), 0 no or another class (Python's
 * detect() runs). */
static int alone(PyObject *object, PyObject **vad) {
    if (!PyObject_TypeCheck(object, types.inlet))
        return 0;
    Inlet *session = (Inlet *)object;
    if (!IS_NONE(session->tones) || !IS_NONE(session->transcriber) ||
        !IS_NONE(session->meter) || !IS_NONE(session->classifier) || session->recognising)
        return 0;
    if (session->vad == NULL || !PyObject_TypeCheck(session->vad, &GateCoreType))
        return 0;
    Py_INCREF(session->vad);
    *vad = session->vad;
    return 1;
}

static PyObject *feed_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[0]) || !PyList_Check(args[1]) ||
        !PyList_Check(args[2]) || PyList_GET_SIZE(args[1]) != PyList_GET_SIZE(args[0]) ||
        PyList_GET_SIZE(args[2]) != PyList_GET_SIZE(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "feed_all(sessions, frames, powers) takes 3 lists of one length");
        return NULL;
    }
    PyObject *sessions = args[0], *frames = args[1], *powers = args[2];
    PyObject *rest = PyList_New(0);
    if (rest == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sessions); i++) {
        PyObject *vad = NULL;
        int taken = alone(PyList_GET_ITEM(sessions, i), &vad);
        if (taken > 0) {
            double power = PyFloat_AsDouble(PyList_GET_ITEM(powers, i));
            if (power == -1.0 && PyErr_Occurred())
                taken = -1;
            else
                taken = feed((GateCore *)vad, PyList_GET_ITEM(frames, i), power);
        }
        Py_XDECREF(vad);
        if (taken < 0) {
            /* Python's detect() of that frame meets the same cause and reports it. */
            PyErr_Clear();
            taken = 0;
        }
        if (!taken) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(rest, index) < 0) {
                Py_XDECREF(index);
                Py_DECREF(rest);
                return NULL;
            }
            Py_DECREF(index);
        }
    }
    return rest;
}

/* gather()'s loop body: one session's held frames (`held`, its list) into the lists.
 * 1 taken, 0 none to take, or -1 with an exception and the session's frames still held. */
static int take(PyObject *session, PyObject *held, PyObject *picked, PyObject *payloads,
                PyObject *counts) {
    Py_ssize_t count = PyList_GET_SIZE(held), row = PyList_GET_SIZE(payloads);
    if (count == 0)
        return 0;
    PyObject *n = PyLong_FromSsize_t(count);
    if (n == NULL || PyList_Append(picked, session) < 0 || PyList_Append(counts, n) < 0 ||
        PyList_SetSlice(payloads, row, row, held) < 0) {
        Py_XDECREF(n);
        return -1;
    }
    Py_DECREF(n);
    /* Emptied in place (a new list each tick is young garbage to collect): the frames
     * taken are held by `payloads` now, so no code runs; any added since stay. */
    return PyList_SetSlice(held, 0, count, NULL) < 0 ? -1 : 1;
}

/* gate.py's gather_python, the reference: step 2's frames of one law, taken out of
 * every session that holds some. */
static PyObject *gather(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "gather(sessions: list, law: str) takes 2 arguments");
        return NULL;
    }
    PyObject *sessions = args[0], *law = args[1];
    PyObject *picked = PyList_New(0), *payloads = PyList_New(0), *counts = PyList_New(0);
    int tones = 0;
    if (picked == NULL || payloads == NULL || counts == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sessions); i++) {
        PyObject *object = PyList_GET_ITEM(sessions, i);
        if (!PyObject_TypeCheck(object, types.inlet)) {
            PyErr_SetString(PyExc_TypeError, "gather: a session that is not a MediaSession");
            goto error;
        }
        Inlet *session = (Inlet *)object;
        PyObject *held = session->undetected;
        if (held == NULL || !PyList_Check(held) || PyList_GET_SIZE(held) == 0)
            continue;
        if (session->law != law) {
            int same = session->law == NULL ? 0 : PyObject_RichCompareBool(session->law, law, Py_EQ);
            if (same < 0)
                goto error;
            if (!same)
                continue;
        }
        /* Strong references while it is taken: a collection the allocations start may
         * run Python code. */
        Py_INCREF(object);
        Py_INCREF(held);
        int taken = take(object, held, picked, payloads, counts);
        if (taken > 0 && !IS_NONE(session->tones))
            tones = 1;
        Py_DECREF(held);
        Py_DECREF(object);
        if (taken < 0)
            goto error;
    }
    PyObject *result =
        Py_BuildValue("(OOOO)", picked, payloads, counts, tones ? Py_True : Py_False);
    Py_DECREF(picked);
    Py_DECREF(payloads);
    Py_DECREF(counts);
    return result;
error:
    Py_XDECREF(picked);
    Py_XDECREF(payloads);
    Py_XDECREF(counts);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "gather(sessions, law) -> (picked, payloads, counts, tones): the frames the "
     "sessions of `law` hold for detection (each one's taken out), as gate.py's "
     "gather_python gives them."},
    {"feed_all", (PyCFunction)(void (*)(void))feed_all, METH_FASTCALL,
     "feed_all(sessions, frames, powers) -> [index]: each session's one frame of the "
     "tick taken (GateCore.feed_usual) where the session hears it with its detector "
     "alone; the positions of the others, for Python's MediaSession.detect."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.media._gate",
    .m_doc = "A call's usual frame through the voice-activity gate in C (see gate.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__gate(void) {
    copy_name = PyUnicode_InternFromString("copy");
    append_name = PyUnicode_InternFromString("append");
    clear_name = PyUnicode_InternFromString("clear");
    maxlen_name = PyUnicode_InternFromString("maxlen");
    if (!copy_name || !append_name || !clear_name || !maxlen_name ||
        import_inlet_types(&types) < 0)
        return NULL;
    if (PyType_Ready(&GateCoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&GateCoreType);
    if (PyModule_AddObject(m, "GateCore", (PyObject *)&GateCoreType) < 0) {
        Py_DECREF(&GateCoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
