/* The media plane's thread: every call's RTP sent and received on a clock of its own,
 * without the GIL: callhook.edge._plane.
 *
 * Why: the media tick (edge/mediaengine.py) used to run on the asyncio loop, which also
 * runs SIP, the action runners, page requests and the log.  When that loop was busy, or
 * another process had the core, every call's packets waited with it: gaps in the audio
 * callers hear and prompts stretched past the moment the caller was told to press.  Here
 * one native thread per process keeps the 20 ms grid (clock_nanosleep on an absolute
 * schedule, CLOCK_MONOTONIC, the clock asyncio's loop.time() reads) and does the part
 * that must happen on time; Python keeps every decision.
 *
 * The contract, slot by slot (a slot is one 20 ms tick, numbered from 0):
 *
 *   thread, at slot s:  1. applies Python's commands (sockets added and removed, frames
 *                          queued for a slot, a line gone quiet), in the order given;
 *                       2. sends each line's frame queued for slot s; a line that is
 *                          live (it sent audio and was not made quiet) and has none
 *                          gets a filler: silence in its law (given when the socket
 *                          is added), the next sequence number,
 *                          the timestamp its media clock has reached (RFC 3550 §5.1), so
 *                          the far end hears no gap while Python is late; and counts
 *                          what went on each line (its Tally, the call's Sender Report);
 *                       3. reads every socket (epoll, then recvmmsg: at most `rounds`
 *                          datagrams per socket, a flood stays in the kernel's buffer);
 *                       4. publishes the datagrams and then a TICK record for slot s,
 *                          and wakes Python through an eventfd.
 *   Python, per TICK:   runs the tick's work for slot s with the datagrams received in
 *                       it (MediaEngine: the sessions decide), and queues the frames it
 *                       makes for slot s + ahead.
 *
 * So Python lags the wire by `ahead` slots of send latency and may fall behind further
 * (a collection, a busy core) without the far end hearing it: its late frames are dropped
 * (counted as stale) where a filler went instead, and it works through the slots in
 * order, so each call's prompts and digits keep the wire's time.  The thread sends every
 * packet except SRTP's with its own sequence numbers (a filler takes one); an SRTP frame
 * (`verbatim`) goes as Python made it, and its line gets no fillers (it cannot be
 * authenticated here).  A call goes quiet (on hold) in the slot Python says.
 *
 * Exchange: two lock-free single-producer, single-consumer rings of fixed-size records
 * (media/_ringcore.h): commands Python -> thread, events thread -> Python.  The thread
 * allocates nothing per packet (a line's storage is made when its socket is added), never
 * takes the GIL or a lock, and never waits but on its clock.  A full event ring leaves
 * datagrams in the kernel; a TICK that finds it full is lost (counted), and Python runs
 * that slot without datagrams when the next TICK shows the gap.  A late thread runs the
 * missed slots at once, up to `catch_up`; after a longer stall it skips to the current
 * slot: the next TICK says how many it skipped, Python skips them too, and each line's
 * media clock resumes where it was, as Python's does.
 *
 * Sockets stay Python's objects, held by the plane from add() until the thread has let
 * go of the descriptor (the REMOVED record); only then is a retired socket closed, so a
 * number the kernel gives again never reaches a stale line.  A retired line is read no
 * more and gets no filler or cover, but sends the frames queued for it before it goes.
 *
 * step(now) runs one slot without the thread, at a time the caller gives: the tests'
 * virtual clock.
 *
 * One translation unit, in parts: the thread's send (_plane_send.h) and reads
 * (_plane_read.h, with _rx.h for the usual packets it takes itself); Python's commands
 * (_plane_commands.h), its news (_plane_news.h), the hand-over of a call's receive
 * (_rxpy.h) and the datagrams both give Python (_plane_held.h). Each part is included
 * where its code belongs in the order of definitions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../media/_ringcore.h"
#include "_rx.h"
#include "_sockaddr.h"

/* Largest datagram a record carries (G.711 at 60 ms with SRTP fits); larger ones are
 * counted and dropped (`oversized`). */
#define DATA_MAX 512
_Static_assert(RX_PARKED_BYTES == DATA_MAX, "a held datagram is a record's");
/* Slots of frames a line holds ahead of the one being sent. */
#define DEPTH 4
#define MAX_ROUNDS 16
/* Event records kept free for TICK and REMOVED records: datagrams never take them. */
#define RESERVE 64
#define FRAME_SAMPLES 160
/* Slots of a prompt's coming audio a line holds (`cover`), each one frame of G.711. */
#define COVER_SLOTS 32
#define COVER_BYTES 160
/* A frame entry of this length is no frame: the call goes quiet in that slot. */
#define QUIET_LEN 0xFFFF
/* An RFC 4733 event packet (a header and its 4 bytes, §2.3), and how Python sends one
 * digit (media/dtmfsend.py: TONE_SAMPLES, END_PACKETS; tests/unit/edge/test_plane.py
 * checks they agree): its duration grows by a frame a packet up to this, whose packet
 * has the E bit and goes three times. */
