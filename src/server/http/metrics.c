/* SPDX-License-Identifier: MIT
 *
 * Health probes and /metrics. /healthz says the process answers; /readyz
 * says the engine is ready and the listener still accepts. /metrics renders
 * the engine's counters and the server's own request counters in the
 * Prometheus text format 0.0.4; it reads counters only, never the store.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <inttypes.h>

#include "core/http_outcome.h"
#include "server/http/http_internal.h"

void er_route_healthz(er_hctx *c)
{
    static const char body[] = "{\"status\":\"ok\"}";
    er_http_reply_text(c, 200, "application/json", body, sizeof body - 1);
}

/* The relay's health: shown, never a reason for 503 (the server still
 * serves its own queues while the application's database is away). */
static void outbox_status(er_outbox *o, er_jsonw *w)
{
    er_outbox_stats st;
    er_outbox_get_stats(o, &st);
    er_jsonw_key(w, "outbox");
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "status");
    er_jsonw_str(w, st.connected ? "connected" : "unreachable");
    er_jsonw_key(w, "error");
    er_jsonw_str(w, st.last_error[0] ? st.last_error : NULL);
    er_jsonw_key(w, "transactions");
    er_jsonw_int(w, st.one_transaction ? 1 : 2);
    er_jsonw_key(w, "lag_ms");
    er_jsonw_int(w, st.lag_ms);
    er_jsonw_end_object(w);
}

void er_route_readyz(er_hctx *c)
{
    if (c->s->accepting && er_engine_ready(c->s->engine)) {
        static const char body[] = "{\"status\":\"ready\"}";
        if (!c->s->outbox) {
            er_http_reply_text(c, 200, "application/json", body, sizeof body - 1);
            return;
        }
        er_jsonw w;
        er_http_jsonw_init(c, &w);
        er_jsonw_begin_object(&w);
        er_jsonw_key(&w, "status");
        er_jsonw_str(&w, "ready");
        outbox_status(c->s->outbox, &w);
        er_jsonw_end_object(&w);
        er_http_reply_jsonw(c, 200, &w);
        return;
    }
    er_http_fail(c, ER_EUNAVAIL, NULL,
                 c->s->accepting ? "the store is not ready" : "shutting down");
}

static void metric(struct evbuffer *b, const char *name, const char *type, const char *help,
                   uint64_t v)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type,
                        name, v);
}

