/* SPDX-License-Identifier: MIT
 *
 * Listen addresses, shared by every frontend that opens a port (HTTP,
 * Faktory): reading "HOST:PORT" / "[IPv6]:PORT", resolving a host name once,
 * and the one rule that a port off loopback needs tokens, checked before
 * binding and again on the address bound. Blocking (getaddrinfo) at
 * start-up only.
 */
#ifndef ER_SERVER_HTTP_LISTEN_H
#define ER_SERVER_HTTP_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "util/err.h"

/* Reads listen into host (a numeric address, resolved when it was a name)
 * and *port, and refuses (ER_EINVAL, field `field`) a non-loopback host
 * when ntokens is 0. */
int er_listen_prepare(const char *listen, size_t ntokens, const char *field, char *host,
                      size_t hcap, int *port, er_error *err);

/* True for 127.0.0.0/8, ::1 and ::ffff:127.x.y.z. */
bool er_sockaddr_is_loopback(const struct sockaddr_storage *ss);

/* The bound address of fd as "HOST:PORT" ("[v6]:PORT") into out, *port and
 * *loopback, refusing (ER_EINVAL) a non-loopback one when ntokens is 0. */
int er_listen_bound(int fd, size_t ntokens, const char *field, char *out, size_t cap, int *port,
                    bool *loopback, er_error *err);

#endif