#define EVENT_LEN 16
#define EVENT_SAMPLES 800
#define EVENT_ENDS 3
/* A slot that starts later than this is counted as late. */
#define LATE_NS 2000000LL

enum { CMD_ADD = 1, CMD_REMOVE, CMD_FRAME, CMD_QUIET, CMD_COVER };
enum { EV_DATAGRAM = 1, EV_TICK, EV_REMOVED, EV_RETURNED, EV_RECORDED };
#define FLAG_VERBATIM 1
#define FLAG_CLEAR 2 /* a COVER: the line's cover from its slot on is dropped first */
#define FLAG_ALAW 4  /* an ADD: the line's audio is A-law (its silence is 0xD5, not 0xFF) */
#define FLAG_TRUNCATED 1

typedef struct {
    uint8_t kind;
    uint8_t flags;
    uint16_t len;
    int32_t fd;
    int64_t slot;
    struct sockaddr_in6 addr; /* big enough for either family */
    uint32_t addr_len;
    unsigned char data[DATA_MAX];
} Command;

typedef struct {
    uint8_t kind;
    uint8_t flags;
    uint16_t len;
    int32_t fd;
    int64_t slot;
    int64_t when;    /* a datagram: when it reached the host; a TICK: the slot's time */
    int64_t late;    /* a TICK: how late the thread started it (ns) */
    int64_t skipped; /* a TICK: slots the thread skipped just before it */
    struct sockaddr_in6 addr;
    uint32_t addr_len;
    unsigned char data[DATA_MAX];
} Event;

typedef struct {
    int64_t slot; /* -1: empty */
    uint16_t len;
    struct sockaddr_in6 to;
    uint32_t to_len;
    unsigned char data[DATA_MAX];
} Frame;

/* What went out on a line, for its RTCP Sender Report (RFC 3550 §6.4.1): the thread
 * counts, Python reads (Plane.tally). Python allocates it when it adds the socket and
 * frees it once the thread has let go of the line (EV_REMOVED) or has stopped. */
typedef struct {
    atomic_llong packets; /* RTP packets sent */
    atomic_llong octets;  /* their bytes after the 12-byte header: the payload octets */
    atomic_llong stamp;   /* the last audio packet's RTP timestamp, */
    atomic_llong wall;    /* ... and when it went (CLOCK_REALTIME ns; 0: none yet) */
    atomic_uint change;   /* odd while they change (a reader tries again) */
} Tally;

/* One socket, the thread's only. */
typedef struct {
    Tally *tally;                /* Python's (NULL: not counted) */
    Rx *rx;                      /* Python's: the usual receive, while the thread holds it */
    int active;
    int closing;  /* retired: it sends the frames queued, then goes (remove_drained) */
    int live;     /* it sends audio: fillers cover for a late Python */
    int verbatim; /* SRTP: sent as given, no fillers */
    int have_audio;
    int seq_set;
    uint16_t seq;                /* the next sequence number */
    unsigned char header[12];    /* the last audio packet's */
    uint32_t audio_ts;           /* ... its timestamp, */
    int64_t audio_slot;          /* ... the slot it went in, */
    uint16_t audio_len;          /* ... its payload's size */
    unsigned char silence;       /* silence in its law */
    int event_live;              /* an RFC 4733 event is being sent: a filler goes on with it */
    int event_ends;              /* ... its end packets sent so far */
    unsigned char event[EVENT_LEN]; /* ... its last packet */
    struct sockaddr_in6 to;
    uint32_t to_len;
    Frame frames[DEPTH];
    /* The prompt's audio for the slots after Python's frames (`cover`): what goes in a
     * slot whose frame Python has not made in time, instead of silence. */
    int64_t cover_slot[COVER_SLOTS]; /* -1: none */
    unsigned char cover[COVER_SLOTS][COVER_BYTES];
} Line;

typedef struct {
    Ring *commands;
    Ring *events;
    int epfd;
    int wakefd;
    int64_t tick;
    int rounds;
    int catch_up;
    Line **lines; /* by descriptor */
    int nlines;
    int *active; /* the descriptors added */
    int nactive;
    int active_cap;
    struct epoll_event *ready;
    int64_t slot; /* the next slot to run, and its time */
    int64_t next;
    int64_t origin; /* slot 0's time: `next` - `slot` x `tick` (set before the thread runs) */
    atomic_llong rx_pass; /* the slot being run, or the last one (Plane.own reads it) */
    int64_t started; /* when (CLOCK_MONOTONIC) the slot being run began */
    Event got[MAX_ROUNDS];
    struct mmsghdr msgs[MAX_ROUNDS];
    struct iovec iov[MAX_ROUNDS];
    /* Each datagram's control message: its arrival (SCM_TIMESTAMPNS). */
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control[MAX_ROUNDS];
    unsigned char filler[DATA_MAX];
    unsigned char cover_moved[COVER_SLOTS][COVER_BYTES]; /* (shift_cover's copy) */
    atomic_int stop;
    atomic_llong running_slot; /* the next slot the thread runs: for Python */
    atomic_llong late_slots, max_late, skipped, fillers, covered, stale, sent, send_errors, lost_ticks,
        faults, rx_taken, rx_returned;
    atomic_int tid;
} Core;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#define COUNT(c, field, n) atomic_fetch_add_explicit(&(c)->field, (n), memory_order_relaxed)

