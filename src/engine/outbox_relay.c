/* SPDX-License-Identifier: MIT
 *
 * The outbox relay thread (outbox_relay.h). Blocking libpq on its own
 * thread; the jobs go to the engine with er_engine_submit_from and the
 * thread waits for the answer, which comes after errand's store committed.
 */
#include "engine/outbox_relay.h"
#include "engine/outbox_schema.h"
#include "store/postgres/pg_int.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/jsonw.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOUSEKEEPING_MS 60000 /* at most; a retention under 4 min runs it more often */
#define COUNTS_MS 1000        /* backlog, unroutable and set-aside counts, when not draining */
#define STOP_CANCEL_MS 5000   /* a statement still running this long after stop is cancelled */
#define WARN_MS 60000         /* one unroutable-rows warning a minute at most */
#define CLEANUP_BATCH 1000
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000

struct er_outbox {
    er_engine *engine;
    er_outbox_config cfg;
    char *url;
    char *topics; /* the routed topics as a text[] literal */
    size_t max_routes;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    int wake[2];
    PGconn *conn;
    char *store_url;       /* errand's store when it is PostgreSQL, else NULL */
    char enqueue_sql[160]; /* set while the outbox shares errand's database: one job */
    char bulk_sql[160];    /* and a queue's jobs */
    er_rand rand;
    int64_t next_housekeeping, next_counts, next_warn;

    pthread_mutex_t mu; /* guards what follows */
    PGcancel *cancel;   /* of conn, for er_outbox_free */
    pthread_cond_t cv;
    bool loop_gone;
    bool answered;
    int answer_rc;
    er_error answer_err;
    bool *answer_dup; /* ER_OUTBOX_BATCH * max_routes flags */
    er_outbox_stats stats;
};

static void set_error(er_outbox *o, bool connected, const char *msg)
{
    pthread_mutex_lock(&o->mu);
    o->stats.connected = connected;
    size_t n = msg ? strnlen(msg, sizeof o->stats.last_error - 1) : 0;
    memcpy(o->stats.last_error, msg ? msg : "", n);
    o->stats.last_error[n] = '\0';
    pthread_mutex_unlock(&o->mu);
}

/* Waits up to ms for a NOTIFY (when connected) or a stop. */
static void wait_for(er_outbox *o, int64_t ms)
{
    struct pollfd p[2] = {{.fd = o->wake[0], .events = POLLIN}, {.fd = -1}};
    if (o->conn && PQsocket(o->conn) >= 0)
        p[1] = (struct pollfd){.fd = PQsocket(o->conn), .events = POLLIN};
    if (poll(p, 2, (int)ms) > 0 && (p[0].revents & POLLIN)) {
        char buf[16];
        while (read(o->wake[0], buf, sizeof buf) > 0) {
        }
    }
    if (o->conn) {
        PQconsumeInput(o->conn);
        PGnotify *n;
        while ((n = PQnotifies(o->conn)))
            PQfreemem(n);
    }
}

static const char *first_line(const char *msg, char *out, size_t size)
{
    size_t n = strcspn(msg ? msg : "", "\n");
    snprintf(out, size, "%.*s", (int)n, msg ? msg : "");
    return out;
}

