/* SPDX-License-Identifier: MIT
 *
 * The worker processes this node has seen (HELLO with a wid, BEAT), the
 * signals an operator sends them (quiet, terminate), their reaping after
 * ER_FK_WORKER_TTL_MS without a beat, and the jid -> lease cache that
 * spares ACK and FAIL a read of the job. The registry is per node; the
 * store, not the cache, decides every lease.
 */
#include <stdlib.h>
#include <string.h>

#include "server/faktory/fk_internal.h"

const char *er_fk_signal_name(er_fk_signal s)
{
    return s == ER_FK_QUIET ? "quiet" : s == ER_FK_TERMINATE ? "terminate" : "";
}

fk_worker *er_fk_worker_find(er_faktory *f, const char *wid)
{
    for (fk_worker *w = f->workers; w; w = w->next)
        if (strcmp(w->v.wid, wid) == 0)
            return w;
    return NULL;
}

fk_worker *er_fk_worker_touch(er_faktory *f, const char *wid, int64_t now)
{
    fk_worker *w = er_fk_worker_find(f, wid);
    if (!w) {
        if (f->nworkers >= ER_FK_WORKERS_MAX || strlen(wid) > ER_NAME_MAX)
            return NULL;
        if (!(w = calloc(1, sizeof *w)))
            return NULL;
        memcpy(w->v.wid, wid, strlen(wid) + 1);
        w->v.started_at = now;
        w->v.rss_kb = -1;
        w->next = f->workers;
        f->workers = w;
        f->nworkers++;
    }
    w->v.last_beat = now;
    return w;
}

void er_fk_workers_reap(er_faktory *f, int64_t now)
{
    fk_worker **pp = &f->workers;
    while (*pp) {
        fk_worker *w = *pp;
        if (now - w->v.last_beat > ER_FK_WORKER_TTL_MS) {
            *pp = w->next;
            er_fk_pre_release(f, w, INT64_MAX);
            er_fk_pre_free(w);
            free(w);
            f->nworkers--;
        } else {
            pp = &w->next;
        }
    }
}

void er_fk_workers_free(er_faktory *f)
{
    while (f->workers) {
        fk_worker *w = f->workers;
        f->workers = w->next;
        er_fk_pre_free(w); /* the store's leases expire */
        free(w);
    }
    f->nworkers = 0;
}

int er_faktory_workers(const er_faktory *f, er_fk_worker_view **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!f || !f->nworkers)
        return 0;
    er_fk_worker_view *v = calloc(f->nworkers, sizeof *v);
    if (!v)
        return ER_ENOMEM;
    size_t i = 0;
    int64_t now = er_now_ms();
    for (const fk_worker *w = f->workers; w && i < f->nworkers; w = w->next) {
        if (now - w->v.last_beat > ER_FK_WORKER_TTL_MS)
            continue;
        v[i] = w->v;
        v[i].connections = 0;
        for (const fk_conn *c = f->conns; c; c = c->next)
            if (strcmp(c->wid, w->v.wid) == 0)
                v[i].connections++;
        i++;
    }
    *out = v;
    *n = i;
    return 0;
}

int er_faktory_worker_signal(er_faktory *f, const char *wid, er_fk_signal s, er_error *err)
{
    fk_worker *w = f ? er_fk_worker_find(f, wid) : NULL;
    if (!w || er_now_ms() - w->v.last_beat > ER_FK_WORKER_TTL_MS)
        return er_error_set(err, ER_ENOTFOUND, "wid", "no worker %s is known on this node", wid);
    if (w->v.signal != ER_FK_TERMINATE)
        w->v.signal = s;
    er_fk_pre_release(f, w, INT64_MAX); /* it gets no more jobs */
    return 0;
}

/* ---- jid -> lease ---- */

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % FK_CACHE_BUCKETS;
}

static void lease_free(fk_lease *l)
{
    free(l->jid);
    free(l->token);
    free(l->wid);
    free(l);
}

void er_fk_cache_put(fk_cache *t, const char *jid, const char *token, const char *wid,
                     int64_t expires_at)
{
    if (!t->b && !(t->b = calloc(FK_CACHE_BUCKETS, sizeof *t->b)))
        return;
    er_fk_cache_del(t, jid);
    if (t->n >= ER_FK_CACHE_MAX)
        return; /* the store answers the rest */
    fk_lease *l = calloc(1, sizeof *l);
    if (!l)
        return;
    l->jid = strdup(jid);
    l->token = strdup(token);
    l->wid = strdup(wid);
    if (!l->jid || !l->token || !l->wid) {
        lease_free(l);
        return;
    }
    l->expires_at = expires_at;
    uint32_t h = hash(jid);
    l->next = t->b[h];
    t->b[h] = l;
    t->n++;
}

const fk_lease *er_fk_cache_get(const fk_cache *t, const char *jid)
{
    if (!t->b)
        return NULL;
    for (const fk_lease *l = t->b[hash(jid)]; l; l = l->next)
        if (strcmp(l->jid, jid) == 0)
            return l;
    return NULL;
}

void er_fk_cache_del(fk_cache *t, const char *jid)
{
    if (!t->b)
        return;
    for (fk_lease **pp = &t->b[hash(jid)]; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->jid, jid) == 0) {
            fk_lease *l = *pp;
            *pp = l->next;
            lease_free(l);
            t->n--;
            return;
        }
}

void er_fk_cache_sweep(fk_cache *t, int64_t now)
{
    if (!t->b)
        return;
    for (size_t b = 0; b < FK_CACHE_BUCKETS; b++) {
        fk_lease **pp = &t->b[b];
        while (*pp) {
            fk_lease *l = *pp;
            if (l->expires_at < now) {
                *pp = l->next;
                lease_free(l);
                t->n--;
            } else {
                pp = &l->next;
            }
        }
    }
}

void er_fk_cache_free(fk_cache *t)
{
    if (!t->b)
        return;
    for (size_t b = 0; b < FK_CACHE_BUCKETS; b++)
        while (t->b[b]) {
            fk_lease *l = t->b[b];
            t->b[b] = l->next;
            lease_free(l);
        }
    free(t->b);
    t->b = NULL;
    t->n = 0;
}
