/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's schema migrations, run at a pool's first open in
 * one transaction that holds an advisory lock on the schema (servers
 * starting together migrate one after the other), and the limits row that
 * errand.enqueue_job validates with, rewritten at every start. The
 * migrations' text is in pg_sql.c and pg_migration_<n>.c; this file only
 * applies them in order and records their versions.
 */
#include "store/postgres/pg_int.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The limits row errand.enqueue_job validates with (and the dedup window
 * its tombstone lookups use): this server's, written at every start inside
 * the migration's transaction. Nodes that disagree (a rolling change of
 * --payload-max) follow the one that started last; the starting node logs
 * the values it replaced. */
static int write_limits(er_store *s, const er_job_limits *lim, er_error *err)
{
    er_job_defaults d;
    er_job_defaults_server(&d);
    long long pmax = lim && lim->payload_max ? (long long)lim->payload_max
                                             : (long long)ER_PAYLOAD_MAX_DEFAULT;
    PGresult *r = NULL;
    int rc = er_pg_simple(s, "SELECT payload_max, dedup_window_ms FROM limits", "limits", &r, err);
    if (rc == 0 && PQntuples(r) == 1 && er_pg_i64(r, 0, 0) != pmax)
        ER_LOG(ER_LOG_WARN, NULL,
               "limits: payload_max was %lld (written by another errand server), now %lld",
               (long long)er_pg_i64(r, 0, 0), pmax);
    if (rc == 0 && PQntuples(r) == 1 && er_pg_i64(r, 0, 1) != s->dedup_window_ms)
        ER_LOG(ER_LOG_WARN, NULL,
               "limits: dedup_window_ms was %lld (written by another errand server), now %lld",
               (long long)er_pg_i64(r, 0, 1), (long long)s->dedup_window_ms);
    PQclear(r);
    if (rc < 0)
        return rc;
    char sql[2048];
    snprintf(sql, sizeof sql,
             "INSERT INTO limits (id, payload_max, name_max, id_max, priority_max,"
             " max_attempts_max, delay_max_ms, timeout_max_ms, bulk_max, field_max, message_max,"
             " default_max_attempts, default_backoff_type, default_backoff_delay_ms,"
             " default_backoff_max_ms, default_backoff_jitter, default_timeout_ms,"
             " default_priority, dedup_window_ms, written_by, written_at) VALUES (true, %lld, %d,"
             " %d, %d, %d, %lld, %lld, %d, %d, %d, %d, %d, %lld, %lld, %.17g, %lld, %d, %lld,"
             " 'errand %s', now())"
             " ON CONFLICT (id) DO UPDATE SET payload_max = excluded.payload_max,"
             " name_max = excluded.name_max, id_max = excluded.id_max,"
             " priority_max = excluded.priority_max, max_attempts_max = excluded.max_attempts_max,"
             " delay_max_ms = excluded.delay_max_ms, timeout_max_ms = excluded.timeout_max_ms,"
             " bulk_max = excluded.bulk_max, field_max = excluded.field_max,"
             " message_max = excluded.message_max,"
             " default_max_attempts = excluded.default_max_attempts,"
             " default_backoff_type = excluded.default_backoff_type,"
             " default_backoff_delay_ms = excluded.default_backoff_delay_ms,"
             " default_backoff_max_ms = excluded.default_backoff_max_ms,"
             " default_backoff_jitter = excluded.default_backoff_jitter,"
             " default_timeout_ms = excluded.default_timeout_ms,"
             " default_priority = excluded.default_priority,"
             " dedup_window_ms = excluded.dedup_window_ms, written_by = excluded.written_by,"
             " written_at = excluded.written_at",
             pmax, ER_NAME_MAX, ER_ID_MAX, ER_PRIORITY_MAX, ER_MAX_ATTEMPTS_MAX,
             (long long)ER_DELAY_MAX_MS, (long long)ER_TIMEOUT_MAX_MS, ER_BULK_MAX,
             ER_FIELD_MAX - 1, ER_MESSAGE_MAX - 1, d.max_attempts, (int)d.backoff.type,
             (long long)d.backoff.delay_ms, (long long)d.backoff.max_delay_ms, d.backoff.jitter,
             (long long)d.timeout_ms, d.priority, (long long)s->dedup_window_ms, ER_VERSION);
    return er_pg_simple(s, sql, "limits", NULL, err);
}

/* Creates or migrates the schema in one transaction that holds an advisory
 * lock on it, so servers starting together migrate one after the other. */
