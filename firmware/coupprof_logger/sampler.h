// Hand-off from the sampling ISRs to the main loop: a ring of samples, a
// ring of marker edges, and the STATUS counters. The front end's ISR is the
// only producer of samples, the pin-change ISR the only producer of edges.
#ifndef SAMPLER_H
#define SAMPLER_H

#include <avr/io.h>
#include <stdint.h>

#include "cp_frame.h"
#include "cp_logger.h"
#include "cp_ring.h"
#include "fw_config.h"

extern cp_ring sample_ring;
extern cp_ring edge_ring;
extern volatile uint32_t samples_total;
extern volatile uint32_t samples_dropped;
extern volatile uint32_t edges_total;

void sampler_init(void);
void sampler_reset(void); // empty the rings, zero the counters (sampling stopped)

static inline uint8_t markers_read(void)
{
    return (uint8_t)((PIND >> MARKER_SHIFT) & MARKER_MASK);
}

// From the sampling ISR: queue one sample, or count it dropped; never waits.
static inline void sampler_push(const cp_sample *s)
{
    samples_total++;
    if (!cp_ring_put(&sample_ring, s, (uint8_t)sizeof *s)) {
        samples_dropped++;
    }
}

// From the sampling ISR: a conversion was lost (counted as taken, not sent).
static inline void sampler_missed(void)
{
    samples_total++;
    samples_dropped++;
}

void markers_init(void);
void markers_start(void);
void markers_stop(void);

#endif
