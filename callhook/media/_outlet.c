/* A call's usual outgoing RTP packet made in C: callhook.media._outlet.  Sans-IO.
 *
 * What this is for: every 20 ms the media tick asks every call's session for the
 * packet to send (MediaSession.tick).  Almost every one is the usual packet: the
 * prompt's next 20 ms (not its last), or silence when nothing plays, in plain RTP,
 * with nothing else due on the call (no bridge, no recording of both sides, no
 * transcription, no digit being sent, no packet held for reordering, the peer not
 * silent or dead).  In Python that cost MediaSession.tick, Player.next_frame and
 * RtpSender.frame: a sixteenth of a loaded serve's CPU (profiled at 200 calls, issue
 * 19).  Here RtpSender's fields live in a C struct that is its base (SenderCore),
 * Player's in another (PlayerCore), the session's are read from its struct (_inlet.h),
 * and tick_all() makes the usual packet of every call in one call.
 *
 * The rule, as in _inlet.c and _gate.c: a packet is made here only when every
 * condition of that path in Python holds, and then exactly what Python would change is
 * changed; any other call is left to MediaSession.tick, untouched
 * (tests/unit/media/test_outlet.py compares the two field by field, packet by packet).
 * session.py's _tick, player.py's next_frame and rtp.py's RtpSender.frame are the
 * reference: a change to them is made here too.
 *
 * For the media thread (callhook/edge/plane.py), cover_all() gives each playing prompt's
 * coming frames (its cover) and uncover() makes it given again; due_all() tells which
 * calls have anything more to do after the tick.  (Past 600 lines: these read the same
 * player, sender and session structs as tick_all; the cover is the part to move to a
 * module of its own, with PlayerCore's layout in a header, when it grows.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_inlet.h"

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

static InletTypes types; /* the session's and receiver's C layout (_inlet.h) */

/* ------------------------------------------------------------------- PlayerCore */

typedef struct {
    PyObject_HEAD
    PyObject *silence; /* 20 ms of silence in the call's law */
    PyObject *prompt;  /* the prompt playing, or None */
    PyObject *event;   /* the RFC 4733 event being sent, or None */
    long long echo_ticks;
    PyObject *begun; /* the prompt that has made a frame (its first is Python's) */
    char hold;       /* Player.hold_start: this tick, the prompt waits (a T_BOOL) */
    /* The media thread's cover (cover_all): the prompt and the audio it was taken from,
     * the offset in that audio it reaches, the prompt's place when last seen, and
     * whether the thread may hold what it was not given (uncover). */
    PyObject *cover_prompt;
    PyObject *cover_audio;
    long long covered;
    long long cover_pos;
    int cover_dirty;
} PlayerCore;

static int PlayerCore_traverse(PlayerCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->silence);
    Py_VISIT(self->prompt);
    Py_VISIT(self->event);
    Py_VISIT(self->begun);
    Py_VISIT(self->cover_prompt);
    Py_VISIT(self->cover_audio);
    return 0;
}

static int PlayerCore_clear(PlayerCore *self) {
    Py_CLEAR(self->silence);
    Py_CLEAR(self->prompt);
    Py_CLEAR(self->event);
    Py_CLEAR(self->begun);
    Py_CLEAR(self->cover_prompt);
    Py_CLEAR(self->cover_audio);
    return 0;
}

