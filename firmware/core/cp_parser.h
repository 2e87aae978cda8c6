/* Byte-at-a-time parser for host -> device commands.
 *
 * Frame: A5 5A cmd len payload[len] crc16_le (CRC over cmd .. payload).
 * Bytes are kept until they either form a command with a good CRC or are
 * proven garbage. On a bad CRC the parser reports it and searches again for
 * A5 5A starting one byte after the failed frame's first byte, over the bytes
 * it already holds, so a real command swallowed by a corrupt length field is
 * still found. cp_parser_expire() gives up on a frame that stays incomplete
 * (a corrupt length byte announcing more bytes than the host will send). */
#ifndef CP_PARSER_H
#define CP_PARSER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CP_CMD_MAX_BYTES (6u + 255u)
/* one whole command plus one byte of slack for the append */
#define CP_PARSER_BUF (CP_CMD_MAX_BYTES + 1u)

typedef struct {
    /* a complete command with a good CRC; payload is valid during the call only */
    void (*on_command)(void *ctx, uint8_t cmd, const uint8_t *payload, uint8_t len);
    /* a complete frame whose CRC did not match */
    void (*on_bad_crc)(void *ctx);
    void *ctx;
} cp_parser_sink;

typedef struct {
    uint8_t buf[CP_PARSER_BUF];
    uint16_t start; /* first held byte */
    uint16_t n;     /* held bytes */
} cp_parser;

void cp_parser_init(cp_parser *p);

/* Feed one received byte; calls the sink for every frame it completes. */
void cp_parser_feed(cp_parser *p, uint8_t byte, const cp_parser_sink *sink);

/* Treat the frame being collected as corrupt (reported as a bad CRC if it had
 * a complete header) and rescan what is held. Call when the line has been
 * quiet for a while with bytes pending (cp_parser_pending() != 0). */
void cp_parser_expire(cp_parser *p, const cp_parser_sink *sink);

static inline uint16_t cp_parser_pending(const cp_parser *p)
{
    return p->n;
}

#ifdef __cplusplus
}
#endif

#endif
