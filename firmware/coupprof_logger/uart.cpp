#include "uart.h"

#include <avr/interrupt.h>
#include <avr/io.h>
#include <util/atomic.h>

#include "cp_ring.h"
#include "ram_layout.h"

volatile uint8_t uart_tx_head; // next slot to fill (main loop); the tail is r2
volatile uint8_t uart_tx_held;
volatile uint16_t uart_rx_overruns;
// Receive ring: ram.rx_buf (64 bytes, 64-byte aligned); the indices are the
// low address bytes of the next slot to write (head, the handler) and to read
// (tail, main loop). 63 usable slots.
extern "C" {
volatile uint8_t rx_head, rx_tail;
}
#define RX_LO ((uint8_t)(uintptr_t)ram.rx_buf)

void uart_init(void)
{
    rx_head = rx_tail = RX_LO;
    uart_tx_head = 0;
    __asm__ __volatile__("clr r2"); // tail
    UCSR0B = 0;
    UCSR0A = _BV(U2X0);
    UBRR0 = 0; // F_CPU / (8 * (UBRR + 1)) = 2,000,000 baud exactly at 16 MHz
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00); // 8N1
    UCSR0B = _BV(RXEN0) | _BV(TXEN0) | _BV(RXCIE0);
}

// Bytes of a command arrive every 5 us: at the compiler's 78 cycles this
// handler took almost the whole CPU while the host talked. By hand: 45.
ISR(USART_RX_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "push r24\n\t"
        "in r24, __SREG__\n\t"
        "push r24\n\t"
        "push r30\n\t"
        "push r31\n\t"
        "lds r24, %[udr]\n\t" /* reading UDR0 clears RXC0 */
        "lds r30, rx_head\n\t"
        "ldi r31, hi8(%[buf])\n\t"
        "st Z, r24\n\t" /* the slot at head is free even when the ring is full */
        "subi r30, lo8(-1)\n\t"
        "andi r30, 0x3f\n\t"
        "ori r30, lo8(%[buf])\n\t"
        "lds r24, rx_tail\n\t"
        "cp r30, r24\n\t"
        "breq 1f\n\t"
        "sts rx_head, r30\n\t"
        "rjmp 2f\n"
        "1:\n\t" /* full: the byte is lost */
        "lds r24, %[ov]\n\t"
        "subi r24, 0xff\n\t"
        "sts %[ov], r24\n\t"
        "lds r24, %[ov]+1\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[ov]+1, r24\n"
        "2:\n\t"
        "pop r31\n\t"
        "pop r30\n\t"
        "pop r24\n\t"
        "out __SREG__, r24\n\t"
        "pop r24\n\t"
        "reti\n\t"
        :
        : [udr] "i"(_SFR_MEM_ADDR(UDR0)), [buf] "i"(ram.rx_buf), [ov] "i"(&uart_rx_overruns));
}

// Runs for every byte sent (every 5 us while a frame goes out): 26 cycles
// with entry and exit, interrupts off throughout (a marker edge waits at most
// that long). Sends tx_buf[tail], and switches itself off once the ring is
// empty, so a burst costs no extra interrupt at its end.
ISR(USART_UDRE_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "in r3, __SREG__\n\t"
        "movw r4, r30\n\t"
        "mov r30, r2\n\t"
        "ldi r31, hi8(%[buf])\n\t" /* Z = tx_buf + tail (tx_buf 256-aligned) */
        "ld r31, Z\n\t"
        "sts %[udr], r31\n\t"
        "inc r2\n\t"               /* the slot is free again */
        "lds r31, %[head]\n\t"
        "cp r2, r31\n\t"
        "breq 1f\n\t"
        "movw r30, r4\n\t"
        "out __SREG__, r3\n\t"
        "reti\n"
        "1:\n\t"                   /* empty: stop until the main loop queues more */
        "lds r31, %[ucsrb]\n\t"
        "andi r31, %[no_udrie]\n\t"
        "sts %[ucsrb], r31\n\t"
        "movw r30, r4\n\t"
        "out __SREG__, r3\n\t"
        "reti\n\t"
        :
        : [head] "i"(&uart_tx_head), [buf] "i"(ram.tx_buf), [udr] "i"(_SFR_MEM_ADDR(UDR0)),
          [ucsrb] "i"(_SFR_MEM_ADDR(UCSR0B)), [no_udrie] "n"(0xFF & ~_BV(UDRIE0)));
}