int er_pg_migrate(er_store *s, const char *schema, const er_job_limits *lim,
                  er_migrate_mode mode, int *from, er_error *err)
{
    *from = 0;
    char *ident = PQescapeIdentifier(s->c->pg, schema, strlen(schema));
    char *lit = PQescapeLiteral(s->c->pg, schema, strlen(schema));
    if (!ident || !lit) {
        PQfreemem(ident);
        PQfreemem(lit);
        return er_pg_nomem(err);
    }
    char sql[1024];
    PGresult *r = NULL;
    int rc = 0, version = 0;
    if (mode == ER_MIGRATE_REFUSE) {
        /* no DDL at all: a role without CREATE rights can start on a
         * schema that errand migrate (run by its owner) keeps current */
        char table[ER_PG_SCHEMA_MAX * 2 + 32];
        snprintf(table, sizeof table, "%s.migrations", ident);
        char *tlit = PQescapeLiteral(s->c->pg, table, strlen(table));
        if (!tlit) {
            PQfreemem(ident);
            PQfreemem(lit);
            return er_pg_nomem(err);
        }
        snprintf(sql, sizeof sql,
                 "BEGIN; SELECT pg_advisory_xact_lock(hashtext('errand.migrate'), hashtext(%s));"
                 " SELECT to_regclass(%s) IS NOT NULL",
                 lit, tlit);
        PQfreemem(tlit);
        rc = er_pg_simple(s, sql, "migration", &r, err);
        bool has = rc == 0 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
        r = NULL;
        if (has) {
            snprintf(sql, sizeof sql,
                     "SET LOCAL search_path TO %s; SELECT coalesce(max(version), 0) FROM migrations",
                     ident);
            rc = er_pg_simple(s, sql, "migration", &r, err);
            version = rc == 0 ? (int)er_pg_i64(r, 0, 0) : 0;
        }
    } else {
        snprintf(sql, sizeof sql,
                 "BEGIN; SELECT pg_advisory_xact_lock(hashtext('errand.migrate'), hashtext(%s));"
                 " CREATE SCHEMA IF NOT EXISTS %s; SET LOCAL search_path TO %s;"
                 " CREATE TABLE IF NOT EXISTS migrations (version integer PRIMARY KEY,"
                 " applied_at timestamptz NOT NULL DEFAULT now());"
                 " SELECT coalesce(max(version), 0) FROM migrations",
                 lit, ident, ident);
        rc = er_pg_simple(s, sql, "migration", &r, err);
        version = rc == 0 ? (int)er_pg_i64(r, 0, 0) : 0;
    }
    PQfreemem(ident);
    PQfreemem(lit);
    PQclear(r);
    if (rc == 0 && version > er_pg_schema_version)
        rc = er_error_set(err, ER_EINVAL, "store",
                          "store schema version %d is newer than this errand supports (%d)",
                          version, er_pg_schema_version);
    if (rc == 0 && mode == ER_MIGRATE_REFUSE && version < er_pg_schema_version)
        rc = er_error_set(err, ER_EUNAVAIL, "schema_version",
                          "store schema version %d is older than this errand's (%d)", version,
                          er_pg_schema_version);
    if (rc == 0)
        *from = version;
    for (int v = version; rc == 0 && v < er_pg_schema_version; v++) {
        rc = er_pg_simple(s, er_pg_migrations[v], "migration", NULL, err);
        if (rc == 0) {
            snprintf(sql, sizeof sql, "INSERT INTO migrations (version) VALUES (%d)", v + 1);
            rc = er_pg_simple(s, sql, "migration", NULL, err);
        }
    }
    if (rc == 0 && mode != ER_MIGRATE_ONLY)
        rc = write_limits(s, lim, err);
    if (rc == 0)
        rc = er_pg_simple(s, "COMMIT", "migration", NULL, err);
    if (PQtransactionStatus(s->c->pg) != PQTRANS_IDLE)
        PQclear(PQexec(s->c->pg, "ROLLBACK"));
    return rc;
}

int er_pg_schema_read(const char *conninfo, const char *schema, int *version, er_error *err)
{
    *version = 0;
    PGconn *pg = PQconnectdb(conninfo);
    if (!pg || PQstatus(pg) != CONNECTION_OK) {
        const char *m = pg ? PQerrorMessage(pg) : "out of memory";
        int n = (int)strlen(m);
        while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' '))
            n--;
        int rc = er_error_set(err, ER_EUNAVAIL, "store", "store: cannot connect: %.*s", n, m);
        PQfinish(pg);
        return rc;
    }
    char *ident = PQescapeIdentifier(pg, schema, strlen(schema));
    char *lit = ident ? PQescapeLiteral(pg, ident, strlen(ident)) : NULL;
    int rc = 0;
    PGresult *r = NULL;
    if (!lit) {
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
    } else {
        char sql[512];
        snprintf(sql, sizeof sql, "SELECT to_regclass(%s || '.migrations') IS NOT NULL", lit);
        r = PQexec(pg, sql);
        bool has = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
                   strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            rc = er_error_set(err, ER_EUNAVAIL, "store", "store: %s", PQerrorMessage(pg));
        PQclear(r);
        r = NULL;
        if (rc == 0 && has) {
            snprintf(sql, sizeof sql, "SELECT coalesce(max(version), 0) FROM %s.migrations",
                     ident);
            r = PQexec(pg, sql);
            if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
                *version = (int)strtol(PQgetvalue(r, 0, 0), NULL, 10);
            else
                rc = er_error_set(err, ER_EUNAVAIL, "store", "store: %s", PQerrorMessage(pg));
        }
    }
    PQclear(r);
    PQfreemem(ident);
    PQfreemem(lit);
    PQfinish(pg);
    return rc;
}
