/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's connections: URL options (schema, pool_size,
 * clock), the per-URL connection pool, open and close, the session
 * settings (again after a reconnect), the maintenance lease and the store's
 * function table. Running SQL and transactions are in pg_exec.c, migrations
 * in pg_migrate.c, rows in pg_rows.c. An er_store holds one pooled
 * connection and is used by one thread at a time.
 */
#include "store/postgres/pg_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_SIZE_DEFAULT 4
#define POOL_SIZE_MAX 1000
#define BUSY_TIMEOUT_DEFAULT_MS 5000
#define SCHEMA_DEFAULT "errand"
#define SCHEMA_MAX ER_PG_SCHEMA_MAX
_Static_assert(SCHEMA_MAX + 6 <= 63, "\"<schema>_ready\" must fit a 63-byte channel name");

struct er_pg_pool {
    char *key;      /* the URL as given */
    char *conninfo; /* the URL without errand's options, for libpq */
    char schema[SCHEMA_MAX + 1];
    bool caller_clock;
    int size, open;
    bool migrated;
    int found_version; /* the schema version the migration found */
    er_pg_conn *idle;
    pthread_cond_t cv;
    struct er_pg_pool *next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static er_pg_pool *g_pools;

/* ---- URL, pool, sessions ---- */

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
        return er_pg_nomem(err);
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

int er_pg_url_parts(const char *url, char **conninfo, char schema[ER_PG_SCHEMA_MAX + 1],
                    er_error *err)
{
    er_pg_pool *pl;
    int rc = pool_new(url, &pl, err);
    if (rc < 0)
        return rc;
    *conninfo = pl->conninfo;
    snprintf(schema, ER_PG_SCHEMA_MAX + 1, "%s", pl->schema);
    pthread_cond_destroy(&pl->cv);
    free(pl->key);
    free(pl);
    return 0;
}

static int session_setup(er_store *s, er_durability dur, int busy_ms, er_error *err)
{
    char *ident = PQescapeIdentifier(s->c->pg, s->pool->schema, strlen(s->pool->schema));
    if (!ident)
        return er_pg_nomem(err);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SET search_path TO %s; SET lock_timeout = %d; SET synchronous_commit = %s;"
             " SET client_min_messages = warning",
             ident,
             busy_ms, dur == ER_DURABILITY_NORMAL ? "off" : "on");
    PQfreemem(ident);
    int rc = er_pg_simple(s, sql, "session", NULL, err);
    /* without it (no TEMP privilege) enqueue_many sends JSON instead */
    er_error ignored;
    s->c->bulk_table = rc == 0 && er_pg_simple(s, er_pg_bulk_table_sql, "session", NULL,
                                               &ignored) == 0;
    return rc;
}

/* Reconnects a connection that broke (server restart, network); prepared
 * statements are gone with the old session. */
int er_pg_ensure_conn(er_store *s, er_error *err)
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
        er_pg_rollback(s);
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
    er_pg_tx_caches_clear(s);
    er_pg_fq_clear(s);
    free(s->fq);
    free(s->qc);
    free(s->done);
    free(s);
}

