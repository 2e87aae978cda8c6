/*
 * Rig self-test program (not the logger): exercises what the rig models so the
 * rig can be tested on its own. Line commands at 2,000,000 baud:
 *   E text      -> "E text"                          UART echo
 *   B n         -> n bytes 0,1,2.. then "B n ticks"   TX throughput (Timer1 ticks at 2 MHz
 *                                                     from the first UDR write to TXC)
 *   R reg       -> "R reg value t_us"                INA226 register read (hex)
 *   W reg val   -> "W reg val"                       INA226 register write (hex)
 *   C n         -> n x "C t_us shunt bus"            wait for conversion ready (CVRF), read
 *   A n         -> n x "A t_us code"                  free-running ADC0, prescaler 128
 *   O n         -> "O n late"                        Timer1 compare A in normal mode at
 *                                                     TCNT1 + n: ticks from match to ISR
 *   X n         -> "X"                               interrupts off for ~n us (RX overrun)
 *   P           -> marker edges since last P: "P pins t_us" each, then "P end"
 * Marker inputs PD2..PD5 raise PCINT2; edges are timestamped with Timer1 at 2 MHz.
 */
#include <avr/interrupt.h>
#include <avr/io.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <util/twi.h>

#define INA 0x40

static volatile uint8_t txbuf[256];
static volatile uint8_t tx_head, tx_tail;
static volatile char rxline[96];
static volatile uint8_t rx_len, rx_ready;
static volatile uint16_t t1_hi;

static volatile uint32_t edge_t[32];
static volatile uint8_t edge_pins[32];
static volatile uint8_t edge_head, edge_tail;

static volatile uint16_t adc_code[64];
static volatile uint32_t adc_t[64];
static volatile uint8_t adc_n, adc_want;

ISR(TIMER1_OVF_vect) { t1_hi++; }

static volatile uint16_t compa_at;
static volatile uint8_t compa_hit;
ISR(TIMER1_COMPA_vect)
{
	compa_at = TCNT1;
	compa_hit = 1;
}

/* Timer1 ticks at 2 MHz; 32-bit tick count with the overflow race handled */
static uint32_t ticks(void)
{
	uint8_t s = SREG;
	cli();
	uint16_t lo = TCNT1;
	uint16_t hi = t1_hi;
	if ((TIFR1 & _BV(TOV1)) && lo < 0x8000)
		hi++;
	SREG = s;
	return ((uint32_t)hi << 16) | lo;
}

ISR(USART_UDRE_vect)
{
	if (tx_head == tx_tail) {
		UCSR0B &= (uint8_t)~_BV(UDRIE0);
		return;
	}
	UDR0 = txbuf[tx_tail++];
}

ISR(USART_RX_vect)
{
	char c = UDR0;
	if (rx_ready)
		return;
	if (c == '\n') {
		rxline[rx_len] = 0;
		rx_ready = 1;
	} else if (rx_len < sizeof(rxline) - 1) {
		rxline[rx_len++] = c;
	}
}

ISR(PCINT2_vect)
{
	uint32_t t = ticks();
	uint8_t pins = (PIND >> 2) & 0x0F;
	uint8_t h = edge_head;
	if ((uint8_t)(h + 1) % 32 != edge_tail) {
		edge_t[h] = t;
		edge_pins[h] = pins;
		edge_head = (uint8_t)(h + 1) % 32;
	}
}

ISR(ADC_vect)
{
	uint32_t t = ticks();
	uint16_t v = ADC;
	if (adc_n < adc_want) {
		adc_code[adc_n] = v;
		adc_t[adc_n] = t;
		adc_n++;
	}
}

static void putb(uint8_t b)
{
	uint8_t next = tx_head + 1;
	while (next == tx_tail)
		;
	txbuf[tx_head] = b;
	tx_head = next;
	UCSR0B |= _BV(UDRIE0);
}

static void puts_(const char *s)
{
	while (*s)
		putb((uint8_t)*s++);
}

static char out[64];

static uint8_t twi_wait(void)
{
	while (!(TWCR & _BV(TWINT)))
		;
	return TWSR & 0xF8;
}

static int twi_start(uint8_t sla)
{
	TWCR = _BV(TWINT) | _BV(TWSTA) | _BV(TWEN);
	uint8_t st = twi_wait();
	if (st != TW_START && st != TW_REP_START)
		return -1;
	TWDR = sla;
	TWCR = _BV(TWINT) | _BV(TWEN);
	st = twi_wait();
	return (st == TW_MT_SLA_ACK || st == TW_MR_SLA_ACK) ? 0 : -2;
}

