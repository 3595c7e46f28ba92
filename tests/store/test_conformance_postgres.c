/* SPDX-License-Identifier: MIT
 *
 * The conformance cases (conformance_cases.h) run against the PostgreSQL
 * store, each test in a fresh schema of the server at $ERRAND_TEST_PG_URL
 * (scripts/pg start makes one), then PostgreSQL-only facts: the store
 * clock, migrations, SKIP LOCKED between connections, the pool bound,
 * LISTEN/NOTIFY wake-ups and the application's errand.enqueue functions.
 * Without ERRAND_TEST_PG_URL every test fails, unless ERRAND_TEST_PG_SKIP=1.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <poll.h>
#include <unistd.h>

#include "store/postgres/pg_int.h"
#include "store/postgres/postgres.h"
#include "store/store.h"

#include "pg_test_url.h"

/* ---- the store under test ---- */

static const er_store_ops *OPS = &er_postgres_ops;
static char g_schema[64];
static char g_url[1024];
static er_store *S;
static er_rand R;

/* base URL + schema (+ extra options) */
static void url_with(char *out, size_t n, const char *extra)
{
    const char *b = base_url();
    snprintf(out, n, "%s%cschema=%s%s%s", b, strchr(b, '?') ? '&' : '?', g_schema,
             extra ? "&" : "", extra ? extra : "");
}

/* A fresh schema name per test; the first open creates it. */
static void store_fresh(void)
{
    static unsigned n;
    snprintf(g_schema, sizeof g_schema, "t_%ld_%u_%u", (long)getpid(), n++,
             (unsigned)(er_now_ms() % 100000));
    url_with(g_url, sizeof g_url, "clock=caller");
}

static PGconn *raw(void)
{
    PGconn *c = PQconnectdb(base_url());
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

/* Runs SQL on a connection; returns the result status (and keeps *out). */
static ExecStatusType sql(PGconn *c, const char *q, PGresult **out)
{
    PGresult *r = PQexec(c, q);
    ExecStatusType st = PQresultStatus(r);
    if (out)
        *out = r;
    else
        PQclear(r);
    return st;
}

static void store_drop(void)
{
    pg_test_drop_schema(g_schema);
}

#include "conformance_cases.h"
#include "ui_cases.h"
#include "worker_cases.h"
#include "reply_cases.h"

/* ---- PostgreSQL-only facts ---- */

TestSuite(postgres, .init = setup, .fini = teardown, .timeout = 60);

static er_store *open_url(const char *url)
{
    er_store *s = NULL;
    er_error err = {0};
    er_store_options opt = {.busy_timeout_ms = 1000, .dedup_window_ms = ER_DEDUP_WINDOW_DEFAULT_MS};
    cr_assert_eq(OPS->open(url, &opt, &s, &err), 0, "open %s: %s", url, err.message);
    return s;
}

Test(postgres, store_clock_decides_promotion_leases_and_reaping)
{
    char url[1100];
    url_with(url, sizeof url, NULL); /* clock=store, the default */
    er_store *st = open_url(url);
    int64_t real = er_now_ms();
    er_job j;
    mkjob(&j, "due", "q", 0, real - 1000, T0); /* due by the real clock, not by T0 */
    j.state = ER_STATE_SCHEDULED;
    bool dupl;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(st, &j, &dupl, NULL, NULL, &err), 0, "%s", err.message);
    er_job_fini(&j);
    int n = -1;
    /* the caller's clock (T0, years ago) says not due; the injected store agrees */
    cr_assert_eq(OPS->promote(S, T0, 10, &n, NULL, NULL, &err), 0);
    cr_assert_eq(n, 0);
    /* the store clock says due, whatever `now` the caller passes */
    cr_assert_eq(OPS->promote(st, T0, 10, &n, NULL, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    er_job_list l = {0};
    const char *qs[] = {"q"};
    er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w", .max = 1,
                         .lease_ms = ER_LEASE_MIN_MS, .now = T0};
    cr_assert_eq(OPS->fetch(st, &p, &l, &err), 0, "%s", err.message);
    cr_assert_eq(l.len, 1);
    int64_t exp = l.items[0].lease_expires_at;
    cr_assert(exp >= real + ER_LEASE_MIN_MS - 5000 && exp <= real + ER_LEASE_MIN_MS + 5000,
              "lease expiry %lld should follow the server clock (%lld)", (long long)exp,
              (long long)real);
    er_job_list_fini(&l);
    cr_assert_eq(OPS->reap(st, T0 + 999999999LL, 10, &n, NULL, NULL, NULL, &err), 0);
    cr_assert_eq(n, 0); /* a far-future caller clock changes nothing either */
    usleep((useconds_t)(ER_LEASE_MIN_MS + 300) * 1000);
    cr_assert_eq(OPS->reap(st, T0, 10, &n, NULL, NULL, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    cr_assert_eq(state_of("due"), ER_STATE_WAITING);
    OPS->close(st);
}

static int64_t one_int(PGconn *c, const char *q)
{
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s: %s", q, PQresultErrorMessage(r));
    int64_t v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* A session without its batch table (no TEMPORARY privilege) sends the
 * batch as JSON; both ways store the same jobs and report the same
 * duplicates, and the batch table is empty after each. */
Test(postgres, enqueue_many_by_copy_and_by_json_agree)
{
    cr_assert(S->c->bulk_table, "a session has its batch table");
    /* raw tab, newline, carriage return and backslashes: COPY's escapes */
    const char *payload = "[\"a\\\\tb\", \"\\\\N\"]\t\n\r\\";
    for (int way = 0; way < 2; way++) {
        S->c->bulk_table = way == 0;
        er_job jobs[3];
        char id[3][16];
        for (int i = 0; i < 3; i++) {
            snprintf(id[i], sizeof id[i], "w%d-%d", way, i == 2 ? 0 : i);
            mkjob(&jobs[i], id[i], "bq", i, T0, T0);
            free(jobs[i].payload);
            jobs[i].payload = strdup(payload);
            jobs[i].payload_len = strlen(payload);
        }
        bool dup[3];
        er_error err = {0};
        cr_assert_eq(OPS->begin(S, &err), 0);
        cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 3, dup, NULL, &err), 0, "%s",
                     err.message);
        cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
        cr_assert(!dup[0] && !dup[1] && dup[2], "way %d", way);
        er_job g;
        cr_assert_eq(OPS->get_job(S, id[1], &g, &err), 0);
        cr_assert_str_eq(g.payload, payload);
        cr_assert_eq(g.priority, 1);
        cr_assert_eq(g.state, ER_STATE_WAITING);
        er_job_fini(&g);
        for (int i = 0; i < 3; i++)
            er_job_fini(&jobs[i]);
    }
    S->c->bulk_table = true;
    PGresult *r = PQexec(S->c->pg, "SELECT count(*) FROM pg_temp.errand_bulk");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(S->c->pg));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "0");
    PQclear(r);
}

/* A batch far bigger than one piece of COPY text (pg_jobs.c sends the rows
 * as they are written, about 64 KiB at a time) is stored whole, both with
 * the client's ids (the batch table, a repeat reported across pieces) and
 * with generated ids (the direct COPY). */
Test(postgres, a_batch_of_many_copy_pieces_is_stored_whole)
{
    enum { N = 1500 };
    char pad[301];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    er_job *jobs = calloc(N, sizeof *jobs);
    bool *dup = calloc(N, sizeof *dup);
    cr_assert(jobs && dup);
    for (int way = 0; way < 2; way++) {
        for (int i = 0; i < N; i++) {
            char id[32];
            /* the last job repeats the first one's id (client ids only) */
            snprintf(id, sizeof id, "big%d-%d", way, i == N - 1 && way == 0 ? 0 : i);
            mkjob(&jobs[i], id, way ? "bigg" : "bigc", 0, T0, T0);
            jobs[i].id_generated = way == 1;
            free(jobs[i].payload);
            char p[400];
            snprintf(p, sizeof p, "{\"i\":%d,\"pad\":\"%s\"}", i, pad);
            jobs[i].payload = strdup(p);
            jobs[i].payload_len = strlen(p);
            dup[i] = true;
        }
        er_error err = {0};
        cr_assert_eq(OPS->begin(S, &err), 0);
        cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, N, dup, NULL, &err), 0, "%s",
                     err.message);
        cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
        for (int i = 0; i < N - 1; i++)
            cr_assert(!dup[i], "way %d job %d", way, i);
        cr_assert_eq(dup[N - 1], way == 0, "way %d: the repeat", way);
        er_job g;
        cr_assert_eq(OPS->get_job(S, jobs[N - 2].id, &g, &err), 0, "%s", err.message);
        cr_assert_str_eq(g.payload, jobs[N - 2].payload);
        er_job_fini(&g);
        for (int i = 0; i < N; i++)
            er_job_fini(&jobs[i]);
    }
    free(jobs);
    free(dup);
    PGconn *c = raw();
    char q[256];
    snprintf(q, sizeof q, "SELECT count(*) FROM %s.jobs WHERE queue = 'bigc'", g_schema);
    cr_assert_eq(one_int(c, q), N - 1);
    snprintf(q, sizeof q,
             "SELECT count(DISTINCT payload::jsonb->>'i') FROM %s.jobs WHERE queue = 'bigg'",
             g_schema);
    cr_assert_eq(one_int(c, q), N);
    PQfinish(c);
}

