/* SPDX-License-Identifier: MIT
 *
 * The writer's runs of enqueue requests (engine/exec.c er_exec_write_run)
 * against the SQLite store: one store call for consecutive requests must
 * give every request the answer it gets when run alone, duplicates across
 * requests included (and the same for runs of acks that complete); and an
 * enqueue with unique locks (exec_unique.c),
 * which runs alone: a job whose lock is held is not enqueued, and a job's
 * lock token is stored with it, for its ACK to give the lock back.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/exec.h"

#define T0 1700000000000LL

static char g_dir[64];
static char g_url[128];

static void fresh(er_exec_ctx *x)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/er-exec-XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    snprintf(g_url, sizeof g_url, "%s/errand.db", g_dir);
    memset(x, 0, sizeof *x);
    x->ops = &er_sqlite_ops;
    er_rand_init_seeded(&x->rand, 7);
    er_job_defaults_server(&x->server_defaults);
    er_store_options opt = {.durability = ER_DURABILITY_FULL};
    er_error err = {0};
    cr_assert_eq(x->ops->open(g_url, &opt, &x->store, &err), 0, "%s", err.message);
}

static void drop(er_exec_ctx *x)
{
    x->ops->close(x->store);
    er_wake_fini(&x->wake);
    er_keys_fini(&x->done);
    er_exec_ctx_fini(x);
    const char *sfx[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < 3; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s%s", g_url, sfx[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

static char *sdup(const char *s)
{
    char *p = strdup(s);
    cr_assert_not_null(p);
    return p;
}

/* A request enqueueing jobs "id:queue:payload-number" (queue "q" when
 * omitted). */
static er_req *enq(const char *const *specs, size_t n)
{
    er_req *r = er_req_new(ER_REQ_ENQUEUE);
    cr_assert_not_null(r);
    r->jobs = calloc(n, sizeof *r->jobs);
    r->njobs = n;
    for (size_t i = 0; i < n; i++) {
        er_job *j = &r->jobs[i];
        er_job_init(j);
        char id[32], queue[32] = "q";
        int num = 0;
        cr_assert(sscanf(specs[i], "%31[^:]:%31[^:]:%d", id, queue, &num) >= 1);
        char payload[32];
        snprintf(payload, sizeof payload, "{\"n\":%d}", num);
        j->id = sdup(id);
        j->queue = sdup(queue);
        j->name = sdup("t");
        j->payload = sdup(payload);
        j->payload_len = strlen(payload);
        j->state = ER_STATE_WAITING;
        j->run_at = j->created_at = j->updated_at = T0;
        j->idempotency_key = sdup(id);
    }
    return r;
}

/* What a request got back. */
typedef struct answer {
    int rc;
    bool dup[4];
    char payload[32]; /* single: the stored job's payload */
} answer;

/* Runs the chain in one transaction, combined (er_exec_write_run, as the
 * writer does) or one request at a time (er_exec_write), and records the
 * answers and the wake-ups. */
