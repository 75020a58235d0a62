/* The lock-free single-producer, single-consumer ring of fixed-size records, shared by
 * _ring.c (its Python type and tests) and the media plane (edge/_plane.c): see _ring.c for
 * the reasoning. Header-only: each extension gets its own copy of these static functions.
 */
#ifndef CALLHOOK_RINGCORE_H
#define CALLHOOK_RINGCORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_LINE 64

typedef struct {
    _Alignas(CACHE_LINE) atomic_size_t head; /* next slot the producer writes */
    _Alignas(CACHE_LINE) atomic_size_t tail; /* next slot the consumer reads */
    _Alignas(CACHE_LINE) atomic_ullong dropped; /* pushes refused: the ring was full */
    size_t mask;        /* capacity - 1: the capacity is a power of two */
    size_t record_size; /* bytes per record */
    unsigned char *slots;
} Ring;

/* Make a ring of at least `capacity` records of `record_size` bytes; NULL if out of memory. */
static inline Ring *ring_new(size_t capacity, size_t record_size) {
    size_t size = 1;
    while (size < capacity)
        size <<= 1;
    Ring *ring = aligned_alloc(CACHE_LINE, (sizeof(Ring) + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
    if (ring == NULL)
        return NULL;
    ring->slots = calloc(size, record_size);
    if (ring->slots == NULL) {
        free(ring);
        return NULL;
    }
    atomic_init(&ring->head, 0);
    atomic_init(&ring->tail, 0);
    atomic_init(&ring->dropped, 0);
    ring->mask = size - 1;
    ring->record_size = record_size;
    return ring;
}

static inline void ring_free(Ring *ring) {
    if (ring != NULL) {
        free(ring->slots);
        free(ring);
    }
}

/* The producer's side: copy one record in; 0 when the ring is full (counted). */
static inline int ring_push(Ring *ring, const void *record) {
    size_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    size_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
    if (head - tail > ring->mask) {
        atomic_fetch_add_explicit(&ring->dropped, 1, memory_order_relaxed);
        return 0;
    }
    memcpy(ring->slots + (head & ring->mask) * ring->record_size, record, ring->record_size);
    atomic_store_explicit(&ring->head, head + 1, memory_order_release);
    return 1;
}

/* The consumer's side: copy the oldest record out; 0 when the ring is empty. */
static inline int ring_pop(Ring *ring, void *record) {
    size_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    size_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    if (head == tail)
        return 0;
    memcpy(record, ring->slots + (tail & ring->mask) * ring->record_size, ring->record_size);
    atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    return 1;
}

static inline size_t ring_len(Ring *ring) {
    size_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    size_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
    return head - tail;
}

/* The consumer's side without a copy: the oldest record in place (NULL: empty); it stays
 * the ring's until ring_advance() hands it back. */
static inline void *ring_peek(Ring *ring) {
    size_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    size_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    if (head == tail)
        return NULL;
    return ring->slots + (tail & ring->mask) * ring->record_size;
}

static inline void ring_advance(Ring *ring) {
    size_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
}

/* Records the producer can still push. */
static inline size_t ring_room(Ring *ring) {
    size_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    size_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
    return ring->mask + 1 - (head - tail);
}

#endif
