/* SPDX-License-Identifier: MIT
 *
 * errand_run_exclusive(): run a piece of work at most once per (type, code,
 * run_key) across any number of processes, under a server lease that is
 * renewed while the work runs and completed when it succeeds. The work runs
 * on its own thread so the client (one thread at a time) stays with the
 * caller's thread, which does every request.
 */
#include "client/client_int.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TTL_DEFAULT_MS 60000L

typedef struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool finished;
    int result;
    errand_exclusive_fn fn;
    errand_lease_info info;
    void *user;
} run;

static void *runner(void *arg)
{
    run *r = arg;
    int res = r->fn(&r->info, r->user);
    pthread_mutex_lock(&r->mu);
    r->result = res;
    r->finished = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* POST /v1/leases. Returns 0 with *token and *key (owned) and *fence, or
 * ERRAND_EXCLUSIVE_DONE, ERRAND_ECONFLICT (held) or an error code. */
static int acquire(errand_client *c, const char *type, const char *code, const char *run_key,
                   long ttl_ms, char **token, char **key, long long *fence)
{
    json_t *req = json_pack("{s:s,s:s,s:s,s:I}", "type", type, "code", code, "run_key", run_key,
                            "ttl_ms", (json_int_t)ttl_ms);
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!text)
        return er_client_error(c, ERRAND_EINVAL, "run_key",
                               "type, code and run_key must be UTF-8 text");
    long status = 0;
    char *body = NULL;
    int rc = errand_request(c, "POST", "/v1/leases", text, &status, &body);
    free(text);
    if (rc < 0)
        return rc;
    json_t *root = json_loads(body, 0, NULL);
    free(body);
    const char *tok = json_string_value(json_object_get(root, "owner_token"));
    const char *k = json_string_value(json_object_get(root, "idempotency_key"));
    const char *state = json_string_value(json_object_get(root, "state"));
    if (status == 200 && tok && k) {
        *token = strdup(tok);
        *key = strdup(k);
        *fence = (long long)json_integer_value(json_object_get(root, "fence"));
        rc = *token && *key ? 0 : er_client_error(c, ERRAND_ENOMEM, "", "out of memory");
    } else if (status == 409 && state && strcmp(state, "done") == 0) {
        er_client_clear(c);
        rc = ERRAND_EXCLUSIVE_DONE;
    } else if (status == 409) {
        rc = ERRAND_ECONFLICT; /* the last error says who holds it */
    } else if (status < 400) {
        rc = er_client_error(c, ERRAND_EINTERNAL, "", "unexpected reply to POST /v1/leases");
    } else {
        rc = errand_last_error(c)->code ? errand_last_error(c)->code : ERRAND_EINTERNAL;
    }
    json_decref(root);
    return rc;
}

int errand_run_exclusive(errand_client *c, const char *type, const char *code,
                         const char *run_key, long ttl_ms, errand_exclusive_fn fn,
                         errand_lost_fn on_lost, void *user, int *fn_result)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    int rc = er_client_need(c, type, "type");
    if (rc == 0)
        rc = er_client_need(c, code, "code");
    if (rc == 0)
        rc = er_client_need(c, run_key, "run_key");
    if (rc == 0 && !fn)
        rc = er_client_error(c, ERRAND_EINVAL, "fn", "fn is required");
    if (rc == 0 && ttl_ms == 0)
        ttl_ms = TTL_DEFAULT_MS;
    if (rc == 0 && (ttl_ms < 1000 || ttl_ms > 86400000L))
        rc = er_client_error(c, ERRAND_EINVAL, "ttl_ms", "ttl_ms must be 1000..86400000");
    if (rc < 0)
        return rc;

    char *token = NULL, *key = NULL;
    long long fence = 0;
    rc = acquire(c, type, code, run_key, ttl_ms, &token, &key, &fence);
    if (rc != 0)
        return rc;

    run r = {.fn = fn, .user = user,
             .info = {.idempotency_key = key, .owner_token = token, .fence = fence}};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r.mu, NULL);
    pthread_t th;
    if (pthread_create(&th, NULL, runner, &r) != 0) {
        errand_lease_release(c, token);
        rc = er_client_error(c, ERRAND_ENOMEM, "", "cannot start a thread");
        goto out;
    }

    bool lost = false;
    long period = ttl_ms / 3;
    pthread_mutex_lock(&r.mu);
    while (!r.finished) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += period / 1000;
        ts.tv_nsec += (period % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!r.finished && pthread_cond_timedwait(&r.cv, &r.mu, &ts) == 0)
            ;
        if (r.finished || lost)
            continue;
        pthread_mutex_unlock(&r.mu);
        /* a renew that fails for another reason (network) is retried next period */
        if (errand_lease_renew(c, token, ttl_ms, NULL) == ERRAND_ESTALE) {
            lost = true;
            if (on_lost)
                on_lost(user);
        }
        pthread_mutex_lock(&r.mu);
    }
    pthread_mutex_unlock(&r.mu);
    pthread_join(th, NULL);
    if (fn_result)
        *fn_result = r.result;

    if (lost)
        rc = ERRAND_ESTALE;
    else if (r.result == 0)
        rc = errand_lease_complete(c, token);
    else {
        (void)errand_lease_release(c, token); /* else it simply expires */
        rc = ERRAND_EXCLUSIVE_FAILED;
    }
out:
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    free(token);
    free(key);
    return rc;
}
