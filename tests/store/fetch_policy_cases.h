/* SPDX-License-Identifier: MIT
 *
 * The fetch policy's conformance fixtures: each case sets up queues
 * (paused, throttled, a concurrency limit with jobs already active, a
 * lease_ms setting) and waiting jobs, runs one fetch and lists the jobs it
 * must lease, in order, with their leases. Both stores run the same table
 * (included by conformance_cases.h), so the policy core decides
 * (core/fetch.h) and each store's row work give the same answers. A new
 * rule of the policy (groups, rate limits, aging) adds rows here.
 */
#ifndef ER_TESTS_FETCH_POLICY_CASES_H
#define ER_TESTS_FETCH_POLICY_CASES_H

#define FP_MAXQ 3
#define FP_MAXJ 8

typedef struct fp_queue {
    const char *name;
    bool paused;
    int concurrency;      /* 0: none */
    int active;           /* jobs leased before the fetch (a setup fetch of its own) */
    int64_t lease_ms;     /* 0: the default setting */
    int64_t throttle_ms;  /* > 0: a throttled failure pauses it for this long */
} fp_queue;

typedef struct fp_job {
    const char *id, *queue;
    int priority;
    int64_t age_ms; /* run_at = now - age_ms */
} fp_job;

typedef struct fp_case {
    const char *name;
    fp_queue queues[FP_MAXQ];
    fp_job jobs[FP_MAXJ];
    const char *fetch[FP_MAXQ]; /* the queues the fetch names, in order */
    int max;
    int64_t lease_ms;           /* the fetch's own; 0: none */
    int64_t at_ms;              /* the fetch runs at now + at_ms */
    const char *want[FP_MAXJ];  /* ids leased, in order */
    int64_t want_lease[FP_MAXJ];
} fp_case;

static const fp_case fp_cases[] = {
    {"queues in order, each by priority, run_at, insertion",
     {{.name = "a"}, {.name = "b"}},
     {{"a-low", "a", 1, 500}, {"a-hi-new", "a", 9, 100}, {"a-hi-old", "a", 9, 300},
      {"a-low-2", "a", 1, 500}, {"b-1", "b", 1000, 900}},
     {"a", "b"}, 10, 0, 0,
     {"a-hi-old", "a-hi-new", "a-low", "a-low-2", "b-1"},
     {60000, 60000, 60000, 60000, 60000}},
    {"max is shared: the first queue's jobs, then the next",
     {{.name = "a"}, {.name = "b"}},
     {{"a-1", "a", 0, 10}, {"a-2", "a", 0, 9}, {"b-1", "b", 0, 8}, {"b-2", "b", 0, 7}},
     {"a", "b"}, 3, 0, 0, {"a-1", "a-2", "b-1"}, {60000, 60000, 60000}},
    {"a paused queue gives nothing",
     {{.name = "p", .paused = true}, {.name = "o"}},
     {{"p-1", "p", 0, 10}, {"o-1", "o", 0, 10}},
     {"p", "o"}, 10, 0, 0, {"o-1"}, {60000}},
    {"a throttled queue gives nothing until its pause ends",
     {{.name = "t", .throttle_ms = 5000}, {.name = "o"}},
     {{"t-1", "t", 0, 10}, {"o-1", "o", 0, 10}},
     {"t", "o"}, 10, 0, 4999, {"o-1"}, {60000}},
    {"a throttle that ran out no longer holds",
     {{.name = "t", .throttle_ms = 5000}},
     {{"t-1", "t", 0, 10}},
     {"t"}, 10, 0, 5000, {"t-1"}, {60000}},
    {"a concurrency limit gives its room, the rest comes from the next queue",
     {{.name = "c", .concurrency = 3, .active = 1}, {.name = "o"}},
     {{"c-1", "c", 0, 10}, {"c-2", "c", 0, 9}, {"c-3", "c", 0, 8}, {"o-1", "o", 0, 10}},
     {"c", "o"}, 10, 0, 0, {"c-1", "c-2", "o-1"}, {60000, 60000, 60000}},
    {"a queue at its concurrency limit gives nothing",
     {{.name = "c", .concurrency = 1, .active = 1}, {.name = "o"}},
     {{"c-1", "c", 0, 10}, {"o-1", "o", 0, 10}},
     {"c", "o"}, 10, 0, 0, {"o-1"}, {60000}},
    {"the lease: the fetch's own, else the queue's setting, else the default",
     {{.name = "l", .lease_ms = 7000}, {.name = "d"}},
     {{"l-1", "l", 0, 10}, {"d-1", "d", 0, 10}},
     {"l", "d"}, 10, 0, 0, {"l-1", "d-1"}, {7000, 60000}},
    {"a fetch's own lease wins over the queue's",
     {{.name = "l", .lease_ms = 7000}},
     {{"l-1", "l", 0, 10}},
     {"l"}, 10, 2000, 0, {"l-1"}, {2000}},
    {"a queue nobody configured has the defaults",
     {{.name = "never-set"}},
     {{"n-1", "never-set", 0, 10}},
     {"never-set", "nobody"}, 10, 0, 0, {"n-1"}, {60000}},
};

