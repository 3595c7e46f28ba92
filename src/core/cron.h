/* SPDX-License-Identifier: MIT
 *
 * Cron expressions and their next fire instants in IANA time zones. Pure
 * logic: the "from" instant is always an argument, no clock is read, and no
 * file: the caller passes a zone parsed by util/tz.h (er_tz_get). Compiled
 * expressions and zones are immutable, so any number of threads may share
 * them. The DST policy is described at er_cron_next and in docs/cron.md.
 */
#ifndef ER_CORE_CRON_H
#define ER_CORE_CRON_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"
#include "util/tz.h"

/* A compiled cron expression: one bitset per field (bit n set = value n
 * matches). Plain data: copy it freely. */
typedef struct er_cron {
    uint64_t seconds; /* bits 0..59; only bit 0 unless has_seconds */
    uint64_t minutes; /* bits 0..59 */
    uint32_t hours;   /* bits 0..23 */
    uint32_t dom;     /* bits 1..31 */
    uint16_t months;  /* bits 1..12 */
    uint8_t dow;      /* bits 0..6, 0 = Sunday (7 in the text is folded to 0) */
    bool dom_restricted; /* day-of-month field does not start with '*' */
    bool dow_restricted; /* day-of-week field does not start with '*' */
    bool hour_star;      /* hour field starts with '*' ("*" or "*" + step):
                            the schedule follows real time across DST shifts */
    bool has_seconds;    /* six fields were given */
} er_cron;

/* Parses a cron expression: 5 fields (min hour dom month dow), 6 fields
 * (sec min hour dom month dow) or one of @yearly @annually @monthly @weekly
 * @daily @midnight @hourly. expr: copied. On success fills *out and returns
 * 0. On failure returns ER_EINVAL with err->field "cron" and a message that
 * names the field and the problem ("hour: 24 is out of range 0..23");
 * *out is untouched. Thread-safe. */
int er_cron_parse(const char *expr, er_cron *out, er_error *err);

/* UTC offset in seconds (east positive) in effect in tz at t (seconds since
 * the epoch, UTC, within years 1..9999): the zone's table, then its footer
 * rule. tz: borrowed for the call. Thread-safe; does not block. */
int32_t er_tz_offset(const er_tz *tz, int64_t t);

/* How far ahead er_cron_next looks before giving up: 9 years, enough for
 * Feb 29 across a skipped century leap year (2096-02-29 -> 2104-02-29). */
#define ER_CRON_HORIZON_S ((int64_t)9 * 366 * 86400)

/* The first fire instant strictly after after_ms (ms since the epoch, UTC),
 * in whole seconds, written to *next_ms. c, tz: borrowed for the call.
 * DST policy (the classic cron daemons' one):
 *  - hour field starting with '*' (c->hour_star): follows real time. Fires
 *    at every instant whose local wall time matches, so both passes of a
 *    repeated (fall-back) hour fire, and nothing fires for wall times that a
 *    spring-forward gap skips.
 *  - specific hours: fires once per matching local wall time. A wall time
 *    that does not exist fires at the first instant after the gap (several
 *    such in one gap fire once); one that happens twice fires at its first
 *    occurrence only.
 * Returns 0, or ER_EINVAL (field "cron") when nothing fires within
 * ER_CRON_HORIZON_S (e.g. "0 0 30 2 *"). Thread-safe; does not block. */
int er_cron_next(const er_cron *c, const er_tz *tz, int64_t after_ms, int64_t *next_ms,
                 er_error *err);

/* The next count fire instants after after_ms, in order, into out[count].
 * Returns 0 or the first error of er_cron_next (out partly written). */
int er_cron_next_n(const er_cron *c, const er_tz *tz, int64_t after_ms, int count,
                   int64_t *out, er_error *err);

#endif
