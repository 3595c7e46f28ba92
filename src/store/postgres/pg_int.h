/* SPDX-License-Identifier: MIT
 *
 * Internals of the PostgreSQL store, shared by its .c files and its tests:
 * the connection struct and reconnects (pg.c; the pool itself is private
 * to pg.c), the statement table (pg_sql.c), parameter building, statements,
 * error mapping and transactions (pg_exec.c), migrations (pg_migrate.c)
 * and the row <-> er_job mapping (pg_rows.c). Nothing outside
 * src/store/postgres and tests/store includes it.
 */
#ifndef ER_STORE_PG_INT_H
#define ER_STORE_PG_INT_H

#include <libpq-fe.h>

#include "core/fetch.h"
#include "store/postgres/postgres.h"
#include "store/job_row.h"
#include "store/settings_codec.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/jsonw.h"

/* Statement ids; er_pg_sql[id] is the text, prepared as "e<id>_<gen>". */
enum {
    ER_PG_INSERT_JOB,
    ER_PG_INSERT_MANY,
    ER_PG_INSERT_COPIED,
    ER_PG_GET_JOB,
    ER_PG_GET_JOB_LOCK,
    ER_PG_QUEUE_GET,
    ER_PG_QUEUE_PUT,
    ER_PG_QUEUE_ALL,
    ER_PG_LIST_QUEUES,
    ER_PG_QUEUE_STATES,
    ER_PG_FETCH,
    /* groups and rate limits (pg_fetch.c) */
    ER_PG_QUEUE_RATE,
    ER_PG_FIRST_GROUP,
    ER_PG_NEXT_GROUP,
    ER_PG_GROUP_ACTIVE,
    ER_PG_UNGROUPED_ACTIVE,
    ER_PG_GROUP_TAT,
    ER_PG_GROUP_TAT_CLEAN,
    ER_PG_LEVEL_GROUPED,
    ER_PG_LEVEL_UNGROUPED,
    ER_PG_FETCH_GROUP,
    ER_PG_FETCH_GROUP_AT,
    ER_PG_FETCH_UNGROUPED,
    ER_PG_FETCH_UNGROUPED_AT,
    ER_PG_NEXT_GROUPS,
    ER_PG_GROUP_ROOMS,
    ER_PG_FETCH_GROUPS,
    ER_PG_GROUP_TATS_PUT,
    ER_PG_HEARTBEAT,
    ER_PG_COMPLETE,
    ER_PG_COMPLETE_MANY,
    ER_PG_RELEASE,
    ER_PG_RELEASE_MANY,
    ER_PG_FAIL_APPLY,
    ER_PG_FAIL_LOCK_MANY,
    ER_PG_FAIL_APPLY_MANY,
    ER_PG_CANCEL,
    ER_PG_MOVE_SCHEDULED,
    ER_PG_LIST_JOBS,
    ER_PG_LIST_DEAD,
    ER_PG_LIST_DEAD_QUEUE,
    ER_PG_REDRIVE_APPLY,
    ER_PG_DELETE_DEAD,
    ER_PG_PROMOTE,
    ER_PG_REAP_SELECT,
    ER_PG_REAP_APPLY,
    ER_PG_RET_COMPLETED_AGE,
    ER_PG_RET_COMPLETED_COUNT,
    ER_PG_RET_DEAD_AGE,
    ER_PG_NEXT_DUE,
    ER_PG_TOMB_GET,
    ER_PG_TOMB_CLEAN,
    /* schedulers, leases, cursors (pg_sched.c) */
    ER_PG_SCHED_PUT,
    ER_PG_SCHED_GET,
    ER_PG_SCHED_LIST,
    ER_PG_SCHED_DELETE,
    ER_PG_SCHED_DUE,
    ER_PG_SCHED_ADVANCE,
    ER_PG_LEASE_LOCK,
    ER_PG_LEASE_BY_TOKEN,
    ER_PG_LEASE_PUT,
    ER_PG_CURSOR_GET,
    ER_PG_CURSOR_CAS,
    ER_PG_QUEUE_UNTHROTTLE,
    ER_PG_LEASE_LIST,
    ER_PG_CURSOR_LIST,
    ER_PG_SESSION_PUT,
    ER_PG_SESSION_TOUCH,
    ER_PG_SESSION_DELETE,
    ER_PG_SESSION_SWEEP,
    ER_PG_AUDIT_ADD,
    ER_PG_AUDIT_LIST,
    ER_PG_AUDIT_SWEEP,
    ER_PG_BULK_IDS,
    ER_PG_BULK_IDS_QUEUE,
    ER_PG_BULK_COUNT,
    ER_PG_BULK_COUNT_QUEUE,
    ER_PG_WORKER_BEAT,
    ER_PG_WORKER_SIGNAL,
    ER_PG_WORKER_GET,
    ER_PG_WORKER_LIST,
    ER_PG_WORKER_LIST_SIGNALLED,
    ER_PG_WORKER_REAP,
    ER_PG_WORKER_COUNT,
    ER_PG_NSTMT
};

