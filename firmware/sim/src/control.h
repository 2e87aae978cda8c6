/*
 * Control commands for the rig (stdin, the marker FIFO, a script file):
 *   pin K L        set marker K (0..3) to level L (0/1)
 *   pins MASK      set all markers at once (bit k = marker k), decimal or 0x..
 *   send HEX       bytes to the firmware's UART receiver, e.g. "send a55a8100a635"
 *   at T_US CMD    run CMD at simulated time T_US (now if T_US has passed)
 *   time           reply with the simulated time
 *   sync           flush the log, reply with the simulated time
 *   quit           stop the rig
 * Replies (stdin only): "ok T_US" or "err MESSAGE", one line per command.
 */
#ifndef COUPPROF_CONTROL_H
#define COUPPROF_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "rig.h"
#include "uart_bridge.h"

enum { CTL_OK = 0, CTL_ERR = -1, CTL_QUIT = 1 };

void control_init(rig_t *rig, uart_bridge_t *uart);
/* Execute one command line now; the reply goes to reply (may be NULL). */
int control_exec(const char *line, const char *source, char *reply, size_t rlen);
/* Load a script: lines "T_US CMD" (or "at T_US CMD"); 0 or -1 with err. */
int control_load_script(const char *path, char *err, size_t errlen);
/* Line assembler for a byte stream; calls control_exec per complete line. */
typedef struct ctl_reader_t {
	char buf[8192];
	size_t len;
	const char *source;
	int reply_fd;		/* -1: no replies */
} ctl_reader_t;
/* Feed bytes; returns CTL_QUIT if a quit command was seen. */
int control_feed(ctl_reader_t *rd, const char *data, size_t len);
int control_quit_requested(void);

#endif
