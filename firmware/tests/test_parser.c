/* Command parser: the documented command bytes, back-to-back commands,
 * garbage, bad CRCs, a corrupt length that swallows a real command, and the
 * quiet-line expiry. */
#include <string.h>

#include "cp_parser.h"
#include "harness.h"
#include "ref.h"

typedef struct {
    int n_cmd, n_bad;
    uint8_t cmd[16];
    uint8_t len[16];
    uint8_t payload[16][256];
} rec_t;

static void on_cmd(void *ctx, uint8_t cmd, const uint8_t *payload, uint8_t len)
{
    rec_t *r = (rec_t *)ctx;
    if (r->n_cmd < 16) {
        r->cmd[r->n_cmd] = cmd;
        r->len[r->n_cmd] = len;
        memcpy(r->payload[r->n_cmd], payload, len);
    }
    r->n_cmd++;
}

static void on_bad(void *ctx)
{
    ((rec_t *)ctx)->n_bad++;
}

static void feed(cp_parser *p, rec_t *r, const uint8_t *d, size_t n)
{
    cp_parser_sink sink;
    size_t i;
    sink.on_command = on_cmd;
    sink.on_bad_crc = on_bad;
    sink.ctx = r;
    for (i = 0; i < n; i++) {
        cp_parser_feed(p, d[i], &sink);
    }
}

static void expire(cp_parser *p, rec_t *r)
{
    cp_parser_sink sink;
    sink.on_command = on_cmd;
    sink.on_bad_crc = on_bad;
    sink.ctx = r;
    cp_parser_expire(p, &sink);
}

static void test_documented_commands(void)
{
    static const uint8_t identify[] = {0xa5, 0x5a, 0x81, 0x00, 0xa6, 0x35};
    static const uint8_t start[] = {0xa5, 0x5a, 0x82, 0x00, 0xf5, 0x60};
    static const uint8_t set_rate[] = {0xa5, 0x5a, 0x84, 0x04, 0xb8, 0x0b, 0x00, 0x00, 0x74, 0xd1};
    static cp_parser p;
    static rec_t r;
    memset(&r, 0, sizeof r);
    cp_parser_init(&p);
    feed(&p, &r, identify, sizeof identify);
    feed(&p, &r, start, sizeof start);
    feed(&p, &r, set_rate, sizeof set_rate);
    CHECK_EQ(r.n_cmd, 3);
    CHECK_EQ(r.n_bad, 0);
    CHECK_EQ(r.cmd[0], 0x81);
    CHECK_EQ(r.len[0], 0);
    CHECK_EQ(r.cmd[1], 0x82);
    CHECK_EQ(r.cmd[2], 0x84);
    CHECK_EQ(r.len[2], 4);
    CHECK_EQ(le32(r.payload[2]), 3000);
    CHECK_EQ(cp_parser_pending(&p), 0);
}

static void test_garbage_before_and_between(void)
{
    static const uint8_t identify[] = {0xa5, 0x5a, 0x81, 0x00, 0xa6, 0x35};
    static const uint8_t junk[] = {0x00, 0xff, 0xa5, 0x00, 0x5a, 0xa5, 0xa5, 0x13};
    static cp_parser p;
    static rec_t r;
    memset(&r, 0, sizeof r);
    cp_parser_init(&p);
    feed(&p, &r, junk, sizeof junk);
    feed(&p, &r, identify, sizeof identify);
    feed(&p, &r, junk, 2);
    feed(&p, &r, identify, sizeof identify);
    CHECK_EQ(r.n_cmd, 2);
    CHECK_EQ(r.n_bad, 0);
    CHECK_EQ(r.cmd[0], 0x81);
    CHECK_EQ(r.cmd[1], 0x81);
}

