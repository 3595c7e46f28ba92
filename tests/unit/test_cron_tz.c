/* SPDX-License-Identifier: MIT
 *
 * Next-fire times in IANA zones across DST transitions, against answers
 * worked out by hand and checked with `TZ=ZONE date -d @...`: New York
 * (2026-03-08 02:00->03:00, 2026-11-01 02:00->01:00), London, Lord Howe
 * (half-hour DST), Ho Chi Minh (no DST), month ends, leap days, the footer
 * rule past the zone table, speed and thread sharing. Zones come from
 * util's cache (er_tz_get; loading itself is tested in test_tz.c). Needs
 * the system tz database (Debian tzdata).
 */
#include "core/cron.h"
#include "util/clock.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t at(const char *rfc3339)
{
    int64_t ms;
    cr_assert_eq(er_time_parse(rfc3339, &ms), 0, "bad time %s", rfc3339);
    return ms;
}

static const er_tz *zone(const char *name)
{
    const er_tz *tz = NULL;
    er_error err = {0};
    cr_assert_eq(er_tz_get(name, &tz, &err), 0, "%s: %s", name, err.message);
    return tz;
}

/* Checks the next n fires of expr in zone after `from` against want[] (UTC). */
static void expect(const char *zname, const char *expr, const char *from, int n,
                   const char *const *want)
{
    er_cron c;
    er_error err = {0};
    cr_assert_eq(er_cron_parse(expr, &c, &err), 0, "%s", err.message);
    const er_tz *tz = zone(zname);
    int64_t out[16];
    cr_assert_eq(er_cron_next_n(&c, tz, at(from), n, out, &err), 0, "%s", err.message);
    for (int i = 0; i < n; i++) {
        char got[32];
        er_time_format(out[i], got);
        cr_assert_str_eq(got, want[i], "%s in %s from %s, fire %d", expr, zname, from, i);
    }
}

#define EXPECT(zone, expr, from, ...)                                                         \
    do {                                                                                      \
        const char *const w_[] = {__VA_ARGS__};                                               \
        expect(zone, expr, from, (int)(sizeof w_ / sizeof w_[0]), w_);                        \
    } while (0)

#define NY "America/New_York"
#define LON "Europe/London"
#define LHI "Australia/Lord_Howe"

/* ---- New York, spring forward: 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z) ---- */

Test(tz_new_york, fixed_time_in_the_gap_fires_once_after_it)
{
    /* 02:30 does not exist on Mar 8: fires at 03:00 EDT = 07:00Z, then
     * 02:30 EDT on Mar 9 = 06:30Z. */
    EXPECT(NY, "30 2 * * *", "2026-03-07T12:00:00Z", "2026-03-08T07:00:00.000Z",
           "2026-03-09T06:30:00.000Z");
    EXPECT(NY, "30 2 * * *", "2026-03-08T06:59:59Z", "2026-03-08T07:00:00.000Z");
}

Test(tz_new_york, two_times_in_the_gap_fire_once)
{
    /* 02:00 and 02:30 both fall in the gap: one fire at 07:00Z. */
    EXPECT(NY, "0,30 2 * * *", "2026-03-08T00:00:00Z", "2026-03-08T07:00:00.000Z",
           "2026-03-09T06:00:00.000Z");
    EXPECT(NY, "30 30 2 * * *", "2026-03-08T00:00:00Z", "2026-03-08T07:00:00.000Z");
}

Test(tz_new_york, wildcard_hour_skips_the_gap)
{
    /* 01:30 EST = 06:30Z, then the clock shows 03:00 EDT = 07:00Z. */
    EXPECT(NY, "*/30 * * * *", "2026-03-08T06:15:00Z", "2026-03-08T06:30:00.000Z",
           "2026-03-08T07:00:00.000Z", "2026-03-08T07:30:00.000Z");
    EXPECT(NY, "*/20 * * * * *", "2026-03-08T06:59:50Z", "2026-03-08T07:00:00.000Z",
           "2026-03-08T07:00:20.000Z");
}

/* ---- New York, fall back: 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z) ---- */

