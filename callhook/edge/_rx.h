/* A call's usual receive on the media thread: the state it holds for a line, and what it
 * does with the line's usual packet, without Python.  Header-only, part of _plane.c.
 *
 * Why: at 400 calls the usual packet's receive and detection on the event loop (the
 * datagram made a Python object, taken in C, decoded and measured, fed to the gate) was
 * about a quarter of the loop's CPU, and the loop's CPU share is what a busy machine
 * runs short of.  Most of a call's packets change only a handful of numbers and a few
 * small rings: the thread keeps them (an Rx) and Python never sees the packet.  That is
 * so while nothing but detection and a recording hear the caller, and the detector is in
 * one of three states that run no speech model and say no edge (`mode`): resting (a
 * prompt, digit entry: nothing listens), listening with its gate closed (a quiet line
 * while a recording waits for the caller's words or their end), or in an utterance the
 * model confirmed, which the energy holds.  A recording's frames wait in the Rx
 * (`rec`) until Python writes them (told every RX_RECORDS_TOLD frames, and when it takes
 * the line back).  The Python path stays the reference (session.py's receive, rtp.py's
 * feed_next, vad.py's feed, recorder.py's frame): this changes exactly what they would,
 * in the same order of floating-point operations (tests/unit/edge/test_plane_rx.py
 * compares the two; the build keeps the compiler from fusing them: -ffp-contract=off).
 * One thing comes later: a recording's failure (a full disk) is found when Python writes
 * the frames, up to 200 ms after Python alone would have found it.
 *
 * Who holds the state (`owner`): Python gives a line to the thread (_rxpy.h, Plane.own)
 * only when no datagram or record of the line is on its way to Python (every one the
 * thread published has been read: `published`, counted here, against the count Python
 * read; a RECORDED record is not counted: Python hands over only once it has read the
 * slot's records, and a RECORDED record read after a new hand-over only has the new
 * frames written early, in order; where the thread has run past the slot Python worked,
 * Python first has it hold the line's packets instead of publishing them, `park`, and
 * hands the line over once it has read the last one published: the thread takes the
 * held ones first, in their slots, _plane.c's rx_unpark); the thread gives it back by setting `owner` to Python and publishing the packet
 * it does not take (or a RETURNED record); Python takes it back whenever it needs it
 * (Plane.reclaim).  `lock` makes each of those a single step.  The thread only ever tries
 * it: where Python holds it (for a change of hands), the thread leaves the line's socket
 * unread for the slot (its packets wait in the kernel) and its slot's end for later.
 *
 * A slot's end (session.py's tick: the silence fed where the caller's audio stopped, the
 * dead-call check) is done for every slot in order, whoever does it: `ended` is the last
 * slot whose end is done.  Python's tick does the slots it works while it holds the
 * line; the thread, from the next one on, catching up on any it has not done (a
 * hand-over while Python is behind the thread, a slot whose end found the lock taken)
 * before it takes a packet or ends a slot; Python catches up to the slot it works when it
 * takes the line back, and its tick leaves the slots the thread did (Inlet.rx_until).
 */
#ifndef CALLHOOK_EDGE_RX_H
#define CALLHOOK_EDGE_RX_H

#include <math.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "../media/_rtpcounts.h"

/* The payload the thread takes: G.711 at 20 ms (other sizes stay with Python). */
#define RX_FRAME 160
/* Room for session.py's PREROLL_FRAMES, vad.py's BLOCKS and PREROLL (checked when given). */
#define RX_PREROLL 64
#define RX_BLOCKS 16
#define RX_VAD_PREROLL 16
/* A recording's frames: the thread tells Python (a RECORDED record) when it holds
 * RX_RECORDS_TOLD of them, and Python writes them, the thread going on with the line:
 * every 200 ms, as Python's own writes come (wavfile.py's FLUSH_BYTES), so that a crash
 * loses little more than it did.  Where Python is behind, the thread holds up to
 * RX_RECORDS (1 s), then gives the line back for Python to write them. */
