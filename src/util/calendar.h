/* SPDX-License-Identifier: MIT
 *
 * Calendar arithmetic in the proleptic Gregorian calendar, with days counted
 * from 1970-01-01 (day 0; negative before it). Pure: no clock, no time zone,
 * no allocation. Every civil-date conversion in errand goes through here.
 */
#ifndef ER_UTIL_CALENDAR_H
#define ER_UTIL_CALENDAR_H

#include <stdbool.h>
#include <stdint.h>

/* The floor of a / b for b > 0 (rounds toward minus infinity). */
int64_t er_floor_div(int64_t a, int64_t b);

/* The day number of year y (astronomical: 0 is 1 BC), month m (1..12), day
 * d (1..31, not checked against the month). Exact for |y| < 2^40. */
int64_t er_days_from_civil(int64_t y, int m, int d);

/* The civil date of day number days; the inverse of er_days_from_civil. */
void er_civil_from_days(int64_t days, int64_t *y, int *m, int *d);

/* Day of the week of day number days: 0 Sunday .. 6 Saturday. */
int er_weekday(int64_t days);

bool er_is_leap_year(int64_t y);

/* Days in month m (1..12) of year y. */
int er_month_days(int64_t y, int m);

#endif