static void twi_stop(void)
{
	TWCR = _BV(TWINT) | _BV(TWSTO) | _BV(TWEN);
	while (TWCR & _BV(TWSTO))
		;
}

static int twi_put(uint8_t b)
{
	TWDR = b;
	TWCR = _BV(TWINT) | _BV(TWEN);
	return twi_wait() == TW_MT_DATA_ACK ? 0 : -1;
}

static uint8_t twi_get(int ack)
{
	TWCR = _BV(TWINT) | _BV(TWEN) | (ack ? _BV(TWEA) : 0);
	twi_wait();
	return TWDR;
}

static int ina_read(uint8_t reg, uint16_t *v)
{
	if (twi_start(INA << 1) || twi_put(reg) || twi_start((INA << 1) | 1)) {
		twi_stop();
		return -1;
	}
	uint8_t hi = twi_get(1);
	uint8_t lo = twi_get(0);
	twi_stop();
	*v = (uint16_t)hi << 8 | lo;
	return 0;
}

static int ina_write(uint8_t reg, uint16_t v)
{
	int rc = twi_start(INA << 1) || twi_put(reg) || twi_put(v >> 8) || twi_put(v & 0xFF);
	twi_stop();
	return rc ? -1 : 0;
}

static void cmd(char *line)
{
	char *arg = line + 1;
	while (*arg == ' ')
		arg++;
	switch (line[0]) {
	case 'E':
		puts_(line);
		puts_("\n");
		break;
	case 'B': {	/* polled, so the line (not the CPU) sets the pace */
		uint16_t n = (uint16_t)strtoul(arg, NULL, 10);
		while (tx_head != tx_tail)
			;
		while (!(UCSR0A & _BV(TXC0)))
			;
		UCSR0A = _BV(TXC0) | _BV(U2X0);	/* clear TXC */
		uint32_t t0 = ticks();
		for (uint16_t i = 0; i < n; i++) {
			while (!(UCSR0A & _BV(UDRE0)))
				;
			UDR0 = (uint8_t)i;
		}
		while (!(UCSR0A & _BV(TXC0)))
			;
		uint32_t t1 = ticks();
		snprintf(out, sizeof(out), "B %u %lu\n", n, (unsigned long)(t1 - t0));
		puts_(out);
		break;
	}
	case 'R': {
		uint8_t reg = (uint8_t)strtoul(arg, NULL, 16);
		uint16_t v = 0;
		uint32_t t0 = ticks();
		int rc = ina_read(reg, &v);
		uint32_t t1 = ticks();
		if (rc)
			snprintf(out, sizeof(out), "R %02x nack\n", reg);
		else
			snprintf(out, sizeof(out), "R %02x %04x %lu %lu %lu\n", reg, v, (unsigned long)((t1 - t0) / 2), (unsigned long)t0, (unsigned long)t1);
		puts_(out);
		break;
	}
	case 'W': {
		char *end;
		uint8_t reg = (uint8_t)strtoul(arg, &end, 16);
		uint16_t v = (uint16_t)strtoul(end, NULL, 16);
		int rc = ina_write(reg, v);
		snprintf(out, sizeof(out), rc ? "W %02x nack\n" : "W %02x %04x\n", reg, v);
		puts_(out);
		break;
	}
	case 'C': {
		uint16_t n = (uint16_t)strtoul(arg, NULL, 10);
		for (uint16_t i = 0; i < n; i++) {
			uint16_t m = 0, sh = 0, bus = 0;
			do {
				if (ina_read(0x06, &m))
					break;
			} while (!(m & 0x0008));
			uint32_t t = ticks();
			ina_read(0x01, &sh);
			ina_read(0x02, &bus);
			snprintf(out, sizeof(out), "C %lu %d %u\n", (unsigned long)(t / 2), (int16_t)sh, bus);
			puts_(out);
		}
		break;
	}
	case 'A': {
		uint8_t n = (uint8_t)strtoul(arg, NULL, 10);
		if (n > 64)
			n = 64;
		adc_n = 0;
		adc_want = n;
		ADMUX = _BV(REFS0);	/* AVCC, ADC0 */
		ADCSRB = 0;			/* free running */
		ADCSRA = _BV(ADEN) | _BV(ADSC) | _BV(ADATE) | _BV(ADIE) | 7;
		while (adc_n < n)
			;
		ADCSRA = 0;
		for (uint8_t i = 0; i < n; i++) {
			snprintf(out, sizeof(out), "A %lu %u\n", (unsigned long)(adc_t[i] / 2), adc_code[i]);
			puts_(out);
		}
		break;
	}
	case 'Z': {	/* timer sanity: n readings of ticks() 100 us apart */
		uint8_t n = (uint8_t)strtoul(arg, NULL, 10);
		for (uint8_t i = 0; i < n; i++) {
			uint32_t t = ticks();
			snprintf(out, sizeof(out), "Z %lu %u %u\n", (unsigned long)t, t1_hi, TIFR1);
			puts_(out);
			for (volatile uint16_t k = 0; k < 200; k++)
				;
		}
		break;
	}
	case 'O': {	/* output compare in normal mode: OCR1A = now + n, report the ISR's TCNT1 */
		uint16_t n = (uint16_t)strtoul(arg, NULL, 10);
		compa_hit = 0;
		cli();
		uint16_t target = (uint16_t)(TCNT1 + n);
		OCR1A = target;
		TIFR1 = _BV(OCF1A);
		TIMSK1 |= _BV(OCIE1A);
		sei();
		while (!compa_hit)
			;
		TIMSK1 &= (uint8_t)~_BV(OCIE1A);
		snprintf(out, sizeof(out), "O %u %u\n", n, (uint16_t)(compa_at - target));
		puts_(out);
		break;
	}
	case 'K':	/* Timer1 as Arduino's init() leaves it, then back to normal mode */
		TCCR1B = _BV(CS11) | _BV(CS10);
		TCCR1A = _BV(WGM10);
		TCCR1A = 0;
		TCCR1B = 0;
		TCCR1C = 0;
		TCNT1 = 0;
		t1_hi = 0;
		TIFR1 = 0xFF;
		TIMSK1 = _BV(TOIE1);
		TCCR1B = _BV(CS11);
		puts_("K\n");
		break;
	case 'Q': {	/* write OCR1A every ~50 us for n ms; report the ticks that passed */
		uint16_t n = (uint16_t)strtoul(arg, NULL, 10);
		uint32_t t0 = ticks();
		for (uint32_t k = 0; k < (uint32_t)n * 20u; k++) {
			OCR1A = (uint16_t)(TCNT1 + 700);
			for (volatile uint8_t d = 0; d < 60; d++)
				;
		}
		uint32_t t1 = ticks();
		snprintf(out, sizeof(out), "Q %u %lu %lu\n", n, (unsigned long)t0, (unsigned long)t1);
		puts_(out);
		break;
	}
	case 'X': {	/* interrupts off for about n us: received bytes pile up */
		uint16_t n = (uint16_t)strtoul(arg, NULL, 10);
		cli();
		for (uint16_t k = 0; k < n; k++)
			for (volatile uint8_t d = 0; d < 2; d++)
				;
		sei();
		puts_("X\n");
		break;
	}
	case 'P':
		while (edge_tail != edge_head) {
			uint8_t k = edge_tail;
			snprintf(out, sizeof(out), "P %u %lu\n", edge_pins[k], (unsigned long)(edge_t[k] / 2));
			edge_tail = (uint8_t)(k + 1) % 32;
			puts_(out);
		}
		puts_("P end\n");
		break;
	default:
		puts_("? ");
		puts_(line);
		puts_("\n");
	}
}

int main(void)
{
	/* Timer1: normal mode, clk/8 = 2 MHz */
	TCCR1A = 0;
	TCCR1B = _BV(CS11);
	TIMSK1 = _BV(TOIE1);
	/* UART0 2,000,000 baud 8N1 */
	UCSR0A = _BV(U2X0);
	UBRR0 = 0;
	UCSR0C = _BV(UCSZ01) | _BV(UCSZ00);
	UCSR0B = _BV(RXEN0) | _BV(TXEN0) | _BV(RXCIE0);
	/* TWI 400 kHz */
	TWSR = 0;
	TWBR = 12;
	/* markers PD2..PD5: inputs, pin-change interrupt */
	DDRD &= (uint8_t)~0x3C;
	PCMSK2 = 0x3C;
	PCICR = _BV(PCIE2);
	sei();
	puts_("READY testprog\n");
	for (;;) {
		if (rx_ready) {
			char line[96];
			strcpy(line, (const char *)rxline);
			rx_len = 0;
			rx_ready = 0;
			cmd(line);
		}
	}
}
