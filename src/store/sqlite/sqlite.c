/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's connection: open (pragmas, WAL settings, the batch
 * tables, migrations), close, the statement cache, the mapping of SQLite
 * result codes to ER_E* codes, and the store's function table.
 * Transactions and checkpoints are in txn.c, the queue-settings cache in
 * queue_cache.c, rows in rows.c, the batch virtual tables in batch.c. One
 * er_store is one connection used by one thread at a time; it never aborts
 * on an I/O error, it reports it and lets the caller roll back.
 */
#include "store/sqlite/sqlite_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BUSY_TIMEOUT_DEFAULT_MS 5000
/* The WAL is truncated back to this size after a checkpoint resets it, so
 * it is overwritten in place instead of re-grown (extending a file makes
 * each fsync cost far more than overwriting). */
#define WAL_SIZE_LIMIT (64LL * 1024 * 1024)
/* Checkpoints are kept out of commits: once the log holds this many
 * frames, the engine's upkeep thread runs one on its own connection
 * (er_sqlite_checkpoint_due, txn.c); a commit checkpoints itself, as
 * SQLite's autocheckpoint would, only past WAL_BACKSTOP times as many (a
 * connection whose user never calls checkpoint). The threshold is set and
 * read back as the wal_autocheckpoint pragma, so a test VFS can lower it. */
#define WAL_CHECKPOINT_FRAMES 4000
/* The database file grows in chunks of this size. */
#define DB_CHUNK_SIZE (4 * 1024 * 1024)

int er_sqlite_error(sqlite3 *db, int rc, const char *what, er_error *err)
{
    int code;
    switch (rc & 0xff) {
    case SQLITE_FULL:
        code = ER_EFULL;
        break;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_READONLY:
    case SQLITE_PROTOCOL:
        code = ER_EUNAVAIL;
        break;
    case SQLITE_NOMEM:
        code = ER_ENOMEM;
        break;
    case SQLITE_CONSTRAINT:
        code = ER_ECONFLICT;
        break;
    default:
        code = ER_EINTERNAL;
        break;
    }
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return er_error_set(err, code, "", "store: %s: %s (sqlite %d)", what, msg, rc);
}

sqlite3 *er_sqlite_handle(er_store *s)
{
    return s->db;
}

int er_sqlite_prep(er_store *s, int id, sqlite3_stmt **st, er_error *err)
{
    if (!s->st[id]) {
        int rc = sqlite3_prepare_v3(s->db, er_sqlite_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                    &s->st[id], NULL);
        if (rc != SQLITE_OK) {
            s->st[id] = NULL;
            return er_sqlite_error(s->db, rc, "prepare", err);
        }
    }
    *st = s->st[id];
    return 0;
}

int er_sqlite_run(er_store *s, sqlite3_stmt *st, er_error *err)
{
    int rc = sqlite3_step(st);
    int ret = 0;
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        ret = er_sqlite_error(s->db, rc, "write", err);
    sqlite3_reset(st);
    return ret;
}

/* ---- open / close ---- */

/* Runs a pragma (or any statement) and returns its first text column in
 * buf when given. */
static int pragma(er_store *s, const char *sql, char *buf, size_t bufsz, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return er_sqlite_error(s->db, rc, sql, err);
    if (buf && bufsz)
        buf[0] = '\0';
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (buf && bufsz && t && !buf[0])
            snprintf(buf, bufsz, "%s", (const char *)t);
    }
    int ret = rc == SQLITE_DONE ? 0 : er_sqlite_error(s->db, rc, sql, err);
    sqlite3_finalize(st);
    return ret;
}

/* Applies the pending migrations in one transaction (or, with
 * ER_MIGRATE_REFUSE, fails when any is pending); *from gets the version
 * found. */
