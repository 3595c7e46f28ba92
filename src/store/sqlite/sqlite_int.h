/* SPDX-License-Identifier: MIT
 *
 * Internals of the SQLite store, shared by its .c files and its tests: the
 * connection struct and statement cache (sqlite.c), the statement table
 * (sql.c; SQL text exposed so tests can run EXPLAIN QUERY PLAN on it),
 * transactions and checkpoints (txn.c), the per-connection queue-settings
 * cache (queue_cache.c), the row <-> er_job mapping (rows.c) and the batch
 * virtual tables (batch.c). Nothing outside src/store/sqlite and
 * tests/store includes this header.
 */
#ifndef ER_STORE_SQLITE_INT_H
#define ER_STORE_SQLITE_INT_H

#include <sqlite3.h>

#include "core/fetch.h"
#include "store/job_row.h"
#include "store/store.h"

/* The VFS every connection of the store opens through (walbuf.c): the
 * default VFS, with a transaction's log appends written as one call. A
 * SQLite URI's "vfs=" still chooses another. */
#define ER_SQLITE_VFS "errand"

/* Registers (not as the default) a VFS named `name` (borrowed for the life
 * of the process) over the VFS named `under` (NULL: the default one), with
 * write-ahead log appends gathered as in walbuf.c. Idempotent for a name.
 * Returns SQLITE_OK or an SQLite error code. Not thread-safe: call from
 * er_sqlite_global_init, or from a test before any store opens. */
int er_sqlite_vfs_register(const char *name, const char *under);

/* Puts the page cache of pcache.c (SQLite's own, with the truncates that
 * can drop nothing skipped) under every connection of the process. Only
 * before SQLite is initialized: false if it was, and nothing changes. Called
 * by er_sqlite_global_init. */
bool er_sqlite_pcache_install(void);
/* Truncates asked of that cache since the start, and how many it skipped. */
void er_sqlite_pcache_counts(unsigned long long *truncates, unsigned long long *skipped);

/* Statement ids; er_sqlite_sql[id] is the text. Prepared lazily, once per
 * connection, and reset after every use. */
