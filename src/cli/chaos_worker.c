/* SPDX-License-Identifier: MIT
 *
 * The worker side of `errand chaos` and its ledger. `errand chaos --worker`
 * runs liberrand's worker runtime with a handler that records every
 * execution in the ledger (an SQLite file shared by all worker processes)
 * and applies the job's effect: idempotently ("safe": guarded by a unique
 * key per job in the same transaction) or not ("unsafe": applied blindly,
 * then a pause before the acknowledgement so kills land in between). The
 * checker reads the same file; the effects table has no unique constraint
 * on purpose, so a duplicate effect is visible rather than refused.
 */
#include "cli/chaos.h"
#include "cli/remote.h"
#include "util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LEDGER_BUSY_MS 1500 /* under the handler timeout: a busy ledger fails the attempt */

static const char *const schema_sql =
    "PRAGMA journal_mode=WAL;"
    "CREATE TABLE IF NOT EXISTS executions(seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id TEXT NOT NULL, pid INTEGER NOT NULL, attempt INTEGER NOT NULL, at_ms INTEGER NOT NULL);"
    /* no UNIQUE(job_id): the checker counts duplicates instead of the db refusing them */
    "CREATE TABLE IF NOT EXISTS effects(seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id TEXT NOT NULL, pid INTEGER NOT NULL, attempt INTEGER NOT NULL, at_ms INTEGER NOT NULL);"
    /* the safe handler's idempotency key: one row per job whose effect is applied */
    "CREATE TABLE IF NOT EXISTS processed(job_id TEXT PRIMARY KEY);";

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int open_db(const char *path, int flags, sqlite3 **out, char *errbuf, size_t errsize)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
        snprintf(errbuf, errsize, "ledger %s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, LEDGER_BUSY_MS);
    /* WAL + NORMAL: a committed row survives the process being killed */
    sqlite3_exec(db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
    *out = db;
    return 0;
}

int chaos_ledger_create(const char *path, char *errbuf, size_t errsize)
{
    sqlite3 *db;
    if (open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &db, errbuf, errsize) < 0)
        return -1;
    char *msg = NULL;
    int rc = sqlite3_exec(db, schema_sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        snprintf(errbuf, errsize, "ledger %s: %s", path, msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : -1;
}

/* Job index of "<prefix>-<i>", or -1. */
static long long job_index(const char *prefix, const char *id, long long njobs)
{
    size_t n = strlen(prefix);
    if (strncmp(id, prefix, n) != 0 || id[n] != '-' || id[n + 1] < '0' || id[n + 1] > '9')
        return -1;
    char *end;
    errno = 0;
    long long i = strtoll(id + n + 1, &end, 10);
    if (errno || *end || i < 0 || i >= njobs)
        return -1;
    return i;
}

static bool pid_killed(const chaos_run *run, long pid)
{
    for (size_t k = 0; k < run->nkilled; k++)
        if (run->killed_pids[k] == pid)
            return true;
    return false;
}

int chaos_ledger_read(chaos_run *run, long long *total_effects, long long *total_execs,
                      long long *foreign, char *errbuf, size_t errsize)
{
    sqlite3 *db;
    if (open_db(run->ledger_path, SQLITE_OPEN_READONLY, &db, errbuf, errsize) < 0)
        return -1;
    *total_effects = *total_execs = *foreign = 0;
    /* executions in order, so the last one per job is known */
    static const char *const q[2] = {
        "SELECT job_id, pid FROM effects ORDER BY seq",
        "SELECT job_id, pid, seq FROM executions ORDER BY job_id, seq",
    };
    int rc = SQLITE_OK;
    for (int t = 0; t < 2 && rc == SQLITE_OK; t++) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(db, q[t], -1, &st, NULL);
        if (rc != SQLITE_OK)
            break;
        long long prev = -1;
        bool prev_killed = false;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *id = (const char *)sqlite3_column_text(st, 0);
            long pid = (long)sqlite3_column_int64(st, 1);
            long long i = id ? job_index(run->p.prefix, id, run->p.jobs) : -1;
            if (i < 0) {
                (*foreign)++;
                continue;
            }
            chaos_job *j = &run->jobs[i];
            if (t == 0) {
                j->effects++;
                (*total_effects)++;
                continue;
            }
            /* an execution followed by another of the same job, in a killed pid */
            if (i == prev && prev_killed)
                j->after_kill = 1;
            prev = i;
            prev_killed = pid_killed(run, pid);
            j->executions++;
            (*total_execs)++;
        }
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
        sqlite3_finalize(st);
    }
    if (rc != SQLITE_OK)
        snprintf(errbuf, errsize, "ledger %s: %s", run->ledger_path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : -1;
}

void chaos_ledger_pids(const char *ledger_path, const char *table, const char *id, char *out,
                       size_t size)
{
    out[0] = '\0';
    sqlite3 *db;
    char eb[200];
    if (open_db(ledger_path, SQLITE_OPEN_READONLY, &db, eb, sizeof eb) < 0)
        return;
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT pid FROM %s WHERE job_id = ?1 ORDER BY seq",
             strcmp(table, "effects") == 0 ? "effects" : "executions");
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        size_t len = 0;
        while (sqlite3_step(st) == SQLITE_ROW && len + 24 < size) {
            int n = snprintf(out + len, size - len, "%s%lld", len ? ", " : "",
                             (long long)sqlite3_column_int64(st, 0));
            if (n > 0)
                len += (size_t)n;
        }
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* ---- the worker process -------------------------------------------------- */

typedef struct wk_ctx {
    const char *ledger;
    const char *prefix;
    bool safe;
    long work_ms, unsafe_sleep_ms;
    long long permanent_every;
    long pid;
    /* one ledger connection per handler thread, taken from this pool */
    pthread_mutex_t mu;
    sqlite3 *pool[64];
    int npool;
} wk_ctx;

static sqlite3 *pool_take(wk_ctx *c)
{
    sqlite3 *db = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->npool > 0)
        db = c->pool[--c->npool];
    pthread_mutex_unlock(&c->mu);
    if (!db) {
        char eb[300];
        if (open_db(c->ledger, SQLITE_OPEN_READWRITE, &db, eb, sizeof eb) < 0) {
            fprintf(stderr, "{\"level\":\"error\",\"msg\":\"%s\"}\n", eb);
            return NULL;
        }
    }
    return db;
}