Test(postgres, migrations_are_recorded_and_a_newer_schema_is_refused)
{
    PGconn *c = raw();
    char q[256];
    snprintf(q, sizeof q, "SELECT max(version) FROM %s.migrations", g_schema);
    cr_assert_eq(one_int(c, q), er_pg_schema_version);
    put("j", "q", 0, T0, T0);
    OPS->close(S);
    er_postgres_pool_drain();
    open_store(); /* migrates nothing, keeps the data */
    cr_assert_eq(one_int(c, q), er_pg_schema_version);
    cr_assert_eq(state_of("j"), ER_STATE_WAITING);
    OPS->close(S);
    S = NULL;
    er_postgres_pool_drain();
    snprintf(q, sizeof q, "INSERT INTO %s.migrations (version) VALUES (%d)", g_schema,
             er_pg_schema_version + 1);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK);
    er_error err = {0};
    er_store_options opt = {0};
    cr_assert_eq(OPS->open(g_url, &opt, &S, &err), ER_EINVAL);
    cr_assert_null(S);
    cr_assert_not_null(strstr(err.message, "newer"), "%s", err.message);
    PQfinish(c);
}

Test(postgres, bad_urls_are_refused_with_clear_errors)
{
    er_store *s = NULL;
    er_error err = {0};
    er_store_options opt = {0};
    cr_assert_eq(OPS->open("postgres://127.0.0.1/x?schema=Bad-Name", &opt, &s, &err),
                 ER_EINVAL);
    cr_assert_str_eq(err.field, "store");
    cr_assert_eq(OPS->open("postgres://127.0.0.1/x?pool_size=0", &opt, &s, &err), ER_EINVAL);
    cr_assert_eq(OPS->open("postgres://127.0.0.1/x?clock=sundial", &opt, &s, &err), ER_EINVAL);
    cr_assert_eq(OPS->open("postgres://127.0.0.1:1/x?connect_timeout=2", &opt, &s, &err),
                 ER_EUNAVAIL);
    cr_assert_not_null(strstr(err.message, "cannot connect"), "%s", err.message);
    cr_assert_null(s);
    const er_store_ops *ops;
    const char *rest;
    cr_assert_eq(er_store_resolve("postgresql://h/db", &ops, &rest, &err), 0);
    cr_assert_eq(ops, &er_postgres_ops);
    cr_assert_str_eq(rest, "postgresql://h/db");
}

Test(postgres, pool_size_bounds_the_connections_a_process_opens)
{
    char url[1100];
    url_with(url, sizeof url, "clock=caller&pool_size=1");
    er_store *a = open_url(url);
    er_store *b = NULL;
    er_error err = {0};
    er_store_options opt = {.busy_timeout_ms = 200};
    int64_t t = er_mono_ms();
    cr_assert_eq(OPS->open(url, &opt, &b, &err), ER_EUNAVAIL);
    cr_assert_geq(er_mono_ms() - t, 150);
    cr_assert_not_null(strstr(err.message, "pool_size"), "%s", err.message);
    OPS->close(a);
    b = open_url(url); /* the connection a gave back */
    OPS->close(b);
}

Test(postgres, concurrent_fetches_skip_each_others_locked_jobs)
{
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "j%d", i);
        put(id, "q", 0, T0, T0);
    }
    er_store *other = open_url(g_url);
    er_error err = {0};
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->begin(other, &err), 0);
    er_job_list a = {0}, b = {0};
    cr_assert_eq(fetch1("q", 2, T0, &a), 2);
    const char *qs[] = {"q"};
    er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w2", .max = 10, .now = T0};
    cr_assert_eq(OPS->fetch(other, &p, &b, &err), 0, "%s", err.message); /* no wait */
    cr_assert_eq(b.len, 2);
    cr_assert_str_eq(b.items[0].id, "j2");
    cr_assert_str_eq(b.items[1].id, "j3");
    cr_assert_eq(OPS->commit(other, &err), 0);
    cr_assert_eq(OPS->commit(S, &err), 0);
    er_job_list_fini(&a);
    er_job_list_fini(&b);
    OPS->close(other);
}

Test(postgres, a_broken_connection_is_unavailable_then_reconnects)
{
    put("j", "q", 0, T0, T0);
    PGconn *c = raw();
    char q[128];
    snprintf(q, sizeof q, "SELECT pg_terminate_backend(%d)", PQbackendPID(S->c->pg));
    cr_assert_eq(sql(c, q, NULL), PGRES_TUPLES_OK);
    PQfinish(c);
    er_job g;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, "j", &g, &err), ER_EUNAVAIL);
    cr_assert_eq(OPS->get_job(S, "j", &g, &err), 0, "%s", err.message); /* reconnected */
    er_job_fini(&g);
    cr_assert_eq(OPS->begin(S, &err), 0, "%s", err.message);
    put("k", "q", 0, T0, T0);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    cr_assert_eq(state_of("k"), ER_STATE_WAITING);
}

/* Alters jobs.queue's collation under the running store, which changes
 * the result type of every prepared statement that returns it. */
static void alter_queue_collation(const char *collation)
{
    PGconn *c = raw();
    char q[256];
    snprintf(q, sizeof q, "ALTER TABLE %s.jobs ALTER COLUMN queue TYPE text COLLATE \"%s\"",
             g_schema, collation);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQfinish(c);
}

/* A newer node's migration (or an operator) changes a result type under
 * the server: the statement that meets it fails once, and the connection
 * prepares its statements again, outside a transaction and inside one. */
Test(postgres, a_result_type_changed_under_a_prepared_statement_is_prepared_again)
{
    put("j", "q", 0, T0, T0);
    er_job g;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, "j", &g, &err), 0, "%s", err.message);
    er_job_fini(&g);
    alter_queue_collation("C");
    cr_assert_neq(OPS->get_job(S, "j", &g, &err), 0, "the plan should have gone stale");
    cr_assert(strstr(err.message, "cached plan"), "%s", err.message);
    err = (er_error){0};
    cr_assert_eq(OPS->get_job(S, "j", &g, &err), 0, "%s", err.message);
    cr_assert_str_eq(g.queue, "q");
    er_job_fini(&g);

    alter_queue_collation("default");
    cr_assert_eq(OPS->begin(S, &err), 0, "%s", err.message);
    cr_assert_neq(OPS->get_job(S, "j", &g, &err), 0, "the plan should have gone stale");
    OPS->rollback(S);
    err = (er_error){0};
    cr_assert_eq(OPS->begin(S, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->get_job(S, "j", &g, &err), 0, "%s", err.message);
    cr_assert_str_eq(g.queue, "q");
    er_job_fini(&g);
    put("k", "q", 0, T0, T0);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    cr_assert_eq(state_of("k"), ER_STATE_WAITING);
}

/* A direct COPY on a connection that broke inside the transaction fails
 * as unavailable and stores nothing; after the rollback the store
 * reconnects and the same batch goes in. */
Test(postgres, a_direct_copy_on_a_broken_connection_is_unavailable_and_stores_nothing)
{
    er_job jobs[3];
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "bc-%d", i);
        mkjob(&jobs[i], id, "bq", 0, T0, T0);
        jobs[i].id_generated = true;
    }
    bool dup[3];
    er_error err = {0};
    cr_assert_eq(OPS->begin(S, &err), 0, "%s", err.message);
    PGconn *c = raw();
    char q[128];
    snprintf(q, sizeof q, "SELECT pg_terminate_backend(%d)", PQbackendPID(S->c->pg));
    cr_assert_eq(sql(c, q, NULL), PGRES_TUPLES_OK);
    usleep(100 * 1000);
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 3, dup, NULL, &err), ER_EUNAVAIL, "%s",
                 err.message);
    OPS->rollback(S);
    snprintf(q, sizeof q, "SELECT count(*) FROM %s.jobs", g_schema);
    cr_assert_eq(one_int(c, q), 0);
    cr_assert_eq(OPS->begin(S, &err), 0, "%s", err.message);
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 3, dup, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    cr_assert(!dup[0] && !dup[1] && !dup[2]);
    cr_assert_eq(one_int(c, q), 3);
    for (int i = 0; i < 3; i++)
        er_job_fini(&jobs[i]);
    PQfinish(c);
}

/* ---- LISTEN / NOTIFY ---- */

typedef struct seen {
    char q[8][64];
    int n;
} seen;

static void on_ready(const char *queue, void *arg)
{
    seen *s = arg;
    if (s->n < 8)
        snprintf(s->q[s->n++], 64, "%s", queue);
}

static bool saw(const seen *s, const char *q)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->q[i], q) == 0)
            return true;
    return false;
}

/* Polls the listener through the ops table, waiting up to timeout_ms on
 * its descriptor when nothing had arrived; returns how many wake-ups were
 * delivered. */
