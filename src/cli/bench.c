/* SPDX-License-Identifier: MIT
 *
 * `errand bench`: load scenarios against a running server over HTTP on
 * loopback (bench_scenarios.c over bench_client.c). This file reads the
 * settings, runs the untimed set-up and the scenario, and reports: one
 * JSON line per scenario on stdout (rate, latency percentiles, the
 * server's resident memory) and the same figures as a table row on stderr.
 */
#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/settings.h"
#include "util/clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Resident memory of a process in KiB (VmRSS), or -1. */
static long rss_kib(int64_t pid)
{
    if (pid <= 0)
        return -1;
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%lld/status", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

static const er_setting bench_settings[] = {
    {"server", ER_SET_STRING, "http://127.0.0.1:7400", 0, 0, NULL, "server URL (ERRAND_SERVER)"},
    {"token", ER_SET_STRING, NULL, 0, 0, NULL, "bearer token"},
    {"scenario", ER_SET_ENUM, "enqueue", 0, 0, "enqueue|bulk|process|latency", "what to measure"},
    {"queue", ER_SET_STRING, "bench", 0, 0, NULL, "queue name"},
    {"jobs", ER_SET_INT, "20000", 1, 100000000, NULL,
     "jobs to enqueue or process (process enqueues them first, untimed)"},
    {"connections", ER_SET_INT, "64", 1, 4096, NULL, "concurrent connections (workers)"},
    {"batch", ER_SET_INT, "1000", 1, 10000, NULL, "bulk size, or fetch max per worker"},
    {"groups", ER_SET_INT, "0", 0, 1000000, NULL,
     "jobs spread over this many groups (0: no group), round-robin"},
    {"rate", ER_SET_INT, "500", 1, 1000000, NULL, "latency: jobs per second"},
    {"duration", ER_SET_DURATION, "10s", 100, 3600000, NULL, "latency: how long to produce"},
    {"timeout", ER_SET_DURATION, "300s", 1000, 3600000, NULL, "hard stop"},
    {"label", ER_SET_STRING, "", 0, 0, NULL, "free text copied to the JSON line"},
    {"preload", ER_SET_INT, "0", 0, 100000000, NULL,
     "jobs to enqueue first into QUEUE-backlog and leave waiting (depth tests)"},
    {"server-pid", ER_SET_INT, "0", 0, 1LL << 31, NULL,
     "the server's pid, to report its resident memory (VmRSS)"},
};

int er_cli_bench(int argc, char **argv, char **envp)
{
    er_settings st;
    er_error err;
    er_error_clear(&err);
    int rc = er_settings_init(&st, bench_settings, sizeof bench_settings / sizeof bench_settings[0],
                              &err);
    if (rc == 0)
        rc = er_settings_load(&st, argc, argv, envp, stdout, &err);
    if (rc == 1) {
        er_settings_help(&st, "usage: errand bench --scenario enqueue|bulk|process|latency ...",
                         stdout);
        er_settings_fini(&st);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "errand bench: %s\n", err.message);
        er_settings_fini(&st);
        return 2;
    }
    bench b = {0};
    b.scenario = er_settings_get(&st, "scenario")->text;
    b.queue = er_settings_get(&st, "queue")->text;
    b.token = er_settings_get(&st, "token")->text;
    b.total = er_settings_get(&st, "jobs")->num;
    b.nconns = (int)er_settings_get(&st, "connections")->num;
    b.batch = (int)er_settings_get(&st, "batch")->num;
    b.groups = er_settings_get(&st, "groups")->num;
    b.rate = (int)er_settings_get(&st, "rate")->num;
    const char *url = er_settings_get(&st, "server")->text;
    if (sscanf(url, "http://%127[^:/]:%d", b.host, &b.port) != 2) {
        fprintf(stderr, "errand bench: --server must be http://HOST:PORT\n");
        er_settings_fini(&st);
        return 2;
    }
    if (strcmp(b.scenario, "latency") == 0) {
        b.total = (long)b.rate * er_settings_get(&st, "duration")->num / 1000;
        b.caplat = b.total;
        b.lat = calloc((size_t)b.caplat + 1, sizeof *b.lat);
        b.enq_lat = calloc((size_t)b.caplat + 1, sizeof *b.enq_lat);
    }
    b.deadline_mono = er_mono_ms() + er_settings_get(&st, "timeout")->num;
    /* untimed set-up: the backlog other jobs sit beside, and the jobs a
     * process run works through (in a queue of their own) */
    int64_t preload = er_settings_get(&st, "preload")->num;
    char backlog_queue[200];
    snprintf(backlog_queue, sizeof backlog_queue, "%s-backlog", b.queue);
    if ((preload > 0 && er_bench_fill(&b, backlog_queue, preload) < 0) ||
        (strcmp(b.scenario, "process") == 0 && er_bench_fill(&b, b.queue, b.total) < 0)) {
        fprintf(stderr, "errand bench: could not enqueue the set-up jobs\n");
        free(b.lat);
        free(b.enq_lat);
        er_settings_fini(&st);
        return 1;
    }
    er_bench_run(&b);
    double secs = (double)(b.t1_us - b.t0_us) / 1e6;
    long count = strcmp(b.scenario, "process") == 0 || strcmp(b.scenario, "latency") == 0 ? b.done
                                                                                        : b.acked;
    json_t *out = json_pack("{s:s,s:s,s:I,s:i,s:i,s:f,s:f,s:I,s:b}", "scenario", b.scenario,
                            "label", er_settings_get(&st, "label")->text, "jobs", (json_int_t)count,
                            "connections", b.nconns, "batch", b.batch, "seconds", secs,
                            "jobs_per_s", secs > 0 ? (double)count / secs : 0.0, "errors",
                            (json_int_t)b.errors, "complete",
                            er_bench_finished(&b) && count >= b.total);
    if (preload > 0)
        json_object_set_new(out, "preloaded", json_integer(preload));
    long rss = rss_kib(er_settings_get(&st, "server-pid")->num);
    if (rss >= 0)
        json_object_set_new(out, "server_rss_kib", json_integer(rss));
    if (b.nlat) {
        qsort(b.lat, (size_t)b.nlat, sizeof *b.lat, cmp_double);
        json_object_set_new(out, "rate", json_integer(b.rate));
        json_object_set_new(out, "p50_ms", json_real(b.lat[b.nlat / 2]));
        json_object_set_new(out, "p99_ms", json_real(b.lat[(long)((double)b.nlat * 0.99)]));
        json_object_set_new(out, "max_ms", json_real(b.lat[b.nlat - 1]));
    }
    if (b.nenq) {
        qsort(b.enq_lat, (size_t)b.nenq, sizeof *b.enq_lat, cmp_double);
        json_object_set_new(out, "enqueue_p50_ms", json_real(b.enq_lat[b.nenq / 2]));
        json_object_set_new(out, "enqueue_p99_ms",
                            json_real(b.enq_lat[(long)((double)b.nenq * 0.99)]));
        json_object_set_new(out, "enqueue_max_ms", json_real(b.enq_lat[b.nenq - 1]));
    }
    char *s = json_dumps(out, JSON_COMPACT);
    printf("%s\n", s);
    /* the same figures as a table row on stderr, for people */
    fprintf(stderr, "%-9s %-28s %9ld jobs %8.2f s %10.0f jobs/s %5ld errors", b.scenario,
            er_settings_get(&st, "label")->text, count, secs, secs > 0 ? (double)count / secs : 0.0,
            b.errors);
    if (b.nlat)
        fprintf(stderr, "  start p50/p99/max %.2f/%.2f/%.2f ms", b.lat[b.nlat / 2],
                b.lat[(long)((double)b.nlat * 0.99)], b.lat[b.nlat - 1]);
    if (b.nenq)
        fprintf(stderr, "  enqueue p50/p99/max %.2f/%.2f/%.2f ms", b.enq_lat[b.nenq / 2],
                b.enq_lat[(long)((double)b.nenq * 0.99)], b.enq_lat[b.nenq - 1]);
    if (rss >= 0)
        fprintf(stderr, "  server RSS %.1f MiB", (double)rss / 1024.0);
    fputc('\n', stderr);
    free(s);
    json_decref(out);
    int ok = er_bench_finished(&b) && count >= b.total && b.errors == 0;
    free(b.lat);
    free(b.enq_lat);
    er_settings_fini(&st);
    return ok ? 0 : 1;
}
