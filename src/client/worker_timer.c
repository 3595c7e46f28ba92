/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's timer thread: lease heartbeats for the held jobs
 * (every lease_ms / 3, in batches, on its own connection) and job timeouts:
 * a handler past its deadline is told to stop, one still running past the
 * abandon window is failed as transient (worker_job.c), and a job whose
 * lease is gone is dropped or told to stop. Heartbeats and callbacks run
 * without the mutex.
 */
#include "client/worker_int.h"
#include "util/clock.h"

void *er_worker_timer_main(void *arg)
{
    errand_worker *w = arg;
    errand_client *c =
        er_worker_thread_client(w, w->lease_ms / 3 > 10000 ? 10000 : w->lease_ms / 3 + 1000);
    const int64_t interval = w->lease_ms / 3;
    enum { BATCH = 64 };
    pthread_mutex_lock(&w->mu);
    while (!w->timer_exit) {
        int64_t now = er_mono_ms();
        int64_t next = now + 1000;
        errand_job *hb[BATCH], *notify[BATCH];
        int nhb = 0, nnotify = 0;
        for (errand_job *j = w->held.lnext; j != &w->held;) {
            errand_job *nx = j->lnext;
            if (j->where == ER_JOB_RUNNING) {
                if (atomic_load(&j->stop) == 0 && now >= j->deadline && nnotify < BATCH) {
                    atomic_store(&j->stop, ERRAND_STOP_TIMEOUT);
                    atomic_fetch_add(&w->st_timed_out, 1);
                    atomic_fetch_add(&j->refs, 1);
                    notify[nnotify++] = j;
                } else if (atomic_load(&j->stop) == ERRAND_STOP_TIMEOUT && now >= j->abandon_at) {
                    er_worker_abandon_locked(w, j);
                    j = nx;
                    continue;
                }
                int64_t due = atomic_load(&j->stop) == 0 ? j->deadline : j->abandon_at;
                if (due < next)
                    next = due;
            }
            if (!j->hb_busy && now >= j->next_hb && nhb < BATCH) {
                j->hb_busy = true;
                atomic_fetch_add(&j->refs, 1);
                hb[nhb++] = j;
            } else if (!j->hb_busy && j->next_hb < next) {
                next = j->next_hb;
            }
            j = nx;
        }
        if (nhb == 0 && nnotify == 0) {
            w->timer_sleeping = true;
            w->timer_wake = next;
            er_worker_timed_wait(&w->cv_timer, &w->mu, next);
            w->timer_sleeping = false;
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        for (int i = 0; i < nnotify; i++) {
            er_worker_log(w, ERRAND_LOG_WARN,
                          json_pack("{s:s,s:s,s:s,s:I}", "msg", "job timed out", "job_id",
                                    notify[i]->id, "queue", notify[i]->queue, "timeout_ms",
                                    (json_int_t)notify[i]->timeout_used));
            if (w->on_stop)
                w->on_stop(notify[i], ERRAND_STOP_TIMEOUT, w->stop_user);
        }
        int hrc[BATCH];
        for (int i = 0; i < nhb; i++) {
            hrc[i] = c ? errand_heartbeat(c, hb[i]->id, hb[i]->token, w->lease_ms, NULL, NULL)
                       : ERRAND_ENOMEM;
            if (hrc[i] < 0 && hrc[i] != ERRAND_ESTALE && c)
                er_worker_log_client_error(w, ERRAND_LOG_WARN, "heartbeat failed; retrying", c);
        }
        errand_job *lost[BATCH];
        int lost_kind[BATCH];
        int nlost = 0;
        pthread_mutex_lock(&w->mu);
        int64_t after = er_mono_ms();
        for (int i = 0; i < nhb; i++) {
            errand_job *j = hb[i];
            j->hb_busy = false;
            if (hrc[i] == 0) {
                j->next_hb = after + interval;
            } else if (hrc[i] == ERRAND_ESTALE || hrc[i] == ERRAND_ENOTFOUND) {
                int kind = er_worker_lose_locked(w, j);
                if (kind) {
                    lost_kind[nlost] = kind;
                    lost[nlost++] = j; /* keeps the heartbeat's reference */
                } else {
                    er_job_unref(j);
                }
                continue;
            } else {
                j->next_hb = after + 1000;
            }
            er_job_unref(j);
        }
        pthread_mutex_unlock(&w->mu);
        for (int i = 0; i < nlost; i++) {
            er_worker_log(w, ERRAND_LOG_WARN,
                          json_pack("{s:s,s:s,s:s}", "msg", "lease lost; the job must stop",
                                    "job_id", lost[i]->id, "queue", lost[i]->queue));
            if (lost_kind[i] == 2 && w->on_stop)
                w->on_stop(lost[i], ERRAND_STOP_LEASE_LOST, w->stop_user);
            er_job_unref(lost[i]);
        }
        for (int i = 0; i < nnotify; i++)
            er_job_unref(notify[i]);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    errand_client_free(c);
    return NULL;
}
