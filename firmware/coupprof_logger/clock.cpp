#include "clock.h"

#include <avr/interrupt.h>
#include <util/atomic.h>

volatile uint32_t clk_ovf;

// clk_ovf++ by hand: 41 cycles instead of the compiler's 58 (interrupts are
// off throughout, which delays a marker edge's timestamp by at most that).
ISR(TIMER1_OVF_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "push r24\n\t"
        "in r24, __SREG__\n\t"
        "push r24\n\t"
        "lds r24, %[o]\n\t"
        "subi r24, 0xff\n\t" /* + 1, the carry rippling through sbci */
        "sts %[o], r24\n\t"
        "lds r24, %[o]+1\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[o]+1, r24\n\t"
        "lds r24, %[o]+2\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[o]+2, r24\n\t"
        "lds r24, %[o]+3\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[o]+3, r24\n\t"
        "pop r24\n\t"
        "out __SREG__, r24\n\t"
        "pop r24\n\t"
        "reti\n\t"
        :
        : [o] "i"(&clk_ovf));
}

void clock_init(void)
{
    // Arduino's init() left Timer1 in 8-bit phase-correct PWM: back to normal mode.
    TCCR1A = 0;
    TCCR1B = 0;
    TCCR1C = 0;
    TCNT1 = 0;
    clk_ovf = 0;
    TIFR1 = 0xFF;              // clear stale flags
    TIMSK1 = _BV(TOIE1);
    TCCR1B = _BV(CS11);        // clk/8 = 2 MHz
}

uint32_t clock_now_us(void)
{
    uint32_t t;
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        t = clock_now_us_isr();
    }
    return t;
}

uint32_t clock_now_ticks(void)
{
    uint32_t t;
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        t = clock_now_ticks_isr();
    }
    return t;
}