/* A statement's result, or NULL with the error kept (and logged). */
static PGresult *run(er_outbox *o, const char *sql, int nparams, const char *const *params)
{
    PGresult *r = PQexecParams(o->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    int st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return r;
    char msg[256];
    first_line(PQresultErrorMessage(r), msg, sizeof msg);
    set_error(o, PQstatus(o->conn) == CONNECTION_OK, msg);
    ER_LOG(ER_LOG_WARN, NULL, "outbox relay: %s", msg);
    PQclear(r);
    return NULL;
}

static bool run_ok(er_outbox *o, const char *sql, int nparams, const char *const *params)
{
    PGresult *r = run(o, sql, nparams, params);
    PQclear(r);
    return r != NULL;
}

static void on_enqueued(er_req *req)
{
    er_outbox *o = req->arg;
    pthread_mutex_lock(&o->mu);
    o->answer_rc = req->rc;
    o->answer_err = req->err;
    for (size_t i = 0; i < req->njobs; i++)
        o->answer_dup[i] = req->duplicate && req->duplicate[i];
    o->answered = true;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    er_req_free(req);
}

/* Hands the jobs (taken) to the engine and waits for the commit. 0, or a
 * negative code when the store refused or the loop went away. */
static int enqueue(er_outbox *o, er_job *jobs, size_t n, er_error *err)
{
    er_req *req = er_req_new(ER_REQ_ENQUEUE);
    if (!req) {
        for (size_t i = 0; i < n; i++)
            er_job_fini(&jobs[i]);
        free(jobs);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    req->jobs = jobs;
    req->njobs = n;
    req->done = on_enqueued;
    req->arg = o;
    pthread_mutex_lock(&o->mu);
    o->answered = false;
    pthread_mutex_unlock(&o->mu);
    er_engine_submit_from(o->engine, req);
    pthread_mutex_lock(&o->mu);
    while (!o->answered && !o->loop_gone)
        pthread_cond_wait(&o->cv, &o->mu);
    int rc = o->answered ? o->answer_rc : ER_EUNAVAIL;
    if (!o->answered)
        er_error_set(err, ER_EUNAVAIL, "", "the server stopped before the enqueue was answered");
    else if (rc < 0)
        *err = o->answer_err;
    pthread_mutex_unlock(&o->mu);
    return rc;
}

/* One claimed row: its jobs are jobs[first .. first + njobs). */
typedef struct claimed {
    const char *id;
    size_t first, njobs;
    int attempts;
    bool failed;
    er_outbox_failure why;
    char message[ER_MESSAGE_MAX + 160];
} claimed;

static void fail_row(claimed *c, er_outbox_failure why, const char *field, const char *msg)
{
    c->failed = true;
    c->why = why;
    snprintf(c->message, sizeof c->message, "%s%s%s", field && *field ? field : "",
             field && *field ? ": " : "", msg);
}

static void mark_failure(er_outbox *o, const claimed *f)
{
    bool aside = f->why == ER_OUTBOX_SET_ASIDE || f->attempts + 1 >= ER_OUTBOX_MAX_ATTEMPTS;
    char delay[32];
    snprintf(delay, sizeof delay, "%lld", (long long)er_outbox_retry_delay_ms(f->attempts + 1));
    const char *p[] = {f->id, f->message, delay, aside ? "t" : "f"};
    run_ok(o,
           "UPDATE outbox_events SET attempts = attempts + 1, last_error = $2,"
           " retry_at = now() + $3::bigint * interval '1 millisecond',"
           " set_aside_at = CASE WHEN $4::boolean THEN now() END WHERE id = $1::uuid",
           4, p);
    ER_LOG(ER_LOG_WARN, NULL, "outbox relay: event %s %s: %s", f->id,
           aside ? "set aside" : "will be retried", f->message);
}

/* A job as errand.enqueue_job reads it: the request body of the HTTP API. */
static void job_body(const er_job *j, er_buf *b)
{
    er_buf_adds(b, "{\"name\":");
    er_json_str(b, j->name);
    er_buf_adds(b, ",\"id\":");
    er_json_str(b, j->id);
    er_buf_adds(b, ",\"idempotency_key\":");
    er_json_str(b, j->idempotency_key);
    if (j->trace_id) {
        er_buf_adds(b, ",\"trace_id\":");
        er_json_str(b, j->trace_id);
    }
    er_buf_adds(b, ",\"payload\":");
    er_buf_add(b, j->payload, j->payload_len);
    er_buf_adds(b, "}");
}

/* One statement's outcome under a savepoint: true when it succeeded; else
 * rolled back to the savepoint, with the error's first line in msg. */
static bool under_savepoint(er_outbox *o, const char *sql, int np, const char *const *p,
                            char *msg, size_t size)
{
    PGresult *r = PQexecParams(o->conn, sql, np, NULL, p, NULL, NULL, 0);
    int st = PQresultStatus(r);
    bool ok = st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
    if (!ok)
        first_line(PQresultErrorMessage(r), msg, size);
    PQclear(r);
    if (!ok)
        run_ok(o, "ROLLBACK TO SAVEPOINT enqueue", 0, NULL);
    return ok;
}

/* One-transaction mode: the jobs go in with errand's own SQL function in
 * the claim's transaction. All rows at once; when that is refused, row by
 * row, so one refused row fails alone. 0, or -1 (the connection broke). */
static int enqueue_sql(er_outbox *o, er_job *jobs, claimed *rows, int n)
{
    er_buf b;
    er_buf_init(&b, (size_t)64 << 20);
    char msg[ER_MESSAGE_MAX];
    if (!run_ok(o, "SAVEPOINT enqueue", 0, NULL))
        return -1;
    /* one enqueue_bulk call per queue of the batch */
    size_t njobs = n > 0 ? rows[n - 1].first + rows[n - 1].njobs : 0;
    bool *sent = calloc(njobs + 1, 1);
    bool all = sent != NULL;
    for (size_t j = 0; all && j < njobs; j++) {
        if (sent[j])
            continue;
        er_buf_reset(&b);
        er_buf_adds(&b, "[");
        for (size_t k = j; k < njobs; k++) {
            if (sent[k] || strcmp(jobs[k].queue, jobs[j].queue) != 0)
                continue;
            if (k != j)
                er_buf_adds(&b, ",");
            job_body(&jobs[k], &b);
            sent[k] = true;
        }
        er_buf_adds(&b, "]");
        const char *p[] = {jobs[j].queue, er_buf_str(&b)};
        all = !b.err && under_savepoint(o, o->bulk_sql, 2, p, msg, sizeof msg);
    }
    free(sent);
    if (!all) {
        if (PQstatus(o->conn) != CONNECTION_OK)
            return er_buf_fini(&b), -1;
        /* again, row by row: a refused row fails, the others go in */
        for (int i = 0; i < n; i++) {
            if (rows[i].failed)
                continue;
            if (!run_ok(o, "SAVEPOINT enqueue", 0, NULL))
                return er_buf_fini(&b), -1;
            for (size_t k = 0; k < rows[i].njobs; k++) {
                const er_job *j = &jobs[rows[i].first + k];
                er_buf_reset(&b);
                job_body(j, &b);
                const char *p[] = {j->queue, er_buf_str(&b)};
                if (b.err || !under_savepoint(o, o->enqueue_sql, 2, p, msg, sizeof msg)) {
                    fail_row(&rows[i], ER_OUTBOX_RETRY, "", b.err ? "out of memory" : msg);
                    break;
                }
            }
            if (PQstatus(o->conn) != CONNECTION_OK)
                return er_buf_fini(&b), -1;
        }
    }
    er_buf_fini(&b);
    return 0;
}

/* One claim-enqueue-mark transaction. Returns the rows claimed, or -1
 * (the transaction rolled back; the error is kept). */
static int relay_batch(er_outbox *o)
{
    static const char claim[] =
        "SELECT id::text, topic, payload::text, jsonb_typeof(payload) = 'object',"
        " idempotency_key, trace_id, attempts,"
        " (extract(epoch FROM clock_timestamp() - created_at) * 1000)::bigint"
        " FROM outbox_events"
        " WHERE published_at IS NULL AND set_aside_at IS NULL"
        " AND (retry_at IS NULL OR retry_at <= now()) AND topic = ANY($1::text[])"
        " ORDER BY created_at LIMIT 100 FOR UPDATE SKIP LOCKED";
    _Static_assert(ER_OUTBOX_BATCH == 100, "the claim's LIMIT");
    if (!run_ok(o, "BEGIN", 0, NULL))
        return -1;
    const char *p[] = {o->topics};
    PGresult *r = run(o, claim, 1, p);
    if (!r) {
        run_ok(o, "ROLLBACK", 0, NULL);
        return -1;
    }
    int n = PQntuples(r);
    er_job *jobs = calloc((size_t)n * o->max_routes + 1, sizeof *jobs);
    claimed *rows = calloc((size_t)n + 1, sizeof *rows);
    size_t njobs = 0;
    int64_t oldest = 0, now = er_now_ms();
    bool oom = !jobs || !rows;
    for (int i = 0; i < n && !oom; i++) {
        er_outbox_event ev = {
            .id = PQgetvalue(r, i, 0),
            .topic = PQgetvalue(r, i, 1),
            .payload = PQgetvalue(r, i, 2),
            .payload_is_object = PQgetvalue(r, i, 3)[0] == 't',
            .idempotency_key = PQgetisnull(r, i, 4) ? NULL : PQgetvalue(r, i, 4),
            .trace_id = PQgetisnull(r, i, 5) ? NULL : PQgetvalue(r, i, 5),
        };
        int64_t age = er_pg_i64(r, i, 7);
        oldest = age > oldest ? age : oldest;
        rows[i].id = ev.id;
        rows[i].attempts = (int)er_pg_i64(r, i, 6);
        rows[i].first = njobs;
        const er_outbox_topic *t = er_outbox_routes_find(&o->cfg.routes, ev.topic);
        for (size_t k = 0; t && k < t->nroutes; k++) {
            er_error err = {0};
            er_outbox_failure why = ER_OUTBOX_RETRY;
            int rc = er_outbox_job(&ev, &t->routes[k], &o->cfg.limits, now, &o->rand,
                                   &jobs[njobs], &why, &err);
            if (rc == ER_ENOMEM)
                oom = true;
            if (rc < 0) {
                while (njobs > rows[i].first)
                    er_job_fini(&jobs[--njobs]);
                fail_row(&rows[i], why, err.field, err.message);
                break;
            }
            njobs++;
        }
        rows[i].njobs = rows[i].failed ? 0 : njobs - rows[i].first;
    }
    int rc = oom ? ER_ENOMEM : 0;
    er_error err = {0};
    uint64_t created = 0;
    if (rc == 0 && njobs > 0 && o->enqueue_sql[0]) {
        rc = enqueue_sql(o, jobs, rows, n) < 0 ? ER_EUNAVAIL : 0;
        for (int i = 0; rc == 0 && i < n; i++)
            created += rows[i].failed ? 0 : rows[i].njobs;
    } else if (rc == 0 && njobs > 0) {
        er_job *taken = jobs;
        jobs = NULL;
        rc = enqueue(o, taken, njobs, &err);
        pthread_mutex_lock(&o->mu);
        for (size_t i = 0; rc == 0 && i < njobs; i++)
            created += !o->answer_dup[i];
        pthread_mutex_unlock(&o->mu);
    }
    er_pg_array ok = {0};
    size_t nok = 0, nfails = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].failed) {
            nfails++;
        } else {
            er_pg_array_str(&ok, rows[i].id);
            nok++;
        }
    }
    const char *ids = er_pg_array_done(&ok);
    if (rc == 0 && !ids)
        rc = ER_ENOMEM;
    const char *mp[] = {ids};
    if (rc == 0 && nok > 0 &&
        !run_ok(o, "UPDATE outbox_events SET published_at = now() WHERE id = ANY($1::uuid[])",
                1, mp))
        rc = ER_EUNAVAIL;
    for (int i = 0; rc == 0 && i < n; i++)
        if (rows[i].failed)
            mark_failure(o, &rows[i]);
    bool committed = rc == 0 && run_ok(o, "COMMIT", 0, NULL);
    if (!committed) {
        if (rc < 0 && rc != ER_EUNAVAIL) {
            char msg[300];
            snprintf(msg, sizeof msg, "enqueue refused: %s", err.message);
            set_error(o, true, msg);
            ER_LOG(ER_LOG_WARN, NULL, "outbox relay: %s", msg);
        } else if (rc < 0 && err.message[0]) {
            set_error(o, PQstatus(o->conn) == CONNECTION_OK, err.message);
        }
        run_ok(o, "ROLLBACK", 0, NULL);
    }
    if (jobs) {
        for (size_t i = 0; i < njobs; i++)
            er_job_fini(&jobs[i]);
        free(jobs);
    }
    PQclear(r);
    free(rows);
    er_pg_array_fini(&ok);
    if (!committed)
        return -1;
    pthread_mutex_lock(&o->mu);
    o->stats.connected = true;
    o->stats.last_error[0] = '\0';
    o->stats.events_published += nok;
    o->stats.jobs_enqueued += created;
    o->stats.row_failures += nfails;
    o->stats.lag_ms = oldest;
    pthread_mutex_unlock(&o->mu);
    return n;
}

