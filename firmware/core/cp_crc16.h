/* CRC-16/CCITT-FALSE: poly 0x1021, init 0xFFFF, no reflection, no final XOR.
 * Check value: cp_crc16(CP_CRC16_INIT, "123456789", 9) == 0x29B1. */
#ifndef CP_CRC16_H
#define CP_CRC16_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CP_CRC16_INIT 0xFFFFu

uint16_t cp_crc16_update(uint16_t crc, uint8_t byte);
uint16_t cp_crc16(uint16_t crc, const uint8_t *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif
