/* The pre-roll's ring (see _preroll.c), part of callhook.media._inlet. */
#ifndef CALLHOOK_MEDIA_PREROLL_H
#define CALLHOOK_MEDIA_PREROLL_H

#include <Python.h>

/* The last frames a caller sent, as (timestamp, payload), oldest first: session.py's
 * pre-roll (a recording or a recognition stream that starts hears them first).  A
 * fixed ring in C: the usual packet adds its frame with no tuple made and no method
 * called (at 200 calls that tuple was most of the young objects the collector
 * scanned, collector.py).  Python sees a bounded deque: append((ts, payload)),
 * len(), iteration, clear(), maxlen. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t maxlen;
    Py_ssize_t head; /* the oldest frame's slot */
    Py_ssize_t size;
    long long *timestamps;
    PyObject **payloads; /* exact bytes: they refer to nothing, so no GC support */
} Preroll;

/* The type, readied and added to the module by _inlet.c. */
extern PyTypeObject callhook_PrerollType;

/* Add a frame (a new reference to payload is kept); the oldest goes when full. The
 * ring must be initialised (payloads set). */
void callhook_preroll_push(Preroll *self, long long timestamp, PyObject *payload);

#endif
