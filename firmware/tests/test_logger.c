/* The protocol engine driven through a small in-memory platform: queues for
 * samples and edges, a byte sink for the line, a settable clock. Output is
 * decoded with the independent reference decoder (ref.h). */
#include <stdlib.h>
#include <string.h>

#include "cp_logger.h"
#include "harness.h"
#include "ref.h"

typedef struct {
    uint8_t out[8192];
    size_t nout;
    uint16_t tx_room; /* what tx_free reports */
    uint32_t now;
    cp_sample samples[64];
    int s_head, s_tail;
    cp_edge edges[16];
    int e_head, e_tail;
    cp_counters counters;
    int started, stopped, start_ok;
    uint32_t last_req;
    int fast_frames;
} plat_t;

static void p_send(void *c, const uint8_t *f, uint16_t n)
{
    plat_t *p = (plat_t *)c;
    memcpy(p->out + p->nout, f, n);
    p->nout += n;
}
static uint16_t p_free(void *c) { return ((plat_t *)c)->tx_room; }
static uint32_t p_now(void *c) { return ((plat_t *)c)->now; }
static int p_pop(void *c, cp_sample *s)
{
    plat_t *p = (plat_t *)c;
    if (p->s_tail == p->s_head) {
        return 0;
    }
    *s = p->samples[p->s_tail++];
    return 1;
}
static int p_pop_edge(void *c, cp_edge *e)
{
    plat_t *p = (plat_t *)c;
    if (p->e_tail == p->e_head) {
        return 0;
    }
    *e = p->edges[p->e_tail++];
    return 1;
}
static void p_counters(void *c, cp_counters *k) { *k = ((plat_t *)c)->counters; }
static int p_start(void *c)
{
    plat_t *p = (plat_t *)c;
    p->started++;
    return p->start_ok;
}
static void p_stop(void *c) { ((plat_t *)c)->stopped++; }
static uint32_t p_rate(void *c, uint32_t req)
{
    ((plat_t *)c)->last_req = req;
    return req / 2u * 2u + 1u; /* "nearest achievable": an odd number */
}

/* The fast path (cp_logger_ops.pop_samples) over the same queue: what the
 * A0 front end does with its raw ring. */
static uint8_t p_pop_samples(void *c, uint8_t *out, uint8_t max, uint32_t *t0, uint8_t first)
{
    plat_t *p = (plat_t *)c;
    uint8_t n = 0;
    while (n < max && p->s_tail != p->s_head) {
        const cp_sample *s = &p->samples[p->s_tail];
        uint32_t dt;
        if (first && n == 0) {
            *t0 = s->t_us;
        } else if ((uint32_t)(s->t_us - *t0) > 0xFFFFu) {
            return (uint8_t)(n | CP_POP_FAR);
        }
        dt = s->t_us - *t0;
        cp_frame_put_sample(out, (uint16_t)dt, s);
        out += 7;
        p->s_tail++;
        n++;
    }
    return n;
}

/* Whole frames straight to the line (cp_logger_ops.send_samples), as the A0
 * front end does: 4 queued samples within 65535 us make a frame; a sample
 * flagged `slow` (current == 0x7777) must go through pop_samples. */
static uint8_t p_send_samples(void *c, uint16_t seq)
{
    plat_t *p = (plat_t *)c;
    uint8_t f[41];
    int i;
    if (p->s_head - p->s_tail < 4) {
        return CP_SENT_WAIT;
    }
    for (i = 0; i < 4; i++) {
        const cp_sample *s = &p->samples[p->s_tail + i];
        if (s->current == 0x7777 || (uint32_t)(s->t_us - p->samples[p->s_tail].t_us) > 0xFFFFu) {
            return CP_SENT_SLOW;
        }
    }
    cp_frame_samples(f, seq, &p->samples[p->s_tail], 4);
    p_send(c, f, 41);
    p->s_tail += 4;
    p->fast_frames++;
    return CP_SENT_FRAME;
}

static const cp_logger_ops OPS = {p_send, p_free, p_now, p_pop, p_pop_edge,
                                  p_counters, p_start, p_stop, p_rate, 0, 0};
static const cp_logger_ops OPS_FAST = {p_send, p_free, p_now, p_pop, p_pop_edge,
                                       p_counters, p_start, p_stop, p_rate, p_pop_samples, 0};
static const cp_logger_ops OPS_FRAMES = {p_send, p_free, p_now, p_pop, p_pop_edge,
                                         p_counters, p_start, p_stop, p_rate, p_pop_samples,
                                         p_send_samples};
static const cp_logger_ops *ops_used = &OPS;

static plat_t P;
static cp_logger LG;

static void boot(uint32_t shunt_lsb_nV)
{
    cp_ident id;
    memset(&P, 0, sizeof P);
    P.tx_room = 255;
    P.start_ok = 1;
    P.now = 1000;
    memset(&id, 0, sizeof id);
    id.front_end = 1;
    id.marker_count = 4;
    id.flags = 0x02;
    id.rate_hz = 3571;
    id.shunt_uohm = 100000;
    id.current_lsb_nA = 25000;
    id.bus_lsb_uV = 1250;
    id.bus_nominal_mV = 5000;
    memcpy(id.fw_version, "1.0.0", 5);
    cp_logger_init(&LG, ops_used, &P, &id, shunt_lsb_nV);
}

static void command(uint8_t cmd, const uint8_t *payload, uint8_t len)
{
    uint8_t buf[300];
    size_t n = ref_command(buf, cmd, payload, len), i;
    for (i = 0; i < n; i++) {
        cp_logger_rx(&LG, buf[i]);
    }
}

/* Decode everything sent so far into frames[]; returns the count (-1 if
 * anything in the stream does not decode). */
static int decode_all(ref_frame *frames, int max)
{
    size_t off = 0;
    int n = 0;
    while (off < P.nout && n < max) {
        size_t len = ref_decode(P.out + off, P.nout - off, &frames[n]);
        if (!len) {
            return -1;
        }
        off += len;
        n++;
    }
    return n;
}

static void push_sample(uint32_t t, int16_t cur, uint16_t bus, uint8_t mk)
{
    cp_sample s;
    s.t_us = t;
    s.current = cur;
    s.bus = bus;
    s.markers = mk;
    P.samples[P.s_head++] = s;
}

static void test_boot_ident(void)
{
    ref_frame f[4];
    boot(2500);
    CHECK_EQ(decode_all(f, 4), 1);
    CHECK_EQ(f[0].type, 3);
    CHECK_EQ(f[0].seq, 0);
    CHECK_EQ(f[0].payload[0], 1);
    CHECK_EQ(f[0].payload[3], 0x02); /* bus measured, not streaming */
    CHECK_EQ(le32(f[0].payload + 4), 3571);
}

static void test_identify_answers_ident_then_ack(void)
{
    ref_frame f[8];
    boot(2500);
    command(0x81, 0, 0);
    CHECK_EQ(decode_all(f, 8), 3);
    CHECK_EQ(f[1].type, 3);
    CHECK_EQ(f[1].seq, 1);
    CHECK_EQ(f[2].type, 4);
    CHECK_EQ(f[2].seq, 2);
    CHECK_EQ(f[2].payload[0], 0x81);
    CHECK_EQ(f[2].payload[1], 0);
}

