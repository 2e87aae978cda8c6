#define _GNU_SOURCE
#include "control.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct ctl_event_t {
	uint64_t cycle;
	uint64_t order;	/* keeps equal-time events in arrival order */
	char *cmd;
	const char *source;
} ctl_event_t;

static struct {
	rig_t *rig;
	uart_bridge_t *uart;
	ctl_event_t *ev;
	size_t n, cap;
	uint64_t order;
	int armed;
	int quit;
} C;

static avr_cycle_count_t event_timer(avr_t *avr, avr_cycle_count_t when, void *param);

static void arm(void)
{
	avr_t *avr = C.rig->avr;
	if (C.armed)
		avr_cycle_timer_cancel(avr, event_timer, NULL);
	C.armed = 0;
	if (!C.n)
		return;
	uint64_t at = C.ev[0].cycle;
	avr_cycle_timer_register(avr, at > avr->cycle ? at - avr->cycle : 1, event_timer, NULL);
	C.armed = 1;
}

static int ev_cmp(const void *a, const void *b)
{
	const ctl_event_t *x = a, *y = b;
	if (x->cycle != y->cycle)
		return x->cycle < y->cycle ? -1 : 1;
	return x->order < y->order ? -1 : (x->order > y->order);
}

static void schedule(uint64_t cycle, const char *cmd, const char *source, int rearm)
{
	if (C.n == C.cap) {
		C.cap = C.cap ? C.cap * 2 : 256;
		C.ev = realloc(C.ev, C.cap * sizeof(*C.ev));
	}
	/* insertion keeps the queue sorted; scripts arrive sorted, so this is cheap */
	size_t i = C.n;
	ctl_event_t e = { cycle, C.order++, strdup(cmd), source };
	while (i > 0 && ev_cmp(&C.ev[i - 1], &e) > 0) {
		C.ev[i] = C.ev[i - 1];
		i--;
	}
	C.ev[i] = e;
	C.n++;
	if (rearm && i == 0)
		arm();
}

static avr_cycle_count_t event_timer(avr_t *avr, avr_cycle_count_t when, void *param)
{
	(void)param;
	size_t k = 0;
	while (k < C.n && C.ev[k].cycle <= when) {
		control_exec(C.ev[k].cmd, C.ev[k].source, NULL, 0);
		free(C.ev[k].cmd);
		k++;
	}
	memmove(C.ev, C.ev + k, (C.n - k) * sizeof(*C.ev));
	C.n -= k;
	if (!C.n) {
		C.armed = 0;
		return 0;
	}
	(void)avr;
	return C.ev[0].cycle > when ? C.ev[0].cycle : when + 1;
}

void control_init(rig_t *rig, uart_bridge_t *uart)
{
	memset(&C, 0, sizeof(C));
	C.rig = rig;
	C.uart = uart;
}

int control_quit_requested(void)
{
	return C.quit;
}

static int parse_u(const char *s, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 0);
	if (errno || end == s || *end)
		return -1;
	*out = v;
	return 0;
}

static void reply_ok(char *reply, size_t rlen)
{
	if (reply)
		snprintf(reply, rlen, "ok %.4f", rig_cycles_to_us(C.rig, C.rig->avr->cycle));
}

/* Errors go back to the asking host, or to stderr/log for FIFO and script commands. */
static int __attribute__((format(printf, 4, 5)))
fail(char *reply, size_t rlen, const char *source, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (reply)
		snprintf(reply, rlen, "err %s", msg);
	else
		rig_warn(C.rig, "%s command: %s", source, msg);
	return CTL_ERR;
}

