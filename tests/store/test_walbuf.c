/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's VFS layer (src/store/sqlite/walbuf.c): a commit's log
 * appends reach the file in a few write calls, not two per page; another
 * connection reads every commit at once, with and without syncs; a
 * transaction larger than what the layer holds commits whole; and a write
 * that fails under the layer fails the commit and leaves the store whole.
 * The store is opened through "errfault" (tests/support/faultvfs.c), which
 * counts and fails the calls under the layer.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/sqlite/sqlite_int.h"
#include "store/store.h"
#include "support/faultvfs.h"

#define T0 1700000000000LL
#define NEVER 1000000000L

static const er_store_ops *OPS = &er_sqlite_ops;
static char g_dir[64], g_path[128], g_uri[192];

static void setup(void)
{
    er_sqlite_global_init();
    cr_assert_eq(er_faultvfs_register(), 0);
    snprintf(g_dir, sizeof g_dir, "/tmp/er-walbuf-XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    snprintf(g_path, sizeof g_path, "%s/w.db", g_dir);
    snprintf(g_uri, sizeof g_uri, "file:%s?vfs=errfault", g_path);
}

static void teardown(void)
{
    er_faultvfs_disarm();
    er_faultvfs_remove_db(g_path);
    rmdir(g_dir);
}

TestSuite(walbuf, .init = setup, .fini = teardown);

static er_store *open_store(er_durability d)
{
    er_store_options o = {.durability = d, .busy_timeout_ms = 1000};
    er_store *s = NULL;
    er_error err = {0};
    cr_assert_eq(OPS->open(g_uri, &o, &s, &err), 0, "open: %s", err.message);
    return s;
}

static void mkjob(er_job *j, const char *id, size_t payload)
{
    er_job_init(j);
    j->id = strdup(id);
    j->queue = strdup("q");
    j->name = strdup("n");
    j->payload = malloc(payload + 1);
    cr_assert_not_null(j->payload);
    /* a JSON string of `payload` bytes that does not compress into few pages */
    j->payload[0] = '"';
    for (size_t i = 1; i + 1 < payload; i++)
        j->payload[i] = (char)('a' + (i * 7 + strlen(id)) % 26);
    j->payload[payload - 1] = '"';
    j->payload[payload] = '\0';
    j->payload_len = payload;
    j->state = ER_STATE_WAITING;
    j->run_at = T0;
    j->max_attempts = 3;
    j->backoff = (er_backoff){.type = ER_BACKOFF_FIXED, .delay_ms = 10, .max_delay_ms = 10};
    j->timeout_ms = 1000;
    j->created_at = j->updated_at = T0;
}

/* Enqueues n jobs id-PREFIX-0.. in one transaction; returns its result. */
static int enqueue_tx(er_store *s, const char *prefix, int n, size_t payload, er_error *err)
{
    er_job *js = calloc((size_t)n, sizeof *js);
    bool *dup = calloc((size_t)n, sizeof *dup);
    cr_assert(js && dup);
    char id[48];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        mkjob(&js[i], id, payload);
    }
    int rc = OPS->begin(s, err);
    if (rc == 0)
        rc = OPS->enqueue_many(s, js, (size_t)n, dup, NULL, err);
    if (rc == 0)
        rc = OPS->commit(s, err);
    else
        OPS->rollback(s);
    for (int i = 0; i < n; i++)
        er_job_fini(&js[i]);
    free(js);
    free(dup);
    return rc;
}