/* --- the thread's side ------------------------------------------------------------------ */

static Line *line_add(Core *c, int fd, int alaw, Tally *tally, Rx *rx) {
    if (fd >= c->nlines) {
        int n = fd + 64;
        Line **lines = realloc(c->lines, sizeof(Line *) * (size_t)n);
        if (lines == NULL)
            return NULL;
        memset(lines + c->nlines, 0, sizeof(Line *) * (size_t)(n - c->nlines));
        c->lines = lines;
        c->nlines = n;
    }
    if (c->nactive == c->active_cap) {
        int n = c->active_cap * 2 + 64;
        int *active = realloc(c->active, sizeof(int) * (size_t)n);
        if (active == NULL)
            return NULL;
        c->active = active;
        struct epoll_event *ready = realloc(c->ready, sizeof(struct epoll_event) * (size_t)n);
        if (ready == NULL)
            return NULL;
        c->ready = ready;
        c->active_cap = n;
    }
    Line *line = c->lines[fd];
    if (line == NULL && (line = c->lines[fd] = calloc(1, sizeof(Line))) == NULL)
        return NULL;
    if (line->active)
        return line; /* added twice: once is enough */
    memset(line, 0, offsetof(Line, frames));
    line->silence = alaw ? 0xD5 : 0xFF; /* G.711 A-law and μ-law zero */
    line->tally = tally;
    line->rx = rx;
    for (int i = 0; i < DEPTH; i++)
        line->frames[i].slot = -1;
    for (int i = 0; i < COVER_SLOTS; i++)
        line->cover_slot[i] = -1;
    struct epoll_event event = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &event) < 0)
        return NULL;
    line->active = 1;
    c->active[c->nactive++] = fd;
    return line;
}

/* (Its descriptor left the epoll set when it was retired.) */
static void line_remove(Core *c, int fd) {
    if (fd < 0 || fd >= c->nlines || c->lines[fd] == NULL || !c->lines[fd]->active)
        return;
    c->lines[fd]->active = 0;
    for (int i = 0; i < c->nactive; i++)
        if (c->active[i] == fd) {
            c->active[i] = c->active[--c->nactive];
            break;
        }
}

static Line *line_of(Core *c, int fd) {
    if (fd < 0 || fd >= c->nlines || c->lines[fd] == NULL || !c->lines[fd]->active ||
        c->lines[fd]->closing)
        return NULL;
    return c->lines[fd];
}

/* Whether a retired line has sent every frame Python queued for it. */
static int drained(Core *c, const Line *line) {
    for (int k = 0; k < DEPTH; k++)
        if (line->frames[k].slot >= c->slot)
            return 0;
    return 1;
}

/* Retired lines whose queued frames have all gone: let go, and tell Python (REMOVED),
 * while the event ring has room (else in a later slot). */
static void remove_drained(Core *c) {
    for (int i = 0; i < c->nactive;) {
        int fd = c->active[i];
        Line *line = c->lines[fd];
        if (!line->closing || !drained(c, line) || ring_room(c->events) == 0) {
            i++;
            continue;
        }
        Event ack = {.kind = EV_REMOVED, .fd = fd, .slot = c->slot};
        line_remove(c, fd); /* (moves the last active descriptor to i) */
        line->closing = 0;
        ring_push(c->events, &ack);
    }
}

/* A prompt's coming frames, for the slots from cmd->slot on (those gone or past the
 * line's reach are left out); FLAG_CLEAR: the cover from that slot on goes first (the
 * prompt stopped, or another began). */
static void take_cover(Core *c, Line *line, const Command *cmd) {
    if (cmd->flags & FLAG_CLEAR)
        for (int k = 0; k < COVER_SLOTS; k++)
            if (line->cover_slot[k] >= cmd->slot)
                line->cover_slot[k] = -1;
    int n = cmd->len / COVER_BYTES;
    for (int i = 0; i < n; i++) {
        int64_t slot = cmd->slot + i;
        if (slot < c->slot || slot >= c->slot + COVER_SLOTS)
            continue;
        line->cover_slot[slot % COVER_SLOTS] = slot;
        memcpy(line->cover[slot % COVER_SLOTS], cmd->data + (size_t)i * COVER_BYTES, COVER_BYTES);
    }
}

/* A call's first frame came after its slot (Python behind since the call's media
 * began): the line has sent nothing yet, so it would send nothing (no filler, no cover)
 * until a frame of Python's came in time. It takes its destination, numbers and media
 * clock from the frame, and is live from the next slot: the caller hears silence, or
 * the prompt's cover, from then on. */
static uint16_t get_u16(const unsigned char *p);
static uint32_t get_u32(const unsigned char *p);