static void test_stream_frames_and_stop_order(void)
{
    ref_frame f[16];
    int n, i;
    boot(2500);
    command(0x82, 0, 0);
    CHECK_EQ(P.started, 1);
    for (i = 0; i < 6; i++) {
        push_sample(5000u + 280u * (uint32_t)i, (int16_t)(100 - 50 * i), (uint16_t)(4000 + i), (uint8_t)(i & 3));
    }
    P.edges[P.e_head].t_us = 5100;
    P.edges[P.e_head].markers = 1;
    P.edges[P.e_head].changed = 1;
    P.e_head++;
    for (i = 0; i < 3; i++) {
        cp_logger_poll(&LG);
    }
    P.counters.samples_total = 6;
    P.counters.samples_dropped = 0;
    P.counters.edges_total = 1;
    command(0x83, 0, 0);
    CHECK_EQ(P.stopped, 1);
    n = decode_all(f, 16);
    /* IDENT, ACK(START), EDGE, SAMPLES(4), SAMPLES(2), STATUS, ACK(STOP) */
    CHECK_EQ(n, 7);
    CHECK_EQ(f[1].type, 4);
    CHECK_EQ(f[1].payload[0], 0x82);
    CHECK_EQ(f[2].type, 2);
    CHECK_EQ(f[2].t_us, 5100);
    CHECK_EQ(f[3].type, 1);
    CHECK_EQ(f[3].payload[0], 4);
    CHECK_EQ(f[3].t_us, 5000);
    CHECK_EQ(le16(f[3].payload + 1 + 7 * 3), 840);              /* dt of sample 3 */
    CHECK_EQ((int16_t)le16(f[3].payload + 1 + 7 * 3 + 2), -50); /* current */
    CHECK_EQ(le16(f[3].payload + 1 + 7 * 3 + 4), 4003);         /* bus */
    CHECK_EQ(f[3].payload[1 + 7 * 3 + 6], 3);                   /* markers */
    CHECK_EQ(f[4].type, 1);
    CHECK_EQ(f[4].payload[0], 2);
    CHECK_EQ(f[4].t_us, 5000u + 280u * 4u);
    CHECK_EQ(f[5].type, 5);
    CHECK_EQ(le32(f[5].payload), 6);
    CHECK_EQ(le32(f[5].payload + 8), 1);
    CHECK_EQ(f[6].type, 4);
    CHECK_EQ(f[6].payload[0], 0x83);
    for (i = 1; i < n; i++) {
        CHECK_EQ(f[i].seq, f[i - 1].seq + 1); /* every frame numbered */
    }
}

static void test_busy_and_bad_arguments(void)
{
    ref_frame f[16];
    uint8_t pl[10];
    int n;
    boot(2500);
    cp_put_u32(pl, 3000);
    command(0x84, pl, 3); /* wrong length */
    cp_put_u32(pl, 0);
    command(0x84, pl, 4); /* rate 0 */
    cp_put_u32(pl, 3000);
    command(0x84, pl, 4); /* fine */
    command(0x82, 0, 0);
    command(0x84, pl, 4); /* streaming: busy */
    cp_put_u32(pl, 100000);
    cp_put_u32(pl + 4, 25000);
    command(0x85, pl, 8); /* streaming: busy */
    command(0x81, pl, 1); /* IDENTIFY takes no payload */
    command(0x99, 0, 0);  /* unknown */
    n = decode_all(f, 16);
    CHECK_EQ(n, 9);
    CHECK_EQ(f[1].payload[1], 3);
    CHECK_EQ(f[2].payload[1], 3);
    CHECK_EQ(f[3].payload[1], 0);
    CHECK_EQ(P.last_req, 3000);
    CHECK_EQ(f[4].payload[0], 0x82);
    CHECK_EQ(f[5].payload[0], 0x84);
    CHECK_EQ(f[5].payload[1], 4);
    CHECK_EQ(f[6].payload[0], 0x85);
    CHECK_EQ(f[6].payload[1], 4);
    CHECK_EQ(f[7].payload[1], 3);
    CHECK_EQ(f[8].payload[0], 0x99);
    CHECK_EQ(f[8].payload[1], 2);
}

static void test_set_rate_reported_by_ident(void)
{
    ref_frame f[8];
    uint8_t pl[4];
    boot(2500);
    cp_put_u32(pl, 1234);
    command(0x84, pl, 4);
    command(0x81, 0, 0);
    CHECK_EQ(decode_all(f, 8), 4);
    CHECK_EQ(le32(f[2].payload + 4), 1235); /* what the platform achieved */
}

static void test_set_cal(void)
{
    ref_frame f[16];
    uint8_t pl[10];
    int n;
    boot(2500); /* INA226-like: shunt-register LSB 2.5 uV */
    cp_put_u32(pl, 2000);     /* 2 mOhm */
    cp_put_u32(pl + 4, 0);    /* derive: 2.5 uV / 2 mOhm = 1.25 mA */
    command(0x85, pl, 8);
    command(0x81, 0, 0);
    cp_put_u32(pl, 33000);    /* 33 mOhm, given LSB kept as is, bus 12 V */
    cp_put_u32(pl + 4, (uint32_t)-75758);
    cp_put_u16(pl + 8, 12000);
    command(0x85, pl, 10);
    command(0x81, 0, 0);
    cp_put_u32(pl, 0);
    command(0x85, pl, 8);     /* shunt 0: bad */
    n = decode_all(f, 16);
    CHECK_EQ(n, 8);
    CHECK_EQ(f[1].payload[1], 0);
    CHECK_EQ(le32(f[2].payload + 8), 2000);
    CHECK_EQ((int32_t)le32(f[2].payload + 12), 1250000);
    CHECK_EQ(le16(f[2].payload + 20), 5000);
    CHECK_EQ((int32_t)le32(f[5].payload + 12), -75758);
    CHECK_EQ(le16(f[5].payload + 20), 12000);
    CHECK_EQ(f[7].payload[1], 3);

    boot(0); /* A0-like: no shunt register, LSB must be given */
    cp_put_u32(pl, 100000);
    cp_put_u32(pl + 4, 0);
    command(0x85, pl, 8);
    n = decode_all(f, 16);
    CHECK_EQ(n, 2);
    CHECK_EQ(f[1].payload[1], 3);
}

