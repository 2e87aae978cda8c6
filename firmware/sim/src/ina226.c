/*
 * Virtual INA226 (TI datasheet SBOS547). Only what a logger uses is modelled:
 * all registers, continuous and triggered modes, averaging, the conversion
 * ready flag and its ALERT function. The shunt and bus readings are the mean
 * of the waveform over each conversion window (the part is a delta-sigma ADC,
 * so it integrates), quantised to the register LSBs and saturated.
 */
#include "ina226.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avr_ioport.h"
#include "avr_twi.h"
#include "sim_io.h"

enum {
	REG_CONFIG = 0x00, REG_SHUNT = 0x01, REG_BUS = 0x02, REG_POWER = 0x03,
	REG_CURRENT = 0x04, REG_CAL = 0x05, REG_MASK = 0x06, REG_ALERT = 0x07,
	REG_MFG = 0xFE, REG_DIE = 0xFF,
};
#define CONFIG_DEFAULT 0x4127
#define MASK_CNVR (1u << 10)
#define MASK_AFF (1u << 4)
#define MASK_CVRF (1u << 3)
#define MASK_APOL (1u << 1)
#define MASK_WRITABLE 0xFC03u

static const uint16_t ct_us[8] = { 140, 204, 332, 588, 1100, 2116, 4156, 8244 };
static const uint16_t avg_n[8] = { 1, 4, 16, 64, 128, 256, 512, 1024 };

#define SHUNT_LSB_V 2.5e-6
#define BUS_LSB_V 1.25e-3

/* I2C high-speed mode entered with a master code, until the next STOP */
static int twi_hs_mode;

static inline int cfg_mode(const ina226_t *p) { return p->config & 7; }
static inline int cfg_avg(const ina226_t *p) { return avg_n[(p->config >> 9) & 7]; }

static uint64_t phase_cycles(const ina226_t *p, int phase)
{
	int code = phase == 0 ? (p->config >> 3) & 7 : (p->config >> 6) & 7;
	return (uint64_t)ct_us[code] * p->rig->freq_hz / 1000000u;
}

static void alert_update(ina226_t *p)
{
	int asserted = (p->mask_enable & MASK_CNVR) && (p->mask_enable & MASK_CVRF);
	if (!p->alert_irq || asserted == p->alert_asserted)
		return;
	p->alert_asserted = asserted;
	int active_high = (p->mask_enable & MASK_APOL) != 0;
	avr_raise_irq(p->alert_irq, asserted ? active_high : !active_high);
}

static void update_registers(ina226_t *p, double t_s)
{
	double mean_i = NAN, mean_v = NAN;
	if (p->n_i) {
		mean_i = p->sum_i / p->n_i;
		double raw = round(mean_i * p->rig->shunt_ohm / SHUNT_LSB_V);
		p->shunt = (int16_t)fmax(-32768.0, fmin(32767.0, raw));
		int32_t cur = ((int32_t)p->shunt * (int32_t)p->cal) / 2048;
		p->current = (int16_t)(cur > 32767 ? 32767 : cur < -32768 ? -32768 : cur);
	}
	if (p->n_v) {
		mean_v = p->sum_v / p->n_v;
		double raw = round(mean_v / BUS_LSB_V);
		p->bus = (uint16_t)fmax(0.0, fmin(32767.0, raw));
	}
	uint32_t pw = ((uint32_t)abs(p->current) * p->bus) / 20000u;
	p->power = pw > 0xFFFF ? 0xFFFF : (uint16_t)pw;
	p->mask_enable |= MASK_CVRF;
	alert_update(p);
	p->updates++;
	if (p->rig->log_sensor)
		rig_log(p->rig, "ina %.4f %d %u %d %.9g %.9g\n", t_s * 1e6, p->shunt, p->bus,
				p->current, mean_i, mean_v);
}

static void start_set(ina226_t *p)
{
	p->avg_left = cfg_avg(p);
	p->sum_i = p->sum_v = 0;
	p->n_i = p->n_v = 0;
	p->phase = (cfg_mode(p) & 1) ? 0 : 1;
}

