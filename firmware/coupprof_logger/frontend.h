// The current (and bus voltage) front end chosen at build time.
#ifndef FRONTEND_H
#define FRONTEND_H

#include <stdint.h>

#include "cp_frame.h"

// Fills the IDENT fields the front end decides (front_end, flags, rate,
// calibration defaults); returns the shunt-register LSB in nV (0 if none).
uint32_t fe_init(cp_ident *id);
uint32_t fe_set_rate(uint32_t req_hz);
// Start sampling into the sampler rings; 0 if the hardware did not answer.
int fe_start(void);
// Stop sampling; returns once no ISR will queue another sample.
void fe_stop(void);
// Main-loop housekeeping while streaming (INA226: recover a stuck alert).
void fe_poll(void);
// Main loop: the oldest queued sample, finished (the ISR may queue a raw
// form to stay short); 1 if there was one.
int fe_pop_sample(cp_sample *s);
// Main loop, front ends with a fast path (A0): cp_logger_ops.pop_samples.
uint8_t fe_pop_samples(uint8_t *out, uint8_t max, uint32_t *t0_us, uint8_t first);
// Main loop, A0: cp_logger_ops.send_samples.
uint8_t fe_send_samples(uint16_t seq);

#endif
