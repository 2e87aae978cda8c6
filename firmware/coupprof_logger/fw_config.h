// Build-time configuration of the logger firmware. Every value can be
// overridden with -D on the compiler command line (the Makefile passes
// CP_FRONT_END for each variant).
#ifndef FW_CONFIG_H
#define FW_CONFIG_H

#define CP_FE_ID_INA226 1
#define CP_FE_ID_A0 2

// Front end: CP_FE_ID_INA226 (INA226 over I2C) or CP_FE_ID_A0 (shunt amp on A0).
#ifndef CP_FRONT_END
#define CP_FRONT_END CP_FE_ID_INA226
#endif

#define FW_VERSION "1.0.0"

// Marker inputs: D2..D5 = PD2..PD5 (PCINT18..21). Bit k of `markers` = D(2+k).
#define MARKER_COUNT 4
#define MARKER_SHIFT 2
#define MARKER_MASK 0x0F
// 1 = enable the AVR's internal pull-ups on the marker pins (unconnected
// inputs then read 1). Off by default: a 3.3 V board driving the pins would be
// back-fed through them.
#ifndef MARKER_PULLUPS
#define MARKER_PULLUPS 0
#endif

// Supply voltage assumed when the bus is not measured (IDENT bus_nominal_mV).
#ifndef BUS_NOMINAL_MV
#define BUS_NOMINAL_MV 5000
#endif

// ---- INA226 front end ----
#ifndef INA226_ADDR
#define INA226_ADDR 0x40
#endif
// Shunt on the module (common INA226 breakouts carry 0.1 ohm, "R100").
#ifndef INA226_SHUNT_UOHM
#define INA226_SHUNT_UOHM 100000UL
#endif
// I2C clock while streaming. 1 MHz is the ATmega328P's fastest (F_CPU/16) and
// is entered through the INA226's high-speed mode (master code 0x08 first, no
// STOP until streaming ends). 400000 = plain fast mode, slower sample rates.
#ifndef INA226_TWI_HZ
#define INA226_TWI_HZ 1000000UL
#endif
#ifndef INA226_DEFAULT_RATE_HZ
#define INA226_DEFAULT_RATE_HZ 3571UL
#endif

// ---- A0 front end ----
// Current-sense amplifier output on A0, ADC reference AVcc.
#ifndef A0_VREF_MV
#define A0_VREF_MV 5000ULL
#endif
#ifndef A0_SHUNT_UOHM
#define A0_SHUNT_UOHM 100000ULL
#endif
#ifndef A0_GAIN
#define A0_GAIN 50ULL
#endif
// 12,821 S/s = ADC clock F_CPU/32 (500 kHz, a conversion every 26 us), each
// sample the mean of 3 conversions (README: cycle budget).
#ifndef A0_DEFAULT_RATE_HZ
#define A0_DEFAULT_RATE_HZ 12820UL
#endif
// Highest rate SET_RATE offers (the next faster setting, 19,231 S/s, would
// need 99 % of the line).
#ifndef A0_MAX_RATE_HZ
#define A0_MAX_RATE_HZ 13000UL
#endif
// Test builds only: 1 = the bus field of each A0 sample carries the
// conversion handler's raw TCNT1 note, 2 = how often the grid moved by whole
// conversions (firmware/README.md: calibrating A0_NOTE_TICKS_*).
#ifndef A0_DEBUG_BUS
#define A0_DEBUG_BUS 0
#endif
// nA per ADC count = (Vref / 1024) / (gain * R)
#define A0_CURRENT_LSB_NA \
    ((A0_VREF_MV * 1000000000000ULL / 1024ULL + (A0_GAIN * A0_SHUNT_UOHM) / 2ULL) / (A0_GAIN * A0_SHUNT_UOHM))

#endif
