/*
 * coupprof_rig: the logger firmware on a simulated ATmega328P.
 * See firmware/sim/README.md for usage, the waveform and log formats.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "avr_adc.h"
#include "avr_extint.h"
#include "avr_ioport.h"
#include "sim_avr.h"
#include "sim_elf.h"
#include "sim_io.h"

#include "control.h"
#include "ina226.h"
#include "rig.h"
#include "uart_bridge.h"
#include "waveform.h"

rig_t g_rig;

/* ---- logging --------------------------------------------------------- */

void rig_log(rig_t *r, const char *fmt, ...)
{
	if (!r->log)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(r->log, fmt, ap);
	va_end(ap);
}

void rig_warn(rig_t *r, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	double t_us = r->avr ? rig_cycles_to_us(r, r->avr->cycle) : 0;
	fprintf(stderr, "coupprof_rig: %s\n", msg);
	rig_log(r, "note %.4f %s\n", t_us, msg);
}

/* simavr messages, each distinct one at most 3 times (some come on every register
 * write, e.g. 1.6's "mode 0 UNSUPPORTED" on OCR1x writes in normal mode, which it
 * then handles correctly); the rest are counted and summarised at exit */
#define LOG_KINDS 32
static struct { const char *fmt; uint64_t n; } log_seen[LOG_KINDS];

static void simavr_logger(avr_t *avr, const int level, const char *fmt, va_list ap)
{
	if (avr && level > avr->log)
		return;
	if (!avr && level > LOG_WARNING)
		return;
	int k;
	for (k = 0; k < LOG_KINDS && log_seen[k].fmt && log_seen[k].fmt != fmt; k++)
		;
	if (k < LOG_KINDS) {
		log_seen[k].fmt = fmt;
		if (++log_seen[k].n > 3)
			return;
	}
	fputs("simavr: ", stderr);
	vfprintf(stderr, fmt, ap);
}

static void simavr_log_summary(void)
{
	for (int k = 0; k < LOG_KINDS && log_seen[k].fmt; k++)
		if (log_seen[k].n > 3)
			fprintf(stderr, "simavr: (%llu more of: %s", (unsigned long long)(log_seen[k].n - 3),
					log_seen[k].fmt);
}

/* ---- ground truth ---------------------------------------------------- */

void rig_integrate_to(rig_t *r, double t_s)
{
	if (t_s <= r->integ.t_s)
		return;
	waveform_integrate(&r->wave, r->integ.t_s, t_s, r->marker_state,
			&r->integ.q_c, &r->integ.e_j, &r->integ.vt_vs);
	r->integ.t_s = t_s;
}

void rig_integral_peek(const rig_t *r, double t_s, rig_integral_t *out)
{
	*out = r->integ;
	if (t_s > r->integ.t_s) {
		waveform_integrate(&r->wave, r->integ.t_s, t_s, r->marker_state,
				&out->q_c, &out->e_j, &out->vt_vs);
		out->t_s = t_s;
	}
}

void rig_eval(const rig_t *r, double t_s, double *current_a, double *bus_v)
{
	waveform_eval(&r->wave, t_s, current_a, bus_v);
	*current_a += r->wave.state_a[r->marker_state & 15];
}

void rig_set_markers(rig_t *r, uint8_t state, uint64_t when, const char *source)
{
	double t = rig_cycles_to_s(r, when);
	rig_integrate_to(r, t);
	uint8_t changed = state ^ r->marker_state;
	r->marker_state = state;
	for (int k = 0; k < r->marker_count; k++)
		if (changed & (1u << k))
			avr_raise_irq(r->marker_irq[k], (state >> k) & 1);
	r->pin_changes++;
	rig_log(r, "pins %.4f %u %.12g %.12g %s\n", t * 1e6, state, r->integ.q_c, r->integ.e_j,
			source);
}

static avr_cycle_count_t gt_tick(avr_t *avr, avr_cycle_count_t when, void *param)
{
	rig_t *r = param;
	double t = rig_cycles_to_s(r, when);
	rig_integrate_to(r, t);
	double i, v;
	rig_eval(r, t, &i, &v);
	rig_log(r, "gt %.4f %u %.9g %.9g %.12g %.12g\n", t * 1e6, r->marker_state, i, v,
			r->integ.q_c, r->integ.e_j);
	(void)avr;
	return when + r->gt_period_cycles;
}

/* Bounds how far a sleeping CPU jumps ahead, so host input is applied promptly. */
static avr_cycle_count_t pacer_tick(avr_t *avr, avr_cycle_count_t when, void *param)
{
	(void)avr;
	return when + (uint64_t)(uintptr_t)param;
}

/* ---- interrupt statistics (--isr-stats): where the firmware's CPU time goes -- */

