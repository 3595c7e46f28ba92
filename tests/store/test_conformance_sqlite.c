/* SPDX-License-Identifier: MIT
 *
 * The conformance cases (conformance_cases.h) run against the SQLite store,
 * each on a fresh database file, then SQLite-only facts: query plans use
 * the partial indexes, schema versions, a file that is not a database.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <unistd.h>

#include "store/sqlite/sqlite_int.h"
#include "store/store.h"

/* ---- the store under test ---- */

static const er_store_ops *OPS = &er_sqlite_ops;
static char g_dir[64];
static char g_url[128];
static er_store *S;
static er_rand R;

/* Makes a fresh, empty store and sets g_url to what OPS->open takes. */
static void store_fresh(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/er-store-XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    snprintf(g_url, sizeof g_url, "%s/errand.db", g_dir);
}

static void store_drop(void)
{
    char p[160];
    const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", g_url, sfx[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

#include "conformance_cases.h"
#include "ui_cases.h"
#include "worker_cases.h"
#include "reply_cases.h"

/* ---- SQLite-only facts ---- */

TestSuite(sqlite, .init = setup, .fini = teardown, .timeout = 30);

/* The EXPLAIN QUERY PLAN details of a statement, joined by '|'. */
static void plan_of(int id, char *out, size_t outsz)
{
    char sql[2048];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", er_sqlite_sql[id]);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(er_sqlite_handle(S), sql, -1, &st, NULL), SQLITE_OK,
                 "%s", sqlite3_errmsg(er_sqlite_handle(S)));
    out[0] = '\0';
    size_t len = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(st, 3);
        len += (size_t)snprintf(out + len, outsz - len, "%s|", d);
        cr_assert_lt(len, outsz);
    }
    sqlite3_finalize(st);
}

/* The plan of statement id uses index and scans no table whole (a sort
 * is allowed: the windowed fetch sorts its at most `max` candidates). */
static void assert_plan_sorting(int id, const char *index)
{
    char plan[2048];
    plan_of(id, plan, sizeof plan);
    char want[96];
    snprintf(want, sizeof want, "USING INDEX %s", index);
    cr_assert_not_null(strstr(plan, want), "statement %d: expected %s in: %s", id, index, plan);
    const char *p = plan;
    while ((p = strstr(p, "SCAN jobs"))) {
        cr_assert(strncmp(p, "SCAN jobs USING", 15) == 0, "statement %d full scan: %s", id, plan);
        p += 9;
    }
}

static void assert_plan(int id, const char *index)
{
    char plan[2048];
    plan_of(id, plan, sizeof plan);
    char want[96];
    snprintf(want, sizeof want, "INDEX %s", index);
    const char *hit = plan;
    while ((hit = strstr(hit, want)) && hit[strlen(want)] != ' ' && hit[strlen(want)] != '|')
        hit++;
    cr_assert_not_null(hit, "statement %d: expected %s in: %s", id, index, plan);
    /* no full scan of jobs (a bare "SCAN jobs" without an index) */
    const char *p = plan;
    while ((p = strstr(p, "SCAN jobs"))) {
        cr_assert(strncmp(p, "SCAN jobs USING", 15) == 0, "statement %d full scan: %s", id, plan);
        p += 9;
    }
    cr_assert_null(strstr(plan, "USE TEMP B-TREE FOR ORDER BY"), "statement %d sorts: %s", id,
                   plan);
}

Test(sqlite, maintenance_and_fetch_statements_use_the_partial_indexes)
{
    assert_plan(ER_SQ_FETCH, "jobs_waiting");
    assert_plan_sorting(ER_SQ_FETCH_BUDGET, "jobs_waiting");
    assert_plan(ER_SQ_PROMOTE, "jobs_scheduled");
    assert_plan(ER_SQ_REAP_SELECT, "jobs_active");
    assert_plan(ER_SQ_NEXT_SCHEDULED, "jobs_scheduled");
    assert_plan(ER_SQ_NEXT_LEASE, "jobs_active");
    assert_plan(ER_SQ_RET_COMPLETED_AGE, "jobs_completed");
    assert_plan(ER_SQ_RET_DEAD_AGE, "jobs_dead_queue");
    assert_plan(ER_SQ_LIST_DEAD, "jobs_dead");
    assert_plan(ER_SQ_LIST_DEAD_QUEUE, "jobs_dead_queue");
    assert_plan(ER_SQ_LIST_JOBS, "jobs_queue_state");
}

