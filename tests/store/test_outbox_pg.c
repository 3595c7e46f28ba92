/* SPDX-License-Identifier: MIT
 *
 * liberrand-pg against a real PostgreSQL (errand_pg.h): errand outbox
 * install's tables, errand_outbox_write inside the caller's transaction
 * (insert-once by key, nothing on rollback, refusals that write nothing)
 * and errand_pg_claim_once (one effect across transactions, even two at
 * once). Each test installs the tables in a fresh schema of
 * $ERRAND_TEST_PG_URL (search_path); without it the tests fail, unless
 * ERRAND_TEST_PG_SKIP=1.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/outbox_schema.h"
#include "errand/errand_pg.h"

#include "pg_test_url.h"

static char g_schema[64];

static void ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int st = PQresultStatus(r);
    cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
}

static long long scalar(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(r));
    long long v = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* A connection whose search_path is the test's schema. */
static PGconn *conn(void)
{
    PGconn *c = PQconnectdb(base_url());
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    ok(c, "SET client_min_messages = warning");
    char q[128];
    snprintf(q, sizeof q, "SET search_path = %s", g_schema);
    ok(c, q);
    return c;
}

static void setup(void)
{
    snprintf(g_schema, sizeof g_schema, "ob_%ld_%u", (long)getpid(), (unsigned)rand());
    PGconn *c = PQconnectdb(base_url());
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    char q[128];
    snprintf(q, sizeof q, "CREATE SCHEMA %s", g_schema);
    ok(c, q);
    PQfinish(c);
    c = conn();
    er_error err = {0};
    int from = -1;
    cr_assert_eq(er_outbox_install(c, true, &from, &err), 0, "%s", err.message);
    cr_assert_eq(from, 0);
    cr_assert_eq(er_outbox_install(c, true, &from, &err), 0, "%s", err.message);
    cr_assert_eq(from, ER_OUTBOX_SCHEMA_VERSION, "a second install finds the first");
    cr_assert_eq(er_outbox_schema_version(c, &err), ER_OUTBOX_SCHEMA_VERSION);
    PQfinish(c);
}

static void teardown(void)
{
    pg_test_drop_schema(g_schema);
}

TestSuite(outbox_pg, .init = setup, .fini = teardown);

Test(outbox_pg, a_keyed_write_inserts_once_and_names_the_first_row)
{
    PGconn *c = conn();
    errand_outbox_event ev = {.topic = "billing.daily", .payload_json = "{\"billingDate\":\"x\"}",
                              .idempotency_key = "ik_daily-billing-2026-12-01"};
    char a[37], b[37];
    ok(c, "BEGIN");
    cr_assert_eq(errand_outbox_write(c, &ev, a), ERRAND_PG_INSERTED, "%s", PQerrorMessage(c));
    ok(c, "COMMIT");
    ok(c, "BEGIN");
    cr_assert_eq(errand_outbox_write(c, &ev, b), ERRAND_PG_EXISTS, "%s", PQerrorMessage(c));
    ok(c, "COMMIT");
    cr_assert_eq(strlen(a), 36);
    cr_assert_str_eq(a, b);
    cr_assert_eq(scalar(c, "SELECT count(*) FROM outbox_events"), 1);
    /* different run keys give different rows; no key, a row per write */
    errand_outbox_event other = ev;
    other.idempotency_key = "ik_daily-billing-2026-12-02";
    cr_assert_eq(errand_outbox_write(c, &other, NULL), ERRAND_PG_INSERTED);
    other.idempotency_key = NULL;
    cr_assert_eq(errand_outbox_write(c, &other, NULL), ERRAND_PG_INSERTED);
    cr_assert_eq(errand_outbox_write(c, &other, NULL), ERRAND_PG_INSERTED);
    cr_assert_eq(scalar(c, "SELECT count(*) FROM outbox_events"), 4);
    PQfinish(c);
}

Test(outbox_pg, a_rolled_back_transaction_leaves_no_event)
{
    PGconn *c = conn();
    ok(c, "CREATE TABLE orders (id int PRIMARY KEY)");
    errand_outbox_event ev = {.topic = "order.placed", .payload_json = "{\"order\":1}",
                              .aggregate_id = "1", .trace_id = "t-1"};
    ok(c, "BEGIN");
    ok(c, "INSERT INTO orders VALUES (1)");
    cr_assert_eq(errand_outbox_write(c, &ev, NULL), ERRAND_PG_INSERTED);
    ok(c, "ROLLBACK");
    cr_assert_eq(scalar(c, "SELECT count(*) FROM outbox_events"), 0);
    cr_assert_eq(scalar(c, "SELECT count(*) FROM orders"), 0);
    ok(c, "BEGIN");
    ok(c, "INSERT INTO orders VALUES (1)");
    cr_assert_eq(errand_outbox_write(c, &ev, NULL), ERRAND_PG_INSERTED);
    ok(c, "COMMIT");
    cr_assert_eq(scalar(c, "SELECT count(*) FROM outbox_events WHERE aggregate_id = '1'"
                           " AND trace_id = 't-1' AND published_at IS NULL AND attempts = 0"),
                 1);
    PQfinish(c);
}

