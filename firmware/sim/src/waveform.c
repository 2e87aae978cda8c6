/*
 * Piecewise-linear waveform: evaluation and exact integration.
 * Current and bus voltage are both linear inside a segment, so power is a
 * quadratic there and Simpson's rule integrates it exactly.
 */
#include "waveform.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void waveform_init(waveform_t *w, double bus_v)
{
	memset(w, 0, sizeof(*w));
	w->bus_v = bus_v;
}

static int cmp_point(const void *a, const void *b)
{
	const wf_point_t *pa = a, *pb = b;
	if (pa->t_s < pb->t_s)
		return -1;
	if (pa->t_s > pb->t_s)
		return 1;
	return 0;
}

/* qsort is not stable: keep the file order of points at the same time (a step) */
typedef struct { wf_point_t p; int order; } wf_tmp_t;

static int cmp_tmp(const void *a, const void *b)
{
	const wf_tmp_t *ta = a, *tb = b;
	int c = cmp_point(&ta->p, &tb->p);
	return c ? c : (ta->order - tb->order);
}

static int parse_double(const char *tok, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(tok, &end);
	if (errno || end == tok || *end || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

int waveform_load(waveform_t *w, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	double bus_default = w->bus_v > 0 ? w->bus_v : 5.0;
	waveform_init(w, bus_default);
	wf_tmp_t *tmp = NULL;
	int n = 0, cap = 0, lineno = 0;
	double period_us = 0;
	char line[512];
	int rc = -1;

	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *tok[5];
		int nt = 0;
		for (char *s = strtok(line, " \t\r\n,"); s && nt < 5; s = strtok(NULL, " \t\r\n,"))
			tok[nt++] = s;
		if (!nt)
			continue;
		if (!strcmp(tok[0], "period_us")) {
			if (nt != 2 || parse_double(tok[1], &period_us) || period_us <= 0) {
				snprintf(err, errlen, "%s:%d: want 'period_us P' with P > 0", path, lineno);
				goto out;
			}
		} else if (!strcmp(tok[0], "bus_v")) {
			if (nt != 2 || parse_double(tok[1], &w->bus_v) || w->bus_v < 0) {
				snprintf(err, errlen, "%s:%d: want 'bus_v V' with V >= 0", path, lineno);
				goto out;
			}
		} else if (!strcmp(tok[0], "state")) {
			double mask, a;
			if (nt != 3 || parse_double(tok[1], &mask) || parse_double(tok[2], &a) ||
					mask < 0 || mask > 15 || mask != floor(mask)) {
				snprintf(err, errlen, "%s:%d: want 'state MASK CURRENT_A' with MASK 0..15",
						path, lineno);
				goto out;
			}
			w->state_a[(int)mask] = a;
		} else {
			double t_us, a, v = NAN;
			if ((nt != 2 && nt != 3) || parse_double(tok[0], &t_us) ||
					parse_double(tok[1], &a) || (nt == 3 && parse_double(tok[2], &v))) {
				snprintf(err, errlen, "%s:%d: want 'T_US CURRENT_A [BUS_V]', "
						"'period_us', 'bus_v' or 'state'", path, lineno);
				goto out;
			}
			if (t_us < 0) {
				snprintf(err, errlen, "%s:%d: time must be >= 0", path, lineno);
				goto out;
			}
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				tmp = realloc(tmp, (size_t)cap * sizeof(*tmp));
			}
			tmp[n].p = (wf_point_t){ t_us * 1e-6, a, v };
			tmp[n].order = n;
			n++;
		}
	}
	qsort(tmp, (size_t)n, sizeof(*tmp), cmp_tmp);
	w->period_s = period_us * 1e-6;
	if (w->period_s > 0 && n) {
		if (tmp[0].p.t_s != 0) {
			snprintf(err, errlen, "%s: a periodic waveform must start at t = 0", path);
			goto out;
		}
		if (tmp[n - 1].p.t_s > w->period_s) {
			snprintf(err, errlen, "%s: point at %.3f us lies beyond period_us %.3f",
					path, tmp[n - 1].p.t_s * 1e6, period_us);
			goto out;
		}
	}
	w->pts = calloc((size_t)n + 1, sizeof(wf_point_t));
	for (int i = 0; i < n; i++) {
		w->pts[i] = tmp[i].p;
		if (isnan(w->pts[i].bus_v))
			w->pts[i].bus_v = w->bus_v;
	}
	w->n = n;
	if (w->period_s > 0 && n) {
		/* close the period: ramp back to the first point's values */
		w->pts[n] = w->pts[0];
		w->pts[n].t_s = w->period_s;
		w->n = n + 1;
	}
	rc = 0;
out:
	free(tmp);
	fclose(f);
	return rc;
}

