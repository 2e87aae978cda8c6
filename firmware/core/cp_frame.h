/* Builders for device -> host frames. Each writes a complete frame
 * (sync .. crc) into `out` and returns its length (12 + payload length). */
#ifndef CP_FRAME_H
#define CP_FRAME_H

#include <stdint.h>

#include "cp_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One reading; t_us is the device time the reading stands for. */
typedef struct {
    uint32_t t_us;
    int16_t current;
    uint16_t bus;
    uint8_t markers;
} cp_sample;

/* Contents of an IDENT frame (PROTOCOL.md, type 0x03). */
typedef struct {
    uint8_t front_end;
    uint8_t marker_count;
    uint8_t flags;
    uint32_t rate_hz;
    uint32_t shunt_uohm;
    int32_t current_lsb_nA;
    uint32_t bus_lsb_uV;
    uint16_t bus_nominal_mV;
    char fw_version[CP_FW_VERSION_LEN]; /* zero padded, need not be terminated */
} cp_ident;

/* Generic frame: payload of `len` bytes. `out` needs CP_FRAME_OVERHEAD + len bytes. */
uint16_t cp_frame_build(uint8_t *out, uint8_t type, uint16_t seq, uint32_t t_us,
                        const uint8_t *payload, uint8_t len);

/* SAMPLES with n = 1..4 samples; t_us is samples[0].t_us and every later
 * sample must lie within 65535 us of it (dt_us is u16). Returns 0 if n or a
 * dt is out of range. `out` needs CP_SAMPLES_FRAME_MAX bytes. */
uint16_t cp_frame_samples(uint8_t *out, uint16_t seq, const cp_sample *samples, uint8_t n);

uint16_t cp_frame_edge(uint8_t *out, uint16_t seq, uint32_t t_us, uint8_t markers,
                       uint8_t changed);
uint16_t cp_frame_ident(uint8_t *out, uint16_t seq, uint32_t t_us, const cp_ident *id);
uint16_t cp_frame_ack(uint8_t *out, uint16_t seq, uint32_t t_us, uint8_t cmd, uint8_t status);
/* counts: samples_total, samples_dropped, edges_total (PROTOCOL.md, STATUS).
 * Passed by address: on the AVR, arguments beyond 14 bytes would go through
 * r8..r11, which the firmware reserves for interrupt handlers. */
uint16_t cp_frame_status(uint8_t *out, uint16_t seq, uint32_t t_us, const uint32_t counts[3]);

/* Incremental SAMPLES building (what the logger uses, to avoid copies):
 * write sample i's 7 bytes with cp_frame_put_sample(out + 11 + 7 * i, ...),
 * then cp_frame_finish_samples writes the header and CRC. */
static inline void cp_frame_put_sample(uint8_t *p, uint16_t dt_us, const cp_sample *s)
{
    /* p = out + 11 + 7 * i */
    p[0] = (uint8_t)dt_us;
    p[1] = (uint8_t)(dt_us >> 8);
    p[2] = (uint8_t)s->current;
    p[3] = (uint8_t)((uint16_t)s->current >> 8);
    p[4] = (uint8_t)s->bus;
    p[5] = (uint8_t)(s->bus >> 8);
    p[6] = s->markers;
}
uint16_t cp_frame_finish_samples(uint8_t *out, uint16_t seq, uint32_t t_us, uint8_t n);

/* Little-endian helpers, shared with the parser and the tests. */
void cp_put_u16(uint8_t *p, uint16_t v);
void cp_put_u32(uint8_t *p, uint32_t v);
uint16_t cp_get_u16(const uint8_t *p);
uint32_t cp_get_u32(const uint8_t *p);

#ifdef __cplusplus
}
#endif

#endif