static avr_cycle_count_t phase_done(avr_t *avr, avr_cycle_count_t when, void *param)
{
	ina226_t *p = param;
	rig_t *r = p->rig;
	double t = rig_cycles_to_s(r, when);
	rig_integral_t now;
	rig_integral_peek(r, t, &now);
	double dt = t - p->phase_start_s;
	if (dt > 0) {
		if (p->phase == 0) {
			p->sum_i += (now.q_c - p->at_phase_start.q_c) / dt;
			p->n_i++;
		} else {
			p->sum_v += (now.vt_vs - p->at_phase_start.vt_vs) / dt;
			p->n_v++;
		}
	}
	int mode = cfg_mode(p);
	if (p->phase == 0 && (mode & 2)) {
		p->phase = 1;
	} else {
		p->phase = (mode & 1) ? 0 : 1;
		if (--p->avg_left <= 0) {
			update_registers(p, t);
			if (!(mode & 4)) {	/* triggered: one set, then idle */
				p->running = 0;
				return 0;
			}
			start_set(p);
		}
	}
	p->at_phase_start = now;
	p->phase_start_s = t;
	(void)avr;
	return when + phase_cycles(p, p->phase);
}

/* Start (or restart) conversions from now, as a write to the config register does. */
static void restart(ina226_t *p)
{
	avr_t *avr = p->rig->avr;
	avr_cycle_timer_cancel(avr, phase_done, p);
	p->running = 0;
	int mode = cfg_mode(p);
	if ((mode & 3) == 0)	/* power-down */
		return;
	start_set(p);
	p->phase_start_s = rig_cycles_to_s(p->rig, avr->cycle);
	rig_integral_peek(p->rig, p->phase_start_s, &p->at_phase_start);
	p->running = 1;
	avr_cycle_timer_register(avr, phase_cycles(p, p->phase), phase_done, p);
}

static void reset_registers(ina226_t *p)
{
	p->config = CONFIG_DEFAULT;
	p->cal = 0;
	p->mask_enable = 0;
	p->alert_limit = 0;
	p->shunt = 0;
	p->bus = 0;
	p->current = 0;
	p->power = 0;
	alert_update(p);
}

static uint16_t reg_read(ina226_t *p, uint8_t reg)
{
	switch (reg) {
	case REG_CONFIG: return p->config;
	case REG_SHUNT: return (uint16_t)p->shunt;
	case REG_BUS: return p->bus;
	case REG_POWER: return p->power;
	case REG_CURRENT: return (uint16_t)p->current;
	case REG_CAL: return p->cal;
	case REG_MASK: {
		uint16_t v = p->mask_enable;
		/* reading Mask/Enable clears the conversion-ready and alert flags */
		p->mask_enable &= (uint16_t)~(MASK_CVRF | MASK_AFF);
		alert_update(p);
		return v;
	}
	case REG_ALERT: return p->alert_limit;
	case REG_MFG: return 0x5449;
	case REG_DIE: return 0x2260;
	default: return 0;
	}
}

static void reg_write(ina226_t *p, uint8_t reg, uint16_t v)
{
	switch (reg) {
	case REG_CONFIG:
		if (v & 0x8000) {
			reset_registers(p);
		} else {
			p->config = (uint16_t)((v & 0x0FFF) | 0x4000);
			p->mask_enable &= (uint16_t)~MASK_CVRF;
			alert_update(p);
		}
		restart(p);
		break;
	case REG_CAL:
		p->cal = v & 0x7FFF;
		break;
	case REG_MASK:
		p->mask_enable = (uint16_t)((p->mask_enable & ~MASK_WRITABLE) | (v & MASK_WRITABLE));
		alert_update(p);
		break;
	case REG_ALERT:
		p->alert_limit = v;
		break;
	default:	/* read-only registers ignore writes, as the part does */
		break;
	}
}