extern const char *const er_pg_sql[ER_PG_NSTMT];

/* Schema migrations, applied in order at the first open (pg_migrate.c). */
extern const char er_pg_migration_4[];
extern const char er_pg_migration_7[];
extern const char er_pg_migration_8[];
extern const char er_pg_migration_5[];
extern const char er_pg_migration_6[];
extern const char er_pg_migration_10[];
extern const char er_pg_migration_11[];
extern const char er_pg_migration_13[];
extern const char er_pg_migration_14[];
extern const char *const er_pg_migrations[];
extern const char *const er_pg_migration_names[]; /* one a step, for errand migrate */
extern const int er_pg_schema_version;

/* Columns of every job SELECT/RETURNING: the job row (store/job_row.h),
 * then seq. */
enum { ER_PG_COL_SEQ = ER_JOB_NCOLS, ER_PG_NCOLS = ER_JOB_NCOLS + 1 };

/* Appends job's tombstone (as item `index`) to *tombs when its id is a
 * client's, a tombstone within the dedup window remembers it and no job
 * holds the id again; else nothing. `now` as the store's ops take it. */
int er_pg_tombstone_find(er_store *s, const er_job *job, int64_t now, size_t index,
                         er_tombstone_list *tombs, er_error *err);
/* The window to look tombstones up with for job: 0 (none) for a generated
 * id or when the store keeps none. */
int64_t er_pg_tomb_window(const er_store *s, const er_job *job);

/* One physical connection; lives in a pool between er_store uses. */
typedef struct er_pg_conn {
    PGconn *pg;
    bool prepared[ER_PG_NSTMT];
    unsigned gen;            /* in statement names: "e<id>_<gen>" (pg_exec.c) */
    bool maint_lock;         /* this session holds the maintenance advisory lock */
    bool bulk_table;         /* this session has its pg_temp.errand_bulk (pg_jobs.c) */
    struct er_pg_conn *next; /* idle list */
} er_pg_conn;

typedef struct er_pg_pool er_pg_pool;

/* Settings read in the current transaction (cleared at its end); at most
 * ER_PG_QCACHE_MAX queues. */
#define ER_PG_QCACHE_MAX 64
typedef struct er_pg_qs {
    char *name;
    er_queue_settings settings;
} er_pg_qs;

/* What a store keeps of a queue across fetches (pg_fetch.c): its group
 * planner's cursor on this server, and the planner's settings decoded from
 * the stored text `text` (pol NULL: not decoded). */
typedef struct er_pg_policy er_pg_policy;
typedef struct er_pg_fq {
    char *name;
    er_fetch_cursor cur;
    char *text; /* NULL: the defaults (no stored text) */
    er_pg_policy *pol;
} er_pg_fq;

