/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's connections: URL options, the per-URL connection
 * pool, schema migrations under an advisory lock, transactions (BEGIN reads
 * the store clock in the same round trip), prepared statements, the mapping
 * of SQLSTATEs to ER_E* codes and of rows to er_job. An er_store holds one
 * pooled connection and is used by one thread at a time.
 */
#include "store/postgres/pg_int.h"
#include "util/buf.h"
#include "util/log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_SIZE_DEFAULT 4
#define POOL_SIZE_MAX 1000
#define BUSY_TIMEOUT_DEFAULT_MS 5000
#define SCHEMA_DEFAULT "errand"
#define SCHEMA_MAX 57 /* "<schema>_ready" must fit a 63-byte channel name */
#define QCACHE_MAX 64

struct er_pg_pool {
    char *key;      /* the URL as given */
    char *conninfo; /* the URL without errand's options, for libpq */
    char schema[SCHEMA_MAX + 1];
    bool caller_clock;
    int size, open;
    bool migrated;
    er_pg_conn *idle;
    pthread_cond_t cv;
    struct er_pg_pool *next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static er_pg_pool *g_pools;

static int nomem(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* ---- parameters and arrays ---- */

void er_pg_p_str(er_pg_params *p, const char *s)
{
    p->v[p->n++] = s;
}

void er_pg_p_i64(er_pg_params *p, int64_t v)
{
    snprintf(p->buf[p->n], sizeof p->buf[p->n], "%" PRId64, v);
    p->v[p->n] = p->buf[p->n];
    p->n++;
}

void er_pg_p_f64(er_pg_params *p, double v)
{
    snprintf(p->buf[p->n], sizeof p->buf[p->n], "%.17g", v);
    p->v[p->n] = p->buf[p->n];
    p->n++;
}

void er_pg_p_bool(er_pg_params *p, bool v)
{
    p->v[p->n++] = v ? "t" : "f";
}

static void arr_put(er_pg_array *a, const char *s, size_t n)
{
    if (a->oom)
        return;
    if (ER_GROW(&a->buf, &a->cap, a->len + n + 3, ER_PG_ARRAY_MAX) < 0) {
        a->oom = true;
        return;
    }
    memcpy(a->buf + a->len, s, n);
    a->len += n;
    a->buf[a->len] = '\0';
}

static void arr_sep(er_pg_array *a)
{
    arr_put(a, a->n++ ? "," : "{", 1);
}

void er_pg_array_str(er_pg_array *a, const char *s)
{
    arr_sep(a);
    if (!s) {
        arr_put(a, "NULL", 4);
        return;
    }
    arr_put(a, "\"", 1);
    for (const char *c = s; *c; c++) {
        if (*c == '"' || *c == '\\')
            arr_put(a, "\\", 1);
        arr_put(a, c, 1);
    }
    arr_put(a, "\"", 1);
}

void er_pg_array_i64(er_pg_array *a, int64_t v)
{
    char b[32];
    int n = snprintf(b, sizeof b, "%" PRId64, v);
    arr_sep(a);
    arr_put(a, b, (size_t)n);
}

const char *er_pg_array_done(er_pg_array *a)
{
    if (a->n == 0)
        arr_put(a, "{", 1);
    arr_put(a, "}", 1);
    return a->oom ? NULL : a->buf;
}

void er_pg_array_fini(er_pg_array *a)
{
    free(a->buf);
    memset(a, 0, sizeof *a);
}

/* ---- errors and statements ---- */

int er_pg_error(er_store *s, const PGresult *res, const char *what, er_error *err)
{
    PGconn *pg = s && s->c ? s->c->pg : NULL;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : NULL;
    if ((!msg || !*msg) && pg)
        msg = PQerrorMessage(pg);
    if (!msg || !*msg)
        msg = "unknown error";
    int code = ER_EINTERNAL;
    if (!state || (pg && PQstatus(pg) != CONNECTION_OK))
        code = ER_EUNAVAIL; /* no answer from the server */
    else if (strcmp(state, "53100") == 0)
        code = ER_EFULL;
    else if (strcmp(state, "53200") == 0)
        code = ER_ENOMEM;
    else if (strncmp(state, "08", 2) == 0 || strncmp(state, "53", 2) == 0 ||
             strncmp(state, "57", 2) == 0 || strncmp(state, "58", 2) == 0 ||
             strncmp(state, "40", 2) == 0 || strncmp(state, "55", 2) == 0 ||
             strncmp(state, "25", 2) == 0 || strncmp(state, "3D", 2) == 0 ||
             strncmp(state, "28", 2) == 0)
        code = ER_EUNAVAIL; /* connection, resources, shutdown, lock timeout, deadlock */
    int n = (int)strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        n--;
    return er_error_set(err, code, "", "store: %s: %.*s (sqlstate %s)", what, n, msg,
                        state ? state : "none");
}

static int check_res(er_store *s, PGresult *res, const char *what, er_error *err)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return 0;
    return er_pg_error(s, res, what, err);
}

static int ensure_conn(er_store *s, er_error *err);

int er_pg_exec(er_store *s, int id, const er_pg_params *p, PGresult **res, er_error *err)
{
    *res = NULL;
    if (!s->in_tx) {
        int crc = ensure_conn(s, err); /* reader connections never call begin */
        if (crc < 0)
            return crc;
    }
    PGconn *pg = s->c->pg;
    char name[16];
    snprintf(name, sizeof name, "e%d", id);
    if (!s->c->prepared[id]) {
        PGresult *r = PQprepare(pg, name, er_pg_sql[id], 0, NULL);
        int rc = check_res(s, r, "prepare", err);
        PQclear(r);
        if (rc < 0)
            return rc;
        s->c->prepared[id] = true;
    }
    PGresult *r = PQexecPrepared(pg, name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL, 0);
    int rc = check_res(s, r, "query", err);
    if (rc < 0) {
        PQclear(r);
        return rc;
    }
    *res = r;
    return 0;
}

int er_pg_run(er_store *s, int id, const er_pg_params *p, int64_t *affected, er_error *err)
{
    PGresult *r;
    int rc = er_pg_exec(s, id, p, &r, err);
    if (rc == 0 && affected) {
        const char *t = PQcmdTuples(r);
        *affected = t && *t ? strtoll(t, NULL, 10) : 0;
    }
    PQclear(r);
    return rc;
}

/* Runs a simple (possibly multi-statement) query; the last result in *out
 * when given. */
static int simple(er_store *s, const char *sql, const char *what, PGresult **out,
                  er_error *err)
{
    PGresult *r = PQexec(s->c->pg, sql);
    int rc = check_res(s, r, what, err);
    if (rc == 0 && out)
        *out = r;
    else
        PQclear(r);
    return rc;
}

int64_t er_pg_i64(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return 0;
    return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* ---- transactions ---- */

static void tx_caches_clear(er_store *s)
{
    for (size_t i = 0; i < s->nqc; i++)
        free(s->qc[i].name);
    s->nqc = 0;
    for (size_t i = 0; i < s->nnotified; i++)
        free(s->notified[i]);
    free(s->notified);
    s->notified = NULL;
    s->nnotified = 0;
}

static int session_setup(er_store *s, er_durability dur, int busy_ms, er_error *err);

/* Reconnects a connection that broke (server restart, network); prepared
 * statements are gone with the old session. */
static int ensure_conn(er_store *s, er_error *err)
{
    if (PQstatus(s->c->pg) == CONNECTION_OK)
        return 0;
    PQreset(s->c->pg);
    memset(s->c->prepared, 0, sizeof s->c->prepared);
    s->c->maint_lock = false; /* the old session took its locks with it */
    if (PQstatus(s->c->pg) != CONNECTION_OK)
        return er_pg_error(s, NULL, "reconnect", err);
    return session_setup(s, s->durability, s->busy_ms, err);
}

static int pg_begin(er_store *s, er_error *err)
{
    if (s->in_tx)
        return er_error_set(err, ER_EINTERNAL, "", "store: a transaction is already open");
    int rc = ensure_conn(s, err);
    if (rc < 0)
        return rc;
    tx_caches_clear(s);
    PGresult *r = NULL;
    rc = simple(s, "BEGIN; SELECT (extract(epoch FROM now()) * 1000)::bigint", "begin", &r,
                err);
    if (rc < 0) {
        if (PQtransactionStatus(s->c->pg) != PQTRANS_IDLE)
            PQclear(PQexec(s->c->pg, "ROLLBACK"));
        return rc;
    }
    s->tx_now = er_pg_i64(r, 0, 0);
    PQclear(r);
    s->in_tx = true;
    return 0;
}

static int pg_commit(er_store *s, er_error *err)
{
    if (!s->in_tx)
        return er_error_set(err, ER_EINTERNAL, "", "store: no transaction is open");
    PGresult *r = PQexec(s->c->pg, "COMMIT");
    int rc = check_res(s, r, "commit", err);
    /* COMMIT of a failed transaction answers ROLLBACK */
    if (rc == 0 && strcmp(PQcmdStatus(r), "COMMIT") != 0)
        rc = er_error_set(err, ER_EUNAVAIL, "", "store: commit: the transaction was aborted");
    PQclear(r);
    if (PQtransactionStatus(s->c->pg) == PQTRANS_IDLE) {
        s->in_tx = false;
        tx_caches_clear(s);
    }
    return rc;
}

/* Safe after a failed commit or statement, and with no transaction open. */
static void pg_rollback(er_store *s)
{
    PGconn *pg = s->c->pg;
    if (PQstatus(pg) == CONNECTION_OK && PQtransactionStatus(pg) != PQTRANS_IDLE)
        PQclear(PQexec(pg, "ROLLBACK"));
    s->in_tx = false;
    tx_caches_clear(s);
}

int er_pg_op_begin(er_store *s, bool *own, er_error *err)
{
    *own = !s->in_tx;
    return *own ? pg_begin(s, err) : 0;
}

int er_pg_op_end(er_store *s, bool own, int rc, er_error *err)
{
    if (!own)
        return rc;
    if (rc == 0)
        rc = pg_commit(s, err);
    if (rc < 0)
        pg_rollback(s);
    return rc;
}

int64_t er_pg_now(const er_store *s, int64_t now)
{
    return s->caller_clock ? now : s->tx_now;
}

bool er_pg_notified(const er_store *s, const char *queue)
{
    for (size_t i = 0; i < s->nnotified; i++)
        if (strcmp(s->notified[i], queue) == 0)
            return true;
    return false;
}

/* On ENOMEM the queue is not recorded: it is notified again, not lost. */
void er_pg_mark_notified(er_store *s, const char *queue)
{
    if (er_pg_notified(s, queue))
        return;
    char **v = realloc(s->notified, (s->nnotified + 1) * sizeof *v);
    if (!v)
        return;
    s->notified = v;
    if ((v[s->nnotified] = strdup(queue)))
        s->nnotified++;
}

er_pg_qs *er_pg_qs_find(er_store *s, const char *queue)
{
    for (size_t i = 0; i < s->nqc; i++)
        if (strcmp(s->qc[i].name, queue) == 0)
            return &s->qc[i];
    return NULL;
}

int er_pg_qs_put(er_store *s, const char *queue, const er_queue_settings *qs)
{
    er_pg_qs *e = er_pg_qs_find(s, queue);
    if (!e) {
        if (s->nqc == QCACHE_MAX) {
            for (size_t i = 0; i < s->nqc; i++)
                free(s->qc[i].name);
            s->nqc = 0;
        }
        char *name = strdup(queue);
        if (!name)
            return -1;
        e = &s->qc[s->nqc++];
        e->name = name;
    }
    e->settings = *qs;
    return 0;
}

/* ---- rows ---- */

void er_pg_job_json(const er_job *j, er_jsonw *w)
{
    er_jsonw_begin_object(w);
    for (int i = 0; i < ER_JOB_NCOLS; i++) {
        const er_job_col *c = &er_job_cols[i];
        size_t n;
        const char *t;
        er_jsonw_key(w, c->name);
        switch (c->kind) {
        case ER_COL_STR:
        case ER_COL_TEXT:
        case ER_COL_PAYLOAD:
            t = er_job_col_text(j, c, &n);
            er_jsonw_str(w, t);
            break;
        case ER_COL_F64:
            er_jsonw_double(w, er_job_col_f64(j, c));
            break;
        default:
            er_jsonw_int(w, er_job_col_int(j, c));
            break;
        }
    }
    er_jsonw_end_object(w);
}

int er_pg_row_job(const PGresult *res, int row, int c0, er_job *j, er_error *err)
{
    int bad = 0;
    for (int i = 0; i < ER_JOB_NCOLS; i++) {
        const er_job_col *c = &er_job_cols[i];
        int k = c0 + i;
        switch (c->kind) {
        case ER_COL_STR:
        case ER_COL_TEXT:
        case ER_COL_PAYLOAD:
            if (er_job_col_set_text(j, c, PQgetisnull(res, row, k) ? NULL : PQgetvalue(res, row, k),
                                    (size_t)PQgetlength(res, row, k)) < 0)
                bad = 1;
            break;
        case ER_COL_F64:
            er_job_col_set_f64(j, c, strtod(PQgetvalue(res, row, k), NULL));
            break;
        default:
            er_job_col_set_int(j, c, er_pg_i64(res, row, k));
            break;
        }
    }
    if (bad)
        return nomem(err);
    return 0;
}

int er_pg_load_job(er_store *s, const char *id, bool lock, er_job *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, id);
    PGresult *r;
    int rc = er_pg_exec(s, lock ? ER_PG_GET_JOB_LOCK : ER_PG_GET_JOB, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        rc = er_error_set(err, ER_ENOTFOUND, "id", "job '%s' not found", id);
    } else {
        er_job_init(out);
        rc = er_pg_row_job(r, 0, 0, out, err);
        if (rc < 0)
            er_job_fini(out);
    }
    PQclear(r);
    return rc;
}

/* ---- URL, pool, migrations ---- */

static bool schema_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SCHEMA_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

/* Splits errand's options off the URL into a new pool (not yet linked). */
static int pool_new(const char *url, er_pg_pool **out, er_error *err)
{
    er_pg_pool *pl = calloc(1, sizeof *pl);
    size_t ulen = strlen(url);
    if (!pl || !(pl->key = strdup(url)) || !(pl->conninfo = malloc(ulen + 1))) {
        if (pl)
            free(pl->key);
        free(pl);
        return nomem(err);
    }
    snprintf(pl->schema, sizeof pl->schema, "%s", SCHEMA_DEFAULT);
    pl->size = POOL_SIZE_DEFAULT;
    const char *q = strchr(url, '?');
    size_t base = q ? (size_t)(q - url) : ulen;
    memcpy(pl->conninfo, url, base);
    size_t len = base;
    int rc = 0;
    int kept = 0;
    for (const char *p = q ? q + 1 : NULL; p && *p && rc == 0;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        char kv[256];
        if (n >= sizeof kv) {
            kv[0] = '\0';
        } else {
            memcpy(kv, p, n);
            kv[n] = '\0';
        }
        const char *val = strchr(kv, '=') ? strchr(kv, '=') + 1 : "";
        if (strncmp(kv, "schema=", 7) == 0) {
            if (!schema_ok(val))
                rc = er_error_set(err, ER_EINVAL, "store",
                                  "store: schema must be 1..%d characters of [a-z0-9_], "
                                  "not starting with a digit",
                                  SCHEMA_MAX);
            else
                snprintf(pl->schema, sizeof pl->schema, "%s", val);
        } else if (strncmp(kv, "pool_size=", 10) == 0) {
            char *end;
            errno = 0;
            long v = strtol(val, &end, 10);
            if (errno || *end || end == val || v < 1 || v > POOL_SIZE_MAX)
                rc = er_error_set(err, ER_EINVAL, "store", "store: pool_size must be 1..%d",
                                  POOL_SIZE_MAX);
            else
                pl->size = (int)v;
        } else if (strncmp(kv, "clock=", 6) == 0) {
            if (strcmp(val, "caller") == 0)
                pl->caller_clock = true;
            else if (strcmp(val, "store") == 0)
                pl->caller_clock = false;
            else
                rc = er_error_set(err, ER_EINVAL, "store",
                                  "store: clock must be \"store\" or \"caller\"");
        } else {
            pl->conninfo[len++] = kept++ ? '&' : '?';
            memcpy(pl->conninfo + len, p, n);
            len += n;
        }
        p = amp ? amp + 1 : NULL;
    }
    pl->conninfo[len] = '\0';
    if (rc < 0) {
        free(pl->key);
        free(pl->conninfo);
        free(pl);
        return rc;
    }
    pthread_cond_init(&pl->cv, NULL);
    *out = pl;
    return 0;
}

static int session_setup(er_store *s, er_durability dur, int busy_ms, er_error *err)
{
    char *ident = PQescapeIdentifier(s->c->pg, s->pool->schema, strlen(s->pool->schema));
    if (!ident)
        return nomem(err);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SET search_path TO %s; SET lock_timeout = %d; SET synchronous_commit = %s;"
             " SET client_min_messages = warning",
             ident,
             busy_ms, dur == ER_DURABILITY_NORMAL ? "off" : "on");
    PQfreemem(ident);
    return simple(s, sql, "session", NULL, err);
}

