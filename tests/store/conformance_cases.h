/* SPDX-License-Identifier: MIT
 *
 * The store conformance cases: the behaviour every store must have, driven
 * only through an er_store_ops table. Included by one test file per store
 * (test_conformance_sqlite.c, test_conformance_postgres.c), which first
 * defines OPS, g_url, S, R and store_fresh()/store_drop() (make a fresh,
 * empty store and set g_url to what OPS->open takes / throw it away).
 * Times are injected (T0): the PostgreSQL variant opens with clock=caller.
 */
#ifndef ER_TESTS_CONFORMANCE_CASES_H
#define ER_TESTS_CONFORMANCE_CASES_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

#define T0 1700000000000LL

/* The dedup window the next open_store() opens with. */
static int64_t g_window = ER_DEDUP_WINDOW_DEFAULT_MS;
static size_t g_reply_max; /* and reply cap (0: the default) */

static void open_store(void)
{
    er_store_options opt = {.durability = ER_DURABILITY_NORMAL, .busy_timeout_ms = 1000,
                            .dedup_window_ms = g_window, .reply_max = g_reply_max};
    er_error err = {0};
    int rc = OPS->open(g_url, &opt, &S, &err);
    cr_assert_eq(rc, 0, "open: %s", err.message);
}

static void setup(void)
{
    g_window = ER_DEDUP_WINDOW_DEFAULT_MS;
    g_reply_max = 0;
    er_rand_init_seeded(&R, 42);
    store_fresh();
    open_store();
}

static void teardown(void)
{
    OPS->close(S);
    S = NULL;
    store_drop();
}


/* ---- helpers ---- */

static char *sdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* A job as validation + defaults would produce it. */
static void mkjob(er_job *j, const char *id, const char *queue, int priority, int64_t run_at,
                  int64_t now)
{
    er_job_init(j);
    j->id = sdup(id);
    j->queue = sdup(queue);
    j->name = sdup("email.send");
    j->payload = sdup("{\"to\":\"a@b.c\"}");
    j->payload_len = strlen(j->payload);
    j->state = run_at > now ? ER_STATE_SCHEDULED : ER_STATE_WAITING;
    j->priority = priority;
    j->run_at = run_at;
    j->max_attempts = 3;
    j->backoff = (er_backoff){.type = ER_BACKOFF_FIXED, .delay_ms = 1000, .max_delay_ms = 1000,
                              .jitter = 0};
    j->timeout_ms = 30000;
    j->idempotency_key = sdup(id);
    j->created_at = j->updated_at = now;
}

static void put(const char *id, const char *queue, int priority, int64_t run_at, int64_t now)
{
    er_job j;
    mkjob(&j, id, queue, priority, run_at, now);
    bool dupl = true;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0, "enqueue %s: %s", id, err.message);
    cr_assert(!dupl);
    er_job_fini(&j);
}

static int fetchq(const char *const *queues, size_t n, int max, int64_t lease_ms, int64_t now,
                  er_job_list *out)
{
    er_fetch_params p = {.queues = queues, .nqueues = n, .worker_id = "w1", .max = max,
                         .lease_ms = lease_ms, .now = now};
    er_error err = {0};
    int rc = OPS->fetch(S, &p, out, &err);
    cr_assert_eq(rc, 0, "fetch: %s", err.message);
    return (int)out->len;
}

static int fetch1(const char *queue, int max, int64_t now, er_job_list *out)
{
    const char *qs[] = {queue};
    return fetchq(qs, 1, max, 0, now, out);
}

static er_state state_of(const char *id)
{
    er_job j;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, id, &j, &err), 0, "get %s: %s", id, err.message);
    er_state st = j.state;
    er_job_fini(&j);
    return st;
}

static int fail_with(const char *id, const char *token, er_error_class cls, int64_t delay,
                     int64_t now, er_fail_outcome *o)
{
    er_failure f = {.cls = cls, .message = "boom", .delay_ms = delay, .retry_after_ms = delay};
    er_error err = {0};
    er_ack_info info = {0};
    int rc = OPS->fail(S, id, token, &f, now, &R, o, &info, &err);
    if (rc == 0)
        cr_assert(info.queue[0] && info.started_at > 0, "fail tells the job's queue and start");
    return rc;
}

static void settings_put(const char *queue, void (*edit)(er_queue_settings *))
{
    er_queue_settings qs;
    er_error err = {0};
    cr_assert_eq(OPS->get_queue_settings(S, queue, &qs, &err), 0);
    edit(&qs);
    cr_assert_eq(OPS->put_queue_settings(S, queue, &qs, &err), 0, "%s", err.message);
}

TestSuite(conformance, .init = setup, .fini = teardown, .timeout = 30);

/* ---- enqueue ---- */

Test(conformance, enqueue_then_get_returns_every_field)
{
    er_job j;
    mkjob(&j, "j1", "mail", 7, T0, T0);
    j.group = sdup("tenant-1");
    j.trace_id = sdup("trace-9");
    j.set_priority = true;
    bool dupl;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "j1", &g, &err), 0);
    cr_assert_str_eq(g.id, "j1");
    cr_assert_str_eq(g.queue, "mail");
    cr_assert_str_eq(g.name, "email.send");
    cr_assert_str_eq(g.payload, j.payload);
    cr_assert_eq(g.payload_len, j.payload_len);
    cr_assert_eq(g.state, ER_STATE_WAITING);
    cr_assert_eq(g.priority, 7);
    cr_assert_str_eq(g.group, "tenant-1");
    cr_assert_str_eq(g.trace_id, "trace-9");
    cr_assert_str_eq(g.idempotency_key, "j1");
    cr_assert_eq(g.run_at, T0);
    cr_assert_eq(g.max_attempts, 3);
    cr_assert_eq(g.backoff.type, ER_BACKOFF_FIXED);
    cr_assert_eq(g.backoff.delay_ms, 1000);
    cr_assert_eq(g.timeout_ms, 30000);
    cr_assert(g.set_priority);
    cr_assert(!g.set_backoff);
    cr_assert_null(g.lease_token);
    cr_assert_eq(g.created_at, T0);
    er_job_fini(&g);
    er_job_fini(&j);
    cr_assert_eq(OPS->get_job(S, "nope", &g, &err), ER_ENOTFOUND);
}

Test(conformance, duplicate_id_changes_nothing_and_returns_existing)
{
    put("same", "mail", 1, T0, T0);
    er_job j;
    mkjob(&j, "same", "other", 9, T0 + 5000, T0 + 1);
    bool dupl = false;
    er_job existing;
    er_job_init(&existing);
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, &existing, NULL, &err), 0);
    cr_assert(dupl);
    cr_assert_str_eq(existing.queue, "mail");
    cr_assert_eq(existing.priority, 1);
    cr_assert_eq(existing.state, ER_STATE_WAITING);
    er_job_fini(&existing);
    er_job_fini(&j);
    /* the duplicate did not register its queue either */
    er_queue_info *qs;
    size_t n;
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(qs[0].name, "mail");
    cr_assert_eq(qs[0].counts[ER_STATE_WAITING], 1);
    er_queue_info_list_free(qs, n);
}

Test(conformance, enqueue_many_inserts_in_order_and_reports_duplicates)
{
    put("old", "m", 0, T0, T0);
    er_job jobs[5];
    mkjob(&jobs[0], "n1", "m", 3, T0, T0);
    mkjob(&jobs[1], "old", "m", 9, T0, T0);          /* exists */
    mkjob(&jobs[2], "n2", "later", 0, T0 + 5000, T0); /* scheduled, a new queue */
    mkjob(&jobs[3], "n1", "m", 7, T0, T0);           /* earlier in the batch */
    mkjob(&jobs[4], "n3", "m", 0, T0, T0);
    jobs[4].group = sdup("g");
    jobs[4].set_backoff = true;
    bool dup[5] = {true, false, true, false, true};
    er_error err = {0};
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 5, dup, NULL, &err), 0, "%s", err.message);
    cr_assert(!dup[0] && dup[1] && !dup[2] && dup[3] && !dup[4]);
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 0, dup, NULL, &err), 0);
    for (int i = 0; i < 5; i++)
        er_job_fini(&jobs[i]);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "n1", &g, &err), 0);
    cr_assert_eq(g.priority, 3);
    cr_assert_str_eq(g.payload, "{\"to\":\"a@b.c\"}");
    er_job_fini(&g);
    cr_assert_eq(OPS->get_job(S, "n3", &g, &err), 0);
    cr_assert_str_eq(g.group, "g");
    cr_assert(g.set_backoff);
    er_job_fini(&g);
    cr_assert_eq(OPS->get_job(S, "old", &g, &err), 0);
    cr_assert_eq(g.priority, 0);
    er_job_fini(&g);
    cr_assert_eq(state_of("n2"), ER_STATE_SCHEDULED);
    /* insertion order is kept: old, n1, n3 */
    er_job_list l = {0};
    char *cur = NULL;
    cr_assert_eq(OPS->list_jobs(S, "m", ER_STATE_WAITING, 10, NULL, &l, &cur, &err), 0);
    cr_assert_eq(l.len, 3);
    cr_assert_str_eq(l.items[0].id, "old");
    cr_assert_str_eq(l.items[1].id, "n1");
    cr_assert_str_eq(l.items[2].id, "n3");
    er_job_list_fini(&l);
    er_queue_info *qs;
    size_t n;
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(qs[0].name, "later");
    cr_assert_eq(qs[0].counts[ER_STATE_SCHEDULED], 1);
    er_queue_info_list_free(qs, n);
}