static void learn_line(Line *line, const Command *cmd) {
    const unsigned char *d = cmd->data;
    if (line->seq_set || line->verbatim || (cmd->flags & FLAG_VERBATIM) ||
        cmd->len <= EVENT_LEN || d[0] != 0x80)
        return; /* (it has sent; SRTP; or not an audio frame: an event waits for one) */
    line->live = 1;
    line->to = cmd->addr;
    line->to_len = cmd->addr_len;
    line->seq = get_u16(d + 2); /* (nothing went: the stream begins with its number) */
    line->seq_set = 1;
    memcpy(line->header, d, 12);
    line->audio_ts = get_u32(d + 4);
    line->audio_slot = cmd->slot;
    line->audio_len = (uint16_t)(cmd->len - 12);
    line->have_audio = 1;
}

/* Step 1: Python's commands, in order. A REMOVE of a descriptor the thread never took
 * waits while its acknowledgement has no room (the ring is full of what Python has not
 * read yet). */
static void apply_commands(Core *c) {
    Command *cmd;
    while ((cmd = ring_peek(c->commands)) != NULL) {
        Line *line;
        Tally *tally;
        Rx *rx;
        switch (cmd->kind) {
        case CMD_ADD:
            memcpy(&tally, cmd->data, sizeof(tally));
            memcpy(&rx, cmd->data + sizeof(tally), sizeof(rx));
            if (line_add(c, cmd->fd, cmd->flags & FLAG_ALAW, tally, rx) == NULL)
                COUNT(c, faults, 1); /* out of memory: the call's media is not read */
            break;
        case CMD_REMOVE:
            /* The call is over: nothing more is read, nothing made up (no filler, no
             * cover), but the frames Python queued still go, up to AHEAD slots: the end
             * of a prompt before a hang-up is heard (remove_drained lets go after). */
            line = line_of(c, cmd->fd);
            if (line != NULL) {
                epoll_ctl(c->epfd, EPOLL_CTL_DEL, cmd->fd, NULL);
                line->closing = 1;
                line->live = 0;
            } else if (c->lines != NULL && cmd->fd >= 0 && cmd->fd < c->nlines &&
                       c->lines[cmd->fd] != NULL && c->lines[cmd->fd]->active) {
                break; /* retired already */
            } else {
                Event ack = {.kind = EV_REMOVED, .fd = cmd->fd, .slot = c->slot};
                if (ring_room(c->events) == 0)
                    return; /* (never added: let go at once, when there is room) */
                ring_push(c->events, &ack);
            }
            break;
        case CMD_QUIET:
        case CMD_FRAME:
            line = line_of(c, cmd->fd);
            if (line == NULL)
                break;
            if (cmd->slot < c->slot || cmd->slot >= c->slot + DEPTH) {
                COUNT(c, stale, 1); /* its slot has gone (a filler went instead) */
                if (cmd->slot < c->slot && cmd->kind == CMD_FRAME)
                    learn_line(line, cmd);
                break;
            }
            Frame *frame = &line->frames[cmd->slot % DEPTH];
            frame->slot = cmd->slot;
            frame->len = cmd->kind == CMD_QUIET ? QUIET_LEN : cmd->len;
            frame->to = cmd->addr;
            frame->to_len = cmd->addr_len;
            if (cmd->kind == CMD_FRAME)
                memcpy(frame->data, cmd->data, cmd->len);
            if (cmd->flags & FLAG_VERBATIM)
                line->verbatim = 1;
            break;
        case CMD_COVER:
            line = line_of(c, cmd->fd);
            if (line != NULL)
                take_cover(c, line, cmd);
            break;
        }
        ring_advance(c->commands);
    }
}

#include "_plane_send.h"

#include "_plane_read.h"

/* Slots skipped: the prompt's cover moves on with them, as the prompt waits in Python. */
static void shift_cover(Core *c, Line *line, int64_t missed) {
    int64_t slots[COVER_SLOTS];
    for (int k = 0; k < COVER_SLOTS; k++) {
        slots[k] = line->cover_slot[k];
        line->cover_slot[k] = -1;
    }
    memcpy(c->cover_moved, line->cover, sizeof(line->cover));
    for (int k = 0; k < COVER_SLOTS; k++) {
        int64_t slot = slots[k] + missed;
        if (slots[k] < c->slot || slot >= c->slot + missed + COVER_SLOTS)
            continue;
        line->cover_slot[slot % COVER_SLOTS] = slot;
        memcpy(line->cover[slot % COVER_SLOTS], c->cover_moved[k], COVER_BYTES);
    }
}

/* Slots skipped: Python skips them too (the TICK says how many), so each line's media
 * clock resumes where it was, as Python's does; frames queued for them are stale. The
 * lines whose receive the thread holds skip their ends too (once the ends before them
 * are done: where one is Python's, the skipped slots' ends are done after it). */