#define ISR_NEST_MAX 16
static struct {
	uint64_t count, total, max;
	uint64_t entry[ISR_NEST_MAX];
	int depth;
	uint64_t max_depth;
} isr_stat[64];

static void isr_running_hook(avr_irq_t *irq, uint32_t value, void *param)
{
	rig_t *r = &g_rig;
	int v = (int)(uintptr_t)param;
	(void)irq;
	if (value) {
		if (isr_stat[v].depth < ISR_NEST_MAX)
			isr_stat[v].entry[isr_stat[v].depth] = r->avr->cycle;
		isr_stat[v].depth++;
		if ((uint64_t)isr_stat[v].depth > isr_stat[v].max_depth)
			isr_stat[v].max_depth = (uint64_t)isr_stat[v].depth;
	} else if (isr_stat[v].depth > 0) {
		isr_stat[v].depth--;
		if (isr_stat[v].depth < ISR_NEST_MAX) {
			uint64_t d = r->avr->cycle - isr_stat[v].entry[isr_stat[v].depth];
			isr_stat[v].count++;
			isr_stat[v].total += d;
			if (d > isr_stat[v].max)
				isr_stat[v].max = d;
		}
	}
}

/* simavr 1.6 jumps to a vector in zero cycles; the chip takes 4 (push PC, clear I)
 * before the vector's JMP, which simavr does count. */
static void isr_entry_cycles_hook(avr_irq_t *irq, uint32_t value, void *param)
{
	(void)irq;
	(void)param;
	if (value)
		g_rig.avr->cycle += 4;
}

static void isr_entry_cycles_attach(avr_t *avr)
{
	for (int i = 0; i < avr->interrupts.vector_count; i++)
		avr_irq_register_notify(avr->interrupts.vector[i]->irq + AVR_INT_IRQ_RUNNING,
				isr_entry_cycles_hook, NULL);
}

static void isr_stats_attach(avr_t *avr)
{
	for (int i = 0; i < avr->interrupts.vector_count; i++) {
		avr_int_vector_t *vec = avr->interrupts.vector[i];
		if (vec->vector < 64)
			avr_irq_register_notify(vec->irq + AVR_INT_IRQ_RUNNING, isr_running_hook,
					(void *)(uintptr_t)vec->vector);
	}
}

static void isr_stats_report(rig_t *r, FILE *f)
{
	double total = (double)r->avr->cycle;
	for (int v = 0; v < 64; v++) {
		if (!isr_stat[v].count)
			continue;
		char line[256];
		snprintf(line, sizeof(line), "isr vector %d count %llu mean_cycles %.1f max_cycles %llu "
				"cpu_pct %.2f max_nesting %llu",
				v, (unsigned long long)isr_stat[v].count,
				(double)isr_stat[v].total / isr_stat[v].count, (unsigned long long)isr_stat[v].max,
				total > 0 ? 100.0 * isr_stat[v].total / total : 0.0,
				(unsigned long long)isr_stat[v].max_depth);
		fprintf(f, "coupprof_rig: %s\n", line);
		rig_log(r, "%s\n", line);
	}
}

/* ---- A0 front end: current-sense amplifier into the ADC ------------------ */

/*
 * simavr 1.6 restarts a free-running conversion from the cycle its completion
 * timer was processed, a few cycles after it was due, so conversions drift
 * (104.06 us instead of 104 at /128). The rig puts each completion back on the
 * datasheet's schedule: a free-running conversion starts exactly when the
 * previous one ends.
 */
static struct {
	rig_t *rig;
	avr_adc_t *adc;
	avr_irq_t *in;
	int pending;		/* a conversion of our channel is running */
	uint16_t code;		/* its result, taken at sample-and-hold */
	double t_sh_s, i_a;
	uint64_t start;		/* when the running conversion started (ideal) */
	uint64_t reg_cycle;	/* cycle simavr registered its completion timer at */
	uint64_t ideal_end;	/* when it ends (ideal) */
	uint64_t done_cycle;	/* cycle the last completion was processed at */
} A;

static uint32_t adc_vref_mv(avr_t *avr, avr_adc_t *p)
{
	uint8_t refi = avr_regbit_get_array(avr, p->ref, ARRAY_SIZE(p->ref));
	uint16_t ref = p->ref_values[refi];
	switch (ref) {
	case ADC_VREF_VCC: return avr->vcc;
	case ADC_VREF_AREF: return avr->aref;
	case ADC_VREF_AVCC: return avr->avcc;
	default: return ref;
	}
}

static avr_cycle_count_t adc_reschedule(avr_t *avr, avr_cycle_count_t when, void *param)
{
	(void)when;
	(void)param;
	for (avr_cycle_timer_slot_p s = avr->cycle_timers.timer; s; s = s->next) {
		if (s->param != A.adc)
			continue;
		uint64_t end = A.start + (s->when - A.reg_cycle);
		A.ideal_end = end;
		avr_cycle_timer_t fn = s->timer;
		avr_cycle_timer_cancel(avr, fn, A.adc);
		avr_cycle_timer_register(avr, end > avr->cycle ? end - avr->cycle : 1, fn, A.adc);
		break;
	}
	return 0;
}

