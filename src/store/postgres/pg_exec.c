/* SPDX-License-Identifier: MIT
 *
 * Running SQL on the PostgreSQL store's connection: text parameters and
 * array literals, statements prepared once per connection, the mapping of
 * SQLSTATEs to ER_E* codes, and transactions (BEGIN reads the store clock
 * in the same round trip) with their transaction-scoped caches (queue
 * settings, queues notified). Its only SQL of its own is BEGIN, COMMIT and
 * ROLLBACK.
 */
#include "store/postgres/pg_int.h"
#include "util/buf.h"
#include "util/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int er_pg_nomem(er_error *err)
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

/* The schema changed under a prepared statement's result (a newer node's
 * migration, an ALTER): PostgreSQL refuses it from then on. */
static bool plan_stale(const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    return state && msg && strcmp(state, "0A000") == 0 &&
           strstr(msg, "cached plan must not change result type");
}

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
    else if (plan_stale(res))
        code = ER_EUNAVAIL; /* prepared again for the next try */
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

int er_pg_check(er_store *s, PGresult *res, const char *what, er_error *err)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return 0;
    return er_pg_error(s, res, what, err);
}

/* Prepares every statement of c afresh at its next use, under new names:
 * the failed transaction may not run DEALLOCATE, and the old statements go
 * with the session. */
static void statements_renew(er_pg_conn *c)
{
    c->gen++;
    memset(c->prepared, 0, sizeof c->prepared);
    ER_LOG(ER_LOG_WARN, NULL,
           "postgres: the schema changed under a prepared statement; "
           "this connection prepares its statements again");
}

