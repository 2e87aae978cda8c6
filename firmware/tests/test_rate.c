/* Sample-rate selection for both front ends. */
#include "cp_rate.h"
#include "harness.h"

#define F_CPU_HZ 16000000u

static void test_a0_full_resolution_clock(void)
{
    cp_a0_setting s;
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 9615, 9700, &s), 9615);
    CHECK_EQ(s.adps, 7); /* F_CPU/128 = 125 kHz */
    CHECK_EQ(s.k, 1);
    CHECK_EQ(s.conv_ticks, 208); /* 13 * 128 / 8 */
}

static void test_a0_default_rate(void)
{
    cp_a0_setting s;
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 12820, 13000, &s), 12821);
    CHECK_EQ(s.adps, 5); /* F_CPU/32: 38462 conversions/s, mean of 3 */
    CHECK_EQ(s.k, 3);
    CHECK_EQ(s.conv_ticks, 52);
    /* the slower clocks when the cap leaves only them */
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 6410, 9700, &s), 6410);
    CHECK_EQ(s.adps, 6); /* F_CPU/64: 19231 conversions/s, mean of 3 */
    CHECK_EQ(s.k, 3);
    CHECK_EQ(s.conv_ticks, 104);
}

static void test_a0_mean_is_exact(void)
{
    /* every sum k conversions can make, every k: round half up of sum / k */
    unsigned k, sum;
    int bad = 0;
    for (k = 1; k <= CP_A0_MAX_K; k++) {
        uint16_t r = cp_a0_recip((uint8_t)k);
        for (sum = 0; sum <= 1023u * k; sum++) {
            unsigned want = (2u * sum + k) / (2u * k);
            bad += cp_a0_mean((uint16_t)sum, (uint8_t)k, r) != want;
        }
    }
    CHECK_EQ(bad, 0);
}

static void test_a0_cap_and_ties(void)
{
    cp_a0_setting s;
    /* above the cap: the fastest allowed */
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 20000, 9700, &s), 9615);
    CHECK_EQ(s.k, 1);
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 40000, 13000, &s), 12821);
    /* 4808 S/s is /128 with k=2 or /64 with k=4: the slower ADC clock wins */
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 4808, 9700, &s), 4808);
    CHECK_EQ(s.adps, 7);
    CHECK_EQ(s.k, 2);
    /* nearest: 7692 (/32, k = 5) and 9615 are neighbours; 8600 is nearer the
     * first, 8700 the second, which three settings give: /128 wins */
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 8600, 9700, &s), 7692);
    CHECK_EQ(s.adps, 5);
    CHECK_EQ(s.k, 5);
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 8700, 9700, &s), 9615);
    CHECK_EQ(s.adps, 7);
    /* very low: the slowest setting (k limited to 64) */
    CHECK_EQ(cp_a0_pick(F_CPU_HZ, 1, 9700, &s), 150);
    CHECK_EQ(s.adps, 7);
    CHECK_EQ(s.k, CP_A0_MAX_K);
}

static void test_a0_rate_is_exact_division(void)
{
    /* rate_hz must be F_CPU / (13 * prescaler * k), rounded, for any request */
    cp_a0_setting s;
    uint32_t req;
    for (req = 100; req < 12000; req += 37) {
        uint32_t cycles, exact_mhz;
        cp_a0_pick(F_CPU_HZ, req, 9700, &s);
        cycles = (13u << s.adps) * s.k;
        exact_mhz = (uint32_t)((1000ull * F_CPU_HZ + cycles / 2) / cycles);
        CHECK_EQ(s.rate_hz, (exact_mhz + 500u) / 1000u);
        CHECK(s.k >= 1 && s.k <= CP_A0_MAX_K);
        CHECK(s.adps >= 5 && s.adps <= 7);
        CHECK(s.rate_hz <= 9700);
    }
}

static void test_ina226_fastest(void)
{
    cp_ina226_setting s;
    CHECK_EQ(cp_ina226_pick(3571, 251, &s), 3571);
    CHECK_EQ(s.ct_code, 0);
    CHECK_EQ(s.avg_code, 0);
    CHECK_EQ(s.avg, 1);
    CHECK_EQ(s.period_us, 280);
    CHECK_EQ(s.config, 0x4007); /* AVG=1, VBUSCT=VSHCT=140 us, shunt+bus continuous */
    CHECK_EQ(cp_ina226_pick(100000, 251, &s), 3571); /* nothing faster exists */
}

static void test_ina226_read_time_limit(void)
{
    cp_ina226_setting s;
    /* if the reads need 500 us, 280 and 408 us cycles are out */
    CHECK_EQ(cp_ina226_pick(3571, 500, &s), 1506);
    CHECK_EQ(s.period_us, 664);
    CHECK_EQ(s.ct_code, 2);
}

static void test_ina226_nearest_and_config_bits(void)
{
    cp_ina226_setting s;
    /* 1000 S/s: 4 averages of 140+140 us (893 S/s) is nearest */
    CHECK_EQ(cp_ina226_pick(1000, 251, &s), 893);
    CHECK_EQ(s.avg, 4);
    CHECK_EQ(s.config, 0x4207);
    CHECK_EQ(cp_ina226_ct_us(s.ct_code), 140);
    /* 10 S/s: a cycle of ~100 ms */
    cp_ina226_pick(10, 251, &s);
    CHECK(s.rate_hz >= 9 && s.rate_hz <= 11);
    CHECK_EQ(s.period_us, (uint32_t)s.avg * 2u * cp_ina226_ct_us(s.ct_code));
    CHECK_EQ(s.config & 0x7, 7);
    CHECK_EQ((s.config >> 3) & 7, s.ct_code);
    CHECK_EQ((s.config >> 6) & 7, s.ct_code);
    CHECK_EQ(cp_ina226_avg((uint8_t)((s.config >> 9) & 7)), s.avg);
    /* never below 1 S/s */
    CHECK(cp_ina226_pick(0, 251, &s) >= 1);
    CHECK(s.period_us <= 1000000u);
}

int main(void)
{
    RUN(test_a0_full_resolution_clock);
    RUN(test_a0_default_rate);
    RUN(test_a0_mean_is_exact);
    RUN(test_a0_cap_and_ties);
    RUN(test_a0_rate_is_exact_division);
    RUN(test_ina226_fastest);
    RUN(test_ina226_read_time_limit);
    RUN(test_ina226_nearest_and_config_bits);
    return HARNESS_EXIT();
}
