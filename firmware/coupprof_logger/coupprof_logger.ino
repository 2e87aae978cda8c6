// coupprof power logger for ATmega328P boards (Uno, Nano) at 16 MHz.
//
// Streams current (and bus voltage) samples and marker-pin edges to the host
// as binary frames at 2,000,000 baud; the protocol is firmware/PROTOCOL.md.
// Build with `make -C firmware` (FRONT_END ina226 or a0 is chosen at build
// time); see firmware/README.md for wiring.
//
// The Arduino core only starts the chip (init(), main()); the clock, UART,
// I2C and ADC are driven here at register level, and Timer0's millis()
// interrupt is switched off so it cannot delay the sampling interrupts.
#include <Arduino.h>

#include "logger_main.h"

void setup()
{
    logger_setup();
}

void loop()
{
    logger_loop();
}