static int listen_wait(er_store_listener *l, int timeout_ms, seen *s)
{
    er_error err = {0};
    int before = s->n;
    cr_assert_eq(OPS->listener_poll(l, on_ready, NULL, s, &err), 0, "%s", err.message);
    if (s->n > before)
        return s->n - before;
    struct pollfd p = {.fd = OPS->listener_fd(l), .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    cr_assert_geq(rc, 0);
    if (rc > 0)
        cr_assert_eq(OPS->listener_poll(l, on_ready, NULL, s, &err), 0, "%s", err.message);
    return s->n - before;
}

static void wait_for(er_store_listener *l, seen *s, int want)
{
    for (int i = 0; i < 20 && s->n < want; i++)
        listen_wait(l, 100, s);
}

Test(postgres, listeners_are_notified_when_jobs_become_ready_at_commit)
{
    er_store_listener *l;
    er_error err = {0};
    cr_assert(OPS->listener_open && OPS->listener_fd && OPS->listener_poll &&
              OPS->listener_close && OPS->release_idle);
    cr_assert_eq(OPS->listener_open(g_url, &l, &err), 0, "%s", err.message);
    cr_assert_geq(OPS->listener_fd(l), 0);
    seen s = {0};
    cr_assert_eq(OPS->begin(S, &err), 0);
    put("w1", "mail", 0, T0, T0);
    put("w2", "mail", 0, T0, T0);
    put("later", "sched", 0, T0 + 5000, T0); /* scheduled: no wake-up */
    cr_assert_eq(listen_wait(l, 200, &s), 0); /* not yet */
    cr_assert_eq(OPS->commit(S, &err), 0);
    wait_for(l, &s, 1);
    cr_assert_eq(s.n, 1, "one notification per queue and transaction, got %d", s.n);
    cr_assert_str_eq(s.q[0], "mail");

    s.n = 0;
    int n;
    cr_assert_eq(OPS->promote(S, T0 + 5000, 10, &n, NULL, NULL, &err), 0);
    wait_for(l, &s, 1);
    cr_assert(saw(&s, "sched"));

    s.n = 0;
    PGconn *c = raw();
    char q[256];
    snprintf(q, sizeof q, "SELECT %s.enqueue('app', 'x', '{}')", g_schema);
    cr_assert_eq(sql(c, q, NULL), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    wait_for(l, &s, 1);
    cr_assert(saw(&s, "app"));
    PQfinish(c);

    s.n = 0;
    er_job bj[2];
    mkjob(&bj[0], "bm1", "bulkq", 0, T0, T0);
    mkjob(&bj[1], "bm2", "bulkq", 0, T0, T0);
    bool d[2];
    cr_assert_eq(er_store_enqueue_many(OPS, S, bj, 2, d, NULL, &err), 0, "%s", err.message);
    er_job_fini(&bj[0]);
    er_job_fini(&bj[1]);
    wait_for(l, &s, 1);
    cr_assert_eq(s.n, 1);
    cr_assert(saw(&s, "bulkq"));

    /* rolled back: nothing is delivered */
    s.n = 0;
    cr_assert_eq(OPS->begin(S, &err), 0);
    put("gone", "rb", 0, T0, T0);
    OPS->rollback(S);
    cr_assert_eq(listen_wait(l, 200, &s), 0);
    cr_assert_eq(s.n, 0);
    OPS->listener_close(l);
}

/* A batch whose ids the server generated is COPYed straight into jobs: it
 * stores the rows the general path stores (every column but id and seq),
 * registers its queues and wakes the fetchers of its waiting ones once, at
 * commit. A generated id that collides falls back to the general path
 * inside the same transaction: the first holder keeps the id, the rest of
 * the batch is stored. */
Test(postgres, a_batch_of_generated_ids_is_copied_directly_and_falls_back_on_a_collision)
{
    er_store_listener *l;
    er_error err = {0};
    cr_assert_eq(OPS->listener_open(g_url, &l, &err), 0, "%s", err.message);
    const char *payload = "[\"a\\\\tb\", \"\\\\N\"]\t\n\r\\";
    enum { N = 4 };
    for (int way = 0; way < 2; way++) {
        er_job jobs[N];
        for (int i = 0; i < N; i++) {
            char id[32];
            snprintf(id, sizeof id, "%s-%d", way ? "gen" : "given", i);
            const char *queue = i == 2 ? "gsched" : i == 3 ? "gother" : "gwait";
            mkjob(&jobs[i], id, queue, i, i == 2 ? T0 + 5000 : T0, T0);
            jobs[i].id_generated = way == 1;
            jobs[i].backoff.jitter = i == 1 ? 0.25 : 0.5;
            jobs[i].group = i == 1 ? sdup("grp") : NULL;
            free(jobs[i].payload);
            jobs[i].payload = strdup(payload);
            jobs[i].payload_len = strlen(payload);
        }
        bool dup[N] = {true, true, true, true};
        seen sn = {0};
        cr_assert_eq(OPS->begin(S, &err), 0);
        cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, N, dup, NULL, &err), 0, "%s",
                     err.message);
        cr_assert_eq(listen_wait(l, 100, &sn), 0, "no wake-up before the commit");
        cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
        for (int i = 0; i < N; i++)
            cr_assert(!dup[i], "way %d job %d", way, i);
        wait_for(l, &sn, 3);
        listen_wait(l, 100, &sn);
        cr_assert(saw(&sn, "gwait") && saw(&sn, "gother") && !saw(&sn, "gsched"), "way %d", way);
        cr_assert_eq(sn.n, 2, "one wake-up a queue, got %d", sn.n);
        for (int i = 0; i < N; i++)
            er_job_fini(&jobs[i]);
    }
    PGconn *c = raw();
    char q[2048];
    /* the same rows both ways, in the same order, bar id (and the
     * idempotency key, the id here), seq and the generated-id flag
     * (set_flags 256) */
#define ROWS_OF(like)                                                                      \
    "(SELECT row_number() OVER (ORDER BY seq) AS k, to_jsonb(j) - 'id' - 'idempotency_key'" \
    " - 'seq' - 'set_flags' AS r, set_flags & ~256 AS f FROM %s.jobs j WHERE id LIKE '" like \
    "%%')"
    snprintf(q, sizeof q,
             "SELECT count(*) FROM " ROWS_OF("given-") " a FULL JOIN " ROWS_OF("gen-")
             " b USING (k) WHERE a.r IS DISTINCT FROM b.r OR a.f IS DISTINCT FROM b.f",
             g_schema, g_schema);
#undef ROWS_OF
    cr_assert_eq(one_int(c, q), 0, "the direct COPY stores what the general path stores");
    snprintf(q, sizeof q, "SELECT count(*) FROM %s.jobs WHERE id LIKE 'gen-%%'", g_schema);
    cr_assert_eq(one_int(c, q), N);
    snprintf(q, sizeof q,
             "SELECT count(*) FROM %s.queues WHERE name IN ('gwait', 'gsched', 'gother')",
             g_schema);
    cr_assert_eq(one_int(c, q), 3, "the batch's queues are registered");

    /* a collision: "gen-0" is taken, "c-1" comes twice */
    er_job jobs[4];
    const char *ids[4] = {"c-0", "gen-0", "c-1", "c-1"};
    for (int i = 0; i < 4; i++) {
        mkjob(&jobs[i], ids[i], "gcoll", 0, T0, T0);
        jobs[i].id_generated = true;
    }
    bool dup[4];
    cr_assert_eq(OPS->begin(S, &err), 0);
    put("before", "gcoll", 0, T0, T0);
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, 4, dup, NULL, &err), 0, "%s", err.message);
    put("after", "gcoll", 0, T0, T0); /* the transaction goes on */
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    cr_assert(!dup[0] && dup[1] && !dup[2] && dup[3]);
    for (int i = 0; i < 4; i++)
        er_job_fini(&jobs[i]);
    snprintf(q, sizeof q,
             "SELECT string_agg(id, ' ' ORDER BY seq) FROM %s.jobs WHERE queue = 'gcoll'",
             g_schema);
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "before c-0 c-1 after");
    PQclear(r);
    cr_assert_eq(state_of("gen-0"), ER_STATE_WAITING);
    PQfinish(c);
    OPS->listener_close(l);
}

/* ---- finished jobs (ops->finished, "<schema>_done") ---- */

typedef struct done_seen {
    uint32_t keys[2048];
    size_t n;  /* keys delivered */
    int calls; /* done callbacks */
    int any;   /* of them "any job may have finished" (n 0) */
} done_seen;

static void on_done(const uint32_t *keys, size_t n, void *arg)
{
    done_seen *d = arg;
    d->calls++;
    if (n == 0)
        d->any++;
    for (size_t i = 0; i < n && d->n < 2048; i++)
        d->keys[d->n++] = keys[i];
}

static void on_ready_ignored(const char *queue, void *arg)
{
    (void)queue;
    (void)arg;
}

/* Polls until `calls` done callbacks arrived, or ~timeout_ms passed. */
static void done_wait(er_store_listener *l, done_seen *d, int calls, int timeout_ms)
{
    er_error err = {0};
    for (int waited = 0; d->calls < calls && waited < timeout_ms; waited += 20) {
        struct pollfd p = {.fd = OPS->listener_fd(l), .events = POLLIN};
        cr_assert_geq(poll(&p, 1, 20), 0);
        cr_assert_eq(OPS->listener_poll(l, on_ready_ignored, on_done, d, &err), 0, "%s",
                     err.message);
    }
}

Test(postgres, finished_keys_reach_listeners_at_commit_and_never_on_rollback)
{
    er_store_listener *l;
    er_error err = {0};
    cr_assert_not_null(OPS->finished);
    cr_assert_eq(OPS->listener_open(g_url, &l, &err), 0, "%s", err.message);
    done_seen *d = calloc(1, sizeof *d);

    uint32_t two[] = {1, 0xdeadbeefu};
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->finished(S, two, 2, &err), 0);
    done_wait(l, d, 1, 200);
    cr_assert_eq(d->calls, 0, "delivered before the commit");
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    done_wait(l, d, 1, 2000);
    cr_assert_eq(d->calls, 1);
    cr_assert_eq(d->n, 2);
    cr_assert_eq(d->keys[0], 1u);
    cr_assert_eq(d->keys[1], 0xdeadbeefu);

    /* rolled back: nothing */
    memset(d, 0, sizeof *d);
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->finished(S, two, 2, &err), 0);
    OPS->rollback(S);
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->commit(S, &err), 0); /* an empty commit after it announces nothing */
    done_wait(l, d, 1, 300);
    cr_assert_eq(d->calls, 0);

    /* 1500 keys: two notifications, every key once, in order */
    uint32_t *many = malloc((ER_STORE_FINISHED_MAX + 1) * sizeof *many);
    for (uint32_t i = 0; i <= ER_STORE_FINISHED_MAX; i++)
        many[i] = i * 2654435761u;
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->finished(S, many, 1000, &err), 0);
    cr_assert_eq(OPS->finished(S, many + 1000, 500, &err), 0);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    done_wait(l, d, 2, 2000);
    cr_assert_eq(d->calls, 2);
    cr_assert_eq(d->n, 1500);
    for (size_t i = 0; i < 1500; i++)
        cr_assert_eq(d->keys[i], many[i]);

    /* past ER_STORE_FINISHED_MAX, and keys NULL: one "any job" */
    memset(d, 0, sizeof *d);
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->finished(S, many, ER_STORE_FINISHED_MAX + 1, &err), 0);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->finished(S, NULL, 0, &err), 0);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    done_wait(l, d, 2, 2000);
    cr_assert_eq(d->calls, 2);
    cr_assert_eq(d->any, 2);
    cr_assert_eq(d->n, 0);
    free(many);
    free(d);
    OPS->listener_close(l);
}

