/* Independent references for the tests: a bit-by-bit CRC (no table) and a
 * frame decoder written from PROTOCOL.md's offsets, sharing no code with the
 * firmware core. */
#ifndef REF_H
#define REF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t ref_crc(const uint8_t *d, size_t n)
{
    uint16_t crc = 0xFFFF;
    size_t i;
    int b;
    for (i = 0; i < n; i++) {
        crc ^= (uint16_t)(d[i] << 8);
        for (b = 0; b < 8; b++) {
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
        }
    }
    return crc;
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

typedef struct {
    uint8_t type;
    uint8_t len;
    uint16_t seq;
    uint32_t t_us;
    const uint8_t *payload;
} ref_frame;

/* Decode one frame at d[0..n); returns its length, 0 if incomplete or bad. */
static inline size_t ref_decode(const uint8_t *d, size_t n, ref_frame *f)
{
    size_t total;
    if (n < 12 || d[0] != 0xA5 || d[1] != 0x5A) {
        return 0;
    }
    total = 12u + d[3];
    if (n < total) {
        return 0;
    }
    if (ref_crc(d + 2, 8u + d[3]) != le16(d + 10 + d[3])) {
        return 0;
    }
    f->type = d[2];
    f->len = d[3];
    f->seq = le16(d + 4);
    f->t_us = le32(d + 6);
    f->payload = d + 10;
    return total;
}

/* Build a host -> device command (independently of the firmware). */
static inline size_t ref_command(uint8_t *out, uint8_t cmd, const uint8_t *payload, uint8_t len)
{
    uint16_t crc;
    out[0] = 0xA5;
    out[1] = 0x5A;
    out[2] = cmd;
    out[3] = len;
    if (len) {
        memcpy(out + 4, payload, len);
    }
    crc = ref_crc(out + 2, 2u + len);
    out[4 + len] = (uint8_t)crc;
    out[5 + len] = (uint8_t)(crc >> 8);
    return 6u + len;
}

#endif
