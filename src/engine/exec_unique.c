/* SPDX-License-Identifier: MIT
 *
 * An ENQUEUE whose jobs take unique locks (er_enqueue_lock; Faktory's
 * custom.unique_for, docs/faktory.md): each lock is a run-once lease
 * acquired in the enqueue's own transaction, and a job whose lock is held
 * is not enqueued. The lock's owner token is written with the job
 * (er_job.unique_token), so whoever finishes the job, on any server, can
 * give it back (exec.c's acks). The lease rules are core's and the
 * store's (lease.h); this only runs the ops in order. Writer thread, as
 * exec.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/exec.h"

int er_exec_unique_release(er_exec_ctx *x, er_req *req, const char *token, int64_t now)
{
    er_lease lease;
    er_error e;
    int rc = x->ops->lease_release(x->store, token, now, &lease, &e);
    if (er_is_storage_error(rc)) {
        req->err = e;
        return rc;
    }
    return 0;
}

/* Gives back lock i when it was taken. 0 or a storage error. */
static int release_one(er_exec_ctx *x, er_req *req, size_t i, int64_t now)
{
    er_enqueue_lock *l = &req->locks[i];
    if (!l->token[0])
        return 0;
    int rc = er_exec_unique_release(x, req, l->token, now);
    if (rc < 0)
        return rc;
    l->token[0] = '\0';
    return 0;
}

/* Gives back the locks taken so far (the enqueue was refused). 0 or a
 * storage error. */
static int release_taken(er_exec_ctx *x, er_req *req, int64_t now)
{
    for (size_t i = 0; i < req->njobs; i++) {
        int rc = release_one(x, req, i, now);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Takes job i's lock and gives the job its token: 0 (taken, or none
 * asked), 1 when it is held (the job is skipped), ER_ENOMEM (the lock is
 * taken: release it), or a storage error. */
static int take_lock(er_exec_ctx *x, er_req *req, size_t i, int64_t now)
{
    er_enqueue_lock *l = &req->locks[i];
    l->rc = 0;
    l->token[0] = '\0';
    if (!l->on)
        return 0;
    const char *queue = req->jobs[i].queue;
    char key[ER_LEASE_KEY_SIZE];
    er_lease lease;
    er_error e;
    int rc = er_lease_key(req->lease_type, queue, l->run_key, key, &e);
    if (rc == 0)
        rc = x->ops->lease_acquire(x->store, req->lease_type, queue, l->run_key, key, l->ttl_ms,
                                   now, &lease, &e);
    if (er_is_storage_error(rc)) {
        req->err = e;
        return rc;
    }
    if (rc < 0) {
        l->rc = rc;
        return 1;
    }
    snprintf(l->token, sizeof l->token, "%s", lease.owner_token);
    free(req->jobs[i].unique_token);
    if (!(req->jobs[i].unique_token = strdup(l->token)))
        return ER_ENOMEM;
    return 0;
}

int er_exec_enqueue_locked(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (!x->ops->lease_acquire || !x->ops->lease_release || !req->lease_type) {
        req->rc = er_error_set(&req->err, ER_EUNAVAIL, "",
                               "unique jobs are not supported by this store (%s)", x->ops->name);
        return 0;
    }
    size_t n = req->njobs;
    er_job *jobs = malloc((n ? n : 1) * sizeof *jobs);
    size_t *at = malloc((n ? n : 1) * sizeof *at);
    bool *dup = calloc(n ? n : 1, sizeof *dup);
    er_tombstone_list tombs = {0};
    int rc = 0;
    if (!jobs || !at || !dup) {
        rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
        goto out;
    }
    /* the locks first, in job order (a twin later in the batch finds the
     * lock of the first held); shallow copies of the jobs that go on */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        rc = take_lock(x, req, i, now);
        if (rc == ER_ENOMEM) {
            req->rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
            rc = release_taken(x, req, now);
            goto out;
        }
        if (rc < 0)
            goto out;
        if (rc == 1) {
            req->duplicate[i] = true; /* nothing enqueued for it */
            rc = 0;
            continue;
        }
        jobs[k] = req->jobs[i];
        at[k++] = i;
    }
    if (k == 1)
        rc = x->ops->enqueue(x->store, &jobs[0], &dup[0], NULL, &tombs, &req->err);
    else if (k > 1)
        rc = er_store_enqueue_many(x->ops, x->store, jobs, k, dup, &tombs, &req->err);
    if (rc < 0) {
        if (er_is_storage_error(rc))
            goto out;
        req->rc = rc; /* refused: the locks go back in this transaction */
        er_error kept = req->err;
        rc = release_taken(x, req, now);
        if (rc == 0)
            req->err = kept;
        goto out;
    }
    for (size_t j = 0; j < k; j++) {
        req->jobs[at[j]] = jobs[j];
        req->duplicate[at[j]] = dup[j];
        /* its id was taken: nothing went in to hold the lock */
        if (dup[j] && (rc = release_one(x, req, at[j], now)) < 0)
            goto out;
    }
    for (size_t t = 0; t < tombs.len; t++)
        tombs.items[t].index = at[tombs.items[t].index];
    req->tombs = tombs;
    memset(&tombs, 0, sizeof tombs);
    er_exec_wake_enqueued(x, req);
out:
    free(jobs);
    free(at);
    free(dup);
    er_tombstone_list_fini(&tombs);
    return rc;
}
