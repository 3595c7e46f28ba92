/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for queue settings bodies (PUT /v1/queues/{queue}): the
 * HTTP reader, er_queue_patch_check and er_queue_settings_change onto the
 * defaults (fairness, group limits, rate limits and aging included). A refused body gets a message and leaves the settings as they
 * were; accepted settings survive the store's round trip (er_settings_encode,
 * er_settings_decode) unchanged, and what GET shows is a body PUT accepts
 * (on the same queue: hidden header values keep the stored ones).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/queue.h"
#include "server/http/queue_json.h"
#include "store/settings_codec.h"
#include "util/err.h"

static bool same_backoff(const er_backoff *a, const er_backoff *b)
{
    return a->type == b->type && a->delay_ms == b->delay_ms && a->max_delay_ms == b->max_delay_ms &&
           a->jitter == b->jitter;
}

/* Equal in every field that means something (an unset default's value does not). */
static bool same(const er_queue_settings *a, const er_queue_settings *b)
{
    const er_job_defaults *x = &a->defaults, *y = &b->defaults;
    if (memcmp(&a->dispatch, &b->dispatch, sizeof a->dispatch) != 0) /* built zeroed, then set */
        return false;
    /* built zeroed, then set, as dispatch is */
    if (memcmp(&a->fairness, &b->fairness, sizeof a->fairness) != 0 ||
        memcmp(&a->group_limits, &b->group_limits, sizeof a->group_limits) != 0 ||
        a->aging.per_s != b->aging.per_s || a->aging.max_boost != b->aging.max_boost ||
        a->rate_burst != b->rate_burst)
        return false;
    return a->paused == b->paused && a->concurrency == b->concurrency &&
           a->rate_max == b->rate_max && a->rate_per_ms == b->rate_per_ms &&
           a->lease_ms == b->lease_ms && a->max_stalled == b->max_stalled &&
           a->max_started == b->max_started && a->throttle_max_ms == b->throttle_max_ms &&
           a->retention.completed_age_s == b->retention.completed_age_s &&
           a->retention.completed_count == b->retention.completed_count &&
           a->retention.dead_age_s == b->retention.dead_age_s &&
           x->has_max_attempts == y->has_max_attempts &&
           (!x->has_max_attempts || x->max_attempts == y->max_attempts) &&
           x->has_backoff == y->has_backoff &&
           (!x->has_backoff || same_backoff(&x->backoff, &y->backoff)) &&
           x->has_timeout == y->has_timeout &&
           (!x->has_timeout || x->timeout_ms == y->timeout_ms) &&
           x->has_priority == y->has_priority && (!x->has_priority || x->priority == y->priority);
}

/* What PUT does with a body: read, judge, merge onto *s. */
static int put_body(er_queue_settings *s, const json_t *body, er_error *err)
{
    er_queue_patch p;
    er_http_queue_patch(body, &p);
    er_queue_change c;
    int rc = er_queue_patch_check(&p, &c, err);
    return rc < 0 ? rc : er_queue_settings_change(s, &c, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!body)
        return 0;
    er_queue_settings s, before;
    er_queue_settings_default(&s);
    before = s;
    er_error err = {0};
    if (put_body(&s, body, &err) < 0) {
        if (err.code != ER_EINVAL || !err.message[0] || memcmp(&s, &before, sizeof s) != 0)
            abort();
        json_decref(body);
        return 0;
    }
    /* NULL here means out of memory, which a fuzz run does not reach. */
    char *text = er_settings_encode(&s);
    json_t *shown = er_http_settings_json(&s);
    if (!text || !shown)
        abort();
    er_queue_settings back, put;
    er_queue_settings_default(&put);
    put.dispatch = s.dispatch; /* the queue GET read: "***" keeps its header values */
    if (er_settings_decode(text, &back, &err) < 0 || !same(&s, &back))
        abort();
    if (put_body(&put, shown, &err) < 0 || !same(&s, &put))
        abort();
    free(text);
    json_decref(shown);
    json_decref(body);
    return 0;
}
