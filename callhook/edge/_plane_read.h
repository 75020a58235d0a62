/* The media plane's thread: reading every socket in a slot (part of _plane.c, included
 * there; no Python, no GIL): epoll, then recvmmsg up to `rounds` datagrams a socket, each
 * with the time it reached the host (SO_TIMESTAMPNS), published to Python's ring; the
 * lines whose usual packets the thread takes itself (_rx.h) and the datagrams it holds
 * for a hand-over (parking). */

static int64_t real_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* When a datagram reached the host, on the clock of the slots' times (`now` is the
 * slot's): the kernel stamps it on the wall clock, read at `wall`, `since` after the slot
 * began, so it came `wall - stamp` before that (`now` where the stamp is missing).
 * Datagrams left in the kernel while Python was behind are read later, in bursts: their
 * arrival says they came at the call's own pace, which is what the flood limit counts by. */
static int64_t arrival(struct msghdr *msg, int64_t now, int64_t wall, int64_t since) {
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec t;
            memcpy(&t, CMSG_DATA(cm), sizeof(t));
            int64_t ago = wall - ((int64_t)t.tv_sec * 1000000000LL + t.tv_nsec);
            return ago > 0 ? now + since - ago : now + since;
        }
    }
    return now;
}

/* Up to `want` datagrams of socket `fd` into c->got (c->msgs says each one's size,
 * flags and stamp): how many, and the clocks the stamps are read against (`clocks`,
 * read once a slot: wall, how long after the slot began). */
typedef struct {
    int64_t wall, since;
    int have;
} Clocks;

static int read_socket(Core *c, int fd, unsigned int want, Clocks *clocks) {
    for (unsigned int k = 0; k < want; k++) {
        c->iov[k].iov_base = c->got[k].data;
        c->iov[k].iov_len = DATA_MAX;
        memset(&c->msgs[k], 0, sizeof(c->msgs[k]));
        c->msgs[k].msg_hdr.msg_name = &c->got[k].addr;
        c->msgs[k].msg_hdr.msg_namelen = sizeof(c->got[k].addr);
        c->msgs[k].msg_hdr.msg_iov = &c->iov[k];
        c->msgs[k].msg_hdr.msg_iovlen = 1;
        c->msgs[k].msg_hdr.msg_control = c->control[k].buf;
        c->msgs[k].msg_hdr.msg_controllen = sizeof(c->control[k].buf);
    }
    int n = recvmmsg(fd, c->msgs, want, MSG_DONTWAIT, NULL);
    if (n > 0 && !clocks->have) {
        /* (Both clocks at once: how long after the slot began the stamps are read.) */
        clocks->wall = real_ns();
        clocks->since = mono_ns() - c->started;
        clocks->have = 1;
    }
    return n;
}

/* A line Python asked the thread to hold while it is behind (_rx.h's `park`): the
 * datagrams read now wait in the line, each with this slot and its time, for the thread
 * to take once Python hands the line over, or for Python to take in their slots. Where
 * the line has no room, they wait in the kernel (`parked_over`). */
static void park_slot(Core *c, int fd, Rx *rx, int64_t now, Clocks *clocks) {
    unsigned int want = (unsigned int)(RX_PARKED - rx->parked);
    if (want > (unsigned int)c->rounds)
        want = (unsigned int)c->rounds;
    if (want == 0) {
        rx->parked_over = 1;
        return;
    }
    int n = read_socket(c, fd, want, clocks);
    for (int k = 0; k < n; k++) {
        RxHeld *h = &rx->held[rx->parked++];
        size_t len = c->msgs[k].msg_len > DATA_MAX ? DATA_MAX : c->msgs[k].msg_len;
        h->slot = c->slot;
        h->now = c->next;
        h->when = arrival(&c->msgs[k].msg_hdr, now, clocks->wall, clocks->since);
        h->len = (uint16_t)len;
        h->cut = (c->msgs[k].msg_hdr.msg_flags & MSG_TRUNC) != 0;
        h->addr_len = c->msgs[k].msg_hdr.msg_namelen;
        memcpy(&h->addr, &c->got[k].addr, sizeof(h->addr));
        memcpy(h->data, c->got[k].data, len);
    }
}

/* The packets a line held while Python was behind, taken by the thread now that it holds
 * the line: in order, each after the ends of the slots before its own and with the time
 * of the slot it was read in, as the thread would have taken it then. 0: all taken. 1: one
 * it does not take (or a slot's end that is Python's to do) gives the line back, with
 * that packet and the ones after still held, for Python to take in their slots (Plane.own
 * finds them: `parked_back`); the line's packets go on waiting behind them meanwhile. */
static int rx_unpark(Core *c, Rx *rx) {
    int i = 0;
    for (; i < rx->parked; i++) {
        const RxHeld *h = &rx->held[i];
        if (rx_catch_up(rx, h->slot - 1) || h->cut ||
            !rx_take(rx, h->data, h->len, &h->addr, h->addr_len, (double)h->now / 1e9,
                     (double)h->when / 1e9))
            break;
        COUNT(c, rx_taken, 1);
    }
    if (i < rx->parked) {
        int left = rx->parked - i;
        memmove(rx->held, rx->held + i, (size_t)left * sizeof(rx->held[0]));
        rx->parked = left;
        rx->parked_back = 1;
        atomic_store_explicit(&rx->park, 1, memory_order_relaxed);
        atomic_store_explicit(&rx->owner, RX_PYTHON, memory_order_relaxed);
        COUNT(c, rx_returned, 1);
        return 1;
    }
    rx->parked = 0;
    if (rx->parked_over) {
        /* The rest waited in the kernel: read from now, as of now. The slots' ends until
         * now are not the caller's silence (its packets were waiting): not done. */
        if (rx->ended < c->slot - 1)
            rx->ended = c->slot - 1;
        rx->parked_over = 0;
    }
    return 0;
}