static int64_t count_of(er_outbox *o, const char *sql, bool with_topics)
{
    const char *p[] = {o->topics};
    PGresult *r = run(o, sql, with_topics ? 1 : 0, p);
    int64_t v = r && PQntuples(r) == 1 ? er_pg_i64(r, 0, 0) : -1;
    PQclear(r);
    return v;
}

/* Backlog, lag, unroutable and set-aside rows, at most every COUNTS_MS and
 * only after a batch that was not full (index scans of unpublished rows). */
static void refresh_counts(er_outbox *o, int64_t mono)
{
    o->next_counts = mono + COUNTS_MS;
    PGresult *r = run(o,
                      "SELECT count(*), coalesce((extract(epoch FROM clock_timestamp()"
                      " - min(created_at)) * 1000)::bigint, 0) FROM outbox_events"
                      " WHERE published_at IS NULL AND set_aside_at IS NULL"
                      " AND topic = ANY($1::text[])",
                      1, (const char *const[]){o->topics});
    if (!r)
        return;
    int64_t backlog = er_pg_i64(r, 0, 0), lag = er_pg_i64(r, 0, 1);
    PQclear(r);
    int64_t unroutable = count_of(o,
                                  "SELECT count(*) FROM outbox_events WHERE published_at IS NULL"
                                  " AND set_aside_at IS NULL AND NOT (topic = ANY($1::text[]))",
                                  true);
    int64_t aside = count_of(o, "SELECT count(*) FROM outbox_events WHERE set_aside_at IS NOT NULL"
                                " AND published_at IS NULL", false);
    pthread_mutex_lock(&o->mu);
    o->stats.backlog = backlog;
    o->stats.lag_ms = lag;
    if (unroutable >= 0)
        o->stats.unroutable = unroutable;
    if (aside >= 0)
        o->stats.set_aside = aside;
    pthread_mutex_unlock(&o->mu);
    if (unroutable > 0 && mono >= o->next_warn) {
        o->next_warn = mono + WARN_MS;
        ER_LOG(ER_LOG_WARN, NULL,
               "outbox relay: %lld unpublished rows have a topic no route names; they stay "
               "unpublished (errand_outbox_unroutable_rows)", (long long)unroutable);
    }
}