/* ---- errand.enqueue for applications ---- */

/* Runs `tmpl` with its "%s" replaced by the test's schema. */
static PGresult *call(PGconn *c, const char *tmpl, const char *unused)
{
    const char *at = strstr(tmpl, "%s");
    cr_assert_not_null(at);
    char q[2048];
    snprintf(q, sizeof q, "%.*s%s%s", (int)(at - tmpl), tmpl, g_schema, at + 2);
    return PQexec(c, q);
}

Test(postgres, sql_enqueue_exists_only_if_the_transaction_commits)
{
    PGconn *c = raw();
    cr_assert_eq(sql(c, "BEGIN", NULL), PGRES_COMMAND_OK);
    PGresult *r = call(c, "SELECT %s.enqueue('mail', 'email.send', '{\"to\":1}',"
                          " '{\"id\":\"tx-1\"}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "tx-1");
    PQclear(r);
    cr_assert_eq(sql(c, "ROLLBACK", NULL), PGRES_COMMAND_OK);
    er_job g;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, "tx-1", &g, &err), ER_ENOTFOUND);

    cr_assert_eq(sql(c, "BEGIN", NULL), PGRES_COMMAND_OK);
    r = call(c, "SELECT %s.enqueue('mail', 'email.send', '{\"to\":2}', '{\"id\":\"tx-2\","
                "\"priority\":7,\"trace_id\":\"t-1\"}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    cr_assert_eq(OPS->get_job(S, "tx-2", &g, &err), ER_ENOTFOUND); /* not committed yet */
    cr_assert_eq(sql(c, "COMMIT", NULL), PGRES_COMMAND_OK);

    cr_assert_eq(OPS->get_job(S, "tx-2", &g, &err), 0, "%s", err.message);
    cr_assert_eq(g.state, ER_STATE_WAITING);
    cr_assert_eq(g.priority, 7);
    cr_assert(g.set_priority);
    cr_assert_str_eq(g.trace_id, "t-1");
    cr_assert_str_eq(g.idempotency_key, "tx-2");
    cr_assert_eq(g.max_attempts, ER_DEFAULT_MAX_ATTEMPTS);
    cr_assert_eq(g.backoff.type, ER_BACKOFF_EXPONENTIAL);
    cr_assert_eq(g.timeout_ms, ER_DEFAULT_TIMEOUT_MS);
    er_job_fini(&g);
    er_job_list l = {0};
    cr_assert_eq(fetch1("mail", 10, er_now_ms(), &l), 1);
    cr_assert_str_eq(l.items[0].id, "tx-2");
    cr_assert_str_eq(l.items[0].payload, "{\"to\": 2}");
    er_error e2 = {0};
    cr_assert_eq(OPS->complete(S, "tx-2", l.items[0].lease_token, NULL, er_now_ms(), NULL, &e2), 0);
    er_job_list_fini(&l);
    /* the queue is registered, so it lists */
    er_queue_info *qs;
    size_t n;
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(qs[0].name, "mail");
    er_queue_info_list_free(qs, n);
    PQfinish(c);
}

static void set_defaults(er_queue_settings *s)
{
    s->defaults.has_max_attempts = true;
    s->defaults.max_attempts = 5;
    s->defaults.has_backoff = true;
    s->defaults.backoff = (er_backoff){.type = ER_BACKOFF_FIXED, .delay_ms = 700,
                                       .max_delay_ms = 700, .jitter = 0};
}

