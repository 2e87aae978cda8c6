/* The logger's protocol engine, independent of the hardware.
 *
 * It owns the sequence number, the command handling (IDENTIFY, START, STOP,
 * SET_RATE, SET_CAL), the packing of samples into SAMPLES frames and the
 * periodic STATUS. The platform (the AVR sketch, or a host test) supplies the
 * hardware through cp_logger_ops and calls cp_logger_rx() for every received
 * byte and cp_logger_poll() from its main loop. Frames are only built in those
 * two calls, i.e. from one context, so `seq` needs no locking. */
#ifndef CP_LOGGER_H
#define CP_LOGGER_H

#include <stdint.h>

#include "cp_frame.h"
#include "cp_parser.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t t_us;
    uint8_t markers;
    uint8_t changed;
} cp_edge;

typedef struct {
    uint32_t samples_total;
    uint32_t samples_dropped;
    uint32_t edges_total;
} cp_counters;

typedef struct {
    /* queue a whole frame for transmission; may wait for room */
    void (*send)(void *ctx, const uint8_t *frame, uint16_t len);
    /* bytes that can be queued now without waiting */
    uint16_t (*tx_free)(void *ctx);
    uint32_t (*now_us)(void *ctx);
    /* take the oldest sample / edge the sampler queued; 1 if there was one */
    int (*pop_sample)(void *ctx, cp_sample *s);
    int (*pop_edge)(void *ctx, cp_edge *e);
    void (*read_counters)(void *ctx, cp_counters *c);
    /* zero the counters and start sampling; 0 if the front end failed */
    int (*start)(void *ctx);
    /* stop sampling: after it returns no sample or edge is queued any more */
    void (*stop)(void *ctx);
    /* program the nearest achievable rate; returns it (samples/s) */
    uint32_t (*set_rate)(void *ctx, uint32_t req_hz);
    /* Optional (0 = use pop_sample): write up to `max` queued samples straight
     * into a SAMPLES payload, 7 bytes each from `out` (the layout of
     * cp_frame_put_sample), with dt_us relative to *t0_us; if `first` is set
     * the first sample's time is stored in *t0_us instead (its dt is 0).
     * Returns the count written, ORed with CP_POP_FAR when it stopped at a
     * sample more than 65535 us after *t0_us (left queued: the frame must be
     * sent first). The fast path of a high-rate front end: no cp_sample copies,
     * no call per sample. */
    uint8_t (*pop_samples)(void *ctx, uint8_t *out, uint8_t max, uint32_t *t0_us,
                           uint8_t first);
    /* Optional (0 = none; needs pop_samples): build and queue one whole
     * SAMPLES frame of CP_SAMPLES_MAX samples numbered `seq`, straight into
     * the transmit buffer (the engine has checked the room). Returns
     * CP_SENT_FRAME if it did, CP_SENT_WAIT if fewer samples are queued
     * (nothing is taken: the engine waits for more rather than starting a
     * partial frame), CP_SENT_SLOW if the next sample needs pop_samples (the
     * engine then fills one frame through it). */
    uint8_t (*send_samples)(void *ctx, uint16_t seq);
} cp_logger_ops;

#define CP_SENT_WAIT 0u
#define CP_SENT_FRAME 1u
#define CP_SENT_SLOW 2u

#define CP_POP_FAR 0x80u

typedef struct {
    const cp_logger_ops *ops;
    void *ctx;
    cp_ident ident;
    /* nV per shunt-register count when the firmware reads a shunt voltage
     * (INA226: 2500), 0 when current_lsb_nA cannot be derived (A0). */
    uint32_t shunt_lsb_nV;
    uint16_t seq;
    uint8_t streaming;
    uint8_t npending;   /* samples already written into sframe */
    uint32_t pending_t0; /* t_us of the first of them */
    uint8_t *sp;         /* where the next one goes in sframe */
    uint8_t sframe[CP_SAMPLES_FRAME_MAX]; /* the SAMPLES frame being filled */
    uint32_t last_status_us;
    uint32_t status_period_us;
    uint8_t poll_count;
    cp_parser parser;
    cp_parser_sink sink;
    uint8_t frame[CP_FRAME_OVERHEAD + CP_IDENT_LEN]; /* largest frame it builds */
} cp_logger;

/* ident: the boot configuration (flags are maintained by the logger).
 * Sends IDENT (the boot announcement). */
void cp_logger_init(cp_logger *lg, const cp_logger_ops *ops, void *ctx, const cp_ident *ident,
                    uint32_t shunt_lsb_nV);

void cp_logger_rx(cp_logger *lg, uint8_t byte);

/* Give up on a half-received command (line quiet with bytes pending). */
void cp_logger_rx_timeout(cp_logger *lg);

/* Move queued edges and samples into frames as far as the transmit buffer
 * allows without waiting; send STATUS once per status period while streaming. */
void cp_logger_poll(cp_logger *lg);

#ifdef __cplusplus
}
#endif

#endif
