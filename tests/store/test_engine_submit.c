/* SPDX-License-Identifier: MIT
 *
 * er_engine_submit_from: threads submit at once to an engine running on a
 * real event loop with the SQLite store. Every request is answered exactly
 * once, on the loop thread; every acknowledged enqueue is stored and no
 * other; a drain that begins while they submit waits for every request it
 * took in and refuses the rest.
 */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "util/clock.h"

#define NTHREADS 8
#define PER_THREAD 200
#define TOTAL (NTHREADS * PER_THREAD)

typedef struct slot {
    int answered; /* loop thread only, like everything below but the atomics */
    int rc;
    bool read;
} slot;

static struct {
    char dir[64], path[128], url[160];
    struct event_base *base;
    er_engine *e;
    pthread_t loop;
    pthread_barrier_t go;
    slot slots[TOTAL];
    int answered;
    bool wrong_thread, drained, timed_out;
    int drain_after;            /* answers before the loop drains; 0: only at the end */
    int ok_at_drained;          /* successful writes answered when on_drained ran */
    int ok;                     /* successful writes answered */
    _Atomic bool drain_began;   /* the submitters' second half waits for it */
} g;

static void on_drained(void *arg)
{
    (void)arg;
    g.drained = true;
    g.ok_at_drained = g.ok;
    if (g.answered == TOTAL)
        event_base_loopbreak(g.base);
}

static void on_done(er_req *req)
{
    slot *s = req->arg;
    if (!pthread_equal(pthread_self(), g.loop))
        g.wrong_thread = true;
    s->answered++;
    s->rc = req->rc;
    if (!s->read && req->rc == 0 && !req->duplicate[0])
        g.ok++;
    er_req_free(req);
    g.answered++;
    if (g.answered == g.drain_after || g.answered == TOTAL) {
        if (!atomic_load(&g.drain_began)) {
            atomic_store(&g.drain_began, true);
            er_engine_drain(g.e, on_drained, NULL);
        } else if (g.answered == TOTAL && g.drained) {
            event_base_loopbreak(g.base);
        }
    }
}

static char *sdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        abort();
    return p;
}

/* An enqueue of one new job "t<thread>-<k>", or (every fifth) a read of a
 * job that does not exist, for the reader thread. */
static er_req *make(int t, int k)
{
    slot *s = &g.slots[t * PER_THREAD + k];
    char id[32];
    snprintf(id, sizeof id, "t%d-%d", t, k);
    s->read = k % 5 == 4;
    er_req *r = er_req_new(s->read ? ER_REQ_GET_JOB : ER_REQ_ENQUEUE);
    if (!r)
        abort();
    r->done = on_done;
    r->arg = s;
    if (s->read) {
        r->id = sdup("no-such-job");
        return r;
    }
    r->jobs = calloc(1, sizeof *r->jobs);
    if (!r->jobs)
        abort();
    r->njobs = 1;
    er_job *j = &r->jobs[0];
    er_job_init(j);
    j->id = sdup(id);
    j->queue = sdup("q");
    j->name = sdup("t");
    j->payload = sdup("{}");
    j->payload_len = 2;
    j->state = ER_STATE_WAITING;
    j->run_at = j->created_at = j->updated_at = er_now_ms();
    j->idempotency_key = sdup(id);
    return r;
}

/* Submits its share; with a drain planned, the second half only once the
 * drain began. No Criterion asserts off the test's thread. */
static void *submitter(void *arg)
{
    int t = (int)(intptr_t)arg;
    pthread_barrier_wait(&g.go);
    for (int k = 0; k < PER_THREAD; k++) {
        if (g.drain_after && k == PER_THREAD / 2)
            while (!atomic_load(&g.drain_began))
                usleep(1000);
        er_engine_submit_from(g.e, make(t, k));
    }
    return NULL;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    g.timed_out = true;
    event_base_loopbreak(g.base);
}

/* Runs the submitters against a fresh engine until every request was
 * answered and the engine drained. */