struct er_store {
    er_pg_pool *pool; /* borrowed: pools live until er_postgres_pool_drain */
    er_pg_conn *c;
    bool in_tx;
    bool caller_clock; /* clock=caller: use the `now` callers pass */
    er_durability durability;
    int busy_ms;
    int64_t tx_now;    /* the store's clock (now()) of the open transaction */
    int64_t dedup_window_ms; /* er_store_options.dedup_window_ms */
    size_t reply_max;        /* er_store_options.reply_max (0 read as the default) */
    er_pg_qs *qc;      /* transaction-scoped settings cache */
    size_t nqc;
    char **notified; /* queues notified in this transaction */
    size_t nnotified;
    uint32_t *done;  /* keys of jobs finished in this transaction (ops->finished) */
    size_t ndone, capdone;
    bool done_all;   /* more than ER_STORE_FINISHED_MAX: announce "any job" */
    er_pg_fq *fq;    /* per-queue fetch state, at most FQ_MAX (pg_fetch.c) */
    size_t nfq, capfq, npol;
};

/* Query parameters in text format. */
#define ER_PG_MAXP 40
typedef struct er_pg_params {
    int n;
    const char *v[ER_PG_MAXP];
    char buf[ER_PG_MAXP][32];
} er_pg_params;

/* ---- running SQL (pg_exec.c) ---- */

void er_pg_p_str(er_pg_params *p, const char *s); /* NULL -> SQL NULL; borrowed */
void er_pg_p_i64(er_pg_params *p, int64_t v);
void er_pg_p_f64(er_pg_params *p, double v);
void er_pg_p_bool(er_pg_params *p, bool v);

/* Maps a failed result (or a broken connection when res is NULL) to an
 * ER_E* code with PostgreSQL's message in *err; the one place SQLSTATEs
 * are translated. Every SQL error aborts the PostgreSQL transaction, so
 * every code it returns is a storage error the caller must roll back. */
int er_pg_error(er_store *s, const PGresult *res, const char *what, er_error *err);
/* Sets ER_ENOMEM ("out of memory") in *err and returns it. */
int er_pg_nomem(er_error *err);
/* 0 when res (NULL: no result) is PGRES_TUPLES_OK or PGRES_COMMAND_OK,
 * else er_pg_error's code; res stays the caller's. */
int er_pg_check(er_store *s, PGresult *res, const char *what, er_error *err);
/* Runs a simple (possibly multi-statement) query; the last result in *out
 * when given (PQclear it). */
int er_pg_simple(er_store *s, const char *sql, const char *what, PGresult **out, er_error *err);

/* Runs prepared statement `id` (preparing it on first use on this
 * connection). On success *res holds the result (PQclear it). */
int er_pg_exec(er_store *s, int id, const er_pg_params *p, PGresult **res, er_error *err);
/* er_pg_exec for a statement whose rows are not needed; *affected (may be
 * NULL) gets the row count of the command. */
int er_pg_run(er_store *s, int id, const er_pg_params *p, int64_t *affected, er_error *err);

/* The store clock: the caller's `now` with clock=caller, else the time of
 * the open transaction (now() in PostgreSQL). */
int64_t er_pg_now(const er_store *s, int64_t now);

/* The store's begin, commit and rollback (store.h's ops); rollback is safe
 * after a failed commit or statement, and with no transaction open. */
int er_pg_begin(er_store *s, er_error *err);
int er_pg_commit(er_store *s, er_error *err);
void er_pg_rollback(er_store *s);
/* Empties the transaction-scoped caches (settings, queues notified, jobs
 * finished). */
void er_pg_tx_caches_clear(er_store *s);
/* ops->finished: records keys for the NOTIFY that er_pg_commit sends. */
int er_pg_finished(er_store *s, const uint32_t *keys, size_t n, er_error *err);
/* The payload of a "<schema>_done" notification: ER_PG_DONE_PER_NOTIFY
 * keys, each 8 lowercase hex digits, or "*" (any job may have finished).
 * A server of every version that shares the schema reads it, so changing
 * it needs a new channel name. */