static void run_chain(bool combined, answer *ans, size_t *nready)
{
    er_exec_ctx x;
    fresh(&x);
    er_error err = {0};
    /* stored before: "old" (payload 99) */
    const char *seed[] = {"old:q:99"};
    er_req *s0 = enq(seed, 1);
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    cr_assert_eq(er_exec_write(&x, s0, T0), 0);
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    er_req_free(s0);
    er_wake_fini(&x.wake);

    const char *r1[] = {"a:q:1"};
    const char *r2[] = {"old:q:2"};            /* stored before */
    const char *r3[] = {"b:q:3", "a:q:4", "c:other:5"}; /* a: in r1 */
    const char *r4[] = {"b:q:6"};              /* in r3 */
    const char *r5[] = {"d:other:7"};
    const char *r6[] = {"e:q:8", "e:q:9"};     /* twice in one request */
    er_req *rs[] = {enq(r1, 1), enq(r2, 1), enq(r3, 3), enq(r4, 1), enq(r5, 1), enq(r6, 2)};
    size_t n = sizeof rs / sizeof rs[0];
    for (size_t i = 0; i + 1 < n; i++)
        rs[i]->next = rs[i + 1];
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    if (combined) {
        for (er_req *r = rs[0], *next; r; r = next)
            cr_assert_eq(er_exec_write_run(&x, r, &next, T0), 0, "%s", r->err.message);
    } else {
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(er_exec_write(&x, rs[i], T0), 0, "%s", rs[i]->err.message);
    }
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    for (size_t i = 0; i < n; i++) {
        er_req *r = rs[i];
        ans[i].rc = r->rc;
        for (size_t k = 0; k < r->njobs; k++)
            ans[i].dup[k] = r->duplicate[k];
        if (r->njobs == 1) {
            cr_assert_not_null(r->job.id, "request %zu: no stored job", i);
            cr_assert_str_eq(r->job.id, r->jobs[0].id);
            snprintf(ans[i].payload, sizeof ans[i].payload, "%s", r->job.payload);
        }
        r->next = NULL;
        er_req_free(r);
    }
    *nready = 0;
    for (size_t i = 0; i < x.wake.len; i++)
        *nready += (size_t)x.wake.counts[i];
    /* the stored jobs in insertion order */
    er_job_list l = {0};
    char *cur = NULL;
    cr_assert_eq(x.ops->list_jobs(x.store, "q", ER_STATE_WAITING, 10, NULL, &l, &cur, &err), 0);
    const char *want[] = {"old", "a", "b", "e"};
    cr_assert_eq(l.len, 4);
    for (size_t i = 0; i < 4; i++)
        cr_assert_str_eq(l.items[i].id, want[i]);
    er_job_list_fini(&l);
    free(cur);
    drop(&x);
}

Test(exec_enqueue, a_run_answers_each_request_as_alone)
{
    answer alone[6], run[6];
    memset(alone, 0, sizeof alone);
    memset(run, 0, sizeof run);
    size_t ready_alone, ready_run;
    run_chain(false, alone, &ready_alone);
    run_chain(true, run, &ready_run);
    cr_assert_eq(memcmp(alone, run, sizeof alone), 0, "a run answers differently");
    cr_assert_eq(ready_run, ready_alone);
    cr_assert_eq(ready_run, 5); /* a, b, c, d, e */
    /* and what the answers are */
    cr_assert(!run[0].dup[0]);
    cr_assert_str_eq(run[0].payload, "{\"n\":1}");
    cr_assert(run[1].dup[0]);
    cr_assert_str_eq(run[1].payload, "{\"n\":99}"); /* the stored job, not the request's */
    cr_assert(!run[2].dup[0] && run[2].dup[1] && !run[2].dup[2]);
    cr_assert(run[3].dup[0]);
    cr_assert_str_eq(run[3].payload, "{\"n\":3}");
    cr_assert(!run[4].dup[0]);
    cr_assert(!run[5].dup[0] && run[5].dup[1]);
    for (size_t i = 0; i < 6; i++)
        cr_assert_eq(run[i].rc, 0);
}

/* Every enqueue takes its queue's job defaults: a run of requests over two
 * queues, a request alone, and a read outside a transaction. */