static int64_t wal_size(void)
{
    char p[160];
    struct stat sb;
    snprintf(p, sizeof p, "%s-wal", g_path);
    return stat(p, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

/* Jobs with this id prefix, read on a connection of the default VFS. */
static int count_on_other_connection(const char *prefix)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(g_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM jobs WHERE id LIKE ?1 || '-%'", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, prefix, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static void check_integrity(void)
{
    cr_assert(er_faultvfs_integrity_ok(g_path), "PRAGMA integrity_check of %s", g_path);
}

Test(walbuf, a_commit_reaches_the_log_in_a_few_writes_not_two_a_page)
{
    er_store *s = open_store(ER_DURABILITY_FULL);
    er_error err = {0};
    cr_assert_eq(enqueue_tx(s, "warm", 1, 16, &err), 0, "%s", err.message);
    int64_t before = wal_size();
    er_faultvfs_arm_on(ER_FAULTVFS_WRITE, ER_FAULTVFS_WAL, NEVER, false); /* counts only */
    cr_assert_eq(enqueue_tx(s, "big", 200, 600, &err), 0, "%s", err.message);
    er_faultvfs_counts c;
    er_faultvfs_counts_get(&c);
    int64_t bytes = wal_size() - before;
    int64_t frames = bytes / (4096 + 24);
    cr_assert_gt(frames, 30, "the transaction wrote %lld frames", (long long)frames);
    /* 124 KiB a call at most; without the layer, 2 calls a frame */
    cr_assert_leq(c.wal_writes, bytes / (124 << 10) + 2, "%ld writes for %lld frames", c.wal_writes,
                  (long long)frames);
    cr_assert_eq(c.wal_syncs, 1);
    OPS->close(s);
    cr_assert_eq(count_on_other_connection("big"), 200);
    check_integrity();
}

/* Without a sync at commit (durability normal) the commit frame must still
 * be in the file before SQLite publishes it to other connections. */
static void readers_see_each_commit(er_durability d)
{
    er_store *s = open_store(d);
    er_error err = {0};
    char prefix[16];
    for (int i = 0; i < 20; i++) {
        snprintf(prefix, sizeof prefix, "c%d", i);
        cr_assert_eq(enqueue_tx(s, prefix, 1 + i * 3, 300, &err), 0, "%s", err.message);
        cr_assert_eq(count_on_other_connection(prefix), 1 + i * 3, "commit %d", i);
    }
    OPS->close(s);
    check_integrity();
}

Test(walbuf, another_connection_reads_each_commit_with_durability_normal)
{
    readers_see_each_commit(ER_DURABILITY_NORMAL);
}

Test(walbuf, another_connection_reads_each_commit_with_durability_full)
{
    readers_see_each_commit(ER_DURABILITY_FULL);
}

Test(walbuf, a_transaction_larger_than_what_is_held_commits_whole)
{
    er_store *s = open_store(ER_DURABILITY_FULL);
    er_error err = {0};
    er_faultvfs_arm_on(ER_FAULTVFS_WRITE, ER_FAULTVFS_WAL, NEVER, false);
    /* about 12 MB of log: past the 4 MiB the layer holds, in one transaction */
    cr_assert_eq(enqueue_tx(s, "huge", 3000, 4000, &err), 0, "%s", err.message);
    er_faultvfs_counts c;
    er_faultvfs_counts_get(&c);
    cr_assert_gt(wal_size(), (int64_t)8 << 20);
    cr_assert_lt(c.wal_writes, 200, "%ld writes", c.wal_writes);
    OPS->close(s);
    cr_assert_eq(count_on_other_connection("huge"), 3000);
    s = open_store(ER_DURABILITY_FULL);
    er_job j;
    cr_assert_eq(OPS->get_job(s, "huge-2999", &j, &err), 0, "%s", err.message);
    cr_assert_eq(j.payload_len, 4000);
    er_job_fini(&j);
    OPS->close(s);
    check_integrity();
}

/* The held frames go out in one call; when it fails the commit fails, and
 * nothing of that transaction is in the store after a reopen. */
static void failed_write_fails_the_commit(er_faultvfs_kind kind)
{
    er_store *s = open_store(ER_DURABILITY_FULL);
    er_error err = {0};
    cr_assert_eq(enqueue_tx(s, "before", 5, 200, &err), 0, "%s", err.message);
    er_faultvfs_arm_on(kind, ER_FAULTVFS_WAL, 1, false);
    int rc = enqueue_tx(s, "lost", 50, 200, &err);
    cr_assert(er_faultvfs_fired());
    cr_assert(rc == ER_EUNAVAIL || rc == ER_EFULL, "rc %d (%s)", rc, err.message);
    er_faultvfs_disarm();
    cr_assert_eq(enqueue_tx(s, "after", 5, 200, &err), 0, "%s", err.message);
    OPS->close(s);
    s = open_store(ER_DURABILITY_FULL);
    er_job j;
    cr_assert_eq(OPS->get_job(s, "lost-0", &j, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->get_job(s, "lost-49", &j, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->get_job(s, "after-4", &j, &err), 0, "%s", err.message);
    er_job_fini(&j);
    OPS->close(s);
    cr_assert_eq(count_on_other_connection("before"), 5);
    cr_assert_eq(count_on_other_connection("lost"), 0);
    cr_assert_eq(count_on_other_connection("after"), 5);
    check_integrity();
}

Test(walbuf, a_failed_write_of_the_held_frames_fails_the_commit_and_loses_nothing_else)
{
    failed_write_fails_the_commit(ER_FAULTVFS_WRITE);
}

Test(walbuf, a_full_disk_under_the_held_frames_fails_the_commit_and_loses_nothing_else)
{
    failed_write_fails_the_commit(ER_FAULTVFS_FULL);
}
