/* The media tick's datagram IO in one call per tick: callhook.edge._udp.
 *
 * What this is for: the tick (callhook/edge/mediaengine.py) reads every call's RTP
 * socket and writes one packet to each, every 20 ms.  Done through Python's socket
 * objects that is an epoll list, a recvfrom and a sendto per call, each building and
 * parsing Python objects: about 3.4 us per call and tick above the system calls
 * themselves (bench/udp_io.py).  Here the whole batch is one call: the system calls
 * run with the GIL released (the speech and database threads run meanwhile), the
 * datagrams land in one buffer, and the Python objects are made afterwards.  A
 * sender's address is made into a Python tuple once, not once per packet: the same
 * object comes back while the source stays the same, and a destination is parsed
 * once while the same object is given.
 *
 * callhook/edge/udp.py has the same class in Python (PollingUdp): the one that
 * runs where this was not built, and the reference its tests compare this with.
 * Behaviour (the docstrings below) must stay the same in both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "_sockaddr.h"

typedef struct {
    PyObject *key;  /* NULL: the descriptor is not registered */
    int family;
    /* The last sender and its Python (host, port); from_obj NULL: none yet. */
    struct sockaddr_storage from;
    socklen_t from_len;
    PyObject *from_obj;
    /* The last destination object given and what it was parsed into. */
    PyObject *to_obj;
    struct sockaddr_storage to;
    socklen_t to_len;
} Slot;

typedef struct {
    int fd;
    Py_ssize_t offset;
    Py_ssize_t size;
    struct sockaddr_storage from;
    socklen_t from_len;
} Datagram;

typedef struct {
    int fd;
    const char *data;
    Py_ssize_t size;
    struct sockaddr_storage to; /* a copy: a later item may move the slot's */
    socklen_t to_len;
} Outgoing;

typedef struct {
    PyObject_HEAD
    int epfd;
    int rounds;
    Py_ssize_t max_size;
    Slot *slots; /* indexed by file descriptor */
    int nslots;
    int registered;
    struct epoll_event *events;
    char *arena; /* the datagrams of one receive(), one after the other */
    Datagram *got;
    Py_ssize_t capacity; /* datagrams the arena and `got` have room for */
    Outgoing *out;
    Py_ssize_t out_capacity;
} Udp;

static void slot_clear(Slot *slot) {
    Py_CLEAR(slot->key);
    Py_CLEAR(slot->from_obj);
    Py_CLEAR(slot->to_obj);
    slot->from_len = 0;
    slot->to_len = 0;
}

static int Udp_init(Udp *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"rounds", "max_size", NULL};
    int rounds;
    Py_ssize_t max_size = 2048;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|n", kwlist, &rounds, &max_size))
        return -1;
    if (rounds < 1 || max_size < 1) {
        PyErr_SetString(PyExc_ValueError, "rounds and max_size must be positive");
        return -1;
    }
    if (self->epfd >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "Udp is initialised already");
        return -1;
    }
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->rounds = rounds;
    self->max_size = max_size;
    return 0;
}

static PyObject *Udp_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Udp *self = (Udp *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->epfd = -1;
    return (PyObject *)self;
}

static int Udp_traverse(Udp *self, visitproc visit, void *arg) {
    for (int i = 0; i < self->nslots; i++) {
        Py_VISIT(self->slots[i].key);
        Py_VISIT(self->slots[i].from_obj);
        Py_VISIT(self->slots[i].to_obj);
    }
    return 0;
}

static int Udp_clear(Udp *self) {
    for (int i = 0; i < self->nslots; i++)
        slot_clear(&self->slots[i]);
    self->registered = 0;
    return 0;
}

