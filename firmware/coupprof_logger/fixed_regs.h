// Registers reserved for the two busiest interrupt handlers.
//
// Every file (the Arduino core's startup code included) is compiled with
// -ffixed-r2 ... -ffixed-r11 (Makefile: FIXED_REGS), so the compiler never
// uses them and the handlers keep their state there instead of saving,
// loading and storing it on every entry. At 2 Mbaud the transmit handler runs
// 20,000 times a second per 10 % of line use, and the A0 conversion handler up
// to 38,000 times a second: this halves the cycles of both (README: budget).
// `make` disassembles each ELF and fails if anything else writes them
// (check_regs.awk).
//
//   r2       UART transmit ring tail (uart.cpp; the main loop only reads it)
//   r3       SREG saved by the transmit handler
//   r4:r5    Z saved by the transmit handler
//   r6:r7    A0: sum of the conversions of the sample being built
//   r8       A0: conversions still to come in that sample
//   r9       SREG saved by the A0 conversion handler
//   r10:r11  A0: the conversion just read; then Z saved
#ifndef FIXED_REGS_H
#define FIXED_REGS_H

#include <stdint.h>

// The transmit ring's tail, read from the main loop (the handler moves it).
static inline uint8_t fixed_tx_tail(void)
{
    uint8_t t;
    __asm__ __volatile__("mov %0, r2" : "=r"(t));
    return t;
}

#endif
