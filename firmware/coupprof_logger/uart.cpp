#include "uart.h"

#include <avr/interrupt.h>
#include <avr/io.h>
#include <util/atomic.h>

#include "cp_ring.h"

static uint8_t tx_buf[256]; // 256: the u8 ring indices wrap by themselves
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

// At 2 Mbaud this runs every 5 us (80 cycles) while a frame goes out, so it
// is written out by hand: 48 cycles with entry and exit instead of the
// compiler's 62. It is cp_ring_get_byte on uart_tx_ring, specialised to its
// 256-byte buffer (index = tail, no mask), and it clears UDRIE when the ring
// is empty.
ISR(USART_UDRE_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "push r24\n\t"
        "in r24, __SREG__\n\t"
        "push r24\n\t"
        "push r30\n\t"
        "push r31\n\t"
        "lds r24, %[tail]\n\t"
        "lds r30, %[head]\n\t"
        "cp r24, r30\n\t"
        "breq 1f\n\t"
        "mov r30, r24\n\t"
        "ldi r31, 0\n\t"
        "subi r30, lo8(-(%[buf]))\n\t" /* Z = buf + tail */
        "sbci r31, hi8(-(%[buf]))\n\t"
        "ld r30, Z\n\t"
        "sts %[udr], r30\n\t"
        "inc r24\n\t"
        "sts %[tail], r24\n\t" /* slot handed back after the byte is read */
        "rjmp 2f\n"
        "1:\n\t"
        "lds r24, %[ucsrb]\n\t"
        "andi r24, %[no_udrie]\n\t"
        "sts %[ucsrb], r24\n"
        "2:\n\t"
        "pop r31\n\t"
        "pop r30\n\t"
        "pop r24\n\t"
        "out __SREG__, r24\n\t"
        "pop r24\n\t"
        "reti\n\t"
        :
        : [tail] "i"(&uart_tx_ring.tail), [head] "i"(&uart_tx_ring.head), [buf] "i"(tx_buf),
          [udr] "i"(_SFR_MEM_ADDR(UDR0)), [ucsrb] "i"(_SFR_MEM_ADDR(UCSR0B)),
          [no_udrie] "n"(0xFF & ~_BV(UDRIE0)));
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
            // cp_ring_put for the 256-byte ring: the u8 index wraps by itself
            uint8_t h = uart_tx_ring.head;
            n = (uint16_t)(n - k);
            do {
                tx_buf[h++] = *p++;
            } while (--k);
            CP_RING_BARRIER();
            uart_tx_ring.head = h;
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
