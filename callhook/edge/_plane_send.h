/* The media plane's thread: sending a slot's packets (part of _plane.c, included there;
 * no Python, no GIL): each line's frame queued for the slot, renumbered on the line's
 * sequence and media clock (RFC 3550 §5.1); a telephone-event going on (RFC 4733); the
 * prompt's cover or a filler of silence where Python's frame did not come. */

static void put_u16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t real_ns(void);

static void transmit(Core *c, int fd, Line *line, const unsigned char *data, size_t len,
                     const struct sockaddr_in6 *to, uint32_t to_len) {
    /* A full buffer or an ICMP error for a peer that went away costs that packet only. */
    if (sendto(fd, data, len, MSG_DONTWAIT, (const struct sockaddr *)to, to_len) < 0) {
        COUNT(c, send_errors, 1);
        return;
    }
    COUNT(c, sent, 1);
    Tally *t = line->tally;
    if (t == NULL || len < 12 || (data[0] & 0xC0) != 0x80)
        return;
    /* The timestamp is the media clock's: an audio packet's (an event's is its start,
     * RFC 4733 §2.5.1.2, which only a call with no audio yet has to go by). */
    int stamped = len > EVENT_LEN || atomic_load_explicit(&t->wall, memory_order_relaxed) == 0;
    int64_t wall = stamped ? real_ns() : 0;
    /* (A seqlock: odd while the four change, so that Python reads them as one.) */
    atomic_fetch_add_explicit(&t->change, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_fetch_add_explicit(&t->packets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->octets, (long long)len - 12, memory_order_relaxed);
    if (stamped) {
        atomic_store_explicit(&t->stamp, (long long)get_u32(data + 4), memory_order_relaxed);
        atomic_store_explicit(&t->wall, wall, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&t->change, 1, memory_order_release);
}

static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* An event packet Python sent (the size of one, whatever its payload type): remembered, so
 * that a slot Python is late for goes on with the event as Python would have (§2.5.1.2:
 * the same timestamp, a longer duration; §2.5.1.4: the end packet three times), not
 * with audio in the middle of it. */
static void keep_event(Line *line, const unsigned char *d) {
    int end = (d[13] & 0x80) != 0;
    int same = line->event_live && memcmp(line->event + 4, d + 4, 4) == 0;
    line->event_ends = end ? (same ? line->event_ends : 0) + 1 : 0;
    line->event_live = line->event_ends < EVENT_ENDS;
    memcpy(line->event, d, EVENT_LEN);
}

/* A frame Python made: numbered here (unless SRTP), remembered for the fillers. */
static void send_frame(Core *c, int fd, Line *line, Frame *frame) {
    unsigned char *d = frame->data;
    size_t len = frame->len;
    frame->slot = -1;
    line->live = 1;
    line->to = frame->to;
    line->to_len = frame->to_len;
    if (!line->verbatim && len >= 12 && (d[0] & 0xC0) == 0x80) {
        if (!line->seq_set) {
            line->seq = (uint16_t)(d[2] << 8 | d[3]);
            line->seq_set = 1;
        }
        put_u16(d + 2, line->seq++);
        /* Python sends its codec's audio (G.711, a 20 ms frame: longer than an event)
         * and RFC 4733 events (a 4-byte payload), whatever their payload types: a
         * dynamic one for either, as the offer gave it (sip/offeranswer.py). */
        if (d[0] == 0x80 && len == EVENT_LEN) {
            /* (Python's packet for an event the thread went on with, ended meanwhile:
             * its duration never goes back, §2.5.1.2.) */
            if (line->event_live && memcmp(line->event + 4, d + 4, 4) == 0 &&
                get_u16(d + 14) < get_u16(line->event + 14))
                memcpy(d + 14, line->event + 14, 2);
            keep_event(line, d);
        }
        else
            line->event_live = 0;
        if (d[0] == 0x80 && len > EVENT_LEN) {
            memcpy(line->header, d, 12);
            line->audio_ts = get_u32(d + 4);
            line->audio_slot = c->slot;
            line->audio_len = (uint16_t)(len - 12);
            line->have_audio = 1;
        }
    }
    transmit(c, fd, line, d, len, &frame->to, frame->to_len);
}

/* Where Python's frame has not come during an event: its next packet. */
static void send_event(Core *c, int fd, Line *line) {
    unsigned char *d = c->filler;
    memcpy(d, line->event, EVENT_LEN);
    d[1] &= 0x7F; /* (the marker is the event's first packet's only, §2.4.2) */
    put_u16(d + 2, line->seq++);
    uint16_t duration = get_u16(d + 14);
    if (!(d[13] & 0x80)) {
        duration = duration + FRAME_SAMPLES >= EVENT_SAMPLES ? EVENT_SAMPLES
                                                             : (uint16_t)(duration + FRAME_SAMPLES);
        if (duration == EVENT_SAMPLES)
            d[13] |= 0x80;
        put_u16(d + 14, duration);
    }
    keep_event(line, d);
    COUNT(c, covered, 1);
    transmit(c, fd, line, d, EVENT_LEN, &line->to, line->to_len);
}

/* Where Python's frame has not come: the event being sent goes on; or the prompt's audio
 * Python gave for the slot (its cover), or silence; the line's media clock goes on. */
static void send_filler(Core *c, int fd, Line *line) {
    if (line->event_live) {
        send_event(c, fd, line);
        return;
    }
    unsigned char *d = c->filler;
    memcpy(d, line->header, 12);
    d[1] &= 0x7F; /* no marker: the talkspurt goes on (RFC 3551 §4.1) */
    put_u16(d + 2, line->seq++);
    put_u32(d + 4, line->audio_ts +
                       (uint32_t)((c->slot - line->audio_slot) * FRAME_SAMPLES));
    int k = (int)(c->slot % COVER_SLOTS);
    if (line->cover_slot[k] == c->slot && line->audio_len == COVER_BYTES) {
        memcpy(d + 12, line->cover[k], COVER_BYTES);
        COUNT(c, covered, 1);
    } else {
        memset(d + 12, line->silence, line->audio_len);
        COUNT(c, fillers, 1);
    }
    transmit(c, fd, line, d, 12 + (size_t)line->audio_len, &line->to, line->to_len);
}

/* Step 2. */
static void send_slot(Core *c) {
    for (int i = 0; i < c->nactive; i++) {
        int fd = c->active[i];
        Line *line = c->lines[fd];
        Frame *frame = &line->frames[c->slot % DEPTH];
        if (line->closing && frame->slot != c->slot)
            continue;
        if (frame->slot == c->slot && frame->len == QUIET_LEN) {
            frame->slot = -1;
            line->live = 0; /* on hold from this slot: nothing in its place */
        } else if (frame->slot == c->slot)
            send_frame(c, fd, line, frame);
        else if (line->live && (line->have_audio || line->event_live) && !line->verbatim)
            send_filler(c, fd, line);
    }
}