static void pool_put(wk_ctx *c, sqlite3 *db)
{
    pthread_mutex_lock(&c->mu);
    if (c->npool < (int)(sizeof c->pool / sizeof c->pool[0])) {
        c->pool[c->npool++] = db;
        db = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    sqlite3_close(db);
}

static int exec_insert(sqlite3 *db, const char *table, const char *id, long pid, int attempt)
{
    char sql[120];
    snprintf(sql, sizeof sql, "INSERT INTO %s(job_id, pid, attempt, at_ms) VALUES(?1,?2,?3,?4)",
             table);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, pid);
        sqlite3_bind_int(st, 3, attempt);
        sqlite3_bind_int64(st, 4, er_now_ms());
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
    return rc;
}

/* One ledger transaction: the execution row, then the effect. Returns an
 * SQLite code. */
static int apply(wk_ctx *c, sqlite3 *db, const char *id, int attempt, bool effect)
{
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = exec_insert(db, "executions", id, c->pid, attempt);
    if (rc == SQLITE_OK && effect && c->safe) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO processed(job_id) VALUES(?1)", -1,
                                &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
            rc = sqlite3_step(st);
            rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        }
        sqlite3_finalize(st);
        /* applied only when the key was new: a redelivery changes nothing */
        if (rc == SQLITE_OK && sqlite3_changes(db) == 1)
            rc = exec_insert(db, "effects", id, c->pid, attempt);
    } else if (rc == SQLITE_OK && effect) {
        rc = exec_insert(db, "effects", id, c->pid, attempt); /* unsafe: no check */
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static int handle(errand_job *job, void *user)
{
    wk_ctx *c = user;
    const char *id = errand_job_id(job);
    if (c->work_ms > 0)
        sleep_ms(c->work_ms);
    size_t n = strlen(c->prefix);
    long long idx = strncmp(id, c->prefix, n) == 0 && id[n] == '-' ? strtoll(id + n + 1, NULL, 10)
                                                                    : -1;
    bool poison = c->permanent_every > 0 && idx >= 0 && idx % c->permanent_every == 0;
    sqlite3 *db = pool_take(c);
    if (!db)
        return errand_job_fail_transient(job, "chaos: cannot open the ledger");
    int rc = apply(c, db, id, errand_job_attempt(job), !poison);
    if (rc != SQLITE_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "chaos: ledger: %s", sqlite3_errstr(rc));
        pool_put(c, db);
        return errand_job_fail_transient(job, msg);
    }
    pool_put(c, db);
    if (poison)
        return errand_job_fail_permanent(job, "chaos: injected permanent failure");
    if (!c->safe && c->unsafe_sleep_ms > 0)
        sleep_ms(c->unsafe_sleep_ms); /* the window between effect and acknowledgement */
    return errand_job_complete(job, NULL);
}

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void log_line(int level, const char *line, void *user)
{
    (void)user;
    if (level < ERRAND_LOG_WARN)
        return;
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}