static void skip_lines(Core *c, int64_t missed) {
    for (int i = 0; i < c->nactive; i++) {
        Line *line = c->lines[c->active[i]];
        Rx *rx = line->rx;
        if (rx != NULL && rx_trylock(rx)) {
            if (rx->parked > 0 &&
                atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD)
                rx_unpark(c, rx);
            if (atomic_load_explicit(&rx->owner, memory_order_relaxed) == RX_THREAD &&
                !rx_catch_up(rx, c->slot - 1))
                rx->ended += missed;
            rx_unlock(rx);
        }
        line->audio_slot += missed;
        shift_cover(c, line, missed);
        for (int k = 0; k < DEPTH; k++) {
            Frame *frame = &line->frames[k];
            if (frame->slot >= c->slot && frame->slot < c->slot + missed) {
                frame->slot = -1;
                COUNT(c, stale, 1);
            }
        }
    }
}

/* One slot at `now`: the thread's loop body, and step() for the tests. */
static void run_slot(Core *c, int64_t now) {
    c->started = mono_ns();
    int64_t late = now - c->next, skipped = 0;
    if (late > (int64_t)c->catch_up * c->tick) {
        /* A long stall (a stopped process, a starved machine): the missed slots are
         * skipped, the grid goes on from now; each call's audio goes on from where it was. */
        int64_t missed = late / c->tick;
        skip_lines(c, missed);
        c->slot += missed;
        c->next += missed * c->tick;
        late -= missed * c->tick;
        skipped = missed;
        COUNT(c, skipped, missed);
    }
    atomic_store(&c->rx_pass, c->slot);
    if (late > LATE_NS) {
        COUNT(c, late_slots, 1);
        long long seen = atomic_load_explicit(&c->max_late, memory_order_relaxed);
        if (late > seen)
            atomic_store_explicit(&c->max_late, late, memory_order_relaxed);
    }
    apply_commands(c);
    send_slot(c);
    remove_drained(c);
    receive_slot(c, now);
    rx_slot_ends(c);
    Event tick = {.kind = EV_TICK,
                  .fd = -1,
                  .slot = c->slot,
                  .when = c->next,
                  .late = late,
                  .skipped = skipped};
    if (!ring_push(c->events, &tick))
        COUNT(c, lost_ticks, 1);
    c->slot++;
    c->next += c->tick;
    atomic_store_explicit(&c->running_slot, c->slot, memory_order_release);
    if (c->wakefd >= 0) {
        uint64_t one = 1;
        ssize_t ignored = write(c->wakefd, &one, sizeof(one)); /* full: Python is awake */
        (void)ignored;
    }
}

static void *run(void *arg) {
    Core *c = arg;
    atomic_store(&c->tid, (int)syscall(SYS_gettid));
    pthread_setname_np(pthread_self(), "callhook-media"); /* (top -H, ps -L) */
    while (!atomic_load_explicit(&c->stop, memory_order_acquire)) {
        struct timespec at = {.tv_sec = c->next / 1000000000LL, .tv_nsec = c->next % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
            ;
        if (atomic_load_explicit(&c->stop, memory_order_acquire))
            break;
        run_slot(c, mono_ns());
    }
    return NULL;
}

static void core_free(Core *c) {
    if (c == NULL)
        return;
    for (int i = 0; i < c->nlines; i++)
        free(c->lines[i]);
    free(c->lines);
    free(c->active);
    free(c->ready);
    ring_free(c->commands);
    ring_free(c->events);
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->wakefd >= 0)
        close(c->wakefd);
    free(c);
}

/* --- Python's side (with the GIL) --------------------------------------------------------- */

typedef struct {
    PyObject *key;  /* NULL: not added */
    PyObject *sock; /* the socket, held while the thread may use its descriptor */
    int retiring;   /* 1: the thread is letting go of it; 2: that command waits for room */
    int family;
    struct sockaddr_in6 from;
    uint32_t from_len;
    PyObject *from_obj;
    PyObject *to_obj;
    struct sockaddr_in6 to;
    uint32_t to_len;
    Tally *tally; /* the thread's count of what it sent (freed once it let go) */
    Rx *rx;       /* the usual receive the thread may hold (freed likewise) */
    long long popped; /* the line's datagrams and records read (_rx.h: `published`) */
    long long rest;   /* not handed to the thread before this slot (it gave it back) */
} Port;

typedef struct {
    PyObject_HEAD
    Core *core;
    pthread_t thread;
    int running;
    Port *ports; /* by descriptor */
    int nports;
    PyObject *pending; /* the datagrams of the slot being read */
    PyObject *held;    /* slot -> datagrams a line held for Python, to join that slot's */
    Command cmd;
    Event ev;
    int deferred; /* retirements waiting for room in the command ring */
    long long oversized;
    long long refused; /* commands the ring had no room for */
    long long handed;  /* lines handed to the thread (own) */
    long long parks;   /* lines asked to hold their datagrams while Python is behind */
} Plane;

#include "_plane_held.h"
#include "_rxpy.h"

/* (Only once the thread no longer uses the port's line: acknowledged, or stopped.) */
static void port_clear(Port *port) {
    free(port->tally);
    port->tally = NULL;
    free(port->rx);
    port->rx = NULL;
    port->popped = port->rest = 0;
    Py_CLEAR(port->key);
    Py_CLEAR(port->sock);
    port->retiring = 0;
    Py_CLEAR(port->from_obj);
    Py_CLEAR(port->to_obj);
    port->from_len = port->to_len = 0;
}