Test(exec_enqueue, each_job_gets_its_queues_defaults)
{
    er_exec_ctx x;
    fresh(&x);
    er_error err = {0};
    er_queue_settings qs;
    er_queue_settings_default(&qs);
    qs.defaults.has_max_attempts = true;
    qs.defaults.max_attempts = 3;
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    cr_assert_eq(x.ops->put_queue_settings(x.store, "q", &qs, &err), 0, "%s", err.message);
    qs.defaults.max_attempts = 7;
    qs.defaults.has_priority = true;
    qs.defaults.priority = 40;
    cr_assert_eq(x.ops->put_queue_settings(x.store, "other", &qs, &err), 0, "%s", err.message);
    cr_assert_eq(x.ops->commit(x.store, &err), 0);

    er_job_defaults d;
    cr_assert_eq(er_store_queue_defaults(x.ops, x.store, "other", &d, &err), 0);
    cr_assert(d.has_max_attempts && d.max_attempts == 7 && d.has_priority && d.priority == 40);
    cr_assert_eq(er_store_queue_defaults(x.ops, x.store, "never-set", &d, &err), 0);
    cr_assert(!d.has_max_attempts && !d.has_priority);

    const char *r1[] = {"a:q:1"};
    const char *r2[] = {"b:other:2", "c:q:3"};
    const char *r3[] = {"d:other:4"};
    er_req *rs[] = {enq(r1, 1), enq(r2, 2), enq(r3, 1)};
    rs[0]->next = rs[1];
    rs[1]->next = rs[2];
    const char *lone[] = {"e:other:5"};
    er_req *alone = enq(lone, 1);
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    for (er_req *r = rs[0], *next; r; r = next)
        cr_assert_eq(er_exec_write_run(&x, r, &next, T0), 0, "%s", r->err.message);
    cr_assert_eq(er_exec_write(&x, alone, T0), 0, "%s", alone->err.message);
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    const struct {
        const char *id;
        int max_attempts, priority;
    } want[] = {{"a", 3, 0}, {"b", 7, 40}, {"c", 3, 0}, {"d", 7, 40}, {"e", 7, 40}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        er_job j;
        er_job_init(&j);
        cr_assert_eq(x.ops->get_job(x.store, want[i].id, &j, &err), 0, "%s", want[i].id);
        cr_assert_eq(j.max_attempts, want[i].max_attempts, "%s", want[i].id);
        cr_assert_eq(j.priority, want[i].priority, "%s", want[i].id);
        er_job_fini(&j);
    }
    for (size_t i = 0; i < 3; i++) {
        rs[i]->next = NULL;
        er_req_free(rs[i]);
    }
    er_req_free(alone);
    drop(&x);
}

/* Gives job k of r the unique lock of run key `key` for 60 s. */
static void lock(er_req *r, size_t k, const char *key)
{
    if (!r->locks) {
        r->locks = calloc(r->njobs, sizeof *r->locks);
        r->lease_type = sdup("test.unique");
        cr_assert(r->locks && r->lease_type);
    }
    r->locks[k].on = true;
    snprintf(r->locks[k].run_key, sizeof r->locks[k].run_key, "%s", key);
    r->locks[k].ttl_ms = 60000;
}

Test(exec_enqueue, a_job_whose_unique_lock_is_held_is_not_enqueued)
{
    er_exec_ctx x;
    fresh(&x);
    er_error err = {0};
    const char *r1[] = {"u1:q:1"};
    const char *r2[] = {"p1:q:2"};
    const char *r3[] = {"u2:q:3", "p2:q:4", "u3:q:5", "u4:other:6"};
    er_req *rs[] = {enq(r1, 1), enq(r2, 1), enq(r3, 4)};
    lock(rs[0], 0, "K");
    lock(rs[2], 0, "K"); /* u1's twin: held */
    lock(rs[2], 2, "L"); /* free */
    lock(rs[2], 3, "K"); /* K in another queue: another lock */
    rs[0]->next = rs[1];
    rs[1]->next = rs[2];
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    for (er_req *r = rs[0], *next; r; r = next)
        cr_assert_eq(er_exec_write_run(&x, r, &next, T0), 0, "%s", r->err.message);
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    cr_assert_eq(rs[0]->rc, 0);
    cr_assert_eq(rs[0]->locks[0].rc, 0);
    cr_assert(strlen(rs[0]->locks[0].token) > 0, "the lock's owner token is returned");
    cr_assert(!rs[0]->duplicate[0]);
    cr_assert_eq(rs[2]->rc, 0);
    cr_assert_eq(rs[2]->locks[0].rc, ER_ECONFLICT);
    cr_assert(rs[2]->duplicate[0], "not enqueued");
    cr_assert_str_eq(rs[2]->locks[0].token, "");
    cr_assert(!rs[2]->duplicate[1] && !rs[2]->duplicate[2] && !rs[2]->duplicate[3]);
    cr_assert_eq(rs[2]->locks[1].rc, 0);
    cr_assert_str_eq(rs[2]->locks[1].token, "", "no lock asked for p2");
    cr_assert(strlen(rs[2]->locks[3].token) > 0);
    size_t ready = 0;
    for (size_t i = 0; i < x.wake.len; i++)
        ready += (size_t)x.wake.counts[i];
    cr_assert_eq(ready, 5, "u1, p1, p2, u3, u4 are ready; u2 is not");
    er_job j;
    er_job_init(&j);
    cr_assert_eq(x.ops->get_job(x.store, "u2", &j, &err), ER_ENOTFOUND);
    cr_assert_eq(x.ops->get_job(x.store, "u3", &j, &err), 0);
    er_job_fini(&j);
    /* u1's lock given back: its twin goes in */
    er_lease lease;
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    cr_assert_eq(x.ops->lease_release(x.store, rs[0]->locks[0].token, T0, &lease, &err), 0);
    const char *r4[] = {"u5:q:7"};
    er_req *again = enq(r4, 1);
    lock(again, 0, "K");
    er_req *next = NULL;
    cr_assert_eq(er_exec_write_run(&x, again, &next, T0), 0);
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    cr_assert_eq(again->locks[0].rc, 0);
    cr_assert(!again->duplicate[0]);
    er_req_free(again);
    for (size_t i = 0; i < 3; i++) {
        rs[i]->next = NULL;
        er_req_free(rs[i]);
    }
    drop(&x);
}