/* Whether statement id's plan mentions `text` is `present`. */
static void plan_says(int id, const char *text, bool present)
{
    char plan[2048];
    plan_of(id, plan, sizeof plan);
    cr_assert_eq(strstr(plan, text) != NULL, present, "statement %d, %s '%s': %s", id,
                 present ? "expected" : "unexpected", text, plan);
}

Test(sqlite, tombstone_lookups_probe_the_primary_key)
{
    plan_says(ER_SQ_TOMB_GET, "SEARCH tombstones USING PRIMARY KEY (id=?)", true);
    /* the batch: er_newjobs read once, one probe per job, never the whole table */
    plan_says(ER_SQ_TOMB_MANY, "SCAN n VIRTUAL TABLE", true);
    plan_says(ER_SQ_TOMB_MANY, "SEARCH t USING PRIMARY KEY (id=?)", true);
    plan_says(ER_SQ_TOMB_MANY, "SCAN t", false);
    plan_says(ER_SQ_TOMB_CLEAN, "tombstones_finished", true);
}

Test(sqlite, count_active_uses_an_index)
{
    char plan[2048];
    plan_of(ER_SQ_COUNT_ACTIVE, plan, sizeof plan);
    /* jobs_queue_state leaves active jobs out (migration 3) */
    cr_assert_not_null(strstr(plan, "USING COVERING INDEX jobs_active"), "%s", plan);
}

Test(sqlite, active_jobs_are_listed_and_counted_through_jobs_active)
{
    char plan[2048];
    plan_of(ER_SQ_LIST_ACTIVE, plan, sizeof plan);
    cr_assert_not_null(strstr(plan, "SCAN jobs USING INDEX jobs_active"), "%s", plan);
    plan_of(ER_SQ_COUNTS, plan, sizeof plan);
    cr_assert_not_null(strstr(plan, "COVERING INDEX jobs_queue_state"), "%s", plan);
    cr_assert_not_null(strstr(plan, "COVERING INDEX jobs_active"), "%s", plan);
    /* a lease adds no jobs_queue_state entry, its outcome adds one */
    put("j", "q", 0, T0, T0);
    er_job_list l = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l), 1);
    sqlite3_stmt *st;
    const char *count = "SELECT count(*) FROM jobs INDEXED BY jobs_queue_state WHERE state <> 2";
    cr_assert_eq(sqlite3_prepare_v2(er_sqlite_handle(S), count, -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 0);
    sqlite3_reset(st);
    er_error err = {0};
    cr_assert_eq(OPS->complete(S, "j", l.items[0].lease_token, NULL, T0, NULL, &err), 0);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    er_job_list_fini(&l);
}

/* ---- schema migration ---- */

static int64_t user_version(void);

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql,
                 msg ? msg : "");
}

#define JOB_COLS                                                                         \
    "id, queue, name, payload, state, priority, grp, run_at, max_attempts, backoff_type," \
    " backoff_delay_ms, backoff_max_ms, backoff_jitter, timeout_ms, trace_id,"          \
    " idempotency_key, attempts, started, stalled, lease_owner, lease_token,"            \
    " lease_expires_at, last_error, result, progress, created_at, updated_at, started_at," \
    " finished_at, redriven_at, redrive_count, set_flags"