/* Runs a DELETE of rows older than age_ms, CLEANUP_BATCH at a time (each
 * its own transaction), until one comes back short. */
static void delete_older(er_outbox *o, const char *sql, int64_t age_ms)
{
    char age[32], batch[16];
    snprintf(age, sizeof age, "%lld", (long long)age_ms);
    snprintf(batch, sizeof batch, "%d", CLEANUP_BATCH);
    for (int i = 0; i < 100 && !atomic_load(&o->stop); i++) {
        const char *p[] = {age, batch};
        PGresult *r = run(o, sql, 2, p);
        long n = r ? strtol(PQcmdTuples(r), NULL, 10) : 0;
        PQclear(r);
        if (n < CLEANUP_BATCH)
            break;
    }
}

static void housekeeping(er_outbox *o, int64_t mono)
{
    int64_t every = o->cfg.retention_ms / 4;
    every = every < o->cfg.processed_retention_ms / 4 ? every : o->cfg.processed_retention_ms / 4;
    o->next_housekeeping = mono + (every < HOUSEKEEPING_MS ? (every > 250 ? every : 250)
                                                           : HOUSEKEEPING_MS);
    delete_older(o, "DELETE FROM outbox_events WHERE id IN (SELECT id FROM outbox_events"
                    " WHERE published_at < now() - $1::bigint * interval '1 millisecond'"
                    " LIMIT $2::int)", o->cfg.retention_ms);
    delete_older(o, "DELETE FROM processed_messages WHERE ctid IN (SELECT ctid FROM"
                    " processed_messages WHERE processed_at < now() - $1::bigint"
                    " * interval '1 millisecond' LIMIT $2::int)", o->cfg.processed_retention_ms);
}