/* One ack of job id (kind) with its lease token, run in its own
 * transaction. */
static void ack_one(er_exec_ctx *x, const char *id, const char *token, er_ack_kind kind)
{
    er_req *r = er_req_new(ER_REQ_ACKS);
    cr_assert_not_null(r);
    r->acks = calloc(1, sizeof *r->acks);
    cr_assert_not_null(r->acks);
    r->nacks = 1;
    r->acks[0].id = sdup(id);
    r->acks[0].token = sdup(token);
    r->acks[0].kind = kind;
    if (kind == ER_ACK_FAIL) {
        r->acks[0].failure.cls = ER_ERR_TRANSIENT;
        r->acks[0].failure.message = sdup("later");
    }
    er_error err = {0};
    cr_assert_eq(x->ops->begin(x->store, &err), 0);
    cr_assert_eq(er_exec_write(x, r, T0), 0, "%s", r->err.message);
    cr_assert_eq(x->ops->commit(x->store, &err), 0);
    cr_assert_eq(r->acks[0].rc, 0, "%s", r->acks[0].err.message);
    er_req_free(r);
}

/* Leases up to 10 jobs of queue "q" to worker "w" at `now`, in its own
 * transaction. */
static void fetch_q(er_exec_ctx *x, int64_t now, er_job_list *l)
{
    const char *qs[] = {"q"};
    er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w", .max = 10,
                         .lease_ms = 60000, .now = now};
    er_error err = {0};
    cr_assert_eq(x->ops->begin(x->store, &err), 0);
    cr_assert_eq(x->ops->fetch(x->store, &p, l, &err), 0, "%s", err.message);
    cr_assert_eq(x->ops->commit(x->store, &err), 0);
}

/* A request of completes: ids[i] with tokens[i]. */
static er_req *completes(const char *const *ids, const char *const *tokens, size_t n)
{
    er_req *r = er_req_new(ER_REQ_ACKS);
    cr_assert_not_null(r);
    r->acks = calloc(n, sizeof *r->acks);
    cr_assert_not_null(r->acks);
    r->nacks = n;
    for (size_t i = 0; i < n; i++) {
        r->acks[i].id = sdup(ids[i]);
        r->acks[i].token = sdup(tokens[i]);
        r->acks[i].kind = ER_ACK_COMPLETE;
    }
    return r;
}

/* Six requests of completes (a stale token, a job completed earlier in the
 * chain, an unknown id, two acks in one request) in one transaction,
 * combined (one complete_many call) or one at a time: each ack's answer,
 * the jobs' states after, and how many jobs the transaction finished. */
