/* SPDX-License-Identifier: MIT
 *
 * The storage interface. An er_store is one connection to one store (SQLite
 * file or PostgreSQL database) and is used by one thread at a time. The
 * engine's writer thread groups many requests into one transaction:
 * begin, any number of operations, commit; it answers each request only
 * after the commit succeeded. Operations check their preconditions before
 * they write, so a logical error (not found, stale lease) leaves the
 * transaction as it was; a storage error (ER_EUNAVAIL, ER_EFULL) means the
 * caller must roll back the whole transaction.
 *
 * Times are ms since the epoch, passed in by the caller (the store never
 * reads a clock for decisions, so tests can inject one). Every `er_job *out`
 * is filled with owned strings: free with er_job_fini.
 */
#ifndef ER_STORE_STORE_H
#define ER_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ack.h"
#include "core/job.h"
#include "core/job_spec.h"
#include "core/lease.h"
#include "core/queue.h"
#include "util/clock.h"
#include "util/err.h"

typedef struct er_store er_store;

typedef enum er_durability {
    ER_DURABILITY_FULL = 0,   /* fsync every commit (default) */
    ER_DURABILITY_NORMAL = 1, /* SQLite synchronous=NORMAL in WAL: a power loss may lose the last commits */
} er_durability;

/* Whether an open may change the schema (er_store_options.migrate). */
typedef enum er_migrate_mode {
    ER_MIGRATE_AUTO = 0, /* the first open applies pending migrations (default) */
    /* An open of a schema behind this binary (none yet included) fails with
     * ER_EUNAVAIL and field "schema_version", changing nothing; `errand
     * migrate` (ops->schema) applies the migrations instead. */
    ER_MIGRATE_REFUSE = 1,
    /* As AUTO, but writes none of this process's server settings (the
     * PostgreSQL limits row stays the running servers'): ops->schema's. */
    ER_MIGRATE_ONLY = 2,
} er_migrate_mode;

typedef struct er_store_options {
    er_durability durability;
    er_migrate_mode migrate;
    int busy_timeout_ms;
    /* The server's job limits; a store whose SQL validates jobs itself
     * (PostgreSQL's errand.enqueue_job) is given them at open. A
     * payload_max of 0 means ER_PAYLOAD_MAX_DEFAULT. */
    er_job_limits limits;
    /* How long an id the client gave still deduplicates after retention
     * deleted its finished job (a tombstone, below); 0 keeps none. At most
     * ER_DEDUP_WINDOW_MAX_MS. */
    int64_t dedup_window_ms;
    /* The most bytes of jobs one list page holds (er_job_reply_bytes; at
     * least one job a page): list_jobs and list_dead stop there and give a
     * next_cursor. 0 means ER_REPLY_MAX_DEFAULT. */
    size_t reply_max;
} er_store_options;

#define ER_DEDUP_WINDOW_DEFAULT_MS (30LL * 86400000)   /* 30 days */
#define ER_DEDUP_WINDOW_MAX_MS (3650LL * 86400000)     /* 10 years */

/* What a store keeps of a finished job that retention deleted, so its id
 * stays a duplicate for the dedup window after finished_at: the enqueue of
 * a remembered id changes nothing and reports this instead of a stored job.
 * Only ids a client gave are remembered (er_job.id_generated is false);
 * idempotency keys never are. */
typedef struct er_tombstone {
    size_t index;        /* which job of the enqueue call it answers */
    char *queue;         /* owned */
    er_state state;      /* the job's state when deleted: completed or dead */
    int64_t finished_at;
} er_tombstone;

/* A growable list of tombstones; free with er_tombstone_list_fini. */
typedef struct er_tombstone_list {
    er_tombstone *items;
    size_t len, cap;
} er_tombstone_list;

void er_tombstone_list_fini(er_tombstone_list *l);
/* Appends {index, copy of queue, state, finished_at}; 0 or ER_ENOMEM. */
int er_tombstone_list_add(er_tombstone_list *l, size_t index, const char *queue, er_state state,
                          int64_t finished_at);

/* The most items a store list (jobs, schedulers, names) holds. */
#define ER_LIST_MAX ((size_t)1 << 24)

/* A dashboard session (docs/dashboard.md) as stored: keyed by the SHA-256
 * (hex) of its id, never the id itself. role is the frontend's number for
 * the token's role; name the token's name ("" when it has none). */
typedef struct er_session {
    int role;
    char name[65];       /* up to 64 characters (a token name) */
    char csrf[65];       /* the CSRF token, hex */
    int64_t created_at;
    int64_t expires_at;  /* idle expiry: the last use plus the idle limit */
} er_session;

/* One audit row (docs/dashboard.md): who did what to which, when. */
typedef struct er_audit {
    int64_t seq;         /* out: assigned by the store, ascending */
    int64_t at;
    char *who;           /* owned: "role:name", "role", or "open" */
    char *action;        /* owned: "queue.pause", "dead.redrive", ... */
    char *target;        /* owned, may be NULL: ids, a queue, or a filter */
    int64_t count;       /* jobs or rows the action changed */
} er_audit;

void er_audit_fini(er_audit *a);

