/* SPDX-License-Identifier: MIT
 *
 * Store conformance cases for schedulers, run-once leases and cursors,
 * driven only through an er_store_ops table. Included by a test file that
 * first defines OPS, g_url, S, R and store_fresh()/store_drop() exactly as
 * for conformance_cases.h (test_sched.c does it for SQLite). Times are
 * injected (T0), so the PostgreSQL variant must open with clock=caller.
 */
#ifndef ER_TESTS_SCHED_CASES_H
#define ER_TESTS_SCHED_CASES_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/scheduler.h"
#include "store/sched_codec.h"
#include "store/store.h"

#define T0 1790000000000LL
#define HOUR 3600000LL

static void open_store(void)
{
    er_store_options opt = {.durability = ER_DURABILITY_NORMAL, .busy_timeout_ms = 1000};
    er_error err = {0};
    int rc = OPS->open(g_url, &opt, &S, &err);
    cr_assert_eq(rc, 0, "open: %s", err.message);
}

static void setup(void)
{
    er_rand_init_seeded(&R, 42);
    store_fresh();
    open_store();
    cr_assert_not_null(OPS->scheduler_put, "store %s has no scheduler ops", OPS->name);
}

static void teardown(void)
{
    OPS->close(S);
    S = NULL;
    store_drop();
}

TestSuite(sched, .init = setup, .fini = teardown, .timeout = 240);

/* ---- schedulers ---- */

static bool sched_put(const char *key, const char *spec, int64_t next, int64_t now)
{
    er_sched_row in = {.key = (char *)key, .spec = (char *)spec, .next_run_at = next};
    er_error err = {0};
    bool created = false;
    cr_assert_eq(OPS->scheduler_put(S, &in, now, &created, NULL, &err), 0, "%s", err.message);
    return created;
}

static int count_schedulers(void)
{
    er_sched_list l = {0};
    er_error err = {0};
    cr_assert_eq(OPS->scheduler_list(S, NULL, 1000, &l, &err), 0, "%s", err.message);
    int n = (int)l.len;
    er_sched_list_fini(&l);
    return n;
}

Test(sched, upserting_one_key_ten_times_leaves_one_scheduler)
{
    for (int i = 0; i < 10; i++) {
        char spec[64];
        snprintf(spec, sizeof spec, "{\"v\":%d}", i);
        bool created = sched_put("nightly", spec, T0 + HOUR + i, T0 + i);
        cr_assert_eq(created, i == 0, "put %d created=%d", i, created);
    }
    cr_assert_eq(count_schedulers(), 1);
    er_sched_row r;
    er_error err = {0};
    cr_assert_eq(OPS->scheduler_get(S, "nightly", &r, &err), 0);
    cr_assert_str_eq(r.spec, "{\"v\":9}");
    cr_assert_eq(r.created_at, T0);
    cr_assert_eq(r.updated_at, T0 + 9);
    cr_assert_eq(r.next_run_at, T0 + HOUR + 9);
    er_sched_row_fini(&r);
}

Test(sched, update_keeps_the_last_tick)
{
    er_error err = {0};
    sched_put("k", "{}", T0, T0 - 1);
    cr_assert_eq(OPS->scheduler_advance(S, "k", T0, T0, T0 + HOUR, &err), 0, "%s", err.message);
    sched_put("k", "{\"x\":1}", T0 + HOUR, T0 + 5);
    er_sched_row r;
    er_sched_row out;
    cr_assert_eq(OPS->scheduler_get(S, "k", &r, &err), 0);
    cr_assert_eq(r.last_tick, T0);
    er_sched_row_fini(&r);
    /* the put's own output row says the same */
    er_sched_row in = {.key = "k", .spec = "{}", .next_run_at = T0 + HOUR};
    bool created = true;
    cr_assert_eq(OPS->scheduler_put(S, &in, T0 + 6, &created, &out, &err), 0);
    cr_assert(!created);
    cr_assert_str_eq(out.key, "k");
    cr_assert_eq(out.last_tick, T0);
    cr_assert_eq(out.created_at, T0 - 1);
    er_sched_row_fini(&out);
}