static void set_dispatch(er_queue_settings *qs)
{
    qs->dispatch.on = true;
    snprintf(qs->dispatch.url, sizeof qs->dispatch.url, "https://hooks.example/in");
    qs->dispatch.timeout_ms = 1500;
    qs->dispatch.trusted = true;
    qs->dispatch.nheaders = 1;
    snprintf(qs->dispatch.headers[0].name, sizeof qs->dispatch.headers[0].name, "Authorization");
    snprintf(qs->dispatch.headers[0].value, sizeof qs->dispatch.headers[0].value, "Bearer x");
}

static void set_concurrency(er_queue_settings *qs)
{
    qs->concurrency = 4;
}

Test(conformance, list_queue_settings_gives_each_queue_its_settings_and_no_counts)
{
    put("j1", "plain", 0, T0, T0); /* a queue with a job and no settings */
    settings_put("hooks", set_dispatch);
    settings_put("busy", set_concurrency);
    er_queue_info *qs;
    size_t n;
    er_error err = {0};
    cr_assert_eq(OPS->list_queue_settings(S, &qs, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(qs[0].name, "busy");
    cr_assert_eq(qs[0].settings.concurrency, 4);
    cr_assert_not(qs[0].settings.dispatch.on);
    cr_assert_str_eq(qs[1].name, "hooks");
    const er_dispatch *d = &qs[1].settings.dispatch;
    cr_assert(d->on && d->trusted);
    cr_assert_str_eq(d->url, "https://hooks.example/in");
    cr_assert_eq(d->timeout_ms, 1500);
    cr_assert_eq(d->nheaders, 1);
    cr_assert_str_eq(d->headers[0].value, "Bearer x", "the store keeps header values");
    cr_assert_str_eq(qs[2].name, "plain");
    cr_assert_eq(qs[2].counts[ER_STATE_WAITING], 0, "no counts");
    cr_assert_not(qs[2].settings.dispatch.on);
    cr_assert_eq(qs[2].settings.lease_ms, ER_DEFAULT_LEASE_MS, "the defaults");
    er_queue_info_list_free(qs, n);
}

static void set_defaults_4(er_queue_settings *qs)
{
    qs->defaults.has_max_attempts = true;
    qs->defaults.max_attempts = 4;
}

static void set_defaults_9(er_queue_settings *qs)
{
    qs->defaults.has_priority = true;
    qs->defaults.priority = 9;
}

/* er_store_queue_defaults: what get_queue_settings says, in a transaction
 * (from the store's cache when it has the queue, else read whole) and out
 * of one. */
Test(conformance, queue_defaults_are_the_settings_defaults_in_and_out_of_a_transaction)
{
    settings_put("d4", set_defaults_4);
    settings_put("d9", set_defaults_9);
    er_error err = {0};
    const char *order[] = {"d4", "d9", "none", "d4", "d9"};
    for (int tx = 0; tx < 2; tx++) {
        if (tx)
            cr_assert_eq(OPS->begin(S, &err), 0, "%s", err.message);
        for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
            er_job_defaults d;
            memset(&d, 0xff, sizeof d);
            cr_assert_eq(er_store_queue_defaults(OPS, S, order[i], &d, &err), 0, "%s",
                         err.message);
            bool d4 = strcmp(order[i], "d4") == 0, d9 = strcmp(order[i], "d9") == 0;
            cr_assert_eq(d.has_max_attempts, d4, "%s, tx %d", order[i], tx);
            if (d4)
                cr_assert_eq(d.max_attempts, 4);
            cr_assert_eq(d.has_priority, d9, "%s, tx %d", order[i], tx);
            if (d9)
                cr_assert_eq(d.priority, 9);
            cr_assert_not(d.has_backoff || d.has_timeout, "%s, tx %d", order[i], tx);
            if (tx && OPS->cached_queue_defaults && i >= 3) { /* read before in this one */
                memset(&d, 0, sizeof d);
                cr_assert_eq(OPS->cached_queue_defaults(S, order[i], &d, &err), 0,
                             "%s: cached once read", order[i]);
                cr_assert_eq(d.has_max_attempts, d4);
                cr_assert_eq(d.has_priority, d9);
            }
        }
        if (tx)
            cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    }
}

Test(conformance, enqueue_many_of_only_duplicates_changes_nothing)
{
    put("x", "m", 0, T0, T0);
    put("y", "m", 0, T0, T0);
    er_job jobs[3];
    mkjob(&jobs[0], "y", "m", 5, T0, T0);
    mkjob(&jobs[1], "x", "m", 5, T0, T0);
    mkjob(&jobs[2], "y", "m", 5, T0, T0);
    bool dup[3] = {false, false, false};
    er_error err = {0};
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 3, dup, NULL, &err), 0, "%s", err.message);
    cr_assert(dup[0] && dup[1] && dup[2]);
    for (int i = 0; i < 3; i++)
        er_job_fini(&jobs[i]);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "x", &g, &err), 0);
    cr_assert_eq(g.priority, 0);
    er_job_fini(&g);
}

/* A large batch with duplicates spread through it: each job is new or a
 * duplicate exactly as if enqueued alone, in order. */
Test(conformance, enqueue_many_large_batch_marks_each_duplicate_in_order)
{
    enum { N = 300 };
    put("j-0150", "m", 0, T0, T0);
    er_job *jobs = calloc(N, sizeof *jobs);
    cr_assert_not_null(jobs);
    for (int i = 0; i < N; i++) {
        char id[16];
        /* every 7th job repeats the id of the job 3 before it */
        snprintf(id, sizeof id, "j-%04d", i % 7 == 6 ? i - 3 : i);
        mkjob(&jobs[i], id, i % 2 ? "m" : "n", 0, T0, T0);
    }
    bool dup[N];
    er_error err = {0};
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, N, dup, NULL, &err), 0, "%s", err.message);
    int fresh = 0;
    for (int i = 0; i < N; i++) {
        bool want = i % 7 == 6 || i == 150;
        cr_assert_eq(dup[i], want, "job %d", i);
        fresh += !want;
    }
    for (int i = 0; i < N; i++)
        er_job_fini(&jobs[i]);
    free(jobs);
    /* insertion order: "m" holds j-0150 first, then the odd new ids */
    er_job_list l = {0};
    char *cur = NULL;
    cr_assert_eq(OPS->list_jobs(S, "m", ER_STATE_WAITING, 1000, NULL, &l, &cur, &err), 0);
    cr_assert_str_eq(l.items[0].id, "j-0150");
    for (size_t k = 2; k < l.len; k++)
        cr_assert_lt(strcmp(l.items[k - 1].id, l.items[k].id), 0, "position %zu", k);
    size_t in_m = l.len;
    er_job_list_fini(&l);
    free(cur);
    cr_assert_eq(OPS->list_jobs(S, "n", ER_STATE_WAITING, 1000, NULL, &l, &cur, &err), 0);
    cr_assert_eq(in_m - 1 + l.len, (size_t)fresh);
    er_job_list_fini(&l);
    free(cur);
}

/* ---- fetch ---- */