typedef struct er_audit_list {
    er_audit *items;
    size_t len, cap;
} er_audit_list;

void er_audit_list_fini(er_audit_list *l);
/* Appends a zeroed slot and returns it, or NULL on ENOMEM. */
er_audit *er_audit_list_push(er_audit_list *l);

/* Which jobs of a state a bulk filter takes by their attempts: a scheduled
 * job with attempts made is a failure waiting for its retry (Faktory's
 * retry set), one without is due later (its scheduled set). */
typedef enum er_bulk_tries {
    ER_BULK_TRIES_ANY = 0,
    ER_BULK_TRIES_SOME = 1, /* attempts > 0 */
    ER_BULK_TRIES_NONE = 2, /* attempts == 0 */
} er_bulk_tries;

/* Which jobs a bulk action takes (docs/api.md, POST /v1/bulk). */
typedef struct er_bulk_filter {
    const char *queue;   /* NULL: every queue */
    er_state state;
    const char *name;    /* NULL: every job name */
    bool not_redriven;   /* only dead letters never redriven */
    er_bulk_tries tries;
} er_bulk_filter;

/* The most jobs one bulk chunk (one transaction) takes. */
#define ER_BULK_CHUNK 1000

/* The most session or audit rows one maintenance pass deletes. */
#define ER_UI_SWEEP_LIMIT 5000

/* A growable list of jobs; free with er_job_list_fini. */
typedef struct er_job_list {
    er_job *items;
    size_t len, cap;
} er_job_list;

void er_job_list_fini(er_job_list *l);
/* Appends an empty (er_job_init'd) slot and returns it, or NULL on ENOMEM. */
er_job *er_job_list_push(er_job_list *l);
/* Moves every item of src to the end of dst (src is left empty). 0 or
 * ER_ENOMEM (both then unchanged). */
int er_job_list_take(er_job_list *dst, er_job_list *src);

typedef struct er_queue_info {
    char *name; /* owned */
    int64_t counts[6];          /* indexed by er_state */
    int64_t oldest_waiting_ms;  /* run_at of the oldest waiting job, 0 when none */
    int64_t throttled_until;    /* ms; fetching waits until then (a throttled failure), or 0 */
    er_queue_settings settings;
} er_queue_info;

typedef struct er_fetch_params {
    const char *const *queues; /* borrowed, in priority order */
    size_t nqueues;
    const char *worker_id;     /* borrowed */
    int max;                   /* 1..ER_FETCH_MAX */
    int64_t lease_ms;          /* 0 = each queue's lease_ms setting */
    int64_t now;
    /* out, when not NULL: the earliest time (ms) a named queue or group
     * held back by a limit in time (throttle, rate) may give a job again;
     * INT64_MAX when none was (er_fetch_ready_at) */
    int64_t *ready_at;
    /* The reply budget (--max-reply), when max_bytes > 0: the store leases
     * jobs in fetch order while used_bytes plus the running total of their
     * sizes stays within max_bytes, and leases no job past it (the first
     * job is taken whatever its size when used_bytes is 0: a reply always
     * holds one). A job's size is er_job_reply_bytes' (core/job.h), which
     * a store computes from the row before it leases it, never below the
     * truth. A path that cannot size a row before leasing it (the group
     * planner's) leases only as many as fit at job_bytes_max each (the
     * largest a leased job can be) and sets *more when it stopped so with
     * room possibly left: the caller may then call again with the room
     * left. */
    size_t max_bytes, used_bytes, job_bytes_max;
    bool *more; /* out, when not NULL; the store only ever sets it */
} er_fetch_params;

/* A scheduler as stored (store/sched_codec.h decodes its spec). */
typedef struct er_sched_row {
    char *key;           /* owned */
    char *spec;          /* owned: the spec's text (er_sched_codec_encode) */
    int64_t created_at, updated_at;
    int64_t last_tick;   /* the latest tick fired, 0 when none */
    int64_t next_run_at; /* the first tick not yet handled; INT64_MAX when none */
} er_sched_row;

/* A growable list of schedulers; free with er_sched_list_fini. */
typedef struct er_sched_list {
    er_sched_row *items;
    size_t len, cap;
} er_sched_list;

void er_sched_row_fini(er_sched_row *r);
void er_sched_list_fini(er_sched_list *l);
/* Appends a zeroed slot and returns it, or NULL on ENOMEM. */
er_sched_row *er_sched_list_push(er_sched_list *l);

/* A run-once lease as a list shows it (ops->lease_list). */
typedef struct er_lease_row {
    er_lease lease;               /* owner_token always "": a secret, never listed */
    char *type, *code, *run_key;  /* owned: the parts its key derives from */
    int64_t created_at, updated_at;
} er_lease_row;

/* A growable list of leases; free with er_lease_list_fini. */
typedef struct er_lease_list {
    er_lease_row *items;
    size_t len, cap;
} er_lease_list;

void er_lease_list_fini(er_lease_list *l);
/* Frees the rows from index len on (len <= l->len); keeps the array. */
void er_lease_list_truncate(er_lease_list *l, size_t len);
/* Appends a zeroed slot and returns it, or NULL on ENOMEM. */
er_lease_row *er_lease_list_push(er_lease_list *l);

