/* CRC and frame builders against PROTOCOL.md's check value and worked examples. */
#include <stdlib.h>

#include "cp_crc16.h"
#include "cp_frame.h"
#include "harness.h"
#include "ref.h"

static int bytes_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
    return memcmp(a, b, n) == 0;
}

static void test_crc_check_value(void)
{
    const uint8_t s[] = "123456789";
    CHECK_EQ(cp_crc16(CP_CRC16_INIT, s, 9), 0x29B1);
    CHECK_EQ(cp_crc16(CP_CRC16_INIT, s, 0), 0xFFFF);
}

static void test_crc_matches_bitwise_reference(void)
{
    uint8_t buf[300];
    size_t i, n;
    srand(1234);
    for (n = 0; n < sizeof buf; n += 7) {
        uint16_t inc = CP_CRC16_INIT;
        for (i = 0; i < n; i++) {
            buf[i] = (uint8_t)rand();
        }
        for (i = 0; i < n; i++) {
            inc = cp_crc16_update(inc, buf[i]);
        }
        CHECK_EQ(cp_crc16(CP_CRC16_INIT, buf, n), ref_crc(buf, n));
        CHECK_EQ(inc, ref_crc(buf, n));
    }
}

static void test_worked_example_samples(void)
{
    static const uint8_t want[] = {0xa5, 0x5a, 0x01, 0x0f, 0x07, 0x00, 0x40, 0x42, 0x0f,
                                   0x00, 0x02, 0x00, 0x00, 0x90, 0x01, 0xa0, 0x0f, 0x01,
                                   0x18, 0x01, 0xf4, 0xff, 0xa1, 0x0f, 0x03, 0xea, 0x66};
    cp_sample s[2] = {{1000000u, 400, 4000, 1}, {1000280u, -12, 4001, 3}};
    uint8_t out[CP_SAMPLES_FRAME_MAX];
    uint16_t n = cp_frame_samples(out, 7, s, 2);
    CHECK_EQ(n, sizeof want);
    CHECK(bytes_eq(out, want, sizeof want));
}

static void test_worked_example_edge(void)
{
    static const uint8_t want[] = {0xa5, 0x5a, 0x02, 0x02, 0x08, 0x00, 0xbb,
                                   0x42, 0x0f, 0x00, 0x03, 0x02, 0x14, 0x2b};
    uint8_t out[16];
    uint16_t n = cp_frame_edge(out, 8, 1000123u, 0x03, 0x02);
    CHECK_EQ(n, sizeof want);
    CHECK(bytes_eq(out, want, sizeof want));
}

static void test_worked_example_commands(void)
{
    /* the firmware parser accepts exactly these (test_parser checks that);
     * here: their CRCs are the documented ones */
    static const uint8_t identify[] = {0xa5, 0x5a, 0x81, 0x00, 0xa6, 0x35};
    static const uint8_t start[] = {0xa5, 0x5a, 0x82, 0x00, 0xf5, 0x60};
    static const uint8_t set_rate[] = {0xa5, 0x5a, 0x84, 0x04, 0xb8, 0x0b, 0x00, 0x00, 0x74, 0xd1};
    CHECK_EQ(cp_crc16(CP_CRC16_INIT, identify + 2, 2), 0x35a6);
    CHECK_EQ(cp_crc16(CP_CRC16_INIT, start + 2, 2), 0x60f5);
    CHECK_EQ(cp_crc16(CP_CRC16_INIT, set_rate + 2, 6), 0xd174);
    CHECK_EQ(cp_get_u32(set_rate + 4), 3000);
}