int control_exec(const char *line, const char *source, char *reply, size_t rlen)
{
	rig_t *r = C.rig;
	char buf[8192];
	snprintf(buf, sizeof(buf), "%s", line);
	char *save = NULL;
	char *cmd = strtok_r(buf, " \t\r\n", &save);
	if (!cmd || cmd[0] == '#') {
		if (reply)
			reply[0] = 0;
		return CTL_OK;
	}
#define FAIL(...) return fail(reply, rlen, source, __VA_ARGS__)

	if (!strcmp(cmd, "pin")) {
		char *k = strtok_r(NULL, " \t\r\n", &save);
		char *l = strtok_r(NULL, " \t\r\n", &save);
		unsigned long kk, ll;
		if (!k || !l || parse_u(k, &kk) || parse_u(l, &ll) || ll > 1)
			FAIL("usage: pin K L (L is 0 or 1)");
		if (kk >= (unsigned long)r->marker_count)
			FAIL("marker %lu does not exist (the rig drives %d)", kk, r->marker_count);
		uint8_t s = r->marker_state;
		s = ll ? (uint8_t)(s | (1u << kk)) : (uint8_t)(s & ~(1u << kk));
		rig_set_markers(r, s, r->avr->cycle, source);
		reply_ok(reply, rlen);
		return CTL_OK;
	}
	if (!strcmp(cmd, "pins")) {
		char *m = strtok_r(NULL, " \t\r\n", &save);
		unsigned long mm;
		if (!m || parse_u(m, &mm) || mm >= (1ul << r->marker_count))
			FAIL("usage: pins MASK (0..%d)", (1 << r->marker_count) - 1);
		rig_set_markers(r, (uint8_t)mm, r->avr->cycle, source);
		reply_ok(reply, rlen);
		return CTL_OK;
	}
	if (!strcmp(cmd, "send")) {
		uint8_t bytes[4096];
		size_t n = 0;
		for (char *h = strtok_r(NULL, " \t\r\n", &save); h; h = strtok_r(NULL, " \t\r\n", &save)) {
			size_t len = strlen(h);
			if (len % 2)
				FAIL("send: odd number of hex digits");
			for (size_t i = 0; i < len; i += 2) {
				if (!isxdigit((unsigned char)h[i]) || !isxdigit((unsigned char)h[i + 1]))
					FAIL("send: not hex: %s", h);
				if (n == sizeof(bytes))
					FAIL("send: more than %zu bytes", sizeof(bytes));
				char two[3] = { h[i], h[i + 1], 0 };
				bytes[n++] = (uint8_t)strtoul(two, NULL, 16);
			}
		}
		if (!C.uart)
			FAIL("send: no UART");
		uart_bridge_send(C.uart, bytes, n);
		reply_ok(reply, rlen);
		return CTL_OK;
	}
	if (!strcmp(cmd, "at")) {
		char *t = strtok_r(NULL, " \t\r\n", &save);
		char *rest = t ? strtok_r(NULL, "\r\n", &save) : NULL;
		char *end;
		double t_us = t ? strtod(t, &end) : -1;
		if (!t || *end || t_us < 0 || !rest)
			FAIL("usage: at T_US COMMAND");
		uint64_t cyc = (uint64_t)(t_us * r->freq_hz / 1e6 + 0.5);
		if (cyc <= r->avr->cycle)
			return control_exec(rest, source, reply, rlen);
		schedule(cyc, rest, source, 1);
		reply_ok(reply, rlen);
		return CTL_OK;
	}
	if (!strcmp(cmd, "time")) {
		reply_ok(reply, rlen);
		return CTL_OK;
	}
	if (!strcmp(cmd, "sync")) {
		if (r->log)
			fflush(r->log);
		reply_ok(reply, rlen);
		return CTL_OK;
	}
	if (!strcmp(cmd, "quit")) {
		C.quit = 1;
		reply_ok(reply, rlen);
		return CTL_QUIT;
	}
	FAIL("unknown command '%s' (pin, pins, send, at, time, sync, quit)", cmd);
#undef FAIL
}

int control_load_script(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	char line[8192];
	int lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		if (!*s || *s == '#')
			continue;
		if (!strncmp(s, "at ", 3))
			s += 3;
		char *end;
		double t_us = strtod(s, &end);
		if (end == s || t_us < 0 || !isspace((unsigned char)*end)) {
			snprintf(err, errlen, "%s:%d: want 'T_US COMMAND'", path, lineno);
			fclose(f);
			return -1;
		}
		while (isspace((unsigned char)*end))
			end++;
		end[strcspn(end, "\r\n")] = 0;
		uint64_t cyc = (uint64_t)(t_us * C.rig->freq_hz / 1e6 + 0.5);
		schedule(cyc, end, "script", 0);
	}
	fclose(f);
	arm();
	return 0;
}

int control_feed(ctl_reader_t *rd, const char *data, size_t len)
{
	int rc = CTL_OK;
	for (size_t i = 0; i < len; i++) {
		char c = data[i];
		if (c != '\n') {
			if (rd->len < sizeof(rd->buf) - 1)
				rd->buf[rd->len++] = c;
			continue;
		}
		rd->buf[rd->len] = 0;
		rd->len = 0;
		char reply[512] = "";
		int r = control_exec(rd->buf, rd->source, rd->reply_fd >= 0 ? reply : NULL, sizeof(reply));
		if (rd->reply_fd >= 0 && reply[0]) {
			size_t n = strlen(reply);
			reply[n++] = '\n';
			ssize_t w = write(rd->reply_fd, reply, n);
			(void)w;
		}
		if (r == CTL_QUIT)
			rc = CTL_QUIT;
	}
	return rc;
}
