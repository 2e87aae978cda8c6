/* Where constant tables live.
 *
 * On AVR the table is placed in program memory with GCC's __flash named
 * address space (GNU C, no AVR header needed; reads stay plain C). Elsewhere
 * CP_FLASH is an ordinary const, so the same source builds on the host. */
#ifndef CP_FLASH_H
#define CP_FLASH_H

#if defined(__AVR__) && defined(__FLASH)
#define CP_FLASH const __flash
#else
#define CP_FLASH const
#endif

#endif