Test(conformance, fetch_orders_by_queue_then_priority_run_at_and_insertion)
{
    put("low-old", "a", 1, T0 - 3000, T0);
    put("high-new", "a", 5, T0 - 1000, T0);
    put("high-old", "a", 5, T0 - 2000, T0);
    put("low-old-2", "a", 1, T0 - 3000, T0); /* same priority and run_at: insertion order */
    put("b-top", "b", 1000, T0 - 9000, T0);
    const char *qs[] = {"a", "b"};
    er_job_list l = {0};
    cr_assert_eq(fetchq(qs, 2, 10, 0, T0, &l), 5);
    const char *want[] = {"high-old", "high-new", "low-old", "low-old-2", "b-top"};
    for (int i = 0; i < 5; i++) {
        cr_assert_str_eq(l.items[i].id, want[i], "position %d", i);
        cr_assert_eq(l.items[i].state, ER_STATE_ACTIVE);
        cr_assert_eq(l.items[i].attempts, 1);
        cr_assert_eq(l.items[i].started, 1);
        cr_assert_str_eq(l.items[i].lease_owner, "w1");
        cr_assert_eq(strlen(l.items[i].lease_token), 32);
        cr_assert_eq(l.items[i].lease_expires_at, T0 + ER_DEFAULT_LEASE_MS);
        cr_assert_eq(l.items[i].started_at, T0);
    }
    cr_assert_str_neq(l.items[0].lease_token, l.items[1].lease_token);
    er_job_list_fini(&l);
    /* nothing left, and the leased jobs are stored active */
    cr_assert_eq(fetchq(qs, 2, 10, 0, T0, &l), 0);
    cr_assert_eq(state_of("b-top"), ER_STATE_ACTIVE);
}

Test(conformance, fetch_takes_at_most_max_and_uses_given_lease)
{
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "j%d", i);
        put(id, "q", 0, T0, T0);
    }
    const char *qs[] = {"q"};
    er_job_list l = {0};
    cr_assert_eq(fetchq(qs, 1, 2, 5000, T0, &l), 2);
    cr_assert_str_eq(l.items[0].id, "j0");
    cr_assert_str_eq(l.items[1].id, "j1");
    cr_assert_eq(l.items[0].lease_expires_at, T0 + 5000);
    cr_assert_eq(fetchq(qs, 1, 10, 5000, T0, &l), 5); /* appends */
    er_job_list_fini(&l);
}

Test(conformance, scheduled_job_not_fetched_until_promoted)
{
    put("later", "q", 0, T0 + 10000, T0);
    cr_assert_eq(state_of("later"), ER_STATE_SCHEDULED);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 10, T0 + 20000, &l), 0);
    int64_t due;
    er_error err = {0};
    cr_assert_eq(OPS->next_due(S, &due, &err), 0);
    cr_assert_eq(due, T0 + 10000);

    int n = -1;
    char **queues = NULL;
    size_t nq = 0;
    cr_assert_eq(OPS->promote(S, T0 + 9999, 100, &n, &queues, &nq, &err), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(nq, 0);
    free(queues);
    cr_assert_eq(OPS->promote(S, T0 + 10000, 100, &n, &queues, &nq, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(nq, 1);
    cr_assert_str_eq(queues[0], "q");
    free(queues[0]);
    free(queues);
    cr_assert_eq(state_of("later"), ER_STATE_WAITING);
    cr_assert_eq(OPS->next_due(S, &due, &err), 0);
    cr_assert_eq(due, INT64_MAX);
    cr_assert_eq(fetch1("q", 10, T0 + 10000, &l), 1);
    er_job_list_fini(&l);
}

Test(conformance, promote_is_bounded_by_limit)
{
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        put(id, i % 2 ? "odd" : "even", 0, T0 + 1 + i, T0);
    }
    int n;
    char **queues;
    size_t nq;
    er_error err = {0};
    cr_assert_eq(OPS->promote(S, T0 + 100, 3, &n, &queues, &nq, &err), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(nq, 2); /* each queue once */
    for (size_t i = 0; i < nq; i++)
        free(queues[i]);
    free(queues);
    cr_assert_eq(OPS->promote(S, T0 + 100, 3, &n, NULL, NULL, &err), 0);
    cr_assert_eq(n, 2);
}

static void set_paused(er_queue_settings *s)
{
    s->paused = true;
}
static void set_unpaused(er_queue_settings *s)
{
    s->paused = false;
}

Test(conformance, paused_queue_is_skipped)
{
    put("p1", "paused", 0, T0, T0);
    put("o1", "open", 0, T0, T0);
    settings_put("paused", set_paused);
    const char *qs[] = {"paused", "open"};
    er_job_list l = {0};
    cr_assert_eq(fetchq(qs, 2, 10, 0, T0, &l), 1);
    cr_assert_str_eq(l.items[0].id, "o1");
    er_job_list_fini(&l);
    settings_put("paused", set_unpaused);
    cr_assert_eq(fetchq(qs, 2, 10, 0, T0, &l), 1);
    cr_assert_str_eq(l.items[0].id, "p1");
    er_job_list_fini(&l);
}

static void set_conc2(er_queue_settings *s)
{
    s->concurrency = 2;
}

Test(conformance, concurrency_limits_active_jobs_per_queue)
{
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        put(id, "q", 0, T0, T0);
    }
    settings_put("q", set_conc2);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 10, T0, &l), 2);
    er_job_list l2 = {0};
    cr_assert_eq(fetch1("q", 10, T0, &l2), 0);
    er_error err = {0};
    cr_assert_eq(OPS->complete(S, l.items[0].id, l.items[0].lease_token, NULL, T0, NULL, &err), 0);
    cr_assert_eq(fetch1("q", 10, T0, &l2), 1);
    cr_assert_str_eq(l2.items[0].id, "c2");
    er_job_list_fini(&l);
    er_job_list_fini(&l2);
}

#include "fetch_policy_cases.h"

/* ---- leases ---- */

