/* SPDX-License-Identifier: MIT
 *
 * Store micro-benchmark: the writer thread's work per job, without HTTP.
 * Opens a store (SQLite by default, durable commits) and drives it through
 * the engine's request executor (engine/exec.h) the way writer_batch does:
 * bulk enqueues of 1000 jobs per transaction, then transactions that each
 * complete the previous 500 leases and fetch 500 more, then group commits
 * of single enqueues. Prints CPU µs per job of each phase (this process
 * only; run it under callgrind for instruction counts).
 *
 *   store_cycle [-n JOBS] [-s SINGLE_BATCH] [-p SQL] [-i] [STORE_URL]
 *
 * -p runs SQL (a pragma to measure, or rows to have in the store) on a
 * SQLite store's connection first. -i gives every job a client's id
 * ("cid-N") instead of a generated one, so enqueues look up tombstones.
 * Without STORE_URL a fresh file under /tmp is used and removed after.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/exec.h"
#include "store/sqlite/sqlite_int.h"
#include "util/clock.h"

#define BULK 1000
#define FETCH 500

static double cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec * 1e6 + (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec * 1e6 + (double)ru.ru_stime.tv_usec;
}

static void die(const char *what, const er_error *err)
{
    fprintf(stderr, "store_cycle: %s: %s\n", what, err->message);
    exit(1);
}

static bool g_client_ids;

/* Builds one job {"name":"noop","payload":{"n":i}} (with -i, id "cid-i")
 * as a frontend's reader would fill its spec. */
static void make_job(er_job *job, long i, int64_t now, er_rand *r)
{
    char payload[48], id[32];
    int n = snprintf(payload, sizeof payload, "{\"n\":%ld}", i);
    int idn = snprintf(id, sizeof id, "cid-%ld", i);
    er_error err = {0};
    er_job_spec sp = {
        .queue = {ER_SPEC_SET, "bench", 5},
        .name = {ER_SPEC_SET, "noop", 4},
        .payload = {ER_SPEC_SET, payload, (size_t)n},
    };
    if (g_client_ids)
        sp.id = (er_spec_str){ER_SPEC_SET, id, (size_t)idn};
    er_job_limits lim = {.payload_max = 1 << 20};
    if (er_job_validate(&sp, &lim, now, r, job, &err) < 0)
        die("job", &err);
}

static void begin(er_exec_ctx *x)
{
    er_error err;
    if (x->ops->begin(x->store, &err) < 0)
        die("begin", &err);
}

static void commit(er_exec_ctx *x)
{
    er_error err;
    if (x->ops->commit(x->store, &err) < 0)
        die("commit", &err);
    er_wake_fini(&x->wake);
}

/* What the writer does after answering a batch (the SQLite checkpoint),
 * untimed like the answering itself. */
static void upkeep(er_exec_ctx *x)
{
    er_error err;
    if (x->ops->checkpoint && x->ops->checkpoint(x->store, &err) < 0)
        die("checkpoint", &err);
}

static void run(er_exec_ctx *x, er_req *r, int64_t now)
{
    if (er_exec_write(x, r, now) < 0 || r->rc < 0)
        die("request", &r->err);
}

/* One transaction of each phase; separate functions so callgrind's
 * inclusive cost of each is the phase's writer work. clang has no noipa;
 * noinline keeps the functions apart there. */
#if defined(__has_attribute) && __has_attribute(noipa)
#define NOIPA __attribute__((noipa))
#else
#define NOIPA __attribute__((noinline))
#endif

NOIPA static void tx_bulk(er_exec_ctx *x, er_req *r, int64_t now)
{
    begin(x);
    run(x, r, now);
    commit(x);
}

NOIPA static void tx_process(er_exec_ctx *x, er_req *r, int64_t now)
{
    begin(x);
    run(x, r, now);
    commit(x);
}

/* The batch as writer_batch runs it: a chain, runs of enqueues together. */
NOIPA static void tx_single(er_exec_ctx *x, er_req **rs, int k, int64_t now)
{
    for (int i = 0; i < k; i++)
        rs[i]->next = i + 1 < k ? rs[i + 1] : NULL;
    begin(x);
    for (er_req *r = rs[0], *next; r; r = next)
        if (er_exec_write_run(x, r, &next, now) < 0)
            die("request", &r->err);
    for (int i = 0; i < k; i++) {
        if (rs[i]->rc < 0)
            die("request", &rs[i]->err);
        rs[i]->next = NULL;
    }
    commit(x);
}