#define RX_RECORDS_TOLD 10
#define RX_RECORDS 50
/* A line Python asks the thread to hold while Python is behind it (`park`): its packets
 * wait in the line, each with the slot it was read in, up to RX_PARKED of them (the
 * rest in the kernel), until Python has worked the line's last datagram it published and
 * hands the line over, or takes the packets itself (_rxpy.h). */
#define RX_PARKED 64
#define RX_PARKED_BYTES 512

enum { RX_PYTHON = 0, RX_THREAD = 1 };

/* A datagram a line holds while Python is behind (RX_PARKED): the slot it was read in,
 * that slot's time and its own arrival (ns), whether it was truncated (over DATA_MAX). */
typedef struct {
    int64_t slot, now, when;
    uint16_t len;
    uint8_t cut;
    uint32_t addr_len;
    struct sockaddr_in6 addr;
    unsigned char data[RX_PARKED_BYTES];
} RxHeld;

/* The detector's state while the thread holds it: vad.py's feed() runs no model and
 * says no edge in each (any frame that would is Python's, with the line). */
enum {
    RX_RESTING = 0, /* paused: nothing listens for voice activity */
    RX_CLOSED = 1,  /* listening, the gate closed: a quiet line */
    RX_HELD = 2,    /* listening, an utterance the model confirmed, the energy holds */
};

typedef struct {
    atomic_int lock;
    atomic_int owner;        /* RX_PYTHON or RX_THREAD */
    atomic_llong published;  /* datagrams of the line the thread gave Python */
    atomic_llong taken;      /* usual packets the thread took itself */
    /* --- the state: the owner's alone --- */
    struct sockaddr_in6 peer; /* where the call is latched to (session.remote) */
    uint32_t peer_len;
    int payload_type;
    uint32_t ssrc;
    RtpCounts counts; /* rtp.py's RtpReceiver (RFC 3550 A.1, A.8): its ReceiverCore's */
    /* session.py's flood limit, audio clock and dead-call clock */
    long long bucket_count, flood_limit;
    double bucket_start, last_audio, silent_after, rtp_since, rtp_timeout;
    double last_heard; /* the last audio frame's arrival (session.py's _last_heard) */
    int since_set, expects_rtp;
    int16_t table[256];  /* the call's law, decoded */
    double silence_power; /* the power of session.py's _silence_pcm */
    /* session.py's pre-roll: (timestamp, payload), oldest first */
    int pre_max, pre_head, pre_size;
    long long pre_ts[RX_PREROLL];
    unsigned char pre[RX_PREROLL][RX_FRAME];
    /* vad.py's detector (GateCore's fields and the model's gain: _gate.h, vad.py) */
    int mode; /* RX_RESTING, RX_CLOSED or RX_HELD */
    long long run, closed_for, block_count, hangover_frames, block_frames, closed_long;
    long long gate_quiet;
    double block_min, history_floor, margin, min_power, start_power, hold, release;
    double gain_floor, gain_db, gain, model_floor_dbfs, max_gain_db, gain_step_db;
    int prior, active, says_speech;
    int blocks_max, blocks_head, blocks_size;
    double blocks[RX_BLOCKS];
    /* its pre-roll while the gate is closed (RX_CLOSED): the frames decoded, oldest first */
    int vpre_max, vpre_head, vpre_size, vpre_changed;
    int16_t vpre[RX_VAD_PREROLL][RX_FRAME];
    /* the recording's frames not yet written (recorder.py's CallerRecording.frame), and
     * the time of the slot each was taken in (Python writes none before its time) */
    int recording, rec_size, rec_full, rec_told;
    long long rec_ts[RX_RECORDS];
    double rec_at[RX_RECORDS];
    unsigned char rec[RX_RECORDS][RX_FRAME];
    /* the last slot whose end is done; slot n's time: origin + n * tick (ns) */
    long long ended;
    int64_t origin, tick;
    /* --- the packets held while Python is behind (RX_PARKED): `park` is Python's
     * request; the rest change under the lock (the thread's while it reads the line) --- */
    atomic_int park;
    int parked, parked_over, parked_back; /* held; some left in the kernel; given back */
    RxHeld held[RX_PARKED];
} Rx;

