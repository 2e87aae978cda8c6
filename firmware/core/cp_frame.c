/* Device -> host frame builders (PROTOCOL.md, "Device -> host frames"). */
#include "cp_frame.h"

#include "cp_crc16.h"

void cp_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void cp_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

uint16_t cp_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | ((uint16_t)p[1] << 8));
}

uint32_t cp_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* Header in place; the payload is already at out + 10. */
static uint16_t finish(uint8_t *out, uint8_t type, uint16_t seq, uint32_t t_us, uint8_t len)
{
    uint16_t crc;
    out[0] = CP_SYNC0;
    out[1] = CP_SYNC1;
    out[2] = type;
    out[3] = len;
    cp_put_u16(out + 4, seq);
    cp_put_u32(out + 6, t_us);
    crc = cp_crc16(CP_CRC16_INIT, out + 2, (uint16_t)(8u + len));
    cp_put_u16(out + 10 + len, crc);
    return (uint16_t)(CP_FRAME_OVERHEAD + len);
}

uint16_t cp_frame_build(uint8_t *out, uint8_t type, uint16_t seq, uint32_t t_us,
                        const uint8_t *payload, uint8_t len)
{
    uint8_t i;
    for (i = 0; i < len; i++) {
        out[10 + i] = payload[i];
    }
    return finish(out, type, seq, t_us, len);
}

uint16_t cp_frame_samples(uint8_t *out, uint16_t seq, const cp_sample *samples, uint8_t n)
{
    uint8_t i;
    uint8_t *p = out + 11;
    uint32_t t0;
    if (n < 1 || n > CP_SAMPLES_MAX) {
        return 0;
    }
    t0 = samples[0].t_us;
    out[10] = n;
    for (i = 0; i < n; i++) {
        uint32_t dt = samples[i].t_us - t0; /* modulo 2^32: fine across the t_us wrap */
        if (dt > 0xFFFFu) {
            return 0;
        }
        cp_put_u16(p, (uint16_t)dt);
        cp_put_u16(p + 2, (uint16_t)samples[i].current);
        cp_put_u16(p + 4, samples[i].bus);
        p[6] = samples[i].markers;
        p += CP_SAMPLE_BYTES;
    }
    return finish(out, CP_T_SAMPLES, seq, t0, (uint8_t)(1u + CP_SAMPLE_BYTES * n));
}

uint16_t cp_frame_finish_samples(uint8_t *out, uint16_t seq, uint32_t t_us, uint8_t n)
{
    out[10] = n;
    return finish(out, CP_T_SAMPLES, seq, t_us, (uint8_t)(1u + CP_SAMPLE_BYTES * n));
}

uint16_t cp_frame_edge(uint8_t *out, uint16_t seq, uint32_t t_us, uint8_t markers,
                       uint8_t changed)
{
    out[10] = markers;
    out[11] = changed;
    return finish(out, CP_T_EDGE, seq, t_us, CP_EDGE_LEN);
}

uint16_t cp_frame_ident(uint8_t *out, uint16_t seq, uint32_t t_us, const cp_ident *id)
{
    uint8_t *p = out + 10;
    uint8_t i;
    p[0] = CP_PROTOCOL_VERSION;
    p[1] = id->front_end;
    p[2] = id->marker_count;
    p[3] = id->flags;
    cp_put_u32(p + 4, id->rate_hz);
    cp_put_u32(p + 8, id->shunt_uohm);
    cp_put_u32(p + 12, (uint32_t)id->current_lsb_nA);
    cp_put_u32(p + 16, id->bus_lsb_uV);
    cp_put_u16(p + 20, id->bus_nominal_mV);
    for (i = 0; i < CP_FW_VERSION_LEN; i++) {
        p[22 + i] = (uint8_t)id->fw_version[i];
    }
    return finish(out, CP_T_IDENT, seq, t_us, CP_IDENT_LEN);
}

uint16_t cp_frame_ack(uint8_t *out, uint16_t seq, uint32_t t_us, uint8_t cmd, uint8_t status)
{
    out[10] = cmd;
    out[11] = status;
    return finish(out, CP_T_ACK, seq, t_us, CP_ACK_LEN);
}

uint16_t cp_frame_status(uint8_t *out, uint16_t seq, uint32_t t_us, const uint32_t counts[3])
{
    cp_put_u32(out + 10, counts[0]);
    cp_put_u32(out + 14, counts[1]);
    cp_put_u32(out + 18, counts[2]);
    return finish(out, CP_T_STATUS, seq, t_us, CP_STATUS_LEN);
}