/* Whether the outbox database is errand's store's own (same cluster, same
 * database): a probe session with a random application_name on the store's
 * URL is looked for from the relay's session. Then the relay enqueues with
 * the store's SQL functions in its claim transaction, when it may call
 * them. */
static void detect_same_db(er_outbox *o)
{
    o->enqueue_sql[0] = o->bulk_sql[0] = '\0';
    if (!o->store_url)
        return;
    char *conninfo = NULL, schema[ER_PG_SCHEMA_MAX + 1];
    er_error err = {0};
    if (er_pg_url_parts(o->store_url, &conninfo, schema, &err) < 0)
        return;
    char tok[33], app[64];
    er_secure_token(tok);
    snprintf(app, sizeof app, "errand-probe-%s", tok);
    PGconn *probe = er_outbox_connect(conninfo, app, &err);
    free(conninfo);
    if (!probe)
        return;
    char *ident = PQescapeIdentifier(o->conn, schema, strlen(schema));
    char fn[160];
    snprintf(fn, sizeof fn, "%s.enqueue_bulk(text,jsonb)", ident ? ident : "");
    const char *p[] = {app, fn};
    PGresult *r = run(o,
                      "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1"
                      " AND datname = current_database()),"
                      " coalesce(has_function_privilege(to_regprocedure($2), 'EXECUTE'), false)",
                      2, p);
    bool same = r && PQgetvalue(r, 0, 0)[0] == 't', may = r && PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    PQfinish(probe);
    if (same && may && ident) {
        snprintf(o->enqueue_sql, sizeof o->enqueue_sql, "SELECT %s.enqueue_job($1, $2::jsonb)",
                 ident);
        snprintf(o->bulk_sql, sizeof o->bulk_sql,
                 "SELECT count(*) FROM %s.enqueue_bulk($1, $2::jsonb)", ident);
        ER_LOG(ER_LOG_INFO, NULL, "outbox relay: the outbox is in errand's own database: claim, "
                                  "enqueue and mark in one transaction");
    } else if (same) {
        ER_LOG(ER_LOG_WARN, NULL, "outbox relay: the outbox is in errand's own database, but its "
                                  "user may not call %s; relaying in two transactions", fn);
    }
    PQfreemem(ident);
    pthread_mutex_lock(&o->mu);
    o->stats.one_transaction = o->enqueue_sql[0] != '\0';
    pthread_mutex_unlock(&o->mu);
}

