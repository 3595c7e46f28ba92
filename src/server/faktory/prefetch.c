/* SPDX-License-Identifier: MIT
 *
 * A wid's prefetch (docs/faktory.md, "Prefetch"): one store fetch leases up
 * to k jobs to the wid, FETCH hands out the first and buffers the rest in
 * memory, and the wid's next FETCHes take them without a store round trip.
 * The store holds every lease (owner wid, token), so ACK, FAIL, a restart
 * or a crash behave as for a job fetched alone; a buffered job not handed
 * out within ER_FK_PREFETCH_HOLD_MS, or when the wid quiets, stops or
 * leaves, is released (back to waiting, the attempt not counted). Loop
 * thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "server/faktory/fk_internal.h"

int er_fk_pre_size(er_faktory *f, fk_worker *w, int64_t now)
{
    if (!w || f->prefetch <= 1 || f->stopping || w->v.signal != ER_FK_RUN ||
        w->v.current_state[0])
        return 1;
    if (w->k == 0)
        w->k = 2;
    else if (w->npre == 0 && !w->released && now >= w->grow_at)
        w->k *= 2; /* drained since the last store fetch, nothing released */
    /* the concurrency w showed; 2 at least: a serial fetch loop shows more
     * only once it is given a job to take while it holds one */
    int cap = w->peak > 2 ? w->peak : 2;
    if (w->k > cap)
        w->k = cap;
    if (w->k > f->prefetch)
        w->k = f->prefetch;
    w->released = false;
    int room = f->prefetch - (int)w->npre; /* slots left; the first is handed out */
    return w->k <= room + 1 ? w->k : room + 1;
}

bool er_fk_pre_take(fk_worker *w, char *const *queues, size_t nq, er_job *out)
{
    if (!w)
        return false;
    for (size_t q = 0; q < nq; q++)
        for (size_t i = 0; i < w->npre; i++) {
            if (!w->pre[i].queue || strcmp(w->pre[i].queue, queues[q]) != 0)
                continue;
            *out = w->pre[i];
            memmove(&w->pre[i], &w->pre[i + 1], (w->npre - i - 1) * sizeof *w->pre);
            memmove(&w->pre_at[i], &w->pre_at[i + 1], (w->npre - i - 1) * sizeof *w->pre_at);
            w->npre--;
            return true;
        }
    return false;
}

bool er_fk_pre_put(er_faktory *f, fk_worker *w, er_job *j, int64_t now)
{
    if (!w || w->npre >= (size_t)f->prefetch)
        return false;
    if (!w->pre) {
        w->pre = calloc((size_t)f->prefetch, sizeof *w->pre);
        w->pre_at = calloc((size_t)f->prefetch, sizeof *w->pre_at);
        if (!w->pre || !w->pre_at) {
            free(w->pre);
            free(w->pre_at);
            w->pre = NULL;
            w->pre_at = NULL;
            return false;
        }
    }
    w->pre[w->npre] = *j; /* moved */
    memset(j, 0, sizeof *j);
    w->pre_at[w->npre++] = now;
    return true;
}

static void on_released(er_req *r)
{
    er_req_free(r); /* a release refused (lease gone) changes nothing: it expires anyway */
}

/* One ACKS request releasing jobs[0..n) (moved). */
static void submit_release(er_faktory *f, er_job *jobs, size_t n)
{
    er_req *r = n && f->engine ? er_req_new(ER_REQ_ACKS) : NULL;
    if (r && !(r->acks = calloc(n, sizeof *r->acks))) {
        er_req_free(r);
        r = NULL;
    }
    for (size_t i = 0; r && i < n; i++) {
        er_ack *a = &r->acks[r->nacks];
        if (!jobs[i].id || !jobs[i].lease_token)
            continue;
        a->kind = ER_ACK_RELEASE;
        a->id = jobs[i].id; /* moved */
        a->token = jobs[i].lease_token;
        jobs[i].id = NULL;
        jobs[i].lease_token = NULL;
        r->nacks++;
    }
    for (size_t i = 0; i < n; i++)
        er_job_fini(&jobs[i]); /* without memory to say so, the leases just expire */
    if (!r)
        return;
    r->done = on_released;
    er_engine_submit(f->engine, r);
}

void er_fk_pre_release_jobs(er_faktory *f, er_job *jobs, size_t n)
{
    submit_release(f, jobs, n);
    memset(jobs, 0, n * sizeof *jobs);
}

void er_fk_pre_release(er_faktory *f, fk_worker *w, int64_t before)
{
    if (!w || !w->npre)
        return;
    er_job *out = malloc(w->npre * sizeof *out);
    if (!out)
        return; /* they stay buffered: the next pass tries again */
    size_t n = 0, keep = 0;
    for (size_t i = 0; i < w->npre; i++) {
        if (w->pre_at[i] < before) {
            out[n++] = w->pre[i];
        } else {
            w->pre[keep] = w->pre[i];
            w->pre_at[keep++] = w->pre_at[i];
        }
    }
    w->npre = keep;
    if (n) {
        w->released = true;
        if (before != INT64_MAX) {
            if (w->k > 1)
                w->k /= 2; /* it did not drain in time: smaller fetches */
            w->grow_at = before + ER_FK_PREFETCH_HOLD_MS + ER_FK_PREFETCH_BACKOFF_MS;
        }
        submit_release(f, out, n);
    }
    free(out);
}

#define EWMA(avg, x) ((avg) ? (avg) + ((x) - (avg)) / 8 : (x))
#define REFILL_GAP_MAX_NS 100000000  /* a pause longer than this is not its pace */
#define REFILL_FETCH_MAX_NS 100000000 /* nor a store fetch this slow its round trip */

