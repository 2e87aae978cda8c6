/*
 * Virtual TI INA226 on the AVR's TWI bus: register file, I2C slave protocol,
 * conversion timing from the configuration register (CT/AVG/MODE) in simulated
 * time, readings that average the waveform over each conversion window.
 */
#ifndef COUPPROF_INA226_H
#define COUPPROF_INA226_H

#include <stdint.h>

#include "rig.h"

typedef struct ina226_t {
	rig_t *rig;
	avr_irq_t *irq;			/* [0] from the TWI master, [1] back to it */
	uint8_t addr7;

	/* register file */
	uint16_t config, cal, mask_enable, alert_limit;
	int16_t shunt;			/* 2.5 uV per LSB */
	uint16_t bus;			/* 1.25 mV per LSB */
	int16_t current;		/* shunt * cal / 2048 */
	uint16_t power;			/* current * bus / 20000 */

	/* I2C transaction */
	uint8_t ptr;
	int selected, reading, byte_idx;
	uint8_t wr_msb;
	uint16_t rd_latch;

	/* conversion sequencer */
	int running;
	int phase;				/* 0 shunt, 1 bus */
	int avg_left;
	double sum_i, sum_v;
	int n_i, n_v;
	rig_integral_t at_phase_start;
	double phase_start_s;
	uint64_t updates;

	/* optional ALERT output (conversion ready), open drain active low unless APOL */
	avr_irq_t *alert_irq;
	int alert_asserted;
} ina226_t;

/* Attach at 7-bit address addr7 to the AVR's TWI; alert_port 0 = no ALERT pin. */
void ina226_attach(ina226_t *ina, rig_t *rig, uint8_t addr7, char alert_port, int alert_bit);

/* Make the AVR's TWI take the time a real bus takes (simavr 1.6 uses 1 us per bit). */
void twi_timing_install(rig_t *rig);

#endif