/* Step 3. */
static void receive_slot(Core *c, int64_t now) {
    if (c->nactive == 0)
        return;
    Clocks clocks = {0, 0, 0};
    int ready;
    do {
        ready = epoll_wait(c->epfd, c->ready, c->nactive, 0);
    } while (ready < 0 && errno == EINTR);
    for (int i = 0; i < ready; i++) {
        int fd = c->ready[i].data.fd;
        size_t room = ring_room(c->events);
        if (room <= RESERVE)
            return; /* Python is behind: the rest waits in the kernel's buffers */
        Line *line = c->lines[fd];
        Rx *rx = line != NULL ? line->rx : NULL;
        /* (Python changing the line's hands this instant: its packets wait a slot.) */
        if (rx != NULL && !rx_trylock(rx))
            continue;
        if (rx != NULL && rx->parked > 0 &&
            atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD)
            rx_unpark(c, rx); /* (handed over since: the packets held first) */
        if (rx != NULL && atomic_load_explicit(&rx->park, memory_order_relaxed) &&
            atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_PYTHON) {
            park_slot(c, fd, rx, now, &clocks);
            rx_unlock(rx);
            continue;
        }
        unsigned int want = (unsigned int)(room - RESERVE);
        if (want > (unsigned int)c->rounds)
            want = (unsigned int)c->rounds;
        int n = read_socket(c, fd, want, &clocks);
        int64_t wall = clocks.wall, since = clocks.since;
        /* The line's usual packets, while the thread holds its receive (_rx.h): taken
         * here, after the ends of the slots before this one; any other packet goes to
         * Python with the line, and so do the packets after it. */
        int owned = rx != NULL && n > 0 &&
                    atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD;
        if (owned && rx_catch_up(rx, c->slot - 1)) {
            atomic_store_explicit(&rx->owner, RX_PYTHON, memory_order_relaxed);
            COUNT(c, rx_returned, 1);
            owned = 0;
        }
        for (int k = 0; k < n; k++) {
            Event *ev = &c->got[k];
            int64_t when = arrival(&c->msgs[k].msg_hdr, now, wall, since);
            int truncated = (c->msgs[k].msg_hdr.msg_flags & MSG_TRUNC) != 0;
            if (owned) {
                if (!truncated && rx_take(rx, ev->data, c->msgs[k].msg_len, &ev->addr,
                                          c->msgs[k].msg_hdr.msg_namelen, (double)c->next / 1e9,
                                          (double)when / 1e9)) {
                    COUNT(c, rx_taken, 1);
                    continue;
                }
                atomic_store_explicit(&rx->owner, RX_PYTHON, memory_order_relaxed);
                COUNT(c, rx_returned, 1);
                owned = 0;
            }
            if (rx != NULL)
                atomic_fetch_add_explicit(&rx->published, 1, memory_order_relaxed);
            ev->kind = EV_DATAGRAM;
            ev->flags = truncated ? FLAG_TRUNCATED : 0;
            ev->len = (uint16_t)(c->msgs[k].msg_len > DATA_MAX ? DATA_MAX : c->msgs[k].msg_len);
            ev->fd = fd;
            ev->slot = c->slot;
            ev->when = when;
            ev->late = 0;
            ev->addr_len = c->msgs[k].msg_hdr.msg_namelen;
            ring_push(c->events, ev);
        }
        /* A recording's frames the thread took, for Python to write (_rx.h): said once
         * until Python has taken them (else at a later slot's packets). */
        if (owned && rx->rec_size >= RX_RECORDS_TOLD && !rx->rec_told &&
            ring_room(c->events) > RESERVE / 2) {
            Event told = {.kind = EV_RECORDED, .fd = fd, .slot = c->slot};
            ring_push(c->events, &told);
            rx->rec_told = 1;
        }
        if (rx != NULL)
            rx_unlock(rx);
    }
}

/* The end of the slot for the lines whose receive the thread holds (_rx.h): a line it
 * gives back is said (RETURNED), in the slot's order, while the ring has room (else at a
 * later slot's end). */
static void rx_slot_ends(Core *c) {
    for (int i = 0; i < c->nactive; i++) {
        int fd = c->active[i];
        Line *line = c->lines[fd];
        Rx *rx = line->rx;
        /* (Locked whoever holds it: Python then reads this slot's `rx_pass` when it next
         * takes the lock to hand the line over. Held by Python this instant: the end is
         * caught up at the line's next packet or slot's end.) */
        if (rx == NULL || line->closing || !rx_trylock(rx))
            continue;
        if (rx->parked > 0 &&
            atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD)
            rx_unpark(c, rx); /* (handed over since, and no packet came this slot) */
        /* (rx_catch_up stops before the slot Python is to end: with no room for the
         * record, the line goes back at a later slot's end, from that slot.) */
        if (atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD &&
            rx_catch_up(rx, c->slot) && ring_room(c->events) > RESERVE / 2) {
            Event back = {.kind = EV_RETURNED, .fd = fd, .slot = c->slot};
            atomic_store_explicit(&rx->owner, RX_PYTHON, memory_order_relaxed);
            atomic_fetch_add_explicit(&rx->published, 1, memory_order_relaxed);
            ring_push(c->events, &back);
            COUNT(c, rx_returned, 1);
        }
        rx_unlock(rx);
    }
}