static void PlayerCore_dealloc(PlayerCore *self) {
    PyObject_GC_UnTrack(self);
    PlayerCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef PlayerCore_members[] = {
    {"silence", T_OBJECT, offsetof(PlayerCore, silence), 0, "20 ms of silence"},
    {"_prompt", T_OBJECT, offsetof(PlayerCore, prompt), 0, NULL},
    {"_event", T_OBJECT, offsetof(PlayerCore, event), 0, NULL},
    {"echo_ticks", T_LONGLONG, offsetof(PlayerCore, echo_ticks), 0,
     "ticks left in which in-band digits heard are the echo of ours"},
    {"_begun", T_OBJECT, offsetof(PlayerCore, begun), 0, NULL},
    {"_hold", T_BOOL, offsetof(PlayerCore, hold), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject PlayerCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.media._outlet.PlayerCore",
    .tp_doc = "The fields of Player that the usual packet reads or changes, in C.",
    .tp_basicsize = sizeof(PlayerCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)PlayerCore_dealloc,
    .tp_traverse = (traverseproc)PlayerCore_traverse,
    .tp_clear = (inquiry)PlayerCore_clear,
    .tp_members = PlayerCore_members,
};

static PyObject *n_audio, *n_pos, *n_due, *n_rest, *n_popleft;

/* A sized container's emptiness (a field that may be unset): 1 empty, 0 not, -1 an
 * exception (unset, or not sized). */
static int empty(PyObject *o) {
    if (o == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a media session's field is not set");
        return -1;
    }
    if (PyList_CheckExact(o))
        return PyList_GET_SIZE(o) == 0;
    if (PyDict_CheckExact(o))
        return PyDict_GET_SIZE(o) == 0;
    Py_ssize_t n = PyObject_Length(o);
    return n < 0 ? -1 : n == 0;
}

#define CHECK(expr)            \
    do {                       \
        int ok_ = (expr);      \
        if (ok_ <= 0)          \
            return ok_;        \
    } while (0)

/* session.py's _tick(now) for the usual packet: 1 made (*packet, *remote set), 0 left
 * to Python (nothing changed), -1 an exception. The session's, receiver's and player's
 * fields are read from their structs (_inlet.h, PlayerCore); anything else about them
 * (another class, a field unset) leaves the call to Python, which meets the cause. */
static int tick(PyObject *object, double now, PyObject **packet, PyObject **remote) {
    if (!PyObject_TypeCheck(object, types.inlet))
        return 0;
    Inlet *session = (Inlet *)object;
    if (!IS_NONE(session->srtp) || !IS_NONE(session->hears) ||
        !IS_NONE(session->call_recording) || !IS_NONE(session->transcriber))
        return 0;
    CHECK(empty(session->undetected));
    if (session->receiver == NULL || !PyObject_TypeCheck(session->receiver, types.receiver))
        return 0;
    CHECK(empty(((ReceiverCore *)session->receiver)->held));
    /* _check_dead(now) must have nothing to say (the media thread said it up to rx_until). */
    if (!IS_NONE(session->rtp_since) && now > session->rx_until) {
        double at = PyFloat_AsDouble(session->rtp_since);
        if (at == -1.0 && PyErr_Occurred())
            return -1;
        if (!session->timed_out && session->rtp_timeout > 0 && session->expects_rtp &&
            now - at >= session->rtp_timeout)
            return 0;
    }
    /* The caller's audio has not stopped (silence would be detected). */
    double last = session->last_audio;
    if (now > session->rx_until && now - last > session->silent_after && last != 0.0)
        return 0;
    if (!session->sending || IS_NONE(session->remote))
        return 0;
    PyObject *sender = session->sender, *object_player = session->player;
    if (sender == NULL || !PyObject_TypeCheck(sender, &SenderCoreType) ||
        object_player == NULL || !PyObject_TypeCheck(object_player, &PlayerCoreType))
        return 0;
    PlayerCore *player = (PlayerCore *)object_player;
    /* Player.next_frame: no event in progress; silence, or the prompt's next 20 ms (not
     * its first, nor one held back). */
    if (!IS_NONE(player->event) || player->prompt == NULL || player->hold ||
        (player->prompt != Py_None && player->prompt != player->begun))
        return 0;
    /* The prompt's fields are read through Python: it, the player, the sender and the
     * address are held meanwhile. */
    PyObject *prompt = player->prompt, *audio = NULL, *next = NULL, *made = NULL;
    PyObject *to = session->remote;
    long long echo_ticks = player->echo_ticks;
    const char *payload;
    long long pos = 0;
    int result = 0;
    Py_INCREF(prompt);
    Py_INCREF(player);
    Py_INCREF(sender);
    Py_INCREF(to);
    if (prompt == Py_None) {
        PyObject *silence = player->silence;
        if (silence == NULL || !PyBytes_Check(silence) || PyBytes_GET_SIZE(silence) != FRAME)
            goto done;
        payload = PyBytes_AS_STRING(silence);
    } else {
        result = -1;
        audio = PyObject_GetAttr(prompt, n_audio);
        PyObject *at = audio == NULL ? NULL : PyObject_GetAttr(prompt, n_pos);
        if (at == NULL)
            goto done;
        pos = PyLong_AsLongLong(at);
        Py_DECREF(at);
        if (pos == -1 && PyErr_Occurred())
            goto done;
        result = 0;
        /* Not the prompt's last frame: that one may end it (PromptFinished). */
        if (!PyBytes_Check(audio) || pos < 0 || PyBytes_GET_SIZE(audio) - pos <= FRAME)
            goto done;
        payload = PyBytes_AS_STRING(audio) + pos;
        next = PyLong_FromLongLong(pos + FRAME);
    }
    /* Made: change what Python would (the echo count, the prompt's place, the sender),
     * every object made first, so that running out of memory changes nothing. */
    made = frame((SenderCore *)sender, payload, FRAME);
    if ((prompt != Py_None && next == NULL) || made == NULL ||
        (next != NULL && PyObject_SetAttr(prompt, n_pos, next) < 0)) {
        Py_CLEAR(made);
        result = -1;
        goto done;
    }
    if (echo_ticks)
        player->echo_ticks = echo_ticks - 1;
    commit((SenderCore *)sender, FRAME);
    *packet = made;
    *remote = to;
    to = NULL;
    result = 1;
done:
    Py_XDECREF(next);
    Py_XDECREF(audio);
    Py_DECREF(prompt);
    Py_DECREF(player);
    Py_DECREF(sender);
    Py_XDECREF(to);
    return result;
}

/* ------------------------------------------------------------------- cover_all */

/* Frames of cover a command carries (the media thread's records hold 512 bytes). */
#define COVER_BATCH 3

/* list.append((fd, first, clear, audio)): 0, or -1 with an exception. */
static int append_cover(PyObject *list, PyObject *fd, long long first, int clear,
                        const char *audio, Py_ssize_t size) {
    PyObject *item = Py_BuildValue("(OLNy#)", fd, first, PyBool_FromLong(clear), audio, size);
    if (item == NULL)
        return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* The prompt's next segment joined to its audio now, where its audio from `pos` runs
 * out within the cover's reach and that segment is audio (not digits): what
 * Player._frame does when the audio runs out, done early, so that the cover reaches
 * across the join (a play list's next file). The frames the prompt makes are the same
 * bytes either way. A new reference to the audio from then on (the same, where nothing
 * was joined); NULL with an exception. */
static PyObject *join_ahead(PyObject *prompt, PyObject *audio, long long pos, long long reach) {
    if (PyBytes_GET_SIZE(audio) - pos >= reach) {
        Py_INCREF(audio);
        return audio;
    }
    PyObject *rest = PyObject_GetAttr(prompt, n_rest);
    if (rest == NULL)
        return NULL;
    PyObject *next = PySequence_Size(rest) > 0 ? PySequence_GetItem(rest, 0) : NULL;
    if (next == NULL || !PyBytes_CheckExact(next)) {
        PyErr_Clear(); /* (none, or digits: the cover ends with this audio) */
        Py_XDECREF(next);
        Py_DECREF(rest);
        Py_INCREF(audio);
        return audio;
    }
    Py_ssize_t left = PyBytes_GET_SIZE(audio) - (Py_ssize_t)pos;
    PyObject *joined = PyBytes_FromStringAndSize(NULL, left + PyBytes_GET_SIZE(next));
    PyObject *zero = PyLong_FromLong(0);
    PyObject *was = PyObject_GetAttr(prompt, n_pos);
    int failed = joined == NULL || zero == NULL || was == NULL;
    if (!failed) {
        memcpy(PyBytes_AS_STRING(joined), PyBytes_AS_STRING(audio) + pos, (size_t)left);
        memcpy(PyBytes_AS_STRING(joined) + left, PyBytes_AS_STRING(next),
               (size_t)PyBytes_GET_SIZE(next));
        /* All of it or none: the segment leaves `rest` last, and a step that fails
         * puts back what the ones before it changed. */
        PyObject *popped = NULL;
        int set = 0; /* the attributes set so far */
        if (PyObject_SetAttr(prompt, n_audio, joined) == 0 && ++set &&
            PyObject_SetAttr(prompt, n_pos, zero) == 0 && ++set)
            popped = PyObject_CallMethodNoArgs(rest, n_popleft);
        if (popped == NULL) {
            failed = 1;
            PyObject *type, *value, *trace;
            PyErr_Fetch(&type, &value, &trace);
            if (set > 0 && PyObject_SetAttr(prompt, n_audio, audio) < 0)
                PyErr_Clear();
            if (set > 1 && PyObject_SetAttr(prompt, n_pos, was) < 0)
                PyErr_Clear();
            PyErr_Restore(type, value, trace);
        }
        Py_XDECREF(popped);
    }
    Py_XDECREF(was);
    Py_XDECREF(zero);
    Py_DECREF(next);
    Py_DECREF(rest);
    if (failed) {
        Py_XDECREF(joined);
        return NULL;
    }
    return joined;
}

/* One call's cover: 0, or -1 with an exception. */
static int cover_one(PyObject *session_obj, PyObject *fd, long long horizon, PyObject *out) {
    if (!PyObject_TypeCheck(session_obj, types.inlet))
        return 0;
    Inlet *session = (Inlet *)session_obj;
    if (!IS_NONE(session->srtp) || session->player == NULL ||
        !PyObject_TypeCheck(session->player, &PlayerCoreType))
        return 0; /* (SRTP: the thread sends nothing in Python's place) */
    PlayerCore *player = (PlayerCore *)session->player;
    PyObject *prompt = player->prompt;
    if (prompt == Py_None)
        prompt = NULL;
    if (prompt != player->cover_prompt || player->cover_dirty) {
        /* Another prompt, or none (or what the thread holds is not known): what was
         * covered goes, from this tick's own slot on (its frame may come late). */
        int had = player->cover_prompt != NULL || player->cover_dirty;
        Py_CLEAR(player->cover_prompt);
        Py_CLEAR(player->cover_audio);
        player->covered = player->cover_pos = 0;
        player->cover_dirty = 0;
        if (had && append_cover(out, fd, 0, 1, "", 0) < 0) {
            player->cover_dirty = 1;
            return -1;
        }
        if (prompt != NULL) {
            Py_INCREF(prompt);
            player->cover_prompt = prompt;
        }
    }
    if (prompt == NULL || player->hold || !IS_NONE(player->event))
        return 0; /* (none; or it has not begun: its cover starts with it; or a digit's
                   * event is being sent: the audio after it is covered once it is over) */
    PyObject *audio = PyObject_GetAttr(prompt, n_audio);
    if (audio == NULL)
        return -1;
    PyObject *at = PyObject_GetAttr(prompt, n_pos);
    long long pos = at == NULL ? -1 : PyLong_AsLongLong(at);
    Py_XDECREF(at);
    if (pos == -1 && PyErr_Occurred()) {
        Py_DECREF(audio);
        return -1;
    }
    int rc = 0;
    if (PyBytes_Check(audio) && pos >= 0 && pos <= PyBytes_GET_SIZE(audio) &&
        audio == player->cover_audio && pos >= player->cover_pos && player->begun == prompt) {
        /* Within the cover's reach of its audio's end: the next segment joined now. */
        PyObject *joined = join_ahead(prompt, audio, pos, (horizon + 1) * FRAME);
        if (joined == NULL) {
            PyErr_Clear(); /* (not joined: covered as far as this audio goes) */
            Py_INCREF(audio);
            joined = audio;
        }
        if (joined != audio) {
            /* The same bytes from `pos` on, now from 0: what was covered stays. */
            player->covered -= pos;
            player->cover_pos = pos = 0;
            Py_INCREF(joined);
            Py_XSETREF(player->cover_audio, joined);
        }
        Py_SETREF(audio, joined);
    }
    if (PyBytes_Check(audio) && pos >= 0) {
        if (audio != player->cover_audio || pos < player->cover_pos) {
            /* The prompt's next segment joined its audio (from `pos`: a new object, or
             * the segment itself when nothing was left, so `pos` went back): what was
             * covered stays right; the cover goes on from here. */
            Py_INCREF(audio);
            Py_XSETREF(player->cover_audio, audio);
            player->covered = pos;
        }
        player->cover_pos = pos;
        if (player->covered < pos)
            player->covered = pos;
        long long size = PyBytes_GET_SIZE(audio);
        long long ahead = (player->covered - pos) / FRAME;
        /* Topped up a batch at a time: a command every few slots, not every slot. */
        if (ahead <= horizon - COVER_BATCH) {
            while (ahead < horizon && player->covered + FRAME <= size) {
                long long frames = (size - player->covered) / FRAME;
                if (frames > COVER_BATCH)
                    frames = COVER_BATCH;
                if (frames > horizon - ahead)
                    frames = horizon - ahead;
                /* The frame after this slot's is the audio from `pos`, one slot on. */
                if (append_cover(out, fd, 1 + ahead, 0, PyBytes_AS_STRING(audio) + player->covered,
                                 (Py_ssize_t)(frames * FRAME)) < 0) {
                    rc = -1;
                    break;
                }
                player->covered += frames * FRAME;
                ahead += frames;
            }
        }
    }
    Py_DECREF(audio);
    return rc;
}

static PyObject *uncover(PyObject *module, PyObject *calls) {
    if (!PyList_Check(calls)) {
        PyErr_SetString(PyExc_TypeError, "uncover(calls: list)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(calls); i++) {
        PyObject *call = PyList_GET_ITEM(calls, i);
        if (!PyTuple_CheckExact(call) || PyTuple_GET_SIZE(call) != 2 ||
            !PyObject_TypeCheck(PyTuple_GET_ITEM(call, 0), types.inlet))
            continue;
        PyObject *player = ((Inlet *)PyTuple_GET_ITEM(call, 0))->player;
        if (player != NULL && PyObject_TypeCheck(player, &PlayerCoreType))
            ((PlayerCore *)player)->cover_dirty = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *cover_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "cover_all(calls: list, horizon) takes 2 arguments");
        return NULL;
    }
    long long horizon = PyLong_AsLongLong(args[1]);
    if (horizon == -1 && PyErr_Occurred())
        return NULL;
    PyObject *calls = args[0];
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(calls); i++) {
        /* each: (session, fd) */
        PyObject *call = PyList_GET_ITEM(calls, i);
        if (!PyTuple_CheckExact(call) || PyTuple_GET_SIZE(call) != 2)
            continue;
        if (cover_one(PyTuple_GET_ITEM(call, 0), PyTuple_GET_ITEM(call, 1), horizon, out) < 0)
            PyErr_Clear(); /* (a field unset or of another kind: that call is not covered) */
    }
    return out;
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
 * its leg for), -1 an exception. edge/mediaengine.py's _report is the reference. */
static int due(PyObject *object, int rtcp, double now) {
    if (!PyObject_TypeCheck(object, types.inlet))
        return 1;
    Inlet *session = (Inlet *)object;
    if (rtcp) {
        if (session->reports == NULL)
            return 1;
        PyObject *at = PyObject_GetAttr(session->reports, n_due);
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
    int quiet = empty(session->events);
    if (quiet <= 0)
        return quiet < 0 ? -1 : 1;
    quiet = empty(session->utterances);
    if (quiet <= 0)
        return quiet < 0 ? -1 : 1;
    if (!IS_NONE(session->transcriber))
        return 1;
    return session->timed_out != 0;
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
    {"uncover", (PyCFunction)uncover, METH_O,
     "uncover([(session, fd)]): what the media thread holds of each call's cover is not "
     "known (a cover command could not be queued): the next cover_all withdraws it all "
     "and gives it again."},
    {"cover_all", (PyCFunction)(void (*)(void))cover_all, METH_FASTCALL,
     "cover_all([(session, fd)], horizon) -> [(fd, first, clear, audio)]: for the media "
     "thread, each playing call's coming prompt audio, up to `horizon` frames after this "
     "tick's, topped up a few frames at a time (first: the slot after this tick's frame is "
     "1); clear where the prompt changed or stopped. Call it after the tick's frames."},
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
    INTERN(n_audio, "audio");
    INTERN(n_pos, "pos");
    INTERN(n_due, "due");
    INTERN(n_rest, "rest");
    INTERN(n_popleft, "popleft");
    if (import_inlet_types(&types) < 0)
        return NULL;
    if (PyType_Ready(&SenderCoreType) < 0 || PyType_Ready(&PlayerCoreType) < 0)
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
    Py_INCREF(&PlayerCoreType);
    if (PyModule_AddObject(m, "PlayerCore", (PyObject *)&PlayerCoreType) < 0) {
        Py_DECREF(&PlayerCoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
