/* SPDX-License-Identifier: MIT
 *
 * systemd's notification protocol (sd_notify(3)) for errand serve: one
 * datagram per state change to the AF_UNIX socket in $NOTIFY_SOCKET (a
 * path, or "@name" in the abstract namespace), written by hand: it is one
 * sendto, and libsystemd would be a dependency for that alone.
 */
#ifndef ER_CLI_SDNOTIFY_H
#define ER_CLI_SDNOTIFY_H

#include <stdint.h>

/* Sends `msg` ("READY=1", "STOPPING=1", "WATCHDOG=1") to $NOTIFY_SOCKET.
 * 0 sent, 1 when NOTIFY_SOCKET is unset (not under systemd), -1 when it
 * could not be sent (the reason in why[128]). Never blocks. */
int er_sd_notify(const char *msg, char why[128]);

/* The watchdog interval systemd asks for (WatchdogSec=): WATCHDOG_USEC in
 * microseconds when set for this process (WATCHDOG_PID unset or ours), 0
 * when unset or for another process, -1 when malformed. */
int64_t er_sd_watchdog_usec(void);

#endif
