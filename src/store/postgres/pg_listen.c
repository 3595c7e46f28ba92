/* SPDX-License-Identifier: MIT
 *
 * The LISTEN side of the PostgreSQL store's wake-ups: a dedicated
 * connection (outside the pool) that listens on "<schema>_ready" and hands
 * each notification's queue to a callback: store.h's listener ops.
 * Non-blocking: the owner waits on its socket, then polls.
 */
#include "store/postgres/pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct er_store_listener {
    PGconn *pg;
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
    char channel[80];
    snprintf(channel, sizeof channel, "%s_ready", schema);
    char *ident = PQescapeIdentifier(pg, channel, strlen(channel));
    char sql[128];
    snprintf(sql, sizeof sql, "LISTEN %s", ident ? ident : "\"errand_ready\"");
    PQfreemem(ident);
    PGresult *r = PQexec(pg, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        rc = conn_error(pg, "listen", err);
        PQclear(r);
        PQfinish(pg);
        return rc;
    }
    PQclear(r);
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
    *out = l;
    return 0;
}

int er_pg_listener_fd(const er_store_listener *l)
{
    return PQsocket(l->pg);
}

int er_pg_listener_poll(er_store_listener *l, er_store_ready_fn fn, void *arg, er_error *err)
{
    if (!PQconsumeInput(l->pg) || PQstatus(l->pg) != CONNECTION_OK)
        return conn_error(l->pg, "listen", err);
    PGnotify *nt;
    while ((nt = PQnotifies(l->pg))) {
        if (fn)
            fn(nt->extra ? nt->extra : "", arg);
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
}
