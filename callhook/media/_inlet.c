/* A call's usual RTP packet taken in C: callhook.media._inlet.  Sans-IO.
 *
 * (Past 600 lines: its member tables list MediaSession's and RtpReceiver's fields one by
 * one, as _inlet.h lays them out; docs/architecture.md, "Where C replaces Python".)
 *
 * What this is for: every call receives 50 RTP packets a second, and almost all of
 * them are the usual packet: from the peer the call is latched to, plain RTP (no
 * SRTP), the call's codec, the next sequence number of the current source.  In
 * Python that packet cost about a seventh of a loaded serve's CPU
 * (MediaSession.receive and RtpReceiver.feed_next, profiled at 200 calls, issue 19),
 * most of it the interpreter's own work on a dozen fields.  Here the fields live in
 * C structs that are the bases of the Python classes (MediaSession derives from
 * Inlet, RtpReceiver from ReceiverCore): Python reads and writes them as ordinary
 * attributes, and take_all() takes the usual packets of a whole media tick in one
 * call, touching no Python code at all.  A caller's recording in its usual step (the
 * next frame of its timeline, the call's law, a file not due to be written) takes the
 * frame here too; any other step of it, and a bridge, go through session.py's _audio.
 *
 * The rule: take_all() takes a packet only when every condition of the fast path
 * in Python (session.py's receive(), rtp.py's feed_next()) holds, and then changes
 * exactly what Python would change, in the same order of floating-point operations
 * (tests/unit/media/test_inlet.py compares the two, field by field).  Any other packet is
 * left for Python, untouched.  The Python classes are the reference: a change to
 * their fast path must be made here too.  Without this module (no C compiler),
 * callhook/media/inlet.py gives plain Python bases and take_all takes nothing.
 *
 * The session's struct is in _inlet.h (shared with _outlet.c and _gate.c); the
 * pre-roll's ring, built into this module, in _preroll.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_inlet.h"
#include "_preroll.h"

#define PLAIN_HEADER 12

/* ---------------------------------------------------------------- ReceiverCore */

static int ReceiverCore_traverse(ReceiverCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->ssrc);
    Py_VISIT(self->held);
    Py_VISIT(self->candidates);
    return 0;
}

static int ReceiverCore_clear(ReceiverCore *self) {
    Py_CLEAR(self->ssrc);
    Py_CLEAR(self->held);
    Py_CLEAR(self->candidates);
    return 0;
}

