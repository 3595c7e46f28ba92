/* SPDX-License-Identifier: MIT
 *
 * The HTTP API's job JSON: the enqueue request read from a jansson object
 * into an er_job_spec (the job options also for a scheduler's "job"), and
 * the job and lease views written with the JSON writer (the hot replies
 * build no jansson tree). The rules are core's (er_job_validate). What a
 * caller's role may see of a job (a viewer: no payload, no result) is
 * decided here, once, for every reply that shows a job.
 */
#include "server/http/job_json.h"
#include "server/http/spec_json.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ---- */

void er_http_job_options_from_json(const json_t *obj, er_spec_kind on_null, er_job_spec *sp)
{
    er_http_spec_int(json_object_get(obj, "priority"), on_null, &sp->priority);
    er_http_spec_int(json_object_get(obj, "max_attempts"), on_null, &sp->max_attempts);
    er_http_spec_backoff(json_object_get(obj, "backoff"), on_null, &sp->backoff);
    er_http_spec_int(json_object_get(obj, "timeout_ms"), on_null, &sp->timeout_ms);
    er_http_spec_str(json_object_get(obj, "group"), on_null, &sp->group);
    er_http_spec_str(json_object_get(obj, "trace_id"), on_null, &sp->trace_id);
}

int er_http_job_spec_from_json(const json_t *obj, const char *queue, er_job_spec *sp,
                               er_error *err)
{
    memset(sp, 0, sizeof *sp);
    if (!json_is_object(obj))
        return er_error_set(err, ER_EINVAL, "job", "a job must be a JSON object");
    /* in a request a null option is not given (API.md) */
    const er_spec_kind absent = ER_SPEC_ABSENT;
    er_http_first_unknown(obj, er_job_spec_field_known, &sp->unknown);
    sp->queue = (er_spec_str){ER_SPEC_SET, queue, strlen(queue)};
    er_http_spec_str(json_object_get(obj, "name"), absent, &sp->name);
    /* null is a payload like any other */
    const json_t *payload = json_object_get(obj, "payload");
    if (payload) {
        sp->payload_buf = json_dumps(payload, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!sp->payload_buf)
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        sp->payload = (er_spec_str){ER_SPEC_SET, sp->payload_buf, strlen(sp->payload_buf)};
    }
    er_http_spec_str(json_object_get(obj, "id"), absent, &sp->id);
    er_http_spec_int(json_object_get(obj, "delay_ms"), absent, &sp->delay_ms);
    er_http_spec_str(json_object_get(obj, "run_at"), absent, &sp->run_at);
    er_http_job_options_from_json(obj, absent, sp);
    er_http_spec_str(json_object_get(obj, "idempotency_key"), absent, &sp->idempotency_key);
    return 0;
}

int er_http_job_from_json(const json_t *obj, const char *queue, const er_job_limits *lim,
                          int64_t now, er_rand *r, er_job *job, er_error *err)
{
    er_job_spec sp;
    int rc = er_http_job_spec_from_json(obj, queue, &sp, err);
    if (rc == 0)
        rc = er_job_validate(&sp, lim, now, r, job, err);
    else
        er_job_init(job);
    er_job_spec_fini(&sp);
    return rc;
}

/* ---- writing ---- */

static void write_text(er_jsonw *w, const char *key, const char *text, size_t len)
{
    er_jsonw_key(w, key);
    er_jsonw_raw(w, text, text ? len : 0);
}

static size_t text_len(const char *s)
{
    return s ? strlen(s) : 0;
}

bool er_http_role_sees_payloads(er_role role)
{
    return role != ER_ROLE_VIEWER;
}

/* Stored texts (payload, last_error, result, progress) are JSON that the
 * server serialized itself, so they are embedded as they are. Keys are
 * pre-made literals (ER_JSONW_K): this is the enqueue reply. */
