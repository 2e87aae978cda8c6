/*
 * Piecewise-linear current / bus-voltage waveform in simulated time, optionally
 * periodic, plus a table of extra current per marker-pin state.
 * File format: see firmware/sim/README.md ("Waveform file").
 */
#ifndef COUPPROF_WAVEFORM_H
#define COUPPROF_WAVEFORM_H

#include <stddef.h>

typedef struct wf_point_t {
	double t_s;
	double current_a;
	double bus_v;
} wf_point_t;

typedef struct waveform_t {
	wf_point_t *pts;	/* sorted by t_s; periodic: an extra closing point at t = period */
	int n;				/* points including the closing one */
	double period_s;	/* 0 = not periodic */
	double bus_v;		/* bus voltage when the file gives no points */
	double state_a[16];	/* extra current while the marker pins read this state */
} waveform_t;

/* Constant waveform: no points, 0 A on the table, bus at bus_v. */
void waveform_init(waveform_t *w, double bus_v);
/* Parse a waveform file; returns 0, or -1 with a message in err. */
int waveform_load(waveform_t *w, const char *path, char *err, size_t errlen);
/* Base waveform (without the state table) at time t_s. */
void waveform_eval(const waveform_t *w, double t_s, double *current_a, double *bus_v);
/*
 * Exact integrals over [a_s, b_s] with the marker state fixed: adds the charge
 * (A*s), the energy (J) and the integral of bus voltage (V*s).
 */
void waveform_integrate(const waveform_t *w, double a_s, double b_s, int state,
		double *q_c, double *e_j, double *vt_vs);

#endif
