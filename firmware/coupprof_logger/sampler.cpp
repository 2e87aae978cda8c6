#include "sampler.h"

#include <avr/interrupt.h>
#include <util/atomic.h>

#include "clock.h"
#include "ram_layout.h"

#if CP_FRONT_END == CP_FE_ID_INA226
static uint8_t sample_buf[256]; // 28 samples of 9 bytes
cp_ring sample_ring;
#endif
volatile uint32_t samples_total;
volatile uint32_t samples_dropped;
uint32_t edges_total;
static uint8_t markers_last;
static const uint8_t bit_count[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};

// Ticks (0.5 us) from the pin change to the TCNT1 read in the vector: the
// change is seen at the next instruction boundary, 4 cycles to respond, 3 for
// the vector's jump, 2 for a push, then the read: ~11 cycles, rounded to 2
// ticks. Subtracted, so the EDGE time is the pin's.
#ifndef EDGE_LATENCY_TICKS
#define EDGE_LATENCY_TICKS 2u
#endif

// Raw edges: 8-byte records in ram.edge_raw (64-byte aligned: the handler
// steps through it with subi/andi/ori). The indices are the low address bytes
// of the next slot to write (head, the vector) and to read (tail, main loop).
// Record: TCNT1 low, high, PIND, low byte of the overflow count, TIFR1.
extern "C" {
volatile uint8_t edge_head, edge_tail;
}
#define EDGE_RAW_LO ((uint8_t)(uintptr_t)ram.edge_raw)

void sampler_init(void)
{
#if CP_FRONT_END == CP_FE_ID_INA226
    cp_ring_init(&sample_ring, sample_buf, sizeof sample_buf);
#endif
    edge_head = edge_tail = EDGE_RAW_LO;
}

void sampler_reset(void)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
#if CP_FRONT_END == CP_FE_ID_INA226
        sample_ring.tail = sample_ring.head;
#endif
        samples_total = 0;
        samples_dropped = 0;
    }
    edges_total = 0;
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
        edge_tail = edge_head;
        PCIFR = _BV(PCIF2);
        PCICR |= _BV(PCIE2);
    }
}

void markers_stop(void)
{
    PCICR &= (uint8_t)~_BV(PCIE2);
}

// The whole handler is hand-written: it latches TCNT1 two instructions after
// entry, then PIND, the overflow count's low byte and TIFR1 (TOV1 tells an
// overflow not yet counted), queues them and returns: ~55 cycles with
// interrupts off. Everything else (which inputs changed, the 32-bit time) is
// worked out by the main loop (markers_pop_edge), so the handler is short and
// another edge a few us later is not missed. A full ring drops the record.
ISR(PCINT2_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "push r24\n\t"
        "lds r24, %[tcntl]\n\t" /* TCNT1L first: latches TCNT1H */
        "push r25\n\t"
        "lds r25, %[tcnth]\n\t"
        "push r30\n\t"
        "push r31\n\t"
        "lds r30, edge_head\n\t"
        "ldi r31, hi8(%[raw])\n\t"
        "st Z, r24\n\t"
        "std Z+1, r25\n\t"
        "in r24, %[pind]\n\t"
        "std Z+2, r24\n\t"
        "lds r24, %[ovf]\n\t"
        "std Z+3, r24\n\t"
        "in r24, %[tifr]\n\t"
        "std Z+4, r24\n\t"
        "in r25, __SREG__\n\t"
        "subi r30, lo8(-8)\n\t" /* next slot, modulo the 64-byte block */
        "andi r30, 0x3f\n\t"
        "ori r30, lo8(%[raw])\n\t"
        "lds r24, edge_tail\n\t"
        "cp r30, r24\n\t"
        "breq 1f\n\t" /* full: the record is not published */
        "sts edge_head, r30\n"
        "1:\n\t"
        "out __SREG__, r25\n\t"
        "pop r31\n\t"
        "pop r30\n\t"
        "pop r25\n\t"
        "pop r24\n\t"
        "reti\n\t"
        :
        : [tcntl] "i"(_SFR_MEM_ADDR(TCNT1L)), [tcnth] "i"(_SFR_MEM_ADDR(TCNT1H)),
          [pind] "I"(_SFR_IO_ADDR(PIND)), [tifr] "I"(_SFR_IO_ADDR(TIFR1)),
          [ovf] "i"(&clk_ovf), [raw] "i"(ram.edge_raw));
}

int markers_pop_edge(cp_edge *e)
{
    for (;;) {
        uint8_t t = edge_tail;
        const uint8_t *r;
        uint16_t tcnt;
        uint32_t ovf;
        uint8_t m, changed;
        if (t == edge_head) {
            return 0;
        }
        CP_RING_BARRIER();
        r = ram.edge_raw + (uint8_t)(t - EDGE_RAW_LO);
        tcnt = (uint16_t)(r[0] | (uint16_t)r[1] << 8);
        m = (uint8_t)((r[2] >> MARKER_SHIFT) & MARKER_MASK);
        ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
        {
            ovf = clk_ovf; // counts every wrap up to now: >= the record's
        }
        // the record's count: its low byte, the upper bytes from now
        ovf -= (uint8_t)((uint8_t)ovf - r[3]);
        if ((r[4] & _BV(TOV1)) && tcnt < 0x8000u) {
            ovf++; // a wrap not yet counted happened before a small TCNT1
        }
        CP_RING_BARRIER();
        edge_tail = (uint8_t)((uint8_t)((uint8_t)(t + 8u) & 0x3Fu) | EDGE_RAW_LO);
        changed = (uint8_t)(m ^ markers_last);
        if (!changed) {
            continue; // a pulse shorter than the latency, or a non-marker pin
        }
        markers_last = m;
        if (tcnt < EDGE_LATENCY_TICKS) {
            ovf--;
        }
        tcnt = (uint16_t)(tcnt - EDGE_LATENCY_TICKS);
        e->t_us = clock_us_of(ovf, tcnt);
        e->markers = m;
        e->changed = changed;
        edges_total += bit_count[changed]; // one edge per input that changed
        return 1;
    }
}
