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

void er_fk_pre_asked(fk_worker *w)
{
    if (w && w->held + 1 > w->peak)
        w->peak = w->held + 1; /* it asks for one more while holding these */
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