static void Udp_dealloc(Udp *self) {
    PyObject_GC_UnTrack(self);
    Udp_clear(self);
    if (self->epfd >= 0)
        close(self->epfd);
    PyMem_Free(self->slots);
    PyMem_Free(self->events);
    PyMem_Free(self->arena);
    PyMem_Free(self->got);
    PyMem_Free(self->out);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(Udp *self) {
    if (self->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on a closed Udp");
        return -1;
    }
    return 0;
}

/* Room for `datagrams` datagrams of max_size in the arena (made before the GIL is let go:
 * nothing is allocated while it is). */
static int reserve(Udp *self, Py_ssize_t datagrams) {
    if (datagrams <= self->capacity)
        return 0;
    if (datagrams > PY_SSIZE_T_MAX / self->max_size) {
        PyErr_NoMemory();
        return -1;
    }
    char *arena = PyMem_Realloc(self->arena, (size_t)(datagrams * self->max_size));
    if (arena == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->arena = arena;
    Datagram *got = PyMem_Realloc(self->got, sizeof(Datagram) * (size_t)datagrams);
    if (got == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->got = got;
    self->capacity = datagrams;
    return 0;
}

static PyObject *Udp_add(Udp *self, PyObject *args) {
    PyObject *sock, *key;
    if (!PyArg_ParseTuple(args, "OO", &sock, &key))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    int fd = PyObject_AsFileDescriptor(sock);
    if (fd < 0)
        return NULL;
    if (fd >= self->nslots) {
        int n = fd + 64;
        Slot *slots = PyMem_Realloc(self->slots, sizeof(Slot) * (size_t)n);
        if (slots == NULL)
            return PyErr_NoMemory();
        memset(slots + self->nslots, 0, sizeof(Slot) * (size_t)(n - self->nslots));
        self->slots = slots;
        self->nslots = n;
    }
    Slot *slot = &self->slots[fd];
    if (slot->key != NULL) {
        PyErr_Format(PyExc_ValueError, "descriptor %d is registered already", fd);
        return NULL;
    }
    int family;
    socklen_t len = sizeof(family);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    struct epoll_event *events =
        PyMem_Realloc(self->events, sizeof(struct epoll_event) * (size_t)(self->registered + 1));
    if (events == NULL)
        return PyErr_NoMemory();
    self->events = events;
    struct epoll_event event = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &event) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    memset(slot, 0, sizeof(*slot));
    Py_INCREF(key);
    slot->key = key;
    slot->family = family;
    self->registered++;
    Py_RETURN_NONE;
}

static PyObject *Udp_remove(Udp *self, PyObject *arg) {
    int fd = PyObject_AsFileDescriptor(arg);
    if (fd < 0)
        return NULL;
    if (self->epfd < 0 || fd >= self->nslots || self->slots[fd].key == NULL)
        Py_RETURN_NONE;
    /* An error (the socket closed already) leaves nothing registered either. */
    epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL);
    slot_clear(&self->slots[fd]);
    self->registered--;
    Py_RETURN_NONE;
}

static PyObject *Udp_receive(Udp *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self) < 0)
        return NULL;
    PyObject *result = PyList_New(0);
    if (result == NULL || self->registered == 0)
        return result;
    if (reserve(self, (Py_ssize_t)self->registered * self->rounds) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    Py_ssize_t count = 0, used = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    /* Level-triggered: a socket with more waiting is ready again next round, so one
     * socket gives at most `rounds` datagrams (a flood stays in its kernel buffer). */
    for (int round = 0; round < self->rounds; round++) {
        int ready;
        do {
            ready = epoll_wait(self->epfd, self->events, self->registered, 0);
        } while (ready < 0 && errno == EINTR);
        if (ready < 0) {
            failed = errno;
            break;
        }
        if (ready == 0)
            break;
        for (int i = 0; i < ready; i++) {
            Datagram *d = &self->got[count];
            d->fd = self->events[i].data.fd;
            d->from_len = sizeof(d->from);
            ssize_t n = recvfrom(d->fd, self->arena + used, (size_t)self->max_size, 0,
                                 (struct sockaddr *)&d->from, &d->from_len);
            if (n < 0)
                continue; /* nothing after all, or an ICMP error queued on the socket */
            d->offset = used;
            d->size = n;
            used += n;
            count++;
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        errno = failed;
        Py_DECREF(result);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Datagram *d = &self->got[i];
        Slot *slot = &self->slots[d->fd];
        if (slot->from_obj == NULL || slot->from_len != d->from_len ||
            memcmp(&slot->from, &d->from, d->from_len) != 0) {
            PyObject *address = address_object((const struct sockaddr *)&d->from, d->from_len);
            if (address == NULL)
                goto error;
            Py_XSETREF(slot->from_obj, address);
            memcpy(&slot->from, &d->from, d->from_len);
            slot->from_len = d->from_len;
        }
        PyObject *data = PyBytes_FromStringAndSize(self->arena + d->offset, d->size);
        if (data == NULL)
            goto error;
        PyObject *item = PyTuple_Pack(3, slot->key, data, slot->from_obj);
        Py_DECREF(data);
        if (item == NULL || PyList_Append(result, item) < 0) {
            Py_XDECREF(item);
            goto error;
        }
        Py_DECREF(item);
    }
    return result;
error:
    Py_DECREF(result);
    return NULL;
}

/* Parse a destination once: the slot keeps the result while the same object comes. */
static int parse_destination(Slot *slot, PyObject *address) {
    if (resolve_destination(address, slot->family, (struct sockaddr *)&slot->to,
                            sizeof(slot->to), &slot->to_len) < 0)
        return -1;
    Py_INCREF(address);
    Py_XSETREF(slot->to_obj, address);
    return 0;
}

static PyObject *Udp_send(Udp *self, PyObject *batch) {
    if (check_open(self) < 0)
        return NULL;
    PyObject *items = PySequence_Fast(batch, "send() takes a list of (fd, data, address)");
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    long errors = 0;
    if (n > self->out_capacity) {
        Outgoing *out = PyMem_Realloc(self->out, sizeof(Outgoing) * (size_t)n);
        if (out == NULL) {
            Py_DECREF(items);
            return PyErr_NoMemory();
        }
        self->out = out;
        self->out_capacity = n;
    }
    Py_ssize_t ready = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        int fd;
        PyObject *data, *address;
        if (!PyArg_ParseTuple(item, "iSO", &fd, &data, &address))
            goto error;
        if (fd < 0 || fd >= self->nslots || self->slots[fd].key == NULL) {
            PyErr_Format(PyExc_ValueError, "descriptor %d is not registered", fd);
            goto error;
        }
        Slot *slot = &self->slots[fd];
        if (slot->to_obj != address && parse_destination(slot, address) < 0) {
            /* An address that does not resolve (or no address: it came from the
             * far end's SDP): that packet is not sent, and counted; the others are. */
            PyErr_Clear();
            Py_CLEAR(slot->to_obj);
            errors++;
            continue;
        }
        Outgoing *o = &self->out[ready++];
        o->fd = fd;
        o->data = PyBytes_AS_STRING(data);
        o->size = PyBytes_GET_SIZE(data);
        memcpy(&o->to, &slot->to, slot->to_len);
        o->to_len = slot->to_len;
    }
    /* The list (held by `items`) keeps every datagram's bytes alive meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < ready; i++) {
        Outgoing *o = &self->out[i];
        ssize_t sent;
        do {
            sent = sendto(o->fd, o->data, (size_t)o->size, 0, (const struct sockaddr *)&o->to,
                          o->to_len);
        } while (sent < 0 && errno == EINTR);
        if (sent < 0)
            errors++; /* a full buffer, an ICMP error of a peer that went away */
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(items);
    return PyLong_FromLong(errors);
error:
    Py_DECREF(items);
    return NULL;
}

