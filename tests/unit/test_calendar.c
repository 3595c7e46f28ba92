/* SPDX-License-Identifier: MIT
 *
 * The calendar helper (src/util/calendar.c): known dates, round trips over
 * a wide range of days on both sides of the epoch, leap years, weekdays,
 * and floor division. Checked against a day-by-day walk of the calendar
 * rules, not against the algorithm itself.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "util/calendar.h"
#include "util/clock.h"

static void date_is(int64_t days, int64_t y, int m, int d)
{
    int64_t gy;
    int gm, gd;
    er_civil_from_days(days, &gy, &gm, &gd);
    cr_assert(gy == y && gm == m && gd == d, "day %lld: got %lld-%d-%d, want %lld-%d-%d",
              (long long)days, (long long)gy, gm, gd, (long long)y, m, d);
    cr_assert_eq(er_days_from_civil(y, m, d), days, "%lld-%d-%d", (long long)y, m, d);
}

Test(calendar, known_dates)
{
    date_is(0, 1970, 1, 1);
    date_is(-1, 1969, 12, 31);
    date_is(31, 1970, 2, 1);
    date_is(10957, 2000, 1, 1);
    date_is(11016, 2000, 2, 29);
    date_is(20787, 2026, 11, 30);
    date_is(2932896, 9999, 12, 31);
    date_is(-719468, 0, 3, 1);   /* the start of the algorithm's era 0 */
    date_is(-719528, 0, 1, 1);   /* year 0 (1 BC) is a leap year */
    date_is(-719529, -1, 12, 31);
    date_is(-141427, 1582, 10, 15); /* the first Gregorian day */
}

Test(calendar, round_trips_a_wide_range_of_days)
{
    /* every day of 5000 BC .. 5000 AD */
    int64_t lo = er_days_from_civil(-5000, 1, 1), hi = er_days_from_civil(5000, 12, 31);
    for (int64_t days = lo; days <= hi; days++) {
        int64_t y;
        int m, d;
        er_civil_from_days(days, &y, &m, &d);
        cr_assert(m >= 1 && m <= 12 && d >= 1 && d <= er_month_days(y, m));
        cr_assert_eq(er_days_from_civil(y, m, d), days);
    }
    /* and samples out to +-2^36 days (about 188 million years) */
    er_rand r;
    er_rand_init_seeded(&r, 1970);
    for (int i = 0; i < 200000; i++) {
        int64_t days = (int64_t)(r.next(&r) % (1ULL << 37)) - ((int64_t)1 << 36);
        int64_t y;
        int m, d;
        er_civil_from_days(days, &y, &m, &d);
        cr_assert_eq(er_days_from_civil(y, m, d), days, "day %lld", (long long)days);
    }
}

Test(calendar, consecutive_days_walk_the_calendar_rules)
{
    /* From 1600-01-01 day by day to 2400-12-31: each date is the one after
     * the previous by month lengths and leap rules alone. */
    int64_t y = 1600;
    int m = 1, d = 1;
    for (int64_t days = er_days_from_civil(1600, 1, 1); y <= 2400; days++) {
        int64_t gy;
        int gm, gd;
        er_civil_from_days(days, &gy, &gm, &gd);
        cr_assert(gy == y && gm == m && gd == d, "day %lld", (long long)days);
        if (++d > er_month_days(y, m)) {
            d = 1;
            if (++m > 12) {
                m = 1;
                y++;
            }
        }
    }
}

Test(calendar, leap_years)
{
    cr_assert(er_is_leap_year(2000));
    cr_assert(er_is_leap_year(2024));
    cr_assert(er_is_leap_year(2400));
    cr_assert(er_is_leap_year(0));
    cr_assert(er_is_leap_year(-4));
    cr_assert(er_is_leap_year(-400));
    cr_assert_not(er_is_leap_year(1900));
    cr_assert_not(er_is_leap_year(2100));
    cr_assert_not(er_is_leap_year(2023));
    cr_assert_not(er_is_leap_year(-1));
    cr_assert_not(er_is_leap_year(-100));
    cr_assert_eq(er_month_days(2024, 2), 29);
    cr_assert_eq(er_month_days(2100, 2), 28);
    cr_assert_eq(er_month_days(2023, 12), 31);
    cr_assert_eq(er_month_days(2023, 4), 30);
    /* the leap day is the day before March 1 */
    cr_assert_eq(er_days_from_civil(2024, 3, 1) - er_days_from_civil(2024, 2, 28), 2);
    cr_assert_eq(er_days_from_civil(2100, 3, 1) - er_days_from_civil(2100, 2, 28), 1);
    /* 400 Gregorian years are 146097 days, anywhere */
    for (int64_t y = -2000; y <= 2000; y += 137)
        cr_assert_eq(er_days_from_civil(y + 400, 5, 17) - er_days_from_civil(y, 5, 17), 146097);
}

Test(calendar, weekdays_on_both_sides_of_the_epoch)
{
    cr_assert_eq(er_weekday(0), 4);                                 /* Thursday */
    cr_assert_eq(er_weekday(-1), 3);                                /* Wednesday */
    cr_assert_eq(er_weekday(-4), 0);                                /* Sunday */
    cr_assert_eq(er_weekday(er_days_from_civil(2026, 11, 30)), 1);  /* Monday */
    cr_assert_eq(er_weekday(er_days_from_civil(1994, 11, 6)), 0);   /* RFC 9110's Sunday */
    cr_assert_eq(er_weekday(er_days_from_civil(1582, 10, 15)), 5);  /* Friday */
    for (int64_t days = -1000; days < 1000; days++)
        cr_assert_eq(er_weekday(days + 1), (er_weekday(days) + 1) % 7);
}

Test(calendar, floor_division_rounds_down)
{
    cr_assert_eq(er_floor_div(7, 2), 3);
    cr_assert_eq(er_floor_div(-7, 2), -4);
    cr_assert_eq(er_floor_div(-8, 2), -4);
    cr_assert_eq(er_floor_div(0, 5), 0);
    cr_assert_eq(er_floor_div(-1, 86400), -1);
    cr_assert_eq(er_floor_div(INT64_MIN, 1000), INT64_MIN / 1000 - 1);
}

Test(calendar, time_format_uses_it_before_the_epoch_and_at_the_ends)
{
    char out[32];
    er_time_format(-86400000LL * 365, out);
    cr_assert_str_eq(out, "1969-01-01T00:00:00.000Z");
    er_time_format(-62167219200000LL, out); /* 0000-01-01 */
    cr_assert_str_eq(out, "0000-01-01T00:00:00.000Z");
    er_time_format(INT64_MAX, out); /* clamped year, the rest still a time */
    cr_assert_eq(strlen(out), 24);
    cr_assert_eq(strncmp(out, "9999-", 5), 0, "%s", out);
    er_time_format(INT64_MIN, out);
    cr_assert_eq(strlen(out), 24);
    cr_assert_eq(strncmp(out, "0000-", 5), 0, "%s", out);
}
