/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's queue of pending ack items as JSON text, bounded in
 * bytes and items: push, take a batch from the front, put a batch back in
 * front, and write the items as a JSON array into util's er_buf. Items are
 * written by the worker with util's escaper (er_json_str). Pure: no I/O,
 * no locks, no clock.
 */
#ifndef ER_CLIENT_ACKQ_H
#define ER_CLIENT_ACKQ_H

#include <stddef.h>

#include "util/buf.h"

/* ---- pending ack items -------------------------------------------------------- */

/* Ack items as JSON text, each followed by ',' in buf; ends[i] is the
 * offset just after item i's comma. All zero is an empty queue. At most
 * ER_ACKQ_MAX_BYTES of text and ER_ACKQ_MAX_ITEMS items. */
#define ER_ACKQ_MAX_BYTES ((size_t)1 << 31)
#define ER_ACKQ_MAX_ITEMS ((size_t)1 << 20)
typedef struct er_ackq {
    char *buf;
    size_t len, cap;
    size_t *ends;
    size_t n, ncap;
} er_ackq;

void er_ackq_fini(er_ackq *q);
/* Appends one item (copied); ERRAND_ENOMEM (out of memory, or past the
 * limits) leaves q as it was. */
int er_ackq_push(er_ackq *q, const char *item, size_t len);
/* Moves the first min(max, n) items of q into *out (max > 0; *out is
 * overwritten, so pass an empty one); ERRAND_ENOMEM changes nothing. */
int er_ackq_take(er_ackq *q, size_t max, er_ackq *out);
/* Puts the items of *front before those of q and empties *front;
 * ERRAND_ENOMEM changes neither. */
int er_ackq_prepend(er_ackq *q, er_ackq *front);
/* Item i's text and length (without its comma). */
const char *er_ackq_item(const er_ackq *q, size_t i, size_t *len);
/* Appends the items as a JSON array ("[a,b]") to b; 0 or b's error. */
int er_ackq_write(const er_ackq *q, er_buf *b);
#endif
