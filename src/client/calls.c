/* SPDX-License-Identifier: MIT
 *
 * liberrand's typed calls beyond the basics of client.c: one function per
 * API endpoint (fetch, heartbeat, outcomes, acks, queue administration,
 * dead letters, health, metrics, schedulers, leases). Each checks its JSON
 * arguments before sending, so a bad argument changes nothing on the server.
 * They are thin: JSON text in, JSON text out.
 */
#include "client/client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses text (any JSON value, or an object when want_object) into *out.
 * Returns 0 or ERRAND_EINVAL recorded with field. */
static int parse_arg(errand_client *c, const char *text, const char *field, int want_object,
                     json_t **out)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);
    if (!v)
        return er_client_error(c, ERRAND_EINVAL, field, "%s is not valid JSON: %s (at character %d)",
                               field, jerr.text, jerr.position);
    if (want_object == 1 && !json_is_object(v)) {
        json_decref(v);
        return er_client_error(c, ERRAND_EINVAL, field, "%s must be a JSON object", field);
    }
    if (want_object == 2 && !json_is_array(v)) {
        json_decref(v);
        return er_client_error(c, ERRAND_EINVAL, field, "%s must be a JSON array", field);
    }
    *out = v;
    return 0;
}

/* Sends body (taken; NULL sends none) with method to path (taken) and hands
 * back member key of the reply (key NULL: all) when out is not NULL. */
static int send_obj(errand_client *c, const char *method, char *path, json_t *body,
                    const char *key, char **out)
{
    char *text = NULL;
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
    }
    if (!path || (body && !text)) {
        free(path);
        free(text);
        return er_client_error(c, ERRAND_ENOMEM, "", "out of memory");
    }
    json_t *root = NULL;
    int rc = er_client_call_json(c, method, path, text, &root);
    free(path);
    free(text);
    if (rc < 0)
        return rc;
    if (!out) {
        json_decref(root);
        return 0;
    }
    return er_client_take_json(c, root, key, out);
}

static int start(errand_client *c)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    return 0;
}

int errand_enqueue_bulk(errand_client *c, const char *queue, const char *jobs_json,
                        char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, queue, "queue");
    if (rc == 0)
        rc = er_client_need(c, jobs_json, "jobs");
    json_t *jobs = NULL;
    if (rc == 0)
        rc = parse_arg(c, jobs_json, "jobs", 2, &jobs);
    if (rc < 0)
        return rc;
    json_t *body = json_object();
    json_object_set_new(body, "jobs", jobs);
    return send_obj(c, "POST", er_client_path(c, "/v1/queues/", queue, "/jobs"), body, NULL,
                    json_out);
}

int errand_fetch(errand_client *c, const char *request_json, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, request_json, "request");
    json_t *body = NULL;
    if (rc == 0)
        rc = parse_arg(c, request_json, "request", 1, &body);
    if (rc < 0)
        return rc;
    return send_obj(c, "POST", strdup("/v1/fetch"), body, NULL, json_out);
}

/* {"lease_token": token} with the id and token checked; NULL after recording an error. */
static json_t *token_body(errand_client *c, const char *id, const char *token, int *rc)
{
    *rc = er_client_need(c, id, "id");
    if (*rc == 0)
        *rc = er_client_need(c, token, "lease_token");
    if (*rc < 0)
        return NULL;
    json_t *b = json_pack("{s:s}", "lease_token", token);
    if (!b)
        *rc = er_client_error(c, ERRAND_EINVAL, "lease_token", "lease_token must be UTF-8 text");
    return b;
}

int errand_heartbeat(errand_client *c, const char *id, const char *lease_token, long extend_ms,
                     const char *progress_json, char **json_out)
{
    int rc = start(c);
    if (rc < 0)
        return rc;
    json_t *body = token_body(c, id, lease_token, &rc);
    if (!body)
        return rc;
    if (extend_ms > 0)
        json_object_set_new(body, "extend_ms", json_integer(extend_ms));
    if (progress_json) {
        json_t *p = NULL;
        if ((rc = parse_arg(c, progress_json, "progress", 0, &p)) < 0) {
            json_decref(body);
            return rc;
        }
        json_object_set_new(body, "progress", p);
    }
    return send_obj(c, "POST", er_client_path(c, "/v1/jobs/", id, "/heartbeat"), body, NULL,
                    json_out);
}

