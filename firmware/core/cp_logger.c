/* Protocol engine (see cp_logger.h). */
#include "cp_logger.h"

#include "cp_protocol.h"

#define EDGE_FRAME_BYTES (CP_FRAME_OVERHEAD + CP_EDGE_LEN)
#define STATUS_FRAME_BYTES (CP_FRAME_OVERHEAD + CP_STATUS_LEN)

static void send_frame(cp_logger *lg, uint16_t len)
{
    lg->ops->send(lg->ctx, lg->frame, len);
    lg->seq++;
}

static void send_ack(cp_logger *lg, uint8_t cmd, uint8_t status)
{
    send_frame(lg, cp_frame_ack(lg->frame, lg->seq, lg->ops->now_us(lg->ctx), cmd, status));
}

static void send_ident(cp_logger *lg)
{
    lg->ident.flags = (uint8_t)((lg->ident.flags & ~CP_FLAG_STREAMING) |
                                (lg->streaming ? CP_FLAG_STREAMING : 0u));
    send_frame(lg, cp_frame_ident(lg->frame, lg->seq, lg->ops->now_us(lg->ctx), &lg->ident));
}

static void send_status(cp_logger *lg, uint32_t now)
{
    cp_counters c;
    uint32_t counts[3];
    lg->ops->read_counters(lg->ctx, &c);
    counts[0] = c.samples_total;
    counts[1] = c.samples_dropped;
    counts[2] = c.edges_total;
    send_frame(lg, cp_frame_status(lg->frame, lg->seq, now, counts));
    lg->last_status_us = now;
}

static void flush_samples(cp_logger *lg)
{
    if (lg->npending) {
        uint16_t len = cp_frame_finish_samples(lg->sframe, lg->seq, lg->pending_t0, lg->npending);
        lg->ops->send(lg->ctx, lg->sframe, len);
        lg->seq++;
        lg->npending = 0;
    }
}

/* Caller guarantees room for one SAMPLES frame. The sample goes straight
 * into the frame being filled (no intermediate copies: this runs up to
 * 13,000 times a second on the AVR). */
static void add_sample(cp_logger *lg, const cp_sample *s)
{
    uint32_t dt = s->t_us - lg->pending_t0;
    /* dt_us is u16: a sample too far from the frame's first starts a new frame */
    if (lg->npending && (dt >> 16) != 0) {
        flush_samples(lg);
    }
    if (lg->npending == 0) {
        lg->pending_t0 = s->t_us;
        lg->sp = lg->sframe + 11;
        dt = 0;
    }
    cp_frame_put_sample(lg->sp, (uint16_t)dt, s);
    lg->sp += CP_SAMPLE_BYTES;
    if (++lg->npending == CP_SAMPLES_MAX) {
        flush_samples(lg);
    }
}

/* Up to `max` queued samples into the frame being filled (room for one
 * SAMPLES frame guaranteed by the caller); returns 1 if any was taken. */
static int take_samples(cp_logger *lg, uint8_t max)
{
    cp_sample s;
    int took = 0;
    if (lg->ops->pop_samples) {
        while (max) {
            uint8_t want = (uint8_t)(CP_SAMPLES_MAX - lg->npending);
            uint8_t r, n;
            if (want > max) {
                want = max;
            }
            r = lg->ops->pop_samples(lg->ctx, lg->sframe + 11 + CP_SAMPLE_BYTES * lg->npending,
                                     want, &lg->pending_t0, (uint8_t)(lg->npending == 0));
            n = (uint8_t)(r & ~CP_POP_FAR);
            lg->npending = (uint8_t)(lg->npending + n);
            max = (uint8_t)(max - n);
            if (n) {
                took = 1;
            }
            if (lg->npending == CP_SAMPLES_MAX || ((r & CP_POP_FAR) && lg->npending)) {
                flush_samples(lg);
                continue;
            }
            if (n < want) {
                break; /* the queue is empty */
            }
        }
        lg->sp = lg->sframe + 11 + CP_SAMPLE_BYTES * lg->npending;
        return took;
    }
    while (max && lg->ops->pop_sample(lg->ctx, &s)) {
        add_sample(lg, &s);
        max--;
        took = 1;
    }
    return took;
}

