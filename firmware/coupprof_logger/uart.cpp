#include "uart.h"

#include <avr/interrupt.h>
#include <avr/io.h>
#include <util/atomic.h>

#include "cp_ring.h"

static uint8_t tx_buf[256];
static uint8_t rx_buf[64];
cp_ring uart_tx_ring;
volatile uint8_t uart_tx_held;
static cp_ring rx_ring;
volatile uint16_t uart_rx_overruns;

void uart_init(void)
{
    cp_ring_init(&uart_tx_ring, tx_buf, sizeof tx_buf);
    cp_ring_init(&rx_ring, rx_buf, sizeof rx_buf);
    UCSR0B = 0;
    UCSR0A = _BV(U2X0);
    UBRR0 = 0; // F_CPU / (8 * (UBRR + 1)) = 2,000,000 baud exactly at 16 MHz
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00); // 8N1
    UCSR0B = _BV(RXEN0) | _BV(TXEN0) | _BV(RXCIE0);
}

ISR(USART_RX_vect)
{
    uint8_t b = UDR0;
    if (!cp_ring_put_byte(&rx_ring, b)) {
        uart_rx_overruns++;
    }
}

ISR(USART_UDRE_vect)
{
    uint8_t b;
    if (cp_ring_get_byte(&uart_tx_ring, &b)) {
        UDR0 = b;
    } else {
        UCSR0B &= (uint8_t)~_BV(UDRIE0);
    }
}

uint16_t uart_tx_free(void)
{
    return cp_ring_free(&uart_tx_ring);
}

void uart_send(const uint8_t *p, uint16_t n)
{
    while (n) {
        uint8_t room = cp_ring_free(&uart_tx_ring);
        uint8_t k = n < room ? (uint8_t)n : room;
        if (k) {
            cp_ring_put(&uart_tx_ring, p, k);
            p += k;
            n = (uint16_t)(n - k);
            ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
            {
                if (!uart_tx_held) {
                    UCSR0B |= _BV(UDRIE0);
                }
            }
        }
    }
}

int uart_rx(uint8_t *b)
{
    return cp_ring_get_byte(&rx_ring, b);
}
