/* The C layout of a call's media state, shared by the media tick's native modules.
 *
 * MediaSession (session.py) derives from Inlet and RtpReceiver (rtp.py) from
 * ReceiverCore, both defined by _inlet.c.  The fields the tick reads for every call
 * and every 20 ms live here, so that _inlet.c, _outlet.c and _gate.c read them as
 * struct fields instead of looking each one up by name through Python's attribute
 * machinery: under load that lookup, a dictionary probe and its cache misses per
 * field, per call, per tick, was about 5 % of a loaded serve's CPU (perf at 200
 * calls, issue 19).  Python code sees them as ordinary attributes (member
 * descriptors).
 *
 * _outlet.c and _gate.c do not define these types: they import them from
 * callhook.media._inlet when they load and check that the type's size is this
 * struct's, so the three are built from this one layout or not used at all.
 */
#ifndef CALLHOOK_MEDIA_INLET_H
#define CALLHOOK_MEDIA_INLET_H

#include <Python.h>

#include "_rtpcounts.h"

typedef struct {
    PyObject_HEAD
    PyObject *ssrc;       /* None or int */
    PyObject *held;       /* dict: packets held for reordering */
    PyObject *candidates; /* list: packets of another source */
    RtpCounts counts;     /* what the usual packet changes */
} ReceiverCore;

typedef struct {
    PyObject_HEAD
    PyObject *remote;         /* (host, port) or None */
    PyObject *srtp;           /* None: plain RTP */
    PyObject *receiver;       /* an RtpReceiver (a ReceiverCore) */
    PyObject *rtp_since;      /* None or float */
    PyObject *tells;          /* a bridge's feed, or None */
    PyObject *call_recording; /* or None */
    PyObject *recording;      /* or None */
    PyObject *preroll;        /* deque of (timestamp, payload) */
    PyObject *undetected;     /* list of payloads */
    /* Read by the tick's other steps (_outlet.c, _gate.c); all set by MediaSession. */
    PyObject *law;         /* "ulaw" or "alaw" */
    PyObject *hears;       /* a bridge's feed, or None */
    PyObject *transcriber; /* or None */
    PyObject *tones;       /* the in-band digit detector, or None */
    PyObject *meter;       /* the level meter, or None */
    PyObject *classifier;  /* the callee classifier, or None */
    PyObject *vad;         /* the voice-activity detector */
    PyObject *sender;      /* the RtpSender */
    PyObject *player;      /* the Player */
    PyObject *reports;     /* the CallReports (RTCP) */
    PyObject *events;      /* deque of MediaEvent */
    PyObject *utterances;  /* deque of Utterance */
    /* The last source found equal to `remote` and that remote: while neither object
     * changes, the next packet from that source is known to come from the peer. */
    PyObject *seen_source;
    PyObject *seen_remote;
    long long payload_type;
    long long bucket_count;
    long long flood_limit;
    double bucket_start;
    double last_audio;
    double last_heard; /* when the last audio frame reached the host (session.py) */
    double silent_after;
    double rtp_timeout;
    unsigned long long declined_in; /* the take_all() call that left one of its packets */
    char latched;
    char batched;
    char sending;
    char recognising;
    char expects_rtp;
    char timed_out;
    /* The media thread holds the usual receive's state (edge/_rxpy.h): Python's copy of
     * it is stale until the session takes it back (session.py's reclaim). */
    char rx_owned;
    /* The slot time up to which the thread, holding it, did the tick's receive side (the
     * silence fill, the dead-call check): the session's tick does them after it only. */
    double rx_until;
} Inlet;

/* The types, as the module that defines them exports them (NULL until imported). */
typedef struct {
    PyTypeObject *inlet;
    PyTypeObject *receiver;
} InletTypes;

/* Import callhook.media._inlet's types into *types: 0, or -1 with an exception (the
 * module is missing, or was built from another layout than this header's). */
static inline int import_inlet_types(InletTypes *types) {
    PyObject *module = PyImport_ImportModule("callhook.media._inlet");
    if (module == NULL)
        return -1;
    PyObject *inlet = PyObject_GetAttrString(module, "Inlet");
    PyObject *receiver = inlet == NULL ? NULL : PyObject_GetAttrString(module, "ReceiverCore");
    Py_DECREF(module);
    if (receiver == NULL) {
        Py_XDECREF(inlet);
        return -1;
    }
    if (!PyType_Check(inlet) || !PyType_Check(receiver) ||
        ((PyTypeObject *)inlet)->tp_basicsize != (Py_ssize_t)sizeof(Inlet) ||
        ((PyTypeObject *)receiver)->tp_basicsize != (Py_ssize_t)sizeof(ReceiverCore)) {
        Py_DECREF(inlet);
        Py_DECREF(receiver);
        PyErr_SetString(PyExc_ImportError,
                        "callhook.media._inlet was built from another layout: rebuild");
        return -1;
    }
    types->inlet = (PyTypeObject *)inlet; /* kept for the process's life */
    types->receiver = (PyTypeObject *)receiver;
    return 0;
}

/* Whether o is None (or a field not set yet). */
#define IS_NONE(o) ((o) == NULL || (o) == Py_None)

#endif