Test(tz_new_york, fixed_time_in_the_repeated_hour_fires_at_the_first)
{
    /* 01:30 happens at 05:30Z (EDT) and 06:30Z (EST): fires at 05:30Z only,
     * then 01:30 EST on Nov 2 = 06:30Z. */
    EXPECT(NY, "30 1 * * *", "2026-10-31T12:00:00Z", "2026-11-01T05:30:00.000Z",
           "2026-11-02T06:30:00.000Z");
    /* Starting inside the second pass does not fire the repeat either. */
    EXPECT(NY, "30 1 * * *", "2026-11-01T06:10:00Z", "2026-11-02T06:30:00.000Z");
}

Test(tz_new_york, fixed_time_after_the_repeated_hour_fires_once)
{
    /* 02:30 exists once on Nov 1 (EST, 07:30Z). */
    EXPECT(NY, "30 2 * * *", "2026-10-31T12:00:00Z", "2026-11-01T07:30:00.000Z",
           "2026-11-02T07:30:00.000Z");
}

Test(tz_new_york, wildcard_hour_fires_in_both_passes)
{
    /* 01:00 EDT, 01:30 EDT, 01:00 EST, 01:30 EST, 02:00 EST. */
    EXPECT(NY, "*/30 * * * *", "2026-11-01T04:45:00Z", "2026-11-01T05:00:00.000Z",
           "2026-11-01T05:30:00.000Z", "2026-11-01T06:00:00.000Z", "2026-11-01T06:30:00.000Z",
           "2026-11-01T07:00:00.000Z");
}

Test(tz_new_york, month_ends_leap_days_and_future_rules)
{
    /* Day 31 skips June, September and November; midnight EDT is 04:00Z. */
    EXPECT(NY, "0 0 31 * *", "2026-04-01T00:00:00Z", "2026-05-31T04:00:00.000Z",
           "2026-07-31T04:00:00.000Z", "2026-08-31T04:00:00.000Z", "2026-10-31T04:00:00.000Z",
           "2026-12-31T05:00:00.000Z");
    /* Feb 29 only in leap years; midnight EST is 05:00Z. */
    EXPECT(NY, "0 0 29 2 *", "2026-01-01T00:00:00Z", "2028-02-29T05:00:00.000Z",
           "2032-02-29T05:00:00.000Z");
    /* Last day of February, either kind of year. */
    EXPECT(NY, "0 12 28,29 2 *", "2027-02-28T18:00:00Z", "2028-02-28T17:00:00.000Z",
           "2028-02-29T17:00:00.000Z");
    /* 2045 is past the zone table on some systems: the footer rule
     * (second Sunday of March) gives 2045-03-12 02:00 -> 03:00 EDT. */
    EXPECT(NY, "30 2 * * *", "2045-03-11T12:00:00Z", "2045-03-12T07:00:00.000Z",
           "2045-03-13T06:30:00.000Z");
}

Test(tz_new_york, hourly_over_2026_fires_8760_times)
{
    /* Local year 2026 runs from 2026-01-01T05:00Z to 2027-01-01T05:00Z (EST
     * at both ends): 365 * 24 = 8760 real hours, and every real hour starts
     * at a local :00 because the offsets are whole hours. Spring forward
     * removes the 02:00 wall hour (no fire is invented for it) and fall back
     * shows 01:00 twice (both fire), so the count is 8760 - 1 + 1 = 8760. */
    er_cron c;
    cr_assert_eq(er_cron_parse("0 * * * *", &c, NULL), 0);
    const er_tz *tz = zone(NY);
    int64_t t = at("2026-01-01T05:00:00Z") - 1, end = at("2027-01-01T05:00:00Z");
    int count = 0, on_mar8 = 0, on_nov1 = 0;
    int64_t mar8 = at("2026-03-08T05:00:00Z"), mar9 = at("2026-03-09T04:00:00Z");
    int64_t nov1 = at("2026-11-01T04:00:00Z"), nov2 = at("2026-11-02T05:00:00Z");
    for (;;) {
        int64_t next;
        cr_assert_eq(er_cron_next(&c, tz, t, &next, NULL), 0);
        if (next >= end)
            break;
        cr_assert_gt(next, t);
        cr_assert_eq(next % 3600000, 0, "not on an hour");
        count++;
        on_mar8 += next >= mar8 && next < mar9;
        on_nov1 += next >= nov1 && next < nov2;
        t = next;
    }
    cr_assert_eq(count, 8760);
    cr_assert_eq(on_mar8, 23, "local day 2026-03-08 is 23 hours long");
    cr_assert_eq(on_nov1, 25, "local day 2026-11-01 is 25 hours long");
}