Test(sqlite, a_version_2_database_is_migrated_and_keeps_working)
{
    OPS->close(S);
    S = NULL;
    store_drop();
    store_fresh();
    /* a database as version 2 wrote it: one waiting, one active, one
     * completed job */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_url, &db), SQLITE_OK);
    exec_ok(db, "PRAGMA journal_mode = WAL");
    exec_ok(db, "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID");
    exec_ok(db, er_sqlite_migrations[0]);
    exec_ok(db, er_sqlite_migrations[1]);
    exec_ok(db, "INSERT INTO meta VALUES ('schema_version', 2)");
    exec_ok(db, "INSERT INTO queues (name) VALUES ('q')");
    exec_ok(db, "INSERT INTO jobs (" JOB_COLS ") VALUES"
                " ('w', 'q', 'n', '{}', 1, 0, NULL, 1700000000000, 3, 0, 1000, 1000, 0, 30000,"
                "  NULL, 'w', 0, 0, 0, NULL, NULL, 0, NULL, NULL, NULL, 1700000000000,"
                "  1700000000000, 0, 0, 0, 0, 0),"
                " ('a', 'q', 'n', '{}', 2, 0, NULL, 1700000000000, 3, 0, 1000, 1000, 0, 30000,"
                "  NULL, 'a', 1, 1, 0, 'w1', 'tok-a', 1700000060000, NULL, NULL, NULL,"
                "  1700000000000, 1700000000000, 1700000000000, 0, 0, 0, 0),"
                " ('c', 'q', 'n', '{}', 3, 0, NULL, 1700000000000, 3, 0, 1000, 1000, 0, 30000,"
                "  NULL, 'c', 1, 1, 0, NULL, NULL, 0, NULL, NULL, NULL, 1700000000000,"
                "  1700000000000, 1700000000000, 1700000000000, 0, 0, 0)");
    sqlite3_close(db);

    open_store();
    cr_assert_eq(user_version(), er_sqlite_schema_version);
    cr_assert_geq(er_sqlite_schema_version, 3);
    er_queue_info *qs;
    size_t n;
    er_error err = {0};
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    cr_assert_eq(qs[0].counts[ER_STATE_WAITING], 1);
    cr_assert_eq(qs[0].counts[ER_STATE_ACTIVE], 1);
    cr_assert_eq(qs[0].counts[ER_STATE_COMPLETED], 1);
    er_queue_info_list_free(qs, n);
    er_job_list l = {0};
    char *next = NULL;
    cr_assert_eq(OPS->list_jobs(S, "q", ER_STATE_ACTIVE, 10, NULL, &l, &next, &err), 0);
    cr_assert_eq(l.len, 1);
    cr_assert_str_eq(l.items[0].id, "a");
    er_job_list_fini(&l);
    /* the lease taken before the upgrade still completes; the waiting job leases */
    cr_assert_eq(OPS->complete(S, "a", "tok-a", NULL, T0 + 1, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(fetch1("q", 10, T0 + 1, &l), 1);
    cr_assert_str_eq(l.items[0].id, "w");
    er_job_list_fini(&l);
    cr_assert_eq(OPS->list_queues(S, T0, &qs, &n, &err), 0);
    cr_assert_eq(qs[0].counts[ER_STATE_ACTIVE], 1);
    cr_assert_eq(qs[0].counts[ER_STATE_COMPLETED], 2);
    cr_assert_eq(qs[0].counts[ER_STATE_WAITING], 0);
    er_queue_info_list_free(qs, n);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(er_sqlite_handle(S), "PRAGMA integrity_check", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
}

static int64_t user_version(void)
{
    sqlite3_stmt *st;
    sqlite3_prepare_v2(er_sqlite_handle(S), "SELECT value FROM meta WHERE key='schema_version'",
                       -1, &st, NULL);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

Test(sqlite, reopening_a_migrated_store_changes_nothing)
{
    cr_assert_eq(user_version(), er_sqlite_schema_version);
    put("j", "q", 0, T0, T0);
    OPS->close(S);
    open_store();
    cr_assert_eq(user_version(), er_sqlite_schema_version);
    cr_assert_eq(state_of("j"), ER_STATE_WAITING);
}

Test(sqlite, a_newer_schema_version_is_refused)
{
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE meta SET value = %d WHERE key = 'schema_version'",
             er_sqlite_schema_version + 1);
    cr_assert_eq(sqlite3_exec(er_sqlite_handle(S), sql, NULL, NULL, NULL), SQLITE_OK);
    OPS->close(S);
    S = NULL;
    er_error err = {0};
    er_store_options opt = {0};
    cr_assert_eq(OPS->open(g_url, &opt, &S, &err), ER_EINVAL);
    cr_assert_null(S);
    cr_assert_not_null(strstr(err.message, "newer"));
    /* teardown closes S: reopen after restoring the version */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_url, &db), SQLITE_OK);
    snprintf(sql, sizeof sql, "UPDATE meta SET value = %d WHERE key = 'schema_version'",
             er_sqlite_schema_version);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    open_store();
}

Test(sqlite, a_file_that_is_not_a_database_is_unavailable)
{
    OPS->close(S);
    S = NULL;
    store_drop();
    store_fresh();
    FILE *f = fopen(g_url, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 512; i++)
        fputs("not a database at all ", f);
    fclose(f);
    er_error err = {0};
    er_store_options opt = {0};
    cr_assert_eq(OPS->open(g_url, &opt, &S, &err), ER_EUNAVAIL);
    cr_assert_null(S);
    cr_assert_str_eq(err.field, "store");
    unlink(g_url);
    open_store();
}

/* Enqueues `n` jobs of about a page each in one transaction; returns the
 * log's frames after the commit. */