enum {
    ER_SQ_BEGIN,
    ER_SQ_COMMIT,
    ER_SQ_ROLLBACK,
    ER_SQ_INSERT_JOB,
    ER_SQ_INSERT_MANY,
    ER_SQ_JOB_SEQ,
    ER_SQ_GET_JOB,
    ER_SQ_LEASE_STATE,
    ER_SQ_QUEUE_REGISTER,
    ER_SQ_QUEUE_GET,
    ER_SQ_QUEUE_PUT,
    ER_SQ_QUEUE_THROTTLE,
    ER_SQ_QUEUE_UNTHROTTLE,
    ER_SQ_QUEUE_ALL,
    ER_SQ_COUNT_ACTIVE,
    ER_SQ_FETCH,
    ER_SQ_FETCH_BUDGET,
    ER_SQ_FETCH_GROUP_AT,
    ER_SQ_FETCH_UNGROUPED_AT,
    ER_SQ_PICK_GROUP,
    ER_SQ_PICK_UNGROUPED,
    ER_SQ_LEASE_SEQS,
    ER_SQ_QUEUE_RATE,
    ER_SQ_ANY_GROUPED,
    ER_SQ_ANY_UNGROUPED,
    ER_SQ_NEXT_GROUP,
    ER_SQ_GROUP_ACTIVE,
    ER_SQ_GROUPED_ACTIVE,
    ER_SQ_GROUP_TAT,
    ER_SQ_GROUP_ROOMS,
    ER_SQ_GROUP_TATS_PUT,
    ER_SQ_GROUP_TAT_CLEAN,
    ER_SQ_LEVEL_GROUPED,
    ER_SQ_LEVEL_UNGROUPED,
    ER_SQ_HEARTBEAT,
    ER_SQ_COMPLETE,
    ER_SQ_COMPLETE_MANY,
    ER_SQ_SAVEPOINT,
    ER_SQ_SAVEPOINT_RELEASE,
    ER_SQ_SAVEPOINT_UNDO,
    ER_SQ_RELEASE,
    ER_SQ_FAIL_APPLY,
    ER_SQ_CANCEL,
    ER_SQ_MOVE_SCHEDULED,
    ER_SQ_LIST_JOBS,
    ER_SQ_LIST_ACTIVE,
    ER_SQ_COUNTS,
    ER_SQ_OLDEST_WAITING,
    ER_SQ_LIST_DEAD,
    ER_SQ_LIST_DEAD_QUEUE,
    ER_SQ_REDRIVE_MARK,
    ER_SQ_DELETE_DEAD,
    ER_SQ_PROMOTE,
    ER_SQ_REAP_SELECT,
    ER_SQ_REAP_APPLY,
    ER_SQ_RET_COMPLETED_AGE,
    ER_SQ_RET_COMPLETED_COUNT,
    ER_SQ_RET_DEAD_AGE,
    ER_SQ_NEXT_SCHEDULED,
    ER_SQ_NEXT_LEASE,
    ER_SQ_DATA_VERSION,
    ER_SQ_TOMB_GET,
    ER_SQ_TOMB_MANY,
    ER_SQ_TOMB_ANY,
    ER_SQ_TOMB_PUT,
    ER_SQ_TOMB_CLEAN,
    /* schedulers, leases, cursors (sched.c) */
    ER_SQ_SCHED_GET,
    ER_SQ_SCHED_PUT,
    ER_SQ_SCHED_LIST,
    ER_SQ_SCHED_DELETE,
    ER_SQ_SCHED_DUE,
    ER_SQ_SCHED_ADVANCE,
    ER_SQ_LEASE_GET,
    ER_SQ_LEASE_BY_TOKEN,
    ER_SQ_LEASE_PUT,
    ER_SQ_CURSOR_GET,
    ER_SQ_CURSOR_PUT,
    ER_SQ_LEASE_LIST,
    ER_SQ_CURSOR_LIST,
    ER_SQ_SESSION_PUT,
    ER_SQ_SESSION_TOUCH,
    ER_SQ_SESSION_DELETE,
    ER_SQ_SESSION_SWEEP,
    ER_SQ_AUDIT_ADD,
    ER_SQ_AUDIT_LIST,
    ER_SQ_AUDIT_SWEEP,
    ER_SQ_BULK_IDS,
    ER_SQ_BULK_IDS_QUEUE,
    ER_SQ_BULK_COUNT,
    ER_SQ_BULK_COUNT_QUEUE,
    ER_SQ_WORKER_BEAT,
    ER_SQ_WORKER_SIGNAL,
    ER_SQ_WORKER_GET,
    ER_SQ_WORKER_LIST,
    ER_SQ_WORKER_LIST_SIGNALLED,
    ER_SQ_WORKER_REAP,
    ER_SQ_WORKER_COUNT,
    ER_SQ_NSTMT
};

extern const char *const er_sqlite_sql[ER_SQ_NSTMT];

/* Schema migrations, applied in order at open (see sql.c for the procedure). */
extern const char *const er_sqlite_migrations[];
extern const int er_sqlite_schema_version;
extern const char *const er_sqlite_migration_names[]; /* one a step, for errand migrate */

/* The column of seq in a job SELECT/RETURNING: after the job row
 * (store/job_row.h). */
enum { ER_SQ_COL_SEQ = ER_JOB_NCOLS };

/* One cached queue: its settings, pause and throttle state. */
typedef struct er_sqlite_queue {
    char *name;
    er_queue_settings settings; /* settings.paused mirrors the queues.paused column */
    int64_t throttled_until;
    int64_t rate_tat; /* the queue's rate limit state (core/fetch.h) */
    bool in_table; /* a queues row exists (committed or in this transaction) */
} er_sqlite_queue;

/* A queue's round-robin cursor on this server (core/fetch.h); kept apart
 * from the cache, which a rollback clears. */
typedef struct er_sqlite_rr {
    char *queue;
    er_fetch_cursor cur;
} er_sqlite_rr;

