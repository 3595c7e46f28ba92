/* SPDX-License-Identifier: MIT
 *
 * Example: a C worker built on liberrand's worker runtime. Its handler
 * reads the job's JSON payload and answers with one of the four outcomes:
 *   {"sleep_ms": 500}              works that long (stopping early if told to)
 *   {"outcome": "permanent"}       also "transient", "retry_later", "throttled"
 * and otherwise completes with a result echoing what the job was told.
 * Build: cc c_worker.c $(pkg-config --cflags --libs errand jansson)
 * Run:   c_worker --server http://127.0.0.1:7400 --queue emails --concurrency 4
 * SIGTERM/SIGINT stop it gracefully; a second SIGINT or SIGQUIT stops it at once
 * (running jobs released).
 */
#include <errand/errand.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

/* liberrand never prints: this callback writes its JSON lines to stderr. */
static void log_line(int level, const char *line, void *user)
{
    (void)level, (void)user;
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%s\n", line);
    pthread_mutex_unlock(&log_mu);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int handle(errand_job *job, void *user)
{
    (void)user;
    json_t *p = json_loads(errand_job_payload(job), JSON_DECODE_ANY, NULL);
    long work = (long)json_integer_value(json_object_get(p, "sleep_ms"));
    const char *want = json_string_value(json_object_get(p, "outcome"));
    int rc = 0;

    /* Long work checks in often: the lease may be lost, the job may time out,
     * or the worker may be shutting down (then the lease is released). */
    for (long done = 0; done < work; done += 50) {
        if (errand_job_should_stop(job)) {
            json_decref(p);
            return 0; /* the runtime ignores the outcome of a stopped job */
        }
        sleep_ms(work - done < 50 ? work - done : 50);
    }
    if (want && strcmp(want, "permanent") == 0) {
        rc = errand_job_fail_permanent(job, "asked to fail permanently");
    } else if (want && strcmp(want, "transient") == 0) {
        rc = errand_job_fail_transient(job, "asked to fail transiently");
    } else if (want && strcmp(want, "retry_later") == 0) {
        rc = errand_job_retry_later(job, 1000);
    } else if (want && strcmp(want, "throttled") == 0) {
        rc = errand_job_throttled(job, 1000);
    } else {
        /* Side effects keyed by the idempotency key stay single when the job
         * runs again (at-least-once delivery). */
        json_t *r = json_pack("{s:s,s:i,s:s,s:s}", "job_id", errand_job_id(job), "attempt",
                              errand_job_attempt(job), "idempotency_key",
                              errand_job_idempotency_key(job), "trace_id",
                              errand_job_trace_id(job));
        char *text = json_dumps(r, JSON_COMPACT);
        rc = errand_job_complete(job, text);
        free(text);
        json_decref(r);
    }
    json_decref(p);
    return rc;
}

int main(int argc, char **argv)
{
    const char *server = getenv("ERRAND_SERVER"), *token = getenv("ERRAND_TOKEN");
    const char *queues[16];
    size_t nq = 0;
    errand_worker_config cfg;
    errand_worker_config_init(&cfg);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (strcmp(a, "--server") == 0)
            server = v;
        else if (strcmp(a, "--token") == 0)
            token = v;
        else if (strcmp(a, "--queue") == 0 && nq < 16)
            queues[nq++] = v;
        else if (strcmp(a, "--concurrency") == 0)
            cfg.concurrency = (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--prefetch") == 0)
            cfg.prefetch = strcmp(v, "auto") == 0 ? ERRAND_PREFETCH_AUTO : (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--lease-ms") == 0)
            cfg.lease_ms = strtol(v, NULL, 10);
        else if (strcmp(a, "--timeout-ms") == 0)
            cfg.timeout_ms = strtol(v, NULL, 10);
        else if (strcmp(a, "--grace-ms") == 0)
            cfg.grace_ms = strtol(v, NULL, 10);
        else {
            fprintf(stderr, "c_worker: unknown option %s\n", a);
            return 2;
        }
    }
    cfg.server_url = server ? server : "http://127.0.0.1:7400";
    cfg.token = token;
    cfg.queues = queues;
    cfg.nqueues = nq;
    cfg.log = log_line;

    errand_worker *w = NULL;
    char err[256];
    int rc = errand_worker_new(&cfg, handle, NULL, &w, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "c_worker: %s\n", err[0] ? err : errand_strerror(rc));
        return 2;
    }
    errand_worker_install_signal_handlers(w);
    rc = errand_worker_run(w); /* returns 0 after a graceful stop */
    errand_worker_free(w);
    return rc == 0 ? 0 : 1;
}