static void test_bad_crc_ack(void)
{
    ref_frame f[8];
    uint8_t buf[8];
    size_t n, i;
    boot(2500);
    n = ref_command(buf, 0x81, 0, 0);
    buf[n - 1] ^= 1;
    for (i = 0; i < n; i++) {
        cp_logger_rx(&LG, buf[i]);
    }
    CHECK_EQ(decode_all(f, 8), 2);
    CHECK_EQ(f[1].type, 4);
    CHECK_EQ(f[1].payload[0], 0);
    CHECK_EQ(f[1].payload[1], 1);
}

static void test_status_once_a_second(void)
{
    ref_frame f[16];
    int i, n, status = 0;
    boot(2500);
    command(0x82, 0, 0);
    for (i = 0; i < 64; i++) {
        cp_logger_poll(&LG);
    }
    P.now += 999999u; /* not yet */
    for (i = 0; i < 64; i++) {
        cp_logger_poll(&LG);
    }
    n = decode_all(f, 16);
    for (i = 0; i < n; i++) {
        status += f[i].type == 5;
    }
    CHECK_EQ(status, 0);
    P.now += 2u;
    for (i = 0; i < 64; i++) {
        cp_logger_poll(&LG);
    }
    n = decode_all(f, 16);
    for (i = 0; i < n; i++) {
        status += f[i].type == 5;
    }
    CHECK_EQ(status, 1);
}

static void test_wide_gap_starts_new_frame(void)
{
    ref_frame f[16];
    int n;
    boot(2500);
    command(0x82, 0, 0);
    push_sample(0xFFFFFF00u, 1, 0, 0); /* across the t_us wrap as well */
    push_sample(0xFFFFFF00u + 60000u, 2, 0, 0);
    push_sample(0xFFFFFF00u + 60000u + 70000u, 3, 0, 0); /* > 65535 us later */
    cp_logger_poll(&LG);
    command(0x83, 0, 0);
    n = decode_all(f, 16);
    CHECK_EQ(n, 6); /* IDENT, ACK, SAMPLES(2), SAMPLES(1), STATUS, ACK */
    CHECK_EQ(f[2].payload[0], 2);
    CHECK_EQ(le16(f[2].payload + 1 + 7), 60000);
    CHECK_EQ(f[3].payload[0], 1);
    CHECK_EQ(f[3].t_us, 0xFFFFFF00u + 130000u);
}

static void test_backpressure_leaves_samples_queued(void)
{
    ref_frame f[16];
    int i;
    boot(2500);
    command(0x82, 0, 0);
    for (i = 0; i < 8; i++) {
        push_sample(1000u + 100u * (uint32_t)i, 0, 0, 0);
    }
    P.tx_room = 40; /* less than a SAMPLES frame */
    cp_logger_poll(&LG);
    CHECK_EQ(P.s_tail, 0); /* nothing taken: the sampler side counts drops */
    P.tx_room = 255;
    cp_logger_poll(&LG); /* one frame per call */
    CHECK_EQ(P.s_tail, 4);
    cp_logger_poll(&LG);
    CHECK_EQ(P.s_tail, 8);
    CHECK_EQ(decode_all(f, 16), 4);
}

