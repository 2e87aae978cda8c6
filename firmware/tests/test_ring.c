/* SPSC ring: wrap, full, all-or-nothing records, 256-byte capacity, and a
 * two-thread stress run checking every byte arrives once and in order. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cp_ring.h"
#include "harness.h"

static void test_init_rejects_bad_sizes(void)
{
    uint8_t buf[256];
    cp_ring r;
    CHECK(!cp_ring_init(&r, buf, 0));
    CHECK(!cp_ring_init(&r, buf, 1));
    CHECK(!cp_ring_init(&r, buf, 3));
    CHECK(!cp_ring_init(&r, buf, 100));
    CHECK(!cp_ring_init(&r, buf, 512));
    CHECK(cp_ring_init(&r, buf, 2));
    CHECK(cp_ring_init(&r, buf, 256));
}

static void test_full_and_empty(void)
{
    uint8_t buf[8], b;
    cp_ring r;
    int i;
    cp_ring_init(&r, buf, sizeof buf);
    CHECK_EQ(cp_ring_used(&r), 0);
    CHECK_EQ(cp_ring_free(&r), 8);
    CHECK(!cp_ring_get_byte(&r, &b));
    for (i = 0; i < 8; i++) {
        CHECK(cp_ring_put_byte(&r, (uint8_t)(i + 1)));
    }
    CHECK(!cp_ring_put_byte(&r, 99)); /* full: refused, nothing overwritten */
    CHECK_EQ(cp_ring_used(&r), 8);
    CHECK_EQ(cp_ring_free(&r), 0);
    for (i = 0; i < 8; i++) {
        CHECK(cp_ring_get_byte(&r, &b));
        CHECK_EQ(b, i + 1);
    }
    CHECK(!cp_ring_get_byte(&r, &b));
}

static void test_wrap_with_records(void)
{
    uint8_t buf[16], rec[5], out[5];
    cp_ring r;
    int i, j;
    cp_ring_init(&r, buf, sizeof buf);
    /* 5-byte records through a 16-byte ring: records straddle the end */
    for (i = 0; i < 100; i++) {
        for (j = 0; j < 5; j++) {
            rec[j] = (uint8_t)(i * 5 + j);
        }
        CHECK(cp_ring_put(&r, rec, 5));
        if (i % 3 == 2) { /* let it fill a bit before draining */
            while (cp_ring_get(&r, out, 5)) {
            }
        }
        CHECK(cp_ring_used(&r) <= 15);
    }
    /* all-or-nothing: 3 records (15 bytes) fit, a 4th does not, a 1-byte does */
    cp_ring_init(&r, buf, sizeof buf);
    CHECK(cp_ring_put(&r, rec, 5));
    CHECK(cp_ring_put(&r, rec, 5));
    CHECK(cp_ring_put(&r, rec, 5));
    CHECK(!cp_ring_put(&r, rec, 5));
    CHECK_EQ(cp_ring_used(&r), 15);
    CHECK(cp_ring_put_byte(&r, 7));
    CHECK(!cp_ring_get(&r, out, 17)); /* more than held: nothing taken */
    CHECK_EQ(cp_ring_used(&r), 16);
}

static void test_order_across_many_wraps(void)
{
    uint8_t buf[4], rec[3], out[3];
    cp_ring r;
    uint8_t next_put = 0, next_get = 0;
    int i;
    cp_ring_init(&r, buf, sizeof buf);
    for (i = 0; i < 1000; i++) {
        if (cp_ring_free(&r) >= 3) {
            rec[0] = next_put++;
            rec[1] = next_put++;
            rec[2] = next_put++;
            CHECK(cp_ring_put(&r, rec, 3));
        }
        if (i % 2 && cp_ring_get(&r, out, 3)) {
            CHECK_EQ(out[0], next_get);
            CHECK_EQ(out[1], (uint8_t)(next_get + 1));
            CHECK_EQ(out[2], (uint8_t)(next_get + 2));
            next_get = (uint8_t)(next_get + 3);
        }
    }
}

static void test_256_byte_ring_holds_255(void)
{
    uint8_t buf[256], b = 0;
    cp_ring r;
    int i;
    cp_ring_init(&r, buf, 256);
    for (i = 0; i < 255; i++) {
        CHECK(cp_ring_put_byte(&r, (uint8_t)i));
    }
    CHECK(!cp_ring_put_byte(&r, 0));
    CHECK_EQ(cp_ring_used(&r), 255);
    for (i = 0; i < 255; i++) {
        CHECK(cp_ring_get_byte(&r, &b));
        CHECK_EQ(b, (uint8_t)i);
    }
    CHECK_EQ(cp_ring_used(&r), 0);
}

/* ---- two threads: the producer writes 8-byte records carrying a counter
 * and its complement; the consumer checks each arrives whole and in order */
#define STRESS_RECORDS 300000u
static cp_ring stress_ring;
static uint8_t stress_buf[64];

static void *producer(void *arg)
{
    uint32_t i = 0;
    (void)arg;
    while (i < STRESS_RECORDS) {
        uint32_t rec[2];
        rec[0] = i;
        rec[1] = ~i;
        if (cp_ring_put(&stress_ring, rec, sizeof rec)) {
            i++;
        }
    }
    return 0;
}

static void test_two_thread_stress(void)
{
    pthread_t th;
    uint32_t expect = 0, torn = 0, disorder = 0;
    cp_ring_init(&stress_ring, stress_buf, sizeof stress_buf);
    CHECK_EQ(pthread_create(&th, 0, producer, 0), 0);
    while (expect < STRESS_RECORDS) {
        uint32_t rec[2];
        if (cp_ring_get(&stress_ring, rec, sizeof rec)) {
            torn += rec[1] != ~rec[0];
            disorder += rec[0] != expect;
            expect++;
        }
    }
    pthread_join(th, 0);
    CHECK_EQ(torn, 0);
    CHECK_EQ(disorder, 0);
    CHECK_EQ(cp_ring_used(&stress_ring), 0);
}

int main(void)
{
    RUN(test_init_rejects_bad_sizes);
    RUN(test_full_and_empty);
    RUN(test_wrap_with_records);
    RUN(test_order_across_many_wraps);
    RUN(test_256_byte_ring_holds_255);
    RUN(test_two_thread_stress);
    return HARNESS_EXIT();
}