int errand_complete(errand_client *c, const char *id, const char *lease_token,
                    const char *result_json)
{
    int rc = start(c);
    if (rc < 0)
        return rc;
    json_t *body = token_body(c, id, lease_token, &rc);
    if (!body)
        return rc;
    if (result_json) {
        json_t *r = NULL;
        if ((rc = parse_arg(c, result_json, "result", 0, &r)) < 0) {
            json_decref(body);
            return rc;
        }
        json_object_set_new(body, "result", r);
    }
    return send_obj(c, "POST", er_client_path(c, "/v1/jobs/", id, "/complete"), body, NULL, NULL);
}

int errand_fail(errand_client *c, const char *id, const char *lease_token,
                const char *error_json, char **json_out)
{
    int rc = start(c);
    if (rc < 0)
        return rc;
    if ((rc = er_client_need(c, error_json, "error")) < 0)
        return rc;
    json_t *body = token_body(c, id, lease_token, &rc);
    if (!body)
        return rc;
    json_t *e = NULL;
    if ((rc = parse_arg(c, error_json, "error", 1, &e)) < 0) {
        json_decref(body);
        return rc;
    }
    json_object_set_new(body, "error", e);
    return send_obj(c, "POST", er_client_path(c, "/v1/jobs/", id, "/fail"), body, NULL, json_out);
}

int errand_release(errand_client *c, const char *id, const char *lease_token)
{
    int rc = start(c);
    if (rc < 0)
        return rc;
    json_t *body = token_body(c, id, lease_token, &rc);
    if (!body)
        return rc;
    return send_obj(c, "POST", er_client_path(c, "/v1/jobs/", id, "/release"), body, NULL, NULL);
}

int errand_acks(errand_client *c, const char *acks_json, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, acks_json, "acks");
    json_t *acks = NULL;
    if (rc == 0)
        rc = parse_arg(c, acks_json, "acks", 2, &acks);
    if (rc < 0)
        return rc;
    json_t *body = json_object();
    json_object_set_new(body, "acks", acks);
    return send_obj(c, "POST", strdup("/v1/acks"), body, NULL, json_out);
}

int errand_job_cancel(errand_client *c, const char *id, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, id, "id");
    if (rc < 0)
        return rc;
    return send_obj(c, "DELETE", er_client_path(c, "/v1/jobs/", id, ""), NULL, "job", json_out);
}

int errand_queue_get(errand_client *c, const char *queue, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, queue, "queue");
    if (rc < 0)
        return rc;
    return er_client_simple(c, "GET", "/v1/queues/", queue, "", "queue", json_out);
}

int errand_queue_jobs(errand_client *c, const char *queue, const char *state, int limit,
                      const char *cursor, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, queue, "queue");
    if (rc == 0 && limit < 0)
        rc = er_client_error(c, ERRAND_EINVAL, "limit", "limit must be 0 or more");
    if (rc < 0)
        return rc;
    char *base = er_client_path(c, "/v1/queues/", queue, "/jobs");
    char *st = state ? er_client_path(c, "", state, "") : NULL;
    char *cur = cursor ? er_client_path(c, "", cursor, "") : NULL;
    size_t n = (base ? strlen(base) : 0) + (st ? strlen(st) : 0) + (cur ? strlen(cur) : 0) + 64;
    char *path = malloc(n);
    if (!base || (state && !st) || (cursor && !cur) || !path) {
        free(base), free(st), free(cur), free(path);
        return er_client_error(c, ERRAND_ENOMEM, "", "out of memory");
    }
    int k = snprintf(path, n, "%s?state=%s", base, st ? st : "waiting");
    if (limit > 0)
        k += snprintf(path + k, n - (size_t)k, "&limit=%d", limit);
    if (cur)
        snprintf(path + k, n - (size_t)k, "&cursor=%s", cur);
    free(base), free(st), free(cur);
    return send_obj(c, "GET", path, NULL, NULL, json_out);
}

int errand_queue_settings(errand_client *c, const char *queue, const char *settings_json,
                          char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, queue, "queue");
    if (rc == 0)
        rc = er_client_need(c, settings_json, "settings");
    json_t *body = NULL;
    if (rc == 0)
        rc = parse_arg(c, settings_json, "settings", 1, &body);
    if (rc < 0)
        return rc;
    return send_obj(c, "PUT", er_client_path(c, "/v1/queues/", queue, ""), body, NULL, json_out);
}

