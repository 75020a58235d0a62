/* What a call's usual RTP packet changes of rtp.py's RtpReceiver (RFC 3550 A.1, the
 * sequence; A.8, the interarrival jitter), and how: one struct and two functions, used
 * where Python takes the packet in C (_inlet.c, the struct inside ReceiverCore) and where
 * the media thread takes it (edge/_rx.h, a copy of that struct), so that the two change
 * the same numbers in the same order of floating-point operations.  Pure C, header-only. */
#ifndef CALLHOOK_MEDIA_RTPCOUNTS_H
#define CALLHOOK_MEDIA_RTPCOUNTS_H

#define RTP_SEQ_MOD 65536LL
#define RTP_MAX_DROPOUT 3000LL

typedef struct {
    long long received;
    long long max_seq;
    long long cycles;
    long long next;
    long long last_ts;
    unsigned long long history;
    long long clock_rate;
    double jitter;
    double last_arrival;
} RtpCounts;

/* Whether sequence number `seq` is the next packet of the current source (rtp.py's
 * feed_next): 1, its extended number in *ext and whether it wraps in *wraps; 0 if not. */
static inline int rtp_counts_next(const RtpCounts *c, long long seq, long long *ext, int *wraps) {
    if (((seq - c->max_seq) & 0xFFFF) >= RTP_MAX_DROPOUT)
        return 0;
    *wraps = seq < c->max_seq;
    *ext = c->cycles + seq + (*wraps ? RTP_SEQ_MOD : 0);
    return *ext == c->next;
}

/* That packet (rtp_counts_next's `ext` and `wraps`, its timestamp `ts`) taken at `now`,
 * the slot's time: the counts, the sequence and the jitter as RtpReceiver changes them. */
static inline void rtp_counts_take(RtpCounts *c, long long seq, long long ts, long long ext,
                                   int wraps, double now) {
    if (wraps)
        c->cycles += RTP_SEQ_MOD;
    c->max_seq = seq;
    c->received += 1;
    if (ts != c->last_ts) {
        /* Interarrival jitter (RFC 3550 A.8), as RtpReceiver._arrived computes it. */
        double arrival = now * (double)c->clock_rate;
        if (c->last_ts >= 0) {
            long long span = ((ts - c->last_ts + 0x80000000LL) & 0xFFFFFFFFLL) - 0x80000000LL;
            double d = arrival - c->last_arrival - (double)span;
            if (d < 0)
                d = -d;
            c->jitter += (d - c->jitter) * 0.0625;
        }
        c->last_arrival = arrival;
        c->last_ts = ts;
    }
    c->next = ext + 1;
    c->history = (c->history << 1) | 1;
}

#endif
