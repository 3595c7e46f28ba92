/* SPDX-License-Identifier: MIT
 *
 * Health probes and /metrics. /healthz says the process answers; /readyz
 * says the engine is ready and the listener still accepts. /metrics renders
 * the engine's counters, the per-queue metrics (engine/qmetrics.h) and the
 * server's own request counters in the Prometheus text format 0.0.4. It
 * never reads the store: the per-queue gauges come from a sample the
 * sampler below takes in the background on the store's reader, at most 5 %
 * of the time (the next one starts 20 times as long as the last took
 * after it, a second at the soonest), and only on the maintenance leader,
 * so nodes sharing a store do not all report the same backlog.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <inttypes.h>

#include "core/http_outcome.h"
#include "engine/otlp.h"
#include "engine/qmetrics.h"
#include "server/http/http_internal.h"
#include "util/buf.h"
#include "util/log.h"

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

/* ---- the sampler ---- */

#define SAMPLE_MIN_MS 1000
#define SAMPLE_DUTY 20 /* the wait between samples, in sample durations: at most 5 % */

static void sample_done(er_req *r)
{
    er_server *s = r->arg;
    int64_t mono = er_mono_ms(), took = mono - s->sample_started;
    er_qmetrics *m = er_engine_qmetrics(s->engine);
    if (r->rc == 0) {
        er_qm_lock(m);
        er_qm_sample(m, r->queue_infos, r->nqueue_infos, er_now_ms());
        er_qm_unlock(m);
    } else if (r->rc != ER_EUNAVAIL) {
        ER_LOG(ER_LOG_WARN, NULL, "metrics: sampling the queues failed: %s", r->err.message);
    }
    int64_t wait = took * SAMPLE_DUTY;
    s->sample_next = mono + (wait < SAMPLE_MIN_MS ? SAMPLE_MIN_MS : wait);
    s->sample_ms = took;
    s->sampling = false;
    er_req_free(r);
}

void er_metrics_sample_tick(er_server *s)
{
    if (s->sampling || !s->accepting)
        return;
    er_engine_stats st;
    er_engine_get_stats(s->engine, &st);
    er_qmetrics *m = er_engine_qmetrics(s->engine);
    if (!st.maintenance_leader) {
        er_qm_lock(m);
        er_qm_unsample(m);
        er_qm_unlock(m);
        return;
    }
    int64_t mono = er_mono_ms();
    if (mono < s->sample_next)
        return;
    er_req *r = er_req_new(ER_REQ_LIST_QUEUES);
    if (!r)
        return;
    r->done = sample_done;
    r->arg = s;
    s->sampling = true;
    s->sample_started = mono;
    er_engine_submit(s->engine, r);
}

/* ---- rendering ---- */

static void family(er_buf *b, const char *name, const char *type, const char *help)
{
    er_buf_addf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist_lines(er_buf *b, const char *name, const char *labels, const er_qm_hist *h,
                       const double *bounds)
{
    uint64_t cum = 0;
    for (int i = 0; i < ER_QM_NBUCKETS; i++) {
        cum += h->buckets[i];
        er_buf_addf(b, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels,
                    *labels ? "," : "", bounds[i], cum);
    }
    er_buf_addf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, *labels ? "," : "",
                h->count);
    if (*labels)
        er_buf_addf(b, "%s_sum{%s} %.6f\n%s_count{%s} %" PRIu64 "\n", name, labels, h->sum, name,
                    labels, h->count);
    else
        er_buf_addf(b, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, h->sum, name, h->count);
}

