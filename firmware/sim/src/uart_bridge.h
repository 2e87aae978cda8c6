/*
 * UART0 <-> host bridge. Replaces simavr 1.6's transmitter timing (which has
 * no double buffering and counts a parity bit that 8N1 does not have) with the
 * ATmega328P's: UDR plus shift register, UDRE set while UDR is empty, one frame
 * of 1 + data + parity + stop bits per byte at the rate UBRR0/U2X0 give. Bytes
 * leave on a pty (and/or a file); host bytes enter at the line rate.
 */
#ifndef COUPPROF_UART_BRIDGE_H
#define COUPPROF_UART_BRIDGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rig.h"

typedef struct uart_bridge_t uart_bridge_t;

/* pty: create a pty for the host side; out_file: also copy device bytes there. */
uart_bridge_t *uart_bridge_attach(rig_t *rig, int pty, FILE *out_file);
const char *uart_bridge_pty_path(const uart_bridge_t *b);
int uart_bridge_master_fd(const uart_bridge_t *b);
/* Host -> device bytes; they enter the AVR at the line rate. */
void uart_bridge_send(uart_bridge_t *b, const uint8_t *data, size_t len);
/* Read what the host wrote to the pty (non-blocking). */
void uart_bridge_poll_host(uart_bridge_t *b);
/* Push device bytes to the pty; block up to timeout_ms for a slow reader (0 = never). */
void uart_bridge_flush(uart_bridge_t *b, int timeout_ms);
/* Bytes waiting for the pty reader. */
size_t uart_bridge_pending(const uart_bridge_t *b);
void uart_bridge_stats(const uart_bridge_t *b, FILE *f);

#endif