#define ER_PG_DONE_PER_NOTIFY 999
/* Opens a transaction unless one is open (*own says whether this call did);
 * op_end commits an owned one on rc == 0 and rolls it back otherwise. */
int er_pg_op_begin(er_store *s, bool *own, er_error *err);
int er_pg_op_end(er_store *s, bool own, int rc, er_error *err);

/* Whether `queue` was notified in this transaction / record that it was. */
bool er_pg_notified(const er_store *s, const char *queue);
void er_pg_mark_notified(er_store *s, const char *queue);
/* Transaction-scoped settings cache. */
er_pg_qs *er_pg_qs_find(er_store *s, const char *queue);
int er_pg_qs_put(er_store *s, const char *queue, const er_queue_settings *qs);


/* ---- fetch (pg_fetch.c) ---- */

/* Frees the per-queue fetch state (the rotations start again). */
void er_pg_fq_clear(er_store *s);

/* ---- the connection (pg.c) ---- */

/* The session's batch table for enqueue_many's COPY (outside any
 * transaction; s->c->bulk_table says whether it exists). */
extern const char er_pg_bulk_table_sql[];

/* Reconnects s's connection when it broke (server restart, network) and
 * sets its session up again; prepared statements and session locks are
 * gone with the old session. */
int er_pg_ensure_conn(er_store *s, er_error *err);

/* ---- migrations (pg_migrate.c) ---- */

/* Creates or migrates the schema `schema` (its pool's) and writes the
 * limits row lim (NULL: the defaults), in one transaction under an
 * advisory lock; *from gets the version found. With ER_MIGRATE_REFUSE it
 * runs no DDL (a role without CREATE rights may start) and a schema behind
 * this binary fails (ER_EUNAVAIL, field "schema_version"), changing
 * nothing. */
int er_pg_migrate(er_store *s, const char *schema, const er_job_limits *lim,
                  er_migrate_mode mode, int *from, er_error *err);
/* The schema version of `schema` on a connection of its own (0 when the
 * schema or its migrations table is absent); changes nothing. */
int er_pg_schema_read(const char *conninfo, const char *schema, int *version, er_error *err);

/* ---- rows (pg_rows.c) ---- */

/* Writes a job as the JSON object of its row (keys: the job row's columns),
 * which json_populate_record(NULL::jobs, ...) reads. */
void er_pg_job_json(const er_job *j, er_jsonw *w);
/* The text of the last double er_pg_job_copy_row wrote (zero it before a
 * batch). */
typedef struct er_pg_copy_memo {
    double v;
    bool set;
    size_t len;
    char text[32];
} er_pg_copy_memo;
/* Appends a job as one line of COPY's text format: ord (when >= 0: the
 * batch table's), then the job row's columns (ENOMEM or the limit:
 * b->err). */
void er_pg_job_copy_row(const er_job *j, int64_t ord, er_pg_copy_memo *m, er_buf *b);
/* Reads row `row` from column `col0` on (ER_PG col order) into *j
 * (er_job_init'd by the caller). ER_ENOMEM leaves *j partly filled. */
int er_pg_row_job(const PGresult *res, int row, int col0, er_job *j, er_error *err);
int64_t er_pg_i64(const PGresult *res, int row, int col);
/* Reads one job by id into *out (ER_ENOTFOUND when none); lock = FOR UPDATE. */
int er_pg_load_job(er_store *s, const char *id, bool lock, er_job *out, er_error *err);

/* A PostgreSQL array literal builder ({"a","b",NULL}). */
#define ER_PG_ARRAY_MAX ((size_t)64 << 20) /* bytes of one array literal */
typedef struct er_pg_array {
    char *buf;
    size_t len, cap;
    int n;
    bool oom;
} er_pg_array;
void er_pg_array_str(er_pg_array *a, const char *s); /* NULL -> NULL element */
void er_pg_array_i64(er_pg_array *a, int64_t v);
/* The finished literal (owned by a) or NULL on ENOMEM. */
const char *er_pg_array_done(er_pg_array *a);
void er_pg_array_fini(er_pg_array *a);

