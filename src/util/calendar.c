/* SPDX-License-Identifier: MIT
 *
 * Civil dates from day numbers and back (calendar.h), after Howard
 * Hinnant's "chrono-Compatible Low-Level Date Algorithms": 400-year eras of
 * 146097 days, years starting on March 1 so the leap day comes last.
 */
#include "util/calendar.h"

int64_t er_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return a % b < 0 ? q - 1 : q;
}

int64_t er_days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = er_floor_div(y, 400);
    int64_t yoe = y - era * 400;                                 /* [0, 399] */
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1; /* [0, 365] */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;         /* [0, 146096] */
    return era * 146097 + doe - 719468; /* 719468: days from 0000-03-01 to 1970-01-01 */
}

void er_civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    int64_t z = days + 719468;
    int64_t era = er_floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

int er_weekday(int64_t days)
{
    int64_t r = (days + 4) % 7; /* 1970-01-01 was a Thursday */
    return (int)(r < 0 ? r + 7 : r);
}

bool er_is_leap_year(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int er_month_days(int64_t y, int m)
{
    static const int n[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && er_is_leap_year(y) ? 29 : n[m - 1];
}
