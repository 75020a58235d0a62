/* A call's usual receive handed to the media thread and taken back: Python's side (with
 * the GIL), part of _plane.c, included after its Port and Plane.
 *
 * Plane.own(calls) gives the thread the lines whose receive is in its usual state (_rx.h
 * says which, and why): the session's fields the usual packet changes are copied into the
 * line's Rx, and the session keeps neutral values meanwhile (no audio clock, no dead-call
 * clock: its own tick then has nothing to do for the line's receive; the thread does it).
 * Plane.reclaim(fd, session, slot), and a line the thread gave back (found when its next
 * datagram, or its RETURNED record, is read), copy them back, then have the session
 * write the recording's frames the thread took (MediaSession._recorded); a RECORDED
 * record has it write them while the thread goes on with the line.  The session
 * marks the hand-over (Inlet.rx_owned); session.py takes its state back before anything
 * of its own reads or changes it (MediaSession.reclaim).
 *
 * Where Python is behind the thread, own() first has the line hold its packets (_rx.h's
 * `park`) and hands it over once Python has read the last one the thread published; a
 * line it keeps after all, or one the thread gives back with packets still held, has
 * them joined to their slots' datagrams (Plane.next_slot), so Python works each in its
 * slot as if the thread had published it.
 */

/* Slots a line the thread gave back for a packet it does not take stays Python's: a
 * caller whose packets are never usual (a header extension on each, say) is not handed
 * over and back every slot. */
#define RX_REST 10
#ifndef CALLHOOK_EDGE_RXPY_H
#define CALLHOOK_EDGE_RXPY_H

#include "../media/_gate.h"
#include "../media/_inlet.h"
#include "../media/_preroll.h"
#include "_rx.h"

/* The session's, its receiver's, its detector's and its pre-roll's types, and deque's
 * (rx_ready -1: an extension missing or built from another layout: nothing is handed over). */
static InletTypes rx_types;
static PyTypeObject *rx_gate_type, *rx_preroll_type, *rx_deque_type;
static int rx_ready;
static PyObject *rx_clear_name, *rx_append_name, *rx_maxlen_name, *rx_gain_db_name,
    *rx_gain_name, *rx_recorded_name, *rx_model_floor_name, *rx_max_gain_name,
    *rx_gain_step_name;
static PyObject *rx_frombuffer, *rx_int16; /* numpy's, for the detector's pre-roll */
static int16_t rx_laws[2][256]; /* μ-law and A-law decoded: g711.py's tables */

static PyTypeObject *rx_type_of(const char *module_name, const char *name) {
    PyObject *module = PyImport_ImportModule(module_name);
    PyObject *type = module == NULL ? NULL : PyObject_GetAttrString(module, name);
    Py_XDECREF(module);
    if (type != NULL && !PyType_Check(type))
        Py_CLEAR(type);
    return (PyTypeObject *)type; /* kept for the process's life */
}

/* g711.py's table `name` into `table`: 0, or -1 with an exception. */
static int rx_law(PyObject *g711, const char *name, int16_t *table) {
    PyObject *array = PyObject_GetAttrString(g711, name);
    if (array == NULL)
        return -1;
    Py_buffer view;
    int rc = PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
    Py_DECREF(array);
    if (rc < 0)
        return -1;
    rc = view.len == 256 * (Py_ssize_t)sizeof(int16_t) && view.itemsize == sizeof(int16_t)
             ? 0
             : -1;
    if (rc == 0)
        memcpy(table, view.buf, 256 * sizeof(int16_t));
    else
        PyErr_SetString(PyExc_ValueError, "g711's table is not 256 int16 samples");
    PyBuffer_Release(&view);
    return rc;
}