void er_http_job_write_json(const er_job *job, er_role who, er_jsonw *w)
{
    bool full = er_http_role_sees_payloads(who);
    er_jsonw_begin_object(w);
    er_jsonw_kstr(w, ER_JSONW_K("id"), job->id);
    er_jsonw_kstr(w, ER_JSONW_K("queue"), job->queue);
    er_jsonw_kstr(w, ER_JSONW_K("name"), job->name);
    if (full)
        er_jsonw_kraw(w, ER_JSONW_K("payload"), job->payload,
                      job->payload ? job->payload_len : 0);
    else
        er_jsonw_kraw(w, ER_JSONW_K("payload"), NULL, 0);
    er_jsonw_kstr(w, ER_JSONW_K("state"), er_state_name(job->state));
    er_jsonw_kint(w, ER_JSONW_K("priority"), job->priority);
    er_jsonw_kstr(w, ER_JSONW_K("group"), job->group);
    er_jsonw_ktime(w, ER_JSONW_K("run_at"), job->run_at);
    er_jsonw_kint(w, ER_JSONW_K("max_attempts"), job->max_attempts);
    er_jsonw_kbegin_object(w, ER_JSONW_K("backoff"));
    er_jsonw_kstr(w, ER_JSONW_K("type"), er_backoff_type_name(job->backoff.type));
    er_jsonw_kint(w, ER_JSONW_K("delay_ms"), job->backoff.delay_ms);
    er_jsonw_kint(w, ER_JSONW_K("max_delay_ms"), job->backoff.max_delay_ms);
    er_jsonw_kdouble(w, ER_JSONW_K("jitter"), job->backoff.jitter);
    er_jsonw_end_object(w);
    er_jsonw_kint(w, ER_JSONW_K("timeout_ms"), job->timeout_ms);
    er_jsonw_kstr(w, ER_JSONW_K("trace_id"), job->trace_id);
    er_jsonw_kstr(w, ER_JSONW_K("idempotency_key"), job->idempotency_key);
    er_jsonw_kint(w, ER_JSONW_K("attempts"), job->attempts);
    er_jsonw_kint(w, ER_JSONW_K("started"), job->started);
    er_jsonw_kint(w, ER_JSONW_K("stalled"), job->stalled);
    er_jsonw_kstr(w, ER_JSONW_K("lease_owner"), job->lease_owner);
    er_jsonw_ktime(w, ER_JSONW_K("lease_expires_at"), job->lease_expires_at);
    er_jsonw_kraw(w, ER_JSONW_K("last_error"), job->last_error, text_len(job->last_error));
    er_jsonw_kraw(w, ER_JSONW_K("result"), full ? job->result : NULL,
                  full ? text_len(job->result) : 0);
    er_jsonw_kraw(w, ER_JSONW_K("progress"), job->progress, text_len(job->progress));
    er_jsonw_ktime(w, ER_JSONW_K("created_at"), job->created_at);
    er_jsonw_ktime(w, ER_JSONW_K("updated_at"), job->updated_at);
    er_jsonw_ktime(w, ER_JSONW_K("started_at"), job->started_at);
    er_jsonw_ktime(w, ER_JSONW_K("finished_at"), job->finished_at);
    er_jsonw_ktime(w, ER_JSONW_K("redriven_at"), job->redriven_at);
    er_jsonw_kint(w, ER_JSONW_K("redrive_count"), job->redrive_count);
    if (full && job->custom) /* a Faktory job's */
        er_jsonw_kraw(w, ER_JSONW_K("custom"), job->custom, strlen(job->custom));
    if (!full) {
        static const char redacted[] = "[\"payload\",\"result\"]";
        er_jsonw_kraw(w, ER_JSONW_K("redacted"), redacted, sizeof redacted - 1);
    }
    er_jsonw_end_object(w);
}

void er_http_job_write_lease_json(const er_job *job, er_jsonw *w)
{
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "id");
    er_jsonw_str(w, job->id);
    er_jsonw_key(w, "queue");
    er_jsonw_str(w, job->queue);
    er_jsonw_key(w, "name");
    er_jsonw_str(w, job->name);
    write_text(w, "payload", job->payload, job->payload_len);
    er_jsonw_key(w, "attempt");
    er_jsonw_int(w, job->attempts);
    er_jsonw_key(w, "max_attempts");
    er_jsonw_int(w, job->max_attempts);
    er_jsonw_key(w, "started");
    er_jsonw_int(w, job->started);
    er_jsonw_key(w, "lease_token");
    er_jsonw_str(w, job->lease_token);
    er_jsonw_key(w, "lease_expires_at");
    er_jsonw_time(w, job->lease_expires_at);
    er_jsonw_key(w, "idempotency_key");
    er_jsonw_str(w, job->idempotency_key);
    er_jsonw_key(w, "trace_id");
    er_jsonw_str(w, job->trace_id);
    er_jsonw_key(w, "group");
    er_jsonw_str(w, job->group);
    er_jsonw_key(w, "priority");
    er_jsonw_int(w, job->priority);
    er_jsonw_key(w, "timeout_ms");
    er_jsonw_int(w, job->timeout_ms);
    er_jsonw_key(w, "created_at");
    er_jsonw_time(w, job->created_at);
    er_jsonw_end_object(w);
}

json_t *er_http_job_to_json(const er_job *job, er_role who)
{
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    er_http_job_write_json(job, who, &w);
    json_t *o = w.failed ? NULL : json_loadb(w.out.data, w.out.len, 0, NULL);
    er_jsonw_fini(&w);
    return o;
}

json_t *er_http_time_json(int64_t ms)
{
    if (ms <= 0 || ms == INT64_MAX)
        return json_null();
    char buf[32];
    er_time_format(ms, buf);
    return json_string(buf);
}

void er_http_tombstone_write_json(const char *id, const char *queue, er_state state,
                                  int64_t finished_at, er_jsonw *w)
{
    er_jsonw_begin_object(w);
    if (id) {
        er_jsonw_key(w, "id");
        er_jsonw_str(w, id);
    }
    er_jsonw_key(w, "queue");
    er_jsonw_str(w, queue);
    er_jsonw_key(w, "state");
    er_jsonw_str(w, er_state_name(state));
    er_jsonw_key(w, "finished_at");
    er_jsonw_time(w, finished_at);
    er_jsonw_end_object(w);
}
