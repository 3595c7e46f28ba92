/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's SQL: the schema migrations and the text of every cached
 * statement. Partial indexes keep fetch, promote and reap proportional to the
 * jobs in the state they look at, not to the finished jobs kept by retention.
 * Only text lives here; the other files run it.
 */
#include "store/job_row.h"
#include "store/sqlite/sqlite_int.h"

/* Schema migrations. Each step runs, in order, inside the transaction that
 * open() holds, and meta.schema_version becomes the number of steps applied.
 * To change the schema: append a new string to this array (never edit or
 * reorder a step that has shipped: a database may already hold it), update
 * the statements below that use new columns, name it in
 * er_sqlite_migration_names, and add a store test that
 * opens a database written by the previous version. A database whose
 * version is newer than this array knows is refused at open. */
const char *const er_sqlite_migrations[] = {
    /* 1: jobs and queues */
    "CREATE TABLE jobs ("
    " seq INTEGER PRIMARY KEY,"
    " id TEXT NOT NULL UNIQUE,"
    " queue TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " payload TEXT NOT NULL,"
    " state INTEGER NOT NULL,"
    " priority INTEGER NOT NULL,"
    " grp TEXT,"
    " run_at INTEGER NOT NULL,"
    " max_attempts INTEGER NOT NULL,"
    " backoff_type INTEGER NOT NULL,"
    " backoff_delay_ms INTEGER NOT NULL,"
    " backoff_max_ms INTEGER NOT NULL,"
    " backoff_jitter REAL NOT NULL,"
    " timeout_ms INTEGER NOT NULL,"
    " trace_id TEXT,"
    " idempotency_key TEXT,"
    " attempts INTEGER NOT NULL,"
    " started INTEGER NOT NULL,"
    " stalled INTEGER NOT NULL,"
    " lease_owner TEXT,"
    " lease_token TEXT,"
    " lease_expires_at INTEGER NOT NULL,"
    " last_error TEXT,"
    " result TEXT,"
    " progress TEXT,"
    " created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL,"
    " started_at INTEGER NOT NULL,"
    " finished_at INTEGER NOT NULL,"
    " redriven_at INTEGER NOT NULL,"
    " redrive_count INTEGER NOT NULL,"
    " set_flags INTEGER NOT NULL);"
    /* listing by queue and state in insertion order; per-state counts */
    "CREATE INDEX jobs_queue_state ON jobs(queue, state, seq);"
    "CREATE INDEX jobs_waiting ON jobs(queue, priority DESC, run_at, seq) WHERE state = 1;"
    "CREATE INDEX jobs_scheduled ON jobs(run_at) WHERE state = 0;"
    "CREATE INDEX jobs_active ON jobs(lease_expires_at) WHERE state = 2;"
    "CREATE INDEX jobs_completed ON jobs(queue, finished_at) WHERE state = 3;"
    "CREATE INDEX jobs_dead ON jobs(finished_at, seq) WHERE state = 4;"
    "CREATE INDEX jobs_dead_queue ON jobs(queue, finished_at, seq) WHERE state = 4;"
    "CREATE TABLE queues ("
    " name TEXT PRIMARY KEY,"
    " settings TEXT,"
    " paused INTEGER NOT NULL DEFAULT 0,"
    " throttled_until INTEGER NOT NULL DEFAULT 0"
    ") WITHOUT ROWID;",
    /* 2: schedulers, run-once leases, cursors */
    "CREATE TABLE schedulers ("
    " key TEXT PRIMARY KEY,"
    " spec TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL,"
    " last_tick INTEGER NOT NULL,"
    " next_run_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE INDEX schedulers_due ON schedulers(next_run_at);"
    "CREATE TABLE leases ("
    " key TEXT PRIMARY KEY,"
    " type TEXT NOT NULL,"
    " code TEXT NOT NULL,"
    " run_key TEXT NOT NULL,"
    " state INTEGER NOT NULL,"
    " owner_token TEXT,"
    " fence INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL,"
    " completed_at INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE INDEX leases_owner ON leases(owner_token) WHERE owner_token IS NOT NULL;"
    "CREATE TABLE cursors ("
    " name TEXT PRIMARY KEY,"
    " value TEXT NOT NULL,"
    " updated_at INTEGER NOT NULL"
    ") WITHOUT ROWID;",
    /* 3: jobs_queue_state leaves out active jobs, so a lease and its
     * outcome update one index less each; active jobs are counted and
     * listed through jobs_active, which now carries the queue (and the
     * state, always 2, so a count by queue reads this index alone). */
    "DROP INDEX jobs_queue_state;"
    "CREATE INDEX jobs_queue_state ON jobs(queue, state, seq) WHERE state <> 2;"
    "DROP INDEX jobs_active;"
    "CREATE INDEX jobs_active ON jobs(lease_expires_at, queue, state) WHERE state = 2;",
    /* 4: tombstones: what retention keeps of a deleted job whose id a
     * client gave, so the id stays a duplicate for the dedup window */
    "CREATE TABLE tombstones ("
    " id TEXT PRIMARY KEY,"
    " queue TEXT NOT NULL,"
    " state INTEGER NOT NULL,"
    " finished_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE INDEX tombstones_finished ON tombstones(finished_at);",
    /* 5: groups and rate limits (core/fetch.h): every waiting job is in
     * one of two indexes, those without a group in fetch order, those with
     * one by group, then fetch order; active ones by group for group
     * limits; the rate limits' state of queues and of their groups */
    "DROP INDEX jobs_waiting;"
    "CREATE INDEX jobs_waiting ON jobs(queue, priority DESC, run_at, seq)"
    " WHERE state = 1 AND grp IS NULL;"
    "CREATE INDEX jobs_grouped ON jobs(queue, grp, priority DESC, run_at, seq)"
    " WHERE state = 1 AND grp IS NOT NULL;"
    "CREATE INDEX jobs_group_active ON jobs(queue, grp) WHERE state = 2 AND grp IS NOT NULL;"
    "ALTER TABLE queues ADD COLUMN rate_tat INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE group_rates ("
    " queue TEXT NOT NULL,"
    " grp TEXT NOT NULL,"
    " tat INTEGER NOT NULL,"
    " PRIMARY KEY (queue, grp)"
    ") WITHOUT ROWID;"
    "CREATE INDEX group_rates_tat ON group_rates(tat);",
    /* 6: dashboard sessions (by the SHA-256 of their id) and the audit log */
    "CREATE TABLE sessions ("
    " hash TEXT PRIMARY KEY,"
    " role INTEGER NOT NULL,"
    " name TEXT NOT NULL,"
    " csrf TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE INDEX sessions_expires ON sessions(expires_at);"
    "CREATE TABLE audit ("
    " seq INTEGER PRIMARY KEY,"
    " at INTEGER NOT NULL,"
    " who TEXT NOT NULL,"
    " action TEXT NOT NULL,"
    " target TEXT,"
    " count INTEGER NOT NULL);"
    "CREATE INDEX audit_at ON audit(at);",
    /* 7: a Faktory job's custom object (docs/faktory.md) */
    "ALTER TABLE jobs ADD COLUMN custom TEXT;",
    /* 8: the Faktory worker registry, shared by the servers of a store
     * (docs/faktory.md, "Workers") */
    "CREATE TABLE workers ("
    " wid TEXT PRIMARY KEY,"
    " hostname TEXT NOT NULL,"
    " node TEXT NOT NULL,"
    " current_state TEXT NOT NULL,"
    " labels TEXT,"
    " pid INTEGER NOT NULL,"
    " v INTEGER NOT NULL,"
    " rss_kb INTEGER NOT NULL,"
    " started_at INTEGER NOT NULL,"
    " last_beat INTEGER NOT NULL,"
    " state INTEGER NOT NULL DEFAULT 0"
    ") WITHOUT ROWID;"
    "CREATE INDEX workers_beat ON workers(last_beat);"
    "CREATE INDEX workers_signalled ON workers(wid) WHERE state <> 0;",
    /* 9: a Faktory unique job's lock token, kept with the job so an ACK on
     * any server, or after a restart, gives the lock back (docs/faktory.md) */
    "ALTER TABLE jobs ADD COLUMN unique_token TEXT;",
};