static void run_acks(bool combined, int rcs[8], er_state states[5], size_t *done)
{
    er_exec_ctx x;
    fresh(&x);
    er_error err = {0};
    const char *specs[] = {"a:q:1", "b:q:2", "c:q:3", "d:q:4", "e:q:5"};
    er_req *e = enq(specs, 5);
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    cr_assert_eq(er_exec_write(&x, e, T0), 0, "%s", e->err.message);
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    er_req_free(e);
    er_job_list l = {0};
    fetch_q(&x, T0, &l);
    cr_assert_eq(l.len, 5);
    const char *ids[] = {"a", "b", "c", "d", "e"}, *tok[5];
    for (size_t i = 0; i < 5; i++) {
        cr_assert_str_eq(l.items[i].id, ids[i], "fetched in insertion order");
        tok[i] = l.items[i].lease_token;
    }
    const char *i1[] = {"a"}, *t1[] = {tok[0]};
    const char *i2[] = {"b"}, *t2[] = {"not-the-token"};
    const char *i3[] = {"c", "d"}, *t3[] = {tok[2], tok[3]};
    const char *i4[] = {"a"}, *t4[] = {tok[0]};
    const char *i5[] = {"nope"}, *t5[] = {"x"};
    const char *i6[] = {"e"}, *t6[] = {tok[4]};
    er_req *rs[] = {completes(i1, t1, 1), completes(i2, t2, 1), completes(i3, t3, 2),
                    completes(i4, t4, 1), completes(i5, t5, 1), completes(i6, t6, 1)};
    size_t n = sizeof rs / sizeof rs[0];
    for (size_t i = 0; i + 1 < n; i++)
        rs[i]->next = rs[i + 1];
    er_keys_clear(&x.done);
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    if (combined) {
        er_req *next = NULL;
        cr_assert_eq(er_exec_write_run(&x, rs[0], &next, T0), 0, "%s", rs[0]->err.message);
        cr_assert_null(next, "one run takes the six requests");
    } else {
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(er_exec_write(&x, rs[i], T0), 0, "%s", rs[i]->err.message);
    }
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    *done = x.done.n;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < rs[i]->nacks; j++)
            rcs[k++] = rs[i]->acks[j].rc;
        rs[i]->next = NULL;
        er_req_free(rs[i]);
    }
    cr_assert_eq(k, 7);
    for (size_t i = 0; i < 5; i++) {
        er_job j;
        er_job_init(&j);
        cr_assert_eq(x.ops->get_job(x.store, l.items[i].id, &j, &err), 0);
        states[i] = j.state;
        er_job_fini(&j);
    }
    er_job_list_fini(&l);
    drop(&x);
}

Test(exec_enqueue, a_run_of_completes_answers_each_ack_as_alone)
{
    int alone[8] = {0}, run[8] = {0};
    er_state sa[5], sr[5];
    size_t done_alone, done_run;
    run_acks(false, alone, sa, &done_alone);
    run_acks(true, run, sr, &done_run);
    cr_assert_eq(memcmp(alone, run, sizeof alone), 0, "a run answers differently");
    cr_assert_eq(memcmp(sa, sr, sizeof sa), 0);
    cr_assert_eq(done_run, done_alone);
    cr_assert_eq(done_run, 4); /* a, c, d, e */
    cr_assert_eq(run[0], 0);
    cr_assert_neq(run[1], 0, "a stale token is refused");
    cr_assert(run[2] == 0 && run[3] == 0);
    cr_assert_neq(run[4], 0, "a completed job is not completed again");
    cr_assert_eq(run[5], ER_ENOTFOUND);
    cr_assert_eq(run[6], 0);
    const er_state want[] = {ER_STATE_COMPLETED, ER_STATE_ACTIVE, ER_STATE_COMPLETED,
                             ER_STATE_COMPLETED, ER_STATE_COMPLETED};
    cr_assert_eq(memcmp(sr, want, sizeof want), 0);
}

/* Enqueues id with the lock of run key `key`, in its own transaction; the
 * lock's rc (0 taken, ER_ECONFLICT held), and *dup. */
