/* SPDX-License-Identifier: MIT
 *
 * The worker routes: GET /v1/workers lists the Faktory worker processes
 * this node saw beat within the last minute, POST /v1/workers/{wid}/quiet
 * and /terminate tell one what its next BEAT reply says. The registry is
 * the Faktory frontend's (server/faktory/faktory.h), per node; with no
 * Faktory port there are no workers.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/faktory/faktory.h"
#include "server/http/http_internal.h"
#include "server/http/job_json.h"

static json_t *worker_json(const er_fk_worker_view *w)
{
    const char *state = w->signal == ER_FK_RUN ? "running" : er_fk_signal_name(w->signal);
    return json_pack("{s:s, s:s, s:I, s:o, s:o, s:s, s:s, s:o, s:i}", "wid", w->wid, "hostname",
                     w->hostname, "pid", (json_int_t)w->pid, "started_at",
                     er_http_time_json(w->started_at), "last_beat",
                     er_http_time_json(w->last_beat), "state", state, "current_state",
                     w->current_state, "rss_kb",
                     w->rss_kb >= 0 ? json_integer(w->rss_kb) : json_null(), "connections",
                     w->connections);
}

void er_route_list_workers(er_hctx *c)
{
    er_fk_worker_view *v = NULL;
    size_t n = 0;
    if (er_faktory_workers(c->s->faktory, &v, &n) < 0) {
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    json_t *arr = json_array();
    int bad = !arr;
    for (size_t i = 0; i < n && !bad; i++)
        bad |= json_array_append_new(arr, worker_json(&v[i]));
    free(v);
    json_t *body = bad ? NULL : json_pack("{s:o}", "workers", arr);
    if (bad)
        json_decref(arr);
    er_http_reply_json(c, 200, body);
}

static void finish_signal(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_fk_worker_view *v = NULL;
    size_t n = 0;
    json_t *w = NULL;
    if (er_faktory_workers(c->s->faktory, &v, &n) == 0)
        for (size_t i = 0; i < n && !w; i++)
            if (strcmp(v[i].wid, c->param) == 0)
                w = worker_json(&v[i]);
    free(v);
    er_http_reply_json(c, 200, json_pack("{s:o}", "worker", w ? w : json_null()));
}

void er_route_signal_worker(er_hctx *c)
{
    er_error err = {0};
    er_fk_signal s = c->flags ? ER_FK_TERMINATE : ER_FK_QUIET;
    if (er_faktory_worker_signal(c->s->faktory, c->param, s, &err) < 0) {
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = er_req_new(ER_REQ_AUDIT_ADD); /* the audit row of this action */
    if (!r) {
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    er_http_submit(c, r, finish_signal);
}
