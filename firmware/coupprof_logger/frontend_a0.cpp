// A0 front end: a current-sense amplifier's output on ADC0.
//
// The ADC runs free (auto-trigger source "free running"): one conversion per
// 13 ADC clocks, back to back. Each sample is the mean of k consecutive
// conversions (a boxcar over the whole sample period, so nothing between
// samples is aliased away); cp_a0_pick chooses the ADC clock (F_CPU/64 or
// F_CPU/128, the datasheet's full-resolution 125 kHz) and k. The default,
// 6410 S/s, is F_CPU/64 with k = 3; A0_MAX_RATE_HZ allows up to 9615 S/s
// (F_CPU/128, k = 1), where the CPU falls ~3 % short of framing and sending
// every sample (README: cycle budget).
//
// Timing: conversion i+1 starts when conversion i ends (E_i) and samples its
// input 1.5 ADC clocks later. Conversion ends lie on an exact grid (13 ADC
// clocks = conv_ticks Timer1 ticks apart), so the ISR only notes the Timer1
// value when it runs, and the main loop snaps it back onto the grid: the
// latency of the ISR (other interrupts, nesting) does not reach t_us. A
// sample's t_us is the sampling instant of its middle conversion (plus half a
// conversion for even k: the mean instant of its k conversions); its markers
// are read by the ISR that starts that conversion.
//
// The ISR runs for every conversion, so it makes no calls (a call makes the
// compiler save every scratch register on every entry) and lets other
// interrupts in at once (marker edges must be timestamped within a few us).
// The mean and the microsecond time are computed in the main loop.
//
// The bus voltage is not measured: bus = 0, bus_lsb_uV = 0, and the host
// uses bus_nominal_mV (BUS_NOMINAL_MV, or SET_CAL's optional third field).
#include "fw_config.h"

#if CP_FRONT_END == CP_FE_ID_A0

#include <avr/interrupt.h>
#include <avr/io.h>
#include <string.h>
#include <util/atomic.h>

#include "clock.h"
#include "cp_protocol.h"
#include "cp_rate.h"
#include "frontend.h"
#include "sampler.h"

// Timer1 ticks from a conversion's end to the ISR's TCNT1 read when nothing
// delays it (interrupt response, the prologue, the path to the read: ~80
// cycles; calibrated in the simavr rig against its sample-and-hold log).
// Snapping keeps every grid point at least this far before its read.
#ifndef A0_ISR_MIN_LATENCY_TICKS
#define A0_ISR_MIN_LATENCY_TICKS 10
#endif

static cp_a0_setting setting;
static uint8_t mid_index;   // conversion whose instant and markers the sample carries
static uint16_t offset_us;  // from the grid point before it to the sample's instant
static uint32_t recip_k;    // 2^22 / k + 1: floor(sum / k) = (sum * recip_k) >> 22 (k >= 2)
static uint16_t step_ticks; // k conversions

// What the ISR queues per sample (9 bytes; AVR structs are packed):
typedef struct {
    uint16_t tcnt;   // Timer1 when the ISR before the middle conversion ran
    uint32_t ovf;    // its overflow count
    uint16_t sum;    // k conversions, <= 64 * 1023
    uint8_t markers; // read by that ISR
} raw_sample;
#define RAW_BYTES 9

// ISR state
static uint8_t started; // the first result (sampled before START) is dropped
static uint8_t idx;     // conversions in the current sample so far
static uint16_t acc;
static uint16_t cap_tcnt;
static uint32_t cap_ovf;
static uint8_t cap_markers;

// main-loop state: the grid point (48-bit tick) the next capture snaps to
static uint32_t grid_ovf;
static uint16_t grid_tcnt;
static uint8_t grid_valid;

static void choose(uint32_t req_hz)
{
    uint16_t adc_clk_ticks;
    cp_a0_pick(F_CPU, req_hz, A0_MAX_RATE_HZ, &setting);
    mid_index = (uint8_t)((setting.k - 1u) / 2u);
    step_ticks = (uint16_t)(setting.conv_ticks * setting.k);
    // sampling instant: 1.5 ADC clocks after the grid point; even k: plus
    // half a conversion, the mean instant of the k conversions
    adc_clk_ticks = (uint16_t)(setting.conv_ticks / 13u);
    offset_us = (uint16_t)((3u * adc_clk_ticks / 2u + ((setting.k & 1u) ? 0u : setting.conv_ticks / 2u)) / 2u);
    // floor(sum / k) = (sum * recip_k) >> 22 exactly for every sum <= 1023 * k,
    // 2 <= k <= 64, and sum * recip_k < 2^32 (both checked offline over all
    // cases): no division per sample
    recip_k = (1UL << 22) / setting.k + 1u;
}

