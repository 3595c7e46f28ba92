/* SPDX-License-Identifier: MIT
 *
 * Engine requests: allocation and release of everything a request owns.
 */
#include "engine/engine.h"

#include <stdlib.h>

er_req *er_req_new(er_req_type type)
{
    er_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->type = type;
    er_job_init(&r->job);
    return r;
}

void er_sched_view_fini(er_sched_view *v)
{
    if (!v)
        return;
    er_sched_row_fini(&v->row);
    er_scheduler_fini(&v->sc);
}

void er_req_free(er_req *req)
{
    if (!req)
        return;
    for (size_t i = 0; i < req->njobs; i++)
        er_job_fini(&req->jobs[i]);
    free(req->jobs);
    for (size_t i = 0; i < req->nacks; i++)
        er_ack_fini(&req->acks[i]);
    free(req->acks);
    er_fetch_args_fini(&req->fetch);
    free(req->id);
    free(req->token);
    free(req->progress);
    free(req->queue);
    free(req->cursor);
    free(req->duplicate);
    er_tombstone_list_fini(&req->tombs);
    er_job_fini(&req->job);
    er_job_list_fini(&req->list);
    free(req->next_cursor);
    er_queue_info_list_free(req->queue_infos, req->nqueue_infos);
    free(req->text);
    free(req->expected);
    free(req->lease_type);
    free(req->lease_code);
    free(req->lease_run_key);
    er_scheduler_fini(&req->sched);
    for (size_t i = 0; i < req->nscheds; i++)
        er_sched_view_fini(&req->scheds[i]);
    free(req->scheds);
    free(req->value);
    er_lease_list_fini(&req->leases);
    er_cursor_list_fini(&req->cursors);
    free(req->change);
    free(req->settings);
    if (req->audit) {
        er_audit_fini(req->audit);
        free(req->audit);
    }
    er_audit_list_fini(&req->audits);
    free(req->locks);
    er_worker_list_fini(&req->workers);
    er_worker_list_fini(&req->worker_rows);
    for (size_t i = 0; i < req->nwids; i++)
        free(req->wids[i]);
    free(req->wids);
    for (size_t i = 0; i < req->bulk.nids; i++)
        free(req->bulk.ids[i]);
    free(req->bulk.ids);
    free((char *)req->bulk.filter.queue);
    free((char *)req->bulk.filter.name);
    free(req->bulk.pattern);
    free(req->bulk.reason);
    free(req);
}