static int migrate(er_store *s, er_migrate_mode mode, int *from, er_error *err)
{
    int rc = pragma(s, "BEGIN IMMEDIATE", NULL, 0, err);
    if (rc < 0)
        return rc;
    rc = pragma(s, "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"
                   " WITHOUT ROWID", NULL, 0, err);
    char buf[32];
    if (rc == 0)
        rc = pragma(s, "SELECT value FROM meta WHERE key = 'schema_version'", buf, sizeof buf,
                    err);
    int version = rc == 0 && buf[0] ? (int)strtol(buf, NULL, 10) : 0;
    if (rc == 0 && version > er_sqlite_schema_version)
        rc = er_error_set(err, ER_EINVAL, "store",
                          "store schema version %d is newer than this errand supports (%d)",
                          version, er_sqlite_schema_version);
    if (rc == 0 && mode == ER_MIGRATE_REFUSE && version < er_sqlite_schema_version)
        rc = er_error_set(err, ER_EUNAVAIL, "schema_version",
                          "store schema version %d is older than this errand's (%d)", version,
                          er_sqlite_schema_version);
    *from = version;
    for (int v = version; rc == 0 && v < er_sqlite_schema_version; v++) {
        char *msg = NULL;
        int src = sqlite3_exec(s->db, er_sqlite_migrations[v], NULL, NULL, &msg);
        sqlite3_free(msg);
        if (src != SQLITE_OK)
            rc = er_sqlite_error(s->db, src, "migration", err);
    }
    if (rc == 0 && version < er_sqlite_schema_version) {
        char sql[96];
        snprintf(sql, sizeof sql,
                 "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', %d)",
                 er_sqlite_schema_version);
        rc = pragma(s, sql, NULL, 0, err);
    }
    if (rc == 0)
        rc = pragma(s, "COMMIT", NULL, 0, err);
    if (rc < 0 && !sqlite3_get_autocommit(s->db))
        (void)pragma(s, "ROLLBACK", NULL, 0, NULL);
    return rc;
}

static _Atomic int64_t g_open; /* SQLite connections open in this process */

static void sq_close(er_store *s)
{
    if (!s)
        return;
    for (int i = 0; i < ER_SQ_NSTMT; i++)
        sqlite3_finalize(s->st[i]);
    er_sqlite_queue_cache_clear(s);
    free(s->qc);
    er_sqlite_rr_clear(s);
    free(s->rr);
    if (s->db)
        atomic_fetch_sub(&g_open, 1);
    sqlite3_close(s->db); /* rolls back an open transaction */
    free(s);
}

static int64_t sq_connections(void)
{
    return atomic_load(&g_open);
}

static void global_init_once(void)
{
    /* false when SQLite is initialized already: then its own cache serves */
    (void)er_sqlite_pcache_install();
    /* SQLITE_MISUSE when SQLite is initialized already: the statistics then
     * stay on, which costs time but nothing else */
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    /* on failure (no default VFS) every open names a VFS that is missing */
    (void)er_sqlite_vfs_register(ER_SQLITE_VFS, NULL);
}

void er_sqlite_global_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, global_init_once);
}

/* `url` is a file path, or a SQLite URI ("file:PATH?vfs=NAME", used by the
 * fault tests) since the file is opened with SQLITE_OPEN_URI. */
