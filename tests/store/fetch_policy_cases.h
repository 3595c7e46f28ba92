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
            char id[sizeof qn + 32]; /* gcc -O3 bounds qn[i] by all of qn */
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

/* ---- within a queue: groups, weights, group limits, rate limits, aging ----
 * Each case fills one queue, sets its policy, then runs nfetch fetches of
 * max jobs, the k-th at now + k * step_ms, from a fresh round-robin (a
 * queue the store has not fetched from). want lists the ids leased over
 * all of them in order, "|" ending each fetch. */

#define FG_MAXJ 12
#define FG_MAXW 24

typedef struct fg_job {
    const char *id, *group; /* group NULL: none */
    int priority;
    int64_t age_ms;
} fg_job;

typedef struct fg_case {
    const char *name;
    const char *wgroup; /* a group with a weight of its own (NULL: none) */
    int weight;
    int default_weight; /* 0: 1 */
    int group_conc;
    int64_t grate_max, grate_per;
    int64_t rate_max, rate_per, rate_burst;
    double aging_per_s;
    int aging_boost;
    fg_job jobs[FG_MAXJ];
    int nfetch, max;
    int first_max; /* > 0: the first fetch's max */
    int64_t step_ms;
    const char *want[FG_MAXW];
} fg_case;

static const fg_case fg_cases[] = {
    {.name = "groups take turns: a backlog does not hold another group back",
     .jobs = {{"a1", "a", 0, 90}, {"a2", "a", 0, 80}, {"a3", "a", 0, 70}, {"b1", "b", 0, 10}},
     .nfetch = 4, .max = 1,
     .want = {"a1", "|", "b1", "|", "a2", "|", "a3", "|"}},
    {.name = "a weight of 3 takes three jobs a turn",
     .wgroup = "a", .weight = 3,
     .jobs = {{"a1", "a", 0, 90}, {"a2", "a", 0, 80}, {"a3", "a", 0, 70}, {"a4", "a", 0, 60},
              {"b1", "b", 0, 50}, {"b2", "b", 0, 40}},
     .nfetch = 6, .max = 1,
     .want = {"a1", "|", "a2", "|", "a3", "|", "b1", "|", "a4", "|", "b2", "|"}},
    {.name = "a group that runs out in its turn gives way to the next ones",
     .wgroup = "a", .weight = 3,
     .jobs = {{"a1", "a", 0, 90}, {"b1", "b", 0, 80}, {"b2", "b", 0, 70}, {"c1", "c", 0, 60}},
     .nfetch = 2, .max = 1,
     .want = {"a1", "|", "b1", "|"}},
    {.name = "a fetch of many after a group ran out mid-turn",
     .wgroup = "a", .weight = 3,
     .jobs = {{"a1", "a", 0, 90}, {"a2", "a", 0, 85}, {"b1", "b", 0, 80}, {"b2", "b", 0, 70},
              {"c1", "c", 0, 60}, {"c2", "c", 0, 50}},
     .nfetch = 2, .max = 4, .first_max = 1,
     .want = {"a1", "|", "a2", "b1", "c1", "b2", "|"}},
    {.name = "a group short of its share: the next group's turn goes on in the same fetch",
     .default_weight = 2,
     .jobs = {{"a1", "a", 0, 90}, {"b1", "b", 0, 80}, {"b2", "b", 0, 70}, {"b3", "b", 0, 60}},
     .nfetch = 2, .max = 3,
     .want = {"a1", "b1", "b2", "|", "b3", "|"}},
    {.name = "one fetch of many deals the turns round the groups",
     .jobs = {{"a1", "a", 0, 90}, {"a2", "a", 0, 80}, {"a3", "a", 0, 70}, {"b1", "b", 0, 60},
              {"b2", "b", 0, 50}, {"b3", "b", 0, 40}, {"c1", "c", 0, 30}},
     .nfetch = 2, .max = 5,
     .want = {"a1", "a2", "b1", "b2", "c1", "|", "a3", "b3", "|"}},
    {.name = "the jobs without a group are one group, first in the ring",
     .jobs = {{"a1", "a", 0, 90}, {"a2", "a", 0, 80}, {"u1", NULL, 0, 70}, {"u2", NULL, 0, 60}},
     .nfetch = 4, .max = 1,
     .want = {"u1", "|", "a1", "|", "u2", "|", "a2", "|"}},
    {.name = "within a group: the highest priority, then the oldest",
     .jobs = {{"a-lo", "a", 1, 90}, {"a-hi-new", "a", 9, 10}, {"a-hi-old", "a", 9, 50}},
     .nfetch = 1, .max = 3,
     .want = {"a-hi-old", "a-hi-new", "a-lo", "|"}},
    {.name = "a group at its concurrency limit is passed over, the others go on",
     .group_conc = 1,
     .jobs = {{"a1", "a", 0, 90}, {"a2", "a", 0, 80}, {"b1", "b", 0, 70}, {"b2", "b", 0, 60},
              {"u1", NULL, 0, 50}},
     .nfetch = 2, .max = 5,
     .want = {"u1", "a1", "b1", "|", "|"}},
    {.name = "a group rate limit holds its group only",
     .grate_max = 1, .grate_per = 1000,
     .jobs = {{"a1", "a", 0, 90}, {"a2", "a", 0, 80}, {"b1", "b", 0, 70}},
     .nfetch = 3, .max = 3, .step_ms = 500,
     .want = {"a1", "b1", "|", "|", "a2", "|"}},
    {.name = "a queue rate limit spaces its leases, whatever the fetch asks",
     .rate_max = 2, .rate_per = 1000,
     .jobs = {{"x1", NULL, 0, 90}, {"x2", NULL, 0, 80}, {"x3", NULL, 0, 70}, {"x4", NULL, 0, 60}},
     .nfetch = 4, .max = 10, .step_ms = 250,
     .want = {"x1", "|", "|", "x2", "|", "|"}},
    {.name = "a queue rate limit with a burst lets that many go at once",
     .rate_max = 2, .rate_per = 1000, .rate_burst = 2,
     .jobs = {{"x1", NULL, 0, 90}, {"x2", NULL, 0, 80}, {"x3", NULL, 0, 70}, {"x4", NULL, 0, 60}},
     .nfetch = 3, .max = 10, .step_ms = 500,
     .want = {"x1", "x2", "|", "x3", "|", "x4", "|"}},
    {.name = "a rate limit applies to grouped queues too",
     .rate_max = 1, .rate_per = 1000,
     .jobs = {{"a1", "a", 0, 90}, {"b1", "b", 0, 80}},
     .nfetch = 2, .max = 10, .step_ms = 1000,
     .want = {"a1", "|", "b1", "|"}},
    {.name = "aging: a long-waiting low priority job overtakes newer higher ones",
     .aging_per_s = 1, .aging_boost = 10,
     .jobs = {{"lo-old", NULL, 0, 20000}, {"hi", NULL, 5, 0}, {"lo-new", NULL, 0, 1000},
              {"mid", NULL, 3, 1000}},
     .nfetch = 1, .max = 4,
     .want = {"lo-old", "hi", "mid", "lo-new", "|"}},
    {.name = "aging stops at max_boost",
     .aging_per_s = 1, .aging_boost = 2,
     .jobs = {{"lo-old", "a", 0, 600000}, {"hi", "a", 5, 0}},
     .nfetch = 1, .max = 2,
     .want = {"hi", "lo-old", "|"}},
};

