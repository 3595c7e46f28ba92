/* SPDX-License-Identifier: MIT
 *
 * `errand chaos`, shared between its files: the run's parameters, the events
 * and samples it records, the per-job tallies the checker fills, and the
 * ledger (an SQLite file the worker processes write and the checker reads).
 * chaos.c orchestrates, chaos_worker.c is the hidden worker mode and the
 * ledger, chaos_report.c checks, prints and writes the JSON report and plot.
 */
#ifndef ER_CLI_CHAOS_H
#define ER_CLI_CHAOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Event kinds, in the report as their names (chaos_event_name). */
typedef enum chaos_event_kind {
    CH_EV_WORKER_SIGKILL,
    CH_EV_WORKER_SIGTERM,
    CH_EV_SERVER_SIGKILL,
    CH_EV_PG_RESTART,
    CH_EV_SERVER_UP,      /* the server listens again after a kill */
    CH_EV_PG_UP,          /* the PostgreSQL restart command ended */
    CH_EV_WORKER_EXIT,    /* a SIGTERMed worker exited (status in detail) */
    CH_EV_WORKER_CRASH,   /* a worker exited without being told to */
    CH_EV_KINDS
} chaos_event_kind;

typedef struct chaos_event {
    double t;              /* seconds since the run began */
    chaos_event_kind kind;
    int slot;              /* worker slot, -1 when none */
    long pid;              /* process the event hit, 0 when none */
    char detail[96];
} chaos_event;

/* One poll of GET /v1/queues/{queue}; up is false when it failed. */
typedef struct chaos_sample {
    double t;
    bool up;
    long long completed, waiting, active, scheduled, dead;
} chaos_sample;

typedef struct chaos_params {
    long long jobs;
    int workers, concurrency;
    int worker_kills, worker_terms, server_kills, pg_restarts;
    uint64_t seed;
    const char *store;        /* "sqlite" | "postgres" */
    const char *handler;      /* "safe" | "unsafe" */
    const char *queue, *prefix;
    long long permanent_every; /* jobs i % this == 0 fail permanently; 0: none */
    long work_ms, unsafe_sleep_ms, lease_ms, outage_ms;
    long timeout_s;
    int batch;                /* jobs per bulk enqueue */
    long sample_ms;           /* between two samples */
    const char *server_url;   /* --server: an existing server (borrowed) */
    const char *report_path, *plot_path; /* NULL: none */
} chaos_params;

/* What the checker learns about job i (index in 0..jobs-1). */
enum { CH_ST_MISSING = 0, CH_ST_SCHEDULED, CH_ST_WAITING, CH_ST_ACTIVE, CH_ST_COMPLETED,
       CH_ST_DEAD, CH_ST_CANCELLED };

typedef struct chaos_job {
    uint8_t acked;       /* the enqueue was acknowledged (201, or 200/duplicate on a retry) */
    uint8_t state;       /* CH_ST_* from the API at the end */
    uint8_t dead_permanent; /* dead with last_error.class "permanent" */
    uint32_t effects;    /* rows in the ledger's effects table */
    uint32_t executions; /* rows in the ledger's executions table */
    uint8_t after_kill;  /* an execution other than the last ran in a SIGKILLed worker */
} chaos_job;

/* Everything a run records; owned by chaos.c. */
typedef struct chaos_run {
    chaos_params p;
    double duration_s;
    chaos_event *events;
    size_t nevents, capevents;
    chaos_sample *samples;
    size_t nsamples, capsamples;
    chaos_job *jobs;            /* p.jobs entries */
    long *killed_pids;          /* workers that got SIGKILL */
    size_t nkilled, capkilled;
    long long enqueue_failures, enqueue_duplicates;
    int worker_crashes, term_exit_nonzero, stop_forced;
    bool timed_out, interrupted;
    chaos_sample final;         /* counts after the workers stopped */
    bool final_ok;
    char workdir[256];
    char ledger_path[300];
} chaos_run;

const char *chaos_event_name(chaos_event_kind k);

/* ---- ledger (chaos_worker.c) ---- */

/* Creates the ledger file's tables (WAL mode). Returns 0 or -1 with a
 * message in errbuf. */
int chaos_ledger_create(const char *path, char *errbuf, size_t errsize);

/* Reads the ledger into run->jobs (effects, executions, after_kill) and the
 * totals. Unknown job ids are counted in *foreign. Returns 0 or -1. */
int chaos_ledger_read(chaos_run *run, long long *total_effects, long long *total_execs,
                      long long *foreign, char *errbuf, size_t errsize);

/* The pids of job `id`'s executions or effects ("effects"|"executions"),
 * comma-separated, into out. */
void chaos_ledger_pids(const char *ledger_path, const char *table, const char *id, char *out,
                       size_t size);

/* The hidden worker mode: `errand chaos --worker ...`. Returns the exit status. */
int chaos_worker_main(int argc, char **argv);

/* ---- checking and reporting (chaos_report.c) ---- */

/* Checks the tallies, prints the summary and violations; writes the report
 * and plot when asked. Returns the exit status: 0 when every verdict holds. */
int chaos_report_finish(chaos_run *run);

#endif
