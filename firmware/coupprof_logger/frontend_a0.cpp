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
// and samples its input 1.5 ADC clocks later. The ISR for conversion i can
// therefore read the markers and the clock at (about) the instant conversion
// i+1 samples. It does so only before the middle conversion of a sample: the
// sample's t_us is that instant (plus half a conversion for even k: the mean
// instant of its k conversions) and its markers are the ones read there.
//
// The ISR runs 38.5 k times a second, so it is kept to a few dozen cycles:
// no calls (a call makes the compiler save every scratch register on every
// entry), the clock read only once per sample, the mean by a multiply.
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
static uint8_t mid_index;       // conversion whose instant and markers the sample carries
static uint16_t half_offset_us; // from that instant to the mean one (even k)
static uint32_t recip_k;        // 2^24 / k + 1: acc / k rounded = (acc * recip_k + 2^23) >> 24

// What the ISR queues per sample; fe_pop_sample turns it into a cp_sample
// (the mean, the microsecond time) outside interrupt context.
typedef struct {
    uint16_t tcnt;   // Timer1 at the middle conversion's instant
    uint32_t ovf;    // overflow count belonging to it
    uint16_t sum;    // k conversions, <= 64 * 1023
    uint8_t markers; // read at the middle conversion's instant
} raw_sample;

// ISR state
static uint8_t started; // the first result (sampled before START) is dropped
static uint8_t idx;     // conversions in the current sample so far
static uint16_t acc;
static raw_sample cap;  // clock and markers of the sample being summed

static void choose(uint32_t req_hz)
{
    cp_a0_pick(F_CPU, req_hz, A0_MAX_RATE_HZ, &setting);
    mid_index = (uint8_t)((setting.k - 1u) / 2u);
    // even k: the mean instant lies half a conversion after the middle one
    half_offset_us = (uint16_t)((setting.k & 1u) ? 0u : setting.conv_ticks / 4u);
    // exact round-half-up of sum / k for every sum <= 1023 * k, k <= 64
    // (checked offline over all cases)
    recip_k = (1UL << 24) / setting.k + 1u;
}

ISR(ADC_vect)
{
    uint16_t v = ADC;
    uint8_t i = idx;
    if (started) {
        acc += v;
        i++;
        if (i == setting.k) { // sample complete: queue it (inline, no calls)
            const uint8_t *src = (const uint8_t *)&cap;
            uint8_t h = sample_ring.head;
            uint8_t n;
            cap.sum = acc;
            samples_total++;
            if ((uint8_t)(sample_ring.capacity - (uint8_t)(h - sample_ring.tail)) >= sizeof cap) {
                for (n = 0; n < sizeof cap; n++) {
                    sample_ring.buf[h & sample_ring.mask] = *src++;
                    h++;
                }
                CP_RING_BARRIER();
                sample_ring.head = h;
            } else {
                samples_dropped++;
            }
            acc = 0;
            i = 0;
        }
    } else { // conversion 0 was sampled before its instant could be read
        started = 1;
        acc = 0;
        i = 0;
    }
    if (i == mid_index) { // the conversion now starting is the sample's middle one
        uint16_t t = TCNT1;
        cap.markers = markers_read();
        cap.tcnt = t;
        cap.ovf = clock_ovf_for(t);
    }
    idx = i;
}

int fe_pop_sample(cp_sample *s)
{
    raw_sample r;
    if (!cp_ring_get(&sample_ring, &r, (uint8_t)sizeof r)) {
        return 0;
    }
    s->t_us = clock_us_of(r.ovf, r.tcnt) + half_offset_us;
    s->current = (int16_t)(((uint32_t)r.sum * recip_k + (1UL << 23)) >> 24); // mean
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
