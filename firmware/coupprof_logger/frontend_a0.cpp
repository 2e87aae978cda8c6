// A0 front end: a current-sense amplifier's output on ADC0.
//
// The ADC runs free (auto-trigger source "free running"), one conversion per
// 13 ADC clocks. At the default 12.8 kS/s the ADC clock is F_CPU/32 = 500 kHz
// (38.5 k conversions/s) and every sample is the mean of k = 3 consecutive
// conversions: a boxcar over the whole sample period, so power between the
// conversions is not aliased away. Slower rates use the slower, more
// accurate ADC clocks (F_CPU/64, F_CPU/128) and larger k (cp_a0_pick).
//
// Timing: in free-running mode conversion i+1 starts when conversion i ends,
// and samples its input 1.5 ADC clocks later. The ISR for conversion i reads
// the markers and the clock at that moment, which is therefore the instant of
// conversion i+1; the value arriving at the next ISR is paired with it. A
// sample's t_us is the mean instant of its k conversions and its markers are
// those read at the middle one. (simavr latches the ADC input when ADCL is
// read instead, i.e. one conversion later than the hardware does.)
//
// The bus voltage is not measured: bus = 0, bus_lsb_uV = 0, and the host
// uses bus_nominal_mV (BUS_NOMINAL_MV, or SET_CAL's optional third field).
#include "fw_config.h"

#if CP_FRONT_END == CP_FE_ID_A0

#include <avr/interrupt.h>
#include <avr/io.h>
#include <util/atomic.h>

#include "clock.h"
#include "cp_protocol.h"
#include "cp_rate.h"
#include "frontend.h"
#include "sampler.h"

static cp_a0_setting setting;
static uint16_t mid_offset_us; // from the first conversion's instant to the mean
static uint8_t mid_index;      // conversion whose markers the sample carries

// ISR state
static uint8_t have_prev;
static uint32_t prev_t_us;
static uint8_t prev_markers;
static uint8_t idx;
static uint16_t acc;
static uint32_t first_t_us;
static uint8_t mid_markers;

static void choose(uint32_t req_hz)
{
    cp_a0_pick(F_CPU, req_hz, A0_MAX_RATE_HZ, &setting);
    // (k - 1) / 2 conversions of conv_ticks / 2 us each
    mid_offset_us = (uint16_t)(((uint32_t)(setting.k - 1u) * setting.conv_ticks) / 4u);
    mid_index = (uint8_t)((setting.k - 1u) / 2u);
}

ISR(ADC_vect)
{
    uint8_t m = markers_read(); // ~ the instant the next conversion samples
    uint32_t now = clock_now_us_isr();
    uint16_t v = ADC;
    uint32_t t = prev_t_us;
    uint8_t mk = prev_markers;
    uint8_t valid = have_prev;
    prev_t_us = now;
    prev_markers = m;
    have_prev = 1;
    if (!valid) {
        return; // first result: its sampling instant was not observed
    }
    sei(); // the rest may be interrupted (edge timestamps, UART)
    if (idx == 0) {
        first_t_us = t;
        acc = 0;
    }
    if (idx == mid_index) {
        mid_markers = mk;
    }
    acc += v;
    if (++idx == setting.k) {
        cp_sample s;
        idx = 0;
        s.t_us = first_t_us + mid_offset_us;
        // k <= 255 and v <= 1023: the sum needs 18 bits only for k > 64, where
        // the 16-bit accumulator would wrap; cp_a0_pick keeps k <= 64 there
        s.current = (int16_t)(setting.k == 1 ? acc : (uint16_t)((acc + setting.k / 2u) / setting.k));
        s.bus = 0;
        s.markers = mid_markers;
        cli(); // sampler_push must not race with itself: keep it atomic
        sampler_push(&s);
    }
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
        have_prev = 0;
        idx = 0;
        acc = 0;
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