Test(conformance, lease_token_is_required_for_every_ack)
{
    put("j", "q", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    const char *tok = l.items[0].lease_token;
    er_error err = {0};
    int64_t exp = 0;
    er_fail_outcome o;
    cr_assert_eq(OPS->complete(S, "j", "0000", NULL, T0, NULL, &err), ER_ESTALE);
    cr_assert_str_eq(err.field, "lease_token");
    cr_assert_eq(OPS->heartbeat(S, "j", "0000", 1000, NULL, T0, &exp, &err), ER_ESTALE);
    cr_assert_eq(OPS->release(S, "j", "0000", T0, &err), ER_ESTALE);
    cr_assert_eq(fail_with("j", "0000", ER_ERR_TRANSIENT, 0, T0, &o), ER_ESTALE);
    cr_assert_eq(OPS->complete(S, "ghost", tok, NULL, T0, NULL, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->heartbeat(S, "ghost", tok, 1000, NULL, T0, &exp, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->release(S, "ghost", tok, T0, &err), ER_ENOTFOUND);
    cr_assert_eq(fail_with("ghost", tok, ER_ERR_TRANSIENT, 0, T0, &o), ER_ENOTFOUND);
    cr_assert_eq(state_of("j"), ER_STATE_ACTIVE); /* refused acks changed nothing */

    cr_assert_eq(OPS->heartbeat(S, "j", tok, 90000, "{\"pct\":50}", T0 + 10, &exp, &err), 0);
    cr_assert_eq(exp, T0 + 90010);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "j", &g, &err), 0);
    cr_assert_eq(g.lease_expires_at, T0 + 90010);
    cr_assert_str_eq(g.progress, "{\"pct\":50}");
    er_job_fini(&g);

    er_ack_info info = {0};
    cr_assert_eq(OPS->complete(S, "j", tok, "{\"ok\":true}", T0 + 20, &info, &err), 0);
    cr_assert_str_eq(info.queue, "q");
    cr_assert_eq(info.started_at, l.items[0].started_at);
    cr_assert_eq(OPS->get_job(S, "j", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_COMPLETED);
    cr_assert_str_eq(g.result, "{\"ok\":true}");
    cr_assert_eq(g.finished_at, T0 + 20);
    cr_assert_null(g.lease_token);
    er_job_fini(&g);
    /* the same token again: the job is no longer active */
    cr_assert_eq(OPS->complete(S, "j", tok, NULL, T0 + 30, NULL, &err), ER_ESTALE);
    cr_assert_eq(OPS->heartbeat(S, "j", tok, 1000, NULL, T0, &exp, &err), ER_ESTALE);
    er_job_list_fini(&l);
}

Test(conformance, release_returns_job_without_counting_the_attempt)
{
    put("r", "q", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    er_error err = {0};
    cr_assert_eq(OPS->release(S, "r", l.items[0].lease_token, T0 + 5, &err), 0);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "r", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_WAITING);
    cr_assert_eq(g.attempts, 0);
    cr_assert_null(g.lease_token);
    er_job_fini(&g);
    er_job_list_fini(&l);
    cr_assert_eq(fetch1("q", 1, T0 + 6, &l), 1);
    cr_assert_eq(l.items[0].attempts, 1);
    cr_assert_eq(l.items[0].started, 2);
    er_job_list_fini(&l);
}

/* ---- failures ---- */

Test(conformance, transient_failure_backs_off_then_dies_after_max_attempts)
{
    put("t", "q", 0, T0, T0); /* max_attempts 3, fixed 1000 ms backoff */
    int64_t now = T0;
    for (int attempt = 1; attempt <= 3; attempt++) {
        er_job_list l = {0};
        cr_assert_eq(fetch1("q", 1, now, &l), 1, "attempt %d", attempt);
        cr_assert_eq(l.items[0].attempts, attempt);
        er_fail_outcome o;
        cr_assert_eq(fail_with("t", l.items[0].lease_token, ER_ERR_TRANSIENT, 0, now, &o), 0);
        er_job g;
        er_error err = {0};
        cr_assert_eq(OPS->get_job(S, "t", &g, &err), 0);
        cr_assert_not_null(strstr(g.last_error, "\"transient\""));
        cr_assert_null(g.lease_token);
        if (attempt < 3) {
            cr_assert_eq(o.state, ER_STATE_SCHEDULED);
            cr_assert_eq(o.run_at, now + 1000);
            cr_assert_eq(g.state, ER_STATE_SCHEDULED);
            cr_assert_eq(g.run_at, now + 1000);
            cr_assert_eq(fetch1("q", 1, now + 999, &l), 1); /* scheduled: not fetchable */
            int n;
            cr_assert_eq(OPS->promote(S, now + 1000, 10, &n, NULL, NULL, &err), 0);
            cr_assert_eq(n, 1);
            now += 1000;
        } else {
            cr_assert_eq(o.state, ER_STATE_DEAD);
            cr_assert_eq(g.state, ER_STATE_DEAD);
            cr_assert_eq(g.finished_at, now);
            cr_assert_eq(g.attempts, 3);
        }
        er_job_fini(&g);
        er_job_list_fini(&l);
    }
}

Test(conformance, permanent_failure_goes_dead_at_once)
{
    put("p", "q", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    er_fail_outcome o;
    cr_assert_eq(fail_with("p", l.items[0].lease_token, ER_ERR_PERMANENT, 0, T0 + 1, &o), 0);
    cr_assert_eq(o.state, ER_STATE_DEAD);
    cr_assert_eq(state_of("p"), ER_STATE_DEAD);
    er_job_list_fini(&l);
}

Test(conformance, retry_later_is_not_counted_as_an_attempt)
{
    put("rl", "q", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    er_fail_outcome o;
    cr_assert_eq(fail_with("rl", l.items[0].lease_token, ER_ERR_RETRY_LATER, 5000, T0, &o), 0);
    cr_assert_eq(o.state, ER_STATE_SCHEDULED);
    er_job g;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, "rl", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_SCHEDULED);
    cr_assert_eq(g.attempts, 0);
    cr_assert_eq(g.started, 1);
    cr_assert_eq(g.run_at, T0 + 5000);
    er_job_fini(&g);
    er_job_list_fini(&l);
}

Test(conformance, throttled_failure_pauses_the_whole_queue)
{
    put("t1", "q", 0, T0, T0);
    put("t2", "q", 0, T0, T0);
    put("x1", "other", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    er_fail_outcome o;
    cr_assert_eq(fail_with("t1", l.items[0].lease_token, ER_ERR_THROTTLED, 3000, T0, &o), 0);
    cr_assert_eq(o.queue_pause_until, T0 + 3000);
    cr_assert_eq(state_of("t1"), ER_STATE_SCHEDULED);
    er_job_list_fini(&l);
    const char *qs[] = {"q", "other"};
    cr_assert_eq(fetchq(qs, 2, 10, 0, T0 + 2999, &l), 1);
    cr_assert_str_eq(l.items[0].id, "x1");
    er_job_list_fini(&l);
    cr_assert_eq(fetch1("q", 10, T0 + 3000, &l), 1);
    cr_assert_str_eq(l.items[0].id, "t2");
    er_job_list_fini(&l);
}

/* Leases the next job of `queue` and fails it throttled for `after` ms. */
static void throttle_next(const char *queue, int64_t after, er_fail_outcome *o)
{
    er_job_list l = {0};
    cr_assert_eq(fetch1(queue, 1, T0, &l), 1);
    cr_assert_eq(fail_with(l.items[0].id, l.items[0].lease_token, ER_ERR_THROTTLED, after, T0, o),
                 0);
    er_job_list_fini(&l);
}

static int64_t throttled_until_of(const char *queue)
{
    er_queue_info *qs;
    size_t n;
    er_error err = {0};
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0, "%s", err.message);
    int64_t t = -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(qs[i].name, queue) == 0)
            t = qs[i].throttled_until;
    er_queue_info_list_free(qs, n);
    cr_assert_eq(OPS->list_queue_settings(S, &qs, &n, &err), 0, "%s", err.message);
    for (size_t i = 0; i < n; i++)
        if (strcmp(qs[i].name, queue) == 0)
            cr_assert_eq(qs[i].throttled_until, t, "both lists agree");
    er_queue_info_list_free(qs, n);
    return t;
}

Test(conformance, throttle_is_capped_at_throttle_max_ms_and_listed)
{
    put("t1", "q", 0, T0, T0);
    put("t2", "q", 0, T0, T0);
    er_fail_outcome o;
    throttle_next("q", ER_DELAY_MAX_MS, &o);
    er_job_list l = {0};
    cr_assert_eq(o.queue_pause_until, T0 + ER_THROTTLE_MAX_DEFAULT_MS, "capped at 1 h");
    cr_assert_eq(throttled_until_of("q"), T0 + ER_THROTTLE_MAX_DEFAULT_MS);
    er_job g;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, "t1", &g, &err), 0);
    cr_assert_eq(g.run_at, T0 + ER_THROTTLE_MAX_DEFAULT_MS, "the job's delay too");
    er_job_fini(&g);
    cr_assert_eq(fetch1("q", 10, T0 + ER_THROTTLE_MAX_DEFAULT_MS - 1, &l), 0);
    er_job_list_fini(&l);
    cr_assert_eq(fetch1("q", 10, T0 + ER_THROTTLE_MAX_DEFAULT_MS, &l), 1,
                 "t2: t1 waits for promotion");
    cr_assert_str_eq(l.items[0].id, "t2");
    er_job_list_fini(&l);
}

static void set_throttle_max_5s(er_queue_settings *s)
{
    s->throttle_max_ms = 5000;
}

Test(conformance, throttle_cap_is_the_queues_setting)
{
    settings_put("q", set_throttle_max_5s);
    put("t1", "q", 0, T0, T0);
    er_fail_outcome o;
    throttle_next("q", 60000, &o);
    cr_assert_eq(o.queue_pause_until, T0 + 5000);
    cr_assert_eq(o.run_at, T0 + 5000);
    cr_assert_eq(throttled_until_of("q"), T0 + 5000);
}

Test(conformance, clearing_a_throttle_lets_fetch_hand_out_jobs)
{
    put("t1", "q", 0, T0, T0);
    put("t2", "q", 0, T0, T0);
    cr_assert_eq(throttled_until_of("q"), 0, "a queue never throttled");
    er_fail_outcome o;
    throttle_next("q", 600000, &o);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 10, T0 + 1, &l), 0);
    er_job_list_fini(&l);
    er_error err = {0};
    cr_assert_eq(OPS->clear_queue_throttle(S, "q", &err), 0, "%s", err.message);
    cr_assert_eq(throttled_until_of("q"), 0);
    cr_assert_eq(fetch1("q", 10, T0 + 1, &l), 1);
    cr_assert_str_eq(l.items[0].id, "t2");
    er_job_list_fini(&l);
    /* a queue nobody stored: nothing to clear, no error */
    cr_assert_eq(OPS->clear_queue_throttle(S, "never", &err), 0, "%s", err.message);
    /* reopened: the clear was stored, not only cached */
    OPS->close(S);
    open_store();
    cr_assert_eq(throttled_until_of("q"), 0);
}

