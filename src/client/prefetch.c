/* SPDX-License-Identifier: MIT
 *
 * The adaptive prefetch rule (prefetch.h): pure arithmetic on the worker's
 * measurements. It must not read a clock or the worker's state, so the unit
 * tests can give it any measurements.
 */
#include "client/prefetch.h"

/* A handler run is never taken as shorter than this: a no-op handler
 * measures ~0 and would divide by zero. */
#define MIN_RUN_US 0.1

/* x rounded down, within 0..ER_PREFETCH_MAX + 1 (no libm: liberrand links
 * without it). NaN gives 0. */
static long floor_capped(double x)
{
    if (!(x > 0))
        return 0;
    return x >= ER_PREFETCH_MAX + 1 ? ER_PREFETCH_MAX + 1 : (long)x;
}

int er_prefetch_size(const er_prefetch_in *in)
{
    if (in->concurrency < 1 || in->run_us < 0 || in->rtt_us < 0 || in->lease_ms <= 0)
        return 0;
    double run = in->run_us < MIN_RUN_US ? MIN_RUN_US : in->run_us;
    double c = in->concurrency;
    /* The handlers take c / run jobs per µs; keep that many for the trips,
     * rounded up. */
    double want = ER_PREFETCH_TRIPS * c * in->rtt_us / run;
    long busy = floor_capped(want);
    if ((double)busy < want && busy <= ER_PREFETCH_MAX)
        busy++;
    /* Queued jobs start in waves of c, each wave one run later at worst
     * (the handlers may all have just started): n jobs wait up to
     * ceil(n / c) runs, so whole waves that fit in the wait. */
    double wait_us = (double)in->lease_ms * 1000.0 / ER_PREFETCH_WAIT_DIV;
    long lease_cap = floor_capped(wait_us / run) * in->concurrency;
    long n = busy < lease_cap ? busy : lease_cap;
    return n > ER_PREFETCH_MAX ? ER_PREFETCH_MAX : (int)n;
}

double er_prefetch_ewma(double avg, double sample)
{
    return avg < 0 ? sample : avg + (sample - avg) / 8.0;
}
