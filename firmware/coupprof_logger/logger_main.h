// Glue between the hardware drivers and the portable protocol engine.
#ifndef LOGGER_MAIN_H
#define LOGGER_MAIN_H

void logger_setup(void);
void logger_loop(void);

#endif