static void ReceiverCore_dealloc(ReceiverCore *self) {
    PyObject_GC_UnTrack(self);
    ReceiverCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef ReceiverCore_members[] = {
    {"ssrc", T_OBJECT, offsetof(ReceiverCore, ssrc), 0, "the current source (None: none yet)"},
    {"_held", T_OBJECT, offsetof(ReceiverCore, held), 0, NULL},
    {"_candidates", T_OBJECT, offsetof(ReceiverCore, candidates), 0, NULL},
    {"received", T_LONGLONG, offsetof(ReceiverCore, counts.received), 0, "packets received (A.1)"},
    {"_max_seq", T_LONGLONG, offsetof(ReceiverCore, counts.max_seq), 0, NULL},
    {"_cycles", T_LONGLONG, offsetof(ReceiverCore, counts.cycles), 0, NULL},
    {"_next", T_LONGLONG, offsetof(ReceiverCore, counts.next), 0, NULL},
    {"_last_ts", T_LONGLONG, offsetof(ReceiverCore, counts.last_ts), 0, NULL},
    {"_history", T_ULONGLONG, offsetof(ReceiverCore, counts.history), 0, NULL},
    {"clock_rate", T_LONGLONG, offsetof(ReceiverCore, counts.clock_rate), 0, "RTP clock (Hz)"},
    {"_jitter", T_DOUBLE, offsetof(ReceiverCore, counts.jitter), 0, NULL},
    {"_last_arrival", T_DOUBLE, offsetof(ReceiverCore, counts.last_arrival), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ReceiverCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.media._inlet.ReceiverCore",
    .tp_doc = "The fields of RtpReceiver that the usual packet changes, in C.",
    .tp_basicsize = sizeof(ReceiverCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)ReceiverCore_dealloc,
    .tp_traverse = (traverseproc)ReceiverCore_traverse,
    .tp_clear = (inquiry)ReceiverCore_clear,
    .tp_members = ReceiverCore_members,
};

/* ----------------------------------------------------------------------- Inlet */

static int Inlet_traverse(Inlet *self, visitproc visit, void *arg) {
    Py_VISIT(self->remote);
    Py_VISIT(self->srtp);
    Py_VISIT(self->receiver);
    Py_VISIT(self->rtp_since);
    Py_VISIT(self->tells);
    Py_VISIT(self->call_recording);
    Py_VISIT(self->recording);
    Py_VISIT(self->preroll);
    Py_VISIT(self->undetected);
    Py_VISIT(self->law);
    Py_VISIT(self->hears);
    Py_VISIT(self->transcriber);
    Py_VISIT(self->tones);
    Py_VISIT(self->meter);
    Py_VISIT(self->classifier);
    Py_VISIT(self->vad);
    Py_VISIT(self->sender);
    Py_VISIT(self->player);
    Py_VISIT(self->reports);
    Py_VISIT(self->events);
    Py_VISIT(self->utterances);
    Py_VISIT(self->seen_source);
    Py_VISIT(self->seen_remote);
    return 0;
}

static int Inlet_clear(Inlet *self) {
    Py_CLEAR(self->remote);
    Py_CLEAR(self->srtp);
    Py_CLEAR(self->receiver);
    Py_CLEAR(self->rtp_since);
    Py_CLEAR(self->tells);
    Py_CLEAR(self->call_recording);
    Py_CLEAR(self->recording);
    Py_CLEAR(self->preroll);
    Py_CLEAR(self->undetected);
    Py_CLEAR(self->law);
    Py_CLEAR(self->hears);
    Py_CLEAR(self->transcriber);
    Py_CLEAR(self->tones);
    Py_CLEAR(self->meter);
    Py_CLEAR(self->classifier);
    Py_CLEAR(self->vad);
    Py_CLEAR(self->sender);
    Py_CLEAR(self->player);
    Py_CLEAR(self->reports);
    Py_CLEAR(self->events);
    Py_CLEAR(self->utterances);
    Py_CLEAR(self->seen_source);
    Py_CLEAR(self->seen_remote);
    return 0;
}

static void Inlet_dealloc(Inlet *self) {
    PyObject_GC_UnTrack(self);
    Inlet_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Inlet_members[] = {
    {"remote", T_OBJECT, offsetof(Inlet, remote), 0, "where the call's RTP goes"},
    {"srtp", T_OBJECT, offsetof(Inlet, srtp), 0, "the call's SRTP keys, or None"},
    {"receiver", T_OBJECT, offsetof(Inlet, receiver), 0, "the RtpReceiver"},
    {"_rtp_since", T_OBJECT, offsetof(Inlet, rtp_since), 0, NULL},
    {"tells", T_OBJECT, offsetof(Inlet, tells), 0, "a bridge's feed, or None"},
    {"_call_recording", T_OBJECT, offsetof(Inlet, call_recording), 0, NULL},
    {"_recording", T_OBJECT, offsetof(Inlet, recording), 0, NULL},
    {"_preroll", T_OBJECT, offsetof(Inlet, preroll), 0, NULL},
    {"undetected", T_OBJECT, offsetof(Inlet, undetected), 0, "payloads awaiting detect()"},
    {"payload_type", T_LONGLONG, offsetof(Inlet, payload_type), 0, "the codec's payload type"},
    {"_bucket_count", T_LONGLONG, offsetof(Inlet, bucket_count), 0, NULL},
    {"_flood_limit", T_LONGLONG, offsetof(Inlet, flood_limit), 0, NULL},
    {"_bucket_start", T_DOUBLE, offsetof(Inlet, bucket_start), 0, NULL},
    {"_last_audio", T_DOUBLE, offsetof(Inlet, last_audio), 0, NULL},
    {"_last_heard", T_DOUBLE, offsetof(Inlet, last_heard), 0, NULL},
    {"latched", T_BOOL, offsetof(Inlet, latched), 0, "whether RTP has fixed `remote`"},
    {"batched", T_BOOL, offsetof(Inlet, batched), 0, "whether the media tick detects"},
    {"law", T_OBJECT, offsetof(Inlet, law), 0, "the call's G.711 law"},
    {"hears", T_OBJECT, offsetof(Inlet, hears), 0, "what a bridge has this side hear"},
    {"transcriber", T_OBJECT, offsetof(Inlet, transcriber), 0, "a live transcription"},
    {"tones", T_OBJECT, offsetof(Inlet, tones), 0, "the in-band digit detector"},
    {"meter", T_OBJECT, offsetof(Inlet, meter), 0, "the caller's level meter"},
    {"classifier", T_OBJECT, offsetof(Inlet, classifier), 0, "the callee classifier"},
    {"vad", T_OBJECT, offsetof(Inlet, vad), 0, "the voice-activity detector"},
    {"sender", T_OBJECT, offsetof(Inlet, sender), 0, "the RtpSender"},
    {"player", T_OBJECT, offsetof(Inlet, player), 0, "what plays to the caller"},
    {"reports", T_OBJECT, offsetof(Inlet, reports), 0, "the call's RTCP reports"},
    {"events", T_OBJECT, offsetof(Inlet, events), 0, "media events for the call's leg"},
    {"utterances", T_OBJECT, offsetof(Inlet, utterances), 0, "utterances to recognise"},
    {"_silent_after", T_DOUBLE, offsetof(Inlet, silent_after), 0, NULL},
    {"rtp_timeout", T_DOUBLE, offsetof(Inlet, rtp_timeout), 0, "dead after this (0: never)"},
    {"sending", T_BOOL, offsetof(Inlet, sending), 0, "whether we send RTP"},
    {"recognising", T_BOOL, offsetof(Inlet, recognising), 0, "whether speech is cut"},
    {"expects_rtp", T_BOOL, offsetof(Inlet, expects_rtp), 0, "whether the peer sends RTP"},
    {"timed_out", T_BOOL, offsetof(Inlet, timed_out), 0, "whether the call is dead"},
    {"rx_owned", T_BOOL, offsetof(Inlet, rx_owned), READONLY,
     "whether the media thread holds the usual receive's state (edge/_rxpy.h)"},
    {"rx_until", T_DOUBLE, offsetof(Inlet, rx_until), READONLY,
     "the slot time up to which the media thread did the tick's receive side"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *append_name; /* "append", interned */
static PyObject *n_law, *n_sink, *n_next_ts, *n_fd, *n_broken, *n_length, *n_pending,
    *n_pending_bytes, *n_limit_bytes, *n_max_bytes, *n_flush_bytes, *n_ahead;

/* An int attribute as a C long long: 1 read, 0 not an int (or None: *none set), -1 an
 * exception. */
static int integer(PyObject *o, PyObject *name, long long *value, int *none) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    *none = v == Py_None;
    int ok = PyLong_CheckExact(v);
    if (ok) {
        int overflow = 0;
        *value = PyLong_AsLongLongAndOverflow(v, &overflow);
        ok = !overflow && !(*value == -1 && PyErr_Occurred());
    }
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : ok;
}

/* A recording of the caller in its usual step (recorder.py's CallerRecording.frame and
 * wavfile.py's WavWriter.write): the frame that comes next on its timeline, in the
 * call's law, into a file that takes it whole and is not due to be written yet (the
 * Python path writes the file every FLUSH_BYTES).  Only reads: 1 it is (new
 * references to the writer in *sink and its pending audio's list in *pending_list,
 * its pending bytes in *pending), 0 it is not or
 * cannot be told (Python's _audio does it all), never an exception. */
static int records(Inlet *self, long long ts, Py_ssize_t n, PyObject **sink,
                   PyObject **pending_list, long long *pending) {
    PyObject *recording = self->recording, *law = NULL, *mine = NULL, *writer = NULL;
    PyObject *list = NULL, *fd = NULL, *broken = NULL, *ahead = NULL;
    int ok = 0, none = 0;
    long long next_ts, length, bytes, bound, flush;
    /* Exactly the classes this follows: a subclass may write otherwise. */
    if (strcmp(Py_TYPE(recording)->tp_name, "CallerRecording") != 0)
        goto done;
    /* The media thread's frames of the recording that wait for their slot (session.py's
     * _ahead) come first: Python's _audio writes them, then this frame. */
    ahead = PyObject_GetAttr((PyObject *)self, n_ahead);
    if (ahead == NULL)
        PyErr_Clear(); /* (an Inlet that is no session: nothing waits) */
    else if (!PyList_CheckExact(ahead) || PyList_GET_SIZE(ahead) != 0)
        goto done;
    if (integer(recording, n_next_ts, &next_ts, &none) <= 0 || next_ts != ts)
        goto done;
    law = PyObject_GetAttr(recording, n_law);
    mine = self->law; /* borrowed */
    if (law == NULL || mine == NULL || !PyUnicode_CheckExact(law) ||
        !PyUnicode_CheckExact(mine) || PyUnicode_Compare(law, mine) != 0)
        goto done;
    writer = PyObject_GetAttr(recording, n_sink);
    if (writer == NULL || strcmp(Py_TYPE(writer)->tp_name, "WavWriter") != 0)
        goto done;
    fd = PyObject_GetAttr(writer, n_fd);
    broken = fd == NULL ? NULL : PyObject_GetAttr(writer, n_broken);
    if (broken != Py_False || IS_NONE(fd))
        goto done;
    list = PyObject_GetAttr(writer, n_pending);
    if (list == NULL || !PyList_CheckExact(list))
        goto done;
    if (integer(writer, n_length, &length, &none) <= 0 ||
        integer(writer, n_pending_bytes, &bytes, &none) <= 0 ||
        integer(writer, n_flush_bytes, &flush, &none) <= 0 || bytes + n >= flush)
        goto done;
    PyObject *limits[] = {n_limit_bytes, n_max_bytes};
    for (int i = 0; i < 2; i++) {
        int read = integer(writer, limits[i], &bound, &none);
        if (read < 0 || (read == 0 && !none) || (read == 1 && length + bytes + n > bound))
            goto done;
    }
    ok = 1;
    *pending = bytes;
    *sink = writer;
    *pending_list = list;
    writer = NULL;
    list = NULL;
done:
    PyErr_Clear();
    Py_XDECREF(ahead);
    Py_XDECREF(law);
    Py_XDECREF(writer);
    Py_XDECREF(list);
    Py_XDECREF(fd);
    Py_XDECREF(broken);
    return ok;
}

/* What records() found usual, done: the frame on the recording's timeline and among
 * its file's pending bytes, as CallerRecording.frame and WavWriter.write do. */
static int record(Inlet *self, PyObject *sink, PyObject *list, long long ts,
                  PyObject *payload, long long pending) {
    Py_ssize_t n = PyBytes_GET_SIZE(payload);
    PyObject *next_ts = PyLong_FromLongLong((ts + n) & 0xFFFFFFFFLL);
    if (next_ts == NULL)
        return -1;
    int failed = PyObject_SetAttr(self->recording, n_next_ts, next_ts);
    Py_DECREF(next_ts);
    if (failed)
        return -1;
    if (PyList_Append(list, payload) < 0)
        return -1;
    PyObject *bytes = PyLong_FromLongLong(pending + n);
    if (bytes == NULL)
        return -1;
    failed = PyObject_SetAttr(sink, n_pending_bytes, bytes);
    Py_DECREF(bytes);
    return failed ? -1 : 0;
}

/* The datagram `data` from `source` at `now`: 1 taken, 0 left for Python (nothing
 * changed), -1 an exception (raised by a bridge, a recording or a container). */
/* `arrival`: when the datagram reached the host (the media thread's kernel timestamp;
 * `now` where nothing says), which the flood limit counts by: datagrams read late in a
 * burst, after a backlog, came at the call's usual rate. */
static int take(Inlet *self, PyObject *data, PyObject *source, double now, double arrival) {
    if (self->rx_owned)
        return 0; /* the media thread holds the state: the session takes it back first */
    if (!IS_NONE(self->srtp) || !self->latched || IS_NONE(self->remote) || !self->batched)
        return 0;
    if (source != self->remote &&
        !(source == self->seen_source && self->remote == self->seen_remote)) {
        int same = PyObject_RichCompareBool(source, self->remote, Py_EQ);
        if (same <= 0)
            return same;
        /* (The receiving side gives the same address object while the source stays.) */
        Py_INCREF(source);
        Py_XSETREF(self->seen_source, source);
        Py_INCREF(self->remote);
        Py_XSETREF(self->seen_remote, self->remote);
    }
    /* The flood limit (session.py's receive()): over it, Python drops and logs. */
    double bucket_start = self->bucket_start;
    long long bucket_count = self->bucket_count;
    if (arrival - bucket_start >= 1.0) {
        bucket_start = arrival;
        bucket_count = 0;
    }
    bucket_count += 1;
    if (bucket_count > self->flood_limit)
        return 0;
    if (!PyBytes_CheckExact(data))
        return 0;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (size <= PLAIN_HEADER || p[0] != 0x80 || (long long)(p[1] & 0x7F) != self->payload_type)
        return 0;
    long long seq = ((long long)p[2] << 8) | p[3];
    long long ts = ((long long)p[4] << 24) | (p[5] << 16) | (p[6] << 8) | p[7];
    unsigned long long ssrc = ((unsigned long long)p[8] << 24) | (p[9] << 16) | (p[10] << 8) | p[11];

    /* Nothing but detection hears it: its containers must take it (checked before any
     * change, so that a packet that cannot be taken is left whole). */
    int alone = IS_NONE(self->tells) && IS_NONE(self->call_recording);
    int plain = alone && IS_NONE(self->recording);
    if (alone && (self->preroll == NULL || self->undetected == NULL ||
                  !PyList_Check(self->undetected)))
        return 0;

    /* rtp.py's RtpReceiver.feed_next: the next packet of the current source. */
    if (self->receiver == NULL || !PyObject_TypeCheck(self->receiver, &ReceiverCoreType))
        return 0;
    ReceiverCore *r = (ReceiverCore *)self->receiver;
    if (IS_NONE(r->ssrc) || !PyLong_CheckExact(r->ssrc))
        return 0;
    int overflow = 0;
    long long current = PyLong_AsLongLongAndOverflow(r->ssrc, &overflow);
    if (overflow || current < 0 || (unsigned long long)current != ssrc)
        return 0;
    if (r->held == NULL || !PyDict_CheckExact(r->held) || PyDict_GET_SIZE(r->held))
        return 0;
    if (r->candidates == NULL || !PyList_CheckExact(r->candidates))
        return 0;
    long long ext;
    int wraps;
    if (!rtp_counts_next(&r->counts, seq, &ext, &wraps))
        return 0;

    /* A recording of the caller alone in its usual step is written here too. */
    PyObject *sink = NULL, *pending_list = NULL;
    long long pending = 0;
    if (alone && !plain &&
        records(self, ts, size - PLAIN_HEADER, &sink, &pending_list, &pending))
        plain = 1;

    /* Taken: change what Python would, in its order. */
    PyObject *payload = PyBytes_FromStringAndSize((const char *)p + PLAIN_HEADER,
                                                  size - PLAIN_HEADER);
    if (payload == NULL) {
        Py_XDECREF(sink);
        Py_XDECREF(pending_list);
        return -1;
    }
    PyObject *since = NULL;
    if (!IS_NONE(self->rtp_since)) {
        since = PyFloat_FromDouble(now);
        if (since == NULL) {
            Py_DECREF(payload);
            Py_XDECREF(sink);
            Py_XDECREF(pending_list);
            return -1;
        }
    }
    if (PyList_GET_SIZE(r->candidates) &&
        PyList_SetSlice(r->candidates, 0, PyList_GET_SIZE(r->candidates), NULL) < 0) {
        Py_DECREF(payload);
        Py_XDECREF(since);
        Py_XDECREF(sink);
        Py_XDECREF(pending_list);
        return -1;
    }
    self->bucket_start = bucket_start;
    self->bucket_count = bucket_count;
    rtp_counts_take(&r->counts, seq, ts, ext, wraps, now);
    if (since != NULL)
        Py_SETREF(self->rtp_since, since);

    int result = 1;
    if (!plain) {
        /* A bridge or a recording hears it: session.py's _audio does all of it. */
        PyObject *ts_obj = PyLong_FromLongLong(ts);
        PyObject *now_obj = PyFloat_FromDouble(now);
        PyObject *heard_obj = PyFloat_FromDouble(arrival);
        PyObject *done = NULL;
        if (ts_obj != NULL && now_obj != NULL && heard_obj != NULL)
            done = PyObject_CallMethod((PyObject *)self, "_audio", "OOOOO", payload, ts_obj,
                                       now_obj, Py_None, heard_obj);
        Py_XDECREF(ts_obj);
        Py_XDECREF(now_obj);
        Py_XDECREF(heard_obj);
        if (done == NULL)
            result = -1;
        Py_XDECREF(done);
        Py_DECREF(payload);
        return result;
    }
    /* session.py's _audio when nothing but detection (and a recording in its usual
     * step) hears the caller. */
    self->last_audio = now;
    self->last_heard = arrival;
    if (Py_IS_TYPE(self->preroll, &callhook_PrerollType) &&
        ((Preroll *)self->preroll)->payloads) {
        callhook_preroll_push((Preroll *)self->preroll, ts, payload);
    } else {
        PyObject *ts_obj = PyLong_FromLongLong(ts);
        PyObject *entry = ts_obj == NULL ? NULL : PyTuple_Pack(2, ts_obj, payload);
        Py_XDECREF(ts_obj);
        PyObject *done = NULL;
        if (entry != NULL)
            done = PyObject_CallMethodOneArg(self->preroll, append_name, entry);
        Py_XDECREF(entry);
        if (done == NULL)
            result = -1;
        Py_XDECREF(done);
    }
    if (result == 1 && sink != NULL &&
        record(self, sink, pending_list, ts, payload, pending) < 0)
        result = -1;
    Py_XDECREF(sink);
    Py_XDECREF(pending_list);
    if (result == 1 && PyList_Append(self->undetected, payload) < 0)
        result = -1;
    Py_DECREF(payload);
    return result;
}

static PyObject *Inlet_take(Inlet *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "take(data, source, now, arrival=now) takes 3 or 4 "
                                         "arguments");
        return NULL;
    }
    double now = PyFloat_AsDouble(args[2]);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    double arrival = nargs == 4 ? PyFloat_AsDouble(args[3]) : now;
    if (arrival == -1.0 && PyErr_Occurred())
        return NULL;
    int taken = take(self, args[0], args[1], now, arrival);
    if (taken < 0)
        return NULL;
    return PyBool_FromLong(taken);
}

static PyMethodDef Inlet_methods[] = {
    {"take", (PyCFunction)(void (*)(void))Inlet_take, METH_FASTCALL,
     "take(data, source, now, arrival=now) -> bool: the datagram taken as receive() would "
     "take it, "
     "when it is the usual packet; False and nothing changed otherwise."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject InletType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.media._inlet.Inlet",
    .tp_doc = "The fields of MediaSession that the usual packet reads or changes, in C.",
    .tp_basicsize = sizeof(Inlet),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Inlet_dealloc,
    .tp_traverse = (traverseproc)Inlet_traverse,
    .tp_clear = (inquiry)Inlet_clear,
    .tp_members = Inlet_members,
    .tp_methods = Inlet_methods,
};

/* ------------------------------------------------------------------- take_all */

static unsigned long long take_all_calls; /* stamps Inlet.declined_in */

static PyObject *take_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "take_all(received: list, now) takes 2 arguments");
        return NULL;
    }
    PyObject *received = args[0];
    double now = PyFloat_AsDouble(args[1]);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *rest = PyList_New(0);
    PyObject *faults = PyList_New(0);
    if (rest == NULL || faults == NULL)
        goto error;
    /* A call's packets are taken in their order: once one is left to Python, the ones
     * after it are too (Python receives them after it, as they came). */
    unsigned long long call = ++take_all_calls;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(received); i++) {
        PyObject *item = PyList_GET_ITEM(received, i);
        int taken = 0;
        /* item: ((stream, inlet or None), data, source[, arrival]) */
        Py_ssize_t size = PyTuple_CheckExact(item) ? PyTuple_GET_SIZE(item) : 0;
        if (size == 3 || size == 4) {
            PyObject *key = PyTuple_GET_ITEM(item, 0);
            if (PyTuple_CheckExact(key) && PyTuple_GET_SIZE(key) == 2) {
                PyObject *inlet = PyTuple_GET_ITEM(key, 1);
                if (PyObject_TypeCheck(inlet, &InletType)) {
                    Inlet *in = (Inlet *)inlet;
                    double arrival = now;
                    if (size == 4) {
                        arrival = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 3));
                        if (arrival == -1.0 && PyErr_Occurred())
                            taken = -1;
                    }
                    if (taken == 0 && in->declined_in != call)
                        taken = take(in, PyTuple_GET_ITEM(item, 1), PyTuple_GET_ITEM(item, 2),
                                     now, arrival);
                    if (taken != 1)
                        in->declined_in = call;
                }
            }
        }
        if (taken < 0) {
            /* A bug (or no memory): that packet is lost, the others go on. */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyErr_NormalizeException(&type, &value, &traceback);
            if (traceback != NULL && value != NULL)
                PyException_SetTraceback(value, traceback);
            PyObject *fault = PyTuple_Pack(2, PyTuple_GET_ITEM(item, 0),
                                           value != NULL ? value : Py_None);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
            if (fault == NULL || PyList_Append(faults, fault) < 0) {
                Py_XDECREF(fault);
                goto error;
            }
            Py_DECREF(fault);
        } else if (!taken && PyList_Append(rest, item) < 0) {
            goto error;
        }
    }
    PyObject *result = PyTuple_Pack(2, rest, faults);
    Py_DECREF(rest);
    Py_DECREF(faults);
    return result;