static void test_bad_crc_then_resync(void)
{
    uint8_t good[16], bad[16];
    size_t ng, nb;
    static cp_parser p;
    static rec_t r;
    uint8_t pl[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    memset(&r, 0, sizeof r);
    cp_parser_init(&p);
    nb = ref_command(bad, 0x85, pl, 8);
    bad[nb - 1] ^= 0x40; /* corrupt the CRC */
    ng = ref_command(good, 0x85, pl, 8);
    feed(&p, &r, bad, nb);
    CHECK_EQ(r.n_bad, 1);
    CHECK_EQ(r.n_cmd, 0);
    feed(&p, &r, good, ng);
    CHECK_EQ(r.n_cmd, 1);
    CHECK_EQ(r.cmd[0], 0x85);
    CHECK(memcmp(r.payload[0], pl, 8) == 0);
}

static void test_sync_inside_corrupt_frame_is_found(void)
{
    /* A corrupt frame whose payload contains a complete valid command: after
     * the CRC failure the parser rescans from the byte after the first A5 and
     * finds the embedded command. */
    uint8_t inner[8], outer[32];
    size_t ni, i;
    static cp_parser p;
    static rec_t r;
    memset(&r, 0, sizeof r);
    cp_parser_init(&p);
    ni = ref_command(inner, 0x82, 0, 0);
    outer[0] = 0xa5;
    outer[1] = 0x5a;
    outer[2] = 0x85;
    outer[3] = (uint8_t)ni; /* payload = the inner command */
    for (i = 0; i < ni; i++) {
        outer[4 + i] = inner[i];
    }
    outer[4 + ni] = 0x00; /* wrong CRC */
    outer[5 + ni] = 0x00;
    feed(&p, &r, outer, 6 + ni);
    CHECK_EQ(r.n_bad, 1);
    CHECK_EQ(r.n_cmd, 1);
    CHECK_EQ(r.cmd[0], 0x82);
}

static void test_corrupt_length_swallows_command(void)
{
    /* A5 5A 81 FF announces 255 payload bytes; the real IDENTIFY that follows
     * is held. With nothing more arriving, expiry gives the header up and the
     * held IDENTIFY is found. */
    static const uint8_t hdr[] = {0xa5, 0x5a, 0x81, 0xff};
    static const uint8_t identify[] = {0xa5, 0x5a, 0x81, 0x00, 0xa6, 0x35};
    static cp_parser p;
    static rec_t r;
    memset(&r, 0, sizeof r);
    cp_parser_init(&p);
    feed(&p, &r, hdr, sizeof hdr);
    feed(&p, &r, identify, sizeof identify);
    CHECK_EQ(r.n_cmd, 0); /* still waiting for 255 + 2 bytes */
    CHECK_EQ(cp_parser_pending(&p), 10);
    expire(&p, &r);
    CHECK_EQ(r.n_bad, 1);
    CHECK_EQ(r.n_cmd, 1);
    CHECK_EQ(r.cmd[0], 0x81);
    CHECK_EQ(cp_parser_pending(&p), 0);
}

static void test_corrupt_length_resolved_by_data(void)
{
    /* Same, but the host keeps sending: once 261 bytes are held the CRC
     * fails and every command inside is recovered, in order. */
    static const uint8_t hdr[] = {0xa5, 0x5a, 0x81, 0xff};
    uint8_t cmd[8];
    size_t n = ref_command(cmd, 0x81, 0, 0);
    static cp_parser p;
    static rec_t r;
    int i;
    memset(&r, 0, sizeof r);
    cp_parser_init(&p);
    feed(&p, &r, hdr, sizeof hdr);
    for (i = 0; i < 44; i++) { /* 4 + 44 * 6 = 268 bytes >= 261 */
        feed(&p, &r, cmd, n);
    }
    CHECK_EQ(r.n_bad, 1);
    CHECK_EQ(r.n_cmd, 44);
    CHECK_EQ(cp_parser_pending(&p), 0);
}

static void test_max_payload(void)
{
    uint8_t pl[255], buf[261];
    size_t n, i;
    static cp_parser p;
    static rec_t r;
    memset(&r, 0, sizeof r);
    for (i = 0; i < sizeof pl; i++) {
        pl[i] = (uint8_t)(i * 7);
    }
    pl[10] = 0xa5; /* sync bytes inside a good payload do not matter */
    pl[11] = 0x5a;
    cp_parser_init(&p);
    n = ref_command(buf, 0x90, pl, 255);
    CHECK_EQ(n, 261);
    feed(&p, &r, buf, n);
    feed(&p, &r, buf, n); /* twice: exercises compaction of the buffer */
    CHECK_EQ(r.n_cmd, 2);
    CHECK_EQ(r.len[0], 255);
    CHECK(memcmp(r.payload[1], pl, 255) == 0);
    CHECK_EQ(r.n_bad, 0);
}

static void test_byte_flip_everywhere(void)
{
    /* Every single-byte corruption of a command followed by a good one: the
     * good one is always recovered, and never a wrong command. */
    uint8_t pl[4] = {0x10, 0x27, 0, 0}, cmd[16], good[16];
    size_t n = ref_command(cmd, 0x84, pl, 4), ng = ref_command(good, 0x81, 0, 0), pos;
    int bit;
    for (pos = 0; pos < n; pos++) {
        for (bit = 0; bit < 8; bit++) {
            static cp_parser p;
            static rec_t r;
            uint8_t c[16];
            memset(&r, 0, sizeof r);
            cp_parser_init(&p);
            memcpy(c, cmd, n);
            c[pos] ^= (uint8_t)(1u << bit);
            feed(&p, &r, c, n);
            feed(&p, &r, good, ng);
            expire(&p, &r);
            while (cp_parser_pending(&p)) {
                expire(&p, &r);
            }
            CHECK(r.n_cmd >= 1);
            CHECK_EQ(r.cmd[r.n_cmd - 1], 0x81);
            /* the corrupted SET_RATE is never accepted with a wrong value */
            CHECK(r.n_cmd == 1 || (r.cmd[0] == 0x84 && le32(r.payload[0]) == 10000));
        }
    }
}

int main(void)
{
    RUN(test_documented_commands);
    RUN(test_garbage_before_and_between);
    RUN(test_bad_crc_then_resync);
    RUN(test_sync_inside_corrupt_frame_is_found);
    RUN(test_corrupt_length_swallows_command);
    RUN(test_corrupt_length_resolved_by_data);
    RUN(test_max_payload);
    RUN(test_byte_flip_everywhere);
    return HARNESS_EXIT();
}