/* (The thread's: it never waits for Python, which holds the lock for a few stores, bar
 * a preemption: a few tries, then the line's work waits.) */
static inline int rx_trylock(Rx *rx) {
    for (int tries = 0; tries < 64; tries++) {
        if (!atomic_exchange_explicit(&rx->lock, 1, memory_order_acquire))
            return 1;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    return 0;
}

/* (Python's: the thread holds it for one socket's packets of a slot at most.) */
static inline void rx_lock(Rx *rx) {
    int spins = 0;
    while (atomic_exchange_explicit(&rx->lock, 1, memory_order_acquire)) {
        /* (Held for a packet's work: a preempted holder is waited for, not spun on.) */
        if (++spins > 100)
            sched_yield();
    }
}

static inline void rx_unlock(Rx *rx) { atomic_store_explicit(&rx->lock, 0, memory_order_release); }

/* The place of the item appended to a ring of `max` (oldest at `*head`, `*size` of them),
 * as a deque of that maxlen appends: a full one drops its oldest. */
static inline int rx_ring_append(int *head, int *size, int max) {
    if (*size == max) {
        int k = *head;
        *head = (*head + 1) % max;
        return k;
    }
    return (*head + (*size)++) % max;
}

/* What a frame changes of the detector, worked out before anything changes (rx_vad_plan)
 * and then made (rx_vad_take). */
typedef struct {
    double block_min, history_floor;
    long long block_count, run, gate_quiet;
    int completes, prior;
} RxPlan;

/* The noise floor once a block of `block_min` joins the blocks (vad.py's feed(): the
 * prior's block dropped, or the oldest of a full deque; then their minimum). */
static inline double rx_next_floor(const Rx *rx, double block_min) {
    double floor = block_min;
    if (rx->prior)
        return floor;
    int skip = rx->blocks_size == rx->blocks_max ? 1 : 0;
    for (int i = skip; i < rx->blocks_size; i++) {
        double b = rx->blocks[(rx->blocks_head + i) % rx->blocks_max];
        if (b < floor)
            floor = b;
    }
    return floor;
}

/* vad.py's feed() of a frame of `power` in the detector's `mode`: 1 and `plan` made
 * where it runs no model and says no edge (the frame the thread's), 0 where it would
 * (Python's: nothing changed).  As feed() and _gated() do, and _gate.c's feed(). */
static inline int rx_vad_plan(const Rx *rx, double power, RxPlan *plan) {
    /* The noise floor: this frame's is the blocks' and this block's so far; a frame
     * that completes a block moves the blocks' floor and ends the prior. */
    plan->block_min = power < rx->block_min ? power : rx->block_min;
    plan->block_count = rx->block_count + 1;
    double floor = rx->history_floor < plan->block_min ? rx->history_floor : plan->block_min;
    plan->completes = plan->block_count >= rx->block_frames;
    plan->history_floor = plan->completes ? rx_next_floor(rx, plan->block_min) : rx->history_floor;
    plan->prior = plan->completes ? 0 : rx->prior;
    plan->gate_quiet = rx->gate_quiet;
    if (rx->mode == RX_RESTING) {
        /* _gated(): no speech; _edge(False): a hangover frame, or none. */
        plan->run = rx->active ? rx->run + 1 : 0;
        return !(rx->active && plan->run >= rx->hangover_frames);
    }
    double minimum = plan->prior ? rx->start_power : rx->min_power;
    double threshold = floor * rx->margin;
    if (minimum > threshold)
        threshold = minimum;
    if (rx->mode == RX_CLOSED) {
        /* Quiet: the gate stays closed (loud: it opens, the model runs). */
        plan->run = 0;
        return !(power > threshold);
    }
    /* RX_HELD: an utterance held by the energy, while the gate stays open. */
    double open = threshold * rx->hold;
    int loud = power > (rx->min_power > open ? rx->min_power : open);
    plan->gate_quiet = loud ? 0 : rx->gate_quiet + 1;
    if (plan->gate_quiet >= rx->hangover_frames)
        return 0; /* the gate closes: Python's frame (vad.py, _gated: the utterance ends) */
    double keep = threshold * rx->release;
    int speech = loud && power > (rx->min_power > keep ? rx->min_power : keep);
    plan->run = speech ? 0 : rx->run + 1;
    return plan->run < rx->hangover_frames; /* (else the utterance ends: an edge) */
}

/* The power of a signal at -120 dBFS (vad.py's _power(SILENCE_DBFS)). */
static inline double rx_silence_floor(void) { return 32768.0 * 32768.0 * pow(10.0, -120.0 / 10.0); }

/* vad.py's _follow_floor(), the gate closed (after the floor moved, before _edge). */
static inline void rx_follow_floor(Rx *rx) {
    if (rx->prior || rx->says_speech || rx->run)
        return;
    double floor = rx->history_floor;
    if (floor == rx->gain_floor)
        return;
    rx->gain_floor = floor;
    double floor_dbfs = floor > rx_silence_floor()
                            ? 10.0 * log10(floor / (32768.0 * 32768.0))
                            : -120.0;
    double below = rx->model_floor_dbfs - floor_dbfs;
    double gain = below > 0.0 ? below : 0.0;
    if (!(gain < rx->max_gain_db))
        gain = rx->max_gain_db;
    if (fabs(gain - rx->gain_db) < rx->gain_step_db && (gain != 0.0 || rx->gain_db == 0.0))
        return;
    rx->gain_db = gain;
    rx->gain = pow(10.0, gain / 20.0);
}

/* The frame `plan` was made for (rx_vad_plan said 1) fed: its `payload`, NULL for the
 * tick's silence. */
static inline void rx_vad_take(Rx *rx, const RxPlan *plan, const unsigned char *payload) {
    if (plan->completes) {
        if (rx->prior) /* the prior's block goes: the first measured one replaces it */
            rx->blocks_size = rx->blocks_head = 0;
        rx->blocks[rx_ring_append(&rx->blocks_head, &rx->blocks_size, rx->blocks_max)] =
            plan->block_min;
        rx->prior = 0;
        rx->history_floor = plan->history_floor;
        rx->block_min = HUGE_VAL;
        rx->block_count = 0;
    } else {
        rx->block_min = plan->block_min;
        rx->block_count = plan->block_count;
    }
    if (rx->mode == RX_RESTING) {
        rx->closed_for = rx->closed_long;
    } else if (rx->mode == RX_CLOSED) {
        rx_follow_floor(rx); /* (with the run before this frame's _edge) */
        rx->closed_for += 1;
        int k = rx_ring_append(&rx->vpre_head, &rx->vpre_size, rx->vpre_max);
        if (payload == NULL)
            memset(rx->vpre[k], 0, sizeof(rx->vpre[k]));
        else
            for (int i = 0; i < RX_FRAME; i++)
                rx->vpre[k][i] = rx->table[payload[i]];
        rx->vpre_changed = 1;
    }
    rx->gate_quiet = plan->gate_quiet;
    rx->run = plan->run;
}

/* The datagram `p` (`size` bytes from `from`) at the slot's time `now`, reached the host
 * at `arrival`: 1 taken, 0 not the usual packet (nothing changed: Python's). */
static inline int rx_take(Rx *rx, const unsigned char *p, size_t size, const void *from,
                          uint32_t from_len, double now, double arrival) {
    /* session.py's receive(): from the peer (latched), under the flood limit, plain RTP
     * in the call's codec; rtp.py's feed_next(): the next packet of the current source. */
    if (from_len != rx->peer_len || memcmp(from, &rx->peer, from_len) != 0)
        return 0;
    double bucket_start = rx->bucket_start;
    long long bucket_count = rx->bucket_count;
    if (arrival - bucket_start >= 1.0) {
        bucket_start = arrival;
        bucket_count = 0;
    }
    bucket_count += 1;
    if (bucket_count > rx->flood_limit)
        return 0;
    if (size != 12 + RX_FRAME || p[0] != 0x80 || (p[1] & 0x7F) != rx->payload_type)
        return 0;
    long long seq = ((long long)p[2] << 8) | p[3];
    long long ts = ((long long)p[4] << 24) | (p[5] << 16) | (p[6] << 8) | p[7];
    uint32_t ssrc = (uint32_t)p[8] << 24 | (uint32_t)p[9] << 16 | (uint32_t)p[10] << 8 | p[11];
    long long ext;
    int wraps;
    if (ssrc != rx->ssrc || !rtp_counts_next(&rx->counts, seq, &ext, &wraps))
        return 0;
    /* session.py's _audio(): detection (frames.py's power: the sum of the squares, exact
     * in 64 bits, over the frame's length) must run no model and say no edge, and a
     * recording must have room for the frame. */
    int64_t sum = 0;
    for (int i = 0; i < RX_FRAME; i++) {
        int32_t sample = rx->table[p[12 + i]];
        sum += (int64_t)(sample * sample);
    }
    RxPlan plan;
    if (!rx_vad_plan(rx, (double)sum / (double)RX_FRAME, &plan))
        return 0;
    if (rx->recording && rx->rec_size == RX_RECORDS) {
        rx->rec_full = 1; /* (Python writes them, and hands the line over again at once) */
        return 0;
    }

    /* Taken: what _inlet.c's take() changes, in its order. */
    rx->bucket_start = bucket_start;
    rx->bucket_count = bucket_count;
    rtp_counts_take(&rx->counts, seq, ts, ext, wraps, now);
    if (rx->since_set)
        rx->rtp_since = now;
    /* session.py's _audio(): the pre-roll, the recording, then detection. */
    rx->last_audio = now;
    rx->last_heard = arrival;
    int k = rx_ring_append(&rx->pre_head, &rx->pre_size, rx->pre_max);
    rx->pre_ts[k] = ts;
    memcpy(rx->pre[k], p + 12, RX_FRAME);
    if (rx->recording) {
        rx->rec_ts[rx->rec_size] = ts;
        rx->rec_at[rx->rec_size] = now;
        memcpy(rx->rec[rx->rec_size], p + 12, RX_FRAME);
        rx->rec_size++;
    }
    rx_vad_take(rx, &plan, p + 12);
    atomic_fetch_add_explicit(&rx->taken, 1, memory_order_relaxed);
    return 1;
}

/* The end of the slot at `now` (session.py's tick, its receive side): 0, or 1 where the
 * line goes back to Python (the call is about to be taken for dead, or the silence that
 * stands for missing audio would say an edge or close the gate: Python's to say). */
static inline int rx_slot_end(Rx *rx, double now) {
    if (rx->since_set && rx->rtp_timeout > 0 && rx->expects_rtp &&
        now - rx->rtp_since >= rx->rtp_timeout)
        return 1;
    if (now - rx->last_audio > rx->silent_after && rx->last_audio != 0.0) {
        /* No audio packets (silence suppression, a stalled stream): it is silence. */
        RxPlan plan;
        if (!rx_vad_plan(rx, rx->silence_power, &plan))
            return 1;
        rx_vad_take(rx, &plan, NULL);
    }
    return 0;
}

/* Slot `slot`'s time, as Python has it (the slot's record: its ns / 1e9). */
static inline double rx_time(const Rx *rx, long long slot) {
    return (double)(rx->origin + (int64_t)slot * rx->tick) / 1e9;
}

/* The ends of the slots after `ended` up to `slot`, in order: 0, or 1 where one of them
 * is Python's to do (rx_slot_end; `ended` is the slot before it). */
static inline int rx_catch_up(Rx *rx, long long slot) {
    if (slot - rx->ended > 3000)
        return 1; /* (a minute: the line goes back as it is) */
    while (rx->ended < slot) {
        if (rx_slot_end(rx, rx_time(rx, rx->ended + 1)))
            return 1;
        rx->ended++;
    }
    return 0;
}

#endif
