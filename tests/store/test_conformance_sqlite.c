/* SPDX-License-Identifier: MIT
 *
 * The conformance cases (conformance_cases.h) run against the SQLite store,
 * each on a fresh database file, then SQLite-only facts: query plans use
 * the partial indexes, schema versions, a file that is not a database.
 */
#include <criterion/criterion.h>
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

Test(sqlite, count_active_uses_an_index)
{
    char plan[2048];
    plan_of(ER_SQ_COUNT_ACTIVE, plan, sizeof plan);
    cr_assert_not_null(strstr(plan, "USING COVERING INDEX jobs_queue_state"), "%s", plan);
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
