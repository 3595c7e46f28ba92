/* SPDX-License-Identifier: MIT
 *
 * Retry delays: exponential, fixed and capped backoff with jitter. Pure
 * arithmetic over an er_backoff policy; randomness comes from the caller's
 * er_rand so tests are deterministic. It never reads a clock.
 */
#include "core/job.h"

/* Jitter spreads a delay d over [d*(1-jitter), d]: with the default 0.5 each
 * retry lands in the upper half of its window, so retries of many jobs that
 * failed together do not stampede, yet none comes much sooner than planned. */
static int64_t jittered(int64_t d, double jitter, er_rand *r)
{
    if (!(jitter > 0.0) || d <= 0 || !r) /* !(>) also catches NaN */
        return d;
    if (jitter > 1.0)
        jitter = 1.0;
    /* cut < (double)d <= 2^63 keeps the conversion in range; a cut that
     * rounds up to the whole delay means the window starts at 0. */
    double cut = (double)d * jitter;
    int64_t lo = cut >= (double)d ? 0 : d - (int64_t)cut;
    if (lo < 0)
        lo = 0;
    int64_t span = d - lo;
    /* Uniform over the span+1 integers lo..d; the double product stays below
     * 2^63 because er_rand_unit is < 1. */
    int64_t x = (int64_t)(((double)span + 1.0) * er_rand_unit(r));
    if (x > span)
        x = span;
    return lo + x;
}

/* Faktory's schedule in ms: c^4 + 15 + rand(30) * (c + 1) seconds; c is
 * at most ER_MAX_ATTEMPTS_MAX, so c^4 * 1000 stays far inside int64. */
static int64_t faktory_delay(int attempt, int64_t cap, er_rand *r)
{
    int64_t c = attempt - 1;
    if (c > ER_MAX_ATTEMPTS_MAX)
        c = ER_MAX_ATTEMPTS_MAX;
    int64_t rnd = r ? (int64_t)(30.0 * er_rand_unit(r)) : 0;
    if (rnd > 29)
        rnd = 29;
    int64_t d = (c * c * c * c + 15 + rnd * (c + 1)) * 1000;
    return d > cap ? cap : d;
}

int64_t er_backoff_delay(const er_backoff *b, int attempt, er_rand *r)
{
    int64_t cap = b->max_delay_ms > 0 ? b->max_delay_ms : 0;
    if (b->type == ER_BACKOFF_FAKTORY)
        return faktory_delay(attempt < 1 ? 1 : attempt, cap, r);
    int64_t d = b->delay_ms > 0 ? b->delay_ms : 0;
    if (attempt < 1)
        attempt = 1;
    if (b->type != ER_BACKOFF_FIXED) {
        /* delay * 2^(attempt-1), doubling until the cap; d > cap/2 means the
         * next doubling would pass the cap (or overflow), so stop there. The
         * loop ends within 63 rounds because d > 0 doubles each time. */
        for (int i = 1; i < attempt && d > 0 && d < cap; i++)
            d = d > cap / 2 ? cap : d * 2;
    }
    if (d > cap) /* fixed delays are capped too: the result is always <= max_delay_ms */
        d = cap;
    return jittered(d, b->jitter, r);
}
