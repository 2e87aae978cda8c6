/* Where constant tables live.
 *
 * On AVR the table is placed in program memory with GCC's __flash named
 * address space (GNU C, no AVR header needed; reads stay plain C). Elsewhere
 * CP_FLASH is an ordinary const, so the same source builds on the host.
 * CP_ALIGN256 aligns a table to 256 bytes on AVR (a loop can then index it
 * by loading ZL alone). */
#ifndef CP_FLASH_H
#define CP_FLASH_H

#if defined(__AVR__) && defined(__FLASH)
#define CP_FLASH const __flash
#define CP_ALIGN256 __attribute__((aligned(256)))
#else
#define CP_FLASH const
#define CP_ALIGN256
#endif

#endif
