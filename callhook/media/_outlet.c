/* A call's usual outgoing RTP packet made in C: callhook.media._outlet.  Sans-IO.
 *
 * What this is for: every 20 ms the media tick asks every call's session for the
 * packet to send (MediaSession.tick).  Almost every one is the usual packet: the
 * prompt's next 20 ms (not its last), or silence when nothing plays, in plain RTP,
 * with nothing else due on the call (no bridge, no recording of both sides, no
 * transcription, no digit being sent, no packet held for reordering, the peer not
 * silent or dead).  In Python that cost MediaSession.tick, Player.next_frame and
 * RtpSender.frame: a sixteenth of a loaded serve's CPU (profiled at 200 calls, issue
 * 19).  Here RtpSender's fields live in a C struct that is its base (SenderCore), and
 * tick_all() makes the usual packet of every call in one call.
 *
 * The rule, as in _inlet.c and _gate.c: a packet is made here only when every
 * condition of that path in Python holds, and then exactly what Python would change is
 * changed; any other call is left to MediaSession.tick, untouched
 * (tests/unit/test_outlet.py compares the two field by field, packet by packet).
 * session.py's _tick, player.py's next_frame and rtp.py's RtpSender.frame are the
 * reference: a change to them is made here too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define FRAME 160 /* samples and G.711 bytes of 20 ms */

typedef struct {
    PyObject_HEAD
    long long payload_type;
    long long ssrc;
    long long sequence;
    long long timestamp;
    long long packets;
    long long octets;
    char talkspurt;
} SenderCore;

static void SenderCore_dealloc(SenderCore *self) {
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef SenderCore_members[] = {
    {"payload_type", T_LONGLONG, offsetof(SenderCore, payload_type), 0, "the codec's"},
    {"ssrc", T_LONGLONG, offsetof(SenderCore, ssrc), 0, "our source (RFC 3550 §5.1)"},
    {"sequence", T_LONGLONG, offsetof(SenderCore, sequence), 0, "the next sequence number"},
    {"timestamp", T_LONGLONG, offsetof(SenderCore, timestamp), 0, "the next media time"},
    {"packets", T_LONGLONG, offsetof(SenderCore, packets), 0, "packets sent (SR)"},
    {"octets", T_LONGLONG, offsetof(SenderCore, octets), 0, "payload octets sent (SR)"},
    {"_talkspurt", T_BOOL, offsetof(SenderCore, talkspurt), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SenderCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.media._outlet.SenderCore",
    .tp_doc = "The fields of RtpSender that the usual packet changes, in C.",
    .tp_basicsize = sizeof(SenderCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)SenderCore_dealloc,
    .tp_members = SenderCore_members,
};

/* RtpSender.frame(payload)'s packet; the sender is moved on by commit(). NULL: no memory. */
static PyObject *frame(SenderCore *s, const char *payload, Py_ssize_t size) {
    PyObject *packet = PyBytes_FromStringAndSize(NULL, 12 + size);
    if (packet == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(packet);
    long long seq = s->sequence, ts = s->timestamp, ssrc = s->ssrc;
    p[0] = 0x80;
    p[1] = (unsigned char)((s->payload_type & 0x7F) | (s->talkspurt ? 0x80 : 0));
    p[2] = (unsigned char)(seq >> 8);
    p[3] = (unsigned char)seq;
    p[4] = (unsigned char)(ts >> 24);
    p[5] = (unsigned char)(ts >> 16);
    p[6] = (unsigned char)(ts >> 8);
    p[7] = (unsigned char)ts;
    p[8] = (unsigned char)(ssrc >> 24);
    p[9] = (unsigned char)(ssrc >> 16);
    p[10] = (unsigned char)(ssrc >> 8);
    p[11] = (unsigned char)ssrc;
    memcpy(p + 12, payload, size);
    return packet;
}

/* The rest of RtpSender.frame: the sender moves on past the packet frame() made. */
static void commit(SenderCore *s, Py_ssize_t size) {
    s->talkspurt = 0;
    s->sequence = (s->sequence + 1) & 0xFFFF;
    s->timestamp = (s->timestamp + FRAME) & 0xFFFFFFFFLL;
    s->packets += 1;
    s->octets += size;
}

static PyObject *n_srtp, *n_receiver, *n_held, *n_undetected, *n_timed_out, *n_rtp_since,
    *n_rtp_timeout, *n_expects_rtp, *n_last_audio, *n_silent_after, *n_hears, *n_player,
    *n_call_recording, *n_transcriber, *n_sending, *n_remote, *n_sender, *n_event, *n_prompt,
    *n_echo_ticks, *n_silence, *n_audio, *n_pos, *n_reports, *n_due, *n_events, *n_utterances;

/* getattr(o, name) is None: 1 yes, 0 no, -1 an exception. */
static int is_none(PyObject *o, PyObject *name) {
    PyObject *value = PyObject_GetAttr(o, name);
    if (value == NULL)
        return -1;
    int none = value == Py_None;
    Py_DECREF(value);
    return none;
}

/* getattr(o, name) is empty (len 0): 1 yes, 0 no, -1 an exception. */
static int is_empty(PyObject *o, PyObject *name) {
    PyObject *value = PyObject_GetAttr(o, name);
    if (value == NULL)
        return -1;
    Py_ssize_t n = PyObject_Length(value);
    Py_DECREF(value);
    return n < 0 ? -1 : n == 0;
}

/* A float attribute; -1 with an exception set on failure (check PyErr_Occurred). */
static double number(PyObject *o, PyObject *name) {
    PyObject *value = PyObject_GetAttr(o, name);
    if (value == NULL)
        return -1.0;
    double x = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return x;
}

#define CHECK(expr)            \
    do {                       \
        int ok_ = (expr);      \
        if (ok_ <= 0)          \
            return ok_;        \
    } while (0)

/* session.py's _tick(now) for the usual packet: 1 made (*packet, *remote set), 0 left
 * to Python (nothing changed), -1 an exception. */
static int tick(PyObject *session, double now, PyObject **packet, PyObject **remote) {
    CHECK(is_none(session, n_srtp));
    CHECK(is_none(session, n_hears));
    CHECK(is_none(session, n_call_recording));
    CHECK(is_none(session, n_transcriber));
    CHECK(is_empty(session, n_undetected));
    PyObject *receiver = PyObject_GetAttr(session, n_receiver);
    if (receiver == NULL)
        return -1;
    int held = is_empty(receiver, n_held);
    Py_DECREF(receiver);
    CHECK(held);
    /* _check_dead(now) must have nothing to say. */
    PyObject *since = PyObject_GetAttr(session, n_rtp_since);
    if (since == NULL)
        return -1;
    if (since != Py_None) {
        double at = PyFloat_AsDouble(since);
        Py_DECREF(since);
        if (at == -1.0 && PyErr_Occurred())
            return -1;
        PyObject *flag = PyObject_GetAttr(session, n_timed_out);
        if (flag == NULL)
            return -1;
        int timed_out = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        if (timed_out < 0)
            return -1;
        flag = PyObject_GetAttr(session, n_expects_rtp);
        if (flag == NULL)
            return -1;
        int expects = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        if (expects < 0)
            return -1;
        double timeout = number(session, n_rtp_timeout);
        if (timeout == -1.0 && PyErr_Occurred())
            return -1;
        if (!timed_out && timeout > 0 && expects && now - at >= timeout)
            return 0;
    } else {
        Py_DECREF(since);
    }
    /* The caller's audio has not stopped (silence would be detected). */
    double last = number(session, n_last_audio);
    if (last == -1.0 && PyErr_Occurred())
        return -1;
    double silent_after = number(session, n_silent_after);
    if (silent_after == -1.0 && PyErr_Occurred())
        return -1;
    if (now - last > silent_after && last != 0.0)
        return 0;
    PyObject *flag = PyObject_GetAttr(session, n_sending);
    if (flag == NULL)
        return -1;
    int sending = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    CHECK(sending);
    PyObject *to = PyObject_GetAttr(session, n_remote);
    if (to == NULL)
        return -1;
    if (to == Py_None) {
        Py_DECREF(to);
        return 0;
    }
    PyObject *sender = PyObject_GetAttr(session, n_sender);
    PyObject *player = sender == NULL ? NULL : PyObject_GetAttr(session, n_player);
    PyObject *prompt = NULL, *audio = NULL, *silence = NULL, *echo = NULL;
    int result = -1;
    if (player == NULL)
        goto done;
    result = 0;
    if (!PyObject_TypeCheck(sender, &SenderCoreType))
        goto done;
    /* Player.next_frame: no event in progress; silence, or the prompt's next 20 ms. */
    int idle = is_none(player, n_event);
    if (idle <= 0) {
        result = idle;
        goto done;
    }
    echo = PyObject_GetAttr(player, n_echo_ticks);
    prompt = echo == NULL ? NULL : PyObject_GetAttr(player, n_prompt);
    if (prompt == NULL) {
        result = -1;
        goto done;
    }
    long long echo_ticks = PyLong_AsLongLong(echo);
    if (echo_ticks == -1 && PyErr_Occurred()) {
        result = -1;
        goto done;
    }
    const char *payload;
    long long pos = 0;
    if (prompt == Py_None) {
        silence = PyObject_GetAttr(player, n_silence);
        if (silence == NULL) {
            result = -1;
            goto done;
        }
        if (!PyBytes_Check(silence) || PyBytes_GET_SIZE(silence) != FRAME)
            goto done;
        payload = PyBytes_AS_STRING(silence);
    } else {
        audio = PyObject_GetAttr(prompt, n_audio);
        PyObject *at = audio == NULL ? NULL : PyObject_GetAttr(prompt, n_pos);
        if (at == NULL) {
            result = -1;
            goto done;
        }
        pos = PyLong_AsLongLong(at);
        Py_DECREF(at);
        if (pos == -1 && PyErr_Occurred()) {
            result = -1;
            goto done;
        }
        /* Not the prompt's last frame: that one may end it (PromptFinished). */
        if (!PyBytes_Check(audio) || pos < 0 || PyBytes_GET_SIZE(audio) - pos <= FRAME)
            goto done;
        payload = PyBytes_AS_STRING(audio) + pos;
    }
    /* Made: change what Python would (the echo count, the prompt's place, the sender),
     * every object made first, so that running out of memory changes nothing. */
    PyObject *less = echo_ticks ? PyLong_FromLongLong(echo_ticks - 1) : NULL;
    PyObject *next = prompt != Py_None ? PyLong_FromLongLong(pos + FRAME) : NULL;
    PyObject *made = frame((SenderCore *)sender, payload, FRAME);
    if ((echo_ticks && less == NULL) || (prompt != Py_None && next == NULL) || made == NULL ||
        (less != NULL && PyObject_SetAttr(player, n_echo_ticks, less) < 0) ||
        (next != NULL && PyObject_SetAttr(prompt, n_pos, next) < 0)) {
        Py_XDECREF(less);
        Py_XDECREF(next);
        Py_XDECREF(made);
        result = -1;
        goto done;
    }
    Py_XDECREF(less);
    Py_XDECREF(next);
    commit((SenderCore *)sender, FRAME);
    *packet = made;
    *remote = to;
    to = NULL;
    result = 1;
done:
    Py_XDECREF(to);
    Py_XDECREF(sender);
    Py_XDECREF(player);
    Py_XDECREF(prompt);
    Py_XDECREF(audio);
    Py_XDECREF(silence);
    Py_XDECREF(echo);
    return result;
}

/* rest.append(i): 0, or -1 with an exception. */
static int append_index(PyObject *rest, Py_ssize_t i) {
    PyObject *index = PyLong_FromSsize_t(i);
    if (index == NULL)
        return -1;
    int failed = PyList_Append(rest, index);
    Py_DECREF(index);
    return failed;
}

static PyObject *tick_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "tick_all(calls: list, now) takes 2 arguments");
        return NULL;
    }
    PyObject *calls = args[0];
    double now = PyFloat_AsDouble(args[1]);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *batch = PyList_New(0);
    PyObject *rest = PyList_New(0);
    if (batch == NULL || rest == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(calls); i++) {
        /* each: (session, fd) */
        PyObject *call = PyList_GET_ITEM(calls, i);
        PyObject *packet = NULL, *remote = NULL;
        int made = 0;
        if (PyTuple_CheckExact(call) && PyTuple_GET_SIZE(call) == 2)
            made = tick(PyTuple_GET_ITEM(call, 0), now, &packet, &remote);
        if (made < 0) {
            PyErr_Clear(); /* Python's tick meets the same cause and reports it */
            made = 0;
        }
        if (made) {
            PyObject *item = PyTuple_Pack(3, PyTuple_GET_ITEM(call, 1), packet, remote);
            Py_DECREF(packet);
            Py_DECREF(remote);
            if (item == NULL || PyList_Append(batch, item) < 0) {
                Py_XDECREF(item);
                goto error;
            }
            Py_DECREF(item);
        } else {
            if (append_index(rest, i) < 0)
                goto error;
        }
    }
    PyObject *result = PyTuple_Pack(2, batch, rest);
    Py_DECREF(batch);
    Py_DECREF(rest);
    return result;
error:
    Py_XDECREF(batch);
    Py_XDECREF(rest);
    return NULL;
}

