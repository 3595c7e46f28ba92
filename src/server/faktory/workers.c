/* SPDX-License-Identifier: MIT
 *
 * The worker processes this node has seen (HELLO with a wid, BEAT), the
 * writes of their beats to the store's registry (one request every
 * ER_FK_BEAT_FLUSH_MS, which also brings back the signals any node set and
 * the last beat of workers that beat elsewhere), the signals applied here,
 * their reaping after ER_FK_WORKER_TTL_MS without a beat anywhere, and the
 * jid -> lease cache that spares ACK and FAIL a read of the job. The store,
 * not this node, holds the registry and decides every lease.
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
    w->dirty = true;
    return w;
}

/* Its last beat on this node or, as the store said lately, on any. */
static int64_t known_beat(const fk_worker *w)
{
    return w->stored_beat > w->v.last_beat ? w->stored_beat : w->v.last_beat;
}

static void worker_free(er_faktory *f, fk_worker *w, bool release)
{
    if (release)
        er_fk_pre_release(f, w, INT64_MAX);
    er_fk_pre_free(w);
    free(w->labels);
    free(w);
}

void er_fk_workers_reap(er_faktory *f, int64_t now)
{
    fk_worker **pp = &f->workers;
    while (*pp) {
        fk_worker *w = *pp;
        if (now - known_beat(w) > ER_FK_WORKER_TTL_MS) {
            *pp = w->next;
            worker_free(f, w, true);
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
        worker_free(f, w, false); /* the store's leases expire */
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

const char *er_faktory_worker_labels(er_faktory *f, const char *wid)
{
    const fk_worker *w = f ? er_fk_worker_find(f, wid) : NULL;
    return w ? w->labels : NULL;
}

const char *er_faktory_node(const er_faktory *f)
{
    return f ? f->node : "errand";
}

static void apply_signal(er_faktory *f, fk_worker *w, er_fk_signal s)
{
    if (s > w->v.signal)
        w->v.signal = s; /* raised only: a quiet never undoes a terminate */
    if (w->v.signal != ER_FK_RUN)
        er_fk_pre_release(f, w, INT64_MAX); /* it gets no more jobs */
}

void er_faktory_worker_signalled(er_faktory *f, const char *wid, er_fk_signal s)
{
    fk_worker *w = f ? er_fk_worker_find(f, wid) : NULL;
    if (w)
        apply_signal(f, w, s);
}

/* ---- beats to the store ---- */

static void inflight_drop(er_faktory *f, er_req *r)
{
    for (int i = 0; i < ER_FK_BEATS_INFLIGHT; i++)
        if (f->beats[i] == r)
            f->beats[i] = NULL;
}

/* r's beats were not written: the next write carries them. Frees r. */
static void redirty(er_faktory *f, er_req *r)
{
    for (size_t i = 0; i < r->workers.len; i++) {
        fk_worker *w = er_fk_worker_find(f, r->workers.items[i].wid);
        if (w)
            w->dirty = true;
    }
    er_req_free(r);
}

static void on_beats(er_req *r)
{
    er_faktory *f = r->arg;
    if (!f) {
        er_req_free(r);
        return;
    }
    inflight_drop(f, r);
    if (r->rc) {
        redirty(f, r);
        return;
    }
    for (size_t i = 0; i < r->worker_rows.len; i++) {
        const er_worker_row *row = &r->worker_rows.items[i];
        fk_worker *w = er_fk_worker_find(f, row->wid);
        if (!w)
            continue;
        if (row->last_beat > w->stored_beat)
            w->stored_beat = row->last_beat;
        apply_signal(f, w, (er_fk_signal)row->state);
    }
    er_req_free(r);
}

/* w's row as this node saw it, into *row (labels copied); false on ENOMEM. */
static bool row_of(const er_faktory *f, const fk_worker *w, er_worker_row *row)
{
    memcpy(row->wid, w->v.wid, sizeof row->wid);
    memcpy(row->hostname, w->v.hostname, sizeof row->hostname);
    memcpy(row->node, f->node, sizeof row->node);
    memcpy(row->current_state, w->v.current_state, sizeof row->current_state);
    row->pid = w->v.pid;
    row->v = w->proto_v;
    row->rss_kb = w->v.rss_kb;
    row->started_at = w->v.started_at;
    row->last_beat = w->v.last_beat;
    return !w->labels || (row->labels = strdup(w->labels));
}

void er_fk_beats_flush(er_faktory *f, bool timer)
{
    int slot = -1;
    for (int i = 0; i < ER_FK_BEATS_INFLIGHT; i++) {
        if (f->beats[i] && timer)
            return; /* the one in flight answers first */
        if (!f->beats[i] && slot < 0)
            slot = i;
    }
    if (slot < 0 || !f->engine || !f->nworkers)
        return; /* the rows stay dirty: a later write carries them */
    er_req *r = er_req_new(ER_REQ_WORKER_BEATS);
    if (!r)
        return;
    int64_t now = er_now_ms();
    bool oom = false;
    for (fk_worker *w = f->workers; w && !oom; w = w->next) {
        if (w->dirty) {
            er_worker_row *row = er_worker_list_push(&r->workers);
            oom = !row || !row_of(f, w, row);
            w->dirty = oom;
        } else if (timer && now - known_beat(w) > ER_FK_WORKER_TTL_MS / 2 &&
                   r->nwids < ER_FK_ASK_MAX) {
            /* no beat here lately: does it beat elsewhere? */
            char **grown = realloc(r->wids, (r->nwids + 1) * sizeof *grown);
            oom = !grown;
            if (grown) {
                r->wids = grown;
                oom = !(r->wids[r->nwids] = strdup(w->v.wid));
                r->nwids += !oom;
            }
        }
    }
    if (oom) {
        redirty(f, r);
        return;
    }
    if (!timer && r->workers.len == 0) {
        er_req_free(r);
        return;
    }
    r->extend_ms = ER_FK_WORKER_TTL_MS;
    r->arg = f;
    r->done = on_beats;
    f->beats[slot] = r;
    er_engine_submit(f->engine, r);
}

void er_faktory_flush_beats(er_faktory *f)
{
    if (f)
        er_fk_beats_flush(f, false);
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
