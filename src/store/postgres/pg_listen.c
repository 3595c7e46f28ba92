/* SPDX-License-Identifier: MIT
 *
 * The LISTEN side of the PostgreSQL store's wake-ups: a dedicated
 * connection (outside the pool) that listens on "<schema>_ready" and hands
 * each notification's queue to a callback, and on "<schema>_done" (the
 * keys of finished jobs er_pg_commit announces, for requests waiting for a
 * job's outcome): store.h's listener ops. Non-blocking: the owner waits on
 * its socket, then polls.
 */
#include "store/postgres/pg_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct er_store_listener {
    PGconn *pg;
    char done[80]; /* the "<schema>_done" channel */
};

/* The libpq URL and schema of a store URL (errand's options removed). */
static int split_url(const char *url, char **conninfo, char schema[64], er_error *err)
{
    size_t n = strlen(url);
    char *ci = malloc(n + 1);
    if (!ci)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    snprintf(schema, 64, "errand");
    const char *q = strchr(url, '?');
    size_t len = q ? (size_t)(q - url) : n;
    memcpy(ci, url, len);
    int kept = 0;
    for (const char *p = q ? q + 1 : NULL; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t k = amp ? (size_t)(amp - p) : strlen(p);
        if (k > 7 && strncmp(p, "schema=", 7) == 0 && k - 7 < 58) {
            memcpy(schema, p + 7, k - 7);
            schema[k - 7] = '\0';
        } else if (!(strncmp(p, "pool_size=", 10) == 0 || strncmp(p, "clock=", 6) == 0)) {
            ci[len++] = kept++ ? '&' : '?';
            memcpy(ci + len, p, k);
            len += k;
        }
        p = amp ? amp + 1 : NULL;
    }
    ci[len] = '\0';
    *conninfo = ci;
    return 0;
}

static int conn_error(PGconn *pg, const char *what, er_error *err)
{
    const char *m = pg ? PQerrorMessage(pg) : "out of memory";
    int n = (int)strlen(m);
    while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    return er_error_set(err, ER_EUNAVAIL, "store", "store: %s: %.*s", what, n, m);
}

static _Atomic int64_t g_listeners; /* listener connections open in this process */

int er_pg_listener_open(const char *url, er_store_listener **out, er_error *err)
{
    *out = NULL;
    char *conninfo = NULL;
    char schema[64];
    int rc = split_url(url, &conninfo, schema, err);
    if (rc < 0)
        return rc;
    PGconn *pg = PQconnectdb(conninfo);
    free(conninfo);
    if (!pg || PQstatus(pg) != CONNECTION_OK) {
        rc = conn_error(pg, "listen", err);
        PQfinish(pg);
        return rc;
    }
    char channel[80], done[80];
    snprintf(channel, sizeof channel, "%s_ready", schema);
    snprintf(done, sizeof done, "%s_done", schema);
    /* "_ready" last: the session's query in pg_stat_activity stays
     * `LISTEN "<schema>_ready"`, by which operators (and tests) find it */
    const char *names[2] = {done, channel};
    for (int i = 0; i < 2; i++) {
        char *ident = PQescapeIdentifier(pg, names[i], strlen(names[i]));
        if (!ident) {
            PQfinish(pg);
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        }
        char sql[128];
        snprintf(sql, sizeof sql, "LISTEN %s", ident);
        PQfreemem(ident);
        PGresult *r = PQexec(pg, sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            rc = conn_error(pg, "listen", err);
            PQclear(r);
            PQfinish(pg);
            return rc;
        }
        PQclear(r);
    }
    if (PQsetnonblocking(pg, 1) != 0) {
        rc = conn_error(pg, "listen", err);
        PQfinish(pg);
        return rc;
    }
    er_store_listener *l = calloc(1, sizeof *l);
    if (!l) {
        PQfinish(pg);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    l->pg = pg;
    atomic_fetch_add(&g_listeners, 1);
    snprintf(l->done, sizeof l->done, "%s", done);
    *out = l;
    return 0;
}

int er_pg_listener_fd(const er_store_listener *l)
{
    return PQsocket(l->pg);
}

/* Calls done with the keys of a "<schema>_done" payload (er_pg_commit's);
 * "*", or anything else it cannot read, means any job may have finished. */
static void done_keys(const char *payload, er_store_finished_fn done, void *arg)
{
    uint32_t keys[ER_PG_DONE_PER_NOTIFY];
    size_t len = strlen(payload), n = 0;
    if (len % 8 || len / 8 > ER_PG_DONE_PER_NOTIFY || len == 0) {
        done(NULL, 0, arg);
        return;
    }
    for (size_t i = 0; i < len; i += 8) {
        uint32_t k = 0;
        for (size_t j = i; j < i + 8; j++) {
            char c = payload[j];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) {
                done(NULL, 0, arg);
                return;
            }
            k = k << 4 | (uint32_t)d;
        }
        keys[n++] = k;
    }
    done(keys, n, arg);
}

int er_pg_listener_poll(er_store_listener *l, er_store_ready_fn fn, er_store_finished_fn done,
                        void *arg, er_error *err)
{
    if (!PQconsumeInput(l->pg) || PQstatus(l->pg) != CONNECTION_OK)
        return conn_error(l->pg, "listen", err);
    PGnotify *nt;
    while ((nt = PQnotifies(l->pg))) {
        if (strcmp(nt->relname, l->done) == 0) {
            if (done)
                done_keys(nt->extra ? nt->extra : "", done, arg);
        } else if (fn) {
            fn(nt->extra ? nt->extra : "", arg);
        }
        PQfreemem(nt);
    }
    return 0;
}

void er_pg_listener_close(er_store_listener *l)
{
    if (!l)
        return;
    PQfinish(l->pg);
    free(l);
    atomic_fetch_sub(&g_listeners, 1);
}

int64_t er_pg_listeners_open(void)
{
    return atomic_load(&g_listeners);
}
