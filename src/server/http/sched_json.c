/* SPDX-License-Identifier: MIT
 *
 * Scheduler JSON of the HTTP API (sched_json.h). The scheduler object is a
 * jansson tree, as it always was: its payload and jitter must read exactly
 * as jansson writes them (GET replies are compared byte for byte).
 */
#include "server/http/sched_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http/job_json.h"
#include "server/http/spec_json.h"

/* ---- reading ---- */

int er_http_sched_spec_from_json(const json_t *obj, er_sched_spec *sp, er_error *err)
{
    memset(sp, 0, sizeof *sp);
    if (!json_is_object(obj))
        return er_error_set(err, ER_EINVAL, "body", "a scheduler spec must be a JSON object");
    er_http_first_unknown(obj, er_sched_spec_field_known, &sp->unknown);
    er_http_spec_str(json_object_get(obj, "cron"), ER_SPEC_ABSENT, &sp->cron);
    er_http_spec_str(json_object_get(obj, "tz"), ER_SPEC_ABSENT, &sp->tz);
    er_http_spec_str(json_object_get(obj, "queue"), ER_SPEC_ABSENT, &sp->queue);
    er_http_spec_str(json_object_get(obj, "name"), ER_SPEC_ABSENT, &sp->name);
    const json_t *v = json_object_get(obj, "payload");
    if (v && !json_is_object(v) && !json_is_null(v)) {
        sp->payload.kind = ER_SPEC_BAD_TYPE;
    } else if (json_is_object(v)) {
        if (!(sp->payload_buf = json_dumps(v, JSON_COMPACT)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        sp->payload = (er_spec_str){ER_SPEC_SET, sp->payload_buf, strlen(sp->payload_buf)};
    }
    er_http_spec_str(json_object_get(obj, "missed"), ER_SPEC_ABSENT, &sp->missed);
    er_http_spec_int(json_object_get(obj, "max_catchup"), ER_SPEC_ABSENT, &sp->max_catchup);
    v = json_object_get(obj, "job");
    if (json_is_object(v)) {
        sp->job = ER_SPEC_SET;
        er_http_first_unknown(v, er_sched_job_field_known, &sp->opts.unknown);
        er_http_job_options_from_json(v, ER_SPEC_NULL, &sp->opts);
        sp->jitter_integer =
            json_is_integer(json_object_get(json_object_get(v, "backoff"), "jitter"));
    } else if (v && !json_is_null(v)) {
        sp->job = ER_SPEC_BAD_TYPE;
    }
    return 0;
}

/* ---- writing ---- */

static json_t *str_json(const er_spec_str *v)
{
    return v->kind == ER_SPEC_SET ? json_stringn(v->s, v->n) : json_null();
}

static json_t *int_json(const er_spec_int *v)
{
    return v->kind == ER_SPEC_SET ? json_integer(v->v) : json_null();
}

/* Sets key to v (a new reference) when kind says the member was given. */
static int put(json_t *o, const char *key, er_spec_kind kind, json_t *v)
{
    if (kind == ER_SPEC_ABSENT) {
        json_decref(v);
        return 0;
    }
    return v ? json_object_set_new(o, key, v) : -1;
}

/* The job options as given, members in alphabetical order (the order the
 * stored spec has always had, and so the replies). */
static json_t *job_json(const er_scheduler *sc)
{
    const er_job_spec *o = &sc->opts;
    const er_backoff_spec *b = &o->backoff;
    json_t *j = json_object(), *bo = NULL;
    int bad = !j;
    if (!bad && b->kind == ER_SPEC_SET) {
        bo = json_object();
        json_t *jit = b->jitter.kind != ER_SPEC_SET ? json_null()
                      : sc->jitter_integer          ? json_integer((json_int_t)b->jitter.v)
                                                    : json_real(b->jitter.v);
        bad = !bo || put(bo, "delay_ms", b->delay_ms.kind, int_json(&b->delay_ms)) ||
              put(bo, "jitter", b->jitter.kind, jit) ||
              put(bo, "max_delay_ms", b->max_delay_ms.kind, int_json(&b->max_delay_ms)) ||
              put(bo, "type", b->type.kind, str_json(&b->type));
    } else if (b->kind == ER_SPEC_NULL) {
        bo = json_null();
    }
    bad = bad || put(j, "backoff", b->kind, bo) ||
          put(j, "group", o->group.kind, str_json(&o->group)) ||
          put(j, "max_attempts", o->max_attempts.kind, int_json(&o->max_attempts)) ||
          put(j, "priority", o->priority.kind, int_json(&o->priority)) ||
          put(j, "timeout_ms", o->timeout_ms.kind, int_json(&o->timeout_ms)) ||
          put(j, "trace_id", o->trace_id.kind, str_json(&o->trace_id));
    if (bad) {
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *er_http_sched_to_json(const er_sched_row *row, const er_scheduler *sc, er_role who)
{
    bool full = er_http_role_sees_payloads(who);
    json_t *payload = full ? json_loads(sc->payload, 0, NULL) : json_null();
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:O,s:s,s:i}", "cron", sc->cron_text, "tz", sc->tz_name,
                          "queue", sc->queue, "name", sc->name, "payload", payload, "missed",
                          er_missed_name(sc->missed), "max_catchup", sc->max_catchup);
    json_decref(payload);
    json_t *runs = json_array();
    int bad = !o || !runs || (sc->has_job && put(o, "job", ER_SPEC_SET, job_json(sc)) != 0);
    int64_t t = row->next_run_at;
    for (int i = 0; !bad && i < ER_HTTP_SCHED_NEXT_RUNS && t != INT64_MAX; i++) {
        char buf[32];
        er_time_format_local(t, sc->tz, buf);
        bad = json_array_append_new(runs, json_string(buf)) != 0;
        t = er_scheduler_next(sc, t);
    }
    bad = bad || json_object_set_new(o, "key", json_string(row->key)) != 0 ||
          json_object_set_new(o, "created_at", er_http_time_json(row->created_at)) != 0 ||
          json_object_set_new(o, "updated_at", er_http_time_json(row->updated_at)) != 0 ||
          json_object_set_new(o, "last_tick", er_http_time_json(row->last_tick)) != 0 ||
          json_object_set_new(o, "next_run_at", er_http_time_json(row->next_run_at)) != 0 ||
          (!full && json_object_set_new(o, "redacted", json_pack("[s]", "payload")) != 0);
    if (bad || json_object_set_new(o, "next_runs", runs) != 0) {
        if (bad)
            json_decref(runs);
        json_decref(o);
        return NULL;
    }
    return o;
}