static int Plane_init(Plane *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"rounds", "tick", "catch_up", "capacity", NULL};
    int rounds, catch_up = 3;
    double tick = 0.02;
    Py_ssize_t capacity = 32768;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|din", kwlist, &rounds, &tick, &catch_up,
                                     &capacity))
        return -1;
    if (rounds < 1 || rounds > MAX_ROUNDS || tick < 0.001 || tick > 1.0 || catch_up < 0 ||
        capacity < 16 * RESERVE || capacity > (1 << 22)) {
        PyErr_Format(PyExc_ValueError,
                     "rounds must be 1 to %d, tick 0.001 to 1 s, catch_up at least 0, "
                     "capacity %d to 4194304",
                     MAX_ROUNDS, 16 * RESERVE);
        return -1;
    }
    if (self->core != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Plane is made once");
        return -1;
    }
    Core *c = calloc(1, sizeof(Core));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->epfd = c->wakefd = -1;
    c->commands = ring_new((size_t)capacity / 4, sizeof(Command));
    c->events = ring_new((size_t)capacity, sizeof(Event));
    if (c->commands == NULL || c->events == NULL) {
        core_free(c);
        PyErr_NoMemory();
        return -1;
    }
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->epfd < 0 || c->wakefd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        core_free(c);
        return -1;
    }
    c->tick = (int64_t)(tick * 1e9 + 0.5);
    c->rounds = rounds;
    c->catch_up = catch_up;
    c->next = c->origin = mono_ns() + c->tick;
    atomic_store(&c->rx_pass, -1);
    self->pending = PyList_New(0);
    self->held = PyDict_New();
    if (self->pending == NULL || self->held == NULL) {
        Py_CLEAR(self->pending);
        Py_CLEAR(self->held);
        core_free(c);
        return -1;
    }
    self->core = c;
    return 0;
}

static int Plane_traverse(Plane *self, visitproc visit, void *arg) {
    for (int i = 0; i < self->nports; i++) {
        Py_VISIT(self->ports[i].key);
        Py_VISIT(self->ports[i].sock);
    }
    Py_VISIT(self->pending);
    Py_VISIT(self->held);
    return 0;
}

static void stop_thread(Plane *self) {
    if (!self->running)
        return;
    atomic_store_explicit(&self->core->stop, 1, memory_order_release);
    pthread_t thread = self->thread;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, NULL); /* at most one tick */
    Py_END_ALLOW_THREADS
    self->running = 0;
}

static void close_socket(PyObject *sock) {
    PyObject *r = PyObject_CallMethod(sock, "close", NULL);
    if (r == NULL)
        PyErr_Clear(); /* (closed already) */
    Py_XDECREF(r);
}

/* Close the sockets retired and not yet acknowledged: the thread is gone. */
static void close_retired(Plane *self) {
    for (int i = 0; i < self->nports; i++) {
        Port *port = &self->ports[i];
        if (port->sock != NULL && port->retiring)
            close_socket(port->sock);
        port_clear(port);
    }
}

static int Plane_clear(Plane *self) {
    /* The thread first: it may use the descriptors of the sockets let go below. (It
     * never takes the GIL, so joining it while holding the GIL cannot deadlock.) */
    if (self->running) {
        atomic_store_explicit(&self->core->stop, 1, memory_order_release);
        pthread_join(self->thread, NULL);
        self->running = 0;
    }
    for (int i = 0; i < self->nports; i++)
        port_clear(&self->ports[i]);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->held);
    return 0;
}

static void Plane_dealloc(Plane *self) {
    PyObject_GC_UnTrack(self);
    Plane_clear(self); /* (the thread first: never left on freed memory) */
    core_free(self->core);
    PyMem_Free(self->ports);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(Plane *self) {
    if (self->core == NULL || self->pending == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Plane is closed");
        return -1;
    }
    return 0;
}

static PyObject *Plane_start(Plane *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self) < 0)
        return NULL;
    if (self->running)
        Py_RETURN_NONE;
    self->core->next = mono_ns() + self->core->tick;
    self->core->origin = self->core->next - self->core->slot * self->core->tick;
    if (pthread_create(&self->thread, NULL, run, self->core) != 0)
        return PyErr_Format(PyExc_OSError, "cannot start the media thread");
    self->running = 1;
    Py_RETURN_NONE;
}

static PyObject *Plane_step(Plane *self, PyObject *arg) {
    if (check_open(self) < 0)
        return NULL;
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "step() is for a Plane whose thread is not started");
        return NULL;
    }
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    run_slot(self->core, (int64_t)(now * 1e9 + 0.5));
    Py_RETURN_NONE;
}

static PyObject *Plane_set_origin(Plane *self, PyObject *arg) {
    /* For step(): the time of slot 0 (the thread's own start takes now + tick). */
    if (check_open(self) < 0)
        return NULL;
    double at = PyFloat_AsDouble(arg);
    if (at == -1.0 && PyErr_Occurred())
        return NULL;
    if (self->running || self->core->slot != 0) {
        PyErr_SetString(PyExc_RuntimeError, "the origin is set before the first slot");
        return NULL;
    }
    self->core->next = self->core->origin = (int64_t)(at * 1e9 + 0.5);
    Py_RETURN_NONE;
}