int chaos_worker_main(int argc, char **argv)
{
    const char *server = NULL, *token = NULL, *queue = "chaos", *ledger = NULL;
    const char *handler = "safe", *prefix = "chaos", *v;
    long long concurrency = 4, work_ms = 0, sleep_unsafe = 20, lease = 5000, perm = 0;
    struct {
        const char *name;
        long long *dst;
        long long lo, hi;
    } nums[] = {{"concurrency", &concurrency, 1, 64},  {"work-ms", &work_ms, 0, 60000},
                {"unsafe-sleep-ms", &sleep_unsafe, 0, 60000}, {"lease-ms", &lease, 3000, 600000},
                {"permanent-every", &perm, 0, 1LL << 40}};
    for (int i = 0; i < argc;) {
        int r = 0;
        if ((r = er_cli_opt(argc, argv, &i, "server", "chaos worker", &server)) ||
            (r = er_cli_opt(argc, argv, &i, "token", "chaos worker", &token)) ||
            (r = er_cli_opt(argc, argv, &i, "queue", "chaos worker", &queue)) ||
            (r = er_cli_opt(argc, argv, &i, "ledger", "chaos worker", &ledger)) ||
            (r = er_cli_opt(argc, argv, &i, "prefix", "chaos worker", &prefix)) ||
            (r = er_cli_opt(argc, argv, &i, "handler", "chaos worker", &handler))) {
            if (r < 0)
                return ER_EXIT_USAGE;
            continue;
        }
        bool matched = false;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !matched; k++) {
            r = er_cli_opt(argc, argv, &i, nums[k].name, "chaos worker", &v);
            if (r < 0)
                return ER_EXIT_USAGE;
            if (r > 0) {
                int64_t x;
                if (er_cli_parse_int(v, nums[k].lo, nums[k].hi, &x) < 0)
                    return er_cli_usage_error("errand chaos --worker", "--%s: bad number '%s'",
                                              nums[k].name, v);
                *nums[k].dst = x;
                matched = true;
            }
        }
        if (!matched)
            return er_cli_usage_error("errand chaos --worker", "unknown argument '%s'", argv[i]);
    }
    if (!server || !ledger)
        return er_cli_usage_error("errand chaos --worker", "--server and --ledger are required");

    wk_ctx c = {.ledger = ledger, .prefix = prefix, .safe = strcmp(handler, "unsafe") != 0,
                .work_ms = (long)work_ms, .unsafe_sleep_ms = (long)sleep_unsafe,
                .permanent_every = perm, .pid = (long)getpid()};
    pthread_mutex_init(&c.mu, NULL);
    const char *queues[1] = {queue};
    errand_worker_config cfg;
    errand_worker_config_init(&cfg);
    cfg.server_url = server;
    cfg.token = token;
    cfg.queues = queues;
    cfg.nqueues = 1;
    cfg.concurrency = (int)concurrency;
    /* timeout < grace < lease; a SIGKILLed worker's jobs come back after one lease */
    cfg.lease_ms = (long)lease;
    cfg.grace_ms = (long)lease * 3 / 5;
    cfg.timeout_ms = (long)lease * 2 / 5;
    cfg.poll_wait_ms = 500;
    cfg.log = log_line;
    char ebuf[256];
    errand_worker *w = NULL;
    if (errand_worker_new(&cfg, handle, &c, &w, ebuf, sizeof ebuf) < 0) {
        fprintf(stderr, "errand chaos --worker: %s\n", ebuf);
        pthread_mutex_destroy(&c.mu);
        return ER_EXIT_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    errand_worker_install_signal_handlers(w);
    int rc = errand_worker_run(w);
    errand_worker_free(w);
    for (int k = 0; k < c.npool; k++)
        sqlite3_close(c.pool[k]);
    pthread_mutex_destroy(&c.mu);
    return rc == 0 ? 0 : 1;
}
