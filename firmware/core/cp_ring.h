/* Lock-free single-producer / single-consumer byte ring.
 *
 * One context (an ISR, or the main loop) only ever calls the put functions,
 * another only the get functions. The producer owns `head`, the consumer owns
 * `tail`; both are 8-bit so a read or write of either is atomic on AVR, and
 * each side publishes its index only after the bytes are in place (barrier).
 * Records written with one cp_ring_put() become visible all at once.
 *
 * Size: a power of two, 2..256 bytes. Indices run freely modulo 256, so the
 * usable capacity is the size, except 255 for a 256-byte ring. */
#ifndef CP_RING_H
#define CP_RING_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__AVR__)
/* single core: stopping the compiler from moving memory accesses is enough */
#define CP_RING_BARRIER() __asm__ __volatile__("" ::: "memory")
#elif defined(__GNUC__)
#define CP_RING_BARRIER() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#else
#define CP_RING_BARRIER() ((void)0)
#endif

typedef struct {
    uint8_t *buf;
    uint8_t mask;     /* size - 1 */
    uint8_t capacity; /* size, or 255 for 256 */
    volatile uint8_t head; /* next slot to write; written by the producer only */
    volatile uint8_t tail; /* next slot to read; written by the consumer only */
} cp_ring;

/* size must be a power of two in 2..256; returns 0 if not. */
int cp_ring_init(cp_ring *r, uint8_t *buf, uint16_t size);

static inline uint8_t cp_ring_used(const cp_ring *r)
{
    return (uint8_t)(r->head - r->tail);
}

static inline uint8_t cp_ring_free(const cp_ring *r)
{
    return (uint8_t)(r->capacity - (uint8_t)(r->head - r->tail));
}

/* Producer: one byte. Returns 1, or 0 (nothing written) when full. */
static inline int cp_ring_put_byte(cp_ring *r, uint8_t b)
{
    uint8_t h = r->head;
    if ((uint8_t)(h - r->tail) >= r->capacity) {
        return 0;
    }
    r->buf[h & r->mask] = b;
    CP_RING_BARRIER();
    r->head = (uint8_t)(h + 1u);
    return 1;
}

/* Consumer: one byte. Returns 1, or 0 when empty. */
static inline int cp_ring_get_byte(cp_ring *r, uint8_t *b)
{
    uint8_t t = r->tail;
    if (r->head == t) {
        return 0;
    }
    CP_RING_BARRIER();
    *b = r->buf[t & r->mask];
    CP_RING_BARRIER();
    r->tail = (uint8_t)(t + 1u);
    return 1;
}

/* Producer: all n bytes or none. Returns 1 if written. */
int cp_ring_put(cp_ring *r, const void *src, uint8_t n);

/* Consumer: all n bytes or none. Returns 1 if read. */
int cp_ring_get(cp_ring *r, void *dst, uint8_t n);

#ifdef __cplusplus
}
#endif

#endif
