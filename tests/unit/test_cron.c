/* SPDX-License-Identifier: MIT
 *
 * Cron expression parsing: fields, lists, ranges, steps, names, macros, the
 * error messages, and the Vixie day-of-month / day-of-week rule (checked
 * through next-fire times in UTC). Time zones are in test_cron_tz.c.
 */
#include "core/cron.h"
#include "util/clock.h"

#include <criterion/criterion.h>
#include <string.h>

#define ALL_DOM 0xFFFFFFFEu /* bits 1..31 */
#define ALL_MON 0x1FFEu     /* bits 1..12 */
#define ALL_DOW 0x7Fu       /* bits 0..6 */

static uint64_t bits(const int *v, int n)
{
    uint64_t b = 0;
    for (int i = 0; i < n; i++)
        b |= (uint64_t)1 << v[i];
    return b;
}
#define BITS(...) bits((const int[]){__VA_ARGS__}, sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

static er_cron parse_ok(const char *expr)
{
    er_cron c;
    er_error err = {0};
    int rc = er_cron_parse(expr, &c, &err);
    cr_assert_eq(rc, 0, "parse \"%s\": %s", expr, err.message);
    return c;
}

static void parse_fails(const char *expr, const char *message)
{
    er_cron c;
    memset(&c, 0xAB, sizeof c);
    er_cron before = c;
    er_error err = {0};
    cr_assert_eq(er_cron_parse(expr, &c, &err), ER_EINVAL, "\"%s\" should fail", expr);
    cr_assert_eq(err.code, ER_EINVAL);
    cr_assert_str_eq(err.field, "cron");
    cr_assert_str_eq(err.message, message, "\"%s\": got \"%s\"", expr, err.message);
    cr_assert(memcmp(&c, &before, sizeof c) == 0, "output changed on failure");
}

static int64_t at(const char *rfc3339)
{
    int64_t ms;
    cr_assert_eq(er_time_parse(rfc3339, &ms), 0, "bad time %s", rfc3339);
    return ms;
}

/* The next `n` fires in UTC after `from`, compared with `want`. */
static void expect_utc(const char *expr, const char *from, int n, const char *const *want)
{
    er_cron c = parse_ok(expr);
    const er_tz *tz;
    cr_assert_eq(er_tz_get(NULL, &tz, NULL), 0);
    int64_t out[16];
    er_error err = {0};
    cr_assert_eq(er_cron_next_n(&c, tz, at(from), n, out, &err), 0, "%s", err.message);
    for (int i = 0; i < n; i++) {
        char got[32];
        er_time_format(out[i], got);
        cr_assert_str_eq(got, want[i], "%s fire %d", expr, i);
    }
}

Test(cron_parse, five_fields_daily_midnight)
{
    er_cron c = parse_ok("0 0 * * *");
    cr_assert_eq(c.seconds, 1);
    cr_assert_eq(c.minutes, 1);
    cr_assert_eq(c.hours, 1);
    cr_assert_eq(c.dom, ALL_DOM);
    cr_assert_eq(c.months, ALL_MON);
    cr_assert_eq(c.dow, ALL_DOW);
    cr_assert_not(c.dom_restricted);
    cr_assert_not(c.dow_restricted);
    cr_assert_not(c.hour_star);
    cr_assert_not(c.has_seconds);
}

Test(cron_parse, lists_ranges_and_steps_expand)
{
    er_cron c = parse_ok("*/15 1-10/3 5/10 1,6,12 *");
    cr_assert_eq(c.minutes, BITS(0, 15, 30, 45));
    cr_assert_eq(c.hours, BITS(1, 4, 7, 10));
    cr_assert_eq(c.dom, BITS(5, 15, 25));
    cr_assert_eq(c.months, BITS(1, 6, 12));
    c = parse_ok("1-30/5 0,12-13 * * *");
    cr_assert_eq(c.minutes, BITS(1, 6, 11, 16, 21, 26));
    cr_assert_eq(c.hours, BITS(0, 12, 13));
    c = parse_ok("0 */7 */10 * *");
    cr_assert_eq(c.hours, BITS(0, 7, 14, 21));
    cr_assert_eq(c.dom, BITS(1, 11, 21, 31));
}

Test(cron_parse, extra_whitespace_is_ignored)
{
    er_cron a = parse_ok("  0\t 5  *   * *  \n");
    er_cron b = parse_ok("0 5 * * *");
    cr_assert(memcmp(&a, &b, sizeof a) == 0);
}