/* TWI messages from the AVR master; protocol as simavr's examples/parts/i2c_eeprom.c */
static void twi_hook(avr_irq_t *irq, uint32_t value, void *param)
{
	ina226_t *p = param;
	avr_twi_msg_irq_t v;
	v.u.v = value;
	(void)irq;
	if (p->rig->log_twi)
		rig_log(p->rig, "twi %.4f %s%s%s%s%s addr %02x data %02x\n",
				rig_cycles_to_us(p->rig, p->rig->avr->cycle),
				v.u.twi.msg & TWI_COND_START ? "S" : "", v.u.twi.msg & TWI_COND_STOP ? "P" : "",
				v.u.twi.msg & TWI_COND_WRITE ? "W" : "", v.u.twi.msg & TWI_COND_READ ? "R" : "",
				v.u.twi.msg & TWI_COND_ACK ? "A" : "", v.u.twi.addr, v.u.twi.data);

	if (v.u.twi.msg & TWI_COND_STOP) {
		p->selected = 0;
		twi_hs_mode = 0;
	}
	if (v.u.twi.msg & TWI_COND_START) {
		p->selected = 0;
		if ((v.u.twi.addr & 0xF8) == 0x08)	/* Hs-mode master code: nobody acknowledges */
			twi_hs_mode = 1;
		if ((v.u.twi.addr >> 1) == p->addr7) {
			p->selected = 1;
			p->reading = v.u.twi.addr & 1;
			p->byte_idx = 0;
			if (p->reading)
				p->rd_latch = reg_read(p, p->ptr);
			avr_raise_irq(p->irq + TWI_IRQ_INPUT, avr_twi_irq_msg(TWI_COND_ACK, v.u.twi.addr, 1));
		}
	}
	if (!p->selected)
		return;
	if ((v.u.twi.msg & TWI_COND_WRITE) && !p->reading) {
		avr_raise_irq(p->irq + TWI_IRQ_INPUT, avr_twi_irq_msg(TWI_COND_ACK, v.u.twi.addr, 1));
		if (p->byte_idx == 0)
			p->ptr = v.u.twi.data;
		else if (p->byte_idx == 1)
			p->wr_msb = v.u.twi.data;
		else if (p->byte_idx == 2)
			reg_write(p, p->ptr, (uint16_t)(p->wr_msb << 8 | v.u.twi.data));
		p->byte_idx++;
	}
	if ((v.u.twi.msg & TWI_COND_READ) && p->reading) {
		uint8_t b = (p->byte_idx & 1) ? (uint8_t)(p->rd_latch & 0xFF) : (uint8_t)(p->rd_latch >> 8);
		p->byte_idx++;
		avr_raise_irq(p->irq + TWI_IRQ_INPUT, avr_twi_irq_msg(TWI_COND_READ, v.u.twi.addr, b));
	}
}

static const char *irq_names[2] = {
	[TWI_IRQ_INPUT] = "8>ina226.out",
	[TWI_IRQ_OUTPUT] = "32<ina226.in",
};

void ina226_attach(ina226_t *p, rig_t *rig, uint8_t addr7, char alert_port, int alert_bit)
{
	avr_t *avr = rig->avr;
	memset(p, 0, sizeof(*p));
	p->rig = rig;
	p->addr7 = addr7;
	p->irq = avr_alloc_irq(&avr->irq_pool, 0, 2, irq_names);
	avr_irq_register_notify(p->irq + TWI_IRQ_OUTPUT, twi_hook, p);
	avr_connect_irq(p->irq + TWI_IRQ_INPUT, avr_io_getirq(avr, AVR_IOCTL_TWI_GETIRQ(0), TWI_IRQ_INPUT));
	avr_connect_irq(avr_io_getirq(avr, AVR_IOCTL_TWI_GETIRQ(0), TWI_IRQ_OUTPUT), p->irq + TWI_IRQ_OUTPUT);
	if (alert_port) {
		p->alert_irq = avr_io_getirq(avr, AVR_IOCTL_IOPORT_GETIRQ(alert_port), alert_bit);
		p->alert_asserted = -1;
	}
	reset_registers(p);
	if (p->alert_irq) {	/* drive the idle level once */
		p->alert_asserted = 0;
		avr_raise_irq(p->alert_irq, 1);
	}
	restart(p);	/* the part powers up converting in continuous mode */
}

/* ---- TWI bit timing ---------------------------------------------------- */

static struct {
	avr_twi_t *twi;
	avr_io_write_t orig;
	void *orig_param;
	uint64_t bus_free_at;
	int warned;
} tt;

static avr_cycle_timer_slot_p find_twi_timer(avr_t *avr)
{
	for (avr_cycle_timer_slot_p s = avr->cycle_timers.timer; s; s = s->next)
		if (s->param == tt.twi)
			return s;
	return NULL;
}