static int open_db(const char *url, const er_store_options *opt, int *from, er_store **out,
                   er_error *err)
{
    *out = NULL;
    *from = 0;
    er_sqlite_global_init();
    struct stat sb;
    if (opt && opt->migrate == ER_MIGRATE_REFUSE && strncmp(url, "file:", 5) != 0 &&
        stat(url, &sb) < 0 && errno == ENOENT) /* not created just to be refused */
        return er_error_set(err, ER_EUNAVAIL, "schema_version",
                            "store schema version 0 (no database yet) is older than this "
                            "errand's (%d)", er_sqlite_schema_version);
    er_store *s = calloc(1, sizeof *s);
    if (!s)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI |
                SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(url, &s->db, flags, ER_SQLITE_VFS);
    if (s->db)
        atomic_fetch_add(&g_open, 1);
    if (rc != SQLITE_OK) {
        rc = s->db ? er_sqlite_error(s->db, rc, "open", err)
                   : er_error_set(err, ER_ENOMEM, "", "out of memory");
        if (err)
            snprintf(err->field, sizeof err->field, "store");
        sq_close(s);
        return rc;
    }
    sqlite3_extended_result_codes(s->db, 1);
    int busy = opt && opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms : BUSY_TIMEOUT_DEFAULT_MS;
    sqlite3_busy_timeout(s->db, busy);
    er_durability dur = opt ? opt->durability : ER_DURABILITY_FULL;
    s->dedup_window_ms = opt ? opt->dedup_window_ms : ER_DEDUP_WINDOW_DEFAULT_MS;
    s->reply_max = opt && opt->reply_max ? opt->reply_max : ER_REPLY_MAX_DEFAULT;

    char mode[16];
    char sql[96];
    rc = pragma(s, "PRAGMA journal_mode = WAL", mode, sizeof mode, err);
    if (rc == 0 && strcmp(mode, "wal") != 0)
        rc = er_error_set(err, ER_EUNAVAIL, "store", "store: cannot use WAL mode (journal_mode %s)",
                          mode);
    if (rc == 0)
        rc = pragma(s,
                    dur == ER_DURABILITY_NORMAL ? "PRAGMA synchronous = NORMAL"
                                                : "PRAGMA synchronous = FULL",
                    NULL, 0, err);
    if (rc == 0) {
        snprintf(sql, sizeof sql, "PRAGMA journal_size_limit = %lld", WAL_SIZE_LIMIT);
        rc = pragma(s, sql, NULL, 0, err);
    }
    if (rc == 0) {
        snprintf(sql, sizeof sql, "PRAGMA wal_autocheckpoint = %d", WAL_CHECKPOINT_FRAMES);
        rc = pragma(s, sql, NULL, 0, err);
    }
    if (rc == 0) {
        char buf[24];
        rc = pragma(s, "PRAGMA wal_autocheckpoint", buf, sizeof buf, err);
        long frames = rc == 0 ? strtol(buf, NULL, 10) : 0;
        s->ckpt_frames = frames > 0 && frames < WAL_CHECKPOINT_FRAMES ? (int)frames
                                                                      : WAL_CHECKPOINT_FRAMES;
        sqlite3_wal_hook(s->db, er_sqlite_wal_hook, s); /* replaces the autocheckpoint */
    }
    if (rc == 0)
        rc = pragma(s, "PRAGMA temp_store = MEMORY", NULL, 0, err);
    if (rc == 0)
        rc = pragma(s, "PRAGMA cache_size = -16384", NULL, 0, err);
    if (rc == 0) {
        int chunk = DB_CHUNK_SIZE;
        (void)sqlite3_file_control(s->db, "main", SQLITE_FCNTL_CHUNK_SIZE, &chunk);
        /* Keep the WAL file across restarts: commits then overwrite blocks
         * (a cheap fsync) instead of growing a new file (a slow one). */
        int persist = 1;
        (void)sqlite3_file_control(s->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
        int frc = er_sqlite_batch_register(s);
        if (frc != SQLITE_OK)
            rc = er_sqlite_error(s->db, frc, "create function", err);
    }
    if (rc == 0)
        rc = migrate(s, opt ? opt->migrate : ER_MIGRATE_AUTO, from, err);
    if (rc < 0) {
        if (err && strcmp(err->field, "schema_version") != 0)
            snprintf(err->field, sizeof err->field, "store");
        sq_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int sq_open(const char *url, const er_store_options *opt, er_store **out, er_error *err)
{
    int from;
    return open_db(url, opt, &from, out, err);
}

/* The version in meta, read on a read-only connection; 0 when the file or
 * the table is absent. */
static int read_version(const char *url, int *version, er_error *err)
{
    *version = 0;
    struct stat sb;
    if (strncmp(url, "file:", 5) != 0 && stat(url, &sb) < 0 && errno == ENOENT)
        return 0;
    sqlite3 *db = NULL;
    int src = sqlite3_open_v2(url, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, ER_SQLITE_VFS);
    sqlite3_stmt *st = NULL;
    if (src == SQLITE_OK) {
        sqlite3_busy_timeout(db, BUSY_TIMEOUT_DEFAULT_MS);
        src = sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM sqlite_master WHERE"
                                     " name = 'meta' AND type = 'table')", -1, &st, NULL);
    }
    bool has_meta = false;
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        has_meta = sqlite3_column_int(st, 0) > 0;
        src = SQLITE_OK;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (src == SQLITE_OK && has_meta)
        src = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1,
                                 &st, NULL);
    if (src == SQLITE_OK && has_meta && (src = sqlite3_step(st)) == SQLITE_ROW) {
        *version = sqlite3_column_int(st, 0);
        src = SQLITE_OK;
    } else if (src == SQLITE_DONE) {
        src = SQLITE_OK;
    }
    sqlite3_finalize(st);
    int rc = src == SQLITE_OK ? 0
             : db         ? er_sqlite_error(db, src, "schema version", err)
                          : er_error_set(err, ER_ENOMEM, "store", "out of memory");
    sqlite3_close(db);
    if (rc < 0 && err)
        snprintf(err->field, sizeof err->field, "store");
    return rc;
}

static int sq_schema(const char *url, const er_store_options *opt, bool apply,
                     er_schema_info *out, er_error *err)
{
    out->latest = er_sqlite_schema_version;
    out->steps = er_sqlite_migration_names;
    er_sqlite_global_init();
    if (!apply) {
        int rc = read_version(url, &out->version, err);
        if (rc == 0 && out->version > er_sqlite_schema_version)
            rc = er_error_set(err, ER_EINVAL, "store",
                              "store schema version %d is newer than this errand supports (%d)",
                              out->version, er_sqlite_schema_version);
        return rc;
    }
    er_store_options o = opt ? *opt : (er_store_options){0};
    o.migrate = ER_MIGRATE_AUTO;
    er_store *s = NULL;
    int rc = open_db(url, &o, &out->version, &s, err);
    sq_close(s);
    return rc;
}

const er_store_ops er_sqlite_ops = {
    .name = "sqlite",
    .schema = sq_schema,
    .open = sq_open,
    .close = sq_close,
    .connections = sq_connections,
    .begin = er_sqlite_begin,
    .commit = er_sqlite_commit,
    .rollback = er_sqlite_rollback,
    .enqueue = er_sqlite_enqueue,
    .enqueue_many = er_sqlite_enqueue_many,
    .fetch = er_sqlite_fetch,
    .heartbeat = er_sqlite_heartbeat,
    .complete = er_sqlite_complete,
    .complete_many = er_sqlite_complete_many,
    .fail = er_sqlite_fail,
    .release = er_sqlite_release,
    .get_job = er_sqlite_get_job,
    .cancel = er_sqlite_cancel,
    .move_scheduled = er_sqlite_move_scheduled,
    .list_jobs = er_sqlite_list_jobs,
    .list_queues = er_sqlite_list_queues,
    .list_queue_settings = er_sqlite_list_queue_settings,
    .get_queue_settings = er_sqlite_get_queue_settings,
    .put_queue_settings = er_sqlite_put_queue_settings,
    .cached_queue_defaults = er_sqlite_cached_queue_defaults,
    .clear_queue_throttle = er_sqlite_clear_queue_throttle,
    .list_dead = er_sqlite_list_dead,
    .redrive = er_sqlite_redrive,
    .delete_dead = er_sqlite_delete_dead,
    .session_put = er_sqlite_session_put,
    .session_touch = er_sqlite_session_touch,
    .session_delete = er_sqlite_session_delete,
    .audit_add = er_sqlite_audit_add,
    .audit_list = er_sqlite_audit_list,
    .ui_sweep = er_sqlite_ui_sweep,
    .worker_beat = er_sqlite_worker_beat,
    .worker_signal = er_sqlite_worker_signal,
    .worker_get = er_sqlite_worker_get,
    .worker_list = er_sqlite_worker_list,
    .worker_reap = er_sqlite_worker_reap,
    .worker_count = er_sqlite_worker_count,
    .bulk_ids = er_sqlite_bulk_ids,
    .bulk_count = er_sqlite_bulk_count,
    .promote = er_sqlite_promote,
    .reap = er_sqlite_reap,
    .retention = er_sqlite_retention,
    .next_due = er_sqlite_next_due,
    .scheduler_put = er_sqlite_scheduler_put,
    .scheduler_get = er_sqlite_scheduler_get,
    .scheduler_list = er_sqlite_scheduler_list,
    .scheduler_delete = er_sqlite_scheduler_delete,
    .scheduler_due = er_sqlite_scheduler_due,
    .scheduler_advance = er_sqlite_scheduler_advance,
    .lease_acquire = er_sqlite_lease_acquire,
    .lease_renew = er_sqlite_lease_renew,
    .lease_complete = er_sqlite_lease_complete,
    .lease_release = er_sqlite_lease_release,
    .cursor_get = er_sqlite_cursor_get,
    .cursor_cas = er_sqlite_cursor_cas,
    .lease_list = er_sqlite_lease_list,
    .cursor_list = er_sqlite_cursor_list,
    .checkpoint_due = er_sqlite_checkpoint_due,
    .checkpoint = er_sqlite_checkpoint,
};