/* Connects and checks the schema; false (and the error kept) when not. */
static bool connect_db(er_outbox *o)
{
    er_error err = {0};
    o->conn = er_outbox_connect(o->url, "errand-outbox-relay", &err);
    int v = o->conn ? er_outbox_schema_version(o->conn, &err) : -1;
    if (o->conn && v >= 0 && v != ER_OUTBOX_SCHEMA_VERSION) {
        er_error_set(&err, ER_EINVAL, "outbox",
                     v == 0 ? "the outbox tables are not installed (errand outbox install --db URL)"
                            : "the outbox schema is version %d; this errand relays version %d"
                              " (errand outbox install --db URL migrates it)",
                     v, ER_OUTBOX_SCHEMA_VERSION);
        v = -1;
    }
    if (v >= 0 && run_ok(o, "LISTEN errand_outbox", 0, NULL)) {
        pthread_mutex_lock(&o->mu);
        o->cancel = PQgetCancel(o->conn);
        pthread_mutex_unlock(&o->mu);
        detect_same_db(o);
        set_error(o, true, NULL);
        ER_LOG(ER_LOG_INFO, NULL, "outbox relay: connected");
        return true;
    }
    if (err.message[0])
        set_error(o, false, err.message);
    pthread_mutex_lock(&o->mu);
    o->stats.connected = false;
    o->stats.connect_failures++;
    pthread_mutex_unlock(&o->mu);
    PQfinish(o->conn);
    o->conn = NULL;
    return false;
}

/* Drops the connection (and its cancel handle). */
static void disconnect(er_outbox *o)
{
    pthread_mutex_lock(&o->mu);
    PQfreeCancel(o->cancel);
    o->cancel = NULL;
    pthread_mutex_unlock(&o->mu);
    PQfinish(o->conn);
    o->conn = NULL;
}

