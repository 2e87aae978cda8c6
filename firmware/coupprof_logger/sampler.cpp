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
static const uint8_t bit_count[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};

// Ticks (0.5 us) from the pin change to the TCNT1 read below: the change is
// seen at the next instruction boundary, 4 cycles to respond, 3 for the
// vector's jump, 4 for two pushes, then the read: ~12 cycles, rounded to 2
// ticks. Subtracted, so the EDGE time is the pin's.
#ifndef EDGE_LATENCY_TICKS
#define EDGE_LATENCY_TICKS 2u
#endif

// Written by the vector stub, read by the body it jumps to.
extern "C" {
volatile uint8_t edge_tcnt_lo, edge_tcnt_hi, edge_pind;
#pragma GCC diagnostic ignored "-Wmisspelled-isr"
void pcint2_body(void) __attribute__((signal, used, externally_visible));
}

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

// The vector is a hand-written stub: it saves two registers, latches TCNT1
// and PIND at once (the compiler's prologue for the body below would put
// ~30 cycles before the first read), then jumps to the body, which is an
// ordinary interrupt handler (signal attribute: full prologue, reti).
ISR(PCINT2_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "push r24\n\t"
        "lds r24, %[tcntl]\n\t" /* TCNT1L first: latches TCNT1H */
        "sts edge_tcnt_lo, r24\n\t"
        "lds r24, %[tcnth]\n\t"
        "sts edge_tcnt_hi, r24\n\t"
        "in r24, %[pind]\n\t"
        "sts edge_pind, r24\n\t"
        "pop r24\n\t"
        "jmp pcint2_body\n\t"
        :
        : [tcntl] "i"(_SFR_MEM_ADDR(TCNT1L)), [tcnth] "i"(_SFR_MEM_ADDR(TCNT1H)),
          [pind] "I"(_SFR_IO_ADDR(PIND)));
}

void pcint2_body(void)
{
    uint16_t t = (uint16_t)(edge_tcnt_lo | (uint16_t)edge_tcnt_hi << 8);
    uint8_t m = (uint8_t)((edge_pind >> MARKER_SHIFT) & MARKER_MASK);
    uint8_t changed = (uint8_t)(m ^ markers_last);
    cp_edge e;
    if (!changed) {
        return; // a pulse shorter than the latency, or a non-marker pin
    }
    markers_last = m;
    t = (uint16_t)(t - EDGE_LATENCY_TICKS);
    e.t_us = clock_us_of(clock_ovf_for_past(t), t);
    e.markers = m;
    e.changed = changed;
    // one edge per input that changed (a 16-entry table, not a loop)
    edges_total += bit_count[changed];
    {   // cp_ring_put, inline: a call would make this handler save every
        // scratch register first
        uint8_t h = edge_ring.head;
        if ((uint8_t)(edge_ring.capacity - (uint8_t)(h - edge_ring.tail)) >= sizeof e) {
            const uint8_t *src = (const uint8_t *)&e;
            uint8_t n;
            for (n = 0; n < sizeof e; n++) {
                edge_ring.buf[h & edge_ring.mask] = src[n];
                h++;
            }
            CP_RING_BARRIER();
            edge_ring.head = h;
        }
    }
}
