/* SPDX-License-Identifier: MIT
 *
 * Outbox tables: migrations and connections (outbox_schema.h).
 */
#include "engine/outbox_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Migration N brings version N-1 to N. Never edit one that shipped. */
static const char *const migrations[] = {
    /* 1: the tables of docs/outbox.md. retry_at and set_aside_at are the
     * relay's: when a row that failed is tried again, and when it was set
     * aside (never deleted, never retried until a person clears it). */
    "CREATE TABLE outbox_events ("
    " id uuid PRIMARY KEY DEFAULT gen_random_uuid(),"
    " idempotency_key text UNIQUE,"
    " topic text NOT NULL,"
    " aggregate_id text,"
    " payload jsonb NOT NULL,"
    " trace_id text,"
    " created_at timestamptz NOT NULL DEFAULT now(),"
    " published_at timestamptz,"
    " attempts int NOT NULL DEFAULT 0,"
    " last_error text,"
    " retry_at timestamptz,"
    " set_aside_at timestamptz);"
    "CREATE INDEX outbox_events_unpublished ON outbox_events (created_at)"
    " WHERE published_at IS NULL AND set_aside_at IS NULL;"
    "CREATE INDEX outbox_events_published ON outbox_events (published_at)"
    " WHERE published_at IS NOT NULL;"
    "CREATE TABLE processed_messages ("
    " consumer text NOT NULL,"
    " message_id text NOT NULL,"
    " processed_at timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (consumer, message_id));"
    "CREATE INDEX processed_messages_age ON processed_messages (processed_at);",
};
#define NMIGRATIONS (int)(sizeof migrations / sizeof migrations[0])

_Static_assert(sizeof migrations / sizeof migrations[0] == ER_OUTBOX_SCHEMA_VERSION,
               "one migration per schema version");

static const char notify_sql[] =
    "CREATE OR REPLACE FUNCTION errand_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS"
    " $$BEGIN PERFORM pg_notify('errand_outbox', ''); RETURN NULL; END$$;"
    "DROP TRIGGER IF EXISTS errand_outbox_notify ON outbox_events;"
    "CREATE TRIGGER errand_outbox_notify AFTER INSERT ON outbox_events"
    " FOR EACH STATEMENT EXECUTE FUNCTION errand_outbox_notify();";

/* The first line of libpq's message, for errors and logs. */
static int pq_fail(er_error *err, int code, const char *what, const char *msg)
{
    size_t n = strcspn(msg ? msg : "", "\n");
    return er_error_set(err, code, "outbox", "%s: %.*s", what, (int)n, msg ? msg : "");
}

static int exec_ok(PGconn *c, const char *sql, const char *what, er_error *err)
{
    PGresult *r = PQexec(c, sql);
    int st = PQresultStatus(r);
    int rc = 0;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        rc = pq_fail(err, ER_EUNAVAIL, what, PQresultErrorMessage(r));
    PQclear(r);
    return rc;
}

int er_outbox_schema_version(PGconn *c, er_error *err)
{
    PGresult *r = PQexec(c, "SELECT coalesce(max(version), 0) FROM errand_outbox_schema");
    int rc;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        rc = (int)strtol(PQgetvalue(r, 0, 0), NULL, 10);
    } else {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        /* 42P01: undefined_table, nothing installed */
        rc = state && strcmp(state, "42P01") == 0
                 ? 0
                 : pq_fail(err, ER_EUNAVAIL, "reading the outbox schema version",
                           PQresultErrorMessage(r));
    }
    PQclear(r);
    return rc;
}

int er_outbox_install(PGconn *c, bool notify, int *from, er_error *err)
{
    *from = 0;
    int rc = exec_ok(c, "BEGIN", "install", err);
    if (rc == 0)
        rc = exec_ok(c,
                     "SELECT pg_advisory_xact_lock(hashtext('errand_outbox_install'));"
                     "CREATE TABLE IF NOT EXISTS errand_outbox_schema ("
                     " version int PRIMARY KEY, installed_at timestamptz NOT NULL DEFAULT now())",
                     "install", err);
    int v = rc == 0 ? er_outbox_schema_version(c, err) : rc;
    if (v < 0)
        rc = v;
    else if (v > NMIGRATIONS)
        rc = er_error_set(err, ER_EINVAL, "outbox",
                          "outbox schema version %d is newer than this errand supports (%d)", v,
                          NMIGRATIONS);
    if (rc == 0)
        *from = v;
    for (int i = v; rc == 0 && i < NMIGRATIONS; i++) {
        char what[64], rec[128];
        snprintf(what, sizeof what, "outbox migration %d", i + 1);
        snprintf(rec, sizeof rec, "INSERT INTO errand_outbox_schema (version) VALUES (%d)", i + 1);
        rc = exec_ok(c, migrations[i], what, err);
        if (rc == 0)
            rc = exec_ok(c, rec, what, err);
    }
    if (rc == 0 && notify)
        rc = exec_ok(c, notify_sql, "installing the NOTIFY trigger", err);
    if (rc == 0)
        return exec_ok(c, "COMMIT", "install", err);
    er_error keep = *err;
    exec_ok(c, "ROLLBACK", "install", err);
    *err = keep;
    return rc;
}

static void no_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* "already exists, skipping" and the like */
}

PGconn *er_outbox_connect(const char *url, const char *app_name, er_error *err)
{
    /* later keywords win: the URL's own connect_timeout overrides ours */
    const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
    const char *vals[] = {"5", app_name, url, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (c && PQstatus(c) == CONNECTION_OK) {
        PQsetNoticeProcessor(c, no_notices, NULL);
        return c;
    }
    pq_fail(err, ER_EUNAVAIL, "cannot connect to the outbox database",
            c ? PQerrorMessage(c) : "out of memory");
    PQfinish(c);
    return NULL;
}