static PyObject *Udp_close(Udp *self, PyObject *Py_UNUSED(ignored)) {
    Udp_clear(self);
    if (self->epfd >= 0) {
        close(self->epfd);
        self->epfd = -1;
    }
    Py_RETURN_NONE;
}

static PyObject *Udp_get_registered(Udp *self, void *closure) {
    return PyLong_FromLong(self->registered);
}

static PyMethodDef Udp_methods[] = {
    {"add", (PyCFunction)Udp_add, METH_VARARGS,
     "add(sock, key): read sock in receive(); its datagrams come with key."},
    {"remove", (PyCFunction)Udp_remove, METH_O,
     "remove(sock): no longer read (before the socket closes); unknown ones are ignored."},
    {"receive", (PyCFunction)Udp_receive, METH_NOARGS,
     "receive() -> [(key, data, (host, port))]: what every socket has, at most `rounds` "
     "datagrams from one socket; a socket's queued error is skipped."},
    {"send", (PyCFunction)Udp_send, METH_O,
     "send([(fd, data, (host, port))]) -> errors: each datagram from its registered "
     "socket; the number that could not be sent."},
    {"close", (PyCFunction)Udp_close, METH_NOARGS, "close(): forget every socket."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Udp_getset[] = {
    {"registered", (getter)Udp_get_registered, NULL, "sockets read by receive()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject UdpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "callhook.edge._udp.Udp",
    .tp_doc = "Every call's UDP sockets, read and written in one call per media tick.",
    .tp_basicsize = sizeof(Udp),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Udp_new,
    .tp_init = (initproc)Udp_init,
    .tp_dealloc = (destructor)Udp_dealloc,
    .tp_traverse = (traverseproc)Udp_traverse,
    .tp_clear = (inquiry)Udp_clear,
    .tp_methods = Udp_methods,
    .tp_getset = Udp_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.edge._udp",
    .m_doc = "The media tick's datagram IO in one call per tick (see udp.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__udp(void) {
    if (PyType_Ready(&UdpType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&UdpType);
    if (PyModule_AddObject(m, "Udp", (PyObject *)&UdpType) < 0) {
        Py_DECREF(&UdpType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