const int er_sqlite_schema_version =
    (int)(sizeof er_sqlite_migrations / sizeof er_sqlite_migrations[0]);

/* What each step does, as `errand migrate` lists it: one entry per step,
 * appended with it. */
const char *const er_sqlite_migration_names[] = {
    "jobs and queues",
    "schedulers, run-once leases and cursors",
    "the queue-state index leaves out active jobs",
    "tombstones of deleted jobs' ids",
    "groups and rate limits",
    "dashboard sessions and the audit log",
    "a Faktory job's custom object",
    "the Faktory worker registry",
    "a Faktory unique job's lock token",
};
_Static_assert(sizeof er_sqlite_migration_names / sizeof er_sqlite_migration_names[0] ==
                   sizeof er_sqlite_migrations / sizeof er_sqlite_migrations[0],
               "every SQLite migration has a name");

/* Every job SELECT/RETURNING lists the job row (store/job_row.h) and then
 * seq (ER_SQ_COL_SEQ): er_sqlite_row_job reads them in that order. */
#define COLS ER_JOB_ROW_NAMES ", seq"
/* The columns an insert sets: the job row, in ER_SQ_INSERT_JOB's order and
 * er_newjobs' column order. */
#define INSERT_COLS ER_JOB_ROW_NAMES
#define QMARK_(c, k, st, pt, m) "?, "
#define QMARK_LAST_(c, k, st, pt, m) "?"