/* One SCL period in CPU cycles: 16 + 2 * TWBR * 4^TWPS (ATmega328P datasheet 21.5.2) */
static uint64_t scl_cycles(avr_t *avr)
{
	uint32_t twps = avr_regbit_get(avr, tt.twi->twps);
	uint32_t twbr = avr->data[tt.twi->r_twbr];
	return 16u + 2u * twbr * (1u << (2 * twps));
}

static void twcr_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param)
{
	avr_twi_t *twi = tt.twi;
	rig_t *r = param;
	int sto_before = avr_regbit_get(avr, twi->twsto);
	uint8_t status_before = avr->data[twi->r_twsr] & 0xF8;
	avr_cycle_timer_slot_p before = find_twi_timer(avr);
	uint8_t int_bit = (uint8_t)(1u << twi->twi.raised.bit);
	uint8_t sto_req = (uint8_t)(1u << twi->twsto.bit);
	if (!tt.warned && (v & int_bit) && !(v & sto_req) && avr_regbit_get(avr, twi->twen)) {
		/* a START or byte goes out at this SCL; above 400 kHz the INA226 wants Hs-mode */
		double khz = r->freq_hz / (double)scl_cycles(avr) / 1000.0;
		if (khz > 400.5 && !twi_hs_mode) {
			rig_warn(r, "TWI SCL is %.0f kHz without the I2C high-speed master code: "
					"a real INA226 only follows up to 400 kHz in fast mode", khz);
			tt.warned = 1;
		}
	}
	avr_cycle_count_t when_before = before ? before->when : 0;

	tt.orig(avr, addr, v, tt.orig_param);
	/* Writing one to TWINT clears it. simavr 1.6 keeps the written one when TWINT
	 * was already clear (the first START after reset), so the firmware would see
	 * TWINT before the START is done; every status arrives through a timer. */
	if (v & int_bit) {
		avr_clear_interrupt(avr, &twi->twi);
		avr_regbit_clear(avr, twi->twi.raised);
	}

	uint64_t bit = scl_cycles(avr);
	if (!sto_before && (v & sto_req))	/* STOP, then the bus-free time before the next START */
		tt.bus_free_at = avr->cycle + bit + bit / 2;

	avr_cycle_timer_slot_p after = find_twi_timer(avr);
	if (!after || (after == before && after->when == when_before))
		return;
	/* simavr 1.6 reports an SLA+W as a data byte (0x28/0x30): after a START the
	 * byte sent is the address, and the datasheet status is SLA+W/R ACK/NACK */
	if (status_before == 0x08 || status_before == 0x10) {
		static const uint8_t fix[][2] = { { 0x28, 0x18 }, { 0x30, 0x20 }, { 0x50, 0x40 },
				{ 0x58, 0x48 } };
		for (unsigned k = 0; k < sizeof(fix) / sizeof(fix[0]); k++)
			if (twi->next_twstate == fix[k][0])
				twi->next_twstate = fix[k][1];
	}
	uint64_t delay;
	switch (twi->next_twstate) {
	case 0x08:	/* START */
	case 0x10:	/* repeated START */
		delay = bit + (tt.bus_free_at > avr->cycle ? tt.bus_free_at - avr->cycle : 0);
		break;
	case 0x18: case 0x20: case 0x28: case 0x30:	/* SLA+W / data out, 8 bits + ACK */
	case 0x40: case 0x48: case 0x50: case 0x58:	/* SLA+R / data in */
		delay = 9 * bit;
		break;
	default:
		return;
	}
	avr_cycle_timer_t fn = after->timer;
	avr_cycle_timer_cancel(avr, fn, twi);
	avr_cycle_timer_register(avr, delay, fn, twi);
}

void twi_timing_install(rig_t *rig)
{
	avr_t *avr = rig->avr;
	for (avr_io_t *io = avr->io_port; io; io = io->next)
		if (!strcmp(io->kind, "twi"))
			tt.twi = (avr_twi_t *)io;
	if (!tt.twi)
		return;
	avr_io_addr_t a = AVR_DATA_TO_IO(tt.twi->r_twcr);
	tt.orig = avr->io[a].w.c;
	tt.orig_param = avr->io[a].w.param;
	avr->io[a].w.c = twcr_write;
	avr->io[a].w.param = rig;
}