Test(outbox_pg, bad_events_are_refused_and_write_nothing)
{
    PGconn *c = conn();
    const char *bad[] = {"[1]", "\"text\"", "", "  7", "{not json", NULL};
    for (int i = 0; i < 6; i++) {
        errand_outbox_event ev = {.topic = "t", .payload_json = bad[i]};
        ok(c, "BEGIN");
        cr_assert_eq(errand_outbox_write(c, &ev, NULL), ERRAND_PG_ERROR, "payload %d", i);
        ok(c, "ROLLBACK");
    }
    errand_outbox_event notopic = {.topic = "", .payload_json = "{}"};
    cr_assert_eq(errand_outbox_write(c, &notopic, NULL), ERRAND_PG_ERROR);
    errand_outbox_event badid = {.topic = "t", .payload_json = "{}", .id = "nope"};
    cr_assert_eq(errand_outbox_write(c, &badid, NULL), ERRAND_PG_ERROR);
    cr_assert_not_null(strstr(PQerrorMessage(c), "uuid"), "%s", PQerrorMessage(c));
    cr_assert_eq(errand_outbox_write(NULL, &notopic, NULL), ERRAND_PG_ERROR);
    cr_assert_eq(scalar(c, "SELECT count(*) FROM outbox_events"), 0);
    PQfinish(c);
}

/* The effect: a row in effects, applied only when the claim is first. */
static int apply(PGconn *c, const char *msg)
{
    int rc = errand_pg_claim_once(c, "billing", msg);
    if (rc == ERRAND_PG_FIRST) {
        const char *p[] = {msg};
        PQclear(PQexecParams(c, "INSERT INTO effects VALUES ($1)", 1, NULL, p, NULL, NULL, 0));
    }
    return rc;
}

Test(outbox_pg, claim_once_in_two_transactions_applies_the_effect_once)
{
    PGconn *c = conn();
    ok(c, "CREATE TABLE effects (message_id text)");
    ok(c, "BEGIN");
    cr_assert_eq(apply(c, "m-1"), ERRAND_PG_FIRST, "%s", PQerrorMessage(c));
    ok(c, "COMMIT");
    ok(c, "BEGIN");
    cr_assert_eq(apply(c, "m-1"), ERRAND_PG_ALREADY);
    ok(c, "COMMIT");
    /* a claim whose transaction rolled back never happened */
    ok(c, "BEGIN");
    cr_assert_eq(apply(c, "m-2"), ERRAND_PG_FIRST);
    ok(c, "ROLLBACK");
    ok(c, "BEGIN");
    cr_assert_eq(apply(c, "m-2"), ERRAND_PG_FIRST);
    ok(c, "COMMIT");
    /* another consumer has its own record */
    cr_assert_eq(errand_pg_claim_once(c, "emails", "m-1"), ERRAND_PG_FIRST);
    cr_assert_eq(scalar(c, "SELECT count(*) FROM effects WHERE message_id = 'm-1'"), 1);
    cr_assert_eq(scalar(c, "SELECT count(*) FROM effects WHERE message_id = 'm-2'"), 1);
    cr_assert_eq(errand_pg_claim_once(c, "", "m"), ERRAND_PG_ERROR);
    cr_assert_eq(errand_pg_claim_once(c, "c", NULL), ERRAND_PG_ERROR);
    PQfinish(c);
}

Test(outbox_pg, two_transactions_at_once_apply_the_effect_once)
{
    PGconn *a = conn(), *b = conn();
    ok(a, "CREATE TABLE effects (message_id text)");
    ok(a, "BEGIN");
    ok(b, "BEGIN");
    cr_assert_eq(apply(a, "m-9"), ERRAND_PG_FIRST);
    /* b's claim waits for a's transaction: sent, not yet answered */
    cr_assert_eq(PQsendQuery(b, "INSERT INTO processed_messages (consumer, message_id)"
                                " VALUES ('billing', 'm-9') ON CONFLICT DO NOTHING"), 1);
    usleep(200 * 1000);
    cr_assert_eq(PQconsumeInput(b), 1);
    cr_assert_eq(PQisBusy(b), 1, "the second claim waits for the first transaction");
    ok(a, "COMMIT");
    PGresult *r;
    char tuples[16] = "";
    while ((r = PQgetResult(b))) {
        cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
        snprintf(tuples, sizeof tuples, "%s", PQcmdTuples(r));
        PQclear(r);
    }
    cr_assert_str_eq(tuples, "0", "the waiting claim finds the committed one");
    /* errand_pg_claim_once itself in b's transaction agrees */
    cr_assert_eq(apply(b, "m-9"), ERRAND_PG_ALREADY);
    ok(b, "COMMIT");
    cr_assert_eq(scalar(a, "SELECT count(*) FROM effects"), 1);
    PQfinish(a);
    PQfinish(b);
}

Test(outbox_pg, a_newer_schema_is_refused)
{
    PGconn *c = conn();
    char q[128];
    snprintf(q, sizeof q, "INSERT INTO errand_outbox_schema (version) VALUES (%d)",
             ER_OUTBOX_SCHEMA_VERSION + 1);
    ok(c, q);
    er_error err = {0};
    int from = 0;
    cr_assert_eq(er_outbox_install(c, false, &from, &err), ER_EINVAL);
    cr_assert_not_null(strstr(err.message, "newer"), "%s", err.message);
    cr_assert_eq(scalar(c, "SELECT max(version) FROM errand_outbox_schema"),
                 ER_OUTBOX_SCHEMA_VERSION + 1, "the refused install changed nothing");
    PQfinish(c);
}