/* Conversion start: the input is sampled 1.5 ADC clocks later (13.5 on the first). */
static void adc_trigger_hook(avr_irq_t *irq, uint32_t value, void *param)
{
	rig_t *r = param;
	avr_t *avr = r->avr;
	union { avr_adc_mux_t mux; uint32_t v; } e = { .v = value };
	(void)irq;
	int chained = A.ideal_end && A.done_cycle == avr->cycle &&
			A.adc->adts_mode == avr_adts_free_running;
	A.start = chained ? A.ideal_end : avr->cycle;
	A.reg_cycle = avr->cycle;
	A.ideal_end = 0;
	avr_cycle_timer_register(avr, 1, adc_reschedule, NULL);
	A.pending = 0;
	if (e.mux.kind != ADC_MUX_SINGLE || e.mux.src != r->adc_channel)
		return;
	uint32_t div = avr_regbit_get_array(avr, A.adc->adps, ARRAY_SIZE(A.adc->adps));
	uint32_t adc_clk_cycles = 1u << (div ? div : 1);
	double sh_clocks = A.adc->first ? 13.5 : 1.5;
	double t = rig_cycles_to_s(r, A.start) + sh_clocks * adc_clk_cycles / r->freq_hz;
	double i, v_bus;
	rig_eval(r, t, &i, &v_bus);
	double vin = i * r->shunt_ohm * r->amp_gain + r->amp_offset_v;
	uint32_t vref = adc_vref_mv(avr, A.adc);
	/* the datasheet's ideal ADC: first transition at 0.5 LSB (24.6.3), i.e. rounding */
	double code = vref ? floor(vin * 1000.0 * 1024.0 / vref + 0.5) : 0;
	A.code = (uint16_t)fmax(0.0, fmin(1023.0, code));
	A.t_sh_s = t;
	A.i_a = i;
	A.pending = 1;
}

/* Conversion complete: publish the sampled code (simavr reads the mV on ADCL). */
static void adc_done_hook(avr_irq_t *irq, uint32_t value, void *param)
{
	rig_t *r = param;
	(void)irq;
	if (!value)
		return;
	A.done_cycle = r->avr->cycle;
	if (!A.pending)
		return;
	A.pending = 0;
	uint32_t vref = adc_vref_mv(r->avr, A.adc);
	/* simavr computes mv * 1023 / vref: choose mv so that gives our code */
	uint32_t mv = (uint32_t)ceil((double)A.code * vref / 1023.0);
	avr_raise_irq(A.in, mv);
	if (r->log_sensor)
		rig_log(r, "adc %.4f %u %.9g\n", A.t_sh_s * 1e6, A.code, A.i_a);
}

static void adc_attach(rig_t *r)
{
	avr_t *avr = r->avr;
	memset(&A, 0, sizeof(A));
	for (avr_io_t *io = avr->io_port; io; io = io->next)
		if (!strcmp(io->kind, "adc"))
			A.adc = (avr_adc_t *)io;
	if (!A.adc)
		return;
	A.rig = r;
	A.in = avr_io_getirq(avr, AVR_IOCTL_ADC_GETIRQ, ADC_IRQ_ADC0 + r->adc_channel);
	avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_ADC_GETIRQ, ADC_IRQ_OUT_TRIGGER),
			adc_trigger_hook, r);
	avr_irq_register_notify(A.adc->adc.irq + AVR_INT_IRQ_PENDING, adc_done_hook, r);
}

/* ---- options --------------------------------------------------------- */

typedef struct opts_t {
	const char *elf, *waveform, *log, *info, *pty_link, *fifo, *script, *uart_out;
	const char *mcu;
	uint32_t freq;
	double seconds;
	int fast;
	int stdin_control;
	double gt_period_us;
	double bus_v;
	char alert_port;
	int alert_bit;
	int ina_addr;
} opts_t;

