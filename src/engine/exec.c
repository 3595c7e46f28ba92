/* SPDX-License-Identifier: MIT
 *
 * Runs engine requests against a store connection. Writes run inside the
 * writer's group-commit transaction and record which queues got ready jobs;
 * reads run on the reader's connection. No locking here: each context is
 * owned by one thread.
 */
#include "engine/exec.h"
#include "util/buf.h"

#include <stdlib.h>
#include <string.h>

#define MAINT_LIMIT 5000

bool er_is_storage_error(int rc)
{
    return rc == ER_EUNAVAIL || rc == ER_EFULL || rc == ER_ENOMEM || rc == ER_EINTERNAL;
}

void er_wake_add(er_wake *w, const char *queue, int count)
{
    for (size_t i = 0; i < w->len; i++)
        if (strcmp(w->names[i], queue) == 0) {
            w->counts[i] += count;
            return;
        }
    if (ER_GROW(&w->names, &w->cap, w->len + 1, ER_LIST_MAX) < 0 ||
        ER_GROW(&w->counts, &w->ccap, w->len + 1, ER_LIST_MAX) < 0)
        return;
    char *copy = strdup(queue);
    if (!copy)
        return; /* a lost wake-up is covered by the parked fetchers' re-poll */
    w->names[w->len] = copy;
    w->counts[w->len] = count;
    w->len++;
}

void er_wake_fini(er_wake *w)
{
    for (size_t i = 0; i < w->len; i++)
        free(w->names[i]);
    free(w->names);
    free(w->counts);
    memset(w, 0, sizeof *w);
}

bool er_req_is_read(const er_req *req)
{
    switch (req->type) {
    case ER_REQ_GET_JOB:
    case ER_REQ_LIST_JOBS:
    case ER_REQ_LIST_QUEUES:
    case ER_REQ_LIST_SETTINGS:
    case ER_REQ_GET_QUEUE:
    case ER_REQ_LIST_DEAD:
        return true;
    default:
        return er_sched_req_is_read(req) || er_ui_req_is_read(req) ||
               er_workers_req_is_read(req);
    }
}

static void wake_names(er_wake *w, char **names, size_t n, int count)
{
    for (size_t i = 0; i < n; i++) {
        er_wake_add(w, names[i], count);
        free(names[i]);
    }
    free(names);
}

/* Wakes parked fetchers for the jobs of a committed-to-be enqueue that are
 * ready now, one er_wake entry per run of jobs on the same queue. */
void er_exec_wake_enqueued(er_exec_ctx *x, const er_req *req)
{
    int ready = 0;
    for (size_t i = 0; i < req->njobs; i++) {
        const er_job *job = &req->jobs[i];
        if (!req->duplicate[i] && job->state == ER_STATE_WAITING)
            ready++;
        if (ready && (i + 1 == req->njobs || strcmp(req->jobs[i + 1].queue, job->queue) != 0)) {
            er_wake_add(&x->wake, job->queue, ready);
            ready = 0;
        }
    }
}

/* The start of every enqueue: the duplicate flags (all false), the jobs'
 * defaults from their queues' settings. */