/* A cursor as a list shows it (ops->cursor_list). */
typedef struct er_cursor_row {
    char *name;  /* owned */
    char *value; /* owned: JSON text */
    int64_t updated_at;
} er_cursor_row;

/* A growable list of cursors; free with er_cursor_list_fini. */
typedef struct er_cursor_list {
    er_cursor_row *items;
    size_t len, cap;
} er_cursor_list;

void er_cursor_list_fini(er_cursor_list *l);
/* Frees the rows from index len on (len <= l->len); keeps the array. */
void er_cursor_list_truncate(er_cursor_list *l, size_t len);
/* Appends a zeroed slot and returns it, or NULL on ENOMEM. */
er_cursor_row *er_cursor_list_push(er_cursor_list *l);

/* One outcome for ops->complete_many. */
typedef struct er_complete_item {
    const char *id;     /* borrowed */
    const char *token;  /* borrowed, may be NULL */
    const char *result; /* borrowed JSON text, may be NULL */
    int rc;             /* out: 0, ER_ESTALE or ER_ENOTFOUND, as complete() */
    er_error *err;      /* borrowed: receives the item's error; may be NULL */
    er_ack_info *info;  /* borrowed: receives what complete() would tell; may be NULL */
} er_complete_item;

/* One outcome for ops->fail_many. */
typedef struct er_fail_item {
    const char *id;            /* borrowed */
    const char *token;         /* borrowed, may be NULL */
    const er_failure *failure; /* borrowed */
    int rc;                    /* out: 0, ER_ESTALE or ER_ENOTFOUND, as fail() */
    er_error *err;             /* borrowed: receives the item's error; may be NULL */
    er_fail_outcome *outcome;  /* borrowed: receives fail()'s outcome; may be NULL */
    er_ack_info *info;         /* borrowed: receives what fail() would tell; may be NULL */
} er_fail_item;

/* One release for ops->release_many. */
typedef struct er_release_item {
    const char *id;    /* borrowed */
    const char *token; /* borrowed, may be NULL */
    int rc;            /* out: 0, ER_ESTALE or ER_ENOTFOUND, as release() */
    er_error *err;     /* borrowed: receives the item's error; may be NULL */
    char *queue;       /* out, malloc'd: the released job's queue (rc 0 only) */
} er_release_item;

/* ---- the Faktory worker registry (docs/faktory.md, "Workers") ---- */

/* What an operator told a worker process; only ever raised (a terminate
 * is never taken back by a quiet). */
typedef enum er_worker_state {
    ER_WORKER_RUN = 0,
    ER_WORKER_QUIET = 1,
    ER_WORKER_TERMINATE = 2,
} er_worker_state;

#define ER_WORKER_NODE_MAX 255
#define ER_WORKER_LABELS_MAX 4096 /* labels, as JSON text */

/* One worker process as stored, keyed by its wid. Times are the servers'
 * clocks (ms), as the caller passes them. */
typedef struct er_worker_row {
    char wid[ER_NAME_MAX + 1];
    char hostname[ER_NAME_MAX + 1];
    char node[ER_WORKER_NODE_MAX + 1]; /* the server that last saw it beat */
    char current_state[16];            /* what its last BEAT said: "", "quiet", "terminate" */
    char *labels;                      /* owned: JSON array text; NULL when none */
    int64_t pid;
    int64_t v;                         /* its protocol version (0: not said) */
    int64_t rss_kb;                    /* -1 when never told */
    int64_t started_at, last_beat;
    er_worker_state state;
} er_worker_row;

typedef struct er_worker_list {
    er_worker_row *items;
    size_t len, cap;
} er_worker_list;

void er_worker_row_fini(er_worker_row *w);
void er_worker_list_fini(er_worker_list *l);
/* Appends a zeroed slot and returns it, or NULL on ENOMEM. */
er_worker_row *er_worker_list_push(er_worker_list *l);

/* A store's wake-up listener (ops->listener_open); opaque, one per store
 * kind that has one. */
typedef struct er_store_listener er_store_listener;

/* The most job keys ops->finished carries for one transaction; past it the
 * transaction announces "any job may have finished" instead. */
#define ER_STORE_FINISHED_MAX 7992

/* Called once per wake-up with the queue that got ready jobs (borrowed,
 * valid during the call). */
typedef void (*er_store_ready_fn)(const char *queue, void *arg);
/* Called with the keys of jobs another server finished (ops->finished;
 * borrowed, valid during the call); n 0 means any job may have finished. */
typedef void (*er_store_finished_fn)(const uint32_t *keys, size_t n, void *arg);

/* A store's schema version beside this binary's (ops->schema). */
typedef struct er_schema_info {
    int version;              /* the store's (0: no schema yet); before apply */
    int latest;               /* this binary's */
    const char *const *steps; /* borrowed, static: steps[i] names migration i + 1 */
} er_schema_info;

