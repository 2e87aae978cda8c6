// Hand-off from the sampling ISRs to the main loop: the samples (INA226: a
// ring of cp_sample; A0: its own raw ring, frontend_a0.cpp), the marker
// edges, and the STATUS counters.
#ifndef SAMPLER_H
#define SAMPLER_H

#include <avr/io.h>
#include <stdint.h>

#include "cp_frame.h"
#include "cp_logger.h"
#include "cp_ring.h"
#include "fw_config.h"

#if CP_FRONT_END == CP_FE_ID_INA226
extern cp_ring sample_ring;
#endif
extern volatile uint32_t samples_total;
extern volatile uint32_t samples_dropped;
extern uint32_t edges_total; // main loop only

void sampler_init(void);
void sampler_reset(void); // empty the rings, zero the counters (sampling stopped)

static inline uint8_t markers_read(void)
{
    return (uint8_t)((PIND >> MARKER_SHIFT) & MARKER_MASK);
}

#if CP_FRONT_END == CP_FE_ID_INA226
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
#endif

void markers_init(void);
void markers_start(void);
void markers_stop(void);
// Main loop: the oldest marker edge, timestamped; 1 if there was one.
int markers_pop_edge(cp_edge *e);

#endif
