/* Choosing the nearest achievable sample rate for each front end.
 * Pure arithmetic, so the host tests check it. */
#ifndef CP_RATE_H
#define CP_RATE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- A0: ADC free-running, k consecutive conversions averaged per sample ----
 * A conversion takes 13 ADC clocks; the ADC clock is F_CPU / prescaler. */
/* k * 1023 must fit the firmware's 16-bit accumulator */
#define CP_A0_MAX_K 64u

typedef struct {
    uint8_t adps;        /* ADCSRA prescaler bits: 5 = /32, 6 = /64, 7 = /128 */
    uint8_t k;           /* conversions averaged into one sample, 1..CP_A0_MAX_K */
    uint16_t conv_ticks; /* one conversion in Timer1 ticks (F_CPU / 8) */
    uint32_t rate_hz;    /* achieved samples/s, rounded */
} cp_a0_setting;

/* Nearest rate to req_hz not above max_hz; equal rates prefer the slower ADC
 * clock (better resolution). Returns the achieved rate (also in *out). */
uint32_t cp_a0_pick(uint32_t f_cpu_hz, uint32_t req_hz, uint32_t max_hz, cp_a0_setting *out);

/* The mean of k conversions, sum / k rounded half up, with one 16 x 16 bit
 * multiply instead of a division (the AVR has no divider): recip is
 * cp_a0_recip(k), computed once per rate. Exact for every sum <= 1023 * k,
 * k <= CP_A0_MAX_K (the host tests check all of them). */
uint16_t cp_a0_recip(uint8_t k);
uint16_t cp_a0_mean(uint16_t sum, uint8_t k, uint16_t recip);

/* ---- INA226: continuous shunt + bus, same conversion time for both ----
 * One sample per (shunt + bus) cycle, times the averaging count. */
typedef struct {
    uint8_t ct_code;   /* VSHCT = VBUSCT code, 0 = 140 us .. 7 = 8.244 ms */
    uint8_t avg_code;  /* AVG code, 0 = 1 .. 7 = 1024 averages */
    uint16_t avg;      /* averages */
    uint32_t period_us; /* nominal time between conversion-ready events */
    uint16_t config;   /* Configuration register (00h) value, mode 111 */
    uint32_t rate_hz;  /* nominal samples/s, rounded */
} cp_ina226_setting;

uint16_t cp_ina226_ct_us(uint8_t code);
uint16_t cp_ina226_avg(uint8_t code);

/* Nearest nominal rate to req_hz whose cycle is at least min_period_us (the
 * time the I2C reads of one cycle need). Returns the rate (also in *out). */
uint32_t cp_ina226_pick(uint32_t req_hz, uint32_t min_period_us, cp_ina226_setting *out);

#ifdef __cplusplus
}
#endif

#endif
