// UART0 at 2,000,000 baud (U2X, UBRR = 0), 8N1. Interrupt-driven both ways
// through rings: RX ISR -> main loop, main loop -> UDRE ISR. The transmit
// ring is 256 bytes at a 256-byte boundary and its tail lives in r2
// (fixed_regs.h), so the transmit handler is 26 cycles a byte.
#ifndef UART_H
#define UART_H

#include <avr/io.h>
#include <stdint.h>

#include "fixed_regs.h"

void uart_init(void);
// Queue bytes, waiting for room when the ring is full (main loop only).
void uart_send(const uint8_t *p, uint16_t n);
uint16_t uart_tx_free(void);
// Queue frame[0 .. len-1] followed by the CRC-16 of frame[2 .. len-1] (low
// byte first): a device frame whose CRC is computed while it is copied.
// The caller makes sure len + 2 bytes fit (uart_tx_free).
void uart_send_crc(const uint8_t *frame, uint8_t len);
// 1 and the byte if one was received.
int uart_rx(uint8_t *b);
// Bytes lost because the RX ring was full.
extern volatile uint16_t uart_rx_overruns;

extern volatile uint8_t uart_tx_head;
extern volatile uint8_t uart_tx_held;

// Hold the transmit interrupt off while a time-critical interrupt-driven
// sequence runs (the INA226 reads): at 2 Mbaud it fires every 5 us and, being
// of higher priority than the TWI interrupt, would stretch the sequence past
// its deadline. Interrupts must be off for both calls.
static inline __attribute__((always_inline)) void uart_tx_hold(void)
{
    uart_tx_held = 1;
    UCSR0B &= (uint8_t)~_BV(UDRIE0);
}

static inline __attribute__((always_inline)) void uart_tx_release(void)
{
    uart_tx_held = 0;
    if (uart_tx_head != fixed_tx_tail()) {
        UCSR0B |= _BV(UDRIE0);
    }
}

#endif