Test(cron_parse, month_and_weekday_names_are_case_insensitive)
{
    er_cron c = parse_ok("0 0 * jan-MAR,Dec mon-Fri");
    cr_assert_eq(c.months, BITS(1, 2, 3, 12));
    cr_assert_eq(c.dow, BITS(1, 2, 3, 4, 5));
    c = parse_ok("0 0 * * sun,SAT");
    cr_assert_eq(c.dow, BITS(0, 6));
    c = parse_ok("0 0 * FEB/3 *");
    cr_assert_eq(c.months, BITS(2, 5, 8, 11));
}

Test(cron_parse, weekday_seven_is_sunday)
{
    cr_assert_eq(parse_ok("0 0 * * 7").dow, BITS(0));
    cr_assert_eq(parse_ok("0 0 * * 0,7").dow, BITS(0));
    cr_assert_eq(parse_ok("0 0 * * 5-7").dow, BITS(0, 5, 6));
    cr_assert_eq(parse_ok("0 0 * * FRI-SUN").dow, BITS(0, 5, 6));
    cr_assert_eq(parse_ok("0 0 * * *").dow, ALL_DOW);
    cr_assert_eq(parse_ok("0 0 * * */2").dow, BITS(0, 2, 4, 6));
}

Test(cron_parse, six_fields_have_seconds_first)
{
    er_cron c = parse_ok("*/20 30 12 * * *");
    cr_assert(c.has_seconds);
    cr_assert_eq(c.seconds, BITS(0, 20, 40));
    cr_assert_eq(c.minutes, BITS(30));
    cr_assert_eq(c.hours, BITS(12));
}

Test(cron_parse, restriction_flags_follow_the_leading_star)
{
    er_cron c = parse_ok("0 0 1 * MON");
    cr_assert(c.dom_restricted);
    cr_assert(c.dow_restricted);
    c = parse_ok("0 0 */2 * 1-5");
    cr_assert_not(c.dom_restricted);
    cr_assert(c.dow_restricted);
    cr_assert(parse_ok("0 * * * *").hour_star);
    cr_assert(parse_ok("0 */2 * * *").hour_star);
    cr_assert_not(parse_ok("0 0-23 * * *").hour_star);
}