int main(int argc, char **argv)
{
    long njobs = 20000;
    int single_batch = 64;
    const char *pragma = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "n:s:p:i")) != -1) {
        if (opt == 'n')
            njobs = strtol(optarg, NULL, 10);
        else if (opt == 's')
            single_batch = (int)strtol(optarg, NULL, 10);
        else if (opt == 'p')
            pragma = optarg;
        else if (opt == 'i')
            g_client_ids = true;
        else {
            fprintf(stderr,
                    "usage: store_cycle [-n JOBS] [-s SINGLE_BATCH] [-p SQL] [-i] [STORE_URL]\n");
            return 2;
        }
    }
    njobs = (njobs + BULK - 1) / BULK * BULK;
    char dir[64] = "";
    char url[128];
    if (optind < argc) {
        snprintf(url, sizeof url, "%s", argv[optind]);
    } else {
        snprintf(dir, sizeof dir, "/tmp/er-cycle-XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
        snprintf(url, sizeof url, "%s/errand.db", dir);
    }
    const er_store_ops *ops;
    const char *rest;
    er_error err;
    if (er_store_resolve(url, &ops, &rest, &err) < 0)
        die("store url", &err);
    er_store_options sopt = {.durability = ER_DURABILITY_FULL};
#ifdef ER_DEDUP_WINDOW_DEFAULT_MS
    sopt.dedup_window_ms = ER_DEDUP_WINDOW_DEFAULT_MS; /* the server's default (a store
                                                          before tombstones has none) */
#endif
    er_exec_ctx x;
    memset(&x, 0, sizeof x);
    x.ops = ops;
    er_rand_init_seeded(&x.rand, 42);
    er_job_defaults_server(&x.server_defaults);
    if (ops->open(rest, &sopt, &x.store, &err) < 0)
        die("open", &err);
    if (pragma && ops == &er_sqlite_ops &&
        sqlite3_exec(er_sqlite_handle(x.store), pragma, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "store_cycle: %s: %s\n", pragma,
                sqlite3_errmsg(er_sqlite_handle(x.store)));
        return 1;
    }
    int64_t now = er_now_ms();

    /* 1. bulk enqueue: one request of BULK jobs per transaction (the jobs
     * are parsed outside the timed part, as the loop thread does) */
    double t_bulk = 0;
    for (long done = 0; done < njobs; done += BULK) {
        er_req *r = er_req_new(ER_REQ_ENQUEUE);
        r->jobs = calloc(BULK, sizeof *r->jobs);
        r->njobs = BULK;
        for (int i = 0; i < BULK; i++)
            make_job(&r->jobs[i], done + i, now, &x.rand);
        double t0 = cpu_us();
        tx_bulk(&x, r, now);
        t_bulk += cpu_us() - t0;
        upkeep(&x);
        er_req_free(r);
    }

    /* 2. process: each transaction completes the last fetch's jobs and
     * fetches FETCH more (one FETCH request carrying its acks) */
    double t_proc = 0;
    er_job_list prev = {0};
    long processed = 0;
    for (;;) {
        er_req *r = er_req_new(ER_REQ_FETCH);
        r->fetch.queues = calloc(1, sizeof *r->fetch.queues);
        r->fetch.queues[0] = strdup("bench");
        r->fetch.nqueues = 1;
        r->fetch.worker_id = strdup("bench-worker");
        r->fetch.max = FETCH;
        if (prev.len) {
            r->acks = calloc(prev.len, sizeof *r->acks);
            for (size_t i = 0; i < prev.len; i++) {
                r->acks[i].kind = ER_ACK_COMPLETE;
                r->acks[i].id = strdup(prev.items[i].id);
                r->acks[i].token = strdup(prev.items[i].lease_token);
            }
            r->nacks = prev.len;
        }
        double t0 = cpu_us();
        tx_process(&x, r, now);
        t_proc += cpu_us() - t0;
        upkeep(&x);
        for (size_t i = 0; i < r->nacks; i++)
            if (r->acks[i].rc != 0)
                die("complete", &r->acks[i].err);
        processed += (long)r->nacks;
        er_job_list_fini(&prev);
        prev = r->list;
        memset(&r->list, 0, sizeof r->list);
        er_req_free(r);
        if (prev.len == 0)
            break;
    }
    if (processed != njobs) {
        fprintf(stderr, "store_cycle: processed %ld of %ld\n", processed, njobs);
        return 1;
    }

    /* 3. single enqueues: group commits of single_batch one-job requests */
    double t_single = 0;
    long singles = njobs / 4;
    for (long done = 0; done < singles; done += single_batch) {
        er_req *rs[1024];
        int k = single_batch < 1024 ? single_batch : 1024;
        for (int i = 0; i < k; i++) {
            rs[i] = er_req_new(ER_REQ_ENQUEUE);
            rs[i]->jobs = calloc(1, sizeof *rs[i]->jobs);
            rs[i]->njobs = 1;
            make_job(&rs[i]->jobs[0], njobs + done + i, now, &x.rand);
        }
        double t0 = cpu_us();
        tx_single(&x, rs, k, now);
        t_single += cpu_us() - t0;
        upkeep(&x);
        for (int i = 0; i < k; i++)
            er_req_free(rs[i]);
    }

    printf("{\"store\":\"%s\",\"jobs\":%ld,\"bulk_us_per_job\":%.2f,"
           "\"process_us_per_job\":%.2f,\"single_us_per_job\":%.2f,\"single_batch\":%d,"
           "\"client_ids\":%s}\n",
           ops->name, njobs, t_bulk / (double)njobs, t_proc / (double)njobs,
           t_single / (double)singles, single_batch, g_client_ids ? "true" : "false");
    ops->close(x.store);
    er_exec_ctx_fini(&x);
    if (dir[0]) {
        const char *sfx[] = {"", "-wal", "-shm"};
        for (size_t i = 0; i < 3; i++) {
            char p[160];
            snprintf(p, sizeof p, "%s%s", url, sfx[i]);
            unlink(p);
        }
        rmdir(dir);
    }
    return 0;
}
