/* A single-producer, single-consumer ring of fixed-size records, lock-free.
 *
 * Made for a media thread that runs without the GIL and Python to exchange records
 * (commands one way, events the other); its Python reference is media/ring.py. One side
 * only ever writes `head` (the producer) and the other only `tail` (the consumer); each
 * reads the other's index with acquire ordering and publishes its own with release
 * ordering, so a record's bytes are written before the index that makes them visible
 * (Lamport's ring, as in the Linux kernel's kfifo). Neither side takes a lock or waits:
 * a push into a full ring is refused and counted, a pop from an empty one returns
 * nothing. The storage is allocated once, when the ring is made: nothing is allocated
 * per record.
 *
 * The two indexes sit on cache lines of their own, so the producer's writes do not
 * invalidate the line the consumer polls, and the reverse.
 *
 * Python sees a Ring type (push, pop, len, capacity, record_size, dropped) and, for the
 * tests, produce_in_thread(): a native thread that pushes numbered records without the
 * GIL while Python pops them, which is how the media thread will use a ring.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_ringcore.h"

/* --- the Python type -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Ring *ring;
    int producing; /* a test producer thread uses it: it must outlive that thread */
} RingObject;

static int RingObject_init(RingObject *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"capacity", "record_size", NULL};
    Py_ssize_t capacity, record_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nn", keywords, &capacity, &record_size))
        return -1;
    if (capacity < 1 || capacity > (1 << 24) || record_size < 1 || record_size > 65536) {
        PyErr_SetString(PyExc_ValueError,
                        "capacity must be 1 to 16777216 records, record_size 1 to 65536 bytes");
        return -1;
    }
    if (self->ring != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Ring is made once");
        return -1;
    }
    self->ring = ring_new((size_t)capacity, (size_t)record_size);
    if (self->ring == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void RingObject_dealloc(RingObject *self) {
    ring_free(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ready(RingObject *self) {
    if (self->ring == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Ring was not initialised");
        return 0;
    }
    return 1;
}

static PyObject *RingObject_push(RingObject *self, PyObject *arg) {
    if (!ready(self))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if ((size_t)view.len != self->ring->record_size) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "a record is %zu bytes, not %zd",
                            self->ring->record_size, view.len);
    }
    int pushed = ring_push(self->ring, view.buf);
    PyBuffer_Release(&view);
    return PyBool_FromLong(pushed);
}

static PyObject *RingObject_pop(RingObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready(self))
        return NULL;
    PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)self->ring->record_size);
    if (record == NULL)
        return NULL;
    if (!ring_pop(self->ring, PyBytes_AS_STRING(record))) {
        Py_DECREF(record);
        Py_RETURN_NONE;
    }
    return record;
}

static Py_ssize_t RingObject_len(RingObject *self) {
    return self->ring == NULL ? 0 : (Py_ssize_t)ring_len(self->ring);
}

static PyObject *RingObject_get_capacity(RingObject *self, void *Py_UNUSED(closure)) {
    return ready(self) ? PyLong_FromSize_t(self->ring->mask + 1) : NULL;
}

static PyObject *RingObject_get_record_size(RingObject *self, void *Py_UNUSED(closure)) {
    return ready(self) ? PyLong_FromSize_t(self->ring->record_size) : NULL;
}

static PyObject *RingObject_get_dropped(RingObject *self, void *Py_UNUSED(closure)) {
    if (!ready(self))
        return NULL;
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit(&self->ring->dropped, memory_order_relaxed));
}