/* The limits row errand.enqueue_job validates with: this server's, written
 * at every start inside the migration's transaction. Nodes that disagree
 * (a rolling change of --payload-max) follow the one that started last;
 * the starting node logs the values it replaced. */
static int write_limits(er_store *s, const er_job_limits *lim, er_error *err)
{
    er_job_defaults d;
    er_job_defaults_server(&d);
    long long pmax = lim && lim->payload_max ? (long long)lim->payload_max
                                             : (long long)ER_PAYLOAD_MAX_DEFAULT;
    PGresult *r = NULL;
    int rc = simple(s, "SELECT payload_max FROM limits", "limits", &r, err);
    if (rc == 0 && PQntuples(r) == 1 && er_pg_i64(r, 0, 0) != pmax)
        ER_LOG(ER_LOG_WARN, NULL,
               "limits: payload_max was %lld (written by another errand server), now %lld",
               (long long)er_pg_i64(r, 0, 0), pmax);
    PQclear(r);
    if (rc < 0)
        return rc;
    char sql[1536];
    snprintf(sql, sizeof sql,
             "INSERT INTO limits (id, payload_max, name_max, id_max, priority_max,"
             " max_attempts_max, delay_max_ms, timeout_max_ms, bulk_max, field_max, message_max,"
             " default_max_attempts, default_backoff_type, default_backoff_delay_ms,"
             " default_backoff_max_ms, default_backoff_jitter, default_timeout_ms,"
             " default_priority, written_by, written_at) VALUES (true, %lld, %d, %d, %d, %d, %lld,"
             " %lld, %d, %d, %d, %d, %d, %lld, %lld, %.17g, %lld, %d, 'errand %s', now())"
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
             " default_priority = excluded.default_priority, written_by = excluded.written_by,"
             " written_at = excluded.written_at",
             pmax, ER_NAME_MAX, ER_ID_MAX, ER_PRIORITY_MAX, ER_MAX_ATTEMPTS_MAX,
             (long long)ER_DELAY_MAX_MS, (long long)ER_TIMEOUT_MAX_MS, ER_BULK_MAX,
             ER_FIELD_MAX - 1, ER_MESSAGE_MAX - 1, d.max_attempts, (int)d.backoff.type,
             (long long)d.backoff.delay_ms, (long long)d.backoff.max_delay_ms, d.backoff.jitter,
             (long long)d.timeout_ms, d.priority, ER_VERSION);
    return simple(s, sql, "limits", NULL, err);
}