#define CLEAR_LEASE "lease_owner = NULL, lease_token = NULL, lease_expires_at = 0"

/* What a retention DELETE returns: a tombstone's columns (admin.c) */
#define RET_RETURNING " RETURNING id, queue, state, finished_at, set_flags"

/* A fetch: leasing the rows its subquery picks (er_token(): a secret lease
 * token per row, er_secure_token), returning only what the lease view and
 * the fetch order need (jobs.c fills the columns it set itself). */
#define LEASE_SET                                                                         \
    "UPDATE jobs SET state = 2, attempts = attempts + 1, started = started + 1,"          \
    " lease_owner = ?1, lease_token = er_token(), lease_expires_at = ?2,"                 \
    " started_at = ?3, updated_at = ?3"
#define LEASE_RETURNING                                                                   \
    " RETURNING id, queue, name, payload, priority, grp, run_at, max_attempts,"           \
    " timeout_ms, trace_id, idempotency_key, attempts, started, lease_token, created_at,"    \
    " custom, unique_token, set_flags, seq"

/* A job row's own bytes by er_job_reply_bytes' rule (core/job.h
 * er_job_lease_fixed_bytes says which columns): its JSON texts, twice its
 * short strings, in bytes (a BLOB's length), NULL as 0. */
#define OCTETS(c) "ifnull(length(CAST(" c " AS BLOB)), 0)"
#define ROW_BYTES                                                                          \
    "(" OCTETS("payload") " + " OCTETS("result") " + " OCTETS("last_error") " + "          \
    OCTETS("progress") " + " OCTETS("custom") " + 2 * (" OCTETS("id") " + " OCTETS("queue") \
    " + " OCTETS("name") " + " OCTETS("grp") " + " OCTETS("trace_id") " + "                \
    OCTETS("idempotency_key") "))"