struct er_store {
    sqlite3 *db;
    sqlite3_stmt *st[ER_SQ_NSTMT];
    er_sqlite_queue **qc; /* owned cache entries, cleared on rollback and when
                             another connection committed (data_version) */
    size_t nqc, capqc;
    er_sqlite_rr *rr; /* at most QUEUE_CACHE_MAX (queue_cache.c) */
    size_t nrr, caprr;
    int64_t data_version;
    bool wal_suspect; /* a commit failed; its frames may still be on disk */
    int ckpt_frames;  /* checkpoint threshold (the wal_autocheckpoint setting) */
    int wal_frames;   /* frames in the write-ahead log after the last commit */
    int ckpt_tried;   /* the log's frames at the last checkpoint (0 after a restart) */
    const er_complete_item *acks; /* borrowed while ER_SQ_COMPLETE_MANY runs (er_acks) */
    size_t nacks;
    const er_job *newjobs; /* borrowed while ER_SQ_INSERT_MANY or ER_SQ_TOMB_MANY runs
                              (er_newjobs) */
    size_t nnew;
    int64_t dedup_window_ms; /* er_store_options.dedup_window_ms */
    size_t reply_max;        /* er_store_options.reply_max (0 read as the default) */
};

/* ---- the connection (sqlite.c) ---- */

/* Maps a SQLite result code to an ER_E* code with sqlite's message in *err;
 * the one place SQLite codes are translated. */
int er_sqlite_error(sqlite3 *db, int rc, const char *what, er_error *err);

/* Returns the cached prepared statement `id` in *st (preparing it on first
 * use) or a negative code. The caller resets it when done. */
int er_sqlite_prep(er_store *s, int id, sqlite3_stmt **st, er_error *err);
/* Steps a statement expected to finish without rows; resets it. */
int er_sqlite_run(er_store *s, sqlite3_stmt *st, er_error *err);

/* The connection handle, for tests (EXPLAIN QUERY PLAN, integrity checks). */
sqlite3 *er_sqlite_handle(er_store *s);

/* ---- transactions and checkpoints (txn.c) ---- */

/* The store's begin, commit and rollback (store.h's ops). */
int er_sqlite_begin(er_store *s, er_error *err);
int er_sqlite_commit(er_store *s, er_error *err);
void er_sqlite_rollback(er_store *s);
/* Opens a transaction unless one is open (*own says whether this call did);
 * op_end commits an owned one on rc == 0 and rolls it back otherwise. */
int er_sqlite_op_begin(er_store *s, bool *own, er_error *err);
int er_sqlite_op_end(er_store *s, bool own, int rc, er_error *err);
/* The store's checkpoint op: a PASSIVE checkpoint between transactions once
 * the log is long. */
bool er_sqlite_checkpoint_due(er_store *s);
int er_sqlite_checkpoint(er_store *s, er_error *err);
/* The connection's sqlite3_wal_hook (arg: the er_store), run after each
 * commit. */
int er_sqlite_wal_hook(void *arg, sqlite3 *db, const char *name, int frames);

/* ---- the queue-settings cache (queue_cache.c) ---- */

/* The cache entry for `queue`, loaded from the queues table on a miss
 * (defaults when no row). Borrowed until the next call that may load. */
int er_sqlite_queue_get(er_store *s, const char *queue, er_sqlite_queue **out, er_error *err);
/* Ensures a queues row exists for `queue` (so it lists). */
int er_sqlite_queue_register(er_store *s, const char *queue, er_error *err);
void er_sqlite_queue_cache_clear(er_store *s);
/* The queue's round-robin cursor (zeroed when new); NULL on ENOMEM. */
er_fetch_cursor *er_sqlite_rr_get(er_store *s, const char *queue);
void er_sqlite_rr_clear(er_store *s);

/* ---- rows (rows.c) ---- */

/* Binds a job's columns (store/job_row.h) to ?1..?ER_JOB_NCOLS of
 * ER_SQ_INSERT_JOB. */
int er_sqlite_bind_job(er_store *s, sqlite3_stmt *st, const er_job *j, er_error *err);
/* Reads the current row (the job row's order) into *j
 * (er_job_init'd by the caller). ER_ENOMEM leaves *j partly filled: fini it. */