ISR(ADC_vect, ISR_NOBLOCK)
{
    // Interruptible from the first instruction. It cannot re-enter: the next
    // conversion ends a whole conversion (>= 52 us) from now, and this body
    // takes ~13 us even with the UART interrupts nested in it.
    uint16_t v = ADC;
    uint8_t i = idx;
    if (started) {
        acc += v;
        if (++i == setting.k) { // sample complete: queue it
            uint8_t h = sample_ring.head;
            samples_total++;
            if ((uint8_t)(h - sample_ring.tail) <= (uint8_t)(255u - RAW_BYTES)) {
                uint8_t *buf = sample_ring.buf; // 256 bytes: u8 indices wrap by themselves
                buf[h++] = (uint8_t)cap_tcnt;
                buf[h++] = (uint8_t)(cap_tcnt >> 8);
                buf[h++] = (uint8_t)cap_ovf;
                buf[h++] = (uint8_t)(cap_ovf >> 8);
                buf[h++] = (uint8_t)(cap_ovf >> 16);
                buf[h++] = (uint8_t)(cap_ovf >> 24);
                buf[h++] = (uint8_t)acc;
                buf[h++] = (uint8_t)(acc >> 8);
                buf[h++] = cap_markers;
                CP_RING_BARRIER();
                sample_ring.head = h;
            } else {
                samples_dropped++;
            }
            acc = 0;
            i = 0;
        }
    } else { // conversion 0 was sampled before its instant could be noted
        started = 1;
        acc = 0;
        i = 0;
    }
    if (i == mid_index) { // the conversion now running is the sample's middle one
        uint16_t t;
        cli(); // TCNT1, the overflow count and TOV1 together
        t = TCNT1;
        cap_markers = markers_read();
        cap_ovf = clock_ovf_for(t);
        sei();
        cap_tcnt = t;
    }
    idx = i;
}

// sum / k rounded half up
static uint16_t mean_of(uint16_t sum)
{
    uint16_t q, rem;
    if (setting.k == 1) {
        return sum;
    }
    q = (uint16_t)(((uint32_t)sum * recip_k) >> 22);
    rem = (uint16_t)(sum - q * setting.k);
    if (2u * rem >= setting.k) {
        q++;
    }
    return q;
}

int fe_pop_sample(cp_sample *s)
{
    raw_sample r;
    uint8_t t = sample_ring.tail;
    uint16_t g;
    int16_t late;
    if ((uint8_t)(sample_ring.head - t) < sizeof r) {
        return 0;
    }
    CP_RING_BARRIER();
    if (t <= (uint8_t)(256u - sizeof r)) { // contiguous (the usual case)
        memcpy(&r, sample_ring.buf + t, sizeof r);
    } else {
        uint8_t *d = (uint8_t *)&r;
        uint8_t n;
        for (n = 0; n < sizeof r; n++) {
            d[n] = sample_ring.buf[(uint8_t)(t + n)];
        }
    }
    CP_RING_BARRIER();
    sample_ring.tail = (uint8_t)(t + sizeof r);

    // Snap the noted time onto the conversion grid: the expected grid point
    // advances by k conversions per sample (more after drops) and moves
    // earlier whenever a note came sooner after it than the ISR can. The
    // 16-bit differences are exact: notes and grid points are ms apart.
    g = (uint16_t)(grid_tcnt + step_ticks);
    if (g < grid_tcnt) {
        grid_ovf++;
    }
    late = (int16_t)(uint16_t)(r.tcnt - g);
    if (!grid_valid) {
        late = 0; // force the snap below
        grid_valid = 1;
    }
    // samples dropped in between: whole steps, rounded (an ISR delayed by
    // less than a step and a half is not a drop)
    while (late >= (int16_t)(step_ticks + step_ticks / 2u)) {
        uint16_t g2 = (uint16_t)(g + step_ticks);
        if (g2 < g) {
            grid_ovf++;
        }
        g = g2;
        late = (int16_t)(late - (int16_t)step_ticks);
    }
    if (late < A0_ISR_MIN_LATENCY_TICKS) { // the grid was later than the truth
        g = (uint16_t)(r.tcnt - A0_ISR_MIN_LATENCY_TICKS);
        grid_ovf = r.ovf - (g > r.tcnt ? 1u : 0u);
    }
    grid_tcnt = g;
    s->t_us = clock_us_of(grid_ovf, g) + offset_us;
    s->current = (int16_t)mean_of(r.sum);
    s->bus = 0;
    s->markers = r.markers;
    return 1;
}

uint32_t fe_init(cp_ident *id)
{
    DDRC &= (uint8_t)~_BV(PC0);
    PORTC &= (uint8_t)~_BV(PC0);
    DIDR0 |= _BV(ADC0D); // no digital input buffer on the analog pin
    ADCSRA = 0;
    ADMUX = _BV(REFS0); // AVcc reference, ADC0, right adjusted
    ADCSRB = 0;         // auto trigger: free running
    choose(A0_DEFAULT_RATE_HZ);
    id->front_end = CP_FE_A0;
    id->flags = 0;
    id->rate_hz = setting.rate_hz;
    id->shunt_uohm = (uint32_t)A0_SHUNT_UOHM;
    id->current_lsb_nA = (int32_t)A0_CURRENT_LSB_NA;
    id->bus_lsb_uV = 0;
    id->bus_nominal_mV = BUS_NOMINAL_MV;
    return 0; // current_lsb_nA cannot be derived from the shunt alone
}

uint32_t fe_set_rate(uint32_t req_hz)
{
    choose(req_hz);
    return setting.rate_hz;
}

int fe_start(void)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        started = 0;
        idx = 0;
        grid_valid = 0;
        grid_ovf = 0;
        grid_tcnt = 0;
        ADCSRA = _BV(ADIF); // off, stale flag cleared
        ADCSRB = 0;
        ADMUX = _BV(REFS0);
        ADCSRA = (uint8_t)(_BV(ADEN) | _BV(ADSC) | _BV(ADATE) | _BV(ADIE) | setting.adps);
    }
    return 1;
}

void fe_stop(void)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        ADCSRA = _BV(ADIF); // disable and drop a pending interrupt
    }
}

void fe_poll(void)
{
}

#endif
