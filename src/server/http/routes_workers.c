/* SPDX-License-Identifier: MIT
 *
 * The worker routes: GET /v1/workers lists the Faktory worker processes
 * that beat within the last minute on any server of the store, POST
 * /v1/workers/{wid}/quiet and /terminate set what their next BEAT replies
 * say. The registry is the store's (ER_REQ_WORKER_*); this node's Faktory
 * frontend (server/faktory/faktory.h) adds what only it knows: the beats it
 * saw and has not written yet, and its open connections.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/faktory/faktory.h"
#include "server/http/http_internal.h"
#include "server/http/job_json.h"

/* The local view of wid, or NULL. */
static const er_fk_worker_view *local_of(const er_fk_worker_view *v, size_t n, const char *wid)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].wid, wid) == 0)
            return &v[i];
    return NULL;
}

/* A stored row, with this node's newer beat (not written yet) over it. */
static json_t *worker_json(er_faktory *f, const er_worker_row *w,
                           const er_fk_worker_view *local)
{
    const char *node = er_faktory_node(f);
    er_worker_row m = *w;
    if (local && local->last_beat > m.last_beat) {
        m.labels = (char *)er_faktory_worker_labels(f, m.wid); /* borrowed */
        memcpy(m.hostname, local->hostname, sizeof m.hostname);
        memcpy(m.current_state, local->current_state, sizeof m.current_state);
        snprintf(m.node, sizeof m.node, "%s", node);
        m.pid = local->pid;
        m.rss_kb = local->rss_kb;
        m.last_beat = local->last_beat;
    }
    if (local && (er_worker_state)local->signal > m.state)
        m.state = (er_worker_state)local->signal;
    const char *state = m.state == ER_WORKER_RUN ? "running" : er_fk_signal_name((er_fk_signal)m.state);
    json_t *labels = m.labels ? json_loads(m.labels, 0, NULL) : NULL;
    if (!json_is_array(labels)) {
        json_decref(labels);
        labels = json_array();
    }
    return json_pack("{s:s, s:s, s:I, s:o, s:o, s:s, s:s, s:o, s:i, s:s, s:o}", "wid", m.wid,
                     "hostname", m.hostname, "pid", (json_int_t)m.pid, "started_at",
                     er_http_time_json(m.started_at), "last_beat",
                     er_http_time_json(m.last_beat), "state", state, "current_state",
                     m.current_state, "rss_kb",
                     m.rss_kb >= 0 ? json_integer(m.rss_kb) : json_null(), "connections",
                     local ? local->connections : 0, "node", m.node, "labels", labels);
}

/* A worker this node saw and has not written to the store yet. */
static void row_from_local(const er_fk_worker_view *v, er_worker_row *w)
{
    memset(w, 0, sizeof *w);
    memcpy(w->wid, v->wid, sizeof w->wid);
    memcpy(w->hostname, v->hostname, sizeof w->hostname);
    memcpy(w->current_state, v->current_state, sizeof w->current_state);
    w->pid = v->pid;
    w->rss_kb = v->rss_kb;
    w->started_at = v->started_at;
    w->last_beat = 0; /* worker_json takes the beat, node and labels from v */
    w->state = (er_worker_state)v->signal;
}

static int by_wid(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void finish_list(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_fk_worker_view *v = NULL;
    size_t n = 0;
    json_t *arr = json_array();
    int bad = !arr || er_faktory_workers(c->s->faktory, &v, &n) < 0;
    /* the stored rows, then the local ones not stored yet */
    for (size_t i = 0; i < r->worker_rows.len && !bad; i++) {
        const er_worker_row *w = &r->worker_rows.items[i];
        bad |= json_array_append_new(arr, worker_json(c->s->faktory, w, local_of(v, n, w->wid)));
    }
    for (size_t i = 0; i < n && !bad; i++) {
        bool stored = false;
        for (size_t k = 0; k < r->worker_rows.len && !stored; k++)
            stored = strcmp(r->worker_rows.items[k].wid, v[i].wid) == 0;
        if (stored)
            continue;
        er_worker_row w;
        row_from_local(&v[i], &w);
        bad |= json_array_append_new(arr, worker_json(c->s->faktory, &w, &v[i]));
    }
    free(v);
    size_t len = arr ? json_array_size(arr) : 0;
    if (!bad && len > 1) {
        /* sorted by wid: (wid, item) pairs, the wid first for by_wid */
        struct pair {
            const char *wid;
            json_t *item;
        } *p = malloc(len * sizeof *p);
        if (!p) {
            bad = 1;
        } else {
            for (size_t i = 0; i < len; i++) {
                p[i].item = json_incref(json_array_get(arr, i));
                p[i].wid = json_string_value(json_object_get(p[i].item, "wid"));
            }
            qsort(p, len, sizeof *p, by_wid);
            json_array_clear(arr);
            for (size_t i = 0; i < len; i++)
                bad |= json_array_append_new(arr, p[i].item);
            free(p);
        }
    }
    json_t *body = bad ? NULL : json_pack("{s:o}", "workers", arr);
    if (bad)
        json_decref(arr);
    er_http_reply_json(c, 200, body);
}

void er_route_list_workers(er_hctx *c)
{
    er_req *r = er_req_new(ER_REQ_WORKER_LIST);
    if (!r) {
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    r->extend_ms = ER_FK_WORKER_TTL_MS;
    er_http_submit(c, r, finish_list);
}

static void finish_signal(er_hctx *c, er_req *r)
{
    if (r->rc || r->worker_rows.len != 1) {
        if (!r->rc)
            r->rc = er_error_set(&r->err, ER_EINTERNAL, NULL, "no worker row");
        er_http_reply_req_error(c, r);
        return;
    }
    const er_worker_row *w = &r->worker_rows.items[0];
    er_faktory_worker_signalled(c->s->faktory, w->wid, (er_fk_signal)w->state);
    er_fk_worker_view *v = NULL;
    size_t n = 0;
    if (er_faktory_workers(c->s->faktory, &v, &n) < 0)
        n = 0;
    json_t *j = worker_json(c->s->faktory, w, local_of(v, n, w->wid));
    free(v);
    er_http_reply_json(c, 200, j ? json_pack("{s:o}", "worker", j) : NULL);
}

void er_route_signal_worker(er_hctx *c)
{
    er_req *r = er_req_new(ER_REQ_WORKER_SIGNAL);
    if (!r || !(r->id = strdup(c->param))) {
        er_req_free(r);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    r->worker_state = c->flags ? ER_WORKER_TERMINATE : ER_WORKER_QUIET;
    r->extend_ms = ER_FK_WORKER_TTL_MS;
    /* a worker that said HELLO here a moment ago is in the store first:
     * the writer runs the two in the order they were submitted */
    er_faktory_flush_beats(c->s->faktory);
    er_http_submit(c, r, finish_signal);
}