static const struct {
    er_qm_counter c;
    const char *name, *reason, *help;
} qcounters[] = {
    {ER_QM_ENQUEUED, "errand_jobs_enqueued_total", NULL, "Jobs enqueued (duplicates not counted)."},
    {ER_QM_FETCHED, "errand_jobs_fetched_total", NULL, "Jobs leased to workers."},
    {ER_QM_COMPLETED, "errand_jobs_completed_total", NULL, "Jobs completed."},
    {ER_QM_FAILED, "errand_jobs_failed_total", NULL, "Failure reports of jobs."},
    {ER_QM_RETRIED, "errand_jobs_retried_total", NULL,
     "Failures that scheduled their job to run again."},
    {ER_QM_DEAD_PERMANENT, "errand_jobs_dead_total", "permanent",
     "Jobs sent to the dead letters, by reason."},
    {ER_QM_DEAD_EXHAUSTED, "errand_jobs_dead_total", "attempts_exhausted", NULL},
    {ER_QM_DEAD_STALLED, "errand_jobs_dead_total", "stalled", NULL},
    {ER_QM_DEAD_MAX_STARTED, "errand_jobs_dead_total", "max_started", NULL},
    {ER_QM_LEASE_EXPIRED, "errand_jobs_lease_expired_total", NULL,
     "Expired leases the reaper handled (back to waiting, or dead)."},
    {ER_QM_STALLED, "errand_jobs_stalled_total", NULL,
     "Jobs whose lease expired and that went back to waiting."},
};

static const char *const state_label[6] = {"scheduled", "waiting", "active", "completed",
                                           "dead", "cancelled"};

/* The per-queue families, each over every slot. Locked. */
static void queue_metrics(er_buf *b, er_qmetrics *m, int64_t now, int64_t sample_ms)
{
    size_t n = er_qm_count(m);
    for (size_t k = 0; k < sizeof qcounters / sizeof qcounters[0]; k++) {
        if (qcounters[k].help)
            family(b, qcounters[k].name, "counter", qcounters[k].help);
        for (size_t i = 0; i < n; i++) {
            const er_qm_queue *q = er_qm_at(m, i);
            if (qcounters[k].reason)
                er_buf_addf(b, "%s{queue=\"%s\",reason=\"%s\"} %" PRIu64 "\n",
                            qcounters[k].name, q->name, qcounters[k].reason, q->c[qcounters[k].c]);
            else
                er_buf_addf(b, "%s{queue=\"%s\"} %" PRIu64 "\n", qcounters[k].name, q->name,
                            q->c[qcounters[k].c]);
        }
    }
    static const char *const hname[ER_QM_NHISTS] = {"errand_job_wait_seconds",
                                                    "errand_job_run_seconds"};
    static const char *const hhelp[ER_QM_NHISTS] = {
        "Time from a job's run_at to its lease, seconds.",
        "Time from a job's lease to its completion, seconds."};
    for (int h = 0; h < ER_QM_NHISTS; h++) {
        family(b, hname[h], "histogram", hhelp[h]);
        for (size_t i = 0; i < n; i++) {
            const er_qm_queue *q = er_qm_at(m, i);
            char labels[ER_NAME_MAX + 16];
            snprintf(labels, sizeof labels, "queue=\"%s\"", q->name);
            hist_lines(b, hname[h], labels, &q->h[h], er_qm_bucket_bounds);
        }
    }
    int64_t at = er_qm_sampled_at(m);
    if (at == 0)
        return; /* not the leader, or no sample yet */
    family(b, "errand_queue_stats_age_seconds", "gauge",
           "Age of the sample the errand_queue_* gauges show.");
    er_buf_addf(b, "errand_queue_stats_age_seconds %.3f\n", (double)(now - at) / 1000.0);
    family(b, "errand_queue_stats_duration_seconds", "gauge",
           "How long the store took to answer the last sample.");
    er_buf_addf(b, "errand_queue_stats_duration_seconds %.3f\n", (double)sample_ms / 1000.0);
    family(b, "errand_queue_jobs", "gauge", "Jobs stored, by queue and state.");
    for (size_t i = 0; i < n; i++) {
        const er_qm_queue *q = er_qm_at(m, i);
        for (int st = 0; st < 6; st++)
            er_buf_addf(b, "errand_queue_jobs{queue=\"%s\",state=\"%s\"} %" PRId64 "\n",
                        q->name, state_label[st], q->counts[st]);
    }
    family(b, "errand_queue_oldest_waiting_age_seconds", "gauge",
           "Age of the oldest waiting job (since its run_at); 0 when none waits.");
    for (size_t i = 0; i < n; i++) {
        const er_qm_queue *q = er_qm_at(m, i);
        double age = q->oldest_waiting_ms > 0 && now > q->oldest_waiting_ms
                         ? (double)(now - q->oldest_waiting_ms) / 1000.0
                         : 0.0;
        er_buf_addf(b, "errand_queue_oldest_waiting_age_seconds{queue=\"%s\"} %.3f\n", q->name,
                    age);
    }
    family(b, "errand_queue_dead_letters", "gauge", "Dead letters kept, by queue.");
    for (size_t i = 0; i < n; i++) {
        const er_qm_queue *q = er_qm_at(m, i);
        er_buf_addf(b, "errand_queue_dead_letters{queue=\"%s\"} %" PRId64 "\n", q->name,
                    q->counts[ER_STATE_DEAD]);
    }
}