Test(postgres, sql_enqueue_applies_options_queue_defaults_and_dedups)
{
    settings_put("q", set_defaults);
    PGconn *c = raw();
    PGresult *r = call(c, "SELECT %s.enqueue('q', 'n', 'null', '{\"id\":\"a\",\"delay_ms\":"
                          "60000,\"timeout_ms\":5,\"group\":\"g:1\"}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    er_job g;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, "a", &g, &err), 0);
    cr_assert_eq(g.state, ER_STATE_SCHEDULED);
    cr_assert_eq(g.run_at - g.created_at, 60000);
    cr_assert_eq(g.max_attempts, 5);
    cr_assert_eq(g.backoff.type, ER_BACKOFF_FIXED);
    cr_assert_eq(g.backoff.delay_ms, 700);
    cr_assert(!g.set_backoff && !g.set_max_attempts && g.set_timeout);
    cr_assert_eq(g.timeout_ms, 5);
    cr_assert_str_eq(g.group, "g:1");
    cr_assert_str_eq(g.payload, "null");
    er_job_fini(&g);
    /* the same id again: the id back, nothing changes */
    r = call(c, "SELECT %s.enqueue('q', 'other', '{}', '{\"id\":\"a\",\"priority\":9}')", NULL);
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "a");
    PQclear(r);
    cr_assert_eq(OPS->get_job(S, "a", &g, &err), 0);
    cr_assert_str_eq(g.name, "n");
    cr_assert_eq(g.priority, 0);
    er_job_fini(&g);
    /* generated ids: 26 characters, time-ordered prefix */
    r = call(c, "SELECT %s.enqueue('q', 'n', NULL)", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_eq(strlen(PQgetvalue(r, 0, 0)), 26);
    PQclear(r);
    /* bulk: ids in order, all or nothing */
    r = call(c, "SELECT * FROM %s.enqueue_bulk('b', '[{\"name\":\"x\",\"id\":\"b1\"},"
                "{\"name\":\"x\",\"payload\":[1],\"id\":\"b2\",\"backoff\":{\"type\":\"fixed\"}}]')",
             NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_eq(PQntuples(r), 2);
    cr_assert_str_eq(PQgetvalue(r, 1, 0), "b2");
    PQclear(r);
    cr_assert_eq(OPS->get_job(S, "b2", &g, &err), 0);
    cr_assert_str_eq(g.payload, "[1]");
    cr_assert(g.set_backoff);
    cr_assert_eq(g.backoff.delay_ms, ER_DEFAULT_BACKOFF_DELAY_MS);
    er_job_fini(&g);
    r = call(c, "SELECT * FROM %s.enqueue_bulk('b', '[{\"name\":\"x\",\"id\":\"b3\"},"
                "{\"name\":\"bad name\"}]')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
    PQclear(r);
    cr_assert_eq(OPS->get_job(S, "b3", &g, &err), ER_ENOTFOUND);
    PQfinish(c);
}

Test(postgres, sql_enqueue_rejects_invalid_input_with_clear_messages)
{
    PGconn *c = raw();
    static const struct {
        const char *call, *want, *column;
    } cases[] = {
        {"SELECT %s.enqueue('bad queue', 'n', '{}')", "queue must be", "queue"},
        {"SELECT %s.enqueue('q', '', '{}')", "name must be", "name"},
        {"SELECT %s.enqueue('q', NULL, '{}')", "name is required", "name"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"priority\":5000}')", "priority must be an integer 0..1000", "priority"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"priority\":1.5}')", "priority must be an integer", "priority"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"colour\":1}')", "colour is not a known field", "colour"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"name\":\"x\"}')", "name is an argument of enqueue", "name"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"id\":\"a/b\"}')", "id must be", "id"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"run_at\":\"soon\"}')", "run_at must be", "run_at"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"run_at\":\"tomorrow\"}')", "run_at must be an RFC 3339 time", "run_at"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"run_at\":\"2026-12-01\"}')", "run_at must be an RFC 3339 time", "run_at"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"run_at\":\"2999-01-01T00:00:00Z\"}')", "at most 366 days", "run_at"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"delay_ms\":1,\"run_at\":\"2020-01-01T00:00:00Z\"}')", "not both", "run_at"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"backoff\":{\"type\":\"random\"}}')", "backoff.type", "backoff.type"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"backoff\":{\"jitter\":2}}')", "backoff.jitter", "backoff.jitter"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"backoff\":{\"delay_ms\":10,\"max_delay_ms\":5}}')", "max_delay_ms must be", "backoff.max_delay_ms"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"max_attempts\":0}')", "max_attempts must be", "max_attempts"},
        {"SELECT %s.enqueue('q', 'n', '{}', '{\"group\":\"a b\"}')", "group must be", "group"},
        {"SELECT %s.enqueue('q', 'n', '{}', '[]')", "options must be a JSON object", "options"},
        {"SELECT * FROM %s.enqueue_bulk('q', '{}')", "jobs must be an array", "jobs"},
        {"SELECT * FROM %s.enqueue_bulk('q', '[{\"name\":\"a\"},{\"name\":\"b\",\"priority\":-1}]')", "priority must be", "jobs[1].priority"},
        {"SELECT %s.enqueue_job('q', '{\"name\":5}')", "name must be a string", "name"},
        {"SELECT %s.enqueue_job('q', '7')", "a job must be a JSON object", "job"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PGresult *r = call(c, cases[i].call, NULL);
        cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR, "case %zu accepted", i);
        const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        cr_assert_not_null(strstr(msg, cases[i].want), "case %zu: %s", i, msg);
        /* the schema's own name, not "errand" */
        char prefix[80];
        snprintf(prefix, sizeof prefix, "%s.enqueue: ", g_schema);
        cr_assert_eq(strncmp(msg, prefix, strlen(prefix)), 0, "case %zu: %s", i, msg);
        cr_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "22023", "case %zu", i);
        const char *col = PQresultErrorField(r, PG_DIAG_COLUMN_NAME);
        cr_assert(col && strcmp(col, cases[i].column) == 0, "case %zu: column %s", i,
                  col ? col : "(none)");
        PQclear(r);
    }
    er_queue_info *qs;
    size_t n;
    er_error err = {0};
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(n, 0); /* nothing was enqueued */
    free(qs);
    PQfinish(c);
}

/* docs/postgres.md's GRANTs: an application role with exactly those can
 * enqueue; the functions are SECURITY DEFINER, so USAGE and EXECUTE alone
 * are enough too (they read the limits table the role cannot see); a role
 * without EXECUTE cannot. */
Test(postgres, the_documented_grants_let_an_application_enqueue)
{
    PGconn *c = raw();
    char role[64], other[64];
    snprintf(role, sizeof role, "app_%ld", (long)getpid());
    snprintf(other, sizeof other, "noexec_%ld", (long)getpid());
    char q[1024];
    snprintf(q, sizeof q, "DROP ROLE IF EXISTS %s; DROP ROLE IF EXISTS %s; CREATE ROLE %s;"
             " CREATE ROLE %s", role, other, role, other);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    const char *sc = g_schema;
    snprintf(q, sizeof q,
             "GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT, INSERT ON %s.jobs, %s.queues TO %s;"
             " GRANT EXECUTE ON FUNCTION %s.enqueue(text, text, jsonb, jsonb),"
             " %s.enqueue_bulk(text, jsonb) TO %s",
             sc, role, sc, sc, role, sc, sc, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    snprintf(q, sizeof q, "GRANT USAGE ON SCHEMA %s TO %s", g_schema, other);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));

    snprintf(q, sizeof q, "SET ROLE %s", role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK);
    PGresult *r = call(c, "SELECT %s.enqueue('g', 'n', '{}', '{\"id\":\"granted-1\"}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    r = call(c, "SELECT * FROM %s.enqueue_bulk('g', '[{\"name\":\"n\",\"id\":\"granted-2\"}]')",
             NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    /* no direct read of the limits row: only the functions use it */
    r = call(c, "SELECT * FROM %s.limits", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
    PQclear(r);
    cr_assert_eq(sql(c, "RESET ROLE", NULL), PGRES_COMMAND_OK);

    /* USAGE and EXECUTE on enqueue_job, no table privileges */
    snprintf(q, sizeof q, "SET ROLE %s", other);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK);
    r = call(c, "SELECT %s.enqueue_job('g', '{\"name\":\"n\",\"id\":\"granted-3\"}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR, "EXECUTE was not granted");
    cr_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "42501");
    PQclear(r);
    cr_assert_eq(sql(c, "RESET ROLE", NULL), PGRES_COMMAND_OK);
    snprintf(q, sizeof q, "GRANT EXECUTE ON FUNCTION %s.enqueue_job(text, jsonb) TO %s",
             g_schema, other);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    snprintf(q, sizeof q, "SET ROLE %s", other);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK);
    r = call(c, "SELECT %s.enqueue_job('g', '{\"name\":\"n\",\"id\":\"granted-3\"}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    cr_assert_eq(sql(c, "RESET ROLE", NULL), PGRES_COMMAND_OK);

    er_job g;
    er_error err = {0};
    for (int i = 1; i <= 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "granted-%d", i);
        cr_assert_eq(OPS->get_job(S, id, &g, &err), 0, "%s: %s", id, err.message);
        er_job_fini(&g);
    }
    snprintf(q, sizeof q, "DROP OWNED BY %s, %s; DROP ROLE %s; DROP ROLE %s", role, other, role,
             other);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQfinish(c);
}

/* Opens schema `name` with this version's store, which migrates it (checked). */
static er_store *open_migrated(PGconn *c, const char *name)
{
    char url[1024], q[256];
    const char *b = base_url();
    snprintf(url, sizeof url, "%s%cschema=%s", b, strchr(b, '?') ? '&' : '?', name);
    er_store *s = open_url(url);
    snprintf(q, sizeof q, "SELECT max(version) FROM %s.migrations", name);
    cr_assert_eq(one_int(c, q), er_pg_schema_version);
    return s;
}

/* Closes s, drops schema `name` and `role`, closes c. */
static void drop_old(PGconn *c, er_store *s, const char *name, const char *role)
{
    char q[256];
    OPS->close(s);
    er_postgres_pool_drain();
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    snprintf(q, sizeof q, "DROP SCHEMA %s CASCADE; DROP ROLE %s", name, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQfinish(c);
}

/* A schema as a server of `version` left it, its name in name[80] (and a
 * role name for the test's grants in role[64]): its migrations applied and
 * recorded, search_path set to it on c. */
static void old_schema(PGconn *c, int version, char *name, char *role)
{
    char q[512];
    snprintf(name, 80, "%s_v%d", g_schema, version);
    snprintf(role, 64, "v%dapp_%ld", version, (long)getpid());
    snprintf(q, sizeof q,
             "CREATE SCHEMA %s; SET search_path TO %s; CREATE TABLE migrations (version integer"
             " PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
             name, name);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    for (int v = 0; v < version; v++) {
        cr_assert_eq(sql(c, er_pg_migrations[v], NULL), PGRES_COMMAND_OK, "v%d: %s", v + 1,
                     PQerrorMessage(c));
        snprintf(q, sizeof q, "INSERT INTO migrations (version) VALUES (%d)", v + 1);
        cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK);
    }
}

/* A schema written by the previous release (migrations 1..3, its
 * errand.enqueue, a queue's stored settings, a grant) is migrated by the
 * next open and keeps working: the job is still there, the grant still
 * lets the role call errand.enqueue, and a job's partial backoff now merges
 * onto the queue's stored default. */
Test(postgres, a_schema_of_the_previous_release_is_migrated_and_keeps_working)
{
    PGconn *c = raw();
    char old[80], q[1024], role[64];
    old_schema(c, 3, old, role);
    /* what the previous release stored for a queue with a capped default */
    const char *settings =
        "{\"paused\":false,\"concurrency\":0,\"rate_limit\":null,\"lease_ms\":60000,"
        "\"max_stalled\":3,\"max_started\":100,\"defaults\":{\"max_attempts\":3,\"backoff\":"
        "{\"type\":\"capped\",\"delay_ms\":1000,\"max_delay_ms\":1000,\"jitter\":0.5}},"
        "\"retention\":{\"completed\":{\"age_s\":604800,\"count\":0},\"dead\":\"keep\"}}";
    snprintf(q, sizeof q, "INSERT INTO queues (name, settings) VALUES ('q', '%s')", settings);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    snprintf(q, sizeof q,
             "SELECT enqueue('q', 'n', '{}', '{\"id\":\"old-1\"}'); DROP ROLE IF EXISTS %s;"
             " CREATE ROLE %s; GRANT USAGE ON SCHEMA %s TO %s;"
             " GRANT SELECT, INSERT ON jobs, queues TO %s;"
             " GRANT EXECUTE ON FUNCTION enqueue(text, text, jsonb, jsonb) TO %s; RESET search_path",
             role, role, old, role, role, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));

    er_store *s = open_migrated(c, old);
    er_job j;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(s, "old-1", &j, &err), 0, "%s", err.message);
    cr_assert_eq(j.max_attempts, 3);
    er_job_fini(&j);

    snprintf(q, sizeof q,
             "SET ROLE %s; SELECT %s.enqueue('q', 'n', '{}', '{\"id\":\"new-1\",\"backoff\":"
             "{\"jitter\":0}}'); RESET ROLE",
             role, old);
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    cr_assert_eq(OPS->get_job(s, "new-1", &j, &err), 0, "%s", err.message);
    cr_assert_eq(j.backoff.type, ER_BACKOFF_CAPPED);
    cr_assert_eq(j.backoff.delay_ms, 1000);
    cr_assert_eq(j.backoff.max_delay_ms, 1000);
    cr_assert(j.backoff.jitter == 0.0);
    cr_assert_eq(j.max_attempts, 3);
    er_job_fini(&j);
    drop_old(c, s, old, role);
}

/* The explicit path (errand migrate, serve --no-auto-migrate) on a schema
 * of the previous release: reading its version changes nothing, an open
 * that may not migrate is refused and changes nothing, and ops->schema
 * applies the rest, reporting the version it found, without writing the
 * limits row (that stays the running servers'). */