static void send_edge(cp_logger *lg, const cp_edge *e)
{
    send_frame(lg, cp_frame_edge(lg->frame, lg->seq, e->t_us, e->markers, e->changed));
}

/* Everything the sampler queued, waiting for room as needed (used on STOP). */
static void drain(cp_logger *lg)
{
    cp_edge e;
    while (lg->ops->pop_edge(lg->ctx, &e)) {
        send_edge(lg, &e);
    }
    while (take_samples(lg, CP_SAMPLES_MAX)) {
    }
    flush_samples(lg);
}

static void stop_streaming(cp_logger *lg)
{
    lg->ops->stop(lg->ctx);
    drain(lg);
    lg->streaming = 0;
}

static void on_command(void *ctx, uint8_t cmd, const uint8_t *payload, uint8_t len)
{
    cp_logger *lg = (cp_logger *)ctx;
    switch (cmd) {
    case CP_CMD_IDENTIFY:
        if (len != 0) {
            send_ack(lg, cmd, CP_ACK_BAD_ARG);
            return;
        }
        send_ident(lg);
        send_ack(lg, cmd, CP_ACK_OK);
        return;
    case CP_CMD_START:
        if (len != 0) {
            send_ack(lg, cmd, CP_ACK_BAD_ARG);
            return;
        }
        if (lg->streaming) { /* restart: close the running stream first */
            stop_streaming(lg);
        }
        lg->npending = 0;
        if (!lg->ops->start(lg->ctx)) {
            send_ack(lg, cmd, CP_ACK_BUSY); /* front end did not answer */
            return;
        }
        lg->streaming = 1;
        send_ack(lg, cmd, CP_ACK_OK);
        lg->last_status_us = lg->ops->now_us(lg->ctx);
        return;
    case CP_CMD_STOP:
        if (len != 0) {
            send_ack(lg, cmd, CP_ACK_BAD_ARG);
            return;
        }
        if (lg->streaming) {
            stop_streaming(lg);
        }
        send_status(lg, lg->ops->now_us(lg->ctx));
        send_ack(lg, cmd, CP_ACK_OK);
        return;
    case CP_CMD_SET_RATE: {
        uint32_t req;
        if (lg->streaming) {
            send_ack(lg, cmd, CP_ACK_BUSY);
            return;
        }
        if (len != 4) {
            send_ack(lg, cmd, CP_ACK_BAD_ARG);
            return;
        }
        req = cp_get_u32(payload);
        if (req == 0) {
            send_ack(lg, cmd, CP_ACK_BAD_ARG);
            return;
        }
        lg->ident.rate_hz = lg->ops->set_rate(lg->ctx, req);
        send_ack(lg, cmd, CP_ACK_OK);
        return;
    }
    case CP_CMD_SET_CAL: {
        uint32_t shunt;
        int32_t lsb;
        if (lg->streaming) {
            send_ack(lg, cmd, CP_ACK_BUSY);
            return;
        }
        /* optional trailing bus_nominal_mV u16 (len 10) */
        if (len != 8 && len != 10) {
            send_ack(lg, cmd, CP_ACK_BAD_ARG);
            return;
        }
        shunt = cp_get_u32(payload);
        lsb = (int32_t)cp_get_u32(payload + 4);
        if (shunt == 0) {
            send_ack(lg, cmd, CP_ACK_BAD_ARG);
            return;
        }
        if (lsb == 0) {
            if (lg->shunt_lsb_nV == 0) { /* nothing to derive it from */
                send_ack(lg, cmd, CP_ACK_BAD_ARG);
                return;
            }
            /* I = V / R: nA per count = shunt_lsb_nV * 1e6 / shunt_uohm, rounded */
            {
                uint32_t num = lg->shunt_lsb_nV * 1000000u; /* 2.5e9 fits in u32 */
                uint32_t q = num / shunt;
                uint32_t r = num % shunt;
                if (r >= shunt - r) {
                    q++;
                }
                if (q == 0 || q > 0x7FFFFFFFu) {
                    send_ack(lg, cmd, CP_ACK_BAD_ARG);
                    return;
                }
                lsb = (int32_t)q;
            }
        }
        if (len == 10) {
            uint16_t mv = cp_get_u16(payload + 8);
            if (mv == 0) {
                send_ack(lg, cmd, CP_ACK_BAD_ARG);
                return;
            }
            lg->ident.bus_nominal_mV = mv;
        }
        lg->ident.shunt_uohm = shunt;
        lg->ident.current_lsb_nA = lsb;
        send_ack(lg, cmd, CP_ACK_OK);
        return;
    }
    default:
        send_ack(lg, cmd, CP_ACK_UNKNOWN);
        return;
    }
}