static int enqueue_pages(int *next_id, int n)
{
    static char big[3901];
    memset(big, 'x', sizeof big - 1);
    big[0] = '"';
    big[sizeof big - 2] = '"';
    er_job *jobs = calloc((size_t)n, sizeof *jobs);
    bool *dup = calloc((size_t)n, sizeof *dup);
    cr_assert(jobs && dup);
    for (int i = 0; i < n; i++) {
        char id[24];
        snprintf(id, sizeof id, "big-%d", (*next_id)++);
        mkjob(&jobs[i], id, "big", 0, T0, T0);
        free(jobs[i].payload);
        jobs[i].payload = sdup(big);
        jobs[i].payload_len = strlen(big);
    }
    er_error err = {0};
    cr_assert_eq(er_store_enqueue_many(OPS, S, jobs, (size_t)n, dup, NULL, &err), 0, "%s", err.message);
    for (int i = 0; i < n; i++)
        er_job_fini(&jobs[i]);
    free(jobs);
    free(dup);
    return S->wal_frames;
}

/* Commits never checkpoint below the backstop; the writer's connection
 * says when one is due (once per threshold's eighth of new frames), a
 * checkpoint run on another connection (the engine's upkeep thread) lets
 * the writer's next commit restart the log, and past the backstop a commit
 * checkpoints by itself so the log stays bounded. */
Test(sqlite, checkpoints_run_between_transactions_with_a_backstop_in_commits)
{
    cr_assert_not_null(OPS->checkpoint);
    cr_assert_not_null(OPS->checkpoint_due);
    er_error err = {0};
    int id = 0;
    int frames = 0;
    while (frames < 4000 + 4000 / 8) {
        cr_assert(frames >= 4000 || !OPS->checkpoint_due(S), "due at %d frames", frames);
        int now = enqueue_pages(&id, 200);
        cr_assert_gt(now, frames, "a commit checkpointed (%d frames after %d)", now, frames);
        frames = now;
    }
    cr_assert(OPS->checkpoint_due(S), "not due at %d frames", frames);
    cr_assert(!OPS->checkpoint_due(S), "due twice without new frames");
    er_store *upkeep = NULL;
    er_store_options opt = {0};
    cr_assert_eq(OPS->open(g_url, &opt, &upkeep, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->checkpoint(upkeep, &err), 0, "%s", err.message);
    OPS->close(upkeep);
    frames = enqueue_pages(&id, 10);
    cr_assert_lt(frames, 200, "the log did not restart after a checkpoint: %d frames", frames);
    /* nobody calls checkpoint: the commits' backstop keeps the log bounded */
    int max = 0;
    bool restarted = false;
    for (int i = 0; i < 120 && !restarted; i++) {
        int now = enqueue_pages(&id, 200);
        restarted = now < frames;
        frames = now;
        max = frames > max ? frames : max;
    }
    cr_assert(restarted, "the log grew to %d frames without a checkpoint", max);
    cr_assert_lt(max, 4 * 4000 + 1000);
    /* everything is still there */
    er_job_list l = {0};
    char *cur = NULL;
    cr_assert_eq(OPS->list_jobs(S, "big", ER_STATE_WAITING, 1000, NULL, &l, &cur, &err), 0);
    cr_assert_eq(l.len, 1000);
    er_job_list_fini(&l);
    free(cur);
}

/* The job row (store/job_row.h) is the jobs table: every column it lists,
 * with its type, and nothing else but seq. */
Test(sqlite, the_job_row_list_matches_the_jobs_table)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(er_sqlite_handle(S), "PRAGMA table_info(jobs)", -1, &st,
                                    NULL),
                 SQLITE_OK);
    int n = 0;
    bool in_table[ER_JOB_NCOLS] = {false};
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        const char *type = (const char *)sqlite3_column_text(st, 2);
        n++;
        if (strcmp(name, "seq") == 0)
            continue;
        int k = -1;
        for (int i = 0; i < ER_JOB_NCOLS; i++)
            if (strcmp(er_job_cols[i].name, name) == 0)
                k = i;
        cr_assert_geq(k, 0, "column %s is not in the job row list", name);
        cr_assert_str_eq(type, er_job_cols[k].sqlite_type, "type of %s", name);
        in_table[k] = true;
    }
    sqlite3_finalize(st);
    cr_assert_eq(n, ER_JOB_NCOLS + 1);
    for (int i = 0; i < ER_JOB_NCOLS; i++)
        cr_assert(in_table[i], "%s is not a column of jobs", er_job_cols[i].name);
}