static void fg_settings(const fg_case *c, er_queue_settings *s)
{
    if (c->default_weight)
        s->fairness.default_weight = c->default_weight;
    if (c->wgroup) {
        s->fairness.nweights = 1;
        snprintf(s->fairness.weights[0].group, sizeof s->fairness.weights[0].group, "%s",
                 c->wgroup);
        s->fairness.weights[0].weight = c->weight;
    }
    s->group_limits.concurrency = c->group_conc;
    s->group_limits.rate = (er_rate){c->grate_max, c->grate_per, 1};
    s->rate_max = c->rate_max;
    s->rate_per_ms = c->rate_per;
    s->rate_burst = c->rate_burst ? c->rate_burst : 1;
    s->aging = (er_aging){c->aging_per_s, c->aging_boost};
}

static void fg_run(size_t ci, const fg_case *c)
{
    char queue[64];
    snprintf(queue, sizeof queue, "g%zu", ci);
    er_error err = {0};
    er_queue_settings s;
    cr_assert_eq(OPS->get_queue_settings(S, queue, &s, &err), 0, "%s", err.message);
    fg_settings(c, &s);
    cr_assert_eq(OPS->put_queue_settings(S, queue, &s, &err), 0, "%s", err.message);
    for (int j = 0; j < FG_MAXJ && c->jobs[j].id; j++) {
        const fg_job *jb = &c->jobs[j];
        char id[80];
        snprintf(id, sizeof id, "g%zu.%s", ci, jb->id);
        er_job job;
        mkjob(&job, id, queue, jb->priority, T0 - jb->age_ms, T0);
        job.group = sdup(jb->group);
        bool dupl = true;
        cr_assert_eq(OPS->enqueue(S, &job, &dupl, NULL, NULL, &err), 0, "%s", err.message);
        er_job_fini(&job);
    }
    int w = 0;
    for (int f = 0; f < c->nfetch; f++) {
        er_job_list l = {0};
        const char *qs[] = {queue};
        int max = f == 0 && c->first_max ? c->first_max : c->max;
        int n = fetchq(qs, 1, max, 0, T0 + f * c->step_ms, &l);
        for (int i = 0; i < n; i++, w++) {
            char id[80];
            cr_assert(w < FG_MAXW && c->want[w] && strcmp(c->want[w], "|") != 0,
                      "%s: fetch %d leased %s, more than wanted", c->name, f, l.items[i].id);
            snprintf(id, sizeof id, "g%zu.%s", ci, c->want[w]);
            cr_assert_str_eq(l.items[i].id, id, "%s: fetch %d, position %d", c->name, f, i);
        }
        cr_assert(w < FG_MAXW && c->want[w] && strcmp(c->want[w], "|") == 0,
                  "%s: fetch %d leased %d, fewer than wanted (next: %s)", c->name, f, n,
                  w < FG_MAXW && c->want[w] ? c->want[w] : "none");
        w++;
        er_job_list_fini(&l);
    }
}

Test(conformance, group_policy_fixtures_give_the_same_leases)
{
    for (size_t i = 0; i < sizeof fg_cases / sizeof fg_cases[0]; i++)
        fg_run(i, &fg_cases[i]);
}

#endif