static int push_locked(er_exec_ctx *x, const char *id, const char *key, bool *dup)
{
    char spec[40];
    snprintf(spec, sizeof spec, "%s:q:1", id);
    const char *specs[] = {spec};
    er_req *r = enq(specs, 1);
    lock(r, 0, key);
    er_error err = {0};
    er_req *next = NULL;
    cr_assert_eq(x->ops->begin(x->store, &err), 0);
    cr_assert_eq(er_exec_write_run(x, r, &next, T0), 0, "%s", r->err.message);
    cr_assert_eq(x->ops->commit(x->store, &err), 0);
    cr_assert_eq(r->rc, 0, "%s", r->err.message);
    int rc = r->locks[0].rc;
    *dup = r->duplicate[0];
    er_req_free(r);
    return rc;
}

/* The lock's token is stored with its job (docs/faktory.md, "Unique
 * jobs"), so the ACK gives the lock back in its own transaction (the
 * store reads the token as it completes the job), whichever server (or
 * run of one) sends it, over Faktory or HTTP; a FAIL keeps
 * it, and a push whose jid exists gives back the lock it took. */
Test(exec_enqueue, a_unique_lock_is_stored_with_its_job_and_given_back_by_its_ack)
{
    er_exec_ctx x;
    fresh(&x);
    er_error err = {0};
    bool dup = true;
    cr_assert_eq(push_locked(&x, "u1", "K", &dup), 0);
    cr_assert(!dup);
    er_job j;
    er_job_init(&j);
    cr_assert_eq(x.ops->get_job(x.store, "u1", &j, &err), 0);
    cr_assert_not_null(j.unique_token, "the token is written with the job");
    char token[ER_LEASE_TOKEN_SIZE];
    snprintf(token, sizeof token, "%s", j.unique_token);
    er_job_fini(&j);
    /* u1 pushed again: its id exists, nothing goes in, and the lock it
     * took (L) is given back at once */
    cr_assert_eq(push_locked(&x, "u1", "L", &dup), 0);
    cr_assert(dup);
    cr_assert_eq(push_locked(&x, "v1", "L", &dup), 0, "L was given back");
    cr_assert(!dup);
    cr_assert_eq(x.ops->get_job(x.store, "u1", &j, &err), 0);
    cr_assert_str_eq(j.unique_token, token, "the existing job keeps its own lock");
    er_job_fini(&j);
    cr_assert_eq(push_locked(&x, "u2", "K", &dup), ER_ECONFLICT);
    /* fetched, then FAILed: the lock stays */
    er_job_list l = {0};
    fetch_q(&x, T0, &l);
    cr_assert_eq(l.len, 2);
    const er_job *u1 = strcmp(l.items[0].id, "u1") == 0 ? &l.items[0] : &l.items[1];
    cr_assert_str_eq(u1->unique_token, token, "fetch returns it");
    ack_one(&x, "u1", u1->lease_token, ER_ACK_FAIL);
    cr_assert_eq(push_locked(&x, "u2", "K", &dup), ER_ECONFLICT, "a failure keeps the lock");
    er_job_list_fini(&l);
    /* the retry is fetched and succeeds: its ACK gives the lock back */
    int64_t later = T0 + 3600000;
    cr_assert_eq(x.ops->begin(x.store, &err), 0);
    int n = 0;
    char **names = NULL;
    size_t nn = 0;
    cr_assert_eq(x.ops->promote(x.store, later, 100, &n, &names, &nn, &err), 0);
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    cr_assert_eq(x.ops->commit(x.store, &err), 0);
    fetch_q(&x, later, &l);
    cr_assert_eq(l.len, 1);
    cr_assert_str_eq(l.items[0].id, "u1");
    ack_one(&x, "u1", l.items[0].lease_token, ER_ACK_COMPLETE);
    er_job_list_fini(&l);
    cr_assert_eq(push_locked(&x, "u2", "K", &dup), 0, "the ACK gave K back");
    cr_assert(!dup);
    drop(&x);
}