static void test_ident_layout(void)
{
    cp_ident id;
    uint8_t out[64];
    ref_frame f;
    uint16_t n;
    memset(&id, 0, sizeof id);
    id.front_end = 1;
    id.marker_count = 4;
    id.flags = 0x03;
    id.rate_hz = 3571;
    id.shunt_uohm = 100000;
    id.current_lsb_nA = -25000;
    id.bus_lsb_uV = 1250;
    id.bus_nominal_mV = 5000;
    memcpy(id.fw_version, "1.0.0", 5);
    n = cp_frame_ident(out, 0x1234, 0xDEADBEEFu, &id);
    CHECK_EQ(n, 42);
    CHECK_EQ(ref_decode(out, n, &f), 42);
    CHECK_EQ(f.type, 3);
    CHECK_EQ(f.len, 30);
    CHECK_EQ(f.seq, 0x1234);
    CHECK_EQ(f.t_us, 0xDEADBEEFu);
    CHECK_EQ(f.payload[0], 1);
    CHECK_EQ(f.payload[1], 1);
    CHECK_EQ(f.payload[2], 4);
    CHECK_EQ(f.payload[3], 3);
    CHECK_EQ(le32(f.payload + 4), 3571);
    CHECK_EQ(le32(f.payload + 8), 100000);
    CHECK_EQ((int32_t)le32(f.payload + 12), -25000);
    CHECK_EQ(le32(f.payload + 16), 1250);
    CHECK_EQ(le16(f.payload + 20), 5000);
    CHECK(memcmp(f.payload + 22, "1.0.0\0\0\0", 8) == 0);
}

static void test_ack_status_layout(void)
{
    uint8_t out[32];
    ref_frame f;
    uint16_t n = cp_frame_ack(out, 65535, 5, 0x84, 4);
    CHECK_EQ(ref_decode(out, n, &f), 14);
    CHECK_EQ(f.type, 4);
    CHECK_EQ(f.seq, 65535);
    CHECK_EQ(f.payload[0], 0x84);
    CHECK_EQ(f.payload[1], 4);
    {
        const uint32_t counts[3] = {123456789u, 42u, 7u};
        n = cp_frame_status(out, 9, 77, counts);
    }
    CHECK_EQ(ref_decode(out, n, &f), 24);
    CHECK_EQ(f.type, 5);
    CHECK_EQ(le32(f.payload), 123456789u);
    CHECK_EQ(le32(f.payload + 4), 42u);
    CHECK_EQ(le32(f.payload + 8), 7u);
}

static void test_samples_bounds(void)
{
    uint8_t out[CP_SAMPLES_FRAME_MAX];
    cp_sample s[5];
    ref_frame f;
    int i;
    for (i = 0; i < 5; i++) {
        s[i].t_us = 0xFFFFFF00u + (uint32_t)i * 100u; /* crosses the 2^32 wrap */
        s[i].current = (int16_t)(-i);
        s[i].bus = (uint16_t)(1000 + i);
        s[i].markers = (uint8_t)i;
    }
    CHECK_EQ(cp_frame_samples(out, 0, s, 0), 0);
    CHECK_EQ(cp_frame_samples(out, 0, s, 5), 0);
    CHECK_EQ(cp_frame_samples(out, 0, s, 4), 41);
    CHECK_EQ(ref_decode(out, 41, &f), 41);
    CHECK_EQ(f.payload[0], 4);
    CHECK_EQ(le16(f.payload + 1 + 7 * 3), 300); /* dt across the wrap */
    CHECK_EQ((int16_t)le16(f.payload + 1 + 7 * 3 + 2), -3);
    CHECK_EQ(f.payload[1 + 7 * 3 + 6], 3);
    s[1].t_us = s[0].t_us + 65535u;
    CHECK_EQ(cp_frame_samples(out, 0, s, 2), 12 + 15);
    s[1].t_us = s[0].t_us + 65536u;
    CHECK_EQ(cp_frame_samples(out, 0, s, 2), 0);
}

int main(void)
{
    RUN(test_crc_check_value);
    RUN(test_crc_matches_bitwise_reference);
    RUN(test_worked_example_samples);
    RUN(test_worked_example_edge);
    RUN(test_worked_example_commands);
    RUN(test_ident_layout);
    RUN(test_ack_status_layout);
    RUN(test_samples_bounds);
    return HARNESS_EXIT();
}
