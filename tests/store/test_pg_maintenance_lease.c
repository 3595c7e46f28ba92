/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's maintenance lease (store.h maintenance_lease): one
 * holder per schema among all connections, held across transactions, freed
 * when the holder's store is closed or its session ends, and taken again
 * after a reconnect. Each test uses a fresh schema of $ERRAND_TEST_PG_URL;
 * without it the tests fail, unless ERRAND_TEST_PG_SKIP=1.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/postgres/pg_int.h"
#include "store/postgres/postgres.h"
#include "store/store.h"

#include "pg_test_url.h"

static const er_store_ops *OPS = &er_postgres_ops;
static char g_schema[64];

static void url_for(char *out, size_t n, const char *schema)
{
    const char *b = base_url();
    snprintf(out, n, "%s%cschema=%s&pool_size=4", b, strchr(b, '?') ? '&' : '?', schema);
}

static void drop_schema(const char *schema)
{
    pg_test_drop_schema(schema);
}

static void setup(void)
{
    snprintf(g_schema, sizeof g_schema, "ml_%ld_%u", (long)getpid(),
             (unsigned)(er_now_ms() % 1000000));
}

static void teardown(void)
{
    er_postgres_pool_drain();
    drop_schema(g_schema);
    char other[80];
    snprintf(other, sizeof other, "%s_b", g_schema);
    drop_schema(other);
}

TestSuite(maintenance_lease, .init = setup, .fini = teardown, .timeout = 60);

static er_store *open_schema(const char *schema)
{
    char url[1100];
    url_for(url, sizeof url, schema);
    er_store *s = NULL;
    er_error err = {0};
    er_store_options opt = {.busy_timeout_ms = 1000};
    cr_assert_eq(OPS->open(url, &opt, &s, &err), 0, "open %s: %s", url, err.message);
    return s;
}

static bool lease(er_store *s)
{
    bool leader = true;
    er_error err = {0};
    cr_assert_eq(OPS->maintenance_lease(s, &leader, &err), 0, "%s", err.message);
    return leader;
}

/* Polls `s` for the lease up to ~5 s (a terminated backend exits soon, not
 * at once); returns whether it got it. */
static bool lease_within(er_store *s)
{
    for (int i = 0; i < 100; i++) {
        if (lease(s))
            return true;
        usleep(50 * 1000);
    }
    return false;
}

Test(maintenance_lease, one_holder_per_schema_freed_when_the_holder_closes)
{
    er_store *a = open_schema(g_schema), *b = open_schema(g_schema);
    cr_assert(lease(a), "the first asker takes the lease");
    cr_assert_not(lease(b), "a second connection must not hold it too");
    cr_assert(lease(a), "the holder keeps it");
    er_error err = {0};
    cr_assert_eq(OPS->begin(a, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(a, &err), 0, "%s", err.message);
    cr_assert_not(lease(b), "a transaction of the holder does not free it");
    OPS->close(a);
    /* the closed backend may release its advisory lock a moment later */
    cr_assert(lease_within(b), "closing the holder frees the lease");
    OPS->close(b);
}

Test(maintenance_lease, another_schema_has_its_own_leader)
{
    char other[80];
    snprintf(other, sizeof other, "%s_b", g_schema);
    er_store *a = open_schema(g_schema), *b = open_schema(other);
    cr_assert(lease(a));
    cr_assert(lease(b), "schema %s is another store: its own lease", other);
    OPS->close(a);
    OPS->close(b);
}

Test(maintenance_lease, lost_with_the_session_then_taken_by_another_and_retried)
{
    er_store *a = open_schema(g_schema), *b = open_schema(g_schema);
    cr_assert(lease(a));
    PGconn *c = PQconnectdb(base_url());
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    char q[96];
    snprintf(q, sizeof q, "SELECT pg_terminate_backend(%d)", PQbackendPID(a->c->pg));
    PQclear(PQexec(c, q));
    PQfinish(c);
    cr_assert(lease_within(b), "the lease of a terminated session passes on");
    /* a's next statement fails (its transactions cannot commit), then a
     * reconnects and asks again like any other connection */
    er_error err = {0};
    int rc = OPS->begin(a, &err);
    if (rc == 0)
        rc = OPS->commit(a, &err);
    cr_assert_eq(rc, ER_EUNAVAIL, "a's dead session: %d %s", rc, err.message);
    cr_assert_not(lease(a), "after reconnecting a must not think it still leads");
    OPS->close(b);
    cr_assert(lease_within(a), "a takes it once b is gone");
    OPS->close(a);
}