static void run(int drain_after)
{
    memset(&g, 0, sizeof g);
    g.drain_after = drain_after;
    snprintf(g.dir, sizeof g.dir, "/tmp/er-submit-XXXXXX");
    cr_assert_not_null(mkdtemp(g.dir));
    snprintf(g.path, sizeof g.path, "%s/errand.db", g.dir);
    snprintf(g.url, sizeof g.url, "sqlite:%s", g.path);
    cr_assert_eq(evthread_use_pthreads(), 0);
    g.base = event_base_new();
    cr_assert_not_null(g.base);
    g.loop = pthread_self();
    er_engine_config cfg = {.store_url = g.url, .store = {.durability = ER_DURABILITY_NORMAL}};
    er_error err = {0};
    cr_assert_eq(er_engine_start(g.base, &cfg, &g.e, &err), 0, "%s", err.message);
    /* also keeps the loop running while nothing is active */
    struct event *limit = evtimer_new(g.base, on_timeout, NULL);
    struct timeval tv = {.tv_sec = 60};
    evtimer_add(limit, &tv);

    pthread_t th[NTHREADS];
    cr_assert_eq(pthread_barrier_init(&g.go, NULL, NTHREADS), 0);
    for (int t = 0; t < NTHREADS; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, submitter, (void *)(intptr_t)t), 0);
    event_base_dispatch(g.base);
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&g.go);
    cr_assert(!g.timed_out, "answered %d of %d requests in 60 s, drained: %d", g.answered,
              TOTAL, g.drained);
    er_engine_free(g.e);
    event_free(limit);
    event_base_free(g.base);

    cr_assert(!g.wrong_thread, "a request was answered off the loop thread");
    cr_assert(g.drained);
    for (int i = 0; i < TOTAL; i++)
        cr_assert_eq(g.slots[i].answered, 1, "request %d answered %d times", i,
                     g.slots[i].answered);
    cr_assert_eq(g.ok_at_drained, g.ok, "a write was answered after on_drained");
}

/* Waiting jobs in queue "q" of the run's store, read after the engine. */
static int64_t stored(void)
{
    er_store *s;
    er_store_options opt = {0};
    er_error err = {0};
    cr_assert_eq(er_sqlite_ops.open(g.path, &opt, &s, &err), 0, "%s", err.message);
    er_queue_info *qs = NULL;
    size_t n = 0;
    cr_assert_eq(er_sqlite_ops.list_queues(s, er_now_ms(), &qs, &n, &err), 0, "%s",
                 err.message);
    int64_t waiting = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(qs[i].name, "q") == 0)
            waiting = qs[i].counts[ER_STATE_WAITING];
    er_queue_info_list_free(qs, n);
    er_sqlite_ops.close(s);
    const char *sfx[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < 3; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s%s", g.path, sfx[i]);
        unlink(p);
    }
    rmdir(g.dir);
    return waiting;
}

Test(engine_submit, threads_submitting_at_once_get_every_answer_once_on_the_loop,
     .timeout = 120)
{
    run(0);
    int writes = 0;
    for (int i = 0; i < TOTAL; i++) {
        const slot *s = &g.slots[i];
        cr_assert_eq(s->rc, s->read ? ER_ENOTFOUND : 0, "request %d: rc %d", i, s->rc);
        writes += !s->read;
    }
    cr_assert_eq(g.ok, writes);
    cr_assert_eq(stored(), writes);
}

Test(engine_submit, a_drain_during_submits_answers_what_it_took_and_refuses_the_rest,
     .timeout = 120)
{
    run(TOTAL / 8);
    int refused = 0;
    for (int i = 0; i < TOTAL; i++) {
        const slot *s = &g.slots[i];
        if (s->rc == ER_EUNAVAIL) {
            refused++;
            continue;
        }
        cr_assert_eq(s->rc, s->read ? ER_ENOTFOUND : 0, "request %d: rc %d", i, s->rc);
    }
    /* the second halves were submitted after the drain began */
    cr_assert_geq(refused, TOTAL / 2);
    cr_assert_eq(stored(), g.ok);
}
