/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's page cache (src/store/sqlite/pcache.c): installed by
 * the store's global init; it skips the end-of-transaction truncates that
 * no page reaches, and the database stays whole through random inserts
 * (B-tree balances that reorder pages), rolled-back appends, a shrink by
 * VACUUM and regrowth. Real database files, read back by a second
 * connection that shares nothing with the first.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/sqlite/sqlite_int.h"

static char g_dir[64], g_path[128];

static void setup(void)
{
    er_sqlite_global_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/er-pcache-XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    snprintf(g_path, sizeof g_path, "%s/p.db", g_dir);
}

static void teardown(void)
{
    char p[160];
    unlink(g_path);
    snprintf(p, sizeof p, "%s-wal", g_path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", g_path);
    unlink(p);
    rmdir(g_dir);
}

TestSuite(pcache, .init = setup, .fini = teardown);

static sqlite3 *open_db(void)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db,
                              "PRAGMA journal_mode = WAL; PRAGMA cache_size = -16384;"
                              "CREATE TABLE IF NOT EXISTS t (seq INTEGER PRIMARY KEY, "
                              "k TEXT NOT NULL UNIQUE, v TEXT NOT NULL)",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    return db;
}

static void exec(sqlite3 *db, const char *sql)
{
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
}

static long long one(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sqlite3_errmsg(db));
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void check_whole(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
}

/* `txns` transactions of `per` rows with keys in random order (a
 * splitmix64 stream from `seed`), values of `vlen` bytes */
static void insert_random(sqlite3 *db, unsigned long long seed, int txns, int per, int vlen)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "INSERT INTO t (k, v) VALUES (?1, printf('%.*c', ?2, 'v'))",
                                    -1, &st, NULL),
                 SQLITE_OK);
    for (int t = 0; t < txns; t++) {
        exec(db, "BEGIN");
        for (int i = 0; i < per; i++) {
            unsigned long long z = (seed += 0x9e3779b97f4a7c15ULL);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            z ^= z >> 31;
            char key[40];
            snprintf(key, sizeof key, "%016llx-%016llx", z, seed);
            sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int(st, 2, vlen);
            cr_assert_eq(sqlite3_step(st), SQLITE_DONE, "%s", sqlite3_errmsg(db));
            sqlite3_reset(st);
        }
        exec(db, "COMMIT");
    }
    sqlite3_finalize(st);
}

Test(pcache, is_installed_by_the_store_and_skips_truncates_no_page_reaches)
{
    unsigned long long t0, s0, t1, s1;
    er_sqlite_pcache_counts(&t0, &s0);
    sqlite3 *db = open_db();
    insert_random(db, 1, 300, 100, 40);
    er_sqlite_pcache_counts(&t1, &s1);
    cr_assert_geq(t1 - t0, 300, "truncates: %llu", t1 - t0);
    /* most commits only rewrite pages below the database's size */
    cr_assert_gt(s1 - s0, (t1 - t0) / 2, "skipped %llu of %llu", s1 - s0, t1 - t0);
    check_whole(db);
    cr_assert_eq(one(db, "SELECT count(*) FROM t"), 30000);
    sqlite3_close(db);
}

Test(pcache, rolled_back_appends_shrink_and_regrowth_leave_the_database_whole)
{
    sqlite3 *db = open_db();
    insert_random(db, 7, 100, 200, 100);
    long long pages = one(db, "PRAGMA page_count");

    /* a transaction that appends pages, rolled back: they must leave the cache */
    exec(db, "BEGIN");
    exec(db, "INSERT INTO t (k, v) SELECT k || '-x', printf('%.*c', 3000, 'w') FROM t "
             "WHERE seq <= 400");
    cr_assert_gt(one(db, "PRAGMA page_count"), pages);
    exec(db, "ROLLBACK");
    cr_assert_eq(one(db, "PRAGMA page_count"), pages);
    check_whole(db);

    /* shrink below what the cache holds, then grow back over those numbers */
    exec(db, "DELETE FROM t WHERE seq % 10 <> 0");
    exec(db, "VACUUM");
    cr_assert_lt(one(db, "PRAGMA page_count"), pages / 2);
    insert_random(db, 99, 100, 200, 100);
    check_whole(db);
    long long n = one(db, "SELECT count(*) FROM t");
    long long bytes = one(db, "SELECT sum(length(v)) FROM t");
    cr_assert_eq(n, 2000 + 20000);
    cr_assert_eq(bytes, n * 100);

    /* a second connection reads the same from the file */
    sqlite3 *db2 = open_db();
    cr_assert_eq(one(db2, "SELECT count(*) FROM t"), n);
    cr_assert_eq(one(db2, "SELECT sum(length(v)) FROM t"), bytes);
    check_whole(db2);
    sqlite3_close(db2);
    sqlite3_close(db);
}
