/* SPDX-License-Identifier: MIT
 *
 * The scheduler, lease and cursor cases (sched_cases.h) run against the
 * PostgreSQL store, each test in a fresh schema of the server at
 * $ERRAND_TEST_PG_URL (scripts/pg start makes one), then PostgreSQL-only
 * facts: the store clock judges leases, connections racing for one lease
 * or cursor never both win, and an older schema migrates. Without
 * ERRAND_TEST_PG_URL every test fails, unless ERRAND_TEST_PG_SKIP=1.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <unistd.h>

#include "store/postgres/pg_int.h"
#include "store/postgres/postgres.h"
#include "store/store.h"

#include "pg_test_url.h"

/* ---- the store under test (as test_conformance_postgres.c) ---- */

static const er_store_ops *OPS = &er_postgres_ops;
static char g_schema[64];
static char g_url[1024];
static er_store *S;
static er_rand R;

/* base URL + schema (+ extra options) */
static void url_for(char *out, size_t n, const char *schema, const char *extra)
{
    const char *b = base_url();
    snprintf(out, n, "%s%cschema=%s%s%s", b, strchr(b, '?') ? '&' : '?', schema,
             extra ? "&" : "", extra ? extra : "");
}

static void store_fresh(void)
{
    static unsigned n;
    snprintf(g_schema, sizeof g_schema, "s_%ld_%u_%u", (long)getpid(), n++,
             (unsigned)(er_now_ms() % 100000));
    url_for(g_url, sizeof g_url, g_schema, "clock=caller");
}

static void drop_schema(const char *schema)
{
    pg_test_drop_schema(schema);
}

static void store_drop(void)
{
    er_postgres_pool_drain();
    drop_schema(g_schema);
}

#include "sched_cases.h"

/* ---- PostgreSQL-only facts ---- */

TestSuite(pg_sched, .init = setup, .fini = teardown, .timeout = 60);

static er_store *open_url(const char *url)
{
    er_store *s = NULL;
    er_error err = {0};
    er_store_options opt = {.busy_timeout_ms = 2000};
    cr_assert_eq(OPS->open(url, &opt, &s, &err), 0, "open %s: %s", url, err.message);
    return s;
}

#define NEAR(v, want) ((v) >= (want) - 5000 && (v) <= (want) + 5000)

Test(pg_sched, the_store_clock_judges_leases_schedules_and_cursor_times)
{
    char url[1100];
    url_for(url, sizeof url, g_schema, NULL); /* clock=store, the default */
    er_store *st = open_url(url);
    er_error err = {0};
    char key[ER_LEASE_KEY_SIZE];
    cr_assert_eq(er_lease_key("job", "clock", "r1", key, &err), 0);
    const int64_t past = 1, future = INT64_MAX / 2; /* what a skewed caller might pass */
    int64_t real = er_now_ms();

    er_lease a, b, out;
    cr_assert_eq(OPS->lease_acquire(st, "job", "clock", "r1", key, 1000, past, &a, &err), 0,
                 "%s", err.message);
    cr_assert(NEAR(a.expires_at, real + 1000), "expiry %lld should follow the server clock",
              (long long)a.expires_at);
    cr_assert_eq(OPS->lease_acquire(st, "job", "clock", "r1", key, 1000, future, &b, &err),
                 ER_ECONFLICT, "a far-future caller clock must not reclaim a live lease");
    cr_assert_eq(b.state, ER_LEASE_HELD);
    cr_assert_eq(OPS->lease_renew(st, a.owner_token, 1000, future, &out, &err), 0, "%s",
                 err.message);
    cr_assert(NEAR(out.expires_at, er_now_ms() + 1000));
    usleep(1300 * 1000);
    cr_assert_eq(OPS->lease_renew(st, a.owner_token, 1000, past, &out, &err), ER_ESTALE,
                 "expired by the store clock whatever the caller says");
    cr_assert_eq(OPS->lease_acquire(st, "job", "clock", "r1", key, 1000, past, &b, &err), 0,
                 "%s", err.message);
    cr_assert_eq(b.fence, 2);

    real = er_now_ms();
    er_sched_row due = {.key = "due", .spec = "{}", .next_run_at = real - 1000};
    er_sched_row later = {.key = "later", .spec = "{}", .next_run_at = real + HOUR};
    er_sched_row row;
    bool created;
    cr_assert_eq(OPS->scheduler_put(st, &due, past, &created, &row, &err), 0, "%s", err.message);
    cr_assert(NEAR(row.created_at, real), "created_at %lld", (long long)row.created_at);
    er_sched_row_fini(&row);
    cr_assert_eq(OPS->scheduler_put(st, &later, past, &created, NULL, &err), 0);
    er_sched_list l = {0};
    cr_assert_eq(OPS->scheduler_due(st, 0, 10, &l, &err), 0, "%s", err.message);
    cr_assert_eq(l.len, 1);
    cr_assert_str_eq(l.items[0].key, "due");
    er_sched_list_fini(&l);
    cr_assert_eq(OPS->scheduler_due(st, future, 10, &l, &err), 0);
    cr_assert_eq(l.len, 1, "'later' is not due by the store clock");
    er_sched_list_fini(&l);

    cr_assert_eq(OPS->cursor_cas(st, "c", false, NULL, "1", past, NULL, &err), 0);
    char *v = NULL;
    int64_t at = 0;
    cr_assert_eq(OPS->cursor_get(st, "c", &v, &at, &err), 0);
    cr_assert(NEAR(at, real), "updated_at %lld", (long long)at);
    free(v);
    OPS->close(st);
}