/* ---- London: 2026-03-29 01:00 GMT -> 02:00 BST, 2026-10-25 02:00 BST -> 01:00 GMT ---- */

Test(tz_london, gap_and_repeat)
{
    /* 01:30 on Mar 29 does not exist: fires at 02:00 BST = 01:00Z. */
    EXPECT(LON, "30 1 * * *", "2026-03-28T12:00:00Z", "2026-03-29T01:00:00.000Z",
           "2026-03-30T00:30:00.000Z");
    /* 01:30 on Oct 25 happens twice: first at 01:30 BST = 00:30Z. */
    EXPECT(LON, "30 1 * * *", "2026-10-24T12:00:00Z", "2026-10-25T00:30:00.000Z",
           "2026-10-26T01:30:00.000Z");
    /* Hourly follows real time: 01:00 BST (00:00Z), 01:00 GMT (01:00Z), 02:00 GMT. */
    EXPECT(LON, "0 * * * *", "2026-10-24T23:30:00Z", "2026-10-25T00:00:00.000Z",
           "2026-10-25T01:00:00.000Z", "2026-10-25T02:00:00.000Z");
}

/* ---- Lord Howe: 2026-04-05 02:00 (+11) -> 01:30 (+10:30),
 *      2026-10-04 02:00 (+10:30) -> 02:30 (+11) ---- */

Test(tz_lord_howe, half_hour_fall_back)
{
    /* 01:45 happens at 14:45Z (+11) and 15:15Z (+10:30): the first fires. */
    EXPECT(LHI, "45 1 * * *", "2026-04-04T12:00:00Z", "2026-04-04T14:45:00.000Z",
           "2026-04-05T15:15:00.000Z");
    /* Quarter-hours follow real time: 01:30 and 01:45 (+11), 01:30 and
     * 01:45 (+10:30), then 02:00 (+10:30). */
    EXPECT(LHI, "*/15 * * * *", "2026-04-04T14:20:00Z", "2026-04-04T14:30:00.000Z",
           "2026-04-04T14:45:00.000Z", "2026-04-04T15:00:00.000Z", "2026-04-04T15:15:00.000Z",
           "2026-04-04T15:30:00.000Z");
}

Test(tz_lord_howe, half_hour_spring_forward)
{
    /* 02:15 on Oct 4 does not exist: fires at 02:30 (+11) = 15:30Z. */
    EXPECT(LHI, "15 2 * * *", "2026-10-03T12:00:00Z", "2026-10-03T15:30:00.000Z",
           "2026-10-04T15:15:00.000Z");
    /* Hourly: 01:00 (+10:30) = 14:30Z, no 02:00, then 03:00 (+11) = 16:00Z. */
    EXPECT(LHI, "0 * * * *", "2026-10-03T14:00:00Z", "2026-10-03T14:30:00.000Z",
           "2026-10-03T16:00:00.000Z");
    /* :30 hourly: 01:30 (+10:30) = 15:00Z, then 02:30 (+11) is the first
     * instant after the gap = 15:30Z. */
    EXPECT(LHI, "30 * * * *", "2026-10-03T14:40:00Z", "2026-10-03T15:00:00.000Z",
           "2026-10-03T15:30:00.000Z", "2026-10-03T16:30:00.000Z");
}

Test(tz_ho_chi_minh, fixed_offset_all_year)
{
    EXPECT("Asia/Ho_Chi_Minh", "0 9 * * *", "2026-06-01T00:00:00Z", "2026-06-01T02:00:00.000Z",
           "2026-06-02T02:00:00.000Z");
    EXPECT("Asia/Ho_Chi_Minh", "@yearly", "2026-06-01T00:00:00Z", "2026-12-31T17:00:00.000Z");
}