/* Operations (pg_jobs.c, pg_admin.c), in store.h's order. */
int er_pg_enqueue(er_store *s, const er_job *job, bool *duplicate, er_job *existing,
                  er_tombstone_list *tombs, er_error *err);
int er_pg_enqueue_many(er_store *s, const er_job *jobs, size_t n, bool *duplicate,
                       er_tombstone_list *tombs, er_error *err);
int er_pg_fetch(er_store *s, const er_fetch_params *p, er_job_list *out,
                er_error *err);
int er_pg_heartbeat(er_store *s, const char *id, const char *token, int64_t extend_ms,
                    const char *progress, int64_t now, int64_t *expires_at, er_error *err);
int er_pg_complete(er_store *s, const char *id, const char *token, const char *result,
                   int64_t now, er_ack_info *info, er_error *err);
int er_pg_complete_many(er_store *s, er_complete_item *items, size_t n, int64_t now,
                        er_error *err);
int er_pg_fail(er_store *s, const char *id, const char *token, const er_failure *f, int64_t now,
               er_rand *r, er_fail_outcome *outcome, er_ack_info *info, er_error *err);
int er_pg_fail_many(er_store *s, er_fail_item *items, size_t n, int64_t now, er_rand *r,
                    er_error *err);
int er_pg_release(er_store *s, const char *id, const char *token, int64_t now, er_error *err);
int er_pg_release_many(er_store *s, er_release_item *items, size_t n, int64_t now,
                       er_error *err);
int er_pg_get_job(er_store *s, const char *id, er_job *out, er_error *err);
int er_pg_cancel(er_store *s, const char *id, int64_t now, er_job *out, er_error *err);
int er_pg_move_scheduled(er_store *s, const char *id, const char *last_error, int64_t now,
                         char **queue, er_error *err);
int er_pg_list_jobs(er_store *s, const char *queue, er_state state, int limit, const char *cursor,
                    er_job_list *out, char **next_cursor, er_error *err);
int er_pg_list_queues(er_store *s, int64_t now, er_queue_info **out, size_t *n, er_error *err);
int er_pg_list_queue_settings(er_store *s, er_queue_info **out, size_t *n, er_error *err);
int er_pg_cached_queue_defaults(er_store *s, const char *queue, er_job_defaults *out,
                                er_error *err);
int er_pg_get_queue_settings(er_store *s, const char *queue, er_queue_settings *out,
                             er_error *err);
int er_pg_clear_queue_throttle(er_store *s, const char *queue, er_error *err);
int er_pg_put_queue_settings(er_store *s, const char *queue, const er_queue_settings *in,
                             er_error *err);
int er_pg_list_dead(er_store *s, const char *queue, int limit, const char *cursor,
                    er_job_list *out, char **next_cursor, er_error *err);
int er_pg_redrive(er_store *s, const char *id, int64_t now, er_job *out, er_error *err);
int er_pg_delete_dead(er_store *s, const char *id, er_error *err);
/* pg_ui.c: dashboard sessions and the audit log */
int er_pg_session_put(er_store *s, const char *hash, const er_session *in, er_error *err);
int er_pg_session_touch(er_store *s, const char *hash, int64_t now, int64_t idle_ms,
                        er_session *out, er_error *err);
int er_pg_session_delete(er_store *s, const char *hash, er_error *err);
int er_pg_audit_add(er_store *s, er_audit *a, er_error *err);
int er_pg_audit_list(er_store *s, int64_t before, int limit, er_audit_list *out, er_error *err);
int er_pg_bulk_ids(er_store *s, const er_bulk_filter *f, int64_t after, int limit, char ***ids,
                   size_t *n, int64_t *last, er_error *err);