static int rx_import(void) {
    if (rx_ready)
        return rx_ready;
    rx_ready = -1;
    rx_clear_name = PyUnicode_InternFromString("clear");
    rx_append_name = PyUnicode_InternFromString("append");
    rx_maxlen_name = PyUnicode_InternFromString("maxlen");
    rx_gain_db_name = PyUnicode_InternFromString("model_gain_db");
    rx_gain_name = PyUnicode_InternFromString("_gain");
    rx_recorded_name = PyUnicode_InternFromString("_recorded");
    rx_model_floor_name = PyUnicode_InternFromString("MODEL_FLOOR_DBFS");
    rx_max_gain_name = PyUnicode_InternFromString("MAX_GAIN_DB");
    rx_gain_step_name = PyUnicode_InternFromString("GAIN_STEP_DB");
    if (!rx_clear_name || !rx_append_name || !rx_maxlen_name || !rx_gain_db_name ||
        !rx_gain_name || !rx_recorded_name || !rx_model_floor_name || !rx_max_gain_name ||
        !rx_gain_step_name ||
        import_inlet_types(&rx_types) < 0 || (rx_gate_type = import_gate_type()) == NULL ||
        (rx_preroll_type = rx_type_of("callhook.media._inlet", "Preroll")) == NULL ||
        (rx_deque_type = rx_type_of("collections", "deque")) == NULL ||
        rx_preroll_type->tp_basicsize != (Py_ssize_t)sizeof(Preroll)) {
        PyErr_Clear();
        return -1;
    }
    PyObject *numpy = PyImport_ImportModule("numpy");
    rx_frombuffer = numpy == NULL ? NULL : PyObject_GetAttrString(numpy, "frombuffer");
    rx_int16 = numpy == NULL ? NULL : PyObject_GetAttrString(numpy, "int16");
    Py_XDECREF(numpy);
    if (rx_frombuffer == NULL || rx_int16 == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *g711 = PyImport_ImportModule("callhook.media.g711");
    int laws = g711 == NULL ? -1
                            : rx_law(g711, "ULAW_DECODE", rx_laws[0]) |
                                  rx_law(g711, "ALAW_DECODE", rx_laws[1]);
    Py_XDECREF(g711);
    if (laws < 0) {
        PyErr_Clear();
        return -1;
    }
    rx_ready = 1;
    return 1;
}

/* The state the detector `v` is in, as the thread holds it (_rx.h's RX_RESTING, RX_CLOSED,
 * RX_HELD), or -1: one the thread does not take (the model deciding an onset, or
 * ending utterances). */
static int rx_mode(const GateCore *v) {
    if (v->paused)
        return v->gate ? -1 : RX_RESTING;
    if (!v->gate && !v->active)
        return RX_CLOSED;
    if (v->gate && v->active && !v->model_holds)
        return RX_HELD;
    return -1;
}

/* Whether the session `object` (`s`) is in the usual state the thread takes over
 * (session.py's receive() and _audio(): latched, plain, batched, nothing but detection
 * and a recording of the caller hear the caller; detect(): the detector alone, in a
 * state the thread holds). Only reads. */
static int rx_usual(PyObject *object) {
    if (!PyObject_TypeCheck(object, rx_types.inlet))
        return 0;
    Inlet *s = (Inlet *)object;
    if (s->rx_owned || !IS_NONE(s->srtp) || !s->latched || IS_NONE(s->remote) || !s->batched ||
        s->timed_out || !IS_NONE(s->tells) || !IS_NONE(s->hears) ||
        !IS_NONE(s->call_recording) || !IS_NONE(s->transcriber) ||
        !IS_NONE(s->tones) || !IS_NONE(s->meter) || !IS_NONE(s->classifier) ||
        s->recognising)
        return 0;
    if (s->undetected == NULL || !PyList_CheckExact(s->undetected) ||
        PyList_GET_SIZE(s->undetected) != 0 || s->law == NULL || !PyUnicode_Check(s->law) ||
        s->payload_type < 0 || s->payload_type > 127 || s->flood_limit < 0 ||
        (!IS_NONE(s->rtp_since) && !PyFloat_CheckExact(s->rtp_since)))
        return 0;
    if (s->receiver == NULL || !PyObject_TypeCheck(s->receiver, rx_types.receiver))
        return 0;
    ReceiverCore *r = (ReceiverCore *)s->receiver;
    if (r->ssrc == NULL || !PyLong_CheckExact(r->ssrc) || r->held == NULL ||
        !PyDict_CheckExact(r->held) || PyDict_GET_SIZE(r->held) != 0 ||
        r->candidates == NULL || !PyList_CheckExact(r->candidates) ||
        PyList_GET_SIZE(r->candidates) != 0 || r->counts.next < 0)
        return 0;
    int overflow = 0;
    long long ssrc = PyLong_AsLongLongAndOverflow(r->ssrc, &overflow);
    if (overflow || ssrc < 0 || ssrc > 0xFFFFFFFFLL)
        return 0;
    if (s->vad == NULL || !PyObject_TypeCheck(s->vad, rx_gate_type))
        return 0;
    GateCore *v = (GateCore *)s->vad;
    if (IS_NONE(v->model) || rx_mode(v) < 0 || v->hangover_frames < 1 ||
        v->block_frames < 1 || v->blocks == NULL || !Py_IS_TYPE(v->blocks, rx_deque_type) ||
        v->preroll == NULL || !Py_IS_TYPE(v->preroll, rx_deque_type))
        return 0;
    if (s->preroll == NULL || !Py_IS_TYPE(s->preroll, rx_preroll_type))
        return 0;
    Preroll *pre = (Preroll *)s->preroll;
    if (pre->payloads == NULL || pre->maxlen < 1 || pre->maxlen > RX_PREROLL)
        return 0;
    for (Py_ssize_t i = 0; i < pre->size; i++) {
        PyObject *payload = pre->payloads[(pre->head + i) % pre->maxlen];
        if (!PyBytes_CheckExact(payload) || PyBytes_GET_SIZE(payload) != RX_FRAME)
            return 0;
    }
    return 1;
}

/* A float attribute of `object` (model_gain_db, ...) into *value: 0, or -1 (cleared). */
static int rx_float_attr(PyObject *object, PyObject *name, double *value) {
    PyObject *got = PyObject_GetAttr(object, name);
    *value = got == NULL ? -1.0 : PyFloat_AsDouble(got);
    Py_XDECREF(got);
    if (*value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* An iterator over `deque`, whose maxlen (*maxlen) is at most `limit` and which holds
 * *size items; or NULL (cleared: no bound, or one past `limit`). */
static PyObject *rx_deque_iter(PyObject *deque, Py_ssize_t limit, Py_ssize_t *maxlen,
                               Py_ssize_t *size) {
    PyObject *bound = PyObject_GetAttr(deque, rx_maxlen_name);
    *maxlen = bound == NULL || !PyLong_Check(bound) ? -1 : PyLong_AsSsize_t(bound);
    Py_XDECREF(bound);
    *size = PyObject_Length(deque);
    PyObject *it = *maxlen < 1 || *maxlen > limit || *size < 0 || *size > *maxlen
                       ? NULL
                       : PyObject_GetIter(deque);
    if (it == NULL)
        PyErr_Clear();
    return it;
}

/* The detector's pre-roll (a deque of int16 frames of RX_FRAME samples, vad.py's
 * _preroll) into `rx`: 0, or -1 (cleared: frames not what vad.py keeps). */
static int rx_vpre_export(PyObject *deque, Rx *rx) {
    Py_ssize_t maxlen, size;
    PyObject *it = rx_deque_iter(deque, RX_VAD_PREROLL, &maxlen, &size);
    if (it == NULL)
        return -1;
    PyObject *item;
    int n = 0, bad = 0;
    while (!bad && (item = PyIter_Next(it)) != NULL) {
        Py_buffer view;
        if (n >= RX_VAD_PREROLL ||
            PyObject_GetBuffer(item, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            bad = 1;
        } else {
            bad = view.itemsize != 2 || view.len != RX_FRAME * 2 || view.format == NULL ||
                  strcmp(view.format, "h") != 0;
            if (!bad)
                memcpy(rx->vpre[n++], view.buf, RX_FRAME * 2);
            PyBuffer_Release(&view);
        }
        Py_DECREF(item);
    }
    Py_DECREF(it);
    if (bad || PyErr_Occurred() || n != size) {
        PyErr_Clear();
        return -1;
    }
    rx->vpre_max = (int)maxlen;
    rx->vpre_head = 0;
    rx->vpre_size = n;
    rx->vpre_changed = 0;
    return 0;
}

/* The session's state into `rx` (which Python holds): 0, or -1 (not handed over; no
 * exception: a detector's blocks or pre-roll that are not what vad.py makes). */
static int rx_export(Inlet *s, const struct sockaddr_in6 *peer, uint32_t peer_len,
                     const int16_t *table, const Core *c, Rx *rx) {
    ReceiverCore *r = (ReceiverCore *)s->receiver;
    GateCore *v = (GateCore *)s->vad;
    Preroll *pre = (Preroll *)s->preroll;
    Py_ssize_t maxlen, size;
    PyObject *it = rx_deque_iter(v->blocks, RX_BLOCKS, &maxlen, &size);
    if (it == NULL)
        return -1;
    PyObject *item;
    int n = 0;
    while ((item = PyIter_Next(it)) != NULL) {
        double value = PyFloat_CheckExact(item) && n < RX_BLOCKS ? PyFloat_AS_DOUBLE(item) : NAN;
        Py_DECREF(item);
        if (isnan(value))
            break;
        rx->blocks[n++] = value;
    }
    Py_DECREF(it);
    if (PyErr_Occurred() || n != size) {
        PyErr_Clear();
        return -1;
    }
    rx->blocks_max = (int)maxlen;
    rx->blocks_head = 0;
    rx->blocks_size = n;
    rx->mode = rx_mode(v);
    rx->vpre_size = rx->vpre_changed = 0;
    if (rx->mode == RX_CLOSED) {
        PyObject *detector = (PyObject *)v; /* (its class's constants as self.X reads them) */
        if (rx_vpre_export(v->preroll, rx) < 0 ||
            rx_float_attr(detector, rx_gain_db_name, &rx->gain_db) < 0 ||
            rx_float_attr(detector, rx_gain_name, &rx->gain) < 0 ||
            rx_float_attr(detector, rx_model_floor_name, &rx->model_floor_dbfs) < 0 ||
            rx_float_attr(detector, rx_max_gain_name, &rx->max_gain_db) < 0 ||
            rx_float_attr(detector, rx_gain_step_name, &rx->gain_step_db) < 0)
            return -1;
    }
    memcpy(&rx->peer, peer, peer_len);
    rx->peer_len = peer_len;
    rx->payload_type = (int)s->payload_type;
    rx->ssrc = (uint32_t)PyLong_AsUnsignedLongLong(r->ssrc);
    rx->counts = r->counts;
    rx->bucket_count = s->bucket_count;
    rx->flood_limit = s->flood_limit;
    rx->bucket_start = s->bucket_start;
    rx->last_audio = s->last_audio;
    rx->last_heard = s->last_heard;
    rx->silent_after = s->silent_after;
    rx->since_set = !IS_NONE(s->rtp_since);
    rx->rtp_since = rx->since_set ? PyFloat_AS_DOUBLE(s->rtp_since) : 0.0;
    rx->rtp_timeout = s->rtp_timeout;
    rx->expects_rtp = s->expects_rtp;
    memcpy(rx->table, table, sizeof(rx->table));
    rx->silence_power = 0.0; /* session.py's _silence_pcm: zeros */
    rx->pre_max = (int)pre->maxlen;
    rx->pre_head = 0;
    rx->pre_size = (int)pre->size;
    for (Py_ssize_t i = 0; i < pre->size; i++) {
        Py_ssize_t k = (pre->head + i) % pre->maxlen;
        rx->pre_ts[i] = pre->timestamps[k];
        memcpy(rx->pre[i], PyBytes_AS_STRING(pre->payloads[k]), RX_FRAME);
    }
    rx->run = v->run;
    rx->closed_for = v->closed_for;
    rx->block_count = v->block_count;
    rx->hangover_frames = v->hangover_frames;
    rx->block_frames = v->block_frames;
    rx->closed_long = v->closed_long;
    rx->origin = c->origin;
    rx->tick = c->tick;
    rx->block_min = v->block_min;
    rx->history_floor = v->history_floor;
    rx->prior = v->prior;
    rx->active = v->active;
    rx->gate_quiet = v->gate_quiet;
    rx->margin = v->margin;
    rx->min_power = v->min_power;
    rx->start_power = v->start_power;
    rx->hold = v->hold;
    rx->release = v->release;
    rx->gain_floor = v->gain_floor;
    rx->says_speech = v->says_speech;
    rx->recording = !IS_NONE(s->recording);
    rx->rec_size = rx->rec_full = rx->rec_told = 0;
    return 0;
}

/* The session is the thread's: its own clocks rest (its tick reads them). */
static void rx_handed(Inlet *s) {
    s->rx_owned = 1;
    s->last_audio = 0.0;
    Py_INCREF(Py_None);
    Py_XSETREF(s->rtp_since, Py_None);
}

/* `container` (a pre-roll, a deque) cleared, then given each of `items` (a list) in
 * order: 0, or -1 with an exception. */
static int rx_refill(PyObject *container, PyObject *items) {
    PyObject *done = PyObject_CallMethodNoArgs(container, rx_clear_name);
    for (Py_ssize_t i = 0; done != NULL && i < PyList_GET_SIZE(items); i++) {
        Py_DECREF(done);
        done = PyObject_CallMethodOneArg(container, rx_append_name, PyList_GET_ITEM(items, i));
    }
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

/* `n` frames of a recording (`ts`, `frames`, taken in slots of times `at`), written by
 * the session, its state Python's or the thread going on with the line: a failure of the
 * session's own is said as an unraisable exception (a bug: the recording's failures are
 * its events). */
static void rx_write_frames(Inlet *s, int n, const long long *ts, const double *at,
                            const unsigned char (*frames)[RX_FRAME]) {
    if (n == 0)
        return;
    PyObject *list = PyList_New(n);
    for (int i = 0; list != NULL && i < n; i++) {
        PyObject *frame =
            Py_BuildValue("(Ly#d)", ts[i], (const char *)frames[i], (Py_ssize_t)RX_FRAME, at[i]);
        if (frame == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, frame);
    }
    Py_INCREF(s);
    PyObject *done =
        list == NULL ? NULL : PyObject_CallMethodOneArg((PyObject *)s, rx_recorded_name, list);
    Py_XDECREF(list);
    if (done == NULL)
        PyErr_WriteUnraisable((PyObject *)s);
    Py_XDECREF(done);
    Py_DECREF(s);
}

/* The recording's frames the thread took, written once its state is the session's. */
static void rx_write_recorded(Inlet *s, Rx *rx) {
    int n = rx->rec_size;
    rx->rec_size = rx->rec_told = 0;
    rx_write_frames(s, n, rx->rec_ts, rx->rec_at, (const unsigned char (*)[RX_FRAME])rx->rec);
}

/* `rx` (Python's again) back into the session: 0, or -1 with an exception (nothing
 * changed but, in a deque's failure, its contents: the session stays marked, and the
 * next reclaim copies it again). */
static int rx_restore(Inlet *s, Rx *rx) {
    ReceiverCore *r = (ReceiverCore *)s->receiver;
    GateCore *v = (GateCore *)s->vad;
    PyObject *since = NULL, *frames = NULL, *blocks = NULL, *vpre = NULL;
    PyObject *gain_db = NULL, *gain = NULL;
    since = rx->since_set ? PyFloat_FromDouble(rx->rtp_since) : Py_NewRef(Py_None);
    frames = PyList_New(rx->pre_size);
    blocks = PyList_New(rx->blocks_size);
    if (since == NULL || frames == NULL || blocks == NULL)
        goto error;
    if (rx->mode == RX_CLOSED) {
        gain_db = PyFloat_FromDouble(rx->gain_db);
        gain = PyFloat_FromDouble(rx->gain);
        if (gain_db == NULL || gain == NULL)
            goto error;
    }
    if (rx->vpre_changed) {
        /* (Each frame its own writable buffer, as vad.py's frame.copy() is.) */
        if ((vpre = PyList_New(rx->vpre_size)) == NULL)
            goto error;
        for (int i = 0; i < rx->vpre_size; i++) {
            int k = (rx->vpre_head + i) % rx->vpre_max;
            PyObject *buffer = PyByteArray_FromStringAndSize((const char *)rx->vpre[k],
                                                             (Py_ssize_t)sizeof(rx->vpre[k]));
            PyObject *frame = buffer == NULL ? NULL
                                             : PyObject_CallFunctionObjArgs(
                                                   rx_frombuffer, buffer, rx_int16, NULL);
            Py_XDECREF(buffer);
            if (frame == NULL)
                goto error;
            PyList_SET_ITEM(vpre, i, frame);
        }
    }
    for (int i = 0; i < rx->pre_size; i++) {
        int k = (rx->pre_head + i) % rx->pre_max;
        PyObject *frame = Py_BuildValue("(Ly#)", rx->pre_ts[k], (const char *)rx->pre[k],
                                        (Py_ssize_t)RX_FRAME);
        if (frame == NULL)
            goto error;
        PyList_SET_ITEM(frames, i, frame);
    }
    for (int i = 0; i < rx->blocks_size; i++) {
        PyObject *value = PyFloat_FromDouble(rx->blocks[(rx->blocks_head + i) % rx->blocks_max]);
        if (value == NULL)
            goto error;
        PyList_SET_ITEM(blocks, i, value);
    }
    /* The containers and attributes first: they are what may fail. */
    if (rx_refill(s->preroll, frames) < 0 || rx_refill(v->blocks, blocks) < 0 ||
        (vpre != NULL && rx_refill(v->preroll, vpre) < 0) ||
        (gain_db != NULL && (PyObject_SetAttr((PyObject *)v, rx_gain_db_name, gain_db) < 0 ||
                             PyObject_SetAttr((PyObject *)v, rx_gain_name, gain) < 0)))
        goto error;
    rx->vpre_changed = 0;
    Py_XSETREF(s->rtp_since, since);
    s->bucket_count = rx->bucket_count;
    s->bucket_start = rx->bucket_start;
    s->last_audio = rx->last_audio;
    s->last_heard = rx->last_heard;
    r->counts = rx->counts;
    v->run = rx->run;
    v->closed_for = rx->closed_for;
    v->block_count = rx->block_count;
    v->block_min = rx->block_min;
    v->history_floor = rx->history_floor;
    v->prior = (char)rx->prior;
    v->gate = rx->mode == RX_HELD;
    v->gate_quiet = rx->gate_quiet;
    v->gain_floor = rx->gain_floor;
    /* (Half a slot on: a slot Python works without its record, the ring full, has a
     * time it computes, which may differ from this one in its last bit.) */
    s->rx_until = rx->ended >= 0 ? rx_time(rx, rx->ended) + (double)rx->tick / 2e9 : 0.0;
    s->rx_owned = 0;
    Py_DECREF(frames);
    Py_DECREF(blocks);
    Py_XDECREF(vpre);
    Py_XDECREF(gain_db);
    Py_XDECREF(gain);
    rx_write_recorded(s, rx);
    return 0;
error:
    Py_XDECREF(since);
    Py_XDECREF(frames);
    Py_XDECREF(blocks);
    Py_XDECREF(vpre);
    Py_XDECREF(gain_db);
    Py_XDECREF(gain);
    return -1;
}

/* The session the port's datagrams are for (a borrowed reference), or NULL: not a
 * call's RTP socket. */
static Inlet *rx_session(Port *port) {
    if (port->key == NULL || port->rx == NULL || !PyTuple_CheckExact(port->key) ||
        PyTuple_GET_SIZE(port->key) != 2)
        return NULL;
    PyObject *session = PyTuple_GET_ITEM(port->key, 1);
    if (rx_ready != 1 || !PyObject_TypeCheck(session, rx_types.inlet))
        return NULL;
    return (Inlet *)session;
}

/* A RECORDED record: the recording's frames the thread holds, taken from it under the
 * line's lock (copied: the thread's tries of it are kept short) and written, the thread
 * going on with the line. (Where the line is Python's again, its restore writes them.) */
static void rx_recorded(Plane *self, int fd) {
    if (fd < 0 || fd >= self->nports)
        return;
    Port *port = &self->ports[fd];
    Inlet *s = rx_session(port);
    if (s == NULL || !s->rx_owned)
        return;
    Rx *rx = port->rx;
    long long ts[RX_RECORDS];
    double at[RX_RECORDS];
    unsigned char frames[RX_RECORDS][RX_FRAME];
    int n = 0;
    rx_lock(rx);
    if (atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD) {
        n = rx->rec_size;
        memcpy(ts, rx->rec_ts, (size_t)n * sizeof(ts[0]));
        memcpy(at, rx->rec_at, (size_t)n * sizeof(at[0]));
        memcpy(frames, rx->rec, (size_t)n * sizeof(frames[0]));
        rx->rec_size = rx->rec_told = 0;
    }
    rx_unlock(rx);
    rx_write_frames(s, n, ts, at, (const unsigned char (*)[RX_FRAME])frames);
}

/* The datagram (of slot `slot`) or RETURNED record (-1) just read for `fd`: where the
 * thread gave the line back, the session's state is copied back now, before the slot
 * that has it is worked. (A copy that fails is tried again by the session's reclaim.) */
static void rx_given_back(Plane *self, int fd, long long slot) {
    Port *port = &self->ports[fd];
    Inlet *s = rx_session(port);
    if (s == NULL || !s->rx_owned ||
        atomic_load_explicit(&port->rx->owner, memory_order_acquire) != RX_PYTHON)
        return;
    if (slot >= 0 && !port->rx->rec_full)
        port->rest = slot + RX_REST; /* (a recording's frames written: it goes again) */
    Py_INCREF(s);
    if (rx_restore(s, port->rx) < 0)
        PyErr_Clear();
    Py_DECREF(s);
}

/* Under the line's lock: the datagrams it holds into rx_held, and `park` withdrawn (the
 * thread publishes the line's datagrams again, as for any line that is Python's). */
static void rx_take_held(Rx *rx) {
    int n = rx->parked;
    rx_held.n = n;
    rx_held.over = rx->parked_over;
    memcpy(rx_held.items, rx->held, (size_t)n * sizeof(rx_held.items[0]));
    rx->parked = rx->parked_over = rx->parked_back = 0;
    atomic_store_explicit(&rx->park, 0, memory_order_relaxed);
}

/* Where datagrams waited in the kernel past what the line held (`over`): they reach
 * Python in a slot the thread has yet to run, so its tick feeds no silence for the
 * line's missing audio until then. */
static void rx_defer(Plane *self, Inlet *s) {
    Core *c = self->core;
    long long pass = atomic_load(&c->rx_pass);
    double until = (double)(c->origin + (pass + 1) * c->tick) / 1e9 + (double)c->tick / 2e9;
    if (s->rx_until < until)
        s->rx_until = until;
}

/* A line held for Python that Python keeps: its datagrams are Python's, to work in their
 * slots. -1 with an exception. */
static int rx_unhold(Plane *self, Port *port, Inlet *s, Rx *rx) {
    rx_lock(rx);
    rx_take_held(rx);
    rx_unlock(rx);
    if (rx_held.over)
        rx_defer(self, s);
    return rx_give_held(self, port);
}

static PyObject *Plane_own(Plane *self, PyObject *args) {
    PyObject *calls;
    long long slot;
    if (!PyArg_ParseTuple(args, "OL", &calls, &slot))
        return NULL;
    if (self->core == NULL || self->pending == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Plane is closed");
        return NULL;
    }
    if (rx_import() < 0)
        return PyLong_FromLong(0);
    PyObject *items = PySequence_Fast(calls, "own() takes a list of (session, fd)");
    if (items == NULL)
        return NULL;
    long handed = 0;
    int failed = 0;
    for (Py_ssize_t i = 0; !failed && i < PySequence_Fast_GET_SIZE(items); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2)
            continue;
        PyObject *object = PyTuple_GET_ITEM(item, 0);
        if (!PyObject_TypeCheck(object, rx_types.inlet))
            continue;
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
        if (fd == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            continue;
        }
        if (fd < 0 || fd >= self->nports)
            continue;
        Port *port = &self->ports[fd];
        Inlet *s = (Inlet *)object;
        Rx *rx = port->rx;
        if (rx_session(port) != s)
            continue;
        if (s->rx_owned) {
            /* Given back with datagrams the line still held (_plane.c's rx_unpark): the
             * state is Python's again, and so are they, each for its slot. */
            if (atomic_load_explicit(&rx->owner, memory_order_acquire) != RX_PYTHON)
                continue;
            rx_lock(rx);
            int back = rx->parked_back;
            if (back)
                rx_take_held(rx);
            rx_unlock(rx);
            if (!back)
                continue;
            if (!rx->rec_full)
                port->rest = slot + RX_REST;
            /* (Given first: the restore writes a recording's frames, Python code.) */
            failed = rx_give_held(self, port) < 0;
            Py_INCREF(s);
            if (rx_restore(s, rx) < 0)
                PyErr_Clear();
            if (rx_held.over)
                rx_defer(self, s);
            Py_DECREF(s);
            continue;
        }
        int parked = atomic_load_explicit(&rx->park, memory_order_relaxed);
        int usual = !port->retiring && slot >= port->rest && rx_usual(object) &&
                    port->from_obj != NULL;
        if (usual) {
            int same = PyObject_RichCompareBool(port->from_obj, s->remote, Py_EQ);
            if (same < 0)
                PyErr_Clear();
            usual = same > 0; /* (the last datagram came from elsewhere) */
        }
        if (!usual) {
            if (parked)
                failed = rx_unhold(self, port, s, rx) < 0;
            continue;
        }
        /* Every datagram the thread gave Python for the line read, none on its way. Where
         * the thread has begun a later slot than the one Python worked (Python is behind
         * it), it first holds the line's datagrams (`park`), for whoever takes them in
         * their slots: the thread, once Python has read the line's last one it published
         * and hands the line over (below), or Python (rx_unhold). */
        int on_time = atomic_load(&self->core->rx_pass) == slot;
        if (!on_time && !parked) {
            atomic_store_explicit(&rx->park, 1, memory_order_relaxed);
            self->parks++;
            continue;
        }
        if (atomic_load_explicit(&rx->published, memory_order_acquire) != port->popped)
            continue;
        int alaw = PyUnicode_CompareWithASCIIString(s->law, "alaw") == 0;
        if (rx_export(s, &port->from, port->from_len, rx_laws[alaw], self->core, rx) < 0) {
            if (parked)
                failed = rx_unhold(self, port, s, rx) < 0;
            continue;
        }
        /* Python's tick ended the slots up to `slot`, and the thread those it ended while
         * it held the line before (Inlet.rx_until). */
        if (rx->ended < slot)
            rx->ended = slot;
        int given = 0, late = 0;
        rx_lock(rx);
        /* Nothing on its way, and the thread has not begun the next slot, or holds what
         * it reads of the line since: it does the line's packets and ends from the next
         * slot on, the ones it holds first; Python did the ones before. (A datagram held
         * from a slot Python has worked without it: Python's, late.) */
        if (atomic_load_explicit(&rx->published, memory_order_relaxed) == port->popped) {
            if (rx->parked > 0 && rx->held[0].slot <= slot) {
                rx_take_held(rx);
                late = 1;
            } else if (atomic_load(&self->core->rx_pass) == slot ||
                       atomic_load_explicit(&rx->park, memory_order_relaxed)) {
                atomic_store_explicit(&rx->park, 0, memory_order_relaxed);
                atomic_store_explicit(&rx->owner, RX_THREAD, memory_order_relaxed);
                given = 1;
            }
        }
        rx_unlock(rx);
        if (late) {
            if (rx_held.over)
                rx_defer(self, s);
            failed = rx_give_held(self, port) < 0;
        }
        if (given) {
            rx_handed(s);
            handed++;
        }
    }
    Py_DECREF(items);
    self->handed += handed;
    if (failed)
        return NULL;
    return PyLong_FromLong(handed);
}

static PyObject *Plane_reclaim(Plane *self, PyObject *args) {
    int fd;
    PyObject *object;
    long long slot;
    if (!PyArg_ParseTuple(args, "iOL", &fd, &object, &slot))
        return NULL;
    if (rx_ready != 1 || !PyObject_TypeCheck(object, rx_types.inlet) ||
        !((Inlet *)object)->rx_owned)
        Py_RETURN_NONE;
    Inlet *s = (Inlet *)object;
    Port *port = fd >= 0 && fd < self->nports ? &self->ports[fd] : NULL;
    if (port == NULL || rx_session(port) != s) {
        s->rx_owned = 0; /* (its line is gone: what the thread held goes with it) */
        Py_RETURN_NONE;
    }
    Rx *rx = port->rx;
    rx_lock(rx);
    int held = atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD;
    atomic_store_explicit(&rx->owner, RX_PYTHON, memory_order_relaxed);
    /* Datagrams the line held that the thread has not taken yet (handed over, or given
     * back with them): Python's, each for its slot. */
    long long first = rx->parked > 0 ? rx->held[0].slot : -1;
    int back = rx->parked_back;
    int hold = rx->parked > 0 || back || atomic_load_explicit(&rx->park, memory_order_relaxed);
    if (hold)
        rx_take_held(rx);
    rx_unlock(rx);
    if (!held && !rx->rec_full &&
        (back || atomic_load_explicit(&rx->published, memory_order_acquire) != port->popped))
        port->rest = slot + RX_REST; /* (given back for a packet Python has yet to take) */
    int over = hold && rx_held.over;
    if (hold && rx_give_held(self, port) < 0) /* (first: the restore runs Python code) */
        return NULL;
    /* Python works slot `slot` (or has): the ends up to it that the thread has not done
     * yet are done now, as the thread would have (one that is Python's to do, a dead
     * line, its tick does next); up to the first held datagram's slot only. */
    if (held)
        rx_catch_up(rx, first >= 0 && first - 1 < slot ? first - 1 : slot);
    Py_INCREF(s);
    int rc = rx_restore(s, rx);
    if (rc == 0 && over)
        rx_defer(self, s);
    Py_DECREF(s);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

#endif