/* Whether the media tick's _report(stream) has anything to do for this session: 1 yes
 * (or cannot tell: Python decides), 0 nothing (no RTCP report due, no news to wake
 * its leg for), -1 an exception. adapters/media.py's _report is the reference. */
static int due(PyObject *session, int rtcp, double now) {
    if (rtcp) {
        PyObject *reports = PyObject_GetAttr(session, n_reports);
        if (reports == NULL)
            return -1;
        PyObject *at = PyObject_GetAttr(reports, n_due);
        Py_DECREF(reports);
        if (at == NULL)
            return -1;
        if (at == Py_None) {
            Py_DECREF(at);
            return 1; /* the first ask sets when the first report is due */
        }
        double when = PyFloat_AsDouble(at);
        Py_DECREF(at);
        if (when == -1.0 && PyErr_Occurred())
            return -1;
        if (!(now < when)) /* as Python's `now < due` decides (NaN included) */
            return 1;
    }
    int quiet = is_empty(session, n_events);
    if (quiet <= 0)
        return quiet < 0 ? -1 : 1;
    quiet = is_empty(session, n_utterances);
    if (quiet <= 0)
        return quiet < 0 ? -1 : 1;
    quiet = is_none(session, n_transcriber);
    if (quiet <= 0)
        return quiet < 0 ? -1 : 1;
    PyObject *timed_out = PyObject_GetAttr(session, n_timed_out);
    if (timed_out == NULL)
        return -1;
    int news = PyObject_IsTrue(timed_out);
    Py_DECREF(timed_out);
    return news;
}

