/* SPDX-License-Identifier: MIT
 *
 * Unit tests for er_backoff_delay: exponential, fixed and capped policies,
 * the cap, overflow safety, and jitter's window, with a seeded random source.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>

#include "core/job.h"

static er_backoff pol(er_backoff_type t, int64_t d, int64_t max, double j)
{
    er_backoff b = {.type = t, .delay_ms = d, .max_delay_ms = max, .jitter = j};
    return b;
}

Test(backoff, exponential_doubles_per_attempt)
{
    er_backoff b = pol(ER_BACKOFF_EXPONENTIAL, 1000, 1000000, 0);
    int64_t want[] = {1000, 2000, 4000, 8000, 16000, 32000};
    for (int a = 1; a <= 6; a++)
        cr_assert_eq(er_backoff_delay(&b, a, NULL), want[a - 1], "attempt %d", a);
}

Test(backoff, exponential_stops_at_max_delay)
{
    er_backoff b = pol(ER_BACKOFF_EXPONENTIAL, 1000, 5000, 0);
    cr_assert_eq(er_backoff_delay(&b, 3, NULL), 4000);
    cr_assert_eq(er_backoff_delay(&b, 4, NULL), 5000);
    cr_assert_eq(er_backoff_delay(&b, 50, NULL), 5000);
}

Test(backoff, huge_attempt_does_not_overflow)
{
    er_backoff b = pol(ER_BACKOFF_EXPONENTIAL, 1, ER_DELAY_MAX_MS, 0);
    cr_assert_eq(er_backoff_delay(&b, INT_MAX, NULL), ER_DELAY_MAX_MS);
    er_backoff big = pol(ER_BACKOFF_EXPONENTIAL, INT64_MAX / 2 + 1, INT64_MAX, 0);
    cr_assert_eq(er_backoff_delay(&big, 3, NULL), INT64_MAX);
    er_backoff big_jit = pol(ER_BACKOFF_CAPPED, INT64_MAX, INT64_MAX, 1.0);
    er_rand r;
    er_rand_init_seeded(&r, 7);
    for (int i = 0; i < 100; i++) {
        int64_t d = er_backoff_delay(&big_jit, 1000, &r);
        cr_assert_geq(d, 0);
        cr_assert_leq(d, INT64_MAX);
    }
}

Test(backoff, attempt_below_one_counts_as_first)
{
    er_backoff b = pol(ER_BACKOFF_EXPONENTIAL, 1000, 100000, 0);
    cr_assert_eq(er_backoff_delay(&b, 0, NULL), 1000);
    cr_assert_eq(er_backoff_delay(&b, -5, NULL), 1000);
}

Test(backoff, fixed_is_the_same_every_attempt)
{
    er_backoff b = pol(ER_BACKOFF_FIXED, 3000, 900000, 0);
    for (int a = 1; a <= 20; a++)
        cr_assert_eq(er_backoff_delay(&b, a, NULL), 3000);
}

Test(backoff, fixed_is_capped_by_max_delay)
{
    er_backoff b = pol(ER_BACKOFF_FIXED, 3000, 1000, 0);
    cr_assert_eq(er_backoff_delay(&b, 1, NULL), 1000);
}

Test(backoff, capped_grows_like_exponential_up_to_the_cap)
{
    er_backoff b = pol(ER_BACKOFF_CAPPED, 500, 3000, 0);
    cr_assert_eq(er_backoff_delay(&b, 1, NULL), 500);
    cr_assert_eq(er_backoff_delay(&b, 2, NULL), 1000);
    cr_assert_eq(er_backoff_delay(&b, 3, NULL), 2000);
    cr_assert_eq(er_backoff_delay(&b, 4, NULL), 3000);
    cr_assert_eq(er_backoff_delay(&b, 9, NULL), 3000);
}

Test(backoff, zero_and_negative_delays_give_zero)
{
    er_backoff z = pol(ER_BACKOFF_EXPONENTIAL, 0, 1000, 0.5);
    er_backoff n = pol(ER_BACKOFF_FIXED, -10, 1000, 0.5);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    cr_assert_eq(er_backoff_delay(&z, 1000000, &r), 0);
    cr_assert_eq(er_backoff_delay(&n, 1, &r), 0);
}

Test(backoff, default_jitter_spreads_over_upper_half)
{
    er_backoff b = pol(ER_BACKOFF_FIXED, 10000, 900000, ER_DEFAULT_JITTER);
    er_rand r;
    er_rand_init_seeded(&r, 42);
    int64_t lo = INT64_MAX, hi = 0;
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        int64_t d = er_backoff_delay(&b, 1, &r);
        cr_assert_geq(d, 5000);
        cr_assert_leq(d, 10000);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        sum += (double)d;
    }
    cr_assert_lt(lo, 5100, "the bottom of the window is reached");
    cr_assert_gt(hi, 9900, "the top of the window is reached");
    double mean = sum / n;
    cr_assert(mean > 7400 && mean < 7600, "uniform: mean %.1f near 7500", mean);
}

Test(backoff, full_jitter_spans_zero_to_delay)
{
    er_backoff b = pol(ER_BACKOFF_FIXED, 1000, 1000, 1.0);
    er_rand r;
    er_rand_init_seeded(&r, 3);
    int64_t lo = INT64_MAX;
    for (int i = 0; i < 5000; i++) {
        int64_t d = er_backoff_delay(&b, 1, &r);
        cr_assert_geq(d, 0);
        cr_assert_leq(d, 1000);
        lo = d < lo ? d : lo;
    }
    cr_assert_lt(lo, 20);
}

Test(backoff, jitter_applies_after_the_cap)
{
    er_backoff b = pol(ER_BACKOFF_EXPONENTIAL, 1000, 8000, 0.5);
    er_rand r;
    er_rand_init_seeded(&r, 5);
    for (int i = 0; i < 1000; i++) {
        int64_t d = er_backoff_delay(&b, 30, &r);
        cr_assert(d >= 4000 && d <= 8000, "got %lld", (long long)d);
    }
}

Test(backoff, out_of_range_jitter_is_clamped)
{
    er_backoff neg = pol(ER_BACKOFF_FIXED, 1000, 1000, -0.5);
    er_backoff big = pol(ER_BACKOFF_FIXED, 1000, 1000, 7.0);
    er_rand r;
    er_rand_init_seeded(&r, 9);
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(er_backoff_delay(&neg, 1, &r), 1000);
        int64_t d = er_backoff_delay(&big, 1, &r);
        cr_assert(d >= 0 && d <= 1000);
    }
}

Test(backoff, same_seed_gives_same_delays)
{
    er_backoff b = pol(ER_BACKOFF_EXPONENTIAL, 2000, 900000, 0.5);
    er_rand r1, r2, r3;
    er_rand_init_seeded(&r1, 1234);
    er_rand_init_seeded(&r2, 1234);
    er_rand_init_seeded(&r3, 4321);
    int differs = 0;
    for (int a = 1; a <= 12; a++) {
        int64_t x = er_backoff_delay(&b, a, &r1);
        cr_assert_eq(x, er_backoff_delay(&b, a, &r2));
        differs += x != er_backoff_delay(&b, a, &r3);
    }
    cr_assert_gt(differs, 0, "another seed gives other delays");
}

Test(backoff, result_never_exceeds_max_delay)
{
    er_rand r;
    er_rand_init_seeded(&r, 77);
    for (int i = 0; i < 5000; i++) {
        int64_t d = (int64_t)(r.next(&r) % 100000);
        int64_t max = d + (int64_t)(r.next(&r) % 1000000);
        er_backoff b = pol((er_backoff_type)(i % 3), d, max, er_rand_unit(&r));
        int attempt = (int)(r.next(&r) % 100);
        int64_t got = er_backoff_delay(&b, attempt, &r);
        cr_assert(got >= 0 && got <= max, "got %lld max %lld", (long long)got, (long long)max);
    }
}

/* Faktory's schedule: c^4 + 15 + rand(30) * (c + 1) seconds, c = attempt - 1. */
Test(backoff, faktory_schedule_stays_in_its_window)
{
    er_backoff b = pol(ER_BACKOFF_FAKTORY, 0, ER_DELAY_MAX_MS, 0);
    er_rand r;
    er_rand_init_seeded(&r, 11);
    for (int a = 1; a <= 25; a++) {
        int64_t c = a - 1;
        int64_t lo = (c * c * c * c + 15) * 1000, hi = lo + 29 * (c + 1) * 1000;
        for (int i = 0; i < 50; i++) {
            int64_t d = er_backoff_delay(&b, a, &r);
            cr_assert_geq(d, lo, "attempt %d", a);
            cr_assert_leq(d, hi, "attempt %d", a);
            cr_assert_eq(d % 1000, 0);
        }
    }
    cr_assert_eq(er_backoff_delay(&b, 1, NULL), 15000);
    cr_assert_eq(er_backoff_delay(&b, 3, NULL), (16 + 15) * 1000);
}

Test(backoff, faktory_schedule_is_capped_and_never_overflows)
{
    er_backoff b = pol(ER_BACKOFF_FAKTORY, 0, 60000, 0);
    cr_assert_eq(er_backoff_delay(&b, 10, NULL), 60000);
    er_backoff big = pol(ER_BACKOFF_FAKTORY, 0, INT64_MAX, 0);
    cr_assert_gt(er_backoff_delay(&big, INT_MAX, NULL), 0);
    cr_assert_eq(er_backoff_delay(&big, 0, NULL), 15000);
    cr_assert_str_eq(er_backoff_type_name(ER_BACKOFF_FAKTORY), "faktory");
    cr_assert_eq(er_backoff_type_parse("faktory", 7), -1); /* no request names it */
}
