/* Datagrams as Python gets them (part of _plane.c, included there, with the GIL): each
 * one a (key, bytes, source, arrival) item, and the datagrams a line held for Python while
 * it was behind (_rxpy.h takes them from the line, _plane_news.h gives the slots' lists). */

/* The datagram `data` (`len` bytes from `addr`, reached the host at `when` ns) of
 * `port`, as next_slot gives it: (key, bytes, source, arrival), appended to `list`. */
static int datagram_item(Port *port, const struct sockaddr_in6 *addr, uint32_t addr_len,
                         const unsigned char *data, size_t len, int64_t when, PyObject *list) {
    if (port->from_obj == NULL || port->from_len != addr_len ||
        memcmp(&port->from, addr, addr_len) != 0) {
        PyObject *address = address_object((const struct sockaddr *)addr, addr_len);
        if (address == NULL)
            return -1;
        Py_XSETREF(port->from_obj, address);
        memcpy(&port->from, addr, addr_len);
        port->from_len = addr_len;
    }
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)len);
    if (bytes == NULL)
        return -1;
    PyObject *arrived = PyFloat_FromDouble(when / 1e9);
    if (arrived == NULL) {
        Py_DECREF(bytes);
        return -1;
    }
    PyObject *item = PyTuple_Pack(4, port->key, bytes, port->from_obj, arrived);
    Py_DECREF(bytes);
    Py_DECREF(arrived);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* The datagrams a line held for Python (_rx.h's RX_PARKED), copied out under its lock
 * (the GIL's: one line at a time). */
typedef struct {
    int n, over;
    RxHeld items[RX_PARKED];
} Held;
static Held rx_held;

/* rx_held's datagrams, each for the slot it was read in: next_slot joins them
 * to that slot's (to the next one it reads, where Python has read their slot already). */
static int rx_give_held(Plane *self, Port *port) {
    for (int i = 0; i < rx_held.n; i++) {
        const RxHeld *h = &rx_held.items[i];
        if (h->cut) {
            self->oversized++;
            continue;
        }
        PyObject *slot = PyLong_FromLongLong(h->slot);
        if (slot == NULL)
            return -1;
        PyObject *list = PyDict_GetItemWithError(self->held, slot); /* (borrowed) */
        if (list == NULL && !PyErr_Occurred()) {
            list = PyList_New(0);
            if (list != NULL && PyDict_SetItem(self->held, slot, list) < 0)
                Py_CLEAR(list);
            Py_XDECREF(list); /* (the dict holds it) */
        }
        Py_DECREF(slot);
        if (list == NULL ||
            datagram_item(port, &h->addr, h->addr_len, h->data, h->len, h->when, list) < 0)
            return -1;
    }
    rx_held.n = 0;
    return 0;
}