typedef struct er_store_ops {
    const char *name; /* "sqlite", "postgres" */

    /* Reads the schema version of the store at `url` (as for open) without
     * changing anything: a SQLite file that does not exist is version 0 and
     * is not created. With `apply`, first applies the pending migrations as
     * open does (ER_MIGRATE_AUTO, under the store's lock) and reports the
     * version it found before them. A schema newer than this binary is
     * ER_EINVAL. Blocks; any thread. */
    int (*schema)(const char *url, const er_store_options *opt, bool apply, er_schema_info *out,
                  er_error *err);

    /* Opens a connection; the first open of a store creates or migrates the
     * schema (opt->migrate may refuse that instead). `url` is the part after "sqlite:" (a file path) or a postgres://
     * URL. Returns 0 and *out, or a negative code with *err. */
    int (*open)(const char *url, const er_store_options *opt, er_store **out, er_error *err);
    void (*close)(er_store *s);

    int (*begin)(er_store *s, er_error *err);
    int (*commit)(er_store *s, er_error *err);
    void (*rollback)(er_store *s);

    /* Inserts a validated job (defaults already applied). When a job with
     * the same id exists: nothing changes, *duplicate = true, and `existing`
     * (when not NULL) receives the stored job. When the id is remembered by
     * a tombstone within the dedup window: nothing changes, *duplicate =
     * true, `existing` stays empty, and the tombstone (index 0) is appended
     * to *tombs (when not NULL). */
    int (*enqueue)(er_store *s, const er_job *job, bool *duplicate, er_job *existing,
                   er_tombstone_list *tombs, er_error *err);

    /* Leases up to p->max waiting jobs from p->queues (tried in order; paused
     * or throttled queues skipped; within a queue higher priority first, then
     * older run_at, then insertion order). Each leased job: state active,
     * attempts+1, started+1, a new secret lease token, lease_owner, lease
     * expiry = now + lease. Appends the leased jobs to *out: a store need
     * fill only the lease view's fields (API.md), state, run_at, the lease
     * fields and started_at; the rest may be left unset. */
    int (*fetch)(er_store *s, const er_fetch_params *p, er_job_list *out,
                 er_error *err);

    /* Extends the lease of an active job whose token matches to now +
     * extend_ms; stores progress (JSON text, may be NULL). ER_ESTALE when the
     * job is not active or the token differs, ER_ENOTFOUND when no such job. */
    int (*heartbeat)(er_store *s, const char *id, const char *token, int64_t extend_ms,
                     const char *progress, int64_t now, int64_t *expires_at, er_error *err);

    /* active -> completed with result (JSON text, may be NULL). ER_ESTALE /
     * ER_ENOTFOUND as heartbeat. */
    int (*complete)(er_store *s, const char *id, const char *token, const char *result,
                    int64_t now, er_ack_info *info, er_error *err);

    /* Applies er_fail_decide; stores last_error; a throttled failure pauses
     * the queue. Fills *outcome. ER_ESTALE / ER_ENOTFOUND as heartbeat. */
    int (*fail)(er_store *s, const char *id, const char *token, const er_failure *f,
                int64_t now, er_rand *r, er_fail_outcome *outcome, er_ack_info *info,
                er_error *err);

    /* active -> waiting at once, attempt not counted. */
    int (*release)(er_store *s, const char *id, const char *token, int64_t now,
                   er_error *err);

    /* Reads one job. ER_ENOTFOUND when none. */
    int (*get_job)(er_store *s, const char *id, er_job *out, er_error *err);

    /* scheduled|waiting -> cancelled. ER_ECONFLICT when active or finished,
     * ER_ENOTFOUND when none. Fills *out with the job after the change. */
    int (*cancel)(er_store *s, const char *id, int64_t now, er_job *out, er_error *err);

    /* Optional (NULL: the engine refuses it as not supported by this
     * store): a scheduled job, now. With last_error NULL it becomes
     * waiting with run_at = now; otherwise dead with finished_at = now and
     * that last_error (JSON text). *queue receives its queue (owned, or
     * NULL on failure). ER_ENOTFOUND when no scheduled job has that id. */
    int (*move_scheduled)(er_store *s, const char *id, const char *last_error, int64_t now,
                          char **queue, er_error *err);

    /* Lists jobs of a queue in one state, oldest first, after `cursor`
     * (opaque string from a previous page, NULL for the first): up to
     * `limit` jobs, fewer when more would pass the store's reply_max in
     * bytes (er_store_options). Sets *next_cursor (owned, free()) or NULL
     * when no more. */
    int (*list_jobs)(er_store *s, const char *queue, er_state state, int limit,
                     const char *cursor, er_job_list *out, char **next_cursor, er_error *err);

    /* Every known queue (has jobs or settings), sorted by name. *out is an
     * owned array; free with er_queue_info_list_free. */
    int (*list_queues)(er_store *s, int64_t now, er_queue_info **out, size_t *n, er_error *err);
    /* list_queues without the counts (left zero): each queue's settings,
     * cheap enough to poll (HTTP dispatch's discovery). */
    int (*list_queue_settings)(er_store *s, er_queue_info **out, size_t *n, er_error *err);

    /* A queue's settings (defaults when never set). */
    int (*get_queue_settings)(er_store *s, const char *queue, er_queue_settings *out,
                              er_error *err);
    int (*put_queue_settings)(er_store *s, const char *queue, const er_queue_settings *in,
                              er_error *err);
    /* Optional: a queue's job defaults (get_queue_settings' .defaults) from
     * the store's settings cache of the open transaction, without copying
     * the rest of the settings (about 19 KB). 0, a storage error, or 1 when
     * not cached (er_store_queue_defaults then reads the whole settings). */
    int (*cached_queue_defaults)(er_store *s, const char *queue, er_job_defaults *out,
                                 er_error *err);
    /* Ends the pause a throttled failure put on `queue` (resume, or a
     * settings change to paused false). */
    int (*clear_queue_throttle)(er_store *s, const char *queue, er_error *err);

    /* Dead letters: dead jobs, newest failure first, optionally of one
     * queue; paged and capped in bytes as list_jobs. */
    int (*list_dead)(er_store *s, const char *queue, int limit, const char *cursor,
                     er_job_list *out, char **next_cursor, er_error *err);
    /* Enqueues a copy of dead job `id` as `{id}-redrive-{n}` (waiting,
     * attempts 0), marks the dead job redriven; fills *out with the new job.
     * ER_ENOTFOUND when `id` is not a dead job. */
    int (*redrive)(er_store *s, const char *id, int64_t now, er_job *out, er_error *err);
    /* Deletes a dead job. ER_ENOTFOUND when `id` is not a dead job. */
    int (*delete_dead)(er_store *s, const char *id, er_error *err);

    /* Maintenance, each bounded by `limit` rows per call:
     * scheduled jobs with run_at <= now -> waiting; *n = how many. The
     * queues that got jobs are appended to *queues (owned strings, caller
     * frees each and the array) so long-polling fetchers can be woken. */
    int (*promote)(er_store *s, int64_t now, int limit, int *n, char ***queues,
                   size_t *nqueues, er_error *err);
    /* active jobs with lease_expires_at <= now -> waiting (stalled+1) or dead
     * on their last attempt or past the queue's max_stalled (er_stall_why). When `reaped` is not
     * NULL, each job reaped is appended to it as read, with `state` set to
     * the state it went to (for logs and metrics). */
    int (*reap)(er_store *s, int64_t now, int limit, int *n, char ***queues, size_t *nqueues,
                er_job_list *reaped, er_error *err);
    /* Deletes finished jobs by each queue's retention settings, keeping a
     * tombstone of each one whose id a client gave and whose finished_at
     * is within the dedup window; then deletes up to `limit` tombstones
     * past the window. *n = jobs deleted. */
    int (*retention)(er_store *s, int64_t now, int limit, int *n, er_error *err);
    /* The earliest run_at of a scheduled job or lease expiry of an active
     * one (so the engine can sleep until then); INT64_MAX when none. */
    int (*next_due)(er_store *s, int64_t *at, er_error *err);

    /* Optional, NULL when a store has none (er_store_enqueue_many then calls
     * enqueue per job): inserts n validated jobs, in order, in one round
     * trip. duplicate[i] = true when job i's id existed, came earlier in
     * the batch, or is remembered by a tombstone (then appended to *tombs,
     * when not NULL, with index i, in order); such a job changes nothing. */
    int (*enqueue_many)(er_store *s, const er_job *jobs, size_t n, bool *duplicate,
                        er_tombstone_list *tombs, er_error *err);

    /* Optional, NULL when a store has none (the engine then calls complete
     * per item): has the effect of calling complete for items[0..n) in
     * order, each item's logical error in items[i].rc and *items[i].err.
     * Returns 0, or a storage error (roll back). */
    int (*complete_many)(er_store *s, er_complete_item *items, size_t n, int64_t now,
                         er_error *err);

    /* Optional, NULL when a store has none (the engine then calls fail per
     * item): has the effect of calling fail for items[0..n) in order (the
     * random source drawn in that order too), each item's logical error in
     * items[i].rc and *items[i].err. Returns 0, or a storage error (roll
     * back). */
    int (*fail_many)(er_store *s, er_fail_item *items, size_t n, int64_t now, er_rand *r,
                     er_error *err);

    /* Optional, NULL when a store has none (the engine then calls release
     * per item): has the effect of calling release for items[0..n) in
     * order, each item's logical error in items[i].rc and *items[i].err.
     * Returns 0, or a storage error (roll back). */
    int (*release_many)(er_store *s, er_release_item *items, size_t n, int64_t now,
                        er_error *err);

    /* ---- schedulers, leases, cursors (docs/cron.md, docs/leases.md) ----
     * A store may leave these NULL; the engine then answers "not supported
     * by this store" (ER_EUNAVAIL) and runs no cron ticks. */

    /* Upserts by in->key: a new key is inserted with created_at = updated_at
     * = now and last_tick 0; an existing key gets in->spec and
     * in->next_run_at, updated_at = now, and keeps created_at and
     * last_tick. *created says which. *out (when not NULL) receives the
     * stored row (owned: er_sched_row_fini). */
    int (*scheduler_put)(er_store *s, const er_sched_row *in, int64_t now, bool *created,
                         er_sched_row *out, er_error *err);
    /* Reads one scheduler; ER_ENOTFOUND when none. */
    int (*scheduler_get)(er_store *s, const char *key, er_sched_row *out, er_error *err);
    /* Up to `limit` schedulers with key > after (NULL: from the start), in
     * key order, appended to *out. */
    int (*scheduler_list)(er_store *s, const char *after, int limit, er_sched_list *out,
                          er_error *err);
    /* Deletes one scheduler (its jobs stay); ER_ENOTFOUND when none. */
    int (*scheduler_delete)(er_store *s, const char *key, er_error *err);
    /* Up to `limit` schedulers with next_run_at <= now, earliest first,
     * appended to *out. */
    int (*scheduler_due)(er_store *s, int64_t now, int limit, er_sched_list *out,
                         er_error *err);
    /* Records a look at a scheduler: sets last_tick (when > 0; 0 keeps it)
     * and next_run_at, only while its next_run_at still equals
     * expected_next; otherwise ER_ECONFLICT (it was changed meanwhile) and
     * nothing changes. ER_ENOTFOUND when the key is gone. */
    int (*scheduler_advance)(er_store *s, const char *key, int64_t expected_next,
                             int64_t last_tick, int64_t next_run_at, er_error *err);

    /* Leases (core/lease.h decides; the store keeps one row per
     * idempotency key). The lease clock is the store's: SQLite judges
     * expiry by the `now` argument, which the engine takes from the
     * server's clock; PostgreSQL (clock=store) uses now() of its
     * transaction, so nodes with skewed clocks still agree.
     * Acquire: `key` is er_lease_key(type, code, run_key) (the parts are
     * stored for inspection). 0 and *out when acquired or reclaimed after
     * expiry; ER_ECONFLICT with *out showing the state (held or done)
     * otherwise, and nothing changes. */
    int (*lease_acquire)(er_store *s, const char *type, const char *code, const char *run_key,
                         const char *key, int64_t ttl_ms, int64_t now,
                         er_lease *out, er_error *err);
    /* By owner token; ER_ESTALE when no live lease has that token (never
     * issued, rotated by a reclaim, expired, released or done). *out: the
     * lease after the change. */
    int (*lease_renew)(er_store *s, const char *owner_token, int64_t ttl_ms, int64_t now,
                       er_lease *out, er_error *err);
    int (*lease_complete)(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                          er_error *err);
    int (*lease_release)(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                         er_error *err);

    /* Cursors: a named JSON value (canonical text) with compare-and-set.
     * get: *value (owned, free()) and *updated_at; ER_ENOTFOUND when none. */
    int (*cursor_get)(er_store *s, const char *name, char **value, int64_t *updated_at,
                      er_error *err);
    /* Sets name = value (JSON text). When check is true the stored value
     * must equal `expected` (NULL: the cursor must not exist yet), else
     * ER_ECONFLICT, nothing changes and *current (when not NULL) receives
     * the stored value (owned, NULL when none). check false writes
     * unconditionally. */
    int (*cursor_cas)(er_store *s, const char *name, bool check, const char *expected,
                      const char *value, int64_t now, char **current, er_error *err);

    /* Lists for inspection (GET /v1/leases, GET /v1/cursors). Optional:
     * NULL answers "not supported by this store". Up to `limit` rows whose
     * key (name) is > after (NULL or "": from the start), in byte order of
     * the key, appended to *out; on failure *out is as it was. A lease's
     * state is as of the store's clock (held but expired shows free, as
     * er_lease_state_at says); its owner token is never read. */
    int (*lease_list)(er_store *s, const char *after, int limit, int64_t now,
                      er_lease_list *out, er_error *err);
    int (*cursor_list)(er_store *s, const char *after, int limit, er_cursor_list *out,
                       er_error *err);

    /* Maintenance leadership among servers sharing one store. Optional:
     * NULL means this process is always the leader (SQLite). Sets *leader
     * to whether this connection holds the store's maintenance lease,
     * taking it when free. Call outside a transaction, on the writer's
     * connection; cheap while held (no round trip). A lease lives as long
     * as the connection's session, so a leader that dies or loses its
     * connection loses it; after a reconnect the next call tries again. */
    int (*maintenance_lease)(er_store *s, bool *leader, er_error *err);

    /* Optional, both NULL when a store has none: work the store keeps out
     * of commits (SQLite: checkpoints of the write-ahead log).
     * checkpoint_due: on the writer's connection, after it answered the
     * batch it committed; true when the work should run now (the log has
     * grown past a threshold), and then counts as tried. Cheap, no I/O.
     * checkpoint: runs the work on a connection of its own (the engine's
     * upkeep thread), outside any transaction, while the writer goes on.
     * Returns 0 or a storage error; nothing is rolled back, no committed
     * data is at risk either way. */
    bool (*checkpoint_due)(er_store *s);
    int (*checkpoint)(er_store *s, er_error *err);

    /* ---- dashboard sessions and the audit log (docs/dashboard.md) ----
     * Optional, all NULL when a store has none (the dashboard then cannot
     * log in and admin actions are refused with ER_EUNAVAIL). */

    /* Inserts a session under `hash` (64 hex chars of SHA-256). */
    int (*session_put)(er_store *s, const char *hash, const er_session *in, er_error *err);
    /* Reads the session and, while its expires_at > now, moves expires_at
     * to now + idle_ms. ER_ENOTFOUND when none or expired. */
    int (*session_touch)(er_store *s, const char *hash, int64_t now, int64_t idle_ms,
                         er_session *out, er_error *err);
    /* Deletes a session; 0 whether or not it existed. */
    int (*session_delete)(er_store *s, const char *hash, er_error *err);
    /* Appends an audit row (in the caller's transaction); sets a->seq. */
    int (*audit_add)(er_store *s, er_audit *a, er_error *err);
    /* Up to `limit` audit rows with seq < before (INT64_MAX: from the
     * newest), newest first, appended to *out. */
    int (*audit_list)(er_store *s, int64_t before, int limit, er_audit_list *out,
                      er_error *err);
    /* Bulk actions: up to `limit` ids of jobs matching f with seq > after,
     * in seq order, into *ids (returns owned: free each and the array) and
     * *n; *last = the seq of the last one. */
    int (*bulk_ids)(er_store *s, const er_bulk_filter *f, int64_t after, int limit, char ***ids,
                    size_t *n, int64_t *last, er_error *err);
    /* How many jobs match f. */
    int (*bulk_count)(er_store *s, const er_bulk_filter *f, int64_t *n, er_error *err);
    /* Maintenance: deletes up to `limit` sessions expired at `now` and up
     * to `limit` audit rows older than audit_before; *n = rows deleted. */
    int (*ui_sweep)(er_store *s, int64_t now, int64_t audit_before, int limit, int *n,
                    er_error *err);

    /* ---- the Faktory worker registry (docs/faktory.md, "Workers") ----
     * Optional, all NULL when a store has none (the engine then answers
     * ER_EUNAVAIL). One row per wid, shared by every server of the store. */

    /* Upserts each row by wid: a new wid is inserted as given with state
     * run; an existing one takes hostname, node, current_state, labels,
     * pid, v, rss_kb and last_beat from the row when the row's last_beat is
     * not older than the stored one (a late write never moves a beat
     * back), and keeps started_at and state. */
    int (*worker_beat)(er_store *s, const er_worker_row *rows, size_t n, er_error *err);
    /* Raises wid's state to `state` (never lowers it) when its last_beat
     * is > live_after; *out (when not NULL) receives the row after.
     * ER_ENOTFOUND when no such row is live. */
    int (*worker_signal)(er_store *s, const char *wid, er_worker_state state, int64_t live_after,
                         er_worker_row *out, er_error *err);
    /* One row; ER_ENOTFOUND when none (live or not). */
    int (*worker_get)(er_store *s, const char *wid, er_worker_row *out, er_error *err);
    /* Up to `limit` rows with last_beat > live_after (and, with signalled,
     * state other than run) and wid > after (NULL or "": from the start),
     * in byte order of wid, appended to *out. */
    int (*worker_list)(er_store *s, int64_t live_after, bool signalled, const char *after,
                       int limit, er_worker_list *out, er_error *err);
    /* Deletes up to `limit` rows with last_beat < before; *n = how many. */
    int (*worker_reap)(er_store *s, int64_t before, int limit, int *n, er_error *err);
    /* *n = how many rows have last_beat > live_after (every node's). */
    int (*worker_count)(er_store *s, int64_t live_after, int64_t *n, er_error *err);

    /* ---- wake-ups from other servers ----
     * Optional, all five NULL when a store has none (SQLite: one server,
     * whose own commits are the only news of ready and finished jobs). A
     * store shared by several servers tells each one when another (or an
     * application's SQL) made jobs ready, so long-polling fetchers wake at
     * once, and when another finished jobs (finished(), below), so requests
     * waiting for their outcome are answered. The store owns the protocol
     * (PostgreSQL: LISTEN on "<schema>_ready" and "<schema>_done" on a
     * connection outside the pool); the caller owns the thread, the wait
     * and the reconnect policy. A listener is used by one thread at a time
     * and is independent of every er_store. */

    /* Opens a listener for the store at `url` (copied; as open() takes it)
     * on its own connection. Blocking (connects). Returns 0 and *out
     * (returns owned: free with listener_close), or a negative code
     * (ER_EUNAVAIL when the store cannot be reached) with *err and *out
     * NULL. */
    int (*listener_open)(const char *url, er_store_listener **out, er_error *err);
    /* The descriptor to wait on for reading before listener_poll (borrowed:
     * valid until listener_close; do not read or close it). */
    int (*listener_fd)(const er_store_listener *l);
    /* Reads what arrived, without blocking, and calls on this thread
     * fn(queue, arg) for each wake-up and done(keys, n, arg) (when done is
     * not NULL) for each ops->finished another transaction committed.
     * ER_EUNAVAIL when the connection broke: close the listener, open
     * another, and treat every queue as possibly ready and every job as
     * possibly finished, since wake-ups sent meanwhile are lost. */
    int (*listener_poll)(er_store_listener *l, er_store_ready_fn fn, er_store_finished_fn done,
                         void *arg, er_error *err);
    /* Closes the connection and frees l. NULL-safe. */
    void (*listener_close)(er_store_listener *l);
    /* Announces to every listener that the jobs of `keys` (n 32-bit keys of
     * their ids, the engine's er_wait_key; copied; NULL: any job may have)
     * finished in the open transaction: delivered to listener_poll's done
     * after the commit, never when it rolls back. Costs no round trip of its own (PostgreSQL
     * sends it with COMMIT, at most ER_STORE_FINISHED_MAX keys a
     * transaction; past that one "any job may have finished"). Optional,
     * with the listener ops. Returns 0 or ER_ENOMEM. */
    int (*finished)(er_store *s, const uint32_t *keys, size_t n, er_error *err);

    /* Optional, NULL when a store keeps nothing between connections:
     * releases what the store keeps process-wide (PostgreSQL: the idle
     * pooled connections of every URL). Connections of open er_stores are
     * not affected; they close with their stores. Thread-safe; for
     * shutdown and tests. */
    void (*release_idle)(void);

    /* Optional: the connections this process holds to the store now (open
     * stores, pooled idle ones and wake-up listeners), for /metrics. */
    int64_t (*connections)(void);
} er_store_ops;