void er_route_metrics(er_hctx *c)
{
    er_server *s = c->s;
    er_engine_stats st = {0};
    er_engine_get_stats(s->engine, &st);
    struct evbuffer *b = evhttp_request_get_output_buffer(c->req);

    metric(b, "errand_up", "gauge", "1 while the server is running.", 1);
    metric(b, "errand_ready", "gauge", "1 when the server accepts and the store is ready.",
           s->accepting && er_engine_ready(s->engine));
    metric(b, "errand_commits_total", "counter", "Store transactions committed by the writer.",
           st.commits);
    metric(b, "errand_commit_requests_total", "counter", "Requests answered by group commits.",
           st.commit_requests);
    metric(b, "errand_commit_failures_total", "counter", "Group commits that failed.",
           st.commit_failures);
    metric(b, "errand_jobs_enqueued_total", "counter", "Jobs enqueued.", st.enqueued);
    metric(b, "errand_jobs_fetched_total", "counter", "Jobs leased to workers.", st.fetched);
    metric(b, "errand_jobs_completed_total", "counter", "Jobs completed.", st.completed);
    metric(b, "errand_jobs_failed_total", "counter", "Job failures reported by workers.",
           st.failed);
    metric(b, "errand_jobs_released_total", "counter", "Jobs released by workers.", st.released);
    metric(b, "errand_jobs_promoted_total", "counter", "Scheduled jobs that became waiting.",
           st.promoted);
    metric(b, "errand_jobs_reaped_total", "counter", "Expired leases reaped (stalled jobs).",
           st.reaped);
    metric(b, "errand_jobs_dead_total", "counter", "Jobs a failure report sent to the dead letters.", st.dead);
    metric(b, "errand_fetches_parked_total", "counter", "Fetches that long-polled for jobs.",
           st.parked_fetches);
    metric(b, "errand_fetches_waiting", "gauge", "Long-poll fetches waiting for jobs now.",
           st.waiting_fetches);
    metric(b, "errand_job_waits_parked_total", "counter",
           "GET /v1/jobs/{id}?wait_ms requests that found their job unfinished and waited.",
           st.parked_waits);
    metric(b, "errand_job_waits_waiting", "gauge",
           "Requests waiting for a job's outcome now (at most --max-waiters).", st.waiting_waits);
    metric(b, "errand_job_waits_refused_total", "counter",
           "Waits for a job's outcome refused with 503: --max-waiters were waiting.",
           st.refused_waits);
    metric(b, "errand_maintenance_leader", "gauge",
           "1 while this node runs promotion, reaping and retention (one node per store).",
           st.maintenance_leader);
    if (s->outbox) {
        er_outbox_stats ob;
        er_outbox_get_stats(s->outbox, &ob);
        metric(b, "errand_outbox_connected", "gauge",
               "1 while the outbox relay is connected to the application's database.",
               ob.connected);
        metric(b, "errand_outbox_connect_failures_total", "counter",
               "Failed connections to the outbox database.", ob.connect_failures);
        metric(b, "errand_outbox_events_published_total", "counter",
               "Outbox rows this node marked published.", ob.events_published);
        metric(b, "errand_outbox_jobs_enqueued_total", "counter",
               "Jobs this node's relay created (duplicates of earlier relays not counted).",
               ob.jobs_enqueued);
        metric(b, "errand_outbox_row_failures_total", "counter",
               "Tries of outbox rows that could not become jobs.", ob.row_failures);
        evbuffer_add_printf(b, "# HELP errand_outbox_lag_seconds Age of the oldest unpublished "
                               "row of a routed topic (0 when none).\n# TYPE "
                               "errand_outbox_lag_seconds gauge\nerrand_outbox_lag_seconds "
                               "%.3f\n", ob.lag_ms > 0 ? (double)ob.lag_ms / 1000.0 : 0.0);
        metric(b, "errand_outbox_backlog_rows", "gauge",
               "Unpublished rows of routed topics, at the last count.",
               (uint64_t)(ob.backlog > 0 ? ob.backlog : 0));
        metric(b, "errand_outbox_unroutable_rows", "gauge",
               "Unpublished rows whose topic no route names (left unpublished).",
               (uint64_t)(ob.unroutable > 0 ? ob.unroutable : 0));
        metric(b, "errand_outbox_set_aside_rows", "gauge",
               "Rows set aside after failing to become jobs (never deleted).",
               (uint64_t)(ob.set_aside > 0 ? ob.set_aside : 0));
    }
    if (s->dispatcher) {
        er_dispatcher_stats ds;
        er_dispatcher_get_stats(s->dispatcher, &ds);
        metric(b, "errand_dispatch_queues", "gauge", "Queues with an HTTP dispatch target.",
               ds.queues);
        metric(b, "errand_dispatch_in_flight", "gauge",
               "HTTP dispatch requests (and their acks) in flight on this node.",
               (uint64_t)ds.inflight);
        metric(b, "errand_dispatch_released_total", "counter",
               "Dispatched jobs released at shutdown (request cut, or not started).",
               ds.released);
        evbuffer_add_printf(b, "# HELP errand_dispatch_requests_total HTTP dispatch requests "
                               "finished, by outcome class.\n"
                               "# TYPE errand_dispatch_requests_total counter\n");
        for (int i = 0; i < 5; i++)
            evbuffer_add_printf(b, "errand_dispatch_requests_total{class=\"%s\"} %" PRIu64 "\n",
                                er_http_class_name((er_http_class)i), ds.by_class[i]);
    }
    /* This request is in flight itself; it is counted. */
    metric(b, "errand_http_requests_in_flight", "gauge", "HTTP requests received, not answered.",
           s->inflight);

    evbuffer_add_printf(b, "# HELP errand_http_requests_total HTTP requests answered, by route "
                           "and status class.\n# TYPE errand_http_requests_total counter\n");
    static const char *classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    for (size_t i = 0; i <= er_nroutes; i++) {
        const char *method = "", *route = "unmatched";
        if (i < er_nroutes) {
            route = er_routes[i].pattern;
            switch (er_routes[i].method) {
            case EVHTTP_REQ_GET: method = "GET"; break;
            case EVHTTP_REQ_POST: method = "POST"; break;
            case EVHTTP_REQ_PUT: method = "PUT"; break;
            case EVHTTP_REQ_DELETE: method = "DELETE"; break;
            default: method = "OTHER"; break;
            }
        }
        for (size_t k = 0; k < 5; k++) {
            uint64_t v = s->http_counts[i * 5 + k];
            if (!v)
                continue;
            evbuffer_add_printf(b,
                                "errand_http_requests_total{method=\"%s\",route=\"%s\","
                                "code=\"%s\"} %" PRIu64 "\n",
                                method, route, classes[k], v);
        }
    }
    er_http_reply_text(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, 0);
}
