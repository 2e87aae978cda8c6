#include "logger_main.h"

#include <avr/interrupt.h>
#include <avr/io.h>
#include <string.h>
#include <util/atomic.h>

#include "clock.h"
#include "cp_logger.h"
#include "frontend.h"
#include "fw_config.h"
#include "sampler.h"
#include "uart.h"

// A command left incomplete this long is given up (a corrupt length byte).
#define RX_QUIET_US 20000UL

static cp_logger logger;
static uint32_t last_rx_us;

static void op_send(void *, const uint8_t *frame, uint16_t len)
{
    uart_send(frame, len);
}

static uint16_t op_tx_free(void *)
{
    return uart_tx_free();
}

static uint32_t op_now_us(void *)
{
    return clock_now_us();
}

static int op_pop_sample(void *, cp_sample *s)
{
    return fe_pop_sample(s);
}

static int op_pop_edge(void *, cp_edge *e)
{
    return markers_pop_edge(e);
}

static void op_read_counters(void *, cp_counters *c)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        c->samples_total = samples_total;
        c->samples_dropped = samples_dropped;
        c->edges_total = edges_total;
    }
}

static int op_start(void *)
{
    sampler_reset();
    if (!fe_start()) {
        return 0;
    }
    markers_start();
    return 1;
}

static void op_stop(void *)
{
    fe_stop();
    markers_stop();
}

static uint32_t op_set_rate(void *, uint32_t req_hz)
{
    return fe_set_rate(req_hz);
}

#if CP_FRONT_END == CP_FE_ID_A0
static uint8_t op_pop_samples(void *, uint8_t *out, uint8_t max, uint32_t *t0_us, uint8_t first)
{
    return fe_pop_samples(out, max, t0_us, first);
}
static uint8_t op_send_samples(void *, uint16_t seq)
{
    return fe_send_samples(seq);
}
#define OP_POP_SAMPLES op_pop_samples
#define OP_SEND_SAMPLES op_send_samples
#else
#define OP_POP_SAMPLES 0
#define OP_SEND_SAMPLES 0
#endif

static const cp_logger_ops ops = {
    op_send, op_tx_free, op_now_us, op_pop_sample, op_pop_edge,
    op_read_counters, op_start, op_stop, op_set_rate, OP_POP_SAMPLES, OP_SEND_SAMPLES,
};

void logger_setup(void)
{
    cp_ident id;
    uint32_t shunt_lsb_nV;
    cli();
    TIMSK0 = 0; // Arduino's millis() tick: would delay our interrupts
    TIMSK2 = 0;
    clock_init();
    uart_init();
    sampler_init();
    markers_init();
    sei(); // fe_init may talk I2C (polled, with timeouts)
    memset(&id, 0, sizeof id);
    shunt_lsb_nV = fe_init(&id);
    id.marker_count = MARKER_COUNT;
    memcpy(id.fw_version, FW_VERSION, sizeof FW_VERSION - 1);
    cp_logger_init(&logger, &ops, 0, &id, shunt_lsb_nV); // sends IDENT
    last_rx_us = clock_now_us();
}

void logger_loop(void)
{
    uint8_t b;
    while (uart_rx(&b)) {
        cp_logger_rx(&logger, b);
        last_rx_us = clock_now_us();
    }
    if (cp_parser_pending(&logger.parser) &&
        (uint32_t)(clock_now_us() - last_rx_us) > RX_QUIET_US) {
        cp_logger_rx_timeout(&logger);
        last_rx_us = clock_now_us();
    }
    if (logger.streaming) {
        fe_poll();
    }
    cp_logger_poll(&logger);
}
