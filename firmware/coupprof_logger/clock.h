// Device clock: Timer1 free-running at F_CPU/8 = 2 MHz, extended to 48 bits
// by counting overflows. t_us = ticks / 2 (wraps after 2^32 us).
#ifndef CLOCK_H
#define CLOCK_H

#include <avr/io.h>
#include <stdint.h>

extern volatile uint32_t clk_ovf;

void clock_init(void);

// Overflow count that belongs to a Timer1 value read (or captured) just now.
// Interrupts must be off (inside an ISR, or under cli).
static inline uint32_t clock_ovf_for(uint16_t tcnt)
{
    uint32_t o = clk_ovf;
    // an overflow that is pending but not yet counted happened before a small tcnt
    if ((TIFR1 & _BV(TOV1)) && tcnt < 0x8000u) {
        o++;
    }
    return o;
}

// Overflow count for a tick latched in the past (ICR1, at most 32 ms ago),
// whatever the overflow ISR did since. Interrupts must be off.
static inline uint32_t clock_ovf_for_past(uint16_t tick)
{
    uint16_t now = TCNT1;
    uint32_t o = clock_ovf_for(now);
    if (tick > now) {
        o--; // latched before the most recent wrap
    }
    return o;
}

static inline uint32_t clock_us_of(uint32_t ovf, uint16_t tcnt)
{
    // (ovf << 15) | (tcnt >> 1), without a 15-step shift loop
    uint32_t t = (((ovf << 16) | tcnt) >> 1);
    if (ovf & 0x10000UL) {
        t |= 0x80000000UL;
    }
    return t;
}

static inline uint32_t clock_ticks_of(uint32_t ovf, uint16_t tcnt)
{
    return (ovf << 16) | tcnt;
}

// Interrupts must be off.
static inline uint32_t clock_now_us_isr(void)
{
    uint16_t t = TCNT1;
    return clock_us_of(clock_ovf_for(t), t);
}

// Interrupts must be off. Low 32 bits of the tick count (wraps every 35.8 min).
static inline uint32_t clock_now_ticks_isr(void)
{
    uint16_t t = TCNT1;
    return clock_ticks_of(clock_ovf_for(t), t);
}

// Clear Timer1 flags (OCF1A, ICF1, ...) without losing a pending overflow:
// it is counted here and cleared with them. simavr 1.6 clears every pending
// Timer1 flag on any TIFR1 write, unlike the chip, so an overflow landing
// between the check and the write is still lost there: call this only while
// not streaming. Interrupts off.
static inline void clock_clear_flags(uint8_t mask)
{
    if (TIFR1 & _BV(TOV1)) {
        clk_ovf++;
        mask |= _BV(TOV1);
    }
    TIFR1 = mask;
}

uint32_t clock_now_us(void);
uint32_t clock_now_ticks(void);

#endif
