/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the TZif parser (er_tz_parse, util/tz.h): bytes as a
 * zone file. A refused input must name field "tz", return no zone and a real
 * code. An accepted zone must keep the guarantees tz.h states, and core must
 * be able to use it: offsets at assorted instants (before, at and after
 * transitions, past the table where the footer rule applies) stay in range
 * and agree with the table, and next fires of a few cron expressions come
 * strictly after their start, on whole seconds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cron.h"
#include "util/tz.h"

/* Seconds since the epoch of 0001-01-01 and 9999-12-31T23:59:59Z, and the
 * latest start er_cron_next accepts (ms). */
#define T_MIN (-62135596800LL)
#define T_MAX (253402300799LL)
#define NEXT_MAX_MS (253402300799999LL - ER_CRON_HORIZON_S * 1000)

static int64_t clamp(int64_t t)
{
    return t < T_MIN ? T_MIN : t > T_MAX ? T_MAX : t;
}

/* t + d, clamped to years 1..9999 (t comes from the file: any int64). */
static int64_t plus(int64_t t, int64_t d)
{
    int64_t r;
    if (__builtin_add_overflow(t, d, &r))
        r = d < 0 ? INT64_MIN : INT64_MAX;
    return clamp(r);
}

static void check_offset(const er_tz *tz, int64_t t)
{
    t = clamp(t);
    int32_t off = er_tz_offset(tz, t);
    if (off < -ER_TZ_MAX_OFF || off > ER_TZ_MAX_OFF)
        abort();
}

static void check_next(const er_cron *c, const er_tz *tz, int64_t after_s)
{
    int64_t after = clamp(after_s) * 1000 + 500;
    if (after > NEXT_MAX_MS)
        after = NEXT_MAX_MS;
    int64_t next = 0;
    er_error err = {0};
    int rc = er_cron_next(c, tz, after, &next, &err);
    if (rc == 0 && (next <= after || next % 1000 != 0))
        abort();
    if (rc < 0 && (rc != ER_EINVAL || strcmp(err.field, "cron") != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    er_tz *tz = NULL;
    er_error err = {0};
    int rc = er_tz_parse("Fuzz/Zone", data, size, &tz, &err);
    if (rc < 0) {
        if (tz || err.code != rc || (rc != ER_EINVAL && rc != ER_ENOMEM) ||
            strcmp(err.field, "tz") != 0)
            abort();
        return 0;
    }
    /* the guarantees of tz.h */
    if (strcmp(er_tz_name(tz), "Fuzz/Zone") != 0 || tz->ntypes < 1 || tz->ntrans < 0)
        abort();
    for (int32_t i = 0; i < tz->ntypes; i++)
        if (tz->utoff[i] < -ER_TZ_MAX_OFF || tz->utoff[i] > ER_TZ_MAX_OFF)
            abort();
    for (int32_t i = 0; i < tz->ntrans; i++)
        if (tz->idx[i] >= tz->ntypes || (i > 0 && tz->at[i] <= tz->at[i - 1]))
            abort();
    if (tz->has_rule && (tz->std_off < -ER_TZ_MAX_OFF || tz->std_off > ER_TZ_MAX_OFF ||
                         tz->dst_off < -ER_TZ_MAX_OFF || tz->dst_off > ER_TZ_MAX_OFF))
        abort();

    /* offsets: fixed instants, and around a few transitions */
    static const int64_t fixed[] = {T_MIN,       -2208988800LL, -1,         0,
                                    1,           1000000000LL,  2147483647LL, 2147483648LL,
                                    4102444800LL, 32503680000LL, T_MAX};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_offset(tz, fixed[i]);
    int32_t picks[] = {0, tz->ntrans / 2, tz->ntrans - 1};
    for (int k = 0; k < 3 && tz->ntrans > 0; k++) {
        int32_t i = picks[k];
        int64_t t = tz->at[i];
        check_offset(tz, plus(t, -1));
        check_offset(tz, t);
        check_offset(tz, plus(t, 1));
        /* inside the table the offset is the table's */
        if (t >= T_MIN && t <= T_MAX && i + 1 < tz->ntrans &&
            er_tz_offset(tz, t) != tz->utoff[tz->idx[i]])
            abort();
        if (i == 0 && t > T_MIN && t - 1 <= T_MAX && er_tz_offset(tz, t - 1) != tz->utoff[0])
            abort();
    }

    /* next fires in the zone */
    static const char *const exprs[] = {"0 * * * *", "30 2 * * *", "*/20 * * * *",
                                        "0 0 29 2 *"};
    for (size_t e = 0; e < sizeof exprs / sizeof exprs[0]; e++) {
        er_cron c;
        if (er_cron_parse(exprs[e], &c, NULL) < 0)
            abort();
        check_next(&c, tz, 0);
        check_next(&c, tz, 1774000000LL); /* 2026-03 */
        check_next(&c, tz, 4102444800LL); /* 2100, past most tables */
        if (tz->ntrans > 0) {
            check_next(&c, tz, plus(tz->at[0], -3600));
            check_next(&c, tz, plus(tz->at[tz->ntrans - 1], -60));
        }
    }
    er_tz_free(tz);
    return 0;
}
