/* Python's commands to the media plane's thread (part of _plane.c, included there, with
 * the GIL): sockets added and retired, a line's counts read, a line made quiet, frames
 * queued for a slot (Plane.send) and a playing prompt's coming frames (Plane.cover), each
 * a fixed-size record on the commands ring the thread applies at its next slot. */

static int push_command(Plane *self, int reserved) {
    Core *c = self->core;
    /* Frames leave room for the commands that must not be lost (add, remove). */
    if (!reserved && ring_room(c->commands) <= RESERVE) {
        self->refused++;
        return 0;
    }
    if (!ring_push(c->commands, &self->cmd)) {
        self->refused++;
        return 0;
    }
    return 1;
}

static Port *port_for(Plane *self, int fd) {
    if (fd >= self->nports) {
        int n = fd + 64;
        Port *ports = PyMem_Realloc(self->ports, sizeof(Port) * (size_t)n);
        if (ports == NULL)
            return (Port *)PyErr_NoMemory();
        memset(ports + self->nports, 0, sizeof(Port) * (size_t)(n - self->nports));
        self->ports = ports;
        self->nports = n;
    }
    return &self->ports[fd];
}

static PyObject *Plane_add(Plane *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"sock", "key", "alaw", NULL};
    PyObject *sock, *key;
    int alaw = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|p", names, &sock, &key, &alaw))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    int fd = PyObject_AsFileDescriptor(sock);
    if (fd < 0)
        return NULL;
    Port *port = port_for(self, fd);
    if (port == NULL)
        return NULL;
    if (port->key != NULL || port->sock != NULL)
        return PyErr_Format(PyExc_ValueError, "descriptor %d is added already", fd);
    int family;
    socklen_t len = sizeof(family);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    /* Each datagram comes with the time it reached the host (socket(7) SO_TIMESTAMPNS). */
    int on = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Tally *tally = calloc(1, sizeof(Tally));
    Rx *rx = calloc(1, sizeof(Rx)); /* (owner RX_PYTHON: zero) */
    if (tally == NULL || rx == NULL) {
        free(tally);
        free(rx);
        return PyErr_NoMemory();
    }
    memset(&self->cmd, 0, offsetof(Command, data));
    self->cmd.kind = CMD_ADD;
    self->cmd.flags = alaw ? FLAG_ALAW : 0;
    self->cmd.fd = fd;
    memcpy(self->cmd.data, &tally, sizeof(tally));
    rx->ended = -1;
    memcpy(self->cmd.data + sizeof(tally), &rx, sizeof(rx));
    self->cmd.len = sizeof(tally) + sizeof(rx);
    if (!push_command(self, 1)) {
        free(tally);
        free(rx);
        return PyErr_Format(PyExc_RuntimeError, "the media thread is not taking commands");
    }
    port_clear(port);
    port->tally = tally;
    port->rx = rx;
    Py_INCREF(key);
    port->key = key;
    Py_INCREF(sock);
    port->sock = sock;
    port->family = family;
    Py_RETURN_NONE;
}

static int push_remove(Plane *self, int fd) {
    memset(&self->cmd, 0, offsetof(Command, data));
    self->cmd.kind = CMD_REMOVE;
    self->cmd.fd = fd;
    return push_command(self, 1);
}

static PyObject *Plane_retire(Plane *self, PyObject *sock) {
    int fd = PyObject_AsFileDescriptor(sock);
    if (fd < 0)
        return NULL;
    Port *port = self->core != NULL && fd < self->nports ? &self->ports[fd] : NULL;
    if (port != NULL && port->sock == sock && port->retiring)
        Py_RETURN_NONE; /* retired already: closed when the thread lets go */
    if (port == NULL || port->sock != sock || self->pending == NULL) {
        close_socket(sock); /* the thread never had it (or is gone) */
        Py_RETURN_NONE;
    }
    /* No room (the thread is not taking commands): it goes later, from next_slot(). */
    port->retiring = push_remove(self, fd) ? 1 : 2;
    if (port->retiring == 2)
        self->deferred++;
    Py_RETURN_NONE;
}