static void test_start_failure_and_restart(void)
{
    ref_frame f[16];
    int n;
    boot(2500);
    P.start_ok = 0;
    command(0x82, 0, 0);
    CHECK(!LG.streaming);
    P.start_ok = 1;
    command(0x82, 0, 0);
    push_sample(2000, 5, 0, 0);
    cp_logger_poll(&LG);
    command(0x82, 0, 0); /* START while streaming: the partial frame is closed first */
    n = decode_all(f, 16);
    CHECK_EQ(n, 5); /* IDENT, ACK busy, ACK ok, SAMPLES(1), ACK ok */
    CHECK_EQ(f[1].payload[1], 4);
    CHECK_EQ(f[2].payload[1], 0);
    CHECK_EQ(f[3].type, 1);
    CHECK_EQ(f[4].type, 4);
    CHECK_EQ(P.stopped, 1);
}

static void test_whole_frames_wait_and_fall_back(void)
{
    ref_frame f[16];
    int i, n;
    boot(2500);
    command(0x82, 0, 0);
    for (i = 0; i < 3; i++) {
        push_sample(1000u + 78u * (uint32_t)i, (int16_t)(10 + i), 0, 1);
    }
    cp_logger_poll(&LG);
    CHECK_EQ(P.s_tail, 0); /* three queued: no partial frame is started */
    push_sample(1000u + 78u * 3u, 13, 0, 1);
    cp_logger_poll(&LG);
    CHECK_EQ(P.s_tail, 4);
    CHECK_EQ(P.fast_frames, 1);
    /* a sample the whole-frame path refuses: one frame through pop_samples */
    for (i = 4; i < 8; i++) {
        push_sample(1000u + 78u * (uint32_t)i, (int16_t)(i == 5 ? 0x7777 : 10 + i), 0, 2);
    }
    cp_logger_poll(&LG);
    CHECK_EQ(P.s_tail, 8);
    CHECK_EQ(P.fast_frames, 1);
    for (i = 8; i < 12; i++) {
        push_sample(1000u + 78u * (uint32_t)i, (int16_t)(10 + i), 0, 3);
    }
    cp_logger_poll(&LG);
    CHECK_EQ(P.fast_frames, 2);
    n = decode_all(f, 16);
    CHECK_EQ(n, 5); /* IDENT, ACK, 3 x SAMPLES(4) */
    for (i = 2; i < 5; i++) {
        CHECK_EQ(f[i].type, 1);
        CHECK_EQ(f[i].payload[0], 4);
        CHECK_EQ(f[i].t_us, 1000u + 78u * 4u * (uint32_t)(i - 2));
        CHECK_EQ(le16(f[i].payload + 1 + 7 * 3 + 2), 13 + 4 * (i - 2)); /* last current */
        CHECK_EQ(le16(f[i].payload + 1 + 7 * 3), 234);                  /* its dt */
        CHECK_EQ(f[i].payload[1 + 7 * 3 + 6], i - 1);                    /* markers */
        CHECK_EQ(f[i].seq, f[i - 1].seq + 1);
    }
    CHECK_EQ(le16(f[3].payload + 1 + 7 + 2), 0x7777); /* the refused one, via pop_samples */
}

int main(void)
{
    RUN(test_boot_ident);
    RUN(test_identify_answers_ident_then_ack);
    RUN(test_stream_frames_and_stop_order);
    RUN(test_busy_and_bad_arguments);
    RUN(test_set_rate_reported_by_ident);
    RUN(test_set_cal);
    RUN(test_bad_crc_ack);
    RUN(test_status_once_a_second);
    RUN(test_wide_gap_starts_new_frame);
    RUN(test_backpressure_leaves_samples_queued);
    RUN(test_start_failure_and_restart);
    /* the same streams through the fast path give the same frames */
    ops_used = &OPS_FAST;
    RUN(test_stream_frames_and_stop_order);
    RUN(test_wide_gap_starts_new_frame);
    RUN(test_backpressure_leaves_samples_queued);
    RUN(test_start_failure_and_restart);
    RUN(test_status_once_a_second);
    /* and through whole-frame sends, falling back to pop_samples */
    ops_used = &OPS_FRAMES;
    RUN(test_stream_frames_and_stop_order);
    RUN(test_wide_gap_starts_new_frame);
    RUN(test_backpressure_leaves_samples_queued);
    RUN(test_start_failure_and_restart);
    RUN(test_status_once_a_second);
    RUN(test_whole_frames_wait_and_fall_back);
    return HARNESS_EXIT();
}