/* ---- two connections at once ---- */

typedef struct racer {
    er_store *s;
    er_rand r;
    const char *run_key;
    int64_t now;
    const char *expected; /* cursor racers */
    const char *value;
    int rc;
    er_lease lease;
    char *current;
    volatile bool done;
    pthread_barrier_t *start;
} racer;

static void *acquire_thread(void *arg)
{
    racer *x = arg;
    char key[ER_LEASE_KEY_SIZE];
    er_error err = {0};
    if (x->start)
        pthread_barrier_wait(x->start);
    x->rc = er_lease_key("job", "race", x->run_key, key, &err);
    if (x->rc == 0)
        x->rc = OPS->lease_acquire(x->s, "job", "race", x->run_key, key, 1000, x->now,
                                   &x->lease, &err);
    x->done = true;
    return NULL;
}

static void *cas_thread(void *arg)
{
    racer *x = arg;
    er_error err = {0};
    x->rc = OPS->cursor_cas(x->s, "cur", true, x->expected, x->value, x->now, &x->current, &err);
    x->done = true;
    return NULL;
}

static int acquire_on(er_store *s, const char *run_key, int64_t ttl, int64_t now, er_lease *l)
{
    char key[ER_LEASE_KEY_SIZE];
    er_error err = {0};
    cr_assert_eq(er_lease_key("job", "race", run_key, key, &err), 0);
    return OPS->lease_acquire(s, "job", "race", run_key, key, ttl, now, l, &err);
}

/* Starts fn on a second connection while S holds an open transaction,
 * checks that it waits for S, then ends S's transaction (commit or not). */
static void second_waits_for_first(racer *x, void *(*fn)(void *), bool commit)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fn, x), 0);
    usleep(300 * 1000);
    bool waited = !x->done;
    er_error err = {0};
    if (commit)
        cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
    else
        OPS->rollback(S);
    pthread_join(t, NULL);
    cr_assert(waited, "the second connection should wait for the first one's row");
}

Test(pg_sched, two_connections_acquiring_one_new_key_exactly_one_wins)
{
    er_store *other = open_url(g_url);
    er_error err = {0};
    er_lease a;
    racer x = {.s = other, .run_key = "new", .now = T0 + 1};
    er_rand_init_seeded(&x.r, 7);

    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(acquire_on(S, "new", 60000, T0, &a), 0);
    second_waits_for_first(&x, acquire_thread, true);
    cr_assert_eq(x.rc, ER_ECONFLICT, "rc %d", x.rc);
    cr_assert_eq(x.lease.state, ER_LEASE_HELD);
    cr_assert_eq(x.lease.fence, 1);
    cr_assert_eq(x.lease.expires_at, a.expires_at);

    /* when the first one's transaction rolls back, the second one wins */
    racer y = {.s = other, .run_key = "undone", .now = T0 + 1};
    er_rand_init_seeded(&y.r, 8);
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(acquire_on(S, "undone", 60000, T0, &a), 0);
    second_waits_for_first(&y, acquire_thread, false);
    cr_assert_eq(y.rc, 0, "rc %d", y.rc);
    cr_assert_eq(y.lease.fence, 1);
    er_lease out;
    cr_assert_eq(OPS->lease_renew(S, a.owner_token, 1000, T0 + 2, &out, &err), ER_ESTALE);
    cr_assert_eq(OPS->lease_renew(S, y.lease.owner_token, 1000, T0 + 2, &out, &err), 0);
    OPS->close(other);
}