Test(sched, get_delete_and_list_in_key_order_with_paging)
{
    er_error err = {0};
    const char *keys[] = {"b", "a", "d", "c"};
    for (int i = 0; i < 4; i++)
        sched_put(keys[i], "{}", T0, T0);
    er_sched_list l = {0};
    cr_assert_eq(OPS->scheduler_list(S, NULL, 2, &l, &err), 0);
    cr_assert_eq(l.len, 2);
    cr_assert_str_eq(l.items[0].key, "a");
    cr_assert_str_eq(l.items[1].key, "b");
    cr_assert_eq(OPS->scheduler_list(S, "b", 10, &l, &err), 0);
    cr_assert_eq(l.len, 4);
    cr_assert_str_eq(l.items[2].key, "c");
    cr_assert_str_eq(l.items[3].key, "d");
    er_sched_list_fini(&l);
    er_sched_row r;
    cr_assert_eq(OPS->scheduler_get(S, "zz", &r, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->scheduler_delete(S, "c", &err), 0);
    cr_assert_eq(OPS->scheduler_delete(S, "c", &err), ER_ENOTFOUND);
    cr_assert_eq(count_schedulers(), 3);
}

Test(sched, due_is_earliest_first_and_bounded)
{
    er_error err = {0};
    sched_put("late", "{}", T0 + 30, T0);
    sched_put("early", "{}", T0 + 10, T0);
    sched_put("future", "{}", T0 + 1000, T0);
    sched_put("never", "{}", INT64_MAX, T0);
    er_sched_list l = {0};
    cr_assert_eq(OPS->scheduler_due(S, T0 + 100, 1, &l, &err), 0);
    cr_assert_eq(l.len, 1);
    cr_assert_str_eq(l.items[0].key, "early");
    er_sched_list_fini(&l);
    cr_assert_eq(OPS->scheduler_due(S, T0 + 100, 10, &l, &err), 0);
    cr_assert_eq(l.len, 2);
    cr_assert_str_eq(l.items[1].key, "late");
    er_sched_list_fini(&l);
}

Test(sched, advance_only_from_the_expected_next_run)
{
    er_error err = {0};
    sched_put("k", "{}", T0, T0);
    cr_assert_eq(OPS->scheduler_advance(S, "k", T0 + 1, T0, T0 + HOUR, &err), ER_ECONFLICT);
    cr_assert_eq(OPS->scheduler_advance(S, "nope", T0, T0, T0 + HOUR, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->scheduler_advance(S, "k", T0, 0, T0 + HOUR, &err), 0);
    er_sched_row r;
    cr_assert_eq(OPS->scheduler_get(S, "k", &r, &err), 0);
    cr_assert_eq(r.last_tick, 0, "last_tick 0 keeps it");
    cr_assert_eq(r.next_run_at, T0 + HOUR);
    er_sched_row_fini(&r);
}

Test(sched, rollback_discards_a_scheduler_put)
{
    er_error err = {0};
    cr_assert_eq(OPS->begin(S, &err), 0);
    sched_put("gone", "{}", T0, T0);
    OPS->rollback(S);
    cr_assert_eq(count_schedulers(), 0);
}

/* The engine's cron pass, driven by hand: due -> plan -> enqueue -> advance,
 * one transaction per look. Returns the jobs enqueued. */
static int cron_pass(int64_t now, int64_t on_time_after)
{
    er_error err = {0};
    int made = 0;
    cr_assert_eq(OPS->begin(S, &err), 0);
    er_sched_list due = {0};
    cr_assert_eq(OPS->scheduler_due(S, now, 100, &due, &err), 0);
    for (size_t i = 0; i < due.len; i++) {
        er_sched_row *row = &due.items[i];
        er_scheduler sc;
        const er_tz *tz;
        cr_assert_eq(er_sched_codec_decode(row->spec, &sc, &err), 0, "%s", err.message);
        cr_assert_eq(er_tz_get(sc.tz_name, &tz, &err), 0, "%s", err.message);
        cr_assert_eq(er_scheduler_set_zone(&sc, tz, &err), 0, "%s", err.message);
        er_sched_plan p;
        cr_assert_eq(er_scheduler_plan(&sc, row->next_run_at, now, on_time_after, &p, &err), 0);
        int64_t last = 0;
        for (size_t k = 0; k < p.n; k++) {
            er_job j;
            cr_assert_eq(er_scheduler_job(&sc, row->key, p.ticks[k], now, &R, &j, &err), 0);
            bool dup = true;
            cr_assert_eq(OPS->enqueue(S, &j, &dup, NULL, NULL, &err), 0, "%s", err.message);
            made += !dup;
            er_job_fini(&j);
            last = p.ticks[k];
        }
        cr_assert_eq(OPS->scheduler_advance(S, row->key, row->next_run_at, last, p.next_run_at,
                                            &err), 0, "%s", err.message);
        er_sched_plan_fini(&p);
        er_scheduler_fini(&sc);
    }
    er_sched_list_fini(&due);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    return made;
}

static int64_t count_jobs(const char *queue)
{
    er_queue_info *qs;
    size_t n;
    er_error err = {0};
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(qs[i].name, queue) == 0)
            for (int st = 0; st < 6; st++)
                total += qs[i].counts[st];
    er_queue_info_list_free(qs, n);
    return total;
}

Test(sched, a_simulated_year_hourly_in_a_dst_zone_stores_one_job_per_tick)
{
    int64_t from, to;
    cr_assert_eq(er_time_parse("2026-01-01T04:59:00Z", &from), 0);
    cr_assert_eq(er_time_parse("2027-01-01T05:00:00Z", &to), 0);
    er_sched_spec spec = {
        .cron = {ER_SPEC_SET, "0 * * * *", 9},
        .tz = {ER_SPEC_SET, "America/New_York", 16},
        .queue = {ER_SPEC_SET, "hourly", 6},
        .name = {ER_SPEC_SET, "tick", 4},
    };
    er_scheduler sc;
    er_error err = {0};
    const er_tz *tz;
    cr_assert_eq(er_sched_validate(&spec, 1 << 20, &sc, &err), 0, "%s", err.message);
    cr_assert_eq(er_tz_get(sc.tz_name, &tz, &err), 0, "%s", err.message);
    cr_assert_eq(er_scheduler_set_zone(&sc, tz, &err), 0, "%s", err.message);
    char *text = NULL;
    cr_assert_eq(er_sched_codec_encode(&sc, &text, &err), 0);
    sched_put("hourly", text, er_scheduler_next(&sc, from), from);
    free(text);
    er_scheduler_fini(&sc);
    const int64_t step = 23 * 60000LL; /* an uneven clock step */
    int made = 0;
    for (int64_t now = from; now < to; now += step)
        made += cron_pass(now, now - ER_SCHED_GRACE_MS - step);
    /* a tick fired twice is one job: rewind the schedule and look again */
    er_sched_row r;
    cr_assert_eq(OPS->scheduler_get(S, "hourly", &r, &err), 0);
    int64_t first;
    cr_assert_eq(er_time_parse("2026-01-01T05:00:00Z", &first), 0);
    sched_put("hourly", r.spec, first, to);
    er_sched_row_fini(&r);
    cr_assert_eq(cron_pass(first + 1000, first - 1), 0);
    cr_assert_eq(made, 8760, "made %d", made);
    cr_assert_eq(count_jobs("hourly"), 8760);
    er_job j;
    cr_assert_eq(OPS->get_job(S, "sched:hourly:2026-11-01T05:00:00.000Z", &j, &err), 0);
    er_job_fini(&j);
    cr_assert_eq(OPS->get_job(S, "sched:hourly:2026-11-01T06:00:00.000Z", &j, &err), 0,
                 "both passes of the repeated 01:00 fire");
    er_job_fini(&j);
}

/* ---- leases ---- */

static er_lease acquire(const char *run_key, int64_t ttl, int64_t now, int expect)
{
    char key[ER_LEASE_KEY_SIZE];
    er_error err = {0};
    cr_assert_eq(er_lease_key("schedule", "billing", run_key, key, &err), 0);
    er_lease l;
    memset(&l, 0, sizeof l);
    int rc = OPS->lease_acquire(S, "schedule", "billing", run_key, key, ttl, now, &l, &err);
    cr_assert_eq(rc, expect, "acquire %s: %d %s", run_key, rc, err.message);
    return l;
}

Test(sched, lease_acquire_then_held_for_everyone_else)
{
    er_lease a = acquire("2026-11-30", 60000, T0, 0);
    cr_assert_eq(a.state, ER_LEASE_HELD);
    cr_assert_eq(a.fence, 1);
    cr_assert_eq(a.expires_at, T0 + 60000);
    er_lease b = acquire("2026-11-30", 60000, T0 + 59999, ER_ECONFLICT);
    cr_assert_eq(b.state, ER_LEASE_HELD);
    cr_assert_str_eq(b.idempotency_key, a.idempotency_key);
    er_lease c = acquire("2026-12-01", 60000, T0, 0);
    cr_assert_str_neq(c.idempotency_key, a.idempotency_key);
}

Test(sched, reclaimed_lease_rotates_token_raises_fence_keeps_key)
{
    er_error err = {0};
    er_lease a = acquire("r", 1000, T0, 0);
    er_lease b = acquire("r", 1000, T0 + 1000, 0); /* a expired at T0+1000 */
    cr_assert_str_eq(a.idempotency_key, b.idempotency_key);
    cr_assert_str_neq(a.owner_token, b.owner_token);
    cr_assert_gt(b.fence, a.fence);
    er_lease out;
    cr_assert_eq(OPS->lease_renew(S, a.owner_token, 1000, T0 + 1001, &out, &err), ER_ESTALE);
    cr_assert_str_eq(err.field, "owner_token");
    cr_assert_eq(OPS->lease_complete(S, a.owner_token, T0 + 1001, &out, &err), ER_ESTALE);
    cr_assert_eq(OPS->lease_release(S, a.owner_token, T0 + 1001, &out, &err), ER_ESTALE);
    /* b is untouched by a's attempts */
    cr_assert_eq(OPS->lease_renew(S, b.owner_token, 5000, T0 + 1500, &out, &err), 0);
    cr_assert_eq(out.expires_at, T0 + 6500);
    cr_assert_eq(out.fence, b.fence);
}

Test(sched, completed_lease_answers_done_and_release_frees)
{
    er_error err = {0};
    er_lease a = acquire("done-key", 60000, T0, 0);
    er_lease out;
    cr_assert_eq(OPS->lease_complete(S, a.owner_token, T0 + 10, &out, &err), 0);
    cr_assert_eq(out.state, ER_LEASE_DONE);
    er_lease again = acquire("done-key", 60000, T0 + 400LL * 24 * HOUR, ER_ECONFLICT);
    cr_assert_eq(again.state, ER_LEASE_DONE);
    cr_assert_eq(OPS->lease_complete(S, a.owner_token, T0 + 20, &out, &err), 0,
                 "a retried complete is accepted");
    cr_assert_eq(OPS->lease_renew(S, a.owner_token, 1000, T0 + 20, &out, &err), ER_ESTALE);

    er_lease r = acquire("rel", 60000, T0, 0);
    cr_assert_eq(OPS->lease_release(S, r.owner_token, T0 + 1, &out, &err), 0);
    cr_assert_eq(out.state, ER_LEASE_FREE);
    er_lease r2 = acquire("rel", 60000, T0 + 2, 0);
    cr_assert_eq(r2.fence, r.fence + 1);
    cr_assert_eq(OPS->lease_renew(S, "0123456789abcdef0123456789abcdef", 1000, T0, &out, &err),
                 ER_ESTALE);
    cr_assert_eq(OPS->lease_renew(S, "", 1000, T0, &out, &err), ER_ESTALE);
}

Test(sched, lease_expiry_follows_the_store_clock_argument)
{
    er_error err = {0};
    er_lease a = acquire("clock", 2000, T0, 0);
    er_lease out;
    cr_assert_eq(OPS->lease_renew(S, a.owner_token, 2000, T0 + 1999, &out, &err), 0);
    cr_assert_eq(OPS->lease_renew(S, a.owner_token, 2000, T0 + 1999 + 2000, &out, &err),
                 ER_ESTALE);
    acquire("clock", 2000, T0 + 3999, 0);
}

/* ---- cursors ---- */

Test(sched, cursor_compare_and_set)
{
    er_error err = {0};
    char *v = NULL, *cur = (char *)1;
    int64_t at = 0;
    cr_assert_eq(OPS->cursor_get(S, "rollup", &v, &at, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->cursor_cas(S, "rollup", true, NULL, "\"2026-01-01\"", T0, &cur, &err), 0);
    cr_assert_null(cur);
    cr_assert_eq(OPS->cursor_cas(S, "rollup", true, NULL, "\"2026-01-09\"", T0, &cur, &err),
                 ER_ECONFLICT, "a second first write must conflict");
    cr_assert_str_eq(cur, "\"2026-01-01\"");
    free(cur);
    cr_assert_eq(OPS->cursor_cas(S, "rollup", true, "\"2025-12-31\"", "\"2026-01-02\"", T0 + 1,
                                 &cur, &err), ER_ECONFLICT);
    cr_assert_str_eq(cur, "\"2026-01-01\"");
    free(cur);
    cr_assert_eq(OPS->cursor_cas(S, "rollup", true, "\"2026-01-01\"", "\"2026-01-02\"", T0 + 2,
                                 &cur, &err), 0);
    cr_assert_eq(OPS->cursor_get(S, "rollup", &v, &at, &err), 0);
    cr_assert_str_eq(v, "\"2026-01-02\"");
    cr_assert_eq(at, T0 + 2);
    free(v);
    cr_assert_eq(OPS->cursor_cas(S, "rollup", false, NULL, "{\"day\":3}", T0 + 3, NULL, &err), 0);
    cr_assert_eq(OPS->cursor_get(S, "rollup", &v, &at, &err), 0);
    cr_assert_str_eq(v, "{\"day\":3}");
    free(v);
    cr_assert_eq(OPS->cursor_cas(S, "other", true, "1", "2", T0, &cur, &err), ER_ECONFLICT);
    cr_assert_null(cur, "no current value for a missing cursor");
    cr_assert_eq(OPS->cursor_get(S, "other", &v, &at, &err), ER_ENOTFOUND);
}

/* ---- lists for inspection ---- */

Test(sched, lease_list_pages_in_key_order_states_at_now_and_never_a_token)
{
    er_error err = {0};
    cr_assert_not_null(OPS->lease_list, "store %s has no lease_list", OPS->name);
    er_lease got[7];
    for (int i = 0; i < 7; i++) {
        char rk[8];
        snprintf(rk, sizeof rk, "r%d", i);
        got[i] = acquire(rk, i == 6 ? 1000 : 60000, T0, 0);
    }
    er_lease out;
    cr_assert_eq(OPS->lease_complete(S, got[0].owner_token, T0 + 1, &out, &err), 0);
    cr_assert_eq(OPS->lease_release(S, got[1].owner_token, T0 + 1, &out, &err), 0);
    int64_t now = T0 + 5000; /* got[6] expired at T0 + 1000 */
    er_lease_list l = {0};
    const char *after = NULL;
    char last[ER_LEASE_KEY_SIZE] = "";
    int pages = 0;
    for (;;) {
        size_t before = l.len;
        cr_assert_eq(OPS->lease_list(S, after, 3, now, &l, &err), 0, "%s", err.message);
        size_t n = l.len - before;
        cr_assert_leq(n, 3);
        if (n == 0)
            break;
        pages++;
        snprintf(last, sizeof last, "%s", l.items[l.len - 1].lease.idempotency_key);
        after = last;
        if (n < 3)
            break;
    }
    cr_assert_eq(pages, 3);
    cr_assert_eq(l.len, 7);
    int seen = 0;
    for (size_t i = 0; i < l.len; i++) {
        const er_lease_row *r = &l.items[i];
        if (i > 0)
            cr_assert_lt(strcmp(l.items[i - 1].lease.idempotency_key, r->lease.idempotency_key),
                         0, "byte order");
        cr_assert_str_eq(r->lease.owner_token, "", "never the owner token");
        cr_assert_str_eq(r->type, "schedule");
        cr_assert_str_eq(r->code, "billing");
        cr_assert_eq(r->created_at, T0);
        int k = (int)strtol(r->run_key + 1, NULL, 10);
        cr_assert_str_eq(r->lease.idempotency_key, got[k].idempotency_key);
        cr_assert_eq(r->lease.fence, 1);
        seen |= 1 << k;
        er_lease_state want = k == 0 ? ER_LEASE_DONE : k == 1 || k == 6 ? ER_LEASE_FREE
                                                                          : ER_LEASE_HELD;
        cr_assert_eq(r->lease.state, want, "lease %d: state %d", k, r->lease.state);
        if (k == 0) {
            cr_assert_eq(r->lease.completed_at, T0 + 1);
            cr_assert_eq(r->updated_at, T0 + 1);
        }
        if (k == 2)
            cr_assert_eq(r->lease.expires_at, T0 + 60000);
    }
    cr_assert_eq(seen, 0x7f);
    er_lease_list_fini(&l);
    /* past the last key: nothing; "" is from the start */
    cr_assert_eq(OPS->lease_list(S, "ik_g", 10, now, &l, &err), 0);
    cr_assert_eq(l.len, 0);
    cr_assert_eq(OPS->lease_list(S, "", 1, now, &l, &err), 0);
    cr_assert_eq(l.len, 1);
    er_lease_list_fini(&l);
}

Test(sched, cursor_list_pages_in_byte_order_with_values)
{
    er_error err = {0};
    cr_assert_not_null(OPS->cursor_list, "store %s has no cursor_list", OPS->name);
    const char *names[] = {"b", "B", "_x", "a.1", "a-1", "Z", "rollup:2026"};
    for (int i = 0; i < 7; i++) {
        char v[32];
        snprintf(v, sizeof v, "{\"pos\":%d}", i);
        cr_assert_eq(OPS->cursor_cas(S, names[i], false, NULL, v, T0 + i, NULL, &err), 0);
    }
    const char *want[] = {"B", "Z", "_x", "a-1", "a.1", "b", "rollup:2026"};
    er_cursor_list l = {0};
    cr_assert_eq(OPS->cursor_list(S, NULL, 4, &l, &err), 0, "%s", err.message);
    cr_assert_eq(l.len, 4);
    cr_assert_eq(OPS->cursor_list(S, l.items[3].name, 4, &l, &err), 0, "%s", err.message);
    cr_assert_eq(l.len, 7, "the second page appends the last three");
    for (size_t i = 0; i < 7; i++) {
        cr_assert_str_eq(l.items[i].name, want[i]);
        int k = 0;
        while (strcmp(names[k], want[i]) != 0)
            k++;
        char v[32];
        snprintf(v, sizeof v, "{\"pos\":%d}", k);
        cr_assert_str_eq(l.items[i].value, v);
        cr_assert_eq(l.items[i].updated_at, T0 + k);
    }
    er_cursor_list_fini(&l);
    cr_assert_eq(OPS->cursor_list(S, "rollup:2026", 4, &l, &err), 0);
    cr_assert_eq(l.len, 0);
    er_cursor_list_fini(&l);
}

#endif
