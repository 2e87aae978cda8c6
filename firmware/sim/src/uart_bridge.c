#define _GNU_SOURCE
#include "uart_bridge.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "avr_uart.h"
#include "sim_io.h"

DEFINE_FIFO(uint16_t, uart_fifo);

/* Keep at most this much device output for a reader that does not read;
 * past it bytes are dropped and counted, as a USB-serial chip would. */
#define OUT_CAP (64u << 20)

struct uart_bridge_t {
	rig_t *rig;
	avr_uart_t *u;
	int master, slave;
	char pty_path[128];
	FILE *out_file;

	/* transmitter: UDR and shift register */
	int shifting, udr_full;
	uint8_t shift_byte, udr_byte;
	uint64_t tx_bytes, tx_overruns;
	avr_io_write_t orig_ucsrb;
	void *orig_ucsrb_param;

	/* host -> device */
	uint8_t *rxq;
	size_t rx_head, rx_len, rx_cap;
	int rx_pump, rx_inflight;
	uint64_t rx_bytes, rx_dropped_disabled, rx_would_overrun;

	/* device -> host */
	uint8_t *out;
	size_t out_head, out_len, out_cap;
	uint64_t out_dropped;
};

/* Cycles per frame from UBRR0, U2X0, UCSZ0, UPM0 and USBS0. */
static uint64_t cycles_per_byte(uart_bridge_t *b)
{
	avr_t *avr = b->rig->avr;
	avr_uart_t *u = b->u;
	uint32_t ubrr = avr_regbit_get(avr, u->ubrrl) | (avr_regbit_get(avr, u->ubrrh) << 8);
	uint32_t per_bit = (ubrr + 1) * (avr_regbit_get(avr, u->u2x) ? 8u : 16u);
	static const int databits[] = { 5, 6, 7, 8, 8, 8, 8, 9 };
	int db = databits[avr_regbit_get(avr, u->ucsz) | (avr_regbit_get(avr, u->ucsz2) << 2)];
	int parity = (avr->data[u->r_ucsrc] >> 4) & 3 ? 1 : 0;	/* UPM01:0 */
	int stop = 1 + avr_regbit_get(avr, u->usbs);
	uint64_t c = (uint64_t)per_bit * (uint64_t)(1 + db + parity + stop);
	u->cycles_per_byte = c;	/* simavr's receiver paces with this too */
	return c;
}

static void emit(uart_bridge_t *b, uint8_t byte)
{
	b->tx_bytes++;
	if (b->out_file)
		fputc(byte, b->out_file);
	if (b->master < 0)
		return;
	if (b->out_len >= OUT_CAP) {
		b->out_dropped++;
		return;
	}
	if (b->out_head + b->out_len == b->out_cap) {
		if (b->out_head > b->out_cap / 2) {
			memmove(b->out, b->out + b->out_head, b->out_len);
			b->out_head = 0;
		} else {
			b->out_cap = b->out_cap ? b->out_cap * 2 : 65536;
			b->out = realloc(b->out, b->out_cap);
		}
	}
	b->out[b->out_head + b->out_len++] = byte;
}

static void udre_set(uart_bridge_t *b)
{
	avr_raise_interrupt(b->rig->avr, &b->u->udrc);
}

static void udre_clear(uart_bridge_t *b)
{
	avr_t *avr = b->rig->avr;
	avr_clear_interrupt(avr, &b->u->udrc);
	avr_regbit_clear(avr, b->u->udrc.raised);	/* UDRE is a sticky vector */
}

static avr_cycle_count_t shift_done(avr_t *avr, avr_cycle_count_t when, void *param)
{
	uart_bridge_t *b = param;
	emit(b, b->shift_byte);
	if (b->udr_full) {
		b->udr_full = 0;
		b->shift_byte = b->udr_byte;
		udre_set(b);
		return when + cycles_per_byte(b);
	}
	b->shifting = 0;
	avr_raise_interrupt(avr, &b->u->txc);
	return 0;
}

static void udr_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param)
{
	uart_bridge_t *b = param;
	(void)addr;
	if (!avr_regbit_get(avr, b->u->txen))
		return;
	if (!b->shifting) {
		/* straight into the shift register: UDR stays empty */
		b->shifting = 1;
		b->shift_byte = v;
		avr_cycle_timer_register(avr, cycles_per_byte(b), shift_done, b);
		udre_set(b);
	} else if (!b->udr_full) {
		b->udr_full = 1;
		b->udr_byte = v;
		udre_clear(b);
	} else {
		/* written while UDRE was clear: the byte in UDR is overwritten */
		b->tx_overruns++;
		b->udr_byte = v;
	}
}

/* simavr raises UDRE whenever UDRIE goes on; keep it true to our UDR state. */
static void ucsrb_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param)
{
	uart_bridge_t *b = param;
	b->orig_ucsrb(avr, addr, v, b->orig_ucsrb_param);
	if (!avr_regbit_get(avr, b->u->txen))
		return;
	if (b->udr_full)
		udre_clear(b);
	else
		udre_set(b);
}

/*
 * One frame time per byte. A byte is put into simavr's receive FIFO when its start
 * bit begins (simavr raises RXC one frame later); the pump's next step is that
 * byte's stop bit, where the chip would declare a data overrun if its 2-byte
 * receive buffer were still full. simavr's 64-byte FIFO hides that, so the rig
 * counts it (and delivers the byte anyway).
 */
