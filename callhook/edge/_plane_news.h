/* The media plane's news for Python (part of _plane.c, included there, with the GIL):
 * each slot's datagrams as (key, bytes, source, arrival) items, the ones a line held for
 * a hand-over given back in their slots, and the TICK records in order (Plane.next_slot). */

static int take_datagram(Plane *self, Event *ev) {
    if (ev->fd < 0 || ev->fd >= self->nports || self->ports[ev->fd].key == NULL)
        return 0;
    self->ports[ev->fd].popped++;
    /* The thread gave the line back with this datagram: the session's state first. */
    rx_given_back(self, ev->fd, ev->slot);
    if (ev->flags & FLAG_TRUNCATED) {
        self->oversized++;
        return 0;
    }
    return datagram_item(&self->ports[ev->fd], &ev->addr, ev->addr_len, ev->data, ev->len,
                         ev->when, self->pending);
}

/* The slot `slot`'s datagrams (`items`, read from the ring) after the ones lines held for
 * it and for the slots before it: a new list, or NULL with an exception. */
static PyObject *join_held(Plane *self, long long slot, PyObject *items) {
    PyObject *keys = PyDict_Keys(self->held);
    if (keys == NULL || PyList_Sort(keys) < 0) {
        Py_XDECREF(keys);
        return NULL;
    }
    PyObject *joined = PyList_New(0);
    for (Py_ssize_t i = 0; joined != NULL && i < PyList_GET_SIZE(keys); i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        long long at = PyLong_AsLongLong(key);
        if (at > slot)
            break;
        PyObject *list = PyDict_GetItemWithError(self->held, key);
        Py_ssize_t end = PyList_GET_SIZE(joined);
        if (list == NULL || PyList_SetSlice(joined, end, end, list) < 0 ||
            PyDict_DelItem(self->held, key) < 0)
            Py_CLEAR(joined);
    }
    Py_DECREF(keys);
    if (joined != NULL && PyList_SetSlice(joined, PyList_GET_SIZE(joined),
                                          PyList_GET_SIZE(joined), items) < 0)
        Py_CLEAR(joined);
    return joined;
}

static void take_removed(Plane *self, int fd) {
    if (fd < 0 || fd >= self->nports)
        return;
    Port *port = &self->ports[fd];
    if (port->sock != NULL)
        close_socket(port->sock);
    port_clear(port);
}

/* Retirements that found the command ring full, pushed now if there is room. */
static void push_deferred(Plane *self) {
    for (int i = 0; i < self->nports && self->deferred > 0; i++)
        if (self->ports[i].retiring == 2 && push_remove(self, i)) {
            self->ports[i].retiring = 1;
            self->deferred--;
        }
}

static PyObject *Plane_next_slot(Plane *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self) < 0)
        return NULL;
    Event *ev = &self->ev;
    if (self->deferred > 0)
        push_deferred(self);
    while (ring_pop(self->core->events, ev)) {
        switch (ev->kind) {
        case EV_DATAGRAM:
            if (take_datagram(self, ev) < 0)
                return NULL;
            break;
        case EV_REMOVED:
            take_removed(self, ev->fd);
            break;
        case EV_RETURNED:
            if (ev->fd >= 0 && ev->fd < self->nports && self->ports[ev->fd].key != NULL) {
                self->ports[ev->fd].popped++;
                rx_given_back(self, ev->fd, -1);
            }
            break;
        case EV_RECORDED:
            rx_recorded(self, ev->fd);
            break;
        case EV_TICK: {
            /* (Made first: out of memory, the TICK is lost and its datagrams join the
             * next slot's, which is how a lost TICK is read anyway.) */
            PyObject *fresh = PyList_New(0);
            if (fresh == NULL)
                return NULL;
            PyObject *items = self->pending;
            self->pending = fresh;
            if (PyDict_GET_SIZE(self->held) > 0) {
                PyObject *joined = join_held(self, ev->slot, items);
                Py_DECREF(items);
                if (joined == NULL)
                    return NULL;
                items = joined;
            }
            return Py_BuildValue("(LddLN)", (long long)ev->slot, ev->when / 1e9, ev->late / 1e9,
                                 (long long)ev->skipped, items);
        }
        }
    }
    Py_RETURN_NONE;
}
