/* SPDX-License-Identifier: MIT
 *
 * Benchmark worker: one liberrand worker process whose handler completes
 * every job at once. It processes --jobs N jobs from --queue and prints one
 * JSON line: jobs/s measured from the start of the run (first fetch) to the
 * moment the server has acknowledged the N-th outcome. Used by
 * bench/worker.sh; not a test.
 */
#include "errand/errand.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bench {
    errand_worker *w;
    long long target;
    double t0, t1;
    atomic_int done;
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int noop(errand_job *job, void *user)
{
    (void)user;
    return errand_job_complete(job, NULL);
}

/* Watches the acknowledged-outcome counter; stops the worker at the target. */
static void *watch(void *arg)
{
    bench *b = arg;
    errand_worker_stats st;
    for (;;) {
        errand_worker_get_stats(b->w, &st);
        if (st.acks_sent >= b->target || atomic_load(&b->done))
            break;
        usleep(500);
    }
    b->t1 = now_s();
    errand_worker_stop(b->w);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: noop_worker [--server URL] [--queue Q] [--concurrency N] "
                    "[--prefetch N|auto] [--jobs N] [--token T] [--label TEXT]\n");
}

int main(int argc, char **argv)
{
    const char *server = "http://127.0.0.1:7400", *queue = "bench", *token = NULL, *label = "";
    int conc = 10, prefetch = ERRAND_PREFETCH_AUTO;
    long long jobs = 20000;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (strcmp(a, "--server") == 0)
            server = v;
        else if (strcmp(a, "--queue") == 0)
            queue = v;
        else if (strcmp(a, "--token") == 0)
            token = v;
        else if (strcmp(a, "--label") == 0)
            label = v;
        else if (strcmp(a, "--concurrency") == 0)
            conc = (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--prefetch") == 0)
            prefetch = strcmp(v, "auto") == 0 ? ERRAND_PREFETCH_AUTO /* also -1 */
                                               : (int)strtol(v, NULL, 10);
        else if (strcmp(a, "--jobs") == 0)
            jobs = strtoll(v, NULL, 10);
        else {
            usage();
            return 2;
        }
    }
    const char *queues[] = {queue};
    errand_worker_config cfg;
    errand_worker_config_init(&cfg);
    cfg.server_url = server;
    cfg.token = token;
    cfg.queues = queues;
    cfg.nqueues = 1;
    cfg.concurrency = conc;
    cfg.prefetch = prefetch;
    cfg.poll_wait_ms = 500;
    bench b = {.target = jobs};
    char err[256];
    int rc = errand_worker_new(&cfg, noop, NULL, &b.w, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "noop_worker: %s\n", err[0] ? err : errand_strerror(rc));
        return 2;
    }
    pthread_t t;
    b.t0 = now_s();
    pthread_create(&t, NULL, watch, &b);
    rc = errand_worker_run(b.w);
    atomic_store(&b.done, 1);
    pthread_join(t, NULL);
    errand_worker_stats st;
    errand_worker_get_stats(b.w, &st);
    errand_worker_free(b.w);
    double secs = b.t1 - b.t0;
    char pf[16] = "\"auto\"";
    if (prefetch != ERRAND_PREFETCH_AUTO)
        snprintf(pf, sizeof pf, "%d", prefetch);
    printf("{\"bench\":\"worker\",\"label\":\"%s\",\"concurrency\":%d,\"prefetch\":%s,"
           "\"prefetch_end\":%d,\"jobs\":%lld,\"completed\":%lld,\"fetches\":%lld,\"seconds\":%.3f,"
           "\"jobs_per_s\":%.0f,\"complete\":%s}\n",
           label, conc, pf, st.prefetch, jobs, st.completed, st.fetches, secs,
           secs > 0 ? (double)jobs / secs : 0.0,
           st.acks_sent >= jobs && rc == 0 ? "true" : "false");
    return rc == 0 && st.acks_sent >= jobs ? 0 : 1;
}