Test(postgres, an_old_schema_is_reported_refused_then_migrated_explicitly)
{
    PGconn *c = raw();
    char old[80], role[64], url[1024], q[256];
    old_schema(c, 3, old, role);
    snprintf(q, sizeof q, "DROP ROLE IF EXISTS %s; CREATE ROLE %s", role, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    const char *b = base_url();
    snprintf(url, sizeof url, "%s%cschema=%s", b, strchr(b, '?') ? '&' : '?', old);
    er_schema_info info = {0};
    er_error err = {0};
    cr_assert_eq(OPS->schema(url, NULL, false, &info, &err), 0, "%s", err.message);
    cr_assert_eq(info.version, 3);
    cr_assert_eq(info.latest, er_pg_schema_version);
    cr_assert_str_eq(info.steps[4], "tombstones of deleted jobs' ids");
    er_store_options opt = {.busy_timeout_ms = 1000, .migrate = ER_MIGRATE_REFUSE};
    er_store *s = NULL;
    cr_assert_eq(OPS->open(url, &opt, &s, &err), ER_EUNAVAIL);
    cr_assert_null(s);
    cr_assert_str_eq(err.field, "schema_version");
    cr_assert(strstr(err.message, "version 3 is older"), "%s", err.message);
    snprintf(q, sizeof q, "SELECT max(version) FROM %s.migrations", old);
    cr_assert_eq(one_int(c, q), 3);
    info = (er_schema_info){0};
    cr_assert_eq(OPS->schema(url, NULL, true, &info, &err), 0, "%s", err.message);
    cr_assert_eq(info.version, 3);
    cr_assert_eq(one_int(c, q), er_pg_schema_version);
    snprintf(q, sizeof q, "SELECT count(*) FROM %s.limits", old);
    cr_assert_eq(one_int(c, q), 0, "errand migrate writes no server's limits");
    /* now current: a refusing open is a server's start, writing its limits */
    s = NULL;
    cr_assert_eq(OPS->open(url, &opt, &s, &err), 0, "%s", err.message);
    cr_assert_eq(one_int(c, q), 1);
    cr_assert_eq(OPS->schema(url, NULL, true, &info, &err), 0, "%s", err.message);
    cr_assert_eq(info.version, er_pg_schema_version, "nothing left to apply");
    drop_old(c, s, old, role);
}

/* The application's SQL functions honour tombstones as the server does:
 * a remembered id changes nothing and comes back; the window is the
 * servers' (the limits row); a generated id is flagged and not remembered. */
static void set_keep_60s(er_queue_settings *s)
{
    s->retention.completed_age_s = 60;
}

Test(postgres, sql_enqueue_honours_tombstones)
{
    settings_put("q", set_keep_60s);
    int64_t now = er_now_ms();
    complete_job("sql-t1", "q", now);
    cr_assert_eq(retention_at(now + 61000, 1000), 1);
    PGconn *c = raw();
    PGresult *r = call(c, "SELECT %s.enqueue('q', 'n', '{}', '{\"id\":\"sql-t1\"}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "sql-t1");
    PQclear(r);
    r = call(c, "SELECT %s.enqueue_job('q', '{\"name\":\"n\",\"id\":\"sql-t1\"}')", NULL);
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "sql-t1");
    PQclear(r);
    r = call(c, "SELECT * FROM %s.enqueue_bulk('q', '[{\"name\":\"n\",\"id\":\"sql-t1\"},"
                "{\"name\":\"n\",\"id\":\"sql-new\"}]')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_eq(PQntuples(r), 2);
    PQclear(r);
    er_job g;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, "sql-t1", &g, &err), ER_ENOTFOUND, "nothing stored");
    cr_assert_eq(OPS->get_job(S, "sql-new", &g, &err), 0);
    cr_assert(!g.id_generated);
    er_job_fini(&g);
    /* a generated id is flagged, as core flags it */
    r = call(c, "SELECT %s.enqueue('q', 'n', '{}')", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_eq(OPS->get_job(S, PQgetvalue(r, 0, 0), &g, &err), 0);
    cr_assert(g.id_generated);
    er_job_fini(&g);
    PQclear(r);
    /* the limits row's window decides: 0 remembers none */
    r = call(c, "UPDATE %s.limits SET dedup_window_ms = 0", NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    r = call(c, "SELECT %s.enqueue('q', 'n', '{}', '{\"id\":\"sql-t1\"}')", NULL);
    PQclear(r);
    cr_assert_eq(OPS->get_job(S, "sql-t1", &g, &err), 0, "stored now: %s", err.message);
    er_job_fini(&g);
    PQfinish(c);
}

/* Inserting jobs into an old schema: the columns every version has and
 * a job needs, then the caller's. */
#define OLD_JOB_INSERT                                                                     \
    " INSERT INTO jobs (id, queue, name, payload, state, priority, run_at, max_attempts,"   \
    " backoff_type, backoff_delay_ms, backoff_max_ms, backoff_jitter, timeout_ms,"          \
    " idempotency_key, created_at, updated_at"

/* A schema of the previous release (version 4) with a finished job a
 * client named: migrated by the next open, retention then keeps its
 * tombstone (a row without the generated-id flag counts as a client's),
 * and both the server's enqueue and the SQL functions see the duplicate;
 * the previous grants still reach the replaced function. */
Test(postgres, a_version_4_schema_gets_tombstones_after_migration)
{
    PGconn *c = raw();
    char old[80], q[2048], role[64];
    old_schema(c, 4, old, role);
    long long t = (long long)er_now_ms() - 120000;
    snprintf(q, sizeof q,
             "INSERT INTO queues (name, settings) VALUES ('q', '{\"retention\":{\"completed\":"
             "{\"age_s\":60,\"count\":0},\"dead\":\"keep\"}}');"
             OLD_JOB_INSERT ", finished_at, set_flags) VALUES"
             " ('old-done', 'q', 'n', '{}', 3, 0, %lld, 8, 0, 2000, 900000, 0.5, 30000,"
             " 'old-done', %lld, %lld, %lld, 0);"
             " DROP ROLE IF EXISTS %s; CREATE ROLE %s; GRANT USAGE ON SCHEMA %s TO %s;"
             " GRANT EXECUTE ON FUNCTION enqueue(text, text, jsonb, jsonb) TO %s; RESET search_path",
             t, t, t, t, role, role, old, role, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));

    er_store *s = open_migrated(c, old);
    int n = 0;
    er_error err = {0};
    cr_assert_eq(OPS->retention(s, 0, 1000, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    er_job j, existing;
    mkjob(&j, "old-done", "q", 0, er_now_ms(), er_now_ms());
    er_job_init(&existing);
    er_tombstone_list tl = {0};
    bool dup = false;
    cr_assert_eq(OPS->enqueue(s, &j, &dup, &existing, &tl, &err), 0, "%s", err.message);
    cr_assert(dup);
    cr_assert_eq(tl.len, 1);
    cr_assert_eq(tl.items[0].finished_at, t);
    cr_assert_eq(tl.items[0].state, ER_STATE_COMPLETED);
    er_tombstone_list_fini(&tl);
    er_job_fini(&j);
    snprintf(q, sizeof q,
             "SET ROLE %s; SELECT %s.enqueue('q', 'n', '{}', '{\"id\":\"old-done\"}'); RESET ROLE",
             role, old);
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    cr_assert_eq(OPS->get_job(s, "old-done", &j, &err), ER_ENOTFOUND, "still remembered");
    drop_old(c, s, old, role);
}

/* The job row (store/job_row.h) is the jobs table: every column it lists,
 * with its type, and nothing else but seq. */
Test(postgres, the_job_row_list_matches_the_jobs_table)
{
    PGconn *c = raw();
    char q[512];
    snprintf(q, sizeof q,
             "SELECT column_name, data_type FROM information_schema.columns"
             " WHERE table_schema = '%s' AND table_name = 'jobs' ORDER BY ordinal_position",
             g_schema);
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    bool in_table[ER_JOB_NCOLS] = {false};
    cr_assert_eq(PQntuples(r), ER_JOB_NCOLS + 1);
    for (int row = 0; row < PQntuples(r); row++) {
        const char *name = PQgetvalue(r, row, 0), *type = PQgetvalue(r, row, 1);
        if (strcmp(name, "seq") == 0)
            continue;
        int k = -1;
        for (int i = 0; i < ER_JOB_NCOLS; i++)
            if (strcmp(er_job_cols[i].name, name) == 0)
                k = i;
        cr_assert_geq(k, 0, "column %s is not in the job row list", name);
        cr_assert_str_eq(type, er_job_cols[k].pg_type, "type of %s", name);
        in_table[k] = true;
    }
    PQclear(r);
    for (int i = 0; i < ER_JOB_NCOLS; i++)
        cr_assert(in_table[i], "%s is not a column of jobs", er_job_cols[i].name);
    PQfinish(c);
}

/* ---- groups and rate limits (migration 6) ---- */

static void put_group(const char *id, const char *queue, const char *group)
{
    er_job j;
    mkjob(&j, id, queue, 0, T0 - 1000, T0);
    j.group = sdup(group);
    bool dupl = true;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0, "%s", err.message);
    er_job_fini(&j);
}

/* One fetch of up to max from queue on store st at now: the ids leased,
 * space-separated, into out; *ready_at as the fetch says. */
static void fetch_ids(er_store *st, const char *queue, int max, int64_t now, char *out,
                      size_t n, int64_t *ready_at)
{
    const char *qs[] = {queue};
    er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w", .max = max,
                         .now = now, .ready_at = ready_at};
    er_job_list l = {0};
    er_error err = {0};
    cr_assert_eq(OPS->fetch(st, &p, &l, &err), 0, "fetch: %s", err.message);
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < l.len; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%s", i ? " " : "", l.items[i].id);
    er_job_list_fini(&l);
}

Test(postgres, groups_take_turns_in_byte_order_after_the_jobs_without_one)
{
    put_group("u1", "g", NULL);
    put_group("u2", "g", NULL);
    put_group("b1", "g", "b");
    put_group("b2", "g", "b");
    put_group("B1", "g", "B");
    put_group("a1", "g", "a");
    const char *want[] = {"u1", "B1", "a1", "b1", "u2", "b2", ""};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char got[256];
        fetch_ids(S, "g", 1, T0, got, sizeof got, NULL);
        cr_assert_str_eq(got, want[i], "fetch %zu", i);
    }
}

/* The planner's lookups use jobs_grouped (whose grp column is COLLATE
 * "C") or jobs_ungrouped, also with generic plans. */