/* ---- reaper ---- */

static void set_max_stalled1(er_queue_settings *s)
{
    s->max_stalled = 1;
}

Test(conformance, reap_requeues_expired_leases_then_kills_past_max_stalled)
{
    settings_put("q", set_max_stalled1);
    put("s", "q", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    int64_t exp = l.items[0].lease_expires_at;
    char *old_token = strdup(l.items[0].lease_token);
    er_job_list_fini(&l);
    int64_t due;
    er_error err = {0};
    cr_assert_eq(OPS->next_due(S, &due, &err), 0);
    cr_assert_eq(due, exp);

    int n;
    char **queues;
    size_t nq;
    cr_assert_eq(OPS->reap(S, exp - 1, 100, &n, &queues, &nq, NULL, &err), 0);
    cr_assert_eq(n, 0);
    free(queues);
    er_job_list reaped = {0};
    cr_assert_eq(OPS->reap(S, exp, 100, &n, &queues, &nq, &reaped, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(reaped.len, 1);
    cr_assert_str_eq(reaped.items[0].id, "s");
    cr_assert_str_eq(reaped.items[0].queue, "q");
    cr_assert_eq(reaped.items[0].state, ER_STATE_WAITING);
    er_job_list_fini(&reaped);
    cr_assert_eq(nq, 1);
    cr_assert_str_eq(queues[0], "q");
    free(queues[0]);
    free(queues);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "s", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_WAITING);
    cr_assert_eq(g.stalled, 1);
    cr_assert_null(g.lease_token);
    er_job_fini(&g);
    /* the old worker's token no longer works */
    cr_assert_eq(OPS->complete(S, "s", old_token, NULL, exp, NULL, &err), ER_ESTALE);
    free(old_token);

    cr_assert_eq(fetch1("q", 1, exp, &l), 1);
    cr_assert_eq(l.items[0].attempts, 2);
    int64_t exp2 = l.items[0].lease_expires_at;
    er_job_list_fini(&l);
    cr_assert_eq(OPS->reap(S, exp2, 100, &n, NULL, NULL, &reaped, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(reaped.len, 1);
    cr_assert_eq(reaped.items[0].state, ER_STATE_DEAD, "the jobs that went dead are reported");
    cr_assert_str_eq(reaped.items[0].id, "s");
    er_job_list_fini(&reaped);
    cr_assert_eq(OPS->get_job(S, "s", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_DEAD);
    cr_assert_eq(g.stalled, 2);
    cr_assert_eq(g.finished_at, exp2);
    cr_assert_not_null(strstr(g.last_error, "\"class\":\"stalled\""));
    er_job_fini(&g);
}

/* A stall uses up the attempt it leased: a job of max_attempts 1 is dead at
 * its first expiry, whatever max_stalled allows. */
Test(conformance, reap_kills_a_stall_on_the_last_attempt)
{
    er_job j;
    mkjob(&j, "one", "q", 0, T0, T0);
    j.max_attempts = 1;
    bool dupl = true;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0, "%s", err.message);
    er_job_fini(&j);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    int64_t exp = l.items[0].lease_expires_at;
    er_job_list_fini(&l);
    int n;
    er_job_list reaped = {0};
    cr_assert_eq(OPS->reap(S, exp, 100, &n, NULL, NULL, &reaped, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    cr_assert_eq(reaped.len, 1);
    cr_assert_eq(reaped.items[0].state, ER_STATE_DEAD);
    er_job_list_fini(&reaped);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "one", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_DEAD);
    cr_assert_eq(g.attempts, 1);
    cr_assert_eq(g.stalled, 1);
    cr_assert_not_null(strstr(g.last_error, "\"class\":\"stalled\""));
    cr_assert_not_null(strstr(g.last_error, "last attempt"), "%s", g.last_error);
    er_job_fini(&g);
    cr_assert_eq(fetch1("q", 1, exp, &l), 0, "it never runs as attempt 2 of 1");
    er_job_list_fini(&l);
}

/* ---- dead letters ---- */

static void kill_job(const char *id, const char *queue, int64_t now)
{
    put(id, queue, 0, now, now);
    er_job_list l = {0};
    cr_assert_eq(fetch1(queue, 1, now, &l), 1);
    cr_assert_str_eq(l.items[0].id, id);
    er_fail_outcome o;
    cr_assert_eq(fail_with(id, l.items[0].lease_token, ER_ERR_PERMANENT, 0, now, &o), 0);
    er_job_list_fini(&l);
}

/* Faktory's unique jobs (docs/faktory.md): the lock's owner token is kept
 * with the job, by enqueue and enqueue_many, and read back by get_job and
 * fetch, so any server can give the lock back; a redriven copy has none. */
Test(conformance, a_unique_lock_token_is_kept_with_the_job)
{
    static const char tok[] = "0123456789abcdef0123456789abcdef";
    er_job jobs[3];
    mkjob(&jobs[0], "u1", "uq", 5, T0, T0);
    jobs[0].unique_token = sdup(tok);
    mkjob(&jobs[1], "u2", "uq", 4, T0, T0);
    jobs[1].unique_token = sdup("fedcba9876543210fedcba9876543210");
    mkjob(&jobs[2], "u3", "uq", 3, T0, T0);
    bool dupl = true;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &jobs[0], &dupl, NULL, NULL, &err), 0, "%s", err.message);
    bool dup2[2] = {true, true};
    cr_assert_eq(er_store_enqueue_many(OPS, S, &jobs[1], 2, dup2, NULL, &err), 0, "%s",
                 err.message);
    for (int i = 0; i < 3; i++)
        er_job_fini(&jobs[i]);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "u1", &g, &err), 0);
    cr_assert_str_eq(g.unique_token, tok);
    er_job_fini(&g);
    cr_assert_eq(OPS->get_job(S, "u3", &g, &err), 0);
    cr_assert_null(g.unique_token);
    er_job_fini(&g);
    er_job_list l = {0};
    cr_assert_eq(fetch1("uq", 3, T0, &l), 3);
    cr_assert_str_eq(l.items[0].unique_token, tok);
    cr_assert_str_eq(l.items[1].unique_token, "fedcba9876543210fedcba9876543210");
    cr_assert_null(l.items[2].unique_token);
    er_fail_outcome o;
    cr_assert_eq(fail_with("u1", l.items[0].lease_token, ER_ERR_PERMANENT, 0, T0, &o), 0);
    er_job_list_fini(&l);
    er_job nj;
    cr_assert_eq(OPS->redrive(S, "u1", T0 + 100, &nj, &err), 0, "%s", err.message);
    cr_assert_null(nj.unique_token, "the copy took no lock");
    er_job_fini(&nj);
    cr_assert_eq(OPS->get_job(S, "u1-redrive-1", &g, &err), 0);
    cr_assert_null(g.unique_token);
    er_job_fini(&g);
}

Test(conformance, redrive_copies_the_dead_job_with_a_numbered_id)
{
    kill_job("d", "q", T0);
    er_job nj;
    er_error err = {0};
    cr_assert_eq(OPS->redrive(S, "d", T0 + 100, &nj, &err), 0, "%s", err.message);
    cr_assert_str_eq(nj.id, "d-redrive-1");
    cr_assert_eq(nj.state, ER_STATE_WAITING);
    cr_assert_eq(nj.attempts, 0);
    cr_assert_str_eq(nj.payload, "{\"to\":\"a@b.c\"}");
    cr_assert_eq(nj.max_attempts, 3);
    cr_assert_null(nj.last_error);
    er_job_fini(&nj);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "d", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_DEAD);
    cr_assert_eq(g.redriven_at, T0 + 100);
    cr_assert_eq(g.redrive_count, 1);
    er_job_fini(&g);
    cr_assert_eq(OPS->redrive(S, "d", T0 + 200, &nj, &err), 0);
    cr_assert_str_eq(nj.id, "d-redrive-2");
    er_job_fini(&nj);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 10, T0 + 300, &l), 2);
    er_job_list_fini(&l);
    put("alive", "q", 0, T0, T0);
    cr_assert_eq(OPS->redrive(S, "alive", T0, &nj, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->redrive(S, "ghost", T0, &nj, &err), ER_ENOTFOUND);
}

