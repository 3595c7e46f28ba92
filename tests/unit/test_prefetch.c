/* SPDX-License-Identifier: MIT
 *
 * The adaptive prefetch rule (src/client/prefetch.c) with injected
 * measurements: 1 ms and 10 s jobs, no-op jobs, slow round trips, short
 * leases. Whatever the inputs, the size stays within 0..10000 and the last
 * prefetched job starts within a quarter of the lease, even when every
 * handler has just started.
 */
#include "client/prefetch.h"
#include "errand/errand.h"
#include "util/clock.h"

#include <criterion/criterion.h>
#include <string.h>

#define MS 1000.0   /* µs */
#define S 1000000.0 /* µs */

static int size(int c, double run_us, double rtt_us, long lease_ms)
{
    er_prefetch_in in = {
        .concurrency = c, .run_us = run_us, .rtt_us = rtt_us, .lease_ms = lease_ms};
    return er_prefetch_size(&in);
}

Test(prefetch, nothing_ahead_until_both_are_measured)
{
    cr_assert_eq(size(10, -1, 2 * MS, 60000), 0);
    cr_assert_eq(size(10, 1 * MS, -1, 60000), 0);
    cr_assert_eq(size(10, -1, -1, 60000), 0);
}

Test(prefetch, one_ms_jobs_keep_two_round_trips_of_work)
{
    /* c=10 handlers take 10 jobs/ms; a 2 ms round trip: 2 trips x 20 jobs. */
    cr_assert_eq(size(10, 1 * MS, 2 * MS, 60000), 40);
    cr_assert_eq(size(50, 1 * MS, 2 * MS, 60000), 200);
    cr_assert_eq(size(1, 1 * MS, 2 * MS, 60000), 4);
}

Test(prefetch, ten_second_jobs_prefetch_one_at_most)
{
    /* Two trips of 2 ms are a sliver of one run: one job ahead. */
    cr_assert_eq(size(10, 10 * S, 2 * MS, 60000), 1);
    /* c=1, 30 s lease: one queued job would wait 10 s > 7.5 s: none. */
    cr_assert_eq(size(1, 10 * S, 2 * MS, 30000), 0);
    /* The default 60 s lease: 10 s <= 15 s, one may wait. */
    cr_assert_eq(size(1, 10 * S, 2 * MS, 60000), 1);
}

Test(prefetch, noop_jobs_hit_the_bound)
{
    cr_assert_eq(size(10, 0, 5 * MS, 60000), ER_PREFETCH_MAX);
    cr_assert_eq(size(10, 0.5, 5 * MS, 60000), ER_PREFETCH_MAX);
    cr_assert_eq(size(1000, 1, 1 * S, 86400000), ER_PREFETCH_MAX);
}

Test(prefetch, slow_round_trips_ask_for_more)
{
    cr_assert_eq(size(10, 1 * MS, 10 * MS, 60000), 200);
    cr_assert_eq(size(10, 1 * MS, 100 * MS, 60000), 2000);
    cr_assert_eq(size(10, 1 * MS, 500 * MS, 60000), ER_PREFETCH_MAX);
    cr_assert(size(10, 1 * MS, 100 * MS, 60000) > size(10, 1 * MS, 10 * MS, 60000));
}

Test(prefetch, a_short_lease_caps_the_wait)
{
    /* 1.2 s jobs at c=2, 3 s lease: one queued job could wait a whole run
     * (both handlers just started), 1.2 s > 750 ms: none ahead. */
    cr_assert_eq(size(2, 1.2 * S, 5 * MS, 3000), 0);
    /* 300 ms jobs: two waves (600 ms) fit in 750 ms: up to 4; busy wants 1. */
    cr_assert_eq(size(2, 300 * MS, 5 * MS, 3000), 1);
    cr_assert_eq(size(2, 300 * MS, 200 * MS, 3000), 3);
    cr_assert_eq(size(2, 300 * MS, 400 * MS, 3000), 4);
    /* 5 ms jobs, 200 ms trips want 800; a 1 s lease: 10 x 250 ms / 5 ms = 500. */
    cr_assert_eq(size(10, 5 * MS, 200 * MS, 1000), 500);
    /* Jobs of half the lease: never one ahead at c=1. */
    cr_assert_eq(size(1, 500 * MS, 50 * MS, 1000), 0);
    /* Jobs longer than the lease (heartbeats keep the running one). */
    cr_assert_eq(size(4, 5 * S, 1 * S, 2000), 0);
}

