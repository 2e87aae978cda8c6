/* SPSC byte ring (see cp_ring.h for the concurrency contract). */
#include "cp_ring.h"

int cp_ring_init(cp_ring *r, uint8_t *buf, uint16_t size)
{
    if (size < 2u || size > 256u || (size & (size - 1u)) != 0u) {
        return 0;
    }
    r->buf = buf;
    r->mask = (uint8_t)(size - 1u);
    r->capacity = (uint8_t)(size == 256u ? 255u : size);
    r->head = 0;
    r->tail = 0;
    return 1;
}

int cp_ring_put(cp_ring *r, const void *src, uint8_t n)
{
    const uint8_t *s = (const uint8_t *)src;
    uint8_t h = r->head;
    uint8_t mask = r->mask;
    if ((uint8_t)(r->capacity - (uint8_t)(h - r->tail)) < n) {
        return 0;
    }
    while (n--) {
        r->buf[h & mask] = *s++;
        h++;
    }
    CP_RING_BARRIER(); /* bytes before the index that publishes them */
    r->head = h;
    return 1;
}

int cp_ring_get(cp_ring *r, void *dst, uint8_t n)
{
    uint8_t *d = (uint8_t *)dst;
    uint8_t t = r->tail;
    uint8_t mask = r->mask;
    if ((uint8_t)(r->head - t) < n) {
        return 0;
    }
    CP_RING_BARRIER(); /* index before the bytes it covers */
    while (n--) {
        *d++ = r->buf[t & mask];
        t++;
    }
    CP_RING_BARRIER(); /* bytes read before the slots are handed back */
    r->tail = t;
    return 1;
}