int er_pg_exec(er_store *s, int id, const er_pg_params *p, PGresult **res, er_error *err)
{
    *res = NULL;
    if (!s->in_tx) {
        int crc = er_pg_ensure_conn(s, err); /* reader connections never call begin */
        if (crc < 0)
            return crc;
    }
    PGconn *pg = s->c->pg;
    char name[32];
    snprintf(name, sizeof name, "e%d_%u", id, s->c->gen);
    if (!s->c->prepared[id]) {
        PGresult *r = PQprepare(pg, name, er_pg_sql[id], 0, NULL);
        int rc = er_pg_check(s, r, "prepare", err);
        PQclear(r);
        if (rc < 0)
            return rc;
        s->c->prepared[id] = true;
    }
    PGresult *r = PQexecPrepared(pg, name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL, 0);
    int rc = er_pg_check(s, r, "query", err);
    if (rc < 0) {
        if (plan_stale(r))
            statements_renew(s->c);
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
int er_pg_simple(er_store *s, const char *sql, const char *what, PGresult **out, er_error *err)
{
    PGresult *r = PQexec(s->c->pg, sql);
    int rc = er_pg_check(s, r, what, err);
    if (rc == 0 && out)
        *out = r;
    else
        PQclear(r);
    return rc;
}

/* ---- transactions ---- */

void er_pg_tx_caches_clear(er_store *s)
{
    for (size_t i = 0; i < s->nqc; i++)
        free(s->qc[i].name);
    s->nqc = 0;
    for (size_t i = 0; i < s->nnotified; i++)
        free(s->notified[i]);
    free(s->notified);
    s->notified = NULL;
    s->nnotified = 0;
    s->ndone = 0;
    s->done_all = false;
}

/* a NOTIFY payload must be shorter than 8000 bytes */
_Static_assert(ER_PG_DONE_PER_NOTIFY * 8 < 8000, "a _done payload must fit one NOTIFY");
_Static_assert(ER_STORE_FINISHED_MAX == 8 * ER_PG_DONE_PER_NOTIFY, "8 NOTIFYs a transaction");

int er_pg_finished(er_store *s, const uint32_t *keys, size_t n, er_error *err)
{
    if (s->done_all || (keys && n == 0))
        return 0;
    if (!keys || s->ndone + n > ER_STORE_FINISHED_MAX) {
        s->done_all = true; /* one "*" says it in fewer bytes */
        s->ndone = 0;
        return 0;
    }
    if (ER_GROW(&s->done, &s->capdone, s->ndone + n, ER_STORE_FINISHED_MAX) < 0)
        return er_pg_nomem(err);
    memcpy(s->done + s->ndone, keys, n * sizeof *keys);
    s->ndone += n;
    return 0;
}

/* The COMMIT of the open transaction, after the NOTIFYs of the jobs it
 * finished: one simple query, so announcing them costs no round trip.
 * The payload is hex digits (or "*"), safe in a literal as it is. NULL on
 * ENOMEM. */
static char *commit_sql(const er_store *s)
{
    static const char head[] = "SELECT pg_notify(current_schema() || '_done', '";
    static const char tail[] = "');";
    size_t nnotify =
        s->done_all ? 1 : (s->ndone + ER_PG_DONE_PER_NOTIFY - 1) / ER_PG_DONE_PER_NOTIFY;
    size_t cap = nnotify * (sizeof head + sizeof tail) + s->ndone * 8 + 16;
    char *sql = malloc(cap), *p = sql;
    if (!sql)
        return NULL;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nnotify; i++) {
        memcpy(p, head, sizeof head - 1);
        p += sizeof head - 1;
        if (s->done_all) {
            *p++ = '*';
        } else {
            size_t end = (i + 1) * ER_PG_DONE_PER_NOTIFY;
            for (size_t k = i * ER_PG_DONE_PER_NOTIFY; k < s->ndone && k < end; k++)
                for (int sh = 28; sh >= 0; sh -= 4)
                    *p++ = hex[(s->done[k] >> sh) & 15];
        }
        memcpy(p, tail, sizeof tail - 1);
        p += sizeof tail - 1;
    }
    memcpy(p, "COMMIT", 7);
    return sql;
}

int er_pg_begin(er_store *s, er_error *err)
{
    if (s->in_tx)
        return er_error_set(err, ER_EINTERNAL, "", "store: a transaction is already open");
    int rc = er_pg_ensure_conn(s, err);
    if (rc < 0)
        return rc;
    er_pg_tx_caches_clear(s);
    PGresult *r = NULL;
    rc = er_pg_simple(s, "BEGIN; SELECT (extract(epoch FROM now()) * 1000)::bigint", "begin", &r,
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

int er_pg_commit(er_store *s, er_error *err)
{
    if (!s->in_tx)
        return er_error_set(err, ER_EINTERNAL, "", "store: no transaction is open");
    char *sql = s->ndone || s->done_all ? commit_sql(s) : NULL;
    if ((s->ndone || s->done_all) && !sql)
        return er_pg_nomem(err);
    /* with NOTIFYs first, the last result is COMMIT's */
    PGresult *r = PQexec(s->c->pg, sql ? sql : "COMMIT");
    free(sql);
    int rc = er_pg_check(s, r, "commit", err);
    /* COMMIT of a failed transaction answers ROLLBACK */
    if (rc == 0 && strcmp(PQcmdStatus(r), "COMMIT") != 0)
        rc = er_error_set(err, ER_EUNAVAIL, "", "store: commit: the transaction was aborted");
    PQclear(r);
    if (PQtransactionStatus(s->c->pg) == PQTRANS_IDLE) {
        s->in_tx = false;
        er_pg_tx_caches_clear(s);
    }
    return rc;
}

/* Safe after a failed commit or statement, and with no transaction open. */
void er_pg_rollback(er_store *s)
{
    PGconn *pg = s->c->pg;
    if (PQstatus(pg) == CONNECTION_OK && PQtransactionStatus(pg) != PQTRANS_IDLE)
        PQclear(PQexec(pg, "ROLLBACK"));
    s->in_tx = false;
    er_pg_tx_caches_clear(s);
}

int er_pg_op_begin(er_store *s, bool *own, er_error *err)
{
    *own = !s->in_tx;
    return *own ? er_pg_begin(s, err) : 0;
}

int er_pg_op_end(er_store *s, bool own, int rc, er_error *err)
{
    if (!own)
        return rc;
    if (rc == 0)
        rc = er_pg_commit(s, err);
    if (rc < 0)
        er_pg_rollback(s);
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
        if (s->nqc == ER_PG_QCACHE_MAX) {
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