Test(prefetch, rounds_the_need_up)
{
    /* 2 x 10 x 1.5 ms / 4 ms = 7.5: 8 jobs. */
    cr_assert_eq(size(10, 4 * MS, 1.5 * MS, 60000), 8);
}

Test(prefetch, bad_inputs_give_zero)
{
    cr_assert_eq(size(0, 1 * MS, 1 * MS, 60000), 0);
    cr_assert_eq(size(10, 1 * MS, 1 * MS, 0), 0);
    cr_assert_eq(size(10, 1 * MS, 0.0 / 0.0, 60000), 0);
}

/* Random measurements: the bound, the lease wait and monotonicity hold. */
Test(prefetch, invariants_hold_for_any_measurements)
{
    er_rand r;
    er_rand_init_seeded(&r, 17);
    for (int i = 0; i < 100000; i++) {
        int c = 1 + (int)(er_rand_unit(&r) * 1000);
        double run = er_rand_unit(&r) < 0.1 ? 0 : er_rand_unit(&r) * er_rand_unit(&r) * 60 * S;
        double rtt = er_rand_unit(&r) * er_rand_unit(&r) * 2 * S;
        long lease = 1000 + (long)(er_rand_unit(&r) * er_rand_unit(&r) * 3600000);
        int n = size(c, run, rtt, lease);
        cr_assert(n >= 0 && n <= ER_PREFETCH_MAX, "c=%d run=%f rtt=%f lease=%ld: %d", c, run, rtt,
                  lease, n);
        double r_eff = run < 0.1 ? 0.1 : run;
        double waves = (double)((n + c - 1) / c); /* the last queued job's worst wait */
        cr_assert(waves * r_eff <= lease * 1000.0 / ER_PREFETCH_WAIT_DIV,
                  "c=%d run=%f rtt=%f lease=%ld: %d jobs wait too long", c, run, rtt, lease, n);
        cr_assert(size(c, run, rtt * 2, lease) >= n, "a slower trip never asks for fewer");
        cr_assert(size(c, run, rtt, lease * 2) >= n, "a longer lease never allows fewer");
        if (c < 1000)
            cr_assert(size(c + 1, run, rtt, lease) >= n, "more handlers never want fewer");
    }
}

Test(prefetch, averages_start_at_the_first_sample)
{
    double a = er_prefetch_ewma(-1, 800);
    cr_assert_float_eq(a, 800, 1e-9);
    a = er_prefetch_ewma(a, 0);
    cr_assert_float_eq(a, 700, 1e-9);
    /* A 10 s run after fast ones pulls the average up at once. */
    a = er_prefetch_ewma(1, 10 * S);
    cr_assert(a > 1 * S);
}

static int noop(errand_job *job, void *user)
{
    (void)job, (void)user;
    return 0;
}

/* liberrand's config: auto by default; a negative value other than auto, or
 * one above the bound, is refused with the setting named. */
Test(prefetch, config_is_auto_by_default_and_refuses_other_values)
{
    const char *queues[] = {"q"};
    errand_worker_config cfg;
    errand_worker_config_init(&cfg);
    cr_assert_eq(cfg.prefetch, ERRAND_PREFETCH_AUTO);
    cfg.server_url = "http://127.0.0.1:1";
    cfg.queues = queues;
    cfg.nqueues = 1;
    int ok[] = {ERRAND_PREFETCH_AUTO, 0, 1, ER_PREFETCH_MAX};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        errand_worker *w = NULL;
        cfg.prefetch = ok[i];
        cr_assert_eq(errand_worker_new(&cfg, noop, NULL, &w, NULL, 0), 0, "%d", ok[i]);
        errand_worker_stats st;
        errand_worker_get_stats(w, &st);
        cr_assert_eq(st.prefetch, ok[i] == ERRAND_PREFETCH_AUTO ? 0 : ok[i]);
        errand_worker_free(w);
    }
    int bad[] = {-2, -1000, ER_PREFETCH_MAX + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errand_worker *w = NULL;
        char eb[256];
        cfg.prefetch = bad[i];
        cr_assert_eq(errand_worker_new(&cfg, noop, NULL, &w, eb, sizeof eb), ERRAND_EINVAL);
        cr_assert_null(w);
        cr_assert(strstr(eb, "prefetch") != NULL, "%s", eb);
    }
}