const char *const er_sqlite_sql[ER_SQ_NSTMT] = {
    [ER_SQ_BEGIN] = "BEGIN IMMEDIATE",
    [ER_SQ_COMMIT] = "COMMIT",
    [ER_SQ_ROLLBACK] = "ROLLBACK",
    /* ?s number themselves 1..ER_JOB_NCOLS in er_job_cols' order */
    [ER_SQ_INSERT_JOB] = "INSERT INTO jobs (" INSERT_COLS ") VALUES ("
                         ER_JOB_ROW(QMARK_, QMARK_LAST_) ") ON CONFLICT(id) DO NOTHING",
    /* er_newjobs: the jobs of the enqueue_many call running (batch.c), in
     * order. OR IGNORE (no constraint can abort it) spares the statement
     * journal; the rows it skipped are found after (jobs.c). */
    [ER_SQ_INSERT_MANY] =
        "INSERT OR IGNORE INTO jobs (" INSERT_COLS ") SELECT " INSERT_COLS " FROM er_newjobs",
    [ER_SQ_JOB_SEQ] = "SELECT seq FROM jobs WHERE id = ?1",
    [ER_SQ_GET_JOB] = "SELECT " COLS " FROM jobs WHERE id = ?1",
    [ER_SQ_LEASE_STATE] = "SELECT state, lease_token FROM jobs WHERE id = ?1",
    [ER_SQ_QUEUE_REGISTER] = "INSERT INTO queues (name) VALUES (?1) ON CONFLICT(name) DO NOTHING",
    [ER_SQ_QUEUE_GET] =
        "SELECT settings, paused, throttled_until, rate_tat FROM queues WHERE name = ?1",
    [ER_SQ_QUEUE_RATE] = "INSERT INTO queues (name, rate_tat) VALUES (?1, ?2) ON CONFLICT(name)"
                         " DO UPDATE SET rate_tat = excluded.rate_tat",
    /* groups (core/fetch.h er_fetch_rows): "" is the jobs without one */
    [ER_SQ_ANY_GROUPED] = "SELECT 1 FROM jobs INDEXED BY jobs_grouped WHERE queue = ?1"
                          " AND state = 1 AND grp IS NOT NULL LIMIT 1",
    [ER_SQ_ANY_UNGROUPED] = "SELECT 1 FROM jobs INDEXED BY jobs_waiting WHERE queue = ?1"
                            " AND state = 1 AND grp IS NULL LIMIT 1",
    [ER_SQ_NEXT_GROUP] = "SELECT grp FROM jobs INDEXED BY jobs_grouped WHERE queue = ?1"
                         " AND state = 1 AND grp IS NOT NULL AND grp > ?2 ORDER BY grp LIMIT 1",
    [ER_SQ_GROUP_ACTIVE] = "SELECT count(*) FROM jobs INDEXED BY jobs_group_active"
                           " WHERE queue = ?1 AND grp IS NOT NULL AND grp = ?2 AND state = 2",
    [ER_SQ_GROUPED_ACTIVE] = "SELECT count(*) FROM jobs INDEXED BY jobs_group_active"
                             " WHERE queue = ?1 AND grp IS NOT NULL AND state = 2",
    [ER_SQ_GROUP_TAT] = "SELECT tat FROM group_rates WHERE queue = ?1 AND grp = ?2",
    /* ?2: a JSON array of group names; ?3, ?4: whether to count active jobs,
     * to read rate states */
    [ER_SQ_GROUP_ROOMS] =
        "SELECT j.key, CASE WHEN ?3 THEN (SELECT count(*) FROM jobs INDEXED BY jobs_group_active"
        " WHERE queue = ?1 AND grp IS NOT NULL AND grp = j.value AND state = 2) ELSE 0 END,"
        " CASE WHEN ?4 THEN coalesce((SELECT tat FROM group_rates WHERE queue = ?1"
        " AND grp = j.value), 0) ELSE 0 END FROM json_each(?2) AS j",
    /* ?2: a JSON array of [group, tat] */
    [ER_SQ_GROUP_TATS_PUT] =
        "INSERT INTO group_rates (queue, grp, tat) SELECT ?1, json_extract(value, '$[0]'),"
        " json_extract(value, '$[1]') FROM json_each(?2) WHERE true"
        " ON CONFLICT(queue, grp) DO UPDATE SET tat = excluded.tat",
    /* a rate state in the past is the same as none */
    [ER_SQ_GROUP_TAT_CLEAN] = "DELETE FROM group_rates WHERE tat < ?1",
    [ER_SQ_LEVEL_GROUPED] = "SELECT priority, run_at FROM jobs INDEXED BY jobs_grouped"
                            " WHERE queue = ?1 AND state = 1 AND grp IS NOT NULL AND grp = ?2"
                            " AND priority < ?3 ORDER BY priority DESC, run_at, seq LIMIT 1",
    [ER_SQ_LEVEL_UNGROUPED] = "SELECT priority, run_at FROM jobs INDEXED BY jobs_waiting"
                              " WHERE queue = ?1 AND state = 1 AND grp IS NULL"
                              " AND priority < ?3 ORDER BY priority DESC, run_at, seq LIMIT 1",
    [ER_SQ_QUEUE_PUT] = "INSERT INTO queues (name, settings, paused) VALUES (?1, ?2, ?3)"
                        " ON CONFLICT(name) DO UPDATE SET settings = excluded.settings,"
                        " paused = excluded.paused",
    [ER_SQ_QUEUE_THROTTLE] =
        "INSERT INTO queues (name, throttled_until) VALUES (?1, ?2) ON CONFLICT(name)"
        " DO UPDATE SET throttled_until = max(throttled_until, excluded.throttled_until)",
    [ER_SQ_QUEUE_UNTHROTTLE] = "UPDATE queues SET throttled_until = 0 WHERE name = ?1",
    [ER_SQ_QUEUE_ALL] = "SELECT name, settings, paused, throttled_until FROM queues ORDER BY name",
    /* O(active jobs of every queue): jobs_queue_state has no active jobs */
    [ER_SQ_COUNT_ACTIVE] = "SELECT count(*) FROM jobs INDEXED BY jobs_active"
                           " WHERE queue = ?1 AND state = 2",
    /* a queue with no grouped waiting job (er_fetch_grouped) */
    [ER_SQ_FETCH] = LEASE_SET
                    " WHERE seq IN (SELECT seq FROM jobs WHERE queue = ?4 AND state = 1"
                    " AND grp IS NULL"
                    " ORDER BY priority DESC, run_at, seq LIMIT ?5)"
                    LEASE_RETURNING,
    /* ER_SQ_FETCH under the reply budget (er_fetch_params.max_bytes): ?8
     * the fixed bytes of a leased job (er_job_lease_fixed_bytes), ?9 the
     * bytes used, ?10 the budget; a candidate is leased while ?9 + the
     * running total stays within ?10, the first one also when ?9 is 0.
     * The running total sorts the candidates (at most ?5 rows) once more. */
    [ER_SQ_FETCH_BUDGET] = LEASE_SET
                    " WHERE seq IN (SELECT seq FROM (SELECT seq, sum(sz + ?8) OVER w AS run,"
                    " row_number() OVER w AS k FROM (SELECT seq, priority, run_at, " ROW_BYTES
                    " AS sz FROM jobs WHERE queue = ?4 AND state = 1 AND grp IS NULL"
                    " ORDER BY priority DESC, run_at, seq LIMIT ?5)"
                    " WINDOW w AS (ORDER BY priority DESC, run_at, seq ROWS UNBOUNDED PRECEDING))"
                    " WHERE ?9 + run <= ?10 OR (k = 1 AND ?9 = 0))"
                    LEASE_RETURNING,
    [ER_SQ_FETCH_GROUP_AT] = LEASE_SET
                    " WHERE seq IN (SELECT seq FROM jobs INDEXED BY jobs_grouped WHERE queue = ?4"
                    " AND state = 1 AND grp IS NOT NULL AND grp = ?6 AND priority = ?7"
                    " ORDER BY priority DESC, run_at, seq LIMIT ?5)"
                    LEASE_RETURNING,
    [ER_SQ_FETCH_UNGROUPED_AT] = LEASE_SET
                    " WHERE seq IN (SELECT seq FROM jobs INDEXED BY jobs_waiting WHERE queue = ?4"
                    " AND state = 1 AND grp IS NULL AND priority = ?7"
                    " ORDER BY priority DESC, run_at, seq LIMIT ?5)"
                    LEASE_RETURNING,
    /* the group planner's picks (jobs.c), leased at once: ?6 a JSON array of seqs */
    [ER_SQ_PICK_GROUP] = "SELECT seq FROM jobs INDEXED BY jobs_grouped WHERE queue = ?1"
                         " AND state = 1 AND grp IS NOT NULL AND grp = ?2"
                         " ORDER BY priority DESC, run_at, seq LIMIT ?3",
    [ER_SQ_PICK_UNGROUPED] = "SELECT seq FROM jobs INDEXED BY jobs_waiting WHERE queue = ?1"
                             " AND state = 1 AND grp IS NULL AND ?2 IS NULL"
                             " ORDER BY priority DESC, run_at, seq LIMIT ?3",
    [ER_SQ_LEASE_SEQS] = LEASE_SET " WHERE seq IN (SELECT value FROM json_each(?6))"
                         " AND state = 1" LEASE_RETURNING,
    [ER_SQ_HEARTBEAT] = "UPDATE jobs SET lease_expires_at = ?1, progress = coalesce(?2, progress),"
                        " updated_at = ?3 WHERE id = ?4 AND state = 2 AND lease_token = ?5",
    [ER_SQ_COMPLETE] = "UPDATE jobs SET state = 3, result = ?1, finished_at = ?2, updated_at = ?2, "
                       CLEAR_LEASE " WHERE id = ?3 AND state = 2 AND lease_token = ?4"
                       " RETURNING queue, name, trace_id, attempts, run_at, started_at,"
                       " unique_token",
    /* er_acks: the items of the complete_many call running (batch.c) */
    [ER_SQ_COMPLETE_MANY] = "UPDATE jobs SET state = 3, result = a.result, finished_at = ?1,"
                            " updated_at = ?1, " CLEAR_LEASE " FROM er_acks AS a"
                            " WHERE jobs.id = a.id AND jobs.state = 2"
                            " AND jobs.lease_token = a.token"
                            " RETURNING id, queue, name, trace_id, attempts, run_at, started_at,"
                            " unique_token",
    [ER_SQ_SAVEPOINT] = "SAVEPOINT er_batch",
    [ER_SQ_SAVEPOINT_RELEASE] = "RELEASE er_batch",
    [ER_SQ_SAVEPOINT_UNDO] = "ROLLBACK TO er_batch",
    [ER_SQ_RELEASE] = "UPDATE jobs SET state = 1, attempts = max(attempts - 1, 0),"
                      " updated_at = ?1, " CLEAR_LEASE
                      " WHERE id = ?2 AND state = 2 AND lease_token = ?3",
    [ER_SQ_FAIL_APPLY] = "UPDATE jobs SET state = ?1, run_at = ?2, attempts = ?3, last_error = ?4,"
                         " updated_at = ?5, finished_at = ?6, " CLEAR_LEASE " WHERE id = ?7",
    [ER_SQ_CANCEL] = "UPDATE jobs SET state = 5, finished_at = ?1, updated_at = ?1"
                     " WHERE id = ?2 AND state IN (0, 1) RETURNING " COLS,
    /* ?1 now, ?2 id, ?3 last_error: NULL to waiting now, else to dead */
    [ER_SQ_MOVE_SCHEDULED] = "UPDATE jobs SET state = CASE WHEN ?3 IS NULL THEN 1 ELSE 4 END,"
                             " run_at = CASE WHEN ?3 IS NULL THEN ?1 ELSE run_at END,"
                             " finished_at = CASE WHEN ?3 IS NULL THEN finished_at ELSE ?1 END,"
                             " last_error = coalesce(?3, last_error), updated_at = ?1"
                             " WHERE id = ?2 AND state = 0 RETURNING queue",
    /* any state but active (ER_SQ_LIST_ACTIVE); "state <> 2" lets it use
     * the partial jobs_queue_state */
    [ER_SQ_LIST_JOBS] = "SELECT " COLS " FROM jobs WHERE queue = ?1 AND state = ?2 AND state <> 2"
                        " AND seq > ?3"
                        " ORDER BY seq LIMIT ?4",
    /* reads every active job and sorts a queue's: active jobs are only the
     * leased ones */
    [ER_SQ_LIST_ACTIVE] = "SELECT " COLS " FROM jobs INDEXED BY jobs_active"
                          " WHERE queue = ?1 AND state = 2 AND seq > ?3 ORDER BY seq LIMIT ?4",
    [ER_SQ_COUNTS] = "SELECT queue, state, count(*) FROM jobs WHERE state <> 2"
                     " GROUP BY queue, state UNION ALL SELECT queue, 2, count(*)"
                     " FROM jobs INDEXED BY jobs_active WHERE state = 2 GROUP BY queue",
    /* through the two waiting indexes: without them, a queue of many
     * waiting jobs costs a lookup of each row */
    [ER_SQ_OLDEST_WAITING] = "SELECT min(r) FROM (SELECT min(run_at) AS r FROM jobs"
                             " INDEXED BY jobs_waiting WHERE queue = ?1 AND state = 1"
                             " AND grp IS NULL UNION ALL SELECT min(run_at) FROM jobs"
                             " INDEXED BY jobs_grouped WHERE queue = ?1 AND state = 1"
                             " AND grp IS NOT NULL)",
    [ER_SQ_LIST_DEAD] = "SELECT " COLS " FROM jobs WHERE state = 4 AND (finished_at, seq) < (?1, ?2)"
                        " ORDER BY finished_at DESC, seq DESC LIMIT ?3",
    [ER_SQ_LIST_DEAD_QUEUE] = "SELECT " COLS " FROM jobs WHERE state = 4 AND queue = ?4"
                              " AND (finished_at, seq) < (?1, ?2)"
                              " ORDER BY finished_at DESC, seq DESC LIMIT ?3",
    [ER_SQ_REDRIVE_MARK] = "UPDATE jobs SET redriven_at = ?1, redrive_count = ?2, updated_at = ?1"
                           " WHERE id = ?3",
    [ER_SQ_DELETE_DEAD] = "DELETE FROM jobs WHERE id = ?1 AND state = 4",
    [ER_SQ_SESSION_PUT] = "INSERT INTO sessions (hash, role, name, csrf, created_at, expires_at)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ER_SQ_SESSION_TOUCH] = "UPDATE sessions SET expires_at = ?3 WHERE hash = ?1 AND expires_at > ?2"
                            " RETURNING role, name, csrf, created_at, expires_at",
    [ER_SQ_SESSION_DELETE] = "DELETE FROM sessions WHERE hash = ?1",
    [ER_SQ_SESSION_SWEEP] = "DELETE FROM sessions WHERE hash IN (SELECT hash FROM sessions"
                            " WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)",
    [ER_SQ_AUDIT_ADD] = "INSERT INTO audit (at, who, action, target, count)"
                        " VALUES (?1, ?2, ?3, ?4, ?5) RETURNING seq",
    [ER_SQ_AUDIT_LIST] = "SELECT seq, at, who, action, target, count FROM audit WHERE seq < ?1"
                         " ORDER BY seq DESC LIMIT ?2",
    /* ?1 state, ?2 queue (the _QUEUE forms) or NULL, ?3 name or NULL, ?4
     * only never redriven, ?5 er_bulk_tries; with a queue, "state <> 2"
     * (never a bulk action's) lets them use jobs_queue_state */
#define BULK_WHERE                                                                              \
    " AND (?3 IS NULL OR name = ?3) AND (?4 = 0 OR redriven_at = 0)"                             \
    " AND (?5 = 0 OR (?5 = 1) = (attempts > 0))"
    [ER_SQ_BULK_IDS] = "SELECT id, seq FROM jobs WHERE state = ?1 AND ?2 IS NULL" BULK_WHERE
                       " AND seq > ?6 ORDER BY seq LIMIT ?7",
    [ER_SQ_BULK_IDS_QUEUE] = "SELECT id, seq FROM jobs WHERE queue = ?2 AND state = ?1"
                             " AND state <> 2" BULK_WHERE " AND seq > ?6 ORDER BY seq LIMIT ?7",
    [ER_SQ_BULK_COUNT] = "SELECT count(*) FROM jobs WHERE state = ?1 AND ?2 IS NULL" BULK_WHERE,
    [ER_SQ_BULK_COUNT_QUEUE] = "SELECT count(*) FROM jobs WHERE queue = ?2 AND state = ?1"
                               " AND state <> 2" BULK_WHERE,
#undef BULK_WHERE
    [ER_SQ_AUDIT_SWEEP] = "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE at < ?1"
                          " ORDER BY at LIMIT ?2)",
    [ER_SQ_PROMOTE] = "UPDATE jobs SET state = 1, updated_at = ?1"
                      " WHERE seq IN (SELECT seq FROM jobs WHERE state = 0 AND run_at <= ?1"
                      " ORDER BY run_at LIMIT ?2) RETURNING queue",
    [ER_SQ_REAP_SELECT] = "SELECT " COLS " FROM jobs WHERE state = 2 AND lease_expires_at <= ?1"
                          " ORDER BY lease_expires_at LIMIT ?2",
    [ER_SQ_REAP_APPLY] = "UPDATE jobs SET state = ?1, stalled = stalled + 1,"
                         " last_error = coalesce(?2, last_error), finished_at = ?3,"
                         " updated_at = ?4, " CLEAR_LEASE " WHERE seq = ?5",
    [ER_SQ_RET_COMPLETED_AGE] = "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs"
                                " WHERE state = 3 AND queue = ?1 AND finished_at < ?2"
                                " ORDER BY finished_at LIMIT ?3)" RET_RETURNING,
    [ER_SQ_RET_COMPLETED_COUNT] = "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs"
                                  " WHERE state = 3 AND queue = ?1"
                                  " ORDER BY finished_at DESC LIMIT ?3 OFFSET ?2)"
                                  RET_RETURNING,
    [ER_SQ_RET_DEAD_AGE] = "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs"
                           " WHERE state = 4 AND queue = ?1 AND finished_at < ?2"
                           " ORDER BY finished_at LIMIT ?3)" RET_RETURNING,
    [ER_SQ_NEXT_SCHEDULED] = "SELECT run_at FROM jobs WHERE state = 0 ORDER BY run_at LIMIT 1",
    [ER_SQ_NEXT_LEASE] =
        "SELECT lease_expires_at FROM jobs WHERE state = 2 ORDER BY lease_expires_at LIMIT 1",
    [ER_SQ_DATA_VERSION] = "PRAGMA data_version",
    /* ?2: the oldest finished_at still within the dedup window, minus 1 */
    [ER_SQ_TOMB_GET] = "SELECT queue, state, finished_at FROM tombstones"
                       " WHERE id = ?1 AND finished_at > ?2",
    /* the batch's client ids (set_flags 256: generated) a tombstone
     * remembers, by position; CROSS JOIN keeps it one probe per job */
    [ER_SQ_TOMB_MANY] = "SELECT n.rowid, t.queue, t.state, t.finished_at FROM er_newjobs AS n"
                        " CROSS JOIN tombstones AS t ON t.id = n.id"
                        " WHERE n.set_flags & 256 = 0 AND t.finished_at > ?1"
                        " AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = t.id)",
    [ER_SQ_TOMB_ANY] = "SELECT 1 FROM tombstones LIMIT 1",
    [ER_SQ_TOMB_PUT] = "INSERT INTO tombstones (id, queue, state, finished_at)"
                       " VALUES (?1, ?2, ?3, ?4) ON CONFLICT(id) DO UPDATE SET"
                       " queue = excluded.queue, state = excluded.state,"
                       " finished_at = excluded.finished_at",
    [ER_SQ_TOMB_CLEAN] = "DELETE FROM tombstones WHERE id IN (SELECT id FROM tombstones"
                         " WHERE finished_at <= ?1 ORDER BY finished_at LIMIT ?2)",
    /* schedulers, leases, cursors (sched.c) */
#define SCHED_COLS "key, spec, created_at, updated_at, last_tick, next_run_at"
    [ER_SQ_SCHED_GET] = "SELECT " SCHED_COLS " FROM schedulers WHERE key = ?1",
    [ER_SQ_SCHED_PUT] = "INSERT INTO schedulers (" SCHED_COLS ") VALUES (?1, ?2, ?3, ?3, 0, ?4)"
                        " ON CONFLICT(key) DO UPDATE SET spec = excluded.spec,"
                        " updated_at = excluded.updated_at, next_run_at = excluded.next_run_at",
    [ER_SQ_SCHED_LIST] = "SELECT " SCHED_COLS " FROM schedulers WHERE key > ?1 ORDER BY key"
                         " LIMIT ?2",
    [ER_SQ_SCHED_DELETE] = "DELETE FROM schedulers WHERE key = ?1",
    [ER_SQ_SCHED_DUE] = "SELECT " SCHED_COLS " FROM schedulers WHERE next_run_at <= ?1"
                        " ORDER BY next_run_at LIMIT ?2",
    [ER_SQ_SCHED_ADVANCE] = "UPDATE schedulers SET last_tick = CASE WHEN ?2 > 0 THEN ?2"
                            " ELSE last_tick END, next_run_at = ?3"
                            " WHERE key = ?1 AND next_run_at = ?4",
#undef SCHED_COLS
#define LEASE_COLS "key, state, owner_token, fence, expires_at, completed_at"
    [ER_SQ_LEASE_GET] = "SELECT " LEASE_COLS " FROM leases WHERE key = ?1",
    [ER_SQ_LEASE_BY_TOKEN] = "SELECT " LEASE_COLS " FROM leases WHERE owner_token = ?1",
#undef LEASE_COLS
    [ER_SQ_LEASE_PUT] =
        "INSERT INTO leases (key, type, code, run_key, state, owner_token, fence, expires_at,"
        " completed_at, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
        " ?10, ?10) ON CONFLICT(key) DO UPDATE SET state = excluded.state,"
        " owner_token = excluded.owner_token, fence = excluded.fence,"
        " expires_at = excluded.expires_at, completed_at = excluded.completed_at,"
        " updated_at = excluded.updated_at WHERE leases.fence = ?11",
    [ER_SQ_CURSOR_GET] = "SELECT value, updated_at FROM cursors WHERE name = ?1",
    [ER_SQ_CURSOR_PUT] = "INSERT INTO cursors (name, value, updated_at) VALUES (?1, ?2, ?3)"
                         " ON CONFLICT(name) DO UPDATE SET value = excluded.value,"
                         " updated_at = excluded.updated_at",
    /* inspection lists; never the owner token (a secret) */
    [ER_SQ_LEASE_LIST] = "SELECT key, state, fence, expires_at, completed_at, type, code, run_key,"
                         " created_at, updated_at FROM leases WHERE key > ?1 ORDER BY key"
                         " LIMIT ?2",
    /* the Faktory worker registry (workers.c) */
#define WORKER_COLS "wid, hostname, node, current_state, labels, pid, v, rss_kb, started_at,"   \
                    " last_beat, state"
    [ER_SQ_WORKER_BEAT] = "INSERT INTO workers (" WORKER_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
                          " ?7, ?8, ?9, ?10, 0) ON CONFLICT(wid) DO UPDATE SET"
                          " hostname = excluded.hostname, node = excluded.node,"
                          " current_state = excluded.current_state, labels = excluded.labels,"
                          " pid = excluded.pid, v = excluded.v, rss_kb = excluded.rss_kb,"
                          " last_beat = excluded.last_beat"
                          " WHERE excluded.last_beat >= workers.last_beat",
    [ER_SQ_WORKER_SIGNAL] = "UPDATE workers SET state = max(state, ?2) WHERE wid = ?1"
                            " AND last_beat > ?3 RETURNING " WORKER_COLS,
    [ER_SQ_WORKER_GET] = "SELECT " WORKER_COLS " FROM workers WHERE wid = ?1",
    [ER_SQ_WORKER_LIST] = "SELECT " WORKER_COLS " FROM workers WHERE last_beat > ?1"
                          " AND wid > ?2 ORDER BY wid LIMIT ?3",
    [ER_SQ_WORKER_LIST_SIGNALLED] = "SELECT " WORKER_COLS " FROM workers"
                                    " INDEXED BY workers_signalled WHERE state <> 0"
                                    " AND last_beat > ?1 AND wid > ?2 ORDER BY wid LIMIT ?3",
    [ER_SQ_WORKER_REAP] = "DELETE FROM workers WHERE wid IN (SELECT wid FROM workers"
                          " WHERE last_beat < ?1 ORDER BY last_beat LIMIT ?2)",
    [ER_SQ_WORKER_COUNT] = "SELECT count(*) FROM workers WHERE last_beat > ?1",
#undef WORKER_COLS
    [ER_SQ_CURSOR_LIST] = "SELECT name, value, updated_at FROM cursors WHERE name > ?1"
                          " ORDER BY name LIMIT ?2",
};