static void on_bad_crc(void *ctx)
{
    send_ack((cp_logger *)ctx, 0, CP_ACK_BAD_CRC);
}

void cp_logger_init(cp_logger *lg, const cp_logger_ops *ops, void *ctx, const cp_ident *ident,
                    uint32_t shunt_lsb_nV)
{
    lg->ops = ops;
    lg->ctx = ctx;
    lg->ident = *ident;
    lg->shunt_lsb_nV = shunt_lsb_nV;
    lg->seq = 0;
    lg->streaming = 0;
    lg->npending = 0;
    lg->last_status_us = 0;
    lg->status_period_us = 1000000u;
    lg->poll_count = 0;
    cp_parser_init(&lg->parser);
    lg->sink.on_command = on_command;
    lg->sink.on_bad_crc = on_bad_crc;
    lg->sink.ctx = lg;
    send_ident(lg);
}

void cp_logger_rx(cp_logger *lg, uint8_t byte)
{
    cp_parser_feed(&lg->parser, byte, &lg->sink);
}

void cp_logger_rx_timeout(cp_logger *lg)
{
    cp_parser_expire(&lg->parser, &lg->sink);
}

void cp_logger_poll(cp_logger *lg)
{
    cp_edge e;
    uint32_t now;
    uint16_t room;
    uint8_t n;
    if (!lg->streaming) {
        return;
    }
    room = lg->ops->tx_free(lg->ctx);
    for (n = 0; n < 4 && room >= EDGE_FRAME_BYTES && lg->ops->pop_edge(lg->ctx, &e); n++) {
        send_edge(lg, &e);
        room = (uint16_t)(room - EDGE_FRAME_BYTES);
    }
    /* at most one frame's worth per call, so commands are still read when
     * the sampler outpaces the main loop; room for the frame a 4th sample
     * would complete plus a STATUS, so the STATUS below is never starved */
    if (room >= CP_SAMPLES_FRAME_MAX + STATUS_FRAME_BYTES) {
        uint8_t r = CP_SENT_SLOW;
        if (lg->ops->send_samples && lg->npending == 0) {
            r = lg->ops->send_samples(lg->ctx, lg->seq);
            if (r == CP_SENT_FRAME) {
                lg->seq++;
            }
        }
        if (r == CP_SENT_SLOW) {
            take_samples(lg, (uint8_t)(CP_SAMPLES_MAX - lg->npending));
        }
    }
    /* the clock is read every 16th call only: the main loop calls this
     * thousands of times a second and the STATUS period is a second */
    if ((++lg->poll_count & 15u) == 0) {
        now = lg->ops->now_us(lg->ctx);
        if ((uint32_t)(now - lg->last_status_us) >= lg->status_period_us &&
            lg->ops->tx_free(lg->ctx) >= STATUS_FRAME_BYTES) {
            send_status(lg, now);
        }
    }
}