Test(pg_sched, two_connections_reclaiming_one_expired_lease_exactly_one_wins)
{
    er_store *other = open_url(g_url);
    er_error err = {0};
    er_lease old, a;
    cr_assert_eq(acquire_on(S, "exp", 1000, T0, &old), 0);
    racer x = {.s = other, .run_key = "exp", .now = T0 + 5000};
    er_rand_init_seeded(&x.r, 9);
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(acquire_on(S, "exp", 60000, T0 + 5000, &a), 0);
    cr_assert_eq(a.fence, 2);
    second_waits_for_first(&x, acquire_thread, true);
    cr_assert_eq(x.rc, ER_ECONFLICT, "rc %d", x.rc);
    cr_assert_eq(x.lease.fence, 2, "the loser sees the winner's fence");
    er_lease out;
    cr_assert_eq(OPS->lease_renew(other, old.owner_token, 1000, T0 + 5001, &out, &err),
                 ER_ESTALE);
    cr_assert_eq(OPS->lease_complete(other, a.owner_token, T0 + 5001, &out, &err), 0, "%s",
                 err.message);
    cr_assert_eq(out.state, ER_LEASE_DONE);
    OPS->close(other);
}

#define RACERS 4
#define ROUNDS 25

Test(pg_sched, racing_connections_get_one_winner_per_key)
{
    racer xs[RACERS];
    pthread_barrier_t start;
    pthread_t ts[RACERS];
    er_store *stores[RACERS] = {S};
    for (int i = 1; i < RACERS; i++)
        stores[i] = open_url(g_url);
    for (int round = 0; round < ROUNDS; round++) {
        char run_key[16];
        snprintf(run_key, sizeof run_key, "k%d", round);
        pthread_barrier_init(&start, NULL, RACERS);
        for (int i = 0; i < RACERS; i++) {
            memset(&xs[i], 0, sizeof xs[i]);
            xs[i].s = stores[i];
            xs[i].run_key = run_key;
            xs[i].now = T0;
            xs[i].start = &start;
            er_rand_init_seeded(&xs[i].r, (uint64_t)(round * RACERS + i + 1));
            cr_assert_eq(pthread_create(&ts[i], NULL, acquire_thread, &xs[i]), 0);
        }
        int won = 0, lost = 0;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(ts[i], NULL);
            won += xs[i].rc == 0;
            lost += xs[i].rc == ER_ECONFLICT;
        }
        pthread_barrier_destroy(&start);
        cr_assert_eq(won, 1, "round %d: %d winners", round, won);
        cr_assert_eq(lost, RACERS - 1, "round %d: %d refused", round, lost);
    }
    for (int i = 1; i < RACERS; i++)
        OPS->close(stores[i]);
}

Test(pg_sched, a_cursor_raced_by_two_connections_shows_the_loser_the_winners_value)
{
    er_store *other = open_url(g_url);
    er_error err = {0};
    /* first writes: both expect no cursor */
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->cursor_cas(S, "cur", true, NULL, "\"a\"", T0, NULL, &err), 0);
    racer x = {.s = other, .expected = NULL, .value = "\"b\"", .now = T0};
    second_waits_for_first(&x, cas_thread, true);
    cr_assert_eq(x.rc, ER_ECONFLICT, "rc %d", x.rc);
    cr_assert_str_eq(x.current, "\"a\"");
    free(x.current);
    /* both expect "a" */
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->cursor_cas(S, "cur", true, "\"a\"", "\"c\"", T0 + 1, NULL, &err), 0);
    racer y = {.s = other, .expected = "\"a\"", .value = "\"d\"", .now = T0 + 1};
    second_waits_for_first(&y, cas_thread, true);
    cr_assert_eq(y.rc, ER_ECONFLICT, "rc %d", y.rc);
    cr_assert_str_eq(y.current, "\"c\"");
    free(y.current);
    char *v = NULL;
    cr_assert_eq(OPS->cursor_get(other, "cur", &v, NULL, &err), 0);
    cr_assert_str_eq(v, "\"c\"");
    free(v);
    OPS->close(other);
}