Test(conformance, list_dead_is_newest_first_with_cursor_and_queue_filter)
{
    kill_job("d1", "a", T0 + 1);
    kill_job("d2", "b", T0 + 2);
    kill_job("d3", "a", T0 + 3);
    er_job_list l = {0};
    char *cur = NULL;
    er_error err = {0};
    cr_assert_eq(OPS->list_dead(S, NULL, 2, NULL, &l, &cur, &err), 0);
    cr_assert_eq(l.len, 2);
    cr_assert_str_eq(l.items[0].id, "d3");
    cr_assert_str_eq(l.items[1].id, "d2");
    cr_assert_not_null(cur);
    er_job_list_fini(&l);
    char *cur2 = NULL;
    cr_assert_eq(OPS->list_dead(S, NULL, 2, cur, &l, &cur2, &err), 0);
    cr_assert_eq(l.len, 1);
    cr_assert_str_eq(l.items[0].id, "d1");
    cr_assert_null(cur2);
    free(cur);
    er_job_list_fini(&l);
    cr_assert_eq(OPS->list_dead(S, "a", 10, NULL, &l, &cur, &err), 0);
    cr_assert_eq(l.len, 2);
    cr_assert_str_eq(l.items[0].id, "d3");
    cr_assert_str_eq(l.items[1].id, "d1");
    cr_assert_null(cur);
    er_job_list_fini(&l);
    cr_assert_eq(OPS->list_dead(S, NULL, 2, "garbage", &l, &cur, &err), ER_EINVAL);
}