extern const er_store_ops er_sqlite_ops;
/* Process-wide SQLite setup, once: turns off SQLite's allocation statistics
 * (a global mutex around every allocation). It must come before SQLite is
 * initialized; the SQLite store's open calls it, so only code that calls
 * SQLite before opening a store (a test registering a VFS) calls it first.
 * Thread-safe; later calls do nothing. */
void er_sqlite_global_init(void);
/* The PostgreSQL store (src/store/postgres/postgres.h: URL options, pool;
 * it has the optional wake-up and release_idle ops). Unlike SQLite it reads the store's clock by default: with
 * clock=store (the default) every lease, schedule and maintenance decision
 * uses PostgreSQL's now() of the current transaction instead of the `now`
 * arguments, so servers on several hosts agree on time; clock=caller in the
 * URL restores the injected-clock behaviour for tests. Any SQL error aborts
 * the PostgreSQL transaction, so it is reported as a storage error
 * (ER_EUNAVAIL, ER_EFULL, ER_ENOMEM or ER_EINTERNAL), never as a logical one. */
extern const er_store_ops er_postgres_ops;

/* Picks the ops for a store URL ("sqlite:PATH" or a bare path -> sqlite,
 * "postgres://..." / "postgresql://..." -> postgres) and sets *rest to the
 * part the ops' open() takes. ER_EINVAL for an unknown scheme. */