/* Creates or migrates the schema in one transaction that holds an advisory
 * lock on it, so servers starting together migrate one after the other. */
static int migrate(er_store *s, const er_job_limits *lim, er_error *err)
{
    const char *schema = s->pool->schema;
    char *ident = PQescapeIdentifier(s->c->pg, schema, strlen(schema));
    char *lit = PQescapeLiteral(s->c->pg, schema, strlen(schema));
    if (!ident || !lit) {
        PQfreemem(ident);
        PQfreemem(lit);
        return nomem(err);
    }
    char sql[1024];
    snprintf(sql, sizeof sql,
             "BEGIN; SELECT pg_advisory_xact_lock(hashtext('errand.migrate'), hashtext(%s));"
             " CREATE SCHEMA IF NOT EXISTS %s; SET LOCAL search_path TO %s;"
             " CREATE TABLE IF NOT EXISTS migrations (version integer PRIMARY KEY,"
             " applied_at timestamptz NOT NULL DEFAULT now());"
             " SELECT coalesce(max(version), 0) FROM migrations",
             lit, ident, ident);
    PQfreemem(ident);
    PQfreemem(lit);
    PGresult *r = NULL;
    int rc = simple(s, sql, "migration", &r, err);
    int version = rc == 0 ? (int)er_pg_i64(r, 0, 0) : 0;
    PQclear(r);
    if (rc == 0 && version > er_pg_schema_version)
        rc = er_error_set(err, ER_EINVAL, "store",
                          "store schema version %d is newer than this errand supports (%d)",
                          version, er_pg_schema_version);
    for (int v = version; rc == 0 && v < er_pg_schema_version; v++) {
        rc = simple(s, er_pg_migrations[v], "migration", NULL, err);
        if (rc == 0) {
            snprintf(sql, sizeof sql, "INSERT INTO migrations (version) VALUES (%d)", v + 1);
            rc = simple(s, sql, "migration", NULL, err);
        }
    }
    if (rc == 0)
        rc = write_limits(s, lim, err);
    if (rc == 0)
        rc = simple(s, "COMMIT", "migration", NULL, err);
    if (PQtransactionStatus(s->c->pg) != PQTRANS_IDLE)
        PQclear(PQexec(s->c->pg, "ROLLBACK"));
    return rc;
}

