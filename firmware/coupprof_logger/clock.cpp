#include "clock.h"

#include <avr/interrupt.h>
#include <util/atomic.h>

volatile uint32_t clk_ovf;

ISR(TIMER1_OVF_vect)
{
    clk_ovf++;
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