void er_fk_pre_asked(fk_worker *w)
{
    if (!w)
        return;
    if (w->held + 1 > w->peak)
        w->peak = w->held + 1; /* it asks for one more while holding these */
    int64_t now = er_mono_ns();
    int64_t gap = w->ask_ns ? now - w->ask_ns : 0;
    w->ask_ns = now;
    if (gap > 0 && gap < REFILL_GAP_MAX_NS)
        w->gap_ns = EWMA(w->gap_ns, gap);
}

void er_fk_pre_fetched(fk_worker *w, int64_t ns)
{
    if (w && ns > 0 && ns < REFILL_FETCH_MAX_NS) /* longer: it waited for work */
        w->fetch_ns = EWMA(w->fetch_ns, ns);
}

static void refills_drop(er_faktory *f, er_req *r)
{
    for (size_t i = 0; i < f->nrefills; i++)
        if (f->refills[i] == r) {
            f->refills[i] = f->refills[--f->nrefills];
            return;
        }
}

static void on_refilled(er_req *r)
{
    er_faktory *f = r->arg;
    if (!f) {
        er_req_free(r); /* the frontend is gone: the leases expire */
        return;
    }
    refills_drop(f, r);
    fk_worker *w = er_fk_worker_find(f, r->fetch.worker_id);
    if (w) {
        w->refilling = false;
        if (r->rc || r->list.len < (size_t)r->fetch.max)
            w->refill_dry = true; /* the queues ran short: FETCH goes to the store */
        if (!r->rc)
            er_fk_pre_fetched(w, er_mono_ns() - w->refill_ns);
    }
    bool keep = w && !f->stopping && w->v.signal == ER_FK_RUN && !w->v.current_state[0];
    int64_t now = er_now_ms();
    for (size_t i = 0; !r->rc && i < r->list.len; i++)
        if (!keep || !er_fk_pre_put(f, w, &r->list.items[i], now))
            er_fk_pre_release_jobs(f, &r->list.items[i], 1);
    char wid[ER_NAME_MAX + 1];
    snprintf(wid, sizeof wid, "%s", r->fetch.worker_id);
    er_req_free(r);
    er_fk_wake(f, wid);
}

void er_fk_pre_refill(er_faktory *f, fk_worker *w, const er_fetch_args *like)
{
    if (!w || !f->engine || f->prefetch <= 1 || f->stopping || w->refilling ||
        w->refill_dry || w->v.signal != ER_FK_RUN || w->v.current_state[0] || !w->gap_ns ||
        !w->fetch_ns)
        return;
    /* FETCHes expected during one store round trip */
    int64_t during = w->fetch_ns / w->gap_ns;
    if ((int64_t)w->npre > during + 1)
        return;
    int64_t n = 2 * during > w->k ? 2 * during : w->k;
    int64_t room = f->prefetch - (int64_t)w->npre;
    if (n > room)
        n = room;
    if (n < 1)
        return;
    if (f->nrefills == f->refills_cap) {
        size_t cap = f->refills_cap ? 2 * f->refills_cap : 8;
        er_req **g = realloc(f->refills, cap * sizeof *g);
        if (!g)
            return;
        f->refills = g;
        f->refills_cap = cap;
    }
    er_spec_str qs[ER_FETCH_QUEUES_MAX];
    for (size_t i = 0; i < like->nqueues && i < ER_FETCH_QUEUES_MAX; i++)
        qs[i] = (er_spec_str){ER_SPEC_SET, like->queues[i], strlen(like->queues[i])};
    er_fetch_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.queues_kind = ER_SPEC_SET;
    sp.queues = qs;
    sp.nqueues = like->nqueues < ER_FETCH_QUEUES_MAX ? like->nqueues : ER_FETCH_QUEUES_MAX;
    sp.worker_id = (er_spec_str){ER_SPEC_SET, like->worker_id, strlen(like->worker_id)};
    sp.max = (er_spec_int){ER_SPEC_SET, n};
    sp.wait_ms = (er_spec_int){ER_SPEC_SET, 0};
    sp.lease_ms = (er_spec_int){ER_SPEC_SET, like->lease_ms};
    er_req *r = er_req_new(ER_REQ_FETCH);
    er_error err = {0};
    if (!r || er_fetch_validate(&sp, &r->fetch, &err) < 0) {
        er_req_free(r);
        return;
    }
    w->refilling = true;
    w->refill_ns = er_mono_ns();
    f->refills[f->nrefills++] = r;
    r->arg = f;
    r->done = on_refilled;
    er_engine_submit(f->engine, r);
}

void er_fk_pre_refills_forget(er_faktory *f)
{
    for (size_t i = 0; i < f->nrefills; i++)
        f->refills[i]->arg = NULL;
    free(f->refills);
    f->refills = NULL;
    f->nrefills = f->refills_cap = 0;
}

void er_fk_pre_handed(fk_worker *w)
{
    if (w)
        w->held++;
}

void er_fk_pre_acked(fk_worker *w)
{
    if (w && w->held > 0)
        w->held--;
}

void er_fk_pre_sweep(er_faktory *f, int64_t now)
{
    for (fk_worker *w = f->workers; w; w = w->next)
        if (w->npre)
            er_fk_pre_release(f, w, now - ER_FK_PREFETCH_HOLD_MS + 1);
}

void er_fk_pre_free(fk_worker *w)
{
    for (size_t i = 0; i < w->npre; i++)
        er_job_fini(&w->pre[i]);
    free(w->pre);
    free(w->pre_at);
    w->pre = NULL;
    w->pre_at = NULL;
    w->npre = 0;
}