int er_sqlite_row_job(sqlite3_stmt *st, er_job *j, er_error *err);
/* Copies text column i into *dst (owned; NULL for SQL NULL) and its length
 * into *len (when not NULL). 0, or -1 on ENOMEM. */
int er_sqlite_col_text(sqlite3_stmt *st, int i, char **dst, size_t *len);
/* Reads one job by id into *out (ER_ENOTFOUND when none). */
int er_sqlite_load_job(er_store *s, const char *id, er_job *out, er_error *err);

/* ---- batch helpers (batch.c) ---- */

/* Registers er_token() and the er_acks and er_newjobs virtual tables on s's
 * connection; returns a SQLite result code. */
int er_sqlite_batch_register(er_store *s);

/* Operations (jobs.c, admin.c), in store.h's order. */
/* Appends job's tombstone (as item `index`) to *tombs when its id is a
 * client's, a tombstone within the dedup window of `now` remembers it and
 * no job holds the id again; else nothing. */
int er_sqlite_tombstone_find(er_store *s, const er_job *job, int64_t now, size_t index,
                             er_tombstone_list *tombs, er_error *err);
int er_sqlite_enqueue(er_store *s, const er_job *job, bool *duplicate, er_job *existing,
                      er_tombstone_list *tombs, er_error *err);
int er_sqlite_enqueue_many(er_store *s, const er_job *jobs, size_t n, bool *duplicate,
                           er_tombstone_list *tombs, er_error *err);
int er_sqlite_fetch(er_store *s, const er_fetch_params *p, er_job_list *out,
                    er_error *err);
int er_sqlite_heartbeat(er_store *s, const char *id, const char *token, int64_t extend_ms,
                        const char *progress, int64_t now, int64_t *expires_at, er_error *err);
int er_sqlite_complete(er_store *s, const char *id, const char *token, const char *result,
                       int64_t now, er_ack_info *info, er_error *err);
int er_sqlite_fail(er_store *s, const char *id, const char *token, const er_failure *f,
                   int64_t now, er_rand *r, er_fail_outcome *outcome,
                   er_ack_info *info, er_error *err);
int er_sqlite_complete_many(er_store *s, er_complete_item *items, size_t n, int64_t now,
                            er_error *err);
int er_sqlite_release(er_store *s, const char *id, const char *token, int64_t now,
                      er_error *err);
int er_sqlite_get_job(er_store *s, const char *id, er_job *out, er_error *err);
int er_sqlite_cancel(er_store *s, const char *id, int64_t now, er_job *out, er_error *err);
int er_sqlite_move_scheduled(er_store *s, const char *id, const char *last_error, int64_t now,
                             char **queue, er_error *err);
int er_sqlite_list_jobs(er_store *s, const char *queue, er_state state, int limit,
                        const char *cursor, er_job_list *out, char **next_cursor, er_error *err);
int er_sqlite_list_queue_settings(er_store *s, er_queue_info **out, size_t *n, er_error *err);
int er_sqlite_list_queues(er_store *s, int64_t now, er_queue_info **out, size_t *n,
                          er_error *err);
int er_sqlite_cached_queue_defaults(er_store *s, const char *queue, er_job_defaults *out,
                                    er_error *err);
int er_sqlite_get_queue_settings(er_store *s, const char *queue, er_queue_settings *out,
                                 er_error *err);
int er_sqlite_clear_queue_throttle(er_store *s, const char *queue, er_error *err);
int er_sqlite_put_queue_settings(er_store *s, const char *queue, const er_queue_settings *in,
                                 er_error *err);
int er_sqlite_list_dead(er_store *s, const char *queue, int limit, const char *cursor,
                        er_job_list *out, char **next_cursor, er_error *err);
int er_sqlite_redrive(er_store *s, const char *id, int64_t now, er_job *out, er_error *err);
int er_sqlite_delete_dead(er_store *s, const char *id, er_error *err);
int er_sqlite_promote(er_store *s, int64_t now, int limit, int *n, char ***queues,
                      size_t *nqueues, er_error *err);