Test(pg_sched, scheduler_keys_list_in_byte_order)
{
    const char *keys[] = {"b", "B", "_x", "a.1", "a-1", "Z"};
    for (size_t i = 0; i < 6; i++)
        sched_put(keys[i], "{}", T0, T0);
    er_sched_list l = {0};
    er_error err = {0};
    cr_assert_eq(OPS->scheduler_list(S, "A", 100, &l, &err), 0);
    const char *want[] = {"B", "Z", "_x", "a-1", "a.1", "b"};
    cr_assert_eq(l.len, 6);
    for (size_t i = 0; i < 6; i++)
        cr_assert_str_eq(l.items[i].key, want[i]);
    er_sched_list_fini(&l);
}

Test(pg_sched, puts_of_one_key_in_one_transaction_report_created_once)
{
    er_error err = {0};
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert(sched_put("tx", "{\"v\":1}", T0, T0));
    cr_assert(!sched_put("tx", "{\"v\":2}", T0, T0 + 1));
    cr_assert_eq(OPS->commit(S, &err), 0);
    cr_assert(!sched_put("tx", "{\"v\":3}", T0, T0 + 2));
    er_sched_row r;
    cr_assert_eq(OPS->scheduler_get(S, "tx", &r, &err), 0);
    cr_assert_str_eq(r.spec, "{\"v\":3}");
    cr_assert_eq(r.created_at, T0);
    er_sched_row_fini(&r);
}

/* ---- migrations ---- */

static void exec_ok(PGconn *c, const char *q)
{
    PGresult *r = PQexec(c, q);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%.80s: %s", q, PQresultErrorMessage(r));
    PQclear(r);
}

Test(pg_sched, a_schema_of_version_2_migrates_and_keeps_its_data)
{
    char schema[80], url[1100], q[512];
    snprintf(schema, sizeof schema, "%s_v2", g_schema);
    drop_schema(schema);
    PGconn *c = PQconnectdb(base_url());
    cr_assert_eq(PQstatus(c), CONNECTION_OK);
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    snprintf(q, sizeof q, "BEGIN; CREATE SCHEMA %s; SET LOCAL search_path TO %s;"
             " CREATE TABLE migrations (version integer PRIMARY KEY,"
             " applied_at timestamptz NOT NULL DEFAULT now())", schema, schema);
    exec_ok(c, q);
    exec_ok(c, er_pg_migrations[0]);
    exec_ok(c, er_pg_migrations[1]);
    exec_ok(c, "INSERT INTO migrations (version) VALUES (1), (2);"
               " INSERT INTO queues (name) VALUES ('kept'); COMMIT");

    url_for(url, sizeof url, schema, "clock=caller");
    er_store *st = open_url(url);
    er_error err = {0};
    er_queue_info *qs;
    size_t n;
    cr_assert_eq(OPS->list_queues(st, T0, &qs, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(qs[0].name, "kept");
    er_queue_info_list_free(qs, n);
    er_sched_row in = {.key = "k", .spec = "{}", .next_run_at = T0};
    bool created = false;
    cr_assert_eq(OPS->scheduler_put(st, &in, T0, &created, NULL, &err), 0, "%s", err.message);
    cr_assert(created);
    OPS->close(st);
    er_postgres_pool_drain();

    snprintf(q, sizeof q, "SELECT max(version) FROM %s.migrations", schema);
    PGresult *r = PQexec(c, q);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    cr_assert_eq(strtol(PQgetvalue(r, 0, 0), NULL, 10), er_pg_schema_version);
    cr_assert_geq(er_pg_schema_version, 3);
    PQclear(r);
    PQfinish(c);
    drop_schema(schema);
}
