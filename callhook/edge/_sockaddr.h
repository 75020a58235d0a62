/* A datagram's address to Python and back, as socket.recvfrom and socket.sendto do:
 * shared by _udp.c (the tick's socket IO on the loop) and _plane.c (the media thread).
 * Include after Python.h. Header-only: each extension gets its own copy.
 */
#ifndef CALLHOOK_SOCKADDR_H
#define CALLHOOK_SOCKADDR_H

#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

/* (host, port) of a sender, as socket.recvfrom gives it (IPv6 without flow and scope). */
static inline PyObject *address_object(const struct sockaddr *from, socklen_t len) {
    char host[NI_MAXHOST];
    int port;
    if (getnameinfo(from, len, host, sizeof(host), NULL, 0, NI_NUMERICHOST) != 0) {
        PyErr_SetString(PyExc_OSError, "a datagram's source address could not be read");
        return NULL;
    }
    if (from->sa_family == AF_INET6)
        port = ntohs(((const struct sockaddr_in6 *)from)->sin6_port);
    else
        port = ntohs(((const struct sockaddr_in *)from)->sin_port);
    return Py_BuildValue("(si)", host, port);
}

/* A destination (host, port) for a socket of `family`, parsed as socket.sendto would: a
 * numeric address, or a name looked up (the GIL released meanwhile). Written into `to`,
 * which has room for `room` bytes, and its length into `len`; -1 with OSError set. */
static inline int resolve_destination(PyObject *address, int family, struct sockaddr *to,
                                      socklen_t room, socklen_t *len) {
    const char *host;
    int port;
    if (!PyArg_ParseTuple(address, "si", &host, &port))
        return -1;
    if (port < 0 || port > 65535) {
        PyErr_SetString(PyExc_OSError, "port must be 0-65535");
        return -1;
    }
    struct addrinfo hints, *found = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = family;
    hints.ai_socktype = SOCK_DGRAM;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = getaddrinfo(host, NULL, &hints, &found);
    Py_END_ALLOW_THREADS
    if (rc != 0 || found == NULL) {
        PyErr_Format(PyExc_OSError, "cannot send to %s: %s", host, gai_strerror(rc));
        return -1;
    }
    if (found->ai_addrlen > room) {
        freeaddrinfo(found);
        PyErr_Format(PyExc_OSError, "cannot send to %s: the address is too long", host);
        return -1;
    }
    memcpy(to, found->ai_addr, found->ai_addrlen);
    *len = found->ai_addrlen;
    freeaddrinfo(found);
    if (to->sa_family == AF_INET6)
        ((struct sockaddr_in6 *)to)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)to)->sin_port = htons((uint16_t)port);
    return 0;
}

#endif