static avr_cycle_count_t rx_pump(avr_t *avr, avr_cycle_count_t when, void *param)
{
	uart_bridge_t *b = param;
	avr_uart_t *u = b->u;
	if (b->rx_inflight) {
		b->rx_inflight = 0;
		/* unread: the byte just completed plus the two before it */
		if (uart_fifo_get_read_size(&u->input) >= 3 && !b->rx_would_overrun++)
			rig_warn(b->rig, "the firmware left 2 received bytes unread when a third "
					"arrived: a real ATmega328P would have lost it (data overrun)");
	}
	if (!b->rx_len) {
		b->rx_head = 0;
		b->rx_pump = 0;
		return 0;
	}
	if (!avr_regbit_get(avr, u->rxen)) {
		/* receiver off: the byte on the line is lost, as on the chip */
		b->rx_dropped_disabled++;
	} else if (uart_fifo_isfull(&u->input)) {
		return when + cycles_per_byte(b);	/* hold the line until there is room */
	} else {
		avr_raise_irq(u->io.irq + UART_IRQ_INPUT, b->rxq[b->rx_head]);
		b->rx_bytes++;
		b->rx_inflight = 1;
	}
	b->rx_head++;
	b->rx_len--;
	return when + cycles_per_byte(b);
}

void uart_bridge_send(uart_bridge_t *b, const uint8_t *data, size_t len)
{
	if (!len)
		return;
	if (b->rx_head + b->rx_len + len > b->rx_cap) {
		memmove(b->rxq, b->rxq + b->rx_head, b->rx_len);
		b->rx_head = 0;
		while (b->rx_len + len > b->rx_cap)
			b->rx_cap = b->rx_cap ? b->rx_cap * 2 : 4096;
		b->rxq = realloc(b->rxq, b->rx_cap);
	}
	memcpy(b->rxq + b->rx_head + b->rx_len, data, len);
	b->rx_len += len;
	if (!b->rx_pump) {
		/* simavr's receiver adds the first frame time itself */
		b->rx_pump = 1;
		avr_cycle_timer_register(b->rig->avr, 1, rx_pump, b);
	}
}

void uart_bridge_poll_host(uart_bridge_t *b)
{
	if (b->master < 0)
		return;
	uint8_t buf[4096];
	for (;;) {
		ssize_t n = read(b->master, buf, sizeof(buf));
		if (n <= 0)
			break;
		uart_bridge_send(b, buf, (size_t)n);
	}
}

void uart_bridge_flush(uart_bridge_t *b, int timeout_ms)
{
	if (b->out_file)
		fflush(b->out_file);
	if (b->master < 0)
		return;
	while (b->out_len) {
		ssize_t n = write(b->master, b->out + b->out_head, b->out_len);
		if (n > 0) {
			b->out_head += (size_t)n;
			b->out_len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			break;
		if (timeout_ms <= 0)
			break;
		struct pollfd pfd = { .fd = b->master, .events = POLLOUT };
		if (poll(&pfd, 1, timeout_ms) <= 0)
			break;
	}
	if (!b->out_len)
		b->out_head = 0;
}

size_t uart_bridge_pending(const uart_bridge_t *b)
{
	return b->out_len;
}

const char *uart_bridge_pty_path(const uart_bridge_t *b)
{
	return b->master >= 0 ? b->pty_path : NULL;
}

int uart_bridge_master_fd(const uart_bridge_t *b)
{
	return b->master;
}

void uart_bridge_stats(const uart_bridge_t *b, FILE *f)
{
	fprintf(f, "uart tx_bytes %llu rx_bytes %llu tx_overruns %llu rx_dropped_receiver_off %llu "
			"rx_would_overrun %llu host_dropped %llu\n",
			(unsigned long long)b->tx_bytes, (unsigned long long)b->rx_bytes,
			(unsigned long long)b->tx_overruns, (unsigned long long)b->rx_dropped_disabled,
			(unsigned long long)b->rx_would_overrun, (unsigned long long)b->out_dropped);
}

static int open_pty(uart_bridge_t *b)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	if (m < 0 || grantpt(m) || unlockpt(m))
		return -1;
	const char *name = ptsname(m);
	if (!name)
		return -1;
	snprintf(b->pty_path, sizeof(b->pty_path), "%s", name);
	/* keep the slave open ourselves: no EIO when the host closes and reopens,
	 * and raw mode from the start so the line discipline never echoes */
	int s = open(name, O_RDWR | O_NOCTTY);
	if (s < 0)
		return -1;
	struct termios tio;
	tcgetattr(s, &tio);
	cfmakeraw(&tio);
	tcsetattr(s, TCSANOW, &tio);
	fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	b->master = m;
	b->slave = s;
	return 0;
}

uart_bridge_t *uart_bridge_attach(rig_t *rig, int pty, FILE *out_file)
{
	avr_t *avr = rig->avr;
	uart_bridge_t *b = calloc(1, sizeof(*b));
	b->rig = rig;
	b->master = b->slave = -1;
	b->out_file = out_file;
	for (avr_io_t *io = avr->io_port; io; io = io->next)
		if (!strcmp(io->kind, "uart") && ((avr_uart_t *)io)->name == '0')
			b->u = (avr_uart_t *)io;
	if (!b->u) {
		free(b);
		return NULL;
	}
	/* no console echo, no usleep() when the firmware polls UCSR0A */
	uint32_t flags = 0;
	avr_ioctl(avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);

	avr_io_addr_t a = AVR_DATA_TO_IO(b->u->r_udr);
	avr->io[a].w.c = udr_write;
	avr->io[a].w.param = b;
	a = AVR_DATA_TO_IO(b->u->udrc.enable.reg);
	b->orig_ucsrb = avr->io[a].w.c;
	b->orig_ucsrb_param = avr->io[a].w.param;
	avr->io[a].w.c = ucsrb_write;
	avr->io[a].w.param = b;

	if (pty && open_pty(b) < 0) {
		free(b);
		return NULL;
	}
	return b;
}