static PyObject *due_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "due_all(calls: list, now) takes 2 arguments");
        return NULL;
    }
    PyObject *calls = args[0];
    double now = PyFloat_AsDouble(args[1]);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *rest = PyList_New(0);
    if (rest == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(calls); i++) {
        /* each: (session, has an RTCP socket) */
        PyObject *call = PyList_GET_ITEM(calls, i);
        int busy = 1;
        if (PyTuple_CheckExact(call) && PyTuple_GET_SIZE(call) == 2) {
            int rtcp = PyObject_IsTrue(PyTuple_GET_ITEM(call, 1));
            busy = rtcp < 0 ? -1 : due(PyTuple_GET_ITEM(call, 0), rtcp, now);
        }
        if (busy < 0) {
            PyErr_Clear(); /* Python's _report meets the same cause and reports it */
            busy = 1;
        }
        if (busy) {
            if (append_index(rest, i) < 0) {
                Py_DECREF(rest);
                return NULL;
            }
        }
    }
    return rest;
}

static PyMethodDef module_methods[] = {
    {"due_all", (PyCFunction)(void (*)(void))due_all, METH_FASTCALL,
     "due_all([(session, rtcp)], now) -> [index]: the positions of the calls for which "
     "the media tick has something to do after sending (an RTCP report due, when rtcp is "
     "true; news to wake the call's leg for); the others are left alone."},
    {"tick_all", (PyCFunction)(void (*)(void))tick_all, METH_FASTCALL,
     "tick_all([(session, fd)], now) -> (batch, rest): the usual packet of each call "
     "made as MediaSession.tick would make it, as (fd, packet, remote) to send; the "
     "positions of the others, for MediaSession.tick."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.media._outlet",
    .m_doc = "A call's usual outgoing RTP packet made in C (see outlet.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

#define INTERN(var, text)                          \
    do {                                           \
        var = PyUnicode_InternFromString(text);    \
        if (var == NULL)                           \
            return NULL;                           \
    } while (0)

PyMODINIT_FUNC PyInit__outlet(void) {
    INTERN(n_srtp, "srtp");
    INTERN(n_receiver, "receiver");
    INTERN(n_held, "_held");
    INTERN(n_undetected, "undetected");
    INTERN(n_timed_out, "timed_out");
    INTERN(n_rtp_since, "_rtp_since");
    INTERN(n_rtp_timeout, "rtp_timeout");
    INTERN(n_expects_rtp, "expects_rtp");
    INTERN(n_last_audio, "_last_audio");
    INTERN(n_silent_after, "_silent_after");
    INTERN(n_hears, "hears");
    INTERN(n_player, "player");
    INTERN(n_call_recording, "_call_recording");
    INTERN(n_transcriber, "transcriber");
    INTERN(n_sending, "sending");
    INTERN(n_remote, "remote");
    INTERN(n_sender, "sender");
    INTERN(n_event, "_event");
    INTERN(n_prompt, "_prompt");
    INTERN(n_echo_ticks, "echo_ticks");
    INTERN(n_silence, "silence");
    INTERN(n_audio, "audio");
    INTERN(n_pos, "pos");
    INTERN(n_reports, "reports");
    INTERN(n_due, "due");
    INTERN(n_events, "events");
    INTERN(n_utterances, "utterances");
    if (PyType_Ready(&SenderCoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SenderCoreType);
    if (PyModule_AddObject(m, "SenderCore", (PyObject *)&SenderCoreType) < 0) {
        Py_DECREF(&SenderCoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
