/* Sample-rate selection (see cp_rate.h). */
#include "cp_rate.h"

#include "cp_flash.h"

static uint32_t absdiff(uint32_t a, uint32_t b)
{
    return a > b ? a - b : b - a;
}

/* rate in mHz of one sample every `cycles` CPU cycles */
static uint32_t mhz_of(uint32_t f_cpu_hz, uint32_t cycles)
{
    /* f * 1000 / cycles without overflowing 32 bits for f <= 20 MHz */
    uint32_t whole = f_cpu_hz / cycles;
    uint32_t rem = f_cpu_hz % cycles;
    return whole * 1000u + (rem * 1000u + cycles / 2u) / cycles;
}

uint32_t cp_a0_pick(uint32_t f_cpu_hz, uint32_t req_hz, uint32_t max_hz, cp_a0_setting *out)
{
    /* slowest ADC clock first (F_CPU/128 = 125 kHz is the datasheet's full
     * resolution clock; F_CPU/32 = 500 kHz, a 26 us conversion, is the
     * fastest the firmware's conversion interrupt is built for) */
    static const uint8_t adps_list[3] = {7, 6, 5};
    uint32_t best_err = 0xFFFFFFFFu;
    uint8_t i;
    int found = 0;
    if (req_hz > max_hz) { /* the fastest allowed is the nearest */
        req_hz = max_hz;
    }
    if (req_hz > 1000000u) {
        req_hz = 1000000u;
    }
    for (i = 0; i < 3; i++) {
        uint8_t adps = adps_list[i];
        uint32_t conv_cycles = 13u << adps;
        uint32_t conv_mhz = mhz_of(f_cpu_hz, conv_cycles);
        uint32_t k0 = (conv_mhz + req_hz * 500u) / (req_hz * 1000u + (req_hz == 0u));
        uint32_t k;
        if (k0 > CP_A0_MAX_K) {
            k0 = CP_A0_MAX_K;
        }
        for (k = (k0 > 1u ? k0 - 1u : 1u); k <= k0 + 1u && k <= CP_A0_MAX_K; k++) {
            uint32_t rate_mhz = mhz_of(f_cpu_hz, conv_cycles * k);
            uint32_t err;
            if (rate_mhz > max_hz * 1000u) {
                continue;
            }
            err = absdiff(rate_mhz, req_hz * 1000u);
            if (err < best_err) {
                best_err = err;
                found = 1;
                out->adps = adps;
                out->k = (uint8_t)k;
                out->conv_ticks = (uint16_t)(conv_cycles / 8u);
                out->rate_hz = (rate_mhz + 500u) / 1000u;
            }
        }
    }
    if (!found) { /* req far below the slowest setting: slowest there is */
        out->adps = 7;
        out->k = CP_A0_MAX_K;
        out->conv_ticks = (uint16_t)((13u << 7) / 8u);
        out->rate_hz = (mhz_of(f_cpu_hz, (13u << 7) * CP_A0_MAX_K) + 500u) / 1000u;
    }
    return out->rate_hz;
}

uint16_t cp_a0_recip(uint8_t k)
{
    return k > 1u ? (uint16_t)(65536UL / k) : 0u;
}

uint16_t cp_a0_mean(uint16_t sum, uint8_t k, uint16_t recip)
{
    uint16_t q, r;
    if (k <= 1u) {
        return sum;
    }
    /* recip = floor(2^16 / k) makes q floor(sum / k) or one less */
    q = (uint16_t)(((uint32_t)sum * recip) >> 16);
    r = (uint16_t)(sum - (uint16_t)(q * k));
    if (r >= k) {
        q++;
        r = (uint16_t)(r - k);
    }
    if (2u * r >= k) { /* half up */
        q++;
    }
    return q;
}

static CP_FLASH uint16_t ina_ct_us[8] = {140, 204, 332, 588, 1100, 2116, 4156, 8244};
static CP_FLASH uint16_t ina_avg[8] = {1, 4, 16, 64, 128, 256, 512, 1024};

uint16_t cp_ina226_ct_us(uint8_t code)
{
    return ina_ct_us[code & 7u];
}

uint16_t cp_ina226_avg(uint8_t code)
{
    return ina_avg[code & 7u];
}

uint32_t cp_ina226_pick(uint32_t req_hz, uint32_t min_period_us, cp_ina226_setting *out)
{
    uint32_t best_err = 0xFFFFFFFFu;
    uint8_t a, c;
    int found = 0;
    if (req_hz > 1000000u) {
        req_hz = 1000000u;
    }
    for (a = 0; a < 8; a++) {
        for (c = 0; c < 8; c++) {
            uint32_t period = (uint32_t)ina_avg[a] * 2u * ina_ct_us[c];
            uint32_t rate_mhz = (1000000000u + period / 2u) / period;
            uint32_t err;
            if (period < min_period_us || period > 1000000u) {
                continue; /* reads would not fit, or below 1 sample/s */
            }
            err = absdiff(rate_mhz, req_hz * 1000u);
            if (err < best_err) {
                best_err = err;
                found = 1;
                out->ct_code = c;
                out->avg_code = a;
                out->avg = ina_avg[a];
                out->period_us = period;
                out->rate_hz = (rate_mhz + 500u) / 1000u;
                out->config = (uint16_t)(0x4000u | ((uint16_t)a << 9) | ((uint16_t)c << 6) |
                                         ((uint16_t)c << 3) | 0x7u);
            }
        }
    }
    if (!found) { /* min_period_us beyond every setting: the slowest one */
        out->ct_code = 7;
        out->avg_code = 0;
        out->avg = 1;
        out->period_us = 2u * 8244u;
        out->rate_hz = 61;
        out->config = (uint16_t)(0x4000u | (7u << 6) | (7u << 3) | 0x7u);
    }
    return out->rate_hz;
}