/* Takes an idle connection of the pool, or makes room for a new one
 * (*fresh), waiting up to wait_ms for one to be given back. */
static int pool_take(er_pg_pool *pl, int wait_ms, er_pg_conn **c, bool *fresh, er_error *err)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    *c = NULL;
    *fresh = false;
    for (;;) {
        if (pl->idle) {
            *c = pl->idle;
            pl->idle = (*c)->next;
            (*c)->next = NULL;
            return 0;
        }
        if (pl->open < pl->size) {
            pl->open++;
            *fresh = true;
            return 0;
        }
        if (pthread_cond_timedwait(&pl->cv, &g_mu, &until) == ETIMEDOUT)
            return er_error_set(err, ER_EUNAVAIL, "store",
                                "store: all %d pooled connections are in use (pool_size)",
                                pl->size);
    }
}

static void conn_free(er_pg_conn *c)
{
    if (c) {
        PQfinish(c->pg);
        free(c);
    }
}

static void pg_close(er_store *s)
{
    if (!s)
        return;
    if (s->c) {
        pg_rollback(s);
        /* a session holding the maintenance lease is closed, which frees it */
        bool reuse = PQstatus(s->c->pg) == CONNECTION_OK &&
                     PQtransactionStatus(s->c->pg) == PQTRANS_IDLE && !s->c->maint_lock;
        pthread_mutex_lock(&g_mu);
        if (reuse) {
            s->c->next = s->pool->idle;
            s->pool->idle = s->c;
        } else {
            s->pool->open--;
        }
        pthread_cond_signal(&s->pool->cv);
        pthread_mutex_unlock(&g_mu);
        if (!reuse)
            conn_free(s->c);
    }
    tx_caches_clear(s);
    free(s->qc);
    free(s);
}