static int enqueue_prepare(er_exec_ctx *x, er_req *req, int64_t now)
{
    er_error *err = &req->err;
    er_tombstone_list_fini(&req->tombs);
    if (!req->duplicate) {
        req->duplicate = calloc(req->njobs ? req->njobs : 1, sizeof *req->duplicate);
        if (!req->duplicate)
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    er_job_defaults qd;
    const char *qd_for = NULL;
    for (size_t i = 0; i < req->njobs; i++) {
        er_job *job = &req->jobs[i];
        if (!qd_for || strcmp(qd_for, job->queue) != 0) {
            int rc = er_store_queue_defaults(x->ops, x->store, job->queue, &qd, err);
            if (rc < 0)
                return rc;
            qd_for = job->queue;
        }
        er_job_apply_defaults(job, &qd, &x->server_defaults);
        job->updated_at = now;
    }
    return 0;
}

/* One job: ops->enqueue, which also returns the stored job of a duplicate.
 * Many: er_store_enqueue_many (one statement on PostgreSQL). With locks:
 * er_exec_enqueue_locked (exec_unique.c). */
static int exec_enqueue(er_exec_ctx *x, er_req *req, int64_t now)
{
    er_error *err = &req->err;
    int rc = enqueue_prepare(x, req, now);
    if (rc < 0)
        return rc;
    if (req->locks)
        return er_exec_enqueue_locked(x, req, now);
    if (req->njobs == 1)
        rc = x->ops->enqueue(x->store, &req->jobs[0], &req->duplicate[0], &req->job, &req->tombs,
                             err);
    else
        rc = er_store_enqueue_many(x->ops, x->store, req->jobs, req->njobs, req->duplicate,
                                   &req->tombs, err);
    if (rc < 0)
        return rc;
    er_exec_wake_enqueued(x, req);
    if (req->njobs == 1 && !req->duplicate[0]) {
        rc = er_job_copy(&req->job, &req->jobs[0]);
        if (rc < 0)
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    return 0;
}

/* Requests one store call may enqueue together: at most this many jobs. */
#define ENQUEUE_RUN_MAX 1024

/* Enqueues the jobs of the ENQUEUE requests first..last (two or more, in
 * order) with one ops->enqueue_many call: the result each request would
 * have had alone (a job given twice is a duplicate the second time, also
 * across requests). Returns 0, a storage error, or 1 when the store refused
 * the call with a logical error (nothing was written; run them one by one). */
static int enqueue_run(er_exec_ctx *x, er_req *first, er_req *last, size_t total, int64_t now)
{
    er_job *jobs = malloc(total * sizeof *jobs);
    bool *dup = malloc(total * sizeof *dup);
    er_tombstone_list tombs = {0};
    int rc = 0;
    if (!jobs || !dup) {
        rc = er_error_set(&first->err, ER_ENOMEM, "", "out of memory");
        goto out;
    }
    /* shallow copies: the requests keep owning the strings */
    size_t k = 0;
    er_job_defaults qd;
    const char *qd_for = NULL;
    for (er_req *r = first;; r = r->next) {
        er_error_clear(&r->err);
        r->rc = 0;
        er_tombstone_list_fini(&r->tombs);
        if (!r->duplicate &&
            !(r->duplicate = calloc(r->njobs ? r->njobs : 1, sizeof *r->duplicate))) {
            rc = er_error_set(&first->err, ER_ENOMEM, "", "out of memory");
            goto out;
        }
        for (size_t i = 0; i < r->njobs; i++) {
            er_job *job = &r->jobs[i];
            if (!qd_for || strcmp(qd_for, job->queue) != 0) {
                rc = er_store_queue_defaults(x->ops, x->store, job->queue, &qd, &first->err);
                if (rc < 0)
                    goto out;
                qd_for = job->queue;
            }
            er_job_apply_defaults(job, &qd, &x->server_defaults);
            job->updated_at = now;
            jobs[k++] = *job;
        }
        if (r == last)
            break;
    }
    rc = x->ops->enqueue_many(x->store, jobs, total, dup, &tombs, &first->err);
    if (rc < 0) {
        if (!er_is_storage_error(rc))
            rc = 1;
        goto out;
    }
    k = 0;
    size_t t = 0;
    for (er_req *r = first;; r = r->next) {
        memcpy(r->duplicate, dup + k, r->njobs * sizeof *dup);
        /* the tombstones of this request's jobs, indexed within it */
        bool remembered = false;
        for (; t < tombs.len && tombs.items[t].index < k + r->njobs; t++) {
            er_tombstone *tb = &tombs.items[t];
            if (er_tombstone_list_add(&r->tombs, tb->index - k, tb->queue, tb->state,
                                      tb->finished_at) < 0) {
                rc = er_error_set(&first->err, ER_ENOMEM, "", "out of memory");
                goto out;
            }
            remembered = true;
        }
        k += r->njobs;
        er_exec_wake_enqueued(x, r);
        if (r->njobs == 1) {
            /* the stored job: the existing one for a duplicate */
            if (remembered)
                rc = 0;
            else if (r->duplicate[0])
                rc = x->ops->get_job(x->store, r->jobs[0].id, &r->job, &r->err);
            else if (er_job_copy(&r->job, &r->jobs[0]) < 0)
                rc = er_error_set(&r->err, ER_ENOMEM, "", "out of memory");
            if (er_is_storage_error(rc)) {
                if (r != first)
                    first->err = r->err;
                goto out;
            }
            r->rc = rc; /* as exec_enqueue: this request's own error */
            rc = 0;
        }
        if (r == last)
            break;
    }
out:
    free(jobs);
    free(dup);
    er_tombstone_list_fini(&tombs);
    return rc;
}

/* An ACKS request of completes only (a run of them shares one
 * ops->complete_many call). */
static bool completes_only(const er_req *r)
{
    if (r->type != ER_REQ_ACKS || r->nacks == 0)
        return false;
    for (size_t i = 0; i < r->nacks; i++)
        if (r->acks[i].kind != ER_ACK_COMPLETE)
            return false;
    return true;
}

/* Acks one complete_many call may take from a run of requests. */
#define COMPLETE_RUN_MAX 1024

static int release_unique(er_exec_ctx *x, er_req *req, int64_t now);

/* Completes the acks of the ACKS requests first..last (two or more,
 * completes only, `total` acks) with one ops->complete_many call: each ack
 * gets the answer it would have had alone (the store applies a job named
 * twice in order), then each request gives back its unique locks. 0, or a
 * storage error in first->err. */
static int complete_run(er_exec_ctx *x, er_req *first, er_req *last, size_t total, int64_t now)
{
    er_complete_item *items = calloc(total, sizeof *items);
    if (!items)
        return er_error_set(&first->err, ER_ENOMEM, "", "out of memory");
    size_t k = 0;
    for (er_req *r = first;; r = r->next) {
        er_error_clear(&r->err);
        r->rc = 0;
        for (size_t i = 0; i < r->nacks; i++) {
            er_ack *a = &r->acks[i];
            er_error_clear(&a->err);
            items[k++] = (er_complete_item){.id = a->id, .token = a->token, .result = a->result,
                                            .err = &a->err, .info = &a->info};
        }
        if (r == last)
            break;
    }
    int rc = x->ops->complete_many(x->store, items, total, now, &first->err);
    k = 0;
    for (er_req *r = first; rc == 0; r = r->next) {
        for (size_t i = 0; i < r->nacks; i++, k++) {
            r->acks[i].rc = items[k].rc;
            if (items[k].rc == 0)
                er_keys_add(&x->done, r->acks[i].id);
        }
        rc = release_unique(x, r, now);
        if (rc < 0 && r != first)
            first->err = r->err;
        if (r == last)
            break;
    }
    free(items);
    return rc;
}

int er_exec_write_run(er_exec_ctx *x, er_req *first, er_req **next, int64_t now)
{
    er_req *last = first;
    size_t total = first->type == ER_REQ_ENQUEUE && !first->locks ? first->njobs : 0;
    if (total && x->ops->enqueue_many) {
        for (er_req *r = first->next; r && r->type == ER_REQ_ENQUEUE && !r->locks && r->njobs &&
                                      total + r->njobs <= ENQUEUE_RUN_MAX;
             r = r->next) {
            last = r;
            total += r->njobs;
        }
    } else if (x->ops->complete_many && completes_only(first)) {
        size_t acks = first->nacks;
        for (er_req *r = first->next;
             r && completes_only(r) && acks + r->nacks <= COMPLETE_RUN_MAX; r = r->next) {
            last = r;
            acks += r->nacks;
        }
        if (last != first) {
            *next = last->next;
            return complete_run(x, first, last, acks, now);
        }
    }
    *next = last->next;
    if (last != first) {
        int rc = enqueue_run(x, first, last, total, now);
        if (rc <= 0)
            return rc;
        /* refused as a whole: each request alone gets its own answer */
    }
    for (er_req *r = first; r != *next; r = r->next) {
        int rc = er_exec_write(x, r, now);
        if (rc < 0) {
            if (r != first)
                first->err = r->err;
            return rc;
        }
    }
    return 0;
}

int er_exec_enqueue_job(er_exec_ctx *x, er_job *job, int64_t now, bool *duplicate,
                        er_job *existing, er_tombstone_list *tombs, er_error *err)
{
    er_job_defaults qd;
    int rc = er_store_queue_defaults(x->ops, x->store, job->queue, &qd, err);
    if (rc < 0)
        return rc;
    er_job_apply_defaults(job, &qd, &x->server_defaults);
    job->updated_at = now;
    rc = x->ops->enqueue(x->store, job, duplicate, existing, tombs, err);
    if (rc == 0 && !*duplicate && job->state == ER_STATE_WAITING)
        er_wake_add(&x->wake, job->queue, 1);
    return rc;
}

/* Applies acks[i..j), all completes, with one ops->complete_many call. */
static int exec_completes(er_exec_ctx *x, er_req *req, size_t i, size_t j, int64_t now)
{
    er_complete_item *items = calloc(j - i, sizeof *items);
    if (!items)
        return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    for (size_t k = i; k < j; k++) {
        er_ack *a = &req->acks[k];
        er_error_clear(&a->err);
        items[k - i] = (er_complete_item){
            .id = a->id, .token = a->token, .result = a->result, .err = &a->err,
            .info = &a->info};
    }
    int rc = x->ops->complete_many(x->store, items, j - i, now, &req->err);
    for (size_t k = i; rc == 0 && k < j; k++) {
        req->acks[k].rc = items[k - i].rc;
        if (items[k - i].rc == 0)
            er_keys_add(&x->done, req->acks[k].id);
    }
    free(items);
    return rc;
}

/* Applies acks[i..j), all failures, with one ops->fail_many call. */
static int exec_fails(er_exec_ctx *x, er_req *req, size_t i, size_t j, int64_t now)
{
    er_fail_item *items = calloc(j - i, sizeof *items);
    if (!items)
        return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    for (size_t k = i; k < j; k++) {
        er_ack *a = &req->acks[k];
        er_error_clear(&a->err);
        items[k - i] = (er_fail_item){.id = a->id, .token = a->token, .failure = &a->failure,
                                      .err = &a->err, .outcome = &a->outcome, .info = &a->info};
    }
    int rc = x->ops->fail_many(x->store, items, j - i, now, &x->rand, &req->err);
    for (size_t k = i; rc == 0 && k < j; k++) {
        req->acks[k].rc = items[k - i].rc;
        if (items[k - i].rc == 0 && req->acks[k].outcome.state == ER_STATE_DEAD)
            er_keys_add(&x->done, req->acks[k].id);
    }
    free(items);
    return rc;
}

/* Applies acks[i..j), all releases, with one ops->release_many call; a
 * released job's queue is woken, as it is ready again at once. */
static int exec_releases(er_exec_ctx *x, er_req *req, size_t i, size_t j, int64_t now)
{
    er_release_item *items = calloc(j - i, sizeof *items);
    if (!items)
        return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    for (size_t k = i; k < j; k++) {
        er_ack *a = &req->acks[k];
        er_error_clear(&a->err);
        items[k - i] = (er_release_item){.id = a->id, .token = a->token, .err = &a->err};
    }
    int rc = x->ops->release_many(x->store, items, j - i, now, &req->err);
    for (size_t k = i; k < j; k++) {
        if (rc == 0) {
            req->acks[k].rc = items[k - i].rc;
            if (items[k - i].rc == 0 && items[k - i].queue)
                er_wake_add(&x->wake, items[k - i].queue, 1);
        }
        free(items[k - i].queue);
    }
    free(items);
    return rc;
}

/* Gives back the unique locks of the jobs acks completed, whoever sent
 * the ack (Faktory or HTTP), with the token the store read from the job.
 * A lock already given back, or taken again by a twin under a new token,
 * is left as it is. 0 or a storage error. */
static int release_unique(er_exec_ctx *x, er_req *req, int64_t now)
{
    for (size_t i = 0; i < req->nacks && x->ops->lease_release; i++) {
        const er_ack *a = &req->acks[i];
        if (a->kind != ER_ACK_COMPLETE || a->rc != 0 || !a->info.unique_token[0])
            continue;
        int rc = er_exec_unique_release(x, req, a->info.unique_token, now);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Applies acks in order; each item's logical error stays on the item. A
 * run of completes goes to ops->complete_many, a run of failures to
 * ops->fail_many, and a run of releases to ops->release_many, when the
 * store has it. */
static int exec_acks(er_exec_ctx *x, er_req *req, int64_t now)
{
    for (size_t i = 0; i < req->nacks; i++) {
        er_ack *a = &req->acks[i];
        bool many = (a->kind == ER_ACK_COMPLETE && x->ops->complete_many) ||
                    (a->kind == ER_ACK_FAIL && x->ops->fail_many) ||
                    (a->kind == ER_ACK_RELEASE && x->ops->release_many);
        if (many) {
            size_t j = i + 1;
            while (j < req->nacks && req->acks[j].kind == a->kind)
                j++;
            if (j - i > 1) {
                int rc = a->kind == ER_ACK_COMPLETE ? exec_completes(x, req, i, j, now)
                         : a->kind == ER_ACK_FAIL   ? exec_fails(x, req, i, j, now)
                                                    : exec_releases(x, req, i, j, now);
                if (rc < 0)
                    return rc;
                i = j - 1;
                continue;
            }
        }
        er_error_clear(&a->err);
        int rc;
        switch (a->kind) {
        case ER_ACK_COMPLETE:
            rc = x->ops->complete(x->store, a->id, a->token, a->result, now, &a->info, &a->err);
            break;
        case ER_ACK_FAIL:
            rc = x->ops->fail(x->store, a->id, a->token, &a->failure, now, &x->rand, &a->outcome,
                              &a->info, &a->err);
            break;
        case ER_ACK_RELEASE:
        default:
            rc = x->ops->release(x->store, a->id, a->token, now, &a->err);
            break;
        }
        if (er_is_storage_error(rc)) {
            req->err = a->err;
            return rc;
        }
        a->rc = rc;
        if (rc == 0 && (a->kind == ER_ACK_COMPLETE ||
                        (a->kind == ER_ACK_FAIL && a->outcome.state == ER_STATE_DEAD)))
            er_keys_add(&x->done, a->id);
        if (rc == 0 && a->kind == ER_ACK_RELEASE) {
            er_job tmp;
            er_job_init(&tmp);
            /* a released job is ready again at once */
            if (x->ops->get_job(x->store, a->id, &tmp, NULL) == 0)
                er_wake_add(&x->wake, tmp.queue, 1);
            er_job_fini(&tmp);
        }
    }
    return release_unique(x, req, now);
}

static int exec_fetch(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (!req->acks_applied) {
        int rc = exec_acks(x, req, now);
        if (rc < 0)
            return rc;
    }
    return er_exec_fetch_again(x, req, now);
}

/* ops->fetch under the reply cap (--max-reply): one call with the budget
 * left (er_fetch_params.max_bytes), which the store enforces inside its
 * lease, in fetch order; no job is leased and then dropped, and the first
 * job of a reply is taken whatever its size. Only a queue of the group
 * planner, whose lease statements cannot size a row first, leases by the
 * largest a job can be and asks for another call (*more); the loop follows
 * then, in the same transaction, while jobs keep coming and room is left. */
static int fetch_capped(er_exec_ctx *x, const er_fetch_params *p, er_req *req)
{
    size_t used = 0;
    for (size_t i = 0; i < req->list.len; i++)
        used += er_job_reply_bytes(&req->list.items[i]);
    int64_t ready = INT64_MAX, at = INT64_MAX;
    int got = 0, rc = 0;
    while (got < p->max && (used < x->reply_max || req->list.len == 0)) {
        bool more = false;
        er_fetch_params q = *p;
        q.max = p->max - got;
        q.ready_at = &at;
        q.max_bytes = x->reply_max;
        q.used_bytes = used;
        q.job_bytes_max = er_job_lease_bytes_max(x->payload_max);
        q.more = &more;
        at = INT64_MAX;
        size_t before = req->list.len;
        rc = x->ops->fetch(x->store, &q, &req->list, &req->err);
        ready = at < ready ? at : ready;
        if (rc < 0)
            break;
        for (size_t i = before; i < req->list.len; i++)
            used += er_job_reply_bytes(&req->list.items[i]);
        got += (int)(req->list.len - before);
        if (!more || req->list.len == before)
            break;
    }
    if (p->ready_at)
        *p->ready_at = ready;
    return rc;
}

int er_exec_fetch_again(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (atomic_load(&req->abandoned))
        return 0; /* the client is gone: a job leased now would wait out its lease */
    const er_fetch_args *a = &req->fetch;
    er_fetch_params p = {
        .queues = (const char *const *)a->queues,
        .nqueues = a->nqueues,
        .worker_id = a->worker_id,
        .max = a->max,
        .lease_ms = a->lease_ms,
        .now = now,
        .ready_at = &req->ready_at,
    };
    req->ready_at = INT64_MAX;
    if (!a->weights || a->nqueues < 2)
        return fetch_capped(x, &p, req);
    /* a weighted mix (core/fetch.h er_fetch_mix): each queue's quota, then
     * what is left from all of them in the drawn order */
    size_t order[ER_FETCH_QUEUES_MAX];
    int quota[ER_FETCH_QUEUES_MAX];
    const char *qs[ER_FETCH_QUEUES_MAX];
    er_fetch_mix(a, &x->rand, order, quota);
    size_t base = req->list.len;
    int64_t ready_at = INT64_MAX, at;
    p.ready_at = &at;
    p.nqueues = 1;
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < a->nqueues; k++) {
        qs[k] = a->queues[order[k]];
        if (quota[order[k]] == 0)
            continue;
        p.queues = &qs[k];
        p.max = quota[order[k]];
        rc = fetch_capped(x, &p, req);
        ready_at = at < ready_at ? at : ready_at;
    }
    int got = (int)(req->list.len - base);
    if (rc == 0 && got < a->max) {
        p.queues = qs;
        p.nqueues = a->nqueues;
        p.max = a->max - got;
        rc = fetch_capped(x, &p, req);
        ready_at = at < ready_at ? at : ready_at;
    }
    req->ready_at = ready_at;
    return rc;
}

static int exec_put_queue(er_exec_ctx *x, er_req *req)
{
    er_queue_settings s;
    int rc = x->ops->get_queue_settings(x->store, req->queue, &s, &req->err);
    if (rc < 0)
        return rc;
    rc = er_queue_settings_change(&s, req->change, &req->err);
    if (rc < 0) {
        req->rc = rc;
        return 0;
    }
    if (!req->settings && !(req->settings = malloc(sizeof *req->settings)))
        return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    rc = x->ops->put_queue_settings(x->store, req->queue, &s, &req->err);
    /* resume, or paused false, also ends a throttle */
    bool unpause = req->change->paused == ER_CHANGE_SET && !req->change->paused_v;
    if (rc == 0 && unpause)
        rc = x->ops->clear_queue_throttle(x->store, req->queue, &req->err);
    if (rc < 0)
        return rc;
    *req->settings = s;
    if (unpause)
        er_wake_add(&x->wake, req->queue, ER_FETCH_MAX);
    return 0;
}

/* A heartbeat without extend_ms extends by the job's queue lease_ms. */
static int default_extend(er_exec_ctx *x, er_req *req)
{
    er_job job;
    er_job_init(&job);
    int rc = x->ops->get_job(x->store, req->id, &job, &req->err);
    er_queue_settings qs;
    if (rc == 0)
        rc = x->ops->get_queue_settings(x->store, job.queue, &qs, &req->err);
    if (rc == 0)
        req->extend_ms = qs.lease_ms;
    er_job_fini(&job);
    return rc;
}

int er_exec_write(er_exec_ctx *x, er_req *req, int64_t now)
{
    int rc = 0;
    er_error_clear(&req->err);
    req->rc = 0;
    switch (req->type) {
    case ER_REQ_ENQUEUE:
        rc = exec_enqueue(x, req, now);
        break;
    case ER_REQ_FETCH:
        rc = exec_fetch(x, req, now);
        break;
    case ER_REQ_ACKS:
        rc = exec_acks(x, req, now);
        break;
    case ER_REQ_HEARTBEAT:
        if (req->extend_ms <= 0) {
            rc = default_extend(x, req);
            if (rc < 0)
                break;
        }
        rc = x->ops->heartbeat(x->store, req->id, req->token, req->extend_ms, req->progress, now,
                               &req->expires_at, &req->err);
        break;
    case ER_REQ_CANCEL:
        rc = x->ops->cancel(x->store, req->id, now, &req->job, &req->err);
        if (rc == 0)
            er_keys_add(&x->done, req->id);
        break;
    case ER_REQ_PUT_QUEUE:
        rc = exec_put_queue(x, req);
        break;
    case ER_REQ_REDRIVE:
        rc = x->ops->redrive(x->store, req->id, now, &req->job, &req->err);
        if (rc == 0 && req->job.queue)
            er_wake_add(&x->wake, req->job.queue, 1);
        break;
    case ER_REQ_DELETE_DEAD:
        rc = x->ops->delete_dead(x->store, req->id, &req->err);
        break;
    default:
        if (er_req_is_read(req) || req->type < ER_REQ_PUT_SCHEDULER)
            rc = er_error_set(&req->err, ER_EINTERNAL, "", "read request on the writer");
        else if (req->type >= ER_REQ_WORKER_BEATS)
            rc = er_exec_workers_write(x, req, now);
        else if (req->type >= ER_REQ_SESSION_PUT)
            rc = er_exec_ui_write(x, req, now);
        else
            rc = er_exec_sched_write(x, req, now);
        break;
    }
    if (er_is_storage_error(rc))
        return rc;
    if (rc < 0 && req->rc == 0)
        req->rc = rc;
    return er_exec_audit(x, req, now);
}

void er_exec_read(er_exec_ctx *x, er_req *req, int64_t now)
{
    int rc;
    er_error_clear(&req->err);
    switch (req->type) {
    case ER_REQ_GET_JOB:
        rc = x->ops->get_job(x->store, req->id, &req->job, &req->err);
        break;
    case ER_REQ_LIST_JOBS:
        rc = x->ops->list_jobs(x->store, req->queue, req->state, req->max, req->cursor,
                               &req->list, &req->next_cursor, &req->err);
        break;
    case ER_REQ_LIST_QUEUES:
        rc = x->ops->list_queues(x->store, now, &req->queue_infos, &req->nqueue_infos,
                                 &req->err);
        break;
    case ER_REQ_LIST_SETTINGS:
        rc = x->ops->list_queue_settings(x->store, &req->queue_infos, &req->nqueue_infos,
                                         &req->err);
        break;
    case ER_REQ_GET_QUEUE:
        if (!req->settings && !(req->settings = malloc(sizeof *req->settings)))
            rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
        else
            rc = x->ops->get_queue_settings(x->store, req->queue, req->settings, &req->err);
        break;
    case ER_REQ_LIST_DEAD:
        rc = x->ops->list_dead(x->store, req->queue, req->max, req->cursor, &req->list,
                               &req->next_cursor, &req->err);
        break;
    default:
        if (er_sched_req_is_read(req)) {
            er_exec_sched_read(x, req, now);
            return;
        }
        if (er_ui_req_is_read(req)) {
            er_exec_ui_read(x, req);
            return;
        }
        if (er_workers_req_is_read(req)) {
            er_exec_workers_read(x, req, now);
            return;
        }
        rc = er_error_set(&req->err, ER_EINTERNAL, "", "write request on the reader");
        break;
    }
    req->rc = rc;
}

int er_exec_maintenance(er_exec_ctx *x, int64_t now, bool with_retention, er_error *err)
{
    char **names = NULL;
    size_t n = 0;
    int count = 0;
    int rc = x->ops->promote(x->store, now, MAINT_LIMIT, &count, &names, &n, err);
    if (rc < 0)
        return rc;
    x->promoted += count;
    wake_names(&x->wake, names, n, count > 0 ? count : 1);
    names = NULL;
    n = 0;
    size_t had = x->reaped_jobs.len;
    rc = x->ops->reap(x->store, now, MAINT_LIMIT, &count, &names, &n, &x->reaped_jobs, err);
    if (rc < 0)
        return rc;
    x->reaped += count;
    wake_names(&x->wake, names, n, count > 0 ? count : 1);
    for (size_t i = had; i < x->reaped_jobs.len; i++)
        if (x->reaped_jobs.items[i].state == ER_STATE_DEAD)
            er_keys_add(&x->done, x->reaped_jobs.items[i].id);
    if (with_retention) {
        rc = x->ops->retention(x->store, now, MAINT_LIMIT, &count, err);
        if (rc == 0)
            rc = er_exec_ui_sweep(x, now);
        if (rc < 0)
            return rc;
    }
    return er_exec_cron(x, now);
}