Test(conformance, delete_dead_only_deletes_dead_jobs)
{
    kill_job("d", "q", T0);
    put("w", "q", 0, T0, T0);
    er_error err = {0};
    cr_assert_eq(OPS->delete_dead(S, "w", &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->delete_dead(S, "d", &err), 0);
    cr_assert_eq(OPS->delete_dead(S, "d", &err), ER_ENOTFOUND);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "d", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(state_of("w"), ER_STATE_WAITING);
}

/* ---- retention ---- */

static void set_keep_age_60s(er_queue_settings *s)
{
    s->retention = (er_retention){.completed_age_s = 60, .completed_count = 0, .dead_age_s = 120};
}
static void set_keep_count_2(er_queue_settings *s)
{
    s->retention = (er_retention){.completed_age_s = 0, .completed_count = 2, .dead_age_s = 0};
}

static void complete_job(const char *id, const char *queue, int64_t now)
{
    put(id, queue, 0, now, now);
    er_job_list l = {0};
    cr_assert_eq(fetch1(queue, 1, now, &l), 1);
    er_error err = {0};
    cr_assert_eq(OPS->complete(S, id, l.items[0].lease_token, NULL, now, NULL, &err), 0);
    er_job_list_fini(&l);
}

Test(conformance, retention_deletes_by_age_and_by_count)
{
    settings_put("age", set_keep_age_60s);
    settings_put("cnt", set_keep_count_2);
    complete_job("a-old", "age", T0);
    complete_job("a-new", "age", T0 + 50000);
    kill_job("a-dead", "age", T0);
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        complete_job(id, "cnt", T0 + i);
    }
    kill_job("c-dead", "cnt", T0); /* dead kept forever in "cnt" */
    put("waiting", "age", 0, T0, T0);

    int n;
    er_error err = {0};
    cr_assert_eq(OPS->retention(S, T0 + 61000, 1000, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 3); /* a-old, c0, c1 */
    er_job g;
    cr_assert_eq(OPS->get_job(S, "a-old", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->get_job(S, "c0", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->get_job(S, "c1", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(state_of("a-new"), ER_STATE_COMPLETED);
    cr_assert_eq(state_of("c2"), ER_STATE_COMPLETED);
    cr_assert_eq(state_of("c3"), ER_STATE_COMPLETED);
    cr_assert_eq(state_of("a-dead"), ER_STATE_DEAD);
    cr_assert_eq(state_of("c-dead"), ER_STATE_DEAD);
    cr_assert_eq(state_of("waiting"), ER_STATE_WAITING);

    cr_assert_eq(OPS->retention(S, T0 + 121000, 1, &n, &err), 0);
    cr_assert_eq(n, 1); /* bounded by limit */
    cr_assert_eq(OPS->retention(S, T0 + 121000, 1000, &n, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(OPS->get_job(S, "a-dead", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->get_job(S, "a-new", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(state_of("c-dead"), ER_STATE_DEAD);
    cr_assert_eq(state_of("waiting"), ER_STATE_WAITING);
}

/* ---- tombstones: ids that outlive retention ---- */

/* Reopens the store with another dedup window (the data stays). */
static void reopen(int64_t window)
{
    OPS->close(S);
    g_window = window;
    open_store();
}

/* Enqueues id at `now`: 1 when it is a duplicate a tombstone remembers
 * (filling *t: queue, state, finished_at), 0 when stored, -1 when a
 * duplicate of a stored job. */
static int enqueue_at(const char *id, int64_t now, er_tombstone *t)
{
    er_job j, existing;
    mkjob(&j, id, "other", 0, now, now);
    er_job_init(&existing);
    er_tombstone_list tl = {0};
    bool dupl = false;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, &existing, &tl, &err), 0, "%s", err.message);
    int what = 0;
    if (tl.len) {
        cr_assert(dupl);
        cr_assert_eq(tl.len, 1);
        cr_assert_eq(tl.items[0].index, 0);
        cr_assert_null(existing.id, "no stored job for a remembered id");
        if (t) {
            *t = tl.items[0];
            t->queue = strdup(tl.items[0].queue);
        }
        what = 1;
    } else if (dupl) {
        cr_assert_str_eq(existing.id, id);
        what = -1;
    }
    er_tombstone_list_fini(&tl);
    er_job_fini(&existing);
    er_job_fini(&j);
    return what;
}

static int retention_at(int64_t now, int limit)
{
    int n = -1;
    er_error err = {0};
    cr_assert_eq(OPS->retention(S, now, limit, &n, &err), 0, "%s", err.message);
    return n;
}

Test(conformance, tombstone_keeps_a_deleted_id_a_duplicate)
{
    settings_put("age", set_keep_age_60s);
    complete_job("t-done", "age", T0);
    kill_job("t-dead", "age", T0 + 1);
    cr_assert_eq(retention_at(T0 + 121001, 1000), 2);
    er_error err = {0};
    er_job g;
    cr_assert_eq(OPS->get_job(S, "t-done", &g, &err), ER_ENOTFOUND);

    er_tombstone t;
    cr_assert_eq(enqueue_at("t-done", T0 + 200000, &t), 1);
    cr_assert_str_eq(t.queue, "age");
    cr_assert_eq(t.state, ER_STATE_COMPLETED);
    cr_assert_eq(t.finished_at, T0);
    free(t.queue);
    cr_assert_eq(enqueue_at("t-dead", T0 + 200000, &t), 1);
    cr_assert_eq(t.state, ER_STATE_DEAD);
    cr_assert_eq(t.finished_at, T0 + 1);
    free(t.queue);
    cr_assert_eq(OPS->get_job(S, "t-done", &g, &err), ER_ENOTFOUND, "nothing was stored");

    /* bulk: remembered ids are duplicates, listed with their tombstones in order */
    er_job jobs[4];
    const char *ids[] = {"t-dead", "fresh", "t-done", "fresh"};
    for (int i = 0; i < 4; i++)
        mkjob(&jobs[i], ids[i], "other", 0, T0 + 200000, T0 + 200000);
    bool dup[4];
    er_tombstone_list tl = {0};
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 4, dup, &tl, &err), 0, "%s", err.message);
    cr_assert(dup[0] && !dup[1] && dup[2] && dup[3]);
    cr_assert_eq(tl.len, 2);
    cr_assert_eq(tl.items[0].index, 0);
    cr_assert_eq(tl.items[0].state, ER_STATE_DEAD);
    cr_assert_eq(tl.items[1].index, 2);
    cr_assert_eq(tl.items[1].state, ER_STATE_COMPLETED);
    cr_assert_str_eq(tl.items[1].queue, "age");
    er_tombstone_list_fini(&tl);
    for (int i = 0; i < 4; i++)
        er_job_fini(&jobs[i]);
    cr_assert_eq(state_of("fresh"), ER_STATE_WAITING);
    cr_assert_eq(OPS->get_job(S, "t-dead", &g, &err), ER_ENOTFOUND);
}

Test(conformance, tombstone_past_the_window_is_new)
{
    reopen(120000);
    settings_put("age", set_keep_age_60s);
    complete_job("w1", "age", T0);
    complete_job("w2", "age", T0 + 30000);
    cr_assert_eq(retention_at(T0 + 91000, 1000), 2);
    cr_assert_eq(enqueue_at("w1", T0 + 119999, NULL), 1, "at the window's last ms");
    cr_assert_eq(enqueue_at("w1", T0 + 120000, NULL), 0, "past the window it is new");
    cr_assert_eq(state_of("w1"), ER_STATE_WAITING);
    cr_assert_eq(enqueue_at("w2", T0 + 120001, NULL), 1);
    /* a job stored again wins over its old tombstone, even when a longer
     * window would still remember the id */
    reopen(ER_DEDUP_WINDOW_DEFAULT_MS);
    cr_assert_eq(enqueue_at("w1", T0 + 130000, NULL), -1);
}

Test(conformance, tombstones_are_cleaned_past_the_window_in_bounded_batches)
{
    reopen(120000);
    settings_put("age", set_keep_age_60s);
    complete_job("c1", "age", T0);
    complete_job("c2", "age", T0);
    complete_job("c3", "age", T0 + 50000);
    cr_assert_eq(retention_at(T0 + 61000, 1000), 2);
    cr_assert_eq(retention_at(T0 + 111000, 1000), 1);
    /* past c1's and c2's window, not c3's: a pass of limit 1 cleans one */
    cr_assert_eq(retention_at(T0 + 120001, 1), 0);
    /* a longer window shows which tombstones are still kept */
    reopen(ER_DEDUP_WINDOW_DEFAULT_MS);
    int kept = (enqueue_at("c1", T0 + 200000, NULL) == 1) + (enqueue_at("c2", T0 + 200000, NULL) == 1);
    cr_assert_eq(kept, 1, "one of c1, c2 cleaned, the other kept");
    cr_assert_eq(enqueue_at("c3", T0 + 200000, NULL), 1, "c3 is within its window");
    /* past every window: all cleaned */
    reopen(120000);
    retention_at(T0 + 500000, 1000);
    reopen(ER_DEDUP_WINDOW_DEFAULT_MS);
    cr_assert_eq(enqueue_at("c3", T0 + 500001, NULL), 0);
}

Test(conformance, tombstones_only_for_ids_a_client_gave_and_never_for_keys)
{
    settings_put("age", set_keep_age_60s);
    /* a generated id is not remembered */
    er_job j;
    mkjob(&j, "0190aa00000000000000000000", "age", 0, T0, T0);
    j.id_generated = true;
    bool dupl = true;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0, "%s", err.message);
    er_job_fini(&j);
    er_job_list l = {0};
    cr_assert_eq(fetch1("age", 1, T0, &l), 1);
    cr_assert_eq(OPS->complete(S, l.items[0].id, l.items[0].lease_token, NULL, T0, NULL, &err), 0);
    er_job_list_fini(&l);
    /* an idempotency key is not remembered: k2 shares k1's */
    mkjob(&j, "k1", "age", 0, T0, T0);
    free(j.idempotency_key);
    j.idempotency_key = sdup("shared-key");
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0);
    er_job_fini(&j);
    cr_assert_eq(fetch1("age", 1, T0, &l), 1);
    cr_assert_eq(OPS->complete(S, "k1", l.items[0].lease_token, NULL, T0, NULL, &err), 0);
    er_job_list_fini(&l);
    cr_assert_eq(retention_at(T0 + 61000, 1000), 2);

    cr_assert_eq(enqueue_at("0190aa00000000000000000000", T0 + 62000, NULL), 0);
    mkjob(&j, "k2", "age", 0, T0 + 62000, T0 + 62000);
    free(j.idempotency_key);
    j.idempotency_key = sdup("shared-key");
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0);
    cr_assert(!dupl, "keys are not deduplicated");
    er_job_fini(&j);
    cr_assert_eq(enqueue_at("k1", T0 + 62000, NULL), 1, "the id is");
}

Test(conformance, tombstone_window_zero_remembers_nothing)
{
    reopen(0);
    settings_put("age", set_keep_age_60s);
    complete_job("z1", "age", T0);
    cr_assert_eq(retention_at(T0 + 61000, 1000), 1);
    cr_assert_eq(enqueue_at("z1", T0 + 61001, NULL), 0);
}

Test(conformance, redrive_refused_when_a_tombstone_remembers_its_id)
{
    settings_put("age", set_keep_age_60s);
    complete_job("x-redrive-1", "age", T0);
    cr_assert_eq(retention_at(T0 + 61000, 1000), 1);
    kill_job("x", "q", T0 + 62000);
    er_job nj;
    er_error err = {0};
    cr_assert_eq(OPS->redrive(S, "x", T0 + 63000, &nj, &err), ER_ECONFLICT);
    cr_assert_str_eq(err.field, "id");
    cr_assert(strstr(err.message, "x-redrive-1"), "%s", err.message);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "x-redrive-1", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->get_job(S, "x", &g, &err), 0);
    cr_assert_eq(g.redrive_count, 0, "the dead job is as it was");
    er_job_fini(&g);
}

/* ---- cancel ---- */

Test(conformance, cancel_only_scheduled_or_waiting_jobs)
{
    put("w", "q", 0, T0, T0);
    put("s", "q", 0, T0 + 9000, T0);
    put("a", "act", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("act", 1, T0, &l), 1);
    er_job_list_fini(&l);
    er_job out;
    er_error err = {0};
    cr_assert_eq(OPS->cancel(S, "w", T0 + 1, &out, &err), 0);
    cr_assert_eq(out.state, ER_STATE_CANCELLED);
    cr_assert_eq(out.finished_at, T0 + 1);
    er_job_fini(&out);
    cr_assert_eq(OPS->cancel(S, "s", T0 + 1, &out, &err), 0);
    er_job_fini(&out);
    cr_assert_eq(OPS->cancel(S, "a", T0 + 1, &out, &err), ER_ECONFLICT);
    cr_assert_eq(OPS->cancel(S, "w", T0 + 1, &out, &err), ER_ECONFLICT);
    cr_assert_eq(OPS->cancel(S, "ghost", T0 + 1, &out, &err), ER_ENOTFOUND);
    cr_assert_eq(state_of("a"), ER_STATE_ACTIVE);
    cr_assert_eq(fetch1("q", 10, T0 + 10000, &l), 0);
    int n;
    cr_assert_eq(OPS->promote(S, T0 + 10000, 10, &n, NULL, NULL, &err), 0);
    cr_assert_eq(n, 0);
}

/* ---- listing ---- */

Test(conformance, list_jobs_pages_in_insertion_order)
{
    for (int i = 0; i < 7; i++) {
        char id[16];
        snprintf(id, sizeof id, "j%d", i);
        put(id, "q", i % 3, T0, T0); /* priorities must not change list order */
    }
    put("other", "o", 0, T0, T0);
    char *cur = NULL;
    int seen = 0;
    er_error err = {0};
    for (int page = 0; page < 4; page++) {
        er_job_list l = {0};
        char *next = NULL;
        cr_assert_eq(OPS->list_jobs(S, "q", ER_STATE_WAITING, 3, cur, &l, &next, &err), 0);
        for (size_t i = 0; i < l.len; i++) {
            char id[16];
            snprintf(id, sizeof id, "j%d", seen++);
            cr_assert_str_eq(l.items[i].id, id);
        }
        free(cur);
        cur = next;
        er_job_list_fini(&l);
        if (!cur)
            break;
    }
    cr_assert_eq(seen, 7);
    cr_assert_null(cur);
    er_job_list l = {0};
    cr_assert_eq(OPS->list_jobs(S, "q", ER_STATE_ACTIVE, 3, NULL, &l, &cur, &err), 0);
    cr_assert_eq(l.len, 0);
    cr_assert_eq(OPS->list_jobs(S, "q", ER_STATE_WAITING, 3, "x1", &l, &cur, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "cursor");
}

/* Lists one page of `queue`'s jobs in `state` as "id,id,..." in *out. */
static void page_ids(const char *queue, er_state state, int limit, const char *cursor,
                     char *out, size_t outsz, char **next)
{
    er_job_list l = {0};
    er_error err = {0};
    cr_assert_eq(OPS->list_jobs(S, queue, state, limit, cursor, &l, next, &err), 0, "%s",
                 err.message);
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < l.len; i++) {
        cr_assert_eq(l.items[i].state, state);
        len += (size_t)snprintf(out + len, outsz - len, "%s%s", i ? "," : "", l.items[i].id);
        cr_assert_lt(len, outsz);
    }
    er_job_list_fini(&l);
}

Test(conformance, active_jobs_list_in_insertion_order_and_count_by_queue)
{
    /* leased in priority order (a4 first), listed in insertion order */
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "a%d", i);
        put(id, "q", i, T0, T0);
    }
    put("o1", "o", 0, T0, T0);
    put("o2", "o", 0, T0, T0);
    er_job_list l = {0}, lo = {0};
    cr_assert_eq(fetch1("q", 5, T0, &l), 5);
    cr_assert_eq(fetch1("o", 1, T0, &lo), 1);
    char ids[128], *cur = NULL, *next = NULL;
    page_ids("q", ER_STATE_ACTIVE, 2, NULL, ids, sizeof ids, &cur);
    cr_assert_str_eq(ids, "a0,a1");
    cr_assert_not_null(cur);
    page_ids("q", ER_STATE_ACTIVE, 2, cur, ids, sizeof ids, &next);
    cr_assert_str_eq(ids, "a2,a3");
    free(cur);
    cur = next;
    page_ids("q", ER_STATE_ACTIVE, 2, cur, ids, sizeof ids, &next);
    cr_assert_str_eq(ids, "a4");
    cr_assert_null(next);
    free(cur);
    page_ids("o", ER_STATE_ACTIVE, 10, NULL, ids, sizeof ids, &next);
    cr_assert_str_eq(ids, "o1");
    page_ids("o", ER_STATE_WAITING, 10, NULL, ids, sizeof ids, &next);
    cr_assert_str_eq(ids, "o2");
    /* one completes: it leaves the active list and is counted completed */
    er_error err = {0};
    for (size_t i = 0; i < l.len; i++)
        if (strcmp(l.items[i].id, "a2") == 0)
            cr_assert_eq(OPS->complete(S, "a2", l.items[i].lease_token, NULL, T0, NULL, &err), 0);
    page_ids("q", ER_STATE_ACTIVE, 10, NULL, ids, sizeof ids, &next);
    cr_assert_str_eq(ids, "a0,a1,a3,a4");
    page_ids("q", ER_STATE_COMPLETED, 10, NULL, ids, sizeof ids, &next);
    cr_assert_str_eq(ids, "a2");
    er_queue_info *qs;
    size_t n;
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(qs[0].name, "o");
    cr_assert_eq(qs[0].counts[ER_STATE_ACTIVE], 1);
    cr_assert_eq(qs[0].counts[ER_STATE_WAITING], 1);
    cr_assert_str_eq(qs[1].name, "q");
    cr_assert_eq(qs[1].counts[ER_STATE_ACTIVE], 4);
    cr_assert_eq(qs[1].counts[ER_STATE_COMPLETED], 1);
    cr_assert_eq(qs[1].counts[ER_STATE_WAITING], 0);
    er_queue_info_list_free(qs, n);
    er_job_list_fini(&l);
    er_job_list_fini(&lo);
}