static int pg_open(const char *url, const er_store_options *opt, er_store **out, er_error *err)
{
    *out = NULL;
    int busy = opt && opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms : BUSY_TIMEOUT_DEFAULT_MS;
    er_durability dur = opt ? opt->durability : ER_DURABILITY_FULL;
    er_store *s = calloc(1, sizeof *s);
    if (!s || !(s->qc = calloc(QCACHE_MAX, sizeof *s->qc))) {
        free(s);
        return nomem(err);
    }
    pthread_mutex_lock(&g_mu);
    er_pg_pool *pl = g_pools;
    while (pl && strcmp(pl->key, url) != 0)
        pl = pl->next;
    int rc = 0;
    if (!pl && (rc = pool_new(url, &pl, err)) == 0) {
        pl->next = g_pools;
        g_pools = pl;
    }
    bool fresh = false;
    if (rc == 0)
        rc = pool_take(pl, busy, &s->c, &fresh, err);
    pthread_mutex_unlock(&g_mu);
    if (rc < 0) {
        free(s->qc);
        free(s);
        return rc;
    }
    s->pool = pl;
    s->caller_clock = pl->caller_clock;
    s->durability = dur;
    s->busy_ms = busy;
    if (fresh) {
        s->c = calloc(1, sizeof *s->c);
        if (!s->c || !(s->c->pg = PQconnectdb(pl->conninfo))) {
            rc = nomem(err);
        } else if (PQstatus(s->c->pg) != CONNECTION_OK) {
            const char *m = PQerrorMessage(s->c->pg);
            int n = (int)strlen(m);
            while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' '))
                n--;
            rc = er_error_set(err, ER_EUNAVAIL, "store", "store: cannot connect: %.*s", n, m);
        }
    }
    if (rc == 0)
        rc = session_setup(s, dur, busy, err);
    if (rc == 0) {
        pthread_mutex_lock(&g_mu);
        bool need = !pl->migrated;
        pthread_mutex_unlock(&g_mu);
        if (need && (rc = migrate(s, opt ? &opt->limits : NULL, err)) == 0) {
            pthread_mutex_lock(&g_mu);
            pl->migrated = true;
            pthread_mutex_unlock(&g_mu);
        }
    }
    if (rc < 0) {
        if (err && !err->field[0])
            snprintf(err->field, sizeof err->field, "store");
        /* the slot this open took is given back; its connection is not */
        pthread_mutex_lock(&g_mu);
        pl->open--;
        pthread_cond_signal(&pl->cv);
        pthread_mutex_unlock(&g_mu);
        conn_free(s->c);
        free(s->qc);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Maintenance leadership: a session-level advisory lock keyed by the
 * schema, held by the writer's connection for as long as its session lives.
 * PostgreSQL frees it when the session ends: at once when the process dies
 * (the socket closes), after the TCP keepalive probes set here when the
 * host vanishes (10 s idle + 3 x 5 s), so another node's next try wins.
 * Maintenance runs in transactions on this same connection, so a leader
 * whose session ended cannot commit work while another node holds it. */
static int pg_maintenance_lease(er_store *s, bool *leader, er_error *err)
{
    *leader = false;
    if (s->in_tx)
        return er_error_set(err, ER_EINTERNAL, "", "store: maintenance lease inside a transaction");
    int rc = ensure_conn(s, err);
    if (rc < 0)
        return rc;
    if (s->c->maint_lock) {
        *leader = true;
        return 0;
    }
    const char *v[1] = {s->pool->schema};
    PGresult *r = PQexecParams(s->c->pg,
                               "SELECT pg_try_advisory_lock(hashtext('errand.maintenance'),"
                               " hashtext($1))",
                               1, NULL, v, NULL, NULL, 0);
    rc = check_res(s, r, "maintenance lease", err);
    if (rc == 0 && strcmp(PQgetvalue(r, 0, 0), "t") == 0)
        s->c->maint_lock = true;
    PQclear(r);
    if (rc == 0 && s->c->maint_lock)
        /* over TCP: the server notices a vanished leader host by keepalives */
        rc = simple(s,
                    "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5;"
                    " SET tcp_keepalives_count = 3",
                    "maintenance lease", NULL, err);
    *leader = s->c->maint_lock;
    return rc < 0 && !*leader ? rc : 0;
}

void er_postgres_pool_drain(void)
{
    pthread_mutex_lock(&g_mu);
    er_pg_pool **pp = &g_pools;
    while (*pp) {
        er_pg_pool *pl = *pp;
        while (pl->idle) {
            er_pg_conn *c = pl->idle;
            pl->idle = c->next;
            pl->open--;
            conn_free(c);
        }
        if (pl->open == 0) {
            *pp = pl->next;
            pthread_cond_destroy(&pl->cv);
            free(pl->key);
            free(pl->conninfo);
            free(pl);
        } else {
            pp = &pl->next;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

const er_store_ops er_postgres_ops = {
    .name = "postgres",
    .open = pg_open,
    .close = pg_close,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .enqueue = er_pg_enqueue,
    .fetch = er_pg_fetch,
    .heartbeat = er_pg_heartbeat,
    .complete = er_pg_complete,
    .fail = er_pg_fail,
    .release = er_pg_release,
    .get_job = er_pg_get_job,
    .cancel = er_pg_cancel,
    .list_jobs = er_pg_list_jobs,
    .list_queues = er_pg_list_queues,
    .get_queue_settings = er_pg_get_queue_settings,
    .put_queue_settings = er_pg_put_queue_settings,
    .list_dead = er_pg_list_dead,
    .redrive = er_pg_redrive,
    .delete_dead = er_pg_delete_dead,
    .promote = er_pg_promote,
    .reap = er_pg_reap,
    .retention = er_pg_retention,
    .next_due = er_pg_next_due,
    .enqueue_many = er_pg_enqueue_many,
    .scheduler_put = er_pg_scheduler_put,
    .scheduler_get = er_pg_scheduler_get,
    .scheduler_list = er_pg_scheduler_list,
    .scheduler_delete = er_pg_scheduler_delete,
    .scheduler_due = er_pg_scheduler_due,
    .scheduler_advance = er_pg_scheduler_advance,
    .lease_acquire = er_pg_lease_acquire,
    .lease_renew = er_pg_lease_renew,
    .lease_complete = er_pg_lease_complete,
    .lease_release = er_pg_lease_release,
    .cursor_get = er_pg_cursor_get,
    .cursor_cas = er_pg_cursor_cas,
    .maintenance_lease = pg_maintenance_lease,
    .listener_open = er_pg_listener_open,
    .listener_fd = er_pg_listener_fd,
    .listener_poll = er_pg_listener_poll,
    .listener_close = er_pg_listener_close,
    .release_idle = er_postgres_pool_drain,
};
