/* Command parser with resynchronisation (see cp_parser.h). */
#include "cp_parser.h"

#include "cp_crc16.h"
#include "cp_protocol.h"

void cp_parser_init(cp_parser *p)
{
    p->start = 0;
    p->n = 0;
}

static void drop(cp_parser *p, uint16_t k)
{
    p->start = (uint16_t)(p->start + k);
    p->n = (uint16_t)(p->n - k);
    if (p->n == 0) {
        p->start = 0;
    }
}

/* Consume every frame that can be decided from the held bytes. */
static void scan(cp_parser *p, const cp_parser_sink *sink)
{
    for (;;) {
        const uint8_t *f = p->buf + p->start;
        uint16_t total;
        uint8_t len;
        uint16_t crc;
        if (p->n == 0) {
            return;
        }
        if (f[0] != CP_SYNC0) {
            drop(p, 1);
            continue;
        }
        if (p->n < 2) {
            return;
        }
        if (f[1] != CP_SYNC1) {
            drop(p, 1);
            continue;
        }
        if (p->n < 4) {
            return;
        }
        len = f[3];
        total = (uint16_t)(CP_CMD_OVERHEAD + len);
        if (p->n < total) {
            return;
        }
        crc = cp_crc16(CP_CRC16_INIT, f + 2, (uint16_t)(2u + len));
        if (crc == (uint16_t)(f[4 + len] | ((uint16_t)f[5 + len] << 8))) {
            sink->on_command(sink->ctx, f[2], f + 4, len);
            drop(p, total);
        } else {
            sink->on_bad_crc(sink->ctx);
            drop(p, 1); /* resync from the byte after this frame's A5 */
        }
    }
}

void cp_parser_feed(cp_parser *p, uint8_t byte, const cp_parser_sink *sink)
{
    uint16_t i;
    if (p->start + p->n >= CP_PARSER_BUF) {
        /* compact: held bytes never exceed one command, so this makes room */
        for (i = 0; i < p->n; i++) {
            p->buf[i] = p->buf[p->start + i];
        }
        p->start = 0;
    }
    p->buf[p->start + p->n] = byte;
    p->n++;
    scan(p, sink);
}

void cp_parser_expire(cp_parser *p, const cp_parser_sink *sink)
{
    if (p->n == 0) {
        return;
    }
    if (p->n >= 4) {
        sink->on_bad_crc(sink->ctx); /* a header was seen: answer like a bad CRC */
    }
    drop(p, 1);
    scan(p, sink);
}