int er_sqlite_reap(er_store *s, int64_t now, int limit, int *n, char ***queues,
                   size_t *nqueues, er_job_list *reaped, er_error *err);
int er_sqlite_retention(er_store *s, int64_t now, int limit, int *n, er_error *err);
int er_sqlite_next_due(er_store *s, int64_t *at, er_error *err);

/* Schedulers, leases, cursors (sched.c), in store.h's order. */
int er_sqlite_scheduler_put(er_store *s, const er_sched_row *in, int64_t now, bool *created,
                            er_sched_row *out, er_error *err);
int er_sqlite_scheduler_get(er_store *s, const char *key, er_sched_row *out, er_error *err);
int er_sqlite_scheduler_list(er_store *s, const char *after, int limit, er_sched_list *out,
                             er_error *err);
int er_sqlite_scheduler_delete(er_store *s, const char *key, er_error *err);
int er_sqlite_scheduler_due(er_store *s, int64_t now, int limit, er_sched_list *out,
                            er_error *err);
int er_sqlite_scheduler_advance(er_store *s, const char *key, int64_t expected_next,
                                int64_t last_tick, int64_t next_run_at, er_error *err);
int er_sqlite_lease_acquire(er_store *s, const char *type, const char *code, const char *run_key,
                            const char *key, int64_t ttl_ms, int64_t now,
                            er_lease *out, er_error *err);
int er_sqlite_lease_renew(er_store *s, const char *owner_token, int64_t ttl_ms, int64_t now,
                          er_lease *out, er_error *err);
int er_sqlite_lease_complete(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                             er_error *err);
int er_sqlite_lease_release(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                            er_error *err);
/* ui.c: dashboard sessions and the audit log */
int er_sqlite_session_put(er_store *s, const char *hash, const er_session *in, er_error *err);
int er_sqlite_session_touch(er_store *s, const char *hash, int64_t now, int64_t idle_ms,
                            er_session *out, er_error *err);
int er_sqlite_session_delete(er_store *s, const char *hash, er_error *err);
int er_sqlite_audit_add(er_store *s, er_audit *a, er_error *err);
int er_sqlite_audit_list(er_store *s, int64_t before, int limit, er_audit_list *out,
                         er_error *err);
int er_sqlite_bulk_ids(er_store *s, const er_bulk_filter *f, int64_t after, int limit,
                       char ***ids, size_t *n, int64_t *last, er_error *err);
int er_sqlite_bulk_count(er_store *s, const er_bulk_filter *f, int64_t *n, er_error *err);
/* ui.c: column i of the current row as text into dst ("" when NULL). */
void er_sqlite_col_copy(sqlite3_stmt *st, int i, char *dst, size_t cap);
/* workers.c: the Faktory worker registry (store.h) */
int er_sqlite_worker_beat(er_store *s, const er_worker_row *rows, size_t n, er_error *err);
int er_sqlite_worker_signal(er_store *s, const char *wid, er_worker_state state,
                            int64_t live_after, er_worker_row *out, er_error *err);
int er_sqlite_worker_get(er_store *s, const char *wid, er_worker_row *out, er_error *err);
int er_sqlite_worker_list(er_store *s, int64_t live_after, bool signalled, const char *after,
                          int limit, er_worker_list *out, er_error *err);
int er_sqlite_worker_reap(er_store *s, int64_t before, int limit, int *n, er_error *err);
int er_sqlite_worker_count(er_store *s, int64_t live_after, int64_t *n, er_error *err);
int er_sqlite_ui_sweep(er_store *s, int64_t now, int64_t audit_before, int limit, int *n,
                       er_error *err);
int er_sqlite_cursor_get(er_store *s, const char *name, char **value, int64_t *updated_at,
                         er_error *err);
int er_sqlite_cursor_cas(er_store *s, const char *name, bool check, const char *expected,
                         const char *value, int64_t now, char **current, er_error *err);
int er_sqlite_lease_list(er_store *s, const char *after, int limit, int64_t now,
                         er_lease_list *out, er_error *err);
int er_sqlite_cursor_list(er_store *s, const char *after, int limit, er_cursor_list *out,
                          er_error *err);

#endif
