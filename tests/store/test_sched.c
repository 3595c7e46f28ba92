/* SPDX-License-Identifier: MIT
 *
 * The scheduler, lease and cursor conformance cases (sched_cases.h) run
 * against the SQLite store, each on a fresh database file; plus the
 * SQLite-only fact that the due query uses its index.
 */
#include <stdio.h>
#include <criterion/criterion.h>
#include <unistd.h>

#include "store/sqlite/sqlite_int.h"
#include "store/store.h"

static const er_store_ops *OPS = &er_sqlite_ops;
static char g_dir[64];
static char g_url[128];
static er_store *S;
static er_rand R;

static void store_fresh(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/er-sched-XXXXXX");
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

#include "sched_cases.h"

static void plan_of(int id, char *out, size_t outsz)
{
    char sql[2048];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", er_sqlite_sql[id]);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(er_sqlite_handle(S), sql, -1, &st, NULL), SQLITE_OK);
    out[0] = '\0';
    size_t len = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        len += (size_t)snprintf(out + len, outsz - len, "%s|", sqlite3_column_text(st, 3));
    sqlite3_finalize(st);
}

Test(sched, due_and_token_lookups_use_their_indexes)
{
    char plan[2048];
    plan_of(ER_SQ_SCHED_DUE, plan, sizeof plan);
    cr_assert_not_null(strstr(plan, "schedulers_due"), "%s", plan);
    plan_of(ER_SQ_LEASE_BY_TOKEN, plan, sizeof plan);
    cr_assert_not_null(strstr(plan, "leases_owner"), "%s", plan);
}