/* Runs one case in queues named "<case index>.<name>". */
static void fp_run(size_t ci, const fp_case *c)
{
    char qn[FP_MAXQ][64], fq[FP_MAXQ][64];
    er_error err = {0};
    for (int i = 0; i < FP_MAXQ && c->queues[i].name; i++) {
        const fp_queue *q = &c->queues[i];
        snprintf(qn[i], sizeof qn[i], "%zu.%s", ci, q->name);
        er_queue_settings s;
        cr_assert_eq(OPS->get_queue_settings(S, qn[i], &s, &err), 0, "%s", err.message);
        s.paused = q->paused;
        s.concurrency = q->concurrency;
        if (q->lease_ms)
            s.lease_ms = q->lease_ms;
        if (q->paused || q->concurrency || q->lease_ms)
            cr_assert_eq(OPS->put_queue_settings(S, qn[i], &s, &err), 0, "%s", err.message);
        /* jobs already active, and throttles, come from real leases */
        for (int k = 0; k < q->active + (q->throttle_ms > 0); k++) {
            char id[80];
            snprintf(id, sizeof id, "%s.pre-%d", qn[i], k);
            put(id, qn[i], 1000, T0 - 100000, T0);
            const char *one[] = {qn[i]};
            er_job_list l = {0};
            cr_assert_eq(fetchq(one, 1, 1, 0, T0, &l), 1, "%s: setup lease", c->name);
            cr_assert_str_eq(l.items[0].id, id);
            if (k == q->active) { /* the throttled failure */
                er_fail_outcome o;
                cr_assert_eq(fail_with(id, l.items[0].lease_token, ER_ERR_THROTTLED,
                                       q->throttle_ms, T0, &o), 0);
                cr_assert_eq(o.queue_pause_until, T0 + q->throttle_ms);
            }
            er_job_list_fini(&l);
        }
    }
    for (int j = 0; j < FP_MAXJ && c->jobs[j].id; j++) {
        const fp_job *jb = &c->jobs[j];
        char id[80], queue[64];
        snprintf(id, sizeof id, "%zu.%s", ci, jb->id);
        snprintf(queue, sizeof queue, "%zu.%s", ci, jb->queue);
        put(id, queue, jb->priority, T0 - jb->age_ms, T0);
    }
    const char *qs[FP_MAXQ];
    size_t nq = 0;
    for (; nq < FP_MAXQ && c->fetch[nq]; nq++) {
        snprintf(fq[nq], sizeof fq[nq], "%zu.%s", ci, c->fetch[nq]);
        qs[nq] = fq[nq];
    }
    er_job_list l = {0};
    int64_t now = T0 + c->at_ms;
    int n = fetchq(qs, nq, c->max, c->lease_ms, now, &l);
    int want = 0;
    while (want < FP_MAXJ && c->want[want])
        want++;
    cr_assert_eq(n, want, "%s: leased %d, want %d", c->name, n, want);
    for (int i = 0; i < want; i++) {
        char id[80];
        snprintf(id, sizeof id, "%zu.%s", ci, c->want[i]);
        cr_assert_str_eq(l.items[i].id, id, "%s: position %d", c->name, i);
        cr_assert_eq(l.items[i].lease_expires_at, now + c->want_lease[i], "%s: lease of %s",
                     c->name, id);
        cr_assert_eq(state_of(id), ER_STATE_ACTIVE);
    }
    er_job_list_fini(&l);
}

Test(conformance, fetch_policy_fixtures_give_the_same_leases)
{
    for (size_t i = 0; i < sizeof fp_cases / sizeof fp_cases[0]; i++)
        fp_run(i, &fp_cases[i]);
}

#endif
