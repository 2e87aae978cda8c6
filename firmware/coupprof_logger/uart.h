// UART0 at 2,000,000 baud (U2X, UBRR = 0), 8N1. Interrupt-driven both ways
// through SPSC rings: RX ISR -> main loop, main loop -> UDRE ISR.
#ifndef UART_H
#define UART_H

#include <avr/io.h>
#include <stdint.h>

#include "cp_ring.h"

void uart_init(void);
// Queue bytes, waiting for room when the ring is full (main loop only).
void uart_send(const uint8_t *p, uint16_t n);
uint16_t uart_tx_free(void);
// 1 and the byte if one was received.
int uart_rx(uint8_t *b);
// Bytes lost because the RX ring was full.
extern volatile uint16_t uart_rx_overruns;

extern cp_ring uart_tx_ring;
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
    if (cp_ring_used(&uart_tx_ring)) {
        UCSR0B |= _BV(UDRIE0);
    }
}

#endif