#include "_plane_commands.h"

#include "_plane_news.h"

static PyObject *Plane_wake(Plane *self, PyObject *Py_UNUSED(ignored)) {
    uint64_t count = 0;
    if (self->core != NULL && read(self->core->wakefd, &count, sizeof(count)) < 0)
        count = 0;
    return PyLong_FromUnsignedLongLong(count);
}

static PyObject *Plane_fileno(Plane *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self) < 0)
        return NULL;
    return PyLong_FromLong(self->core->wakefd);
}

static PyObject *Plane_close(Plane *self, PyObject *Py_UNUSED(ignored)) {
    if (self->core == NULL || self->pending == NULL)
        Py_RETURN_NONE;
    stop_thread(self);
    close_retired(self);
    for (int i = 0; i < self->nports; i++)
        port_clear(&self->ports[i]);
    Py_CLEAR(self->pending);
    Py_RETURN_NONE;
}

static PyObject *Plane_prioritise(Plane *self, PyObject *args) {
    int fifo, nice;
    if (!PyArg_ParseTuple(args, "ii", &fifo, &nice))
        return NULL;
    if (!self->running) {
        PyErr_SetString(PyExc_RuntimeError, "the media thread is not running");
        return NULL;
    }
    if (fifo > 0) {
        struct sched_param param = {.sched_priority = fifo};
        int rc = pthread_setschedparam(self->thread, SCHED_FIFO, &param);
        if (rc != 0) {
            errno = rc;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
    }
    if (nice != 0) {
        int tid = 0;
        for (int i = 0; i < 1000 && (tid = atomic_load(&self->core->tid)) == 0; i++) {
            Py_BEGIN_ALLOW_THREADS
            usleep(1000);
            Py_END_ALLOW_THREADS
        }
        if (tid == 0 || setpriority(PRIO_PROCESS, (id_t)tid, nice) < 0)
            return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

#define COUNTER(name)                                                                      \
    static PyObject *Plane_get_##name(Plane *self, void *Py_UNUSED(closure)) {            \
        if (self->core == NULL)                                                            \
            return PyLong_FromLong(0);                                                     \
        return PyLong_FromLongLong(                                                        \
            atomic_load_explicit(&self->core->name, memory_order_relaxed));                \
    }
COUNTER(late_slots)
COUNTER(max_late)
COUNTER(skipped)
COUNTER(fillers)
COUNTER(covered)
COUNTER(stale)
COUNTER(sent)
COUNTER(send_errors)
COUNTER(lost_ticks)
COUNTER(faults)
COUNTER(rx_taken)
COUNTER(rx_returned)

static PyObject *Plane_get_handed(Plane *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->handed);
}

static PyObject *Plane_get_parks(Plane *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->parks);
}

static PyObject *Plane_get_slot(Plane *self, void *Py_UNUSED(closure)) {
    if (self->core == NULL)
        return PyLong_FromLong(0);
    return PyLong_FromLongLong(
        atomic_load_explicit(&self->core->running_slot, memory_order_acquire));
}

static PyObject *Plane_get_oversized(Plane *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->oversized);
}

static PyObject *Plane_get_refused(Plane *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->refused);
}

static PyObject *Plane_get_capacity(Plane *self, void *Py_UNUSED(closure)) {
    if (self->core == NULL)
        return PyLong_FromLong(0);
    return PyLong_FromSize_t(self->core->events->mask + 1);
}

static PyObject *Plane_get_running(Plane *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->running);
}