static void cron_metrics(er_buf *b, er_qmetrics *m)
{
    er_qm_cron *cr = er_qm_cron_stats(m);
    family(b, "errand_cron_runs_total", "counter",
           "Jobs scheduler ticks enqueued on this node, catch-up runs included.");
    er_buf_addf(b, "errand_cron_runs_total %" PRIu64 "\n", cr->runs);
    family(b, "errand_cron_catchup_runs_total", "counter",
           "Catch-up runs of missed ticks (the missed-run policy once or all).");
    er_buf_addf(b, "errand_cron_catchup_runs_total %" PRIu64 "\n", cr->catchup);
    family(b, "errand_cron_missed_total", "counter",
           "Times a scheduler was found with due ticks missed (server down or late).");
    er_buf_addf(b, "errand_cron_missed_total %" PRIu64 "\n", cr->missed);
    family(b, "errand_cron_lateness_seconds", "histogram",
           "Time from a tick to the enqueue of its job, on-time ticks, seconds.");
    hist_lines(b, "errand_cron_lateness_seconds", "", &cr->lateness, er_qm_bucket_bounds);
}

static void store_metrics(er_buf *b, er_qmetrics *m)
{
    er_qm_store *ss = er_qm_store_stats(m);
    family(b, "errand_store_commit_seconds", "histogram",
           "Time a store commit (its fsync) took, seconds.");
    hist_lines(b, "errand_store_commit_seconds", "", &ss->commit, er_qm_bucket_bounds);
    family(b, "errand_store_commit_batch_size", "histogram",
           "Requests one store transaction answered (group commit).");
    hist_lines(b, "errand_store_commit_batch_size", "", &ss->batch, er_qm_batch_bounds);
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
    metric(b, "errand_jobs_released_total", "counter", "Jobs released by workers.", st.released);
    metric(b, "errand_jobs_promoted_total", "counter", "Scheduled jobs that became waiting.",
           st.promoted);
    metric(b, "errand_jobs_reaped_total", "counter", "Expired leases reaped (stalled jobs).",
           st.reaped);
    er_otlp *otlp = er_engine_otlp(s->engine);
    if (otlp) {
        er_otlp_stats os;
        er_otlp_get_stats(otlp, &os);
        metric(b, "errand_otlp_spans_exported_total", "counter",
               "Spans the OpenTelemetry collector accepted.", os.exported);
        evbuffer_add_printf(b, "# HELP errand_otlp_spans_dropped_total Spans lost: the queue "
                               "was full, or their request failed.\n"
                               "# TYPE errand_otlp_spans_dropped_total counter\n"
                               "errand_otlp_spans_dropped_total{reason=\"queue_full\"} %" PRIu64
                               "\nerrand_otlp_spans_dropped_total{reason=\"export_failed\"} %" PRIu64
                               "\n", os.dropped_full, os.dropped_failed);
        metric(b, "errand_otlp_export_failures_total", "counter",
               "Span export requests that failed.", os.failures);
    }
    er_qmetrics *m = er_engine_qmetrics(s->engine);
    er_buf qb;
    er_buf_init(&qb, (size_t)1 << 30);
    er_qm_lock(m);
    queue_metrics(&qb, m, er_now_ms(), s->sample_ms);
    store_metrics(&qb, m);
    cron_metrics(&qb, m);
    er_qm_unlock(m);
    if (qb.err) {
        er_buf_fini(&qb);
        evbuffer_drain(b, evbuffer_get_length(b));
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    evbuffer_add(b, qb.data, qb.len);
    er_buf_fini(&qb);
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
    if (st.store_connections >= 0)
        metric(b, "errand_store_connections", "gauge",
               "Connections this process holds to the store (open, pooled idle, listeners).",
               (uint64_t)st.store_connections);
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