Test(cron_parse, macros_equal_their_expansions)
{
    static const char *const pairs[][2] = {
        {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"}, {"@DAILY", "0 0 * * *"},    {" @hourly ", "0 * * * *"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        er_cron a = parse_ok(pairs[i][0]);
        er_cron b = parse_ok(pairs[i][1]);
        cr_assert(memcmp(&a, &b, sizeof a) == 0, "%s", pairs[i][0]);
    }
}

Test(cron_parse, out_of_range_values_name_the_field)
{
    parse_fails("0 24 * * *", "hour: 24 is out of range 0..23");
    parse_fails("60 * * * *", "minute: 60 is out of range 0..59");
    parse_fails("61 * * * * *", "second: 61 is out of range 0..59");
    parse_fails("0 0 0 * *", "day-of-month: 0 is out of range 1..31");
    parse_fails("0 0 32 * *", "day-of-month: 32 is out of range 1..31");
    parse_fails("0 0 * 13 *", "month: 13 is out of range 1..12");
    parse_fails("0 0 * * 8", "day-of-week: 8 is out of range 0..7");
    parse_fails("0 1-99999999999 * * *", "hour: 99999999999 is out of range 0..23");
}

Test(cron_parse, unknown_names_are_quoted)
{
    parse_fails("0 0 * * FUNDAY", "day-of-week: unknown name \"FUNDAY\"");
    parse_fails("0 0 * * MO", "day-of-week: unknown name \"MO\"");
    parse_fails("0 0 * FOO *", "month: unknown name \"FOO\"");
    parse_fails("0 0 * * JAN", "day-of-week: unknown name \"JAN\"");
    parse_fails("a * * * *", "minute: \"a\" is not a number");
    parse_fails("0 MON * * *", "hour: \"MON\" is not a number");
    parse_fails("1x * * * *", "minute: \"1x\" is not a number");
}

Test(cron_parse, malformed_items_are_refused)
{
    parse_fails("*/0 * * * *", "minute: step 0 is out of range 1..60");
    parse_fails("*/61 * * * *", "minute: step 61 is out of range 1..60");
    parse_fails("*/x * * * *", "minute: step \"x\" is not a number");
    parse_fails("*/ * * * *", "minute: missing step in \"*/\"");
    parse_fails("5-3 * * * *", "minute: range \"5-3\" runs backwards");
    parse_fails("0 0 * * SAT-MON", "day-of-week: range \"SAT-MON\" runs backwards");
    parse_fails("1,,2 * * * *", "minute: empty list item");
    parse_fails("1, * * * *", "minute: empty list item");
    parse_fails("-5 * * * *", "minute: bad item \"-5\"");
    parse_fails("5- * * * *", "minute: missing value");
    parse_fails("** * * * *", "minute: \"**\" is not a number");
}

Test(cron_parse, wrong_field_counts_and_macros_are_refused)
{
    parse_fails("", "expected 5 or 6 fields, got 0");
    parse_fails("   ", "expected 5 or 6 fields, got 0");
    parse_fails("* * * *", "expected 5 or 6 fields, got 4");
    parse_fails("* * * * * * *", "expected 5 or 6 fields, got 7");
    parse_fails("@reboot", "unknown macro \"@reboot\"");
    parse_fails("@daily 5", "unknown macro \"@daily 5\"");
    er_error err = {0};
    er_cron c;
    cr_assert_eq(er_cron_parse(NULL, &c, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "cron");
}

Test(cron_vixie, dom_and_dow_both_restricted_fire_on_either)
{
    /* 2026-01-01 is a Thursday: Fridays are Jan 2, 9, 16; Jan 13 is a Tuesday. */
    const char *const want[] = {"2026-01-02T00:00:00.000Z", "2026-01-09T00:00:00.000Z",
                                "2026-01-13T00:00:00.000Z", "2026-01-16T00:00:00.000Z"};
    expect_utc("0 0 13 * FRI", "2026-01-01T00:00:00Z", 4, want);
}

Test(cron_vixie, star_dom_with_step_means_both_must_match)
{
    /* dom "*\/2" starts with '*': days 1,3,5.. AND Friday: Jan 2 (even) no,
     * Jan 9 yes, Jan 16 no, Jan 23 yes. */
    const char *const want[] = {"2026-01-09T00:00:00.000Z", "2026-01-23T00:00:00.000Z"};
    expect_utc("0 0 */2 * FRI", "2026-01-01T00:00:00Z", 2, want);
}

Test(cron_vixie, only_dom_restricted_ignores_weekdays)
{
    const char *const want[] = {"2026-01-13T00:00:00.000Z", "2026-02-13T00:00:00.000Z"};
    expect_utc("0 0 13 * *", "2026-01-01T00:00:00Z", 2, want);
}

Test(cron_vixie, only_dow_restricted_ignores_month_days)
{
    /* Sundays after Thursday 2026-01-01: Jan 4, 11. "7" is Sunday too. */
    const char *const want[] = {"2026-01-04T00:00:00.000Z", "2026-01-11T00:00:00.000Z"};
    expect_utc("0 0 * * 7", "2026-01-01T00:00:00Z", 2, want);
}

Test(cron_next_utc, fires_strictly_after_the_start)
{
    const char *const want[] = {"2026-01-01T00:15:00.000Z", "2026-01-01T00:30:00.000Z"};
    expect_utc("*/15 * * * *", "2026-01-01T00:00:00Z", 2, want);
    const char *const want2[] = {"2026-01-01T00:00:00.000Z"};
    expect_utc("*/15 * * * *", "2025-12-31T23:59:59.999Z", 1, want2);
    const char *const want3[] = {"2026-01-01T00:15:00.000Z"};
    expect_utc("*/15 * * * *", "2026-01-01T00:00:00.001Z", 1, want3);
}

Test(cron_next_utc, seconds_field_fires_within_the_minute)
{
    const char *const want[] = {"2026-01-01T12:30:20.000Z", "2026-01-01T12:30:40.000Z",
                                "2026-01-02T12:30:00.000Z"};
    expect_utc("*/20 30 12 * * *", "2026-01-01T12:30:00Z", 3, want);
}

Test(cron_next_utc, macros_fire_at_their_times)
{
    const char *const y[] = {"2027-01-01T00:00:00.000Z"};
    expect_utc("@yearly", "2026-01-01T00:00:00Z", 1, y);
    const char *const w[] = {"2026-01-04T00:00:00.000Z"}; /* a Sunday */
    expect_utc("@weekly", "2026-01-01T00:00:00Z", 1, w);
    const char *const m[] = {"2026-02-01T00:00:00.000Z"};
    expect_utc("@monthly", "2026-01-01T00:00:00Z", 1, m);
}

Test(cron_next_utc, hand_built_empty_field_is_refused)
{
    er_cron c = parse_ok("0 0 * * *");
    c.months = 1u << 13; /* no month in 1..12 */
    const er_tz *tz;
    cr_assert_eq(er_tz_get(NULL, &tz, NULL), 0);
    er_error err = {0};
    int64_t next = 7;
    cr_assert_eq(er_cron_next(&c, tz, 0, &next, &err), ER_EINVAL);
    cr_assert_str_eq(err.message, "a field matches no value");
    cr_assert_eq(next, 7);
}