static PyMethodDef Plane_methods[] = {
    {"start", (PyCFunction)Plane_start, METH_NOARGS,
     "start(): the thread runs slots from one tick from now."},
    {"step", (PyCFunction)Plane_step, METH_O,
     "step(now): run one slot at time `now` (seconds, CLOCK_MONOTONIC) without the thread."},
    {"set_origin", (PyCFunction)Plane_set_origin, METH_O,
     "set_origin(at): the time of slot 0, for step()."},
    {"add", (PyCFunction)(void (*)(void))Plane_add, METH_VARARGS | METH_KEYWORDS,
     "add(sock, key, alaw=False): the thread reads and writes `sock`; its datagrams come "
     "with `key`; `alaw`: its audio is A-law (the silence it sends)."},
    {"tally", (PyCFunction)Plane_tally, METH_O,
     "tally(fd) -> (packets, octets, timestamp, at): the RTP packets the thread sent on the "
     "socket, their payload octets, the last audio packet's RTP timestamp and when it went "
     "(Unix time; 0: none yet), for the call's Sender Report."},
    {"retire", (PyCFunction)Plane_retire, METH_O,
     "retire(sock): the thread lets go of `sock`, which is then closed."},
    {"cover", (PyCFunction)Plane_cover, METH_VARARGS,
     "cover([(fd, first, clear, audio)], slot) -> int: each call's prompt audio (whole "
     "frames of G.711, at most three) for the slots from slot + first on, sent there "
     "instead of silence if Python's frame comes too late; clear: the call's cover from "
     "that slot on is dropped first. Returns how many could not be queued."},
    {"quiet", (PyCFunction)Plane_quiet, METH_VARARGS,
     "quiet(fd, slot): from `slot` the line sends nothing until its next frame (no "
     "fillers: on hold)."},
    {"send", (PyCFunction)(void (*)(void))Plane_send, METH_VARARGS | METH_KEYWORDS,
     "send(batch, slot, verbatim=False) -> int: queue each (fd, data, (host, port)) for "
     "`slot`; the number that cannot go (no address, too big, no room)."},
    {"next_slot", (PyCFunction)Plane_next_slot, METH_NOARGS,
     "next_slot() -> (slot, when, late, skipped, [(key, data, (host, port), arrival)]) | None: the "
     "next slot the thread finished, the slots it skipped before it, and the datagrams "
     "read in it, each with when it reached the host (on the slots' clock)."},
    {"wake", (PyCFunction)Plane_wake, METH_NOARGS,
     "wake() -> int: reset the wake-up descriptor (before reading the slots)."},
    {"fileno", (PyCFunction)Plane_fileno, METH_NOARGS,
     "fileno() -> int: readable when the thread finished a slot."},
    {"close", (PyCFunction)Plane_close, METH_NOARGS,
     "close(): stop the thread; close the sockets retired."},
    {"own", (PyCFunction)Plane_own, METH_VARARGS,
     "own(calls, slot) -> int: of each (session, fd), the sessions whose receive is in its "
     "usual state handed to the thread (edge/_rxpy.h), Python having worked slot `slot`; "
     "how many."},
    {"reclaim", (PyCFunction)Plane_reclaim, METH_VARARGS,
     "reclaim(fd, session, slot): the session's receive state back from the thread, if it "
     "holds it, Python working slot `slot`."},
    {"prioritise", (PyCFunction)Plane_prioritise, METH_VARARGS,
     "prioritise(fifo, nice): SCHED_FIFO at priority `fifo` (0: not), then nice `nice` "
     "(0: not) for the thread; OSError where the operator does not allow it."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Plane_getset[] = {
    {"slot", (getter)Plane_get_slot, NULL, "the next slot the thread runs", NULL},
    {"capacity", (getter)Plane_get_capacity, NULL, "records the event ring holds", NULL},
    {"late_slots", (getter)Plane_get_late_slots, NULL, "slots started over 2 ms late", NULL},
    {"max_late", (getter)Plane_get_max_late, NULL, "the latest start of a slot (ns)", NULL},
    {"skipped", (getter)Plane_get_skipped, NULL, "slots skipped after a long stall", NULL},
    {"fillers", (getter)Plane_get_fillers, NULL, "silence sent where Python was late", NULL},
    {"covered", (getter)Plane_get_covered, NULL,
     "a prompt's audio sent from its cover where Python was late", NULL},
    {"stale", (getter)Plane_get_stale, NULL, "frames that came after their slot", NULL},
    {"sent", (getter)Plane_get_sent, NULL, "datagrams sent", NULL},
    {"send_errors", (getter)Plane_get_send_errors, NULL, "datagrams the kernel refused", NULL},
    {"lost_ticks", (getter)Plane_get_lost_ticks, NULL, "TICK records the ring had no room for",
     NULL},
    {"faults", (getter)Plane_get_faults, NULL, "sockets the thread could not take", NULL},
    {"oversized", (getter)Plane_get_oversized, NULL, "datagrams over 512 bytes, dropped",
     NULL},
    {"refused", (getter)Plane_get_refused, NULL, "commands the ring had no room for", NULL},
    {"running", (getter)Plane_get_running, NULL, "whether the thread runs", NULL},
    {"rx_taken", (getter)Plane_get_rx_taken, NULL,
     "usual packets the thread took for the lines it held", NULL},
    {"rx_returned", (getter)Plane_get_rx_returned, NULL, "lines the thread gave back", NULL},
    {"handed", (getter)Plane_get_handed, NULL, "lines handed to the thread", NULL},
    {"parks", (getter)Plane_get_parks, NULL,
     "lines asked to hold their datagrams while Python is behind", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PlaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "callhook.edge._plane.Plane",
    .tp_doc = PyDoc_STR("Plane(rounds, tick=0.02, catch_up=3, capacity=32768): the media "
                        "plane's thread (see the module's source)."),
    .tp_basicsize = sizeof(Plane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Plane_init,
    .tp_dealloc = (destructor)Plane_dealloc,
    .tp_traverse = (traverseproc)Plane_traverse,
    .tp_clear = (inquiry)Plane_clear,
    .tp_methods = Plane_methods,
    .tp_getset = Plane_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "callhook.edge._plane",
    .m_doc = "The media plane's native thread.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__plane(void) {
    if (PyType_Ready(&PlaneType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PlaneType);
    if (PyModule_AddObject(m, "Plane", (PyObject *)&PlaneType) < 0) {
        Py_DECREF(&PlaneType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
