// UART0 at 2,000,000 baud (U2X, UBRR = 0), 8N1. Interrupt-driven both ways
// through SPSC rings: RX ISR -> main loop, main loop -> UDRE ISR.
#ifndef UART_H
#define UART_H

#include <stdint.h>

void uart_init(void);
// Queue bytes, waiting for room when the ring is full (main loop only).
void uart_send(const uint8_t *p, uint16_t n);
uint16_t uart_tx_free(void);
// 1 and the byte if one was received.
int uart_rx(uint8_t *b);
// Bytes lost because the RX ring was full.
extern volatile uint16_t uart_rx_overruns;

#endif