static void usage(FILE *f)
{
	fputs(
"usage: coupprof_rig [options] FIRMWARE.elf\n"
"Runs the logger firmware on a simulated ATmega328P with a virtual INA226 (TWI 0x40),\n"
"a current-sense amplifier on A0, marker inputs driven by the host and UART0 on a pty.\n"
"\n"
"  --waveform FILE      current/voltage waveform (firmware/sim/README.md); default 0 A, 5 V\n"
"  --bus-v V            bus voltage when the waveform gives none (default 5.0)\n"
"  --shunt-ohm R        shunt of the simulated board (default 0.1, as the firmware assumes)\n"
"  --amp-gain G         A0 current-sense amplifier gain (default 50)\n"
"  --amp-offset-v V     amplifier output offset (default 0)\n"
"  --adc-channel N      ADC input the amplifier drives (default 0 = A0)\n"
"  --ina-addr A         INA226 7-bit address (default 0x40)\n"
"  --ina-alert PIN      INA226 ALERT output wired to PIN (default B0 = D8/ICP1; 'none')\n"
"  --markers PINS       marker inputs, default D2,D3,D4,D5\n"
"  --log FILE           ground-truth log (pins, gt, ina, adc, note lines)\n"
"  --log-sensor         also log every INA226 update and ADC sample\n"
"  --log-twi            also log every TWI message the INA226 sees (debugging)\n"
"  --isr-stats          report per interrupt vector: count, cycles, CPU share, nesting\n"
"  --gt-period-us T     period of 'gt' lines (default 1000)\n"
"  --info FILE          write 'pty PATH' and 'fifo PATH' there once ready\n"
"  --pty-link PATH      symlink to the UART pty\n"
"  --marker-fifo PATH   create a FIFO that accepts control commands (no replies)\n"
"  --script FILE        timed commands, lines 'T_US COMMAND'\n"
"  --no-stdin           do not read commands from stdin\n"
"  --fast               run unthrottled (default: paced to the wall clock); implies --no-stdin\n"
"                       unless --stdin is given, and no pty unless --pty is given\n"
"  --stdin, --pty       force the stdin control channel / the pty in --fast mode\n"
"  --seconds S          stop after S simulated seconds\n"
"  --uart-out FILE      copy every byte the firmware sends to FILE\n"
"  --mcu NAME --freq HZ override the ELF (default atmega328p at 16000000)\n"
"Commands (stdin, FIFO, script): pin K L | pins MASK | send HEX | at T_US CMD | time | sync | quit\n",
		f);
}