static int pg_open(const char *url, const er_store_options *opt, er_store **out, er_error *err)
{
    *out = NULL;
    int busy = opt && opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms : BUSY_TIMEOUT_DEFAULT_MS;
    er_durability dur = opt ? opt->durability : ER_DURABILITY_FULL;
    er_store *s = calloc(1, sizeof *s);
    if (!s || !(s->qc = calloc(ER_PG_QCACHE_MAX, sizeof *s->qc))) {
        free(s);
        return er_pg_nomem(err);
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
    s->dedup_window_ms = opt ? opt->dedup_window_ms : ER_DEDUP_WINDOW_DEFAULT_MS;
    s->reply_max = opt && opt->reply_max ? opt->reply_max : ER_REPLY_MAX_DEFAULT;
    s->durability = dur;
    s->busy_ms = busy;
    if (fresh) {
        s->c = calloc(1, sizeof *s->c);
        if (!s->c || !(s->c->pg = PQconnectdb(pl->conninfo))) {
            rc = er_pg_nomem(err);
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
        int from = 0;
        if (need && (rc = er_pg_migrate(s, pl->schema, opt ? &opt->limits : NULL,
                                        opt ? opt->migrate : ER_MIGRATE_AUTO, &from, err)) == 0) {
            pthread_mutex_lock(&g_mu);
            pl->migrated = true;
            pl->found_version = from;
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
    int rc = er_pg_ensure_conn(s, err);
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
    rc = er_pg_check(s, r, "maintenance lease", err);
    if (rc == 0 && strcmp(PQgetvalue(r, 0, 0), "t") == 0)
        s->c->maint_lock = true;
    PQclear(r);
    if (rc == 0 && s->c->maint_lock)
        /* over TCP: the server notices a vanished leader host by keepalives */
        rc = er_pg_simple(s,
                    "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5;"
                    " SET tcp_keepalives_count = 3",
                    "maintenance lease", NULL, err);
    *leader = s->c->maint_lock;
    return rc < 0 && !*leader ? rc : 0;
}

static int64_t pg_connections(void)
{
    pthread_mutex_lock(&g_mu);
    int64_t n = 0;
    for (er_pg_pool *pl = g_pools; pl; pl = pl->next)
        n += pl->open;
    pthread_mutex_unlock(&g_mu);
    return n + er_pg_listeners_open();
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

static int pg_schema(const char *url, const er_store_options *opt, bool apply,
                     er_schema_info *out, er_error *err)
{
    out->version = 0;
    out->latest = er_pg_schema_version;
    out->steps = er_pg_migration_names;
    if (apply) {
        er_store_options o = opt ? *opt : (er_store_options){0};
        o.migrate = ER_MIGRATE_ONLY;
        er_store *s = NULL;
        int rc = pg_open(url, &o, &s, err);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&g_mu);
        out->version = s->pool->found_version;
        s->pool->migrated = false; /* a server's open still writes its limits */
        pthread_mutex_unlock(&g_mu);
        pg_close(s);
        return 0;
    }
    char *conninfo = NULL;
    char schema[ER_PG_SCHEMA_MAX + 1];
    int rc = er_pg_url_parts(url, &conninfo, schema, err);
    if (rc == 0)
        rc = er_pg_schema_read(conninfo, schema, &out->version, err);
    free(conninfo);
    if (rc == 0 && out->version > er_pg_schema_version)
        rc = er_error_set(err, ER_EINVAL, "store",
                          "store schema version %d is newer than this errand supports (%d)",
                          out->version, er_pg_schema_version);
    return rc;
}

const er_store_ops er_postgres_ops = {
    .name = "postgres",
    .schema = pg_schema,
    .open = pg_open,
    .close = pg_close,
    .begin = er_pg_begin,
    .commit = er_pg_commit,
    .rollback = er_pg_rollback,
    .enqueue = er_pg_enqueue,
    .fetch = er_pg_fetch,
    .heartbeat = er_pg_heartbeat,
    .complete = er_pg_complete,
    .complete_many = er_pg_complete_many,
    .fail_many = er_pg_fail_many,
    .fail = er_pg_fail,
    .release = er_pg_release,
    .release_many = er_pg_release_many,
    .get_job = er_pg_get_job,
    .cancel = er_pg_cancel,
    .move_scheduled = er_pg_move_scheduled,
    .list_jobs = er_pg_list_jobs,
    .list_queues = er_pg_list_queues,
    .list_queue_settings = er_pg_list_queue_settings,
    .get_queue_settings = er_pg_get_queue_settings,
    .cached_queue_defaults = er_pg_cached_queue_defaults,
    .put_queue_settings = er_pg_put_queue_settings,
    .clear_queue_throttle = er_pg_clear_queue_throttle,
    .list_dead = er_pg_list_dead,
    .redrive = er_pg_redrive,
    .delete_dead = er_pg_delete_dead,
    .session_put = er_pg_session_put,
    .session_touch = er_pg_session_touch,
    .session_delete = er_pg_session_delete,
    .audit_add = er_pg_audit_add,
    .audit_list = er_pg_audit_list,
    .ui_sweep = er_pg_ui_sweep,
    .worker_beat = er_pg_worker_beat,
    .worker_signal = er_pg_worker_signal,
    .worker_get = er_pg_worker_get,
    .worker_list = er_pg_worker_list,
    .worker_reap = er_pg_worker_reap,
    .worker_count = er_pg_worker_count,
    .bulk_ids = er_pg_bulk_ids,
    .bulk_count = er_pg_bulk_count,
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
    .lease_list = er_pg_lease_list,
    .cursor_list = er_pg_cursor_list,
    .maintenance_lease = pg_maintenance_lease,
    .listener_open = er_pg_listener_open,
    .listener_fd = er_pg_listener_fd,
    .listener_poll = er_pg_listener_poll,
    .listener_close = er_pg_listener_close,
    .finished = er_pg_finished,
    .release_idle = er_postgres_pool_drain,
    .connections = pg_connections,
};
