#include "ram_layout.h"

// Plain ".data" (every other variable is in its own .data.* or .bss.*
// section with -fdata-sections): the linker script puts *(.data) first.
struct ram_layout ram __attribute__((section(".data"), aligned(256)));