error:
    Py_XDECREF(rest);
    Py_XDECREF(faults);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"take_all", (PyCFunction)(void (*)(void))take_all, METH_FASTCALL,
     "take_all([((stream, inlet), data, source)], now) -> (rest, faults): the usual "
     "packets taken (Inlet.take); the others, in order; and (key, exception) for each "
     "packet whose taking raised."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.media._inlet",
    .m_doc = "A call's usual RTP packet taken in C (see inlet.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__inlet(void) {
    PyObject **names[] = {&append_name, &n_law, &n_sink, &n_next_ts, &n_fd, &n_broken,
                          &n_length, &n_pending, &n_pending_bytes, &n_limit_bytes,
                          &n_max_bytes, &n_flush_bytes, &n_ahead};
    const char *texts[] = {"append", "law", "sink", "next_ts", "_fd", "_broken", "length",
                           "_pending", "_pending_bytes", "limit_bytes", "max_bytes",
                           "flush_bytes", "_ahead"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i] = PyUnicode_InternFromString(texts[i]);
        if (*names[i] == NULL)
            return NULL;
    }
    if (PyType_Ready(&ReceiverCoreType) < 0 || PyType_Ready(&InletType) < 0 ||
        PyType_Ready(&callhook_PrerollType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReceiverCoreType);
    if (PyModule_AddObject(m, "ReceiverCore", (PyObject *)&ReceiverCoreType) < 0) {
        Py_DECREF(&ReceiverCoreType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&InletType);
    if (PyModule_AddObject(m, "Inlet", (PyObject *)&InletType) < 0) {
        Py_DECREF(&InletType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&callhook_PrerollType);
    if (PyModule_AddObject(m, "Preroll", (PyObject *)&callhook_PrerollType) < 0) {
        Py_DECREF(&callhook_PrerollType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