int er_store_resolve(const char *url, const er_store_ops **ops, const char **rest,
                     er_error *err);

void er_queue_info_list_free(er_queue_info *qs, size_t n);

/* A set of queue names (owned strings), for the stores' maintenance ops that
 * report which queues got ready jobs. */
typedef struct er_name_set {
    char **v;
    size_t n, cap;
} er_name_set;

/* Adds a copy of name unless present; 0 or ER_ENOMEM. */
int er_name_set_add(er_name_set *ns, const char *name);
/* Adds a copy of name without looking for it first (names known to be
 * distinct, e.g. job ids); 0 or ER_ENOMEM. */
int er_name_set_push(er_name_set *ns, const char *name);
void er_name_set_free(er_name_set *ns);
/* Moves the names to the out-parameters (owned by the caller then), or frees
 * them when either is NULL. */
void er_name_set_give(er_name_set *ns, char ***queues, size_t *nqueues);

/* Parses a dead-letter page cursor "<finished_at>.<seq>" (the last job of
 * the previous page); NULL or "" means from the newest (both INT64_MAX).
 * ER_EINVAL (field "cursor") for anything else. */
int er_dead_cursor_parse(const char *cursor, int64_t *at, int64_t *seq, er_error *err);

/* A store's tombstone lookup: appends job's tombstone (as item `index`) to
 * *tombs when a tombstone within the dedup window of `now` remembers its
 * id (a client's) and no job holds the id again. */
typedef int (*er_tombstone_find_fn)(er_store *s, const er_job *job, int64_t now, size_t index,
                                    er_tombstone_list *tombs, er_error *err);

/* For a redrive: 0 when no tombstone remembers copy's id, else ER_ECONFLICT
 * in *err (field "id"), or find's storage error. */
int er_store_redrive_check(er_tombstone_find_fn find, er_store *s, const er_job *copy,
                           int64_t now, er_error *err);

/* A queue's job defaults, as every enqueue reads them: ops->cached_queue_defaults,
 * else get_queue_settings into a heap copy. */
int er_store_queue_defaults(const er_store_ops *ops, er_store *s, const char *queue,
                            er_job_defaults *out, er_error *err);

/* ops->enqueue_many when the store has it, else ops->enqueue for each job. */
int er_store_enqueue_many(const er_store_ops *ops, er_store *s, const er_job *jobs, size_t n,
                          bool *duplicate, er_tombstone_list *tombs, er_error *err);

#endif
