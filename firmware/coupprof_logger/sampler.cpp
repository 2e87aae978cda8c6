#include "sampler.h"

#include <avr/interrupt.h>
#include <util/atomic.h>

#include "clock.h"

static uint8_t sample_buf[256]; // 28 samples of 9 bytes
static uint8_t edge_buf[64];    // 10 edges of 6 bytes
cp_ring sample_ring;
cp_ring edge_ring;
volatile uint32_t samples_total;
volatile uint32_t samples_dropped;
volatile uint32_t edges_total;
static uint8_t markers_last;

// Time from the pin change to the timer read in the ISR (measured in simavr:
// the change is seen at the next instruction boundary, 4 cycles to enter,
// the compiler's prologue, then TCNT1 is read): subtracted so the EDGE time
// is the pin's.
#ifndef EDGE_LATENCY_US
#define EDGE_LATENCY_US 2u
#endif

void sampler_init(void)
{
    cp_ring_init(&sample_ring, sample_buf, sizeof sample_buf);
    cp_ring_init(&edge_ring, edge_buf, sizeof edge_buf);
}

void sampler_reset(void)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        sample_ring.tail = sample_ring.head;
        edge_ring.tail = edge_ring.head;
        samples_total = 0;
        samples_dropped = 0;
        edges_total = 0;
    }
}

void markers_init(void)
{
    DDRD &= (uint8_t) ~(MARKER_MASK << MARKER_SHIFT);
#if MARKER_PULLUPS
    PORTD |= (uint8_t)(MARKER_MASK << MARKER_SHIFT);
#else
    PORTD &= (uint8_t) ~(MARKER_MASK << MARKER_SHIFT);
#endif
    PCMSK2 = (uint8_t)(MARKER_MASK << MARKER_SHIFT);
}

void markers_start(void)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        markers_last = markers_read();
        PCIFR = _BV(PCIF2);
        PCICR |= _BV(PCIE2);
    }
}

void markers_stop(void)
{
    PCICR &= (uint8_t)~_BV(PCIE2);
}

ISR(PCINT2_vect)
{
    uint16_t t = TCNT1; // first: the timestamp is the point of this ISR
    uint8_t m = markers_read();
    uint8_t changed = (uint8_t)(m ^ markers_last);
    cp_edge e;
    if (!changed) {
        return; // a pulse shorter than the latency, or a non-marker pin
    }
    markers_last = m;
    e.t_us = clock_us_of(clock_ovf_for(t), t) - EDGE_LATENCY_US;
    e.markers = m;
    e.changed = changed;
    // one edge per input that changed
    edges_total += (uint8_t)((changed & 1u) + ((changed >> 1) & 1u) + ((changed >> 2) & 1u) +
                             ((changed >> 3) & 1u));
    cp_ring_put(&edge_ring, &e, (uint8_t)sizeof e);
}