Test(postgres, group_lookups_use_the_grouped_index)
{
    PGconn *c = raw();
    char q[4096];
    const int ids[] = {ER_PG_NEXT_GROUP, ER_PG_LEVEL_GROUPED, ER_PG_FIRST_GROUP,
                       ER_PG_LEVEL_UNGROUPED, ER_PG_NEXT_GROUPS, ER_PG_NEXT_GROUPS};
    const char *args[] = {"('g', 'a')", "('g', 'a', 5)", "('g')", "('g', 5)", "('g', 'a', 10)",
                          "('g', NULL, 10)"};
    const char *types[] = {"(text, text)", "(text, text, integer)", "(text)", "(text, integer)",
                           "(text, text, bigint)", "(text, text, bigint)"};
    const char *index[] = {"jobs_grouped", "jobs_grouped", "jobs_ungrouped", "jobs_ungrouped",
                           "jobs_grouped", "jobs_ungrouped"};
    for (int i = 0; i < 6; i++) {
        snprintf(q, sizeof q,
                 "SET search_path TO %s; SET plan_cache_mode = force_generic_plan;"
                 " SET enable_seqscan = off; PREPARE x%d%s AS %s",
                 g_schema, i, types[i], er_pg_sql[ids[i]]);
        cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
        snprintf(q, sizeof q, "EXPLAIN EXECUTE x%d%s", i, args[i]);
        PGresult *r;
        cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
        bool used = false;
        for (int row = 0; row < PQntuples(r); row++)
            used |= strstr(PQgetvalue(r, row, 0), index[i]) != NULL;
        cr_assert(used, "statement %d does not use %s", ids[i], index[i]);
        PQclear(r);
    }
    PQfinish(c);
}

static void set_rate_2_per_s(er_queue_settings *s)
{
    s->rate_max = 2;
    s->rate_per_ms = 1000;
    s->rate_burst = 1;
}

/* Two stores are two nodes: the budget is the queue row's, spent under
 * its lock, so the second sees what the first took. */
Test(postgres, a_rate_limit_holds_across_stores)
{
    settings_put("r", set_rate_2_per_s);
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        put(id, "r", 0, T0 - 1000 + i, T0);
    }
    er_store *other = open_url(g_url);
    char got[256];
    int64_t at = 0;
    fetch_ids(S, "r", 4, T0, got, sizeof got, &at);
    cr_assert_str_eq(got, "r0");
    fetch_ids(other, "r", 4, T0 + 100, got, sizeof got, &at);
    cr_assert_str_eq(got, "");
    cr_assert_eq(at, T0 + 500);
    fetch_ids(other, "r", 4, T0 + 500, got, sizeof got, &at);
    cr_assert_str_eq(got, "r1");
    cr_assert_eq(at, INT64_MAX);
    OPS->close(other);
    PGconn *c = raw();
    char q[256];
    snprintf(q, sizeof q, "SELECT rate_tat FROM %s.queues WHERE name = 'r'", g_schema);
    cr_assert_eq(one_int(c, q), (T0 + 1000) * ER_NS_PER_MS);
    PQfinish(c);
}

static void set_group_rate(er_queue_settings *s)
{
    s->group_limits.rate = (er_rate){.max = 1, .per_ms = 1000, .burst = 1};
}

Test(postgres, a_group_rate_limit_passes_the_group_over_and_is_cleaned_when_past)
{
    settings_put("gr", set_group_rate);
    put_group("x1", "gr", "x");
    put_group("x2", "gr", "x");
    put_group("y1", "gr", "y");
    char got[256];
    int64_t at = 0;
    fetch_ids(S, "gr", 3, T0, got, sizeof got, &at);
    cr_assert_str_eq(got, "x1 y1");
    fetch_ids(S, "gr", 3, T0 + 10, got, sizeof got, &at);
    cr_assert_str_eq(got, "");
    cr_assert_eq(at, T0 + 1000);
    PGconn *c = raw();
    char q[256];
    snprintf(q, sizeof q, "SELECT count(*) FROM %s.group_rates", g_schema);
    cr_assert_eq(one_int(c, q), 2);
    int n = 0;
    er_error err = {0};
    cr_assert_eq(OPS->retention(S, T0 + 999, 100, &n, &err), 0, "%s", err.message);
    cr_assert_eq(one_int(c, q), 2, "not past yet");
    cr_assert_eq(OPS->retention(S, T0 + 1001, 100, &n, &err), 0, "%s", err.message);
    cr_assert_eq(one_int(c, q), 0);
    PQfinish(c);
    fetch_ids(S, "gr", 3, T0 + 1001, got, sizeof got, &at);
    cr_assert_str_eq(got, "x2");
}

static void set_conc1(er_queue_settings *s)
{
    s->concurrency = 1;
}

static void set_group_conc1(er_queue_settings *s)
{
    s->group_limits.concurrency = 1;
}

static void set_aging(er_queue_settings *s)
{
    s->aging = (er_aging){.per_s = 1, .max_boost = 10};
}

static void set_nothing(er_queue_settings *s)
{
    (void)s;
}

/* Docs: queues with a limit (concurrency, rate, group limits) take the
 * queue row's lock to fetch; others, aging ones too, do not. */
Test(postgres, only_queues_with_limits_take_the_queue_row_lock)
{
    struct {
        const char *name;
        void (*edit)(er_queue_settings *);
        bool locks;
    } qs[] = {{"plain", set_nothing, false},   {"aged", set_aging, false},
              {"conc", set_conc1, true},       {"rate", set_rate_2_per_s, true},
              {"gconc", set_group_conc1, true}};
    PGconn *c = raw();
    char q[256];
    for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
        settings_put(qs[i].name, qs[i].edit);
        char id[32];
        snprintf(id, sizeof id, "%s-1", qs[i].name);
        put(id, qs[i].name, 0, T0 - 1000, T0);
        snprintf(q, sizeof q, "BEGIN; SELECT 1 FROM %s.queues WHERE name = '%s' FOR UPDATE",
                 g_schema, qs[i].name);
        cr_assert_eq(sql(c, q, NULL), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
        const char *one[] = {qs[i].name};
        er_fetch_params p = {.queues = one, .nqueues = 1, .worker_id = "w", .max = 1,
                             .now = T0};
        er_job_list l = {0};
        er_error err = {0};
        int rc = OPS->fetch(S, &p, &l, &err);
        if (qs[i].locks)
            cr_assert_lt(rc, 0, "%s: the fetch should wait for the lock", qs[i].name);
        else
            cr_assert_eq(rc, 0, "%s: %s", qs[i].name, err.message);
        cr_assert_eq(l.len, qs[i].locks ? 0 : 1, "%s", qs[i].name);
        er_job_list_fini(&l);
        cr_assert_eq(sql(c, "ROLLBACK", NULL), PGRES_COMMAND_OK);
    }
    PQfinish(c);
}

/* A schema of the previous release (version 5) with waiting jobs, some in
 * groups, a queue whose stored text has a rate limit and one with aging:
 * migrated by the next open, the new columns hold their defaults (the
 * settings copied from the texts), fetch leases through the planner and
 * the limit, and the previous version's functions still answer. */
Test(postgres, a_version_5_schema_gets_groups_and_rate_limits_after_migration)
{
    PGconn *c = raw();
    char old[80], q[2048], role[64];
    old_schema(c, 5, old, role);
    long long t = (long long)er_now_ms() - 1000;
    snprintf(q, sizeof q,
             "INSERT INTO queues (name, settings) VALUES ('r', '{\"rate_limit\":{\"max\":2,"
             "\"per_ms\":1000}}'), ('g', '{\"aging\":{\"per_s\":1,\"max_boost\":10}}');"
             OLD_JOB_INSERT ", grp) SELECT id, queue, 'n', '{}', 1, 0, %lld + ord, 8, 0, 2000,"
             " 900000, 0.5, 30000, id, %lld, %lld, grp FROM (VALUES ('r-1', 'r', NULL, 1),"
             " ('r-2', 'r', NULL, 2), ('g-b', 'g', 'b', 3), ('g-a', 'g', 'a', 4), ('g-none', 'g', NULL, 5))"
             " AS v(id, queue, grp, ord); DROP ROLE IF EXISTS %s; CREATE ROLE %s;"
             " RESET search_path",
             t, t, t, role, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));

    er_store *s = open_migrated(c, old);
    snprintf(q, sizeof q,
             "SELECT rate_tat = 0 AND rate_max = 2 AND rate_per_ms = 1000 AND rate_burst = 1"
             " AND NOT group_limited AND NOT aged FROM %s.queues WHERE name = 'r'",
             old);
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    snprintf(q, sizeof q,
             "SELECT rate_max = 0 AND rate_burst = 1 AND NOT group_limited AND aged"
             " FROM %s.queues WHERE name = 'g'",
             old);
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    char got[256];
    int64_t now = er_now_ms();
    fetch_ids(s, "r", 5, now, got, sizeof got, NULL);
    cr_assert_str_eq(got, "r-1", "the stored rate limit holds");
    fetch_ids(s, "g", 1, now, got, sizeof got, NULL);
    cr_assert_str_eq(got, "g-none");
    fetch_ids(s, "g", 5, now, got, sizeof got, NULL);
    cr_assert_str_eq(got, "g-a g-b");
    snprintf(q, sizeof q, "SELECT count(*) FROM %s.queue_states(ARRAY['r', 'g'])", old);
    cr_assert_eq(one_int(c, q), 2, "the previous version's queue_states stays");
    drop_old(c, s, old, role);
}

/* The ids each fetch function of a version 12 schema (c's search_path)
 * leases from queue 'm' in a transaction it rolls back, in order: for
 * comparing the functions before and after migration 13. */