static int parse_pin(const char *s, char *port, int *bit)
{
	if (strlen(s) != 2 || s[0] < 'A' || s[0] > 'D' || s[1] < '0' || s[1] > '7')
		return -1;
	*port = s[0];
	*bit = s[1] - '0';
	return 0;
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- pacing: the simulation follows the wall clock ------------------------ */

/* How far ahead of the wall clock a paced rig runs, and so the constant delay from
 * reading a host command to applying it (see pace_input). */
#define PACE_LEAD_US 25

typedef struct {
	avr_t *avr;
	rig_t *r;
	uint64_t wall0_ns;	/* wall time of simulated cycle 0 */
	uint64_t lost_cycles;	/* cycles given up when the host was too slow to keep pace */
	uint64_t max_lag, lead;	/* cycles */
	uint64_t last_warn_ns, max_lag_seen;
	uint64_t oversleep_ns;	/* test knob: added to every timed wait */
	uint64_t commands;	/* host reads applied after catching up */
} pace_t;

/* The cycle the wall clock stands at; when the simulation is over max_lag behind,
 * says so and gives up the lag (less half of max_lag) instead of racing to catch up. */
static uint64_t pace_wall_cycle(pace_t *p, uint64_t wall_ns)
{
	uint64_t target = (uint64_t)((double)(wall_ns - p->wall0_ns) * p->r->freq_hz / 1e9);
	target = target > p->lost_cycles ? target - p->lost_cycles : 0;
	if (target > p->avr->cycle + p->max_lag) {
		uint64_t lag = target - p->avr->cycle;
		if (lag > p->max_lag_seen)
			p->max_lag_seen = lag;
		if (wall_ns - p->last_warn_ns > 1000000000ull) {
			p->last_warn_ns = wall_ns;
			rig_warn(p->r, "behind the wall clock by %.1f ms: the host is too slow for "
					"real time; pacing restarts from here", lag * 1e3 / p->r->freq_hz);
			rig_log(p->r, "behind %.4f %.1f\n", rig_cycles_to_us(p->r, p->avr->cycle),
					lag * 1e6 / p->r->freq_hz);
		}
		p->lost_cycles += lag - p->max_lag / 2;
		target = p->avr->cycle + p->max_lag / 2;
	}
	return target;
}

/* Runs the firmware up to cycle (or end_cycle); 0, or 3 if it crashed or stopped. */
static int pace_run_to(pace_t *p, uint64_t cycle, uint64_t end_cycle)
{
	if (cycle > end_cycle)
		cycle = end_cycle;
	while (p->avr->cycle < cycle) {
		int st = avr_run(p->avr);
		if (st == cpu_Done || st == cpu_Crashed) {
			rig_warn(p->r, "firmware %s at pc 0x%04x",
					st == cpu_Crashed ? "crashed" : "stopped", p->avr->pc);
			return 3;
		}
	}
	return 0;
}

/* Host input was read at read_ns: first bring the simulation to where the wall clock
 * says it is then, plus the lead, so the input lands PACE_LEAD_US after it was read
 * whatever the rig was doing. Applied at the cycle the simulation happened to be on,
 * a command read while the rig slept ahead of the clock (an oversleeping timer keeps
 * it there) shared that cycle with the one before: a fall and the next rise 35 us
 * later became a 0 us pulse. The simulation is never more than the lead ahead of any
 * earlier wall time, so this only moves forward. */
static int pace_input(pace_t *p, uint64_t read_ns, uint64_t end_cycle)
{
	p->commands++;
	return pace_run_to(p, pace_wall_cycle(p, read_ns) + p->lead, end_cycle);
}

static void noop_sleep(avr_t *avr, avr_cycle_count_t how_long)
{
	(void)avr;
	(void)how_long;
}

static int die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("coupprof_rig: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 2;
}

int main(int argc, char **argv)
{
	rig_t *r = &g_rig;
	opts_t o = { .freq = 0, .stdin_control = -1, .gt_period_us = 1000, .bus_v = 5.0,
			.ina_addr = 0x40, .alert_port = 'B', .alert_bit = 0 };
	const char *markers = "D2,D3,D4,D5";
	int want_pty = -1, isr_stats = 0;
	memset(r, 0, sizeof(*r));
	r->shunt_ohm = 0.1;	/* firmware defaults: INA226 breakout R100, A0 shunt 0.1 ohm */
	r->amp_gain = 50;

	enum { O_WAVE = 256, O_BUSV, O_SHUNT, O_GAIN, O_OFFS, O_ADCCH, O_INAADDR, O_ALERT,
		O_MARKERS, O_LOG, O_LOGS, O_LOGT, O_ISR, O_GTP, O_INFO, O_PTYLINK, O_FIFO, O_SCRIPT, O_NOSTDIN,
		O_FAST, O_STDIN, O_PTY, O_SECONDS, O_UARTOUT, O_MCU, O_FREQ, O_QUIET, O_HELP };
	static const struct option lo[] = {
		{ "waveform", 1, 0, O_WAVE }, { "bus-v", 1, 0, O_BUSV }, { "shunt-ohm", 1, 0, O_SHUNT },
		{ "amp-gain", 1, 0, O_GAIN }, { "amp-offset-v", 1, 0, O_OFFS },
		{ "adc-channel", 1, 0, O_ADCCH }, { "ina-addr", 1, 0, O_INAADDR },
		{ "ina-alert", 1, 0, O_ALERT }, { "markers", 1, 0, O_MARKERS }, { "log", 1, 0, O_LOG },
		{ "log-sensor", 0, 0, O_LOGS }, { "log-twi", 0, 0, O_LOGT },
		{ "isr-stats", 0, 0, O_ISR }, { "gt-period-us", 1, 0, O_GTP }, { "info", 1, 0, O_INFO },
		{ "pty-link", 1, 0, O_PTYLINK }, { "marker-fifo", 1, 0, O_FIFO },
		{ "script", 1, 0, O_SCRIPT }, { "no-stdin", 0, 0, O_NOSTDIN }, { "fast", 0, 0, O_FAST },
		{ "stdin", 0, 0, O_STDIN }, { "pty", 0, 0, O_PTY }, { "seconds", 1, 0, O_SECONDS },
		{ "uart-out", 1, 0, O_UARTOUT }, { "mcu", 1, 0, O_MCU }, { "freq", 1, 0, O_FREQ },
		{ "quiet", 0, 0, O_QUIET }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
	};
	int c;
	char *end;
#define NUM(dst, lo_, what) do { dst = strtod(optarg, &end); \
		if (*end || end == optarg || !(dst >= (lo_))) return die("bad %s: %s", what, optarg); } while (0)
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_WAVE: o.waveform = optarg; break;
		case O_BUSV: NUM(o.bus_v, 0, "--bus-v"); break;
		case O_SHUNT: NUM(r->shunt_ohm, 1e-9, "--shunt-ohm"); break;
		case O_GAIN: NUM(r->amp_gain, 1e-9, "--amp-gain"); break;
		case O_OFFS: r->amp_offset_v = strtod(optarg, &end); break;
		case O_ADCCH: r->adc_channel = atoi(optarg);
			if (r->adc_channel < 0 || r->adc_channel > 7) return die("bad --adc-channel");
			break;
		case O_INAADDR: o.ina_addr = (int)strtol(optarg, &end, 0);
			if (*end || o.ina_addr < 0x08 || o.ina_addr > 0x77) return die("bad --ina-addr");
			break;
		case O_ALERT: if (!strcmp(optarg, "none"))
				o.alert_port = 0;
			else if (parse_pin(optarg, &o.alert_port, &o.alert_bit))
				return die("bad --ina-alert %s (want e.g. B0)", optarg);
			break;
		case O_MARKERS: markers = optarg; break;
		case O_LOG: o.log = optarg; break;
		case O_LOGS: r->log_sensor = 1; break;
		case O_LOGT: r->log_twi = 1; break;
		case O_ISR: isr_stats = 1; break;
		case O_GTP: NUM(o.gt_period_us, 1, "--gt-period-us"); break;
		case O_INFO: o.info = optarg; break;
		case O_PTYLINK: o.pty_link = optarg; break;
		case O_FIFO: o.fifo = optarg; break;
		case O_SCRIPT: o.script = optarg; break;
		case O_NOSTDIN: o.stdin_control = 0; break;
		case O_STDIN: o.stdin_control = 1; break;
		case O_FAST: o.fast = 1; break;
		case O_PTY: want_pty = 1; break;
		case O_SECONDS: NUM(o.seconds, 0, "--seconds"); break;
		case O_UARTOUT: o.uart_out = optarg; break;
		case O_MCU: o.mcu = optarg; break;
		case O_FREQ: o.freq = (uint32_t)strtoul(optarg, &end, 0); break;
		case O_QUIET: r->quiet = 1; break;
		case O_HELP: case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	o.elf = argv[optind];
	if (o.stdin_control < 0)
		o.stdin_control = !o.fast;
	if (want_pty < 0)
		want_pty = !o.fast;
	/* Test knob: make every timed wait oversleep by this much, as a VM whose timers
	 * wake tens of us late does (tests/rig run the layer rig at 50 us). */
	long oversleep_us = 0;
	const char *os_env = getenv("COUPPROF_RIG_OVERSLEEP_US");
	if (os_env && *os_env) {
		char *end;
		oversleep_us = strtol(os_env, &end, 10);
		if (*end || oversleep_us < 0 || oversleep_us > 100000)
			return die("COUPPROF_RIG_OVERSLEEP_US=%s: want 0..100000 (us)", os_env);
	}

	/* marker pins */
	{
		char buf[64];
		snprintf(buf, sizeof(buf), "%s", markers);
		for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
			if (r->marker_count == RIG_MAX_MARKERS)
				return die("at most %d markers", RIG_MAX_MARKERS);
			char port;
			if (parse_pin(s, &port, &r->marker_bit[r->marker_count]))
				return die("bad --markers entry %s (want e.g. D2)", s);
			if (r->marker_count && port != r->marker_port)
				return die("--markers must all be on one port");
			r->marker_port = port;
			r->marker_count++;
		}
		if (!r->marker_count)
			return die("--markers is empty");
	}

	/* waveform */
	waveform_init(&r->wave, o.bus_v);
	if (o.waveform) {
		char err[512];
		if (waveform_load(&r->wave, o.waveform, err, sizeof(err)))
			return die("waveform: %s", err);
	}

	/* the AVR */
	avr_global_logger_set(simavr_logger);
	elf_firmware_t fw;
	memset(&fw, 0, sizeof(fw));
	if (access(o.elf, R_OK))
		return die("%s: %s (build it with `make -C firmware`)", o.elf, strerror(errno));
	if (elf_read_firmware(o.elf, &fw))
		return die("%s: not a readable AVR ELF", o.elf);
	if (o.mcu)
		snprintf(fw.mmcu, sizeof(fw.mmcu), "%s", o.mcu);
	else if (!fw.mmcu[0])
		snprintf(fw.mmcu, sizeof(fw.mmcu), "atmega328p");
	if (o.freq)
		fw.frequency = o.freq;
	else if (!fw.frequency)
		fw.frequency = 16000000;
	if (!fw.vcc) fw.vcc = 5000;
	if (!fw.avcc) fw.avcc = 5000;
	if (!fw.aref) fw.aref = 5000;
	avr_t *avr = avr_make_mcu_by_name(fw.mmcu);
	if (!avr)
		return die("unknown MCU %s", fw.mmcu);
	avr_init(avr);
	avr->log = LOG_WARNING;
	avr_load_firmware(avr, &fw);
	avr->frequency = fw.frequency;
	avr->sleep = noop_sleep;	/* pacing is ours, not simavr's usleep() */
	r->avr = avr;
	r->freq_hz = avr->frequency;
	r->gt_period_cycles = (uint64_t)(o.gt_period_us * r->freq_hz / 1e6);
	if (r->gt_period_cycles < 1)
		r->gt_period_cycles = 1;

	if (o.log) {
		r->log = fopen(o.log, "w");
		if (!r->log)
			return die("%s: %s", o.log, strerror(errno));
		setvbuf(r->log, NULL, _IOFBF, 1 << 16);
	}
	rig_log(r, "# coupprof_rig log v1; columns in firmware/sim/README.md\n");
	rig_log(r, "config mcu %s freq_hz %u shunt_ohm %.9g amp_gain %.9g amp_offset_v %.9g "
			"adc_channel %d ina_addr 0x%02x markers %s mode %s elf %s waveform %s "
			"lead_us %d oversleep_us %ld\n",
			fw.mmcu, r->freq_hz, r->shunt_ohm, r->amp_gain, r->amp_offset_v, r->adc_channel,
			o.ina_addr, markers, o.fast ? "fast" : "realtime", o.elf,
			o.waveform ? o.waveform : "-", o.fast ? 0 : PACE_LEAD_US, oversleep_us);

	FILE *uart_out = NULL;
	if (o.uart_out) {
		uart_out = fopen(o.uart_out, "wb");
		if (!uart_out)
			return die("%s: %s", o.uart_out, strerror(errno));
	}
	uart_bridge_t *uart = uart_bridge_attach(r, want_pty, uart_out);
	if (!uart)
		return die("cannot attach UART0 / create a pty: %s", strerror(errno));
	twi_timing_install(r);
	static ina226_t ina;
	ina226_attach(&ina, r, (uint8_t)o.ina_addr, o.alert_port, o.alert_bit);
	adc_attach(r);
	isr_entry_cycles_attach(avr);
	if (isr_stats)
		isr_stats_attach(avr);
	/* simavr 1.6 polls INT0/INT1 every cycle while their pin is low in the default
	 * low-level mode, even with the interrupt disabled; PD2/PD3 are markers, idle low.
	 * Without "strict" level triggering a low level fires once, on its falling edge. */
	avr_extint_set_strict_lvl_trig(avr, 0, 0);
	avr_extint_set_strict_lvl_trig(avr, 1, 0);
	for (int k = 0; k < r->marker_count; k++) {
		r->marker_irq[k] = avr_io_getirq(avr, AVR_IOCTL_IOPORT_GETIRQ(r->marker_port),
				r->marker_bit[k]);
		avr_raise_irq(r->marker_irq[k], 0);
	}
	rig_log(r, "pins %.4f %u %.12g %.12g init\n", 0.0, 0u, 0.0, 0.0);
	avr_cycle_timer_register(avr, r->gt_period_cycles, gt_tick, r);
	uint64_t tick = r->freq_hz / 20000;	/* 50 us */
	avr_cycle_timer_register(avr, tick, pacer_tick, (void *)(uintptr_t)tick);

	control_init(r, uart);
	if (o.script) {
		char err[512];
		if (control_load_script(o.script, err, sizeof(err)))
			return die("script: %s", err);
	}
	int fifo_fd = -1;
	if (o.fifo) {
		unlink(o.fifo);
		if (mkfifo(o.fifo, 0600))
			return die("%s: %s", o.fifo, strerror(errno));
		/* O_RDWR: we hold a writer ourselves, so writers coming and going never give EOF */
		fifo_fd = open(o.fifo, O_RDWR | O_NONBLOCK);
		if (fifo_fd < 0)
			return die("%s: %s", o.fifo, strerror(errno));
	}
	const char *pty = uart_bridge_pty_path(uart);
	if (o.pty_link && pty) {
		unlink(o.pty_link);
		if (symlink(pty, o.pty_link))
			return die("%s: %s", o.pty_link, strerror(errno));
	}
	if (o.info) {
		char tmp[4096];
		snprintf(tmp, sizeof(tmp), "%s.tmp", o.info);
		FILE *f = fopen(tmp, "w");
		if (!f)
			return die("%s: %s", tmp, strerror(errno));
		fprintf(f, "pty %s\nfifo %s\nfreq_hz %u\n", pty ? pty : "-", o.fifo ? o.fifo : "-",
				r->freq_hz);
		fclose(f);
		rename(tmp, o.info);
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	if (o.stdin_control)
		fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
	if (!o.fast)	/* the pacing sleeps are tens of us: the default 50 us slack would double them */
		prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("pty %s\n", pty ? pty : "-");
	printf("ready %.4f\n", 0.0);

	ctl_reader_t rd_stdin = { .source = "stdin", .reply_fd = 1 };
	ctl_reader_t rd_fifo = { .source = "fifo", .reply_fd = -1 };
	uint64_t end_cycle = o.seconds > 0 ? (uint64_t)(o.seconds * r->freq_hz + 0.5) : UINT64_MAX;
	uint64_t chunk = o.fast ? r->freq_hz / 1000 : r->freq_hz / 10000;	/* 1 ms / 100 us */
	pace_t pace = { .avr = avr, .r = r, .wall0_ns = now_ns(),
			.max_lag = r->freq_hz / 20,	/* 50 ms: beyond this, report and stop catching up */
			.lead = (uint64_t)r->freq_hz * PACE_LEAD_US / 1000000,
			.oversleep_ns = (uint64_t)oversleep_us * 1000 };
	uint64_t last_io = 0;
	int exit_code = 0, stdin_open = o.stdin_control, io_due = 1;

	while (!g_stop && !control_quit_requested()) {
		/* host side: commands, UART bytes in and out */
		uint64_t wall = now_ns();
		/* Host I/O when the wait below saw input, else every 100 us (paced) or 1 ms
		 * (fast): a read of each channel per 25 us step would cost more than the
		 * simulation itself. */
		if (io_due || wall - last_io > (o.fast ? 1000000u : 100000u)) {
			io_due = 0;
			last_io = wall;
			char buf[4096];
			if (stdin_open) {
				ssize_t n = read(0, buf, sizeof(buf));
				if (n > 0) {
					if (!o.fast && (exit_code = pace_input(&pace, now_ns(), end_cycle)))
						goto done;
					control_feed(&rd_stdin, buf, (size_t)n);
				} else if (n == 0) {	/* host went away: stop */
					stdin_open = 0;
					if (!o.fast)
						break;
				}
			}
			if (fifo_fd >= 0) {
				ssize_t n = read(fifo_fd, buf, sizeof(buf));
				if (n > 0) {
					if (!o.fast && (exit_code = pace_input(&pace, now_ns(), end_cycle)))
						goto done;
					control_feed(&rd_fifo, buf, (size_t)n);
				}
			}
			uart_bridge_poll_host(uart);
			uart_bridge_flush(uart, 0);
		}
		if (control_quit_requested() || avr->cycle >= end_cycle)
			break;

		uint64_t target;
		if (o.fast) {
			target = avr->cycle + chunk;
		} else {
			/* Run a little ahead of the wall clock (lead), then sleep until it catches
			 * up: chasing it exactly would never sleep and burn a whole core in
			 * syscalls, which on a busy host starves the very process it paces. */
			target = pace_wall_cycle(&pace, now_ns());
			if (avr->cycle > target) {
				/* ahead of the wall clock: wait for input, or until it catches up */
				struct pollfd pfd[3];
				int np = 0;
				if (stdin_open)
					pfd[np++] = (struct pollfd){ .fd = 0, .events = POLLIN };
				if (fifo_fd >= 0)
					pfd[np++] = (struct pollfd){ .fd = fifo_fd, .events = POLLIN };
				int mfd = uart_bridge_master_fd(uart);
				if (mfd >= 0)
					pfd[np++] = (struct pollfd){ .fd = mfd,
						.events = POLLIN | (uart_bridge_pending(uart) ? POLLOUT : 0) };
				uint64_t ahead_ns = (uint64_t)((double)(avr->cycle - target) * 1e9 / r->freq_hz);
				uint64_t wait_ns = (ahead_ns < 100000 ? ahead_ns : 100000) + pace.oversleep_ns;
				struct timespec ts = { (time_t)(wait_ns / 1000000000u),
						(long)(wait_ns % 1000000000u) };
				if (ppoll(pfd, (nfds_t)np, &ts, NULL) > 0)
					io_due = 1;
				continue;
			}
			target += pace.lead;
			if (target > avr->cycle + chunk)
				target = avr->cycle + chunk;
		}
		if ((exit_code = pace_run_to(&pace, target, end_cycle)))
			goto done;
	}
done:;
	if (isr_stats)
		isr_stats_report(r, stderr);
	simavr_log_summary();
	double t_end = rig_cycles_to_s(r, avr->cycle);
	rig_integrate_to(r, t_end);
	rig_log(r, "end %.4f %u %.12g %.12g\n", t_end * 1e6, r->marker_state, r->integ.q_c,
			r->integ.e_j);
	if (r->log)
		fclose(r->log);
	uart_bridge_flush(uart, 1000);
	if (uart_out)
		fclose(uart_out);
	double wall_s = (now_ns() - pace.wall0_ns) / 1e9;
	if (!r->quiet) {
		fprintf(stderr, "coupprof_rig: %.3f s simulated in %.3f s wall (x%.2f), "
				"%llu marker changes, INA226 updates %llu, max lag %.1f ms, "
				"%llu host reads applied %d us after reading\n",
				t_end, wall_s, wall_s > 0 ? t_end / wall_s : 0,
				(unsigned long long)r->pin_changes, (unsigned long long)ina.updates,
				pace.max_lag_seen * 1e3 / r->freq_hz, (unsigned long long)pace.commands,
				o.fast ? 0 : PACE_LEAD_US);
		fputs("coupprof_rig: ", stderr);
		uart_bridge_stats(uart, stderr);
	}
	if (control_quit_requested() && o.stdin_control)
		fflush(stdout);
	if (o.fifo)
		unlink(o.fifo);
	return exit_code;
}