int errand_queue_pause(errand_client *c, const char *queue, int paused, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, queue, "queue");
    if (rc < 0)
        return rc;
    return send_obj(c, "POST", er_client_path(c, "/v1/queues/", queue, paused ? "/pause" : "/resume"),
                    json_object(), NULL, json_out);
}

int errand_dead_delete(errand_client *c, const char *id)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, id, "id");
    if (rc < 0)
        return rc;
    return send_obj(c, "DELETE", er_client_path(c, "/v1/dead/", id, ""), NULL, NULL, NULL);
}

int errand_health(errand_client *c, int ready)
{
    int rc = start(c);
    if (rc < 0)
        return rc;
    return send_obj(c, "GET", strdup(ready ? "/readyz" : "/healthz"), NULL, NULL, NULL);
}

int errand_metrics(errand_client *c, char **text_out)
{
    int rc = start(c);
    if (rc == 0 && !text_out)
        rc = er_client_error(c, ERRAND_EINVAL, "text_out", "text_out is required");
    if (rc < 0)
        return rc;
    long st = 0;
    char *text = NULL;
    if ((rc = errand_request(c, "GET", "/metrics", NULL, &st, &text)) < 0)
        return rc;
    if (st != 200) {
        free(text);
        return errand_last_error(c)->code ? errand_last_error(c)->code : ERRAND_EINTERNAL;
    }
    *text_out = text;
    return 0;
}

int errand_scheduler_put(errand_client *c, const char *key, const char *spec_json, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, key, "key");
    if (rc == 0)
        rc = er_client_need(c, spec_json, "spec");
    json_t *body = NULL;
    if (rc == 0)
        rc = parse_arg(c, spec_json, "spec", 1, &body);
    if (rc < 0)
        return rc;
    return send_obj(c, "PUT", er_client_path(c, "/v1/schedulers/", key, ""), body, NULL, json_out);
}

int errand_scheduler_get(errand_client *c, const char *key, char **json_out)
{
    int rc = start(c);
    if (rc < 0)
        return rc;
    if (!key)
        return send_obj(c, "GET", strdup("/v1/schedulers"), NULL, NULL, json_out);
    return send_obj(c, "GET", er_client_path(c, "/v1/schedulers/", key, ""), NULL, NULL, json_out);
}

int errand_scheduler_delete(errand_client *c, const char *key)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, key, "key");
    if (rc < 0)
        return rc;
    return send_obj(c, "DELETE", er_client_path(c, "/v1/schedulers/", key, ""), NULL, NULL, NULL);
}

int errand_scheduler_trigger(errand_client *c, const char *key, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, key, "key");
    if (rc < 0)
        return rc;
    return send_obj(c, "POST", er_client_path(c, "/v1/schedulers/", key, "/trigger"),
                    json_object(), NULL, json_out);
}

int errand_lease_acquire(errand_client *c, const char *request_json, char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, request_json, "request");
    json_t *body = NULL;
    if (rc == 0)
        rc = parse_arg(c, request_json, "request", 1, &body);
    if (rc < 0)
        return rc;
    return send_obj(c, "POST", strdup("/v1/leases"), body, NULL, json_out);
}

static int lease_call(errand_client *c, const char *what, const char *owner_token, long ttl_ms,
                      char **json_out)
{
    int rc = start(c);
    if (rc == 0)
        rc = er_client_need(c, owner_token, "owner_token");
    if (rc < 0)
        return rc;
    json_t *body = json_pack("{s:s}", "owner_token", owner_token);
    if (!body)
        return er_client_error(c, ERRAND_EINVAL, "owner_token", "owner_token must be UTF-8 text");
    if (ttl_ms > 0)
        json_object_set_new(body, "ttl_ms", json_integer(ttl_ms));
    char path[64];
    snprintf(path, sizeof path, "/v1/leases/%s", what);
    return send_obj(c, "POST", strdup(path), body, NULL, json_out);
}

int errand_lease_renew(errand_client *c, const char *owner_token, long ttl_ms, char **json_out)
{
    return lease_call(c, "renew", owner_token, ttl_ms, json_out);
}

int errand_lease_complete(errand_client *c, const char *owner_token)
{
    return lease_call(c, "complete", owner_token, 0, NULL);
}

int errand_lease_release(errand_client *c, const char *owner_token)
{
    return lease_call(c, "release", owner_token, 0, NULL);
}