Test(tz_offsets, offsets_match_known_instants)
{
    const er_tz *tz = zone(NY);
    cr_assert_eq(er_tz_offset(tz, at("2026-03-08T06:59:59Z") / 1000), -5 * 3600);
    cr_assert_eq(er_tz_offset(tz, at("2026-03-08T07:00:00Z") / 1000), -4 * 3600);
    cr_assert_eq(er_tz_offset(tz, at("2026-11-01T05:59:59Z") / 1000), -4 * 3600);
    cr_assert_eq(er_tz_offset(tz, at("2026-11-01T06:00:00Z") / 1000), -5 * 3600);
    cr_assert_eq(er_tz_offset(tz, at("2090-07-01T00:00:00Z") / 1000), -4 * 3600);
    tz = zone(LHI);
    cr_assert_eq(er_tz_offset(tz, at("2026-10-03T15:29:59Z") / 1000), 10 * 3600 + 1800);
    cr_assert_eq(er_tz_offset(tz, at("2026-10-03T15:30:00Z") / 1000), 11 * 3600);
}

/* ---- horizon ---- */

Test(tz_horizon, impossible_dates_are_refused)
{
    er_cron c;
    cr_assert_eq(er_cron_parse("0 0 30 2 *", &c, NULL), 0);
    const er_tz *tz = zone(NY);
    er_error err = {0};
    int64_t next = 42;
    cr_assert_eq(er_cron_next(&c, tz, at("2026-01-01T00:00:00Z"), &next, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "cron");
    cr_assert_eq(next, 42);
}

Test(tz_horizon, leap_day_across_2100_is_found)
{
    /* 2100 is not a leap year: after 2096-02-29 the next is 2104-02-29. */
    EXPECT("UTC", "0 0 29 2 *", "2096-03-01T00:00:00Z", "2104-02-29T00:00:00.000Z");
}

Test(tz_offsets, etc_zones_count_west_like_posix)
{
    const er_tz *tz = zone("Etc/GMT+5"); /* POSIX sign: five hours west */
    cr_assert_eq(er_tz_offset(tz, 0), -5 * 3600);
}

/* ---- speed and sharing ---- */

/* Speed is measured by benchmarks, not here; this checks that a long run of
 * consecutive calls stays on the hour and strictly increasing. */
Test(tz_many, hourly_next_is_on_the_hour_and_increasing)
{
    er_cron c;
    cr_assert_eq(er_cron_parse("0 * * * *", &c, NULL), 0);
    const er_tz *tz = zone(NY);
    int64_t t = at("2026-01-01T00:00:00Z");
    for (int i = 0; i < 20000; i++) {
        int64_t from = t + (int64_t)i * 997000, next = 0;
        cr_assert_eq(er_cron_next(&c, tz, from, &next, NULL), 0);
        cr_assert_gt(next, from);
        cr_assert_leq(next - from, 3600000);
        cr_assert_eq(next % 3600000, 0);
    }
}

typedef struct {
    const er_cron *c;
    const er_tz *tz;
    int64_t sum;
} share_arg;

static void *share_run(void *p)
{
    share_arg *a = p;
    int64_t t = at("2026-01-01T00:00:00Z");
    for (int i = 0; i < 2000; i++) {
        int64_t next = 0;
        if (er_cron_next(a->c, a->tz, t, &next, NULL) < 0)
            return NULL;
        a->sum += next % 1000003;
        t = next;
    }
    return NULL;
}

Test(tz_threads, one_zone_shared_by_threads_gives_the_same_answers)
{
    er_cron c;
    cr_assert_eq(er_cron_parse("*/7 */3 * * *", &c, NULL), 0);
    const er_tz *tz = zone(LHI);
    share_arg one = {&c, tz, 0};
    share_run(&one);
    pthread_t th[4];
    share_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (share_arg){&c, tz, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, share_run, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(args[i].sum, one.sum);
    }
}