int er_pg_bulk_count(er_store *s, const er_bulk_filter *f, int64_t *n, er_error *err);
/* pg_ui.c: column col of row as text into dst ("" when NULL). */
void er_pg_copy_col(const PGresult *r, int row, int col, char *dst, size_t cap);
/* pg_workers.c: the Faktory worker registry (store.h) */
int er_pg_worker_beat(er_store *s, const er_worker_row *rows, size_t n, er_error *err);
int er_pg_worker_signal(er_store *s, const char *wid, er_worker_state state, int64_t live_after,
                        er_worker_row *out, er_error *err);
int er_pg_worker_get(er_store *s, const char *wid, er_worker_row *out, er_error *err);
int er_pg_worker_list(er_store *s, int64_t live_after, bool signalled, const char *after,
                      int limit, er_worker_list *out, er_error *err);
int er_pg_worker_reap(er_store *s, int64_t before, int limit, int *n, er_error *err);
int er_pg_worker_count(er_store *s, int64_t live_after, int64_t *n, er_error *err);
int er_pg_ui_sweep(er_store *s, int64_t now, int64_t audit_before, int limit, int *n,
                   er_error *err);
int er_pg_promote(er_store *s, int64_t now, int limit, int *n, char ***queues, size_t *nqueues,
                  er_error *err);
int er_pg_reap(er_store *s, int64_t now, int limit, int *n, char ***queues, size_t *nqueues,
               er_job_list *reaped, er_error *err);
int er_pg_retention(er_store *s, int64_t now, int limit, int *n, er_error *err);
int er_pg_next_due(er_store *s, int64_t *at, er_error *err);
/* Schedulers, leases, cursors (pg_sched.c), in store.h's order. */
int er_pg_scheduler_put(er_store *s, const er_sched_row *in, int64_t now, bool *created,
                        er_sched_row *out, er_error *err);
int er_pg_scheduler_get(er_store *s, const char *key, er_sched_row *out, er_error *err);
int er_pg_scheduler_list(er_store *s, const char *after, int limit, er_sched_list *out,
                         er_error *err);
int er_pg_scheduler_delete(er_store *s, const char *key, er_error *err);
int er_pg_scheduler_due(er_store *s, int64_t now, int limit, er_sched_list *out, er_error *err);
int er_pg_scheduler_advance(er_store *s, const char *key, int64_t expected_next,
                            int64_t last_tick, int64_t next_run_at, er_error *err);
int er_pg_lease_acquire(er_store *s, const char *type, const char *code, const char *run_key,
                        const char *key, int64_t ttl_ms, int64_t now, er_lease *out,
                        er_error *err);
int er_pg_lease_renew(er_store *s, const char *owner_token, int64_t ttl_ms, int64_t now,
                      er_lease *out, er_error *err);
int er_pg_lease_complete(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                         er_error *err);
int er_pg_lease_release(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                        er_error *err);
int er_pg_cursor_get(er_store *s, const char *name, char **value, int64_t *updated_at,
                     er_error *err);
int er_pg_cursor_cas(er_store *s, const char *name, bool check, const char *expected,
                     const char *value, int64_t now, char **current, er_error *err);
int er_pg_lease_list(er_store *s, const char *after, int limit, int64_t now, er_lease_list *out,
                     er_error *err);
int er_pg_cursor_list(er_store *s, const char *after, int limit, er_cursor_list *out,
                      er_error *err);
/* A store URL's libpq part (*conninfo, malloc'd: the URL without errand's
 * options) and its schema (default "errand"); ER_EINVAL for a bad option. */
#define ER_PG_SCHEMA_MAX 57
int er_pg_url_parts(const char *url, char **conninfo, char schema[ER_PG_SCHEMA_MAX + 1],
                    er_error *err);
/* Wake-up listeners (pg_listen.c), store.h's listener ops. */
int er_pg_listener_open(const char *url, er_store_listener **out, er_error *err);
int er_pg_listener_fd(const er_store_listener *l);
int er_pg_listener_poll(er_store_listener *l, er_store_ready_fn fn, er_store_finished_fn done,
                        void *arg, er_error *err);
void er_pg_listener_close(er_store_listener *l);
/* Listener connections open in this process. */
int64_t er_pg_listeners_open(void);

#endif