uint16_t uart_tx_free(void)
{
    // 255 usable slots: head == tail means empty
    return (uint8_t)(fixed_tx_tail() - uart_tx_head - 1u);
}

void uart_send(const uint8_t *p, uint16_t n)
{
    while (n) {
        uint8_t h = uart_tx_head;
        uint8_t room = (uint8_t)(fixed_tx_tail() - h - 1u);
        uint8_t k = n < room ? (uint8_t)n : room;
        if (k) {
            // k bytes to tx_buf[h...]: Z steps through its low byte only, so
            // the index wraps with the 256-byte ring (8 cycles a byte)
            uint8_t *z = ram.tx_buf + h;
            n = (uint16_t)(n - k);
            __asm__ __volatile__(
                "1:\n\t"
                "ld __tmp_reg__, X+\n\t"
                "st Z, __tmp_reg__\n\t"
                "inc r30\n\t"
                "dec %[k]\n\t"
                "brne 1b\n\t"
                : [k] "+r"(k), "+x"(p), "+z"(z)
                :
                : "memory");
            CP_RING_BARRIER();
            uart_tx_head = (uint8_t)(uintptr_t)z;
            ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
            {
                // the handler may have sent it all already and switched
                // itself off: enabling it on an empty ring would send garbage
                if (!uart_tx_held && uart_tx_head != fixed_tx_tail()) {
                    UCSR0B |= _BV(UDRIE0);
                }
            }
        }
    }
}

// The CRC tables (core/cp_crc16.c), each 256-byte aligned in flash.
extern "C" const uint8_t cp_crc16_hi[], cp_crc16_lo[];

void uart_send_crc(const uint8_t *frame, uint8_t len)
{
    uint8_t h = uart_tx_head;
    uint8_t *buf = ram.tx_buf;
    uint8_t *dst;
    uint16_t crc = 0xFFFF;
    uint8_t n = (uint8_t)(len - 2u), tmp;
    const uint8_t *src = frame + 2;
    buf[h] = frame[0]; // sync: not in the CRC
    h++;
    buf[h] = frame[1];
    h++;
    dst = buf + h;
    // 19 cycles a byte: copy to the ring (Y steps through its low byte only,
    // so the index wraps with the ring) and CRC through the split tables
    __asm__ __volatile__(
        "movw r28, %[dst]\n\t"
        "1:\n\t"
        "ld %[tmp], X+\n\t"
        "st Y, %[tmp]\n\t"
        "inc r28\n\t"
        "eor %[tmp], %B[crc]\n\t" /* index = crc_hi ^ byte */
        "mov r30, %[tmp]\n\t"
        "ldi r31, hi8(%[thi])\n\t"
        "lpm %B[crc], Z\n\t"
        "eor %B[crc], %A[crc]\n\t"
        "ldi r31, hi8(%[tlo])\n\t"
        "lpm %A[crc], Z\n\t"
        "dec %[n]\n\t"
        "brne 1b\n\t"
        "st Y, %A[crc]\n\t" /* the CRC, low byte first */
        "inc r28\n\t"
        "st Y, %B[crc]\n\t"
        "inc r28\n\t"
        "mov %[h], r28\n\t"
        : [crc] "+r"(crc), [n] "+r"(n), "+x"(src), [tmp] "=&r"(tmp), [h] "=r"(h)
        : [dst] "r"(dst), [thi] "i"(cp_crc16_hi), [tlo] "i"(cp_crc16_lo)
        : "r28", "r29", "r30", "r31", "memory");
    CP_RING_BARRIER();
    uart_tx_head = h;
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        if (!uart_tx_held && uart_tx_head != fixed_tx_tail()) {
            UCSR0B |= _BV(UDRIE0);
        }
    }
}

int uart_rx(uint8_t *b)
{
    uint8_t t = rx_tail;
    if (t == rx_head) {
        return 0;
    }
    CP_RING_BARRIER();
    *b = ram.rx_buf[(uint8_t)(t - RX_LO)];
    CP_RING_BARRIER();
    rx_tail = (uint8_t)((uint8_t)((uint8_t)(t + 1u) & 0x3Fu) | RX_LO);
    return 1;
}
