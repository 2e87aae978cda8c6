// The 256-byte rings that interrupt handlers index with one register.
//
// A ring of 256 bytes at a 256-byte boundary needs no masking and no
// addition: the slot address is (page, index), and a u8 index wraps by
// itself. The rings are placed first in .data (at 0x100, the start of the
// ATmega328P's RAM, already 256-aligned) so the alignment costs no padding;
// the price is their 256 zero bytes of initial values in flash each.
#ifndef RAM_LAYOUT_H
#define RAM_LAYOUT_H

#include <stdint.h>

#include "fw_config.h"

struct ram_layout {
    uint8_t tx_buf[256]; // UART transmit ring (uart.cpp; tail in r2)
#if CP_FRONT_END == CP_FE_ID_A0
    uint8_t a0_ring[256]; // raw A0 samples, conversion handler -> main loop
#endif
    uint8_t edge_raw[64]; // raw marker edges, 8 records of 8 bytes (sampler.cpp)
    uint8_t rx_buf[64];   // UART receive ring (uart.cpp)
};

extern struct ram_layout ram;

#endif