/*
 * Segment containing local time u: [t_j, t_{j+1}) with linear values.
 * Returns the segment end (local time, INFINITY for the final hold) and the
 * values at both ends through the out parameters.
 */
static double segment_at(const waveform_t *w, double u, double *t0, double *i0, double *v0,
		double *i1, double *v1)
{
	const wf_point_t *p = w->pts;
	int n = w->n;
	if (n == 0) {
		*t0 = -INFINITY;
		*i0 = *i1 = 0;
		*v0 = *v1 = w->bus_v;
		return INFINITY;
	}
	if (u < p[0].t_s) {
		*t0 = -INFINITY;
		*i0 = *i1 = p[0].current_a;
		*v0 = *v1 = p[0].bus_v;
		return p[0].t_s;
	}
	/* last j with t_j <= u */
	int lo = 0, hi = n - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (p[mid].t_s <= u)
			lo = mid;
		else
			hi = mid - 1;
	}
	int j = lo;
	*t0 = p[j].t_s;
	*i0 = p[j].current_a;
	*v0 = p[j].bus_v;
	if (j == n - 1) {
		*i1 = *i0;
		*v1 = *v0;
		return INFINITY;
	}
	*i1 = p[j + 1].current_a;
	*v1 = p[j + 1].bus_v;
	return p[j + 1].t_s;
}

static double local_time(const waveform_t *w, double t, double *base)
{
	if (w->period_s <= 0) {
		*base = 0;
		return t;
	}
	double k = floor(t / w->period_s);
	double u = t - k * w->period_s;
	if (u >= w->period_s) {	/* rounding */
		k += 1;
		u = 0;
	}
	if (u < 0)
		u = 0;
	*base = k * w->period_s;
	return u;
}

static inline double lerp(double t0, double t1, double y0, double y1, double t)
{
	if (!isfinite(t0) || !isfinite(t1) || t1 <= t0)
		return y0;
	return y0 + (y1 - y0) * (t - t0) / (t1 - t0);
}

void waveform_eval(const waveform_t *w, double t_s, double *current_a, double *bus_v)
{
	double base, t0, i0, v0, i1, v1;
	double u = local_time(w, t_s, &base);
	double t1 = segment_at(w, u, &t0, &i0, &v0, &i1, &v1);
	*current_a = lerp(t0, t1, i0, i1, u);
	*bus_v = lerp(t0, t1, v0, v1, u);
}

void waveform_integrate(const waveform_t *w, double a_s, double b_s, int state,
		double *q_c, double *e_j, double *vt_vs)
{
	double extra = w->state_a[state & 15];
	double t = a_s;
	while (t < b_s) {
		double base, t0, i0, v0, i1, v1;
		double u = local_time(w, t, &base);
		double t1 = segment_at(w, u, &t0, &i0, &v0, &i1, &v1);
		double end = isfinite(t1) ? base + t1 : b_s;
		if (end > b_s)
			end = b_s;
		if (end <= t)	/* rounding at a segment edge: step past it */
			end = fmin(b_s, nextafter(t, INFINITY));
		double ua = t - base, ub = end - base, um = 0.5 * (ua + ub);
		double ia = lerp(t0, t1, i0, i1, ua) + extra;
		double ib = lerp(t0, t1, i0, i1, ub) + extra;
		double im = lerp(t0, t1, i0, i1, um) + extra;
		double va = lerp(t0, t1, v0, v1, ua);
		double vb = lerp(t0, t1, v0, v1, ub);
		double vm = lerp(t0, t1, v0, v1, um);
		double dt = end - t;
		*q_c += 0.5 * dt * (ia + ib);
		*vt_vs += 0.5 * dt * (va + vb);
		*e_j += dt / 6.0 * (ia * va + 4.0 * im * vm + ib * vb);
		t = end;
	}
}