static void old_fetches(PGconn *c, const char *schema, char out[3][128])
{
    const char *calls[3] = {
        ("lease_jobs2(ARRAY['m'], ARRAY[3::bigint], ARRAY[30000::bigint], 'w', 3, 5, t, 100, 0,"
         " 1000000)"),
        "lease_jobs(ARRAY['m'], ARRAY[3::bigint], ARRAY[30000::bigint], 'w', 3, 5, t)",
        "fetch_jobs(ARRAY['m'], 'w', 3, 30000, 5, t, 30000)"};
    for (int k = 0; k < 3; k++) {
        char q[512];
        PQclear(PQexec(c, "BEGIN"));
        PGresult *r;
        snprintf(q, sizeof q,
                 "SELECT string_agg(id, ' ') FROM (SELECT ARRAY['t1','t2','t3'] AS t) a, %s.%s",
                 schema, calls[k]);
        r = PQexec(c, q);
        cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", q, PQresultErrorMessage(r));
        snprintf(out[k], 128, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        PQclear(PQexec(c, "ROLLBACK"));
    }
}

/* Migration 13 drops jobs_waiting and replaces the fetch functions that
 * read it in place: on a version 12 schema with grouped and ungrouped
 * waiting jobs each function (lease_jobs2 of version 12 servers,
 * lease_jobs and fetch_jobs of older ones) leases the same jobs in the
 * same order after the migration as before it, and this version's fetch
 * works. */
Test(postgres, a_version_12_schema_loses_jobs_waiting_and_its_fetches_lease_the_same_jobs)
{
    PGconn *c = raw();
    char old[80], q[2048], role[64];
    old_schema(c, 12, old, role);
    long long t = (long long)er_now_ms() - 100000;
    /* fetch order: g1 (5, t+2), u2 (5, t+3), g2 (0, t), u1 (0, t+1) */
    snprintf(q, sizeof q,
             OLD_JOB_INSERT ", grp) SELECT id, 'm', 'n', '{}', 1, prio, %lld + ord, 8, 0, 2000,"
             " 900000, 0.5, 30000, id, %lld, %lld, grp FROM (VALUES ('u1', NULL, 0, 1),"
             " ('g1', 'a', 5, 2), ('u2', NULL, 5, 3), ('g2', 'b', 0, 0)) AS v(id, grp, prio, ord);"
             " DROP ROLE IF EXISTS %s; CREATE ROLE %s; RESET search_path",
             t, t, t, role, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    char before[3][128], after[3][128];
    old_fetches(c, old, before);
    for (int k = 0; k < 3; k++)
        cr_assert_str_eq(before[k], "g1 u2 g2", "function %d before", k);

    er_store *s = open_migrated(c, old);
    snprintf(q, sizeof q,
             "SELECT count(*) FROM pg_indexes WHERE schemaname = '%s'"
             " AND indexname = 'jobs_waiting'",
             old);
    cr_assert_eq(one_int(c, q), 0, "jobs_waiting is dropped");
    old_fetches(c, old, after);
    for (int k = 0; k < 3; k++)
        cr_assert_str_eq(after[k], before[k], "function %d after", k);
    /* this version's fetch (the group planner: grouped jobs wait) */
    const char *qs[] = {"m"};
    er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w", .max = 10,
                         .now = er_now_ms()};
    er_job_list l = {0};
    er_error err = {0};
    cr_assert_eq(OPS->fetch(s, &p, &l, &err), 0, "fetch: %s", err.message);
    cr_assert_eq(l.len, 4);
    er_job_list_fini(&l);
    drop_old(c, s, old, role);
}

/* The indexes of schema `name`'s jobs table keyed first by the queue in
 * the default collation, the way a fetch names it, by name. */
static void plain_queue_indexes(PGconn *c, const char *name, char *out, size_t n)
{
    char q[1024];
    snprintf(q, sizeof q,
             "SELECT string_agg(x.relname, ' ' ORDER BY x.relname) FROM pg_index i"
             " JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_attribute a"
             " ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
             " WHERE i.indrelid = '%s.jobs'::regclass AND a.attname = 'queue'"
             " AND i.indcollation[0] <> (SELECT oid FROM pg_collation WHERE collname = 'C')",
             name);
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

/* Migration 14 keys jobs_queue_state by the queue in byte order: a fetch
 * (queue = ..., default collation) can then seek a queue's waiting jobs
 * only through jobs_ungrouped and jobs_grouped, already in fetch order,
 * never through jobs_queue_state and a sort of them all, whatever the
 * statistics say. The statements that count and list by state still
 * take it, and queue_states2 (replaced in place) counts a limited
 * queue's active jobs. */
Test(postgres, a_version_13_schema_keeps_jobs_queue_state_out_of_the_fetchs_reach)
{
    PGconn *c = raw();
    char old[80], q[2048], role[64], names[512];
    old_schema(c, 13, old, role);
    plain_queue_indexes(c, old, names, sizeof names);
    cr_assert_str_eq(names,
                     "jobs_completed jobs_dead_queue jobs_group_active jobs_grouped"
                     " jobs_queue_state jobs_ungrouped",
                     "version 13");
    long long t = (long long)er_now_ms() - 100000;
    snprintf(q, sizeof q,
             OLD_JOB_INSERT ") SELECT id, 'm', 'n', '{}', st, 0, %lld, 8, 0, 2000, 900000, 0.5,"
             " 30000, id, %lld, %lld FROM (VALUES ('w1', 1), ('w2', 1), ('a1', 2), ('d1', 3))"
             " AS v(id, st); INSERT INTO queues (name, concurrency) VALUES ('m', 5);"
             " DROP ROLE IF EXISTS %s; CREATE ROLE %s; RESET search_path",
             t, t, t, role, role);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));

    er_store *s = open_migrated(c, old);
    plain_queue_indexes(c, old, names, sizeof names);
    cr_assert_str_eq(names,
                     "jobs_completed jobs_dead_queue jobs_group_active jobs_grouped"
                     " jobs_ungrouped",
                     "version 14: a fetch's queue = takes only the state indexes");
    snprintf(q, sizeof q, "SELECT active FROM %s.queue_states2(ARRAY['m'])", old);
    cr_assert_eq(one_int(c, q), 1, "queue_states2 counts the active job");
    /* a listing by state in seq order takes the index (no table scan
     * allowed, so the choice is among indexes) */
    PGresult *r;
    snprintf(q, sizeof q,
             "SET enable_seqscan = off; EXPLAIN SELECT seq FROM %s.jobs j WHERE j.queue"
             " COLLATE \"C\" = 'm' AND j.state = 1 AND j.seq > 0 ORDER BY j.seq LIMIT 10",
             old);
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    char plan[2048] = "";
    for (int i = 0; i < PQntuples(r); i++)
        snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "%s\n", PQgetvalue(r, i, 0));
    PQclear(r);
    cr_assert(strstr(plan, "jobs_queue_state"), "%s", plan);
    PQclear(PQexec(c, "RESET enable_seqscan"));
    snprintf(q, sizeof q,
             "SELECT count(*) FROM %s.jobs j WHERE j.queue COLLATE \"C\" = 'm' AND j.state = 1",
             old);
    cr_assert_eq(one_int(c, q), 2);
    drop_old(c, s, old, role);
}

/* The plan of batch ack `stmt` (params: text arrays, then a bigint) for 500
 * ids of the 20,000 jobs batch_ack_table left, with nested loops priced
 * out: what a hash join over the whole table would cost the least. */
static void batch_ack_plan(int stmt, int arrays, char *plan, size_t n)
{
    PGconn *c = raw();
    char q[16640], types[64] = "", args[16384] = "", ids[4096] = "{";
    snprintf(q, sizeof q, "SET search_path = %s; SET enable_nestloop = off", g_schema);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    for (int i = 1; i <= 500; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%sj%d", i > 1 ? "," : "", i * 40);
    strcat(ids, "}");
    for (int i = 0; i < arrays; i++) {
        strcat(types, "text[],");
        snprintf(args + strlen(args), sizeof args - strlen(args), "'%s',", ids);
    }
    char *prep = malloc(strlen(er_pg_sql[stmt]) + 128);
    cr_assert_not_null(prep);
    sprintf(prep, "PREPARE p(%sbigint) AS %s", types, er_pg_sql[stmt]);
    cr_assert_eq(sql(c, prep, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    free(prep);
    snprintf(q, sizeof q, "EXPLAIN EXECUTE p(%s%lld)", args, (long long)er_now_ms());
    PGresult *r;
    cr_assert_eq(sql(c, q, &r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    plan[0] = '\0';
    for (int i = 0; i < PQntuples(r); i++)
        snprintf(plan + strlen(plan), n - strlen(plan), "%s\n", PQgetvalue(r, i, 0));
    PQclear(r);
    PQfinish(c);
}

/* A batch ack reads the state of its refused items by id, item by item,
 * whatever the statistics say: on a table never analysed the planner
 * hashed the whole of it (30 ms at 25,000 jobs for one batch). */
Test(postgres, a_batch_ack_probes_its_refused_items_by_id_not_the_whole_table)
{
    PGconn *c = raw();
    char q[2048];
    long long t = (long long)er_now_ms();
    snprintf(q, sizeof q,
             "SET search_path = %s;" OLD_JOB_INSERT ", lease_token)"
             " SELECT 'j' || g, 'm', 'n', '{}', CASE WHEN g %% 2 = 0 THEN 2 ELSE 3 END, 0,"
             " %lld, 8, 0, 2000, 900000, 0.5, 30000, 'j' || g, %lld, %lld, 'k' || g"
             " FROM generate_series(1, 20000) g",
             g_schema, t, t, t);
    cr_assert_eq(sql(c, q, NULL), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQfinish(c);
    const int stmts[] = {ER_PG_COMPLETE_MANY, ER_PG_RELEASE_MANY}, arrays[] = {3, 2};
    char plan[16384];
    for (int i = 0; i < 2; i++) {
        batch_ack_plan(stmts[i], arrays[i], plan, sizeof plan);
        cr_assert_null(strstr(plan, "Seq Scan on jobs c"), "%s", plan);
        const char *scan = strstr(plan, "Index Scan using jobs_id_key on jobs c");
        cr_assert_not_null(scan, "%s", plan);
        cr_assert_not_null(strstr(scan, "Index Cond: (id = x.id)"), "%s", plan);
    }
}
