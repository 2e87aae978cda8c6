/*
 * coupprof_rig: runs the logger firmware on simavr with a virtual INA226,
 * a current-sense amplifier on A0, host-driven marker pins and the UART on a pty.
 * Shared state of the rig; each module documents its own part.
 */
#ifndef COUPPROF_RIG_H
#define COUPPROF_RIG_H

#include <stdint.h>
#include <stdio.h>

#include "sim_avr.h"
#include "waveform.h"

#define RIG_MAX_MARKERS 4

typedef struct rig_integral_t {
	double t_s;		/* time the sums below reach */
	double q_c;		/* charge: integral of current, A*s */
	double e_j;		/* energy: integral of current*bus voltage, J */
	double vt_vs;	/* integral of bus voltage, V*s (INA226 bus averaging) */
} rig_integral_t;

typedef struct rig_t {
	avr_t *avr;
	uint32_t freq_hz;
	waveform_t wave;

	/* analog front ends */
	double shunt_ohm;		/* real shunt of the simulated board */
	double amp_gain;		/* current-sense amplifier gain (A0 front end) */
	double amp_offset_v;	/* amplifier output offset, volts */
	int adc_channel;		/* ADC input the amplifier drives */
	int log_sensor;			/* log every INA226 update and ADC sample */
	int log_twi;			/* log every TWI message the INA226 sees */

	/* marker pins */
	char marker_port;
	int marker_bit[RIG_MAX_MARKERS];
	int marker_count;
	uint8_t marker_state;	/* bit k = level of marker k */
	avr_irq_t *marker_irq[RIG_MAX_MARKERS];

	/* ground truth: exact integrals of the waveform under the marker states */
	rig_integral_t integ;
	FILE *log;
	uint64_t gt_period_cycles;
	uint64_t pin_changes;

	int quiet;
} rig_t;

extern rig_t g_rig;

static inline double rig_cycles_to_s(const rig_t *r, uint64_t c)
{
	return (double)c / (double)r->freq_hz;
}

static inline double rig_cycles_to_us(const rig_t *r, uint64_t c)
{
	return (double)c * 1e6 / (double)r->freq_hz;
}

/* Advance the ground-truth integrals to time t_s under the current marker state. */
void rig_integrate_to(rig_t *r, double t_s);
/* Integrals at t_s (>= the last advance) without advancing. */
void rig_integral_peek(const rig_t *r, double t_s, rig_integral_t *out);
/* Instantaneous current and bus voltage at t_s under the current marker state. */
void rig_eval(const rig_t *r, double t_s, double *current_a, double *bus_v);

/* Drive the marker pins to `state` now (cycle = when); logs the change. */
void rig_set_markers(rig_t *r, uint8_t state, uint64_t when, const char *source);

void rig_log(rig_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rig_warn(rig_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