static PyMethodDef RingObject_methods[] = {
    {"push", (PyCFunction)RingObject_push, METH_O,
     "push(record) -> bool: copy one record in (False, and counted in dropped, if full)."},
    {"pop", (PyCFunction)RingObject_pop, METH_NOARGS,
     "pop() -> bytes | None: the oldest record, or None if the ring is empty."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef RingObject_getset[] = {
    {"capacity", (getter)RingObject_get_capacity, NULL, "records it holds (a power of two)",
     NULL},
    {"record_size", (getter)RingObject_get_record_size, NULL, "bytes per record", NULL},
    {"dropped", (getter)RingObject_get_dropped, NULL, "pushes refused because it was full",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods RingObject_as_sequence = {
    .sq_length = (lenfunc)RingObject_len,
};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "callhook.media._ring.Ring",
    .tp_doc = PyDoc_STR("Ring(capacity, record_size): a lock-free single-producer, "
                        "single-consumer ring of fixed-size records."),
    .tp_basicsize = sizeof(RingObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RingObject_init,
    .tp_dealloc = (destructor)RingObject_dealloc,
    .tp_methods = RingObject_methods,
    .tp_getset = RingObject_getset,
    .tp_as_sequence = &RingObject_as_sequence,
};

/* --- a native producer, for the tests ------------------------------------------------------ */

/* A consumer that stops taking records for this long ends the test producer early. */
#define PRODUCER_PATIENCE_NS 10000000000LL

typedef struct {
    Ring *ring;
    unsigned long long count;
    unsigned long long pushed; /* records pushed */
    unsigned long long full;   /* pushes that found the ring full and were retried */
} Producer;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Push records 0 .. count-1 (each record starts with its number, native-endian), retrying
 * a push that finds the ring full: no record may be lost, and none waits on Python. If
 * the ring stays full for PRODUCER_PATIENCE_NS (nobody consumes: a broken test), stop. */
static void *produce(void *arg) {
    Producer *producer = arg;
    Ring *ring = producer->ring;
    unsigned char *record = calloc(1, ring->record_size);
    if (record == NULL)
        return NULL;
    size_t prefix = ring->record_size < 8 ? ring->record_size : 8;
    for (unsigned long long i = 0; i < producer->count; i++) {
        memcpy(record, &i, prefix);
        long long since = 0;
        while (1) {
            size_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
            size_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
            if (head - tail <= ring->mask)
                break;
            producer->full++;
            if (since == 0)
                since = now_ns();
            else if (now_ns() - since > PRODUCER_PATIENCE_NS)
                goto done;
            sched_yield();
        }
        ring_push(ring, record);
        producer->pushed++;
    }
done:
    free(record);
    return NULL;
}

typedef struct {
    PyObject_HEAD
    PyObject *ring; /* the RingObject, held until joined */
    Producer producer;
    pthread_t thread;
    int running;
} ProducerObject;

static PyObject *ProducerObject_join(ProducerObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->running) {
        pthread_t thread = self->thread;
        Py_BEGIN_ALLOW_THREADS
        pthread_join(thread, NULL);
        Py_END_ALLOW_THREADS
        self->running = 0;
        ((RingObject *)self->ring)->producing = 0;
    }
    return Py_BuildValue("KK", self->producer.pushed, self->producer.full);
}

static void ProducerObject_dealloc(ProducerObject *self) {
    if (self->running) /* never leave a thread writing into a ring that may go */
        pthread_join(self->thread, NULL);
    Py_XDECREF(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef ProducerObject_methods[] = {
    {"join", (PyCFunction)ProducerObject_join, METH_NOARGS,
     "join() -> (pushed, full): wait for the thread; the records it pushed, and how many "
     "of its pushes found the ring full (and were retried)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProducerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "callhook.media._ring.Producer",
    .tp_doc = PyDoc_STR("A native thread pushing numbered records (produce_in_thread)."),
    .tp_basicsize = sizeof(ProducerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)ProducerObject_dealloc,
    .tp_methods = ProducerObject_methods,
};

static PyObject *produce_in_thread(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *ring;
    unsigned long long count;
    if (!PyArg_ParseTuple(args, "O!K", &RingType, &ring, &count))
        return NULL;
    RingObject *target = (RingObject *)ring;
    if (!ready(target))
        return NULL;
    if (target->producing) {
        PyErr_SetString(PyExc_RuntimeError, "the ring has a producer already (one only)");
        return NULL;
    }
    ProducerObject *self = PyObject_New(ProducerObject, &ProducerType);
    if (self == NULL)
        return NULL;
    Py_INCREF(ring);
    self->ring = ring;
    self->producer.ring = target->ring;
    self->producer.count = count;
    self->producer.full = 0;
    self->producer.pushed = 0;
    self->running = 0;
    if (pthread_create(&self->thread, NULL, produce, &self->producer) != 0) {
        Py_DECREF(self);
        return PyErr_Format(PyExc_OSError, "cannot start a thread");
    }
    self->running = 1;
    target->producing = 1;
    return (PyObject *)self;
}

static PyMethodDef module_methods[] = {
    {"produce_in_thread", produce_in_thread, METH_VARARGS,
     "produce_in_thread(ring, count) -> Producer: a native thread pushes records numbered "
     "0 to count-1 (the number in each record's first 8 bytes, native-endian) without the "
     "GIL, retrying while the ring is full (for 10 s at most: then it stops)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.media._ring",
    .m_doc = "A lock-free single-producer, single-consumer ring of fixed-size records.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__ring(void) {
    if (PyType_Ready(&RingType) < 0 || PyType_Ready(&ProducerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RingType);
    if (PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0) {
        Py_DECREF(&RingType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