static void *relay_main(void *arg)
{
    er_outbox *o = arg;
    int64_t backoff = BACKOFF_MIN_MS;
    char last_logged[256] = "";
    while (!atomic_load(&o->stop)) {
        if (!o->conn && !connect_db(o)) {
            er_outbox_stats st;
            er_outbox_get_stats(o, &st);
            if (strcmp(st.last_error, last_logged) != 0) {
                ER_LOG(ER_LOG_WARN, NULL, "outbox relay: %s; retrying every %lld ms at most",
                       st.last_error, (long long)BACKOFF_MAX_MS);
                snprintf(last_logged, sizeof last_logged, "%s", st.last_error);
            }
            wait_for(o, backoff);
            backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
            continue;
        }
        last_logged[0] = '\0';
        int n = relay_batch(o);
        int64_t mono = er_mono_ms();
        if (n < 0) {
            if (PQstatus(o->conn) != CONNECTION_OK)
                disconnect(o);
            wait_for(o, backoff);
            backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
            continue;
        }
        backoff = BACKOFF_MIN_MS;
        if (n == ER_OUTBOX_BATCH)
            continue; /* a full batch: more may be waiting */
        if (mono >= o->next_counts)
            refresh_counts(o, mono);
        if (mono >= o->next_housekeeping)
            housekeeping(o, mono);
        if (n == 0 && !atomic_load(&o->stop))
            wait_for(o, o->cfg.poll_ms);
    }
    disconnect(o);
    return NULL;
}

static char *topics_literal(const er_outbox_routes *r)
{
    er_pg_array a = {0};
    for (size_t i = 0; i < r->ntopics; i++)
        er_pg_array_str(&a, r->topics[i].topic);
    const char *s = er_pg_array_done(&a);
    char *out = s ? strdup(s) : NULL;
    er_pg_array_fini(&a);
    return out;
}

int er_outbox_start(er_engine *e, er_outbox_config *cfg, er_outbox **out, er_error *err)
{
    *out = NULL;
    er_outbox *o = calloc(1, sizeof *o);
    if (!o)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    o->engine = e;
    o->cfg = *cfg;
    memset(&cfg->routes, 0, sizeof cfg->routes);
    o->cfg.db_url = NULL;
    o->wake[0] = o->wake[1] = -1;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    er_rand_init_system(&o->rand);
    for (size_t i = 0; i < o->cfg.routes.ntopics; i++)
        if (o->cfg.routes.topics[i].nroutes > o->max_routes)
            o->max_routes = o->cfg.routes.topics[i].nroutes;
    o->url = strdup(cfg->db_url);
    o->store_url = cfg->store_url ? strdup(cfg->store_url) : NULL;
    o->topics = topics_literal(&o->cfg.routes);
    o->answer_dup = calloc((size_t)ER_OUTBOX_BATCH * (o->max_routes ? o->max_routes : 1) + 1, 1);
    if (!o->url || (cfg->store_url && !o->store_url) || !o->topics || !o->answer_dup || pipe2(o->wake, O_NONBLOCK | O_CLOEXEC) < 0 ||
        pthread_create(&o->thread, NULL, relay_main, o) != 0) {
        er_outbox_free(o);
        return er_error_set(err, ER_ENOMEM, "", "cannot start the outbox relay");
    }
    o->started = true;
    *out = o;
    return 0;
}

void er_outbox_stop(er_outbox *o)
{
    if (!o)
        return;
    atomic_store(&o->stop, true);
    if (o->wake[1] >= 0 && write(o->wake[1], "x", 1) < 0 && errno != EAGAIN) {
        /* the relay still sees stop at its next wake-up */
    }
}

void er_outbox_free(er_outbox *o)
{
    if (!o)
        return;
    er_outbox_stop(o);
    pthread_mutex_lock(&o->mu);
    o->loop_gone = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (o->started) {
        /* a statement the database does not answer (a lock wait, a
         * partition) is cancelled rather than waited for */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += STOP_CANCEL_MS / 1000;
        if (pthread_timedjoin_np(o->thread, NULL, &until) != 0) {
            pthread_mutex_lock(&o->mu);
            char buf[256];
            if (o->cancel)
                PQcancel(o->cancel, buf, sizeof buf);
            pthread_mutex_unlock(&o->mu);
            ER_LOG(ER_LOG_WARN, NULL, "outbox relay: still busy %d s after stop; its statement "
                                      "was cancelled", STOP_CANCEL_MS / 1000);
            pthread_join(o->thread, NULL);
        }
    }
    for (int i = 0; i < 2; i++)
        if (o->wake[i] >= 0)
            close(o->wake[i]);
    er_outbox_routes_fini(&o->cfg.routes);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->answer_dup);
    free(o->topics);
    free(o->url);
    free(o->store_url);
    free(o);
}

void er_outbox_get_stats(er_outbox *o, er_outbox_stats *out)
{
    pthread_mutex_lock(&o->mu);
    *out = o->stats;
    pthread_mutex_unlock(&o->mu);
}