static void set_conc5(er_queue_settings *s)
{
    s->concurrency = 5;
}

Test(conformance, list_queues_counts_states_and_reports_settings)
{
    complete_job("c1", "b", T0);
    put("w1", "b", 0, T0 - 500, T0);
    put("w2", "b", 9, T0 - 900, T0);
    put("s1", "b", 0, T0 + 500, T0);
    settings_put("a", set_conc5); /* a queue with settings but no jobs */
    er_queue_info *qs;
    size_t n;
    er_error err = {0};
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(qs[0].name, "a");
    cr_assert_eq(qs[0].settings.concurrency, 5);
    cr_assert_eq(qs[0].oldest_waiting_ms, 0);
    cr_assert_str_eq(qs[1].name, "b");
    cr_assert_eq(qs[1].counts[ER_STATE_WAITING], 2);
    cr_assert_eq(qs[1].counts[ER_STATE_SCHEDULED], 1);
    cr_assert_eq(qs[1].counts[ER_STATE_COMPLETED], 1);
    cr_assert_eq(qs[1].counts[ER_STATE_ACTIVE], 0);
    cr_assert_eq(qs[1].oldest_waiting_ms, T0 - 900);
    cr_assert_eq(qs[1].settings.lease_ms, ER_DEFAULT_LEASE_MS);
    er_queue_info_list_free(qs, n);
}

Test(conformance, queue_settings_round_trip_and_default)
{
    er_queue_settings d, got;
    er_queue_settings_default(&d);
    er_error err = {0};
    cr_assert_eq(OPS->get_queue_settings(S, "never", &got, &err), 0);
    cr_assert_eq(got.lease_ms, d.lease_ms);
    cr_assert_eq(got.max_stalled, d.max_stalled);
    got.concurrency = 3;
    got.lease_ms = 5000;
    got.paused = true;
    got.retention.completed_count = 10;
    cr_assert_eq(OPS->put_queue_settings(S, "never", &got, &err), 0);
    OPS->close(S);
    open_store();
    er_queue_settings again;
    cr_assert_eq(OPS->get_queue_settings(S, "never", &again, &err), 0);
    cr_assert_eq(again.concurrency, 3);
    cr_assert_eq(again.lease_ms, 5000);
    cr_assert(again.paused);
    cr_assert_eq(again.retention.completed_count, 10);
}

Test(conformance, settings_changed_on_another_connection_are_seen)
{
    put("j", "q", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1); /* loads "q" into any per-connection cache */
    er_job_list_fini(&l);
    put("k", "q", 0, T0, T0);
    er_store *other;
    er_error err = {0};
    er_store_options opt = {0};
    cr_assert_eq(OPS->open(g_url, &opt, &other, &err), 0, "%s", err.message);
    er_queue_settings qs;
    cr_assert_eq(OPS->get_queue_settings(other, "q", &qs, &err), 0);
    qs.paused = true;
    cr_assert_eq(OPS->put_queue_settings(other, "q", &qs, &err), 0);
    cr_assert_eq(fetch1("q", 1, T0, &l), 0);
    cr_assert_eq(OPS->get_queue_settings(S, "q", &qs, &err), 0);
    cr_assert(qs.paused);
    OPS->close(other);
}

/* ---- transactions and persistence ---- */

Test(conformance, rollback_discards_the_whole_transaction)
{
    er_error err = {0};
    put("kept", "q", 0, T0, T0);
    cr_assert_eq(OPS->begin(S, &err), 0);
    put("gone1", "newq", 0, T0, T0);
    put("gone2", "newq", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    er_job_list_fini(&l);
    OPS->rollback(S);
    er_job g;
    cr_assert_eq(OPS->get_job(S, "gone1", &g, &err), ER_ENOTFOUND);
    cr_assert_eq(state_of("kept"), ER_STATE_WAITING);
    er_queue_info *qs;
    size_t n;
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 1); /* "newq" was registered only inside the rolled-back transaction */
    er_queue_info_list_free(qs, n);
    /* the store is usable after rollback, and a later enqueue registers the queue again */
    put("again", "newq", 0, T0, T0);
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 2);
    er_queue_info_list_free(qs, n);
    OPS->rollback(S); /* no transaction open: harmless */
}

Test(conformance, committed_data_persists_after_close_and_reopen)
{
    er_error err = {0};
    cr_assert_eq(OPS->begin(S, &err), 0);
    put("p1", "q", 0, T0, T0);
    put("p2", "q", 0, T0 + 60000, T0);
    cr_assert_eq(OPS->commit(S, &err), 0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    char *tok = strdup(l.items[0].lease_token);
    er_job_list_fini(&l);
    OPS->close(S);
    open_store();
    cr_assert_eq(state_of("p1"), ER_STATE_ACTIVE);
    cr_assert_eq(state_of("p2"), ER_STATE_SCHEDULED);
    cr_assert_eq(OPS->complete(S, "p1", tok, NULL, T0 + 1, NULL, &err), 0);
    free(tok);
}

#include "ack_cases.h"

#endif