static PyObject *Plane_tally(Plane *self, PyObject *arg) {
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    Tally *t = fd >= 0 && fd < self->nports ? self->ports[fd].tally : NULL;
    if (t == NULL)
        return Py_BuildValue("(LLLd)", 0LL, 0LL, 0LL, 0.0);
    long long packets, octets, stamp, wall;
    unsigned before, after;
    do { /* (read as one: the thread's seqlock) */
        before = atomic_load_explicit(&t->change, memory_order_acquire);
        packets = atomic_load_explicit(&t->packets, memory_order_relaxed);
        octets = atomic_load_explicit(&t->octets, memory_order_relaxed);
        stamp = atomic_load_explicit(&t->stamp, memory_order_relaxed);
        wall = atomic_load_explicit(&t->wall, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        after = atomic_load_explicit(&t->change, memory_order_relaxed);
    } while ((before & 1) || before != after);
    return Py_BuildValue("(LLLd)", packets, octets, stamp, (double)wall / 1e9);
}

static PyObject *Plane_quiet(Plane *self, PyObject *args) {
    int fd;
    long long slot;
    if (!PyArg_ParseTuple(args, "iL", &fd, &slot))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    memset(&self->cmd, 0, offsetof(Command, data));
    self->cmd.kind = CMD_QUIET;
    self->cmd.fd = fd;
    self->cmd.slot = slot;
    push_command(self, 0);
    Py_RETURN_NONE;
}

/* Parse a destination once: the port keeps the result while the same object comes. */
static int parse_destination(Port *port, PyObject *address) {
    socklen_t len;
    if (resolve_destination(address, port->family, (struct sockaddr *)&port->to,
                            sizeof(port->to), &len) < 0)
        return -1;
    port->to_len = len;
    Py_INCREF(address);
    Py_XSETREF(port->to_obj, address);
    return 0;
}

static PyObject *Plane_send(Plane *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"batch", "slot", "verbatim", NULL};
    PyObject *batch;
    long long slot;
    int verbatim = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OL|p", kwlist, &batch, &slot, &verbatim))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    PyObject *items = PySequence_Fast(batch, "send() takes a list of (fd, data, address)");
    if (items == NULL)
        return NULL;
    long errors = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd;
        PyObject *data, *address;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "iSO", &fd, &data, &address)) {
            Py_DECREF(items);
            return NULL;
        }
        if (fd < 0 || fd >= self->nports || self->ports[fd].key == NULL) {
            errors++; /* (a socket that was never added: that packet only) */
            continue;
        }
        Port *port = &self->ports[fd];
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        if (size > DATA_MAX ||
            (port->to_obj != address && parse_destination(port, address) < 0)) {
            /* No address that resolves (it came from the far end's SDP), or a frame too
             * big for a record: that packet is not sent, and counted; the others are. */
            PyErr_Clear();
            Py_CLEAR(port->to_obj);
            errors++;
            continue;
        }
        Command *cmd = &self->cmd;
        cmd->kind = CMD_FRAME;
        cmd->flags = verbatim ? FLAG_VERBATIM : 0;
        cmd->fd = fd;
        cmd->slot = slot;
        cmd->len = (uint16_t)size;
        cmd->addr = port->to;
        cmd->addr_len = port->to_len;
        memcpy(cmd->data, PyBytes_AS_STRING(data), (size_t)size);
        if (!push_command(self, 0))
            errors++;
    }
    Py_DECREF(items);
    return PyLong_FromLong(errors);
}

static PyObject *Plane_cover(Plane *self, PyObject *args) {
    PyObject *batch;
    long long slot;
    if (!PyArg_ParseTuple(args, "OL", &batch, &slot))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    PyObject *items = PySequence_Fast(batch, "cover() takes a list of (fd, first, clear, audio)");
    if (items == NULL)
        return NULL;
    long errors = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd, first, clear;
        PyObject *audio;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "iipS", &fd, &first, &clear,
                              &audio)) {
            Py_DECREF(items);
            return NULL;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(audio);
        if (fd < 0 || fd >= self->nports || self->ports[fd].key == NULL || size > DATA_MAX ||
            size % COVER_BYTES != 0) {
            errors++; /* (not a socket added, or not whole frames: that one only) */
            continue;
        }
        Command *cmd = &self->cmd;
        memset(cmd, 0, offsetof(Command, data));
        cmd->kind = CMD_COVER;
        cmd->flags = clear ? FLAG_CLEAR : 0;
        cmd->fd = fd;
        cmd->slot = slot + first;
        cmd->len = (uint16_t)size;
        memcpy(cmd->data, PyBytes_AS_STRING(audio), (size_t)size);
        if (!push_command(self, 0))
            errors++;
    }
    Py_DECREF(items);
    return PyLong_FromLong(errors);
}
