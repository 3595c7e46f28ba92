/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for cron expressions (er_cron_parse, src/core/cron.h).
 * A refused expression names "cron" and leaves the output untouched; an
 * accepted one has every field within its range, and its next fire times in
 * UTC (er_cron_next_n) from two start instants rise, fall on whole seconds
 * and match the expression, the first with no earlier match after the start
 * when the gap is short enough to scan.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cron.h"
#include "util/tz.h"
#include "util/err.h"

#define T0 1764460800000LL /* 2025-11-30T00:00:00Z */
#define NEXT 5

/* The expression's verdict on instant t (seconds, UTC), from gmtime_r. */
static bool matches(const er_cron *c, int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm))
        abort();
    bool dm = (c->dom >> tm.tm_mday) & 1, wm = (c->dow >> tm.tm_wday) & 1;
    bool day = c->dom_restricted && c->dow_restricted ? dm || wm : dm && wm;
    return day && ((c->seconds >> tm.tm_sec) & 1) && ((c->minutes >> tm.tm_min) & 1) &&
           ((c->hours >> tm.tm_hour) & 1) && ((c->months >> (tm.tm_mon + 1)) & 1);
}

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

static void check_next(const er_cron *c, const er_tz *utc, int64_t after)
{
    int64_t out[NEXT];
    er_error err = {0};
    if (er_cron_next_n(c, utc, after, NEXT, out, &err) < 0) {
        if (err.code != ER_EINVAL || strcmp(err.field, "cron") != 0)
            abort();
        return;
    }
    int64_t prev = after;
    for (int i = 0; i < NEXT; i++) {
        if (out[i] <= prev || out[i] % 1000 != 0 || !matches(c, out[i] / 1000))
            abort();
        prev = out[i];
    }
    /* No match was skipped before the first fire (scan short gaps only). */
    int64_t step = c->has_seconds ? 1 : 60;
    int64_t from = -floor_div(-(floor_div(after, 1000) + 1), step) * step; /* round up */
    if ((out[0] / 1000 - from) / step <= 2000)
        for (int64_t t = from; t < out[0] / 1000; t += step)
            if (matches(c, t))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const er_tz *utc; /* built in: no file is read */
    if (!utc && er_tz_get(NULL, &utc, NULL) < 0)
        abort();
    char *expr = malloc(size + 1);
    if (!expr)
        return 0;
    memcpy(expr, data, size);
    expr[size] = '\0';
    er_cron c, before;
    memset(&c, 0xa5, sizeof c);
    before = c;
    er_error err = {0};
    if (er_cron_parse(expr, &c, &err) < 0) {
        if (err.code != ER_EINVAL || strcmp(err.field, "cron") != 0 || !err.message[0] ||
            memcmp(&c, &before, sizeof c) != 0)
            abort();
        free(expr);
        return 0;
    }
    if (!c.seconds || c.seconds >> 60 || (!c.has_seconds && c.seconds != 1) || !c.minutes ||
        c.minutes >> 60 || !c.hours || c.hours >> 24 || !(c.dom & ~1u) || (c.dom & 1) ||
        !(c.months & 0x1ffe) || (c.months & ~0x1ffe) || !c.dow || c.dow >> 7)
        abort();
    /* A start instant from the input's hash, in years 1..about 9000. */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    int64_t span = 250000000000000LL;
    int64_t start = (int64_t)(h % (uint64_t)span) - 62135596800000LL;
    check_next(&c, utc, T0);
    check_next(&c, utc, start);
    free(expr);
    return 0;
}
