/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's transactions and write-ahead log: begin (refused while
 * a failed commit's frames may still be on disk, and dropping the queue
 * cache when another connection committed), commit (clearing the WAL after
 * a failure), rollback, the nested op_begin/op_end of the operations, and
 * the checkpoints kept out of commits. It decides nothing about jobs.
 */
#include "store/sqlite/sqlite_int.h"

#include <stdio.h>
#include <time.h>

/* A commit checkpoints itself only once the log holds this many times the
 * threshold (s->ckpt_frames; see WAL_CHECKPOINT_FRAMES in sqlite.c). */
#define WAL_BACKSTOP 4

static int run_id(er_store *s, int id, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, id, &st, err);
    return rc < 0 ? rc : er_sqlite_run(s, st, err);
}

/* ---- transactions ---- */

/* Drops the queue cache when another connection has committed since the
 * last check, so a cache never outlives a change made elsewhere. */
static int check_data_version(er_store *s, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_DATA_VERSION, &st, err);
    if (rc < 0)
        return rc;
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        int64_t v = sqlite3_column_int64(st, 0);
        if (v != s->data_version)
            er_sqlite_queue_cache_clear(s);
        s->data_version = v;
    } else {
        rc = er_sqlite_error(s->db, src, "data_version", err);
    }
    sqlite3_reset(st);
    return rc;
}

/* How long clear_wal waits for a checkpoint another connection runs (the
 * upkeep thread's; tens of milliseconds) before it gives up for now. */
#define CLEAR_WAL_WAIT_MS 2000

/* One TRUNCATE checkpoint: SQLITE_OK, SQLITE_BUSY (another connection's
 * checkpoint or a reader held it back) or an error. */
static int truncate_wal(er_store *s)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            rc = sqlite3_column_int(st, 0) == 0 ? SQLITE_OK : SQLITE_BUSY;
    }
    sqlite3_finalize(st);
    return rc;
}

/* A commit whose write or sync failed may leave its frames, commit frame
 * included, on disk past the end of the WAL this process knows: invisible
 * here, but recovery after a crash would find and replay them, and a
 * transaction answered "nothing was written" would come back. Truncating
 * the WAL (after checkpointing what did commit) removes them. */
static int clear_wal(er_store *s, er_error *err)
{
    int rc = truncate_wal(s);
    for (int waited = 0; (rc & 0xff) == SQLITE_BUSY && waited < CLEAR_WAL_WAIT_MS; waited += 2) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        rc = truncate_wal(s);
    }
    if ((rc & 0xff) == SQLITE_BUSY)
        return er_error_set(err, ER_EUNAVAIL, "store",
                            "store: the write-ahead log is busy (a checkpoint or a reader)");
    if (rc != SQLITE_OK)
        return er_sqlite_error(s->db, rc, "clear the write-ahead log after a failed commit", err);
    s->wal_suspect = false;
    return 0;
}

int er_sqlite_begin(er_store *s, er_error *err)
{
    /* no new transaction on top of frames a crash could replay */
    if (s->wal_suspect && clear_wal(s, err) < 0)
        return er_error_set(err, ER_EUNAVAIL, "store",
                            "store: refusing writes until the write-ahead log is cleared after "
                            "a failed commit: %s",
                            err ? err->message : "");
    int rc = run_id(s, ER_SQ_BEGIN, err);
    if (rc == 0 && (rc = check_data_version(s, err)) < 0)
        (void)run_id(s, ER_SQ_ROLLBACK, NULL);
    return rc;
}

int er_sqlite_commit(er_store *s, er_error *err)
{
    int rc = run_id(s, ER_SQ_COMMIT, err);
    if (rc == 0)
        return 0;
    if (!sqlite3_get_autocommit(s->db))
        (void)run_id(s, ER_SQ_ROLLBACK, NULL);
    s->wal_suspect = true;
    er_error cerr;
    if (clear_wal(s, &cerr) < 0 && err)
        snprintf(err->message, sizeof err->message,
                 "store: commit failed and the write-ahead log could not be cleared, so the "
                 "outcome is unknown until the store recovers: %.120s",
                 cerr.message);
    return rc;
}

/* Safe after a failed commit or a statement error: SQLite may already have
 * rolled the transaction back itself. */
void er_sqlite_rollback(er_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        (void)run_id(s, ER_SQ_ROLLBACK, NULL);
    er_sqlite_queue_cache_clear(s);
}

int er_sqlite_op_begin(er_store *s, bool *own, er_error *err)
{
    *own = sqlite3_get_autocommit(s->db) != 0;
    return *own ? er_sqlite_begin(s, err) : 0;
}

int er_sqlite_op_end(er_store *s, bool own, int rc, er_error *err)
{
    if (!own)
        return rc;
    if (rc == 0)
        rc = er_sqlite_commit(s, err);
    if (rc < 0)
        er_sqlite_rollback(s);
    return rc;
}

/* ---- checkpoints ---- */

/* Runs after each commit, with the log's frame count. */
int er_sqlite_wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    er_store *s = arg;
    s->wal_frames = frames;
    if (frames < s->ckpt_tried)
        s->ckpt_tried = 0; /* the log restarted */
    if (frames >= WAL_BACKSTOP * s->ckpt_frames && frames >= s->ckpt_tried + s->ckpt_frames / 8) {
        int log = 0;
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, NULL);
        s->ckpt_tried = log > 0 ? log : frames;
    }
    return SQLITE_OK;
}

/* Due once the log is long. Between the writer's transactions its frames
 * stay put while the checkpoint runs (it copies what was committed when it
 * began), so unless a reader's snapshot holds frames back it copies them
 * all and a later commit restarts the log from its start. When a reader
 * did hold some back, the next try waits for an eighth of the threshold of
 * new frames. */
bool er_sqlite_checkpoint_due(er_store *s)
{
    if (s->wal_frames < s->ckpt_frames || s->wal_frames < s->ckpt_tried + s->ckpt_frames / 8)
        return false;
    s->ckpt_tried = s->wal_frames;
    return true;
}

/* A checkpoint pass that finds fewer new frames than this is the last: the
 * writer finishes the rest between its transactions (engine/upkeep.h). */
#define CKPT_SMALL 256
#define CKPT_PASSES 4

/* PASSIVE checkpoints, which never block the writer and take no lock a
 * commit waits for: passes while the writer keeps adding frames, until one
 * finds only a few new ones. */
int er_sqlite_checkpoint(er_store *s, er_error *err)
{
    int prev = 0;
    for (int pass = 0; pass < CKPT_PASSES; pass++) {
        int log = 0;
        int rc = sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, NULL);
        if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
            return 0;
        if (rc != SQLITE_OK)
            return er_sqlite_error(s->db, rc, "checkpoint", err);
        if (log < prev || log - prev < CKPT_SMALL)
            break; /* the log restarted, or little came in during the pass */
        prev = log;
    }
    return 0;
}
