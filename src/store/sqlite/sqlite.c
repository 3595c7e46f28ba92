/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's connection: open (pragmas, migrations), close,
 * transactions, the statement cache, the queue-settings cache, the mapping
 * of SQLite result codes to ER_E* codes and of rows to er_job. One er_store
 * is one connection used by one thread at a time; it never aborts on an I/O
 * error, it reports it and lets the caller roll back.
 */
#include "store/settings_codec.h"
#include "store/sqlite/sqlite_int.h"
#include "util/buf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUSY_TIMEOUT_DEFAULT_MS 5000
/* The WAL is truncated back to this size after a checkpoint resets it, so
 * it is overwritten in place instead of re-grown (extending a file makes
 * each fsync cost far more than overwriting). */
#define WAL_SIZE_LIMIT (64LL * 1024 * 1024)
/* Checkpoints are kept out of commits: the writer runs one between
 * transactions, after answering its batch, once the log holds this many
 * frames (sq_checkpoint); a commit checkpoints itself, as SQLite's
 * autocheckpoint would, only past BACKSTOP times as many (a connection
 * whose user never calls checkpoint). The threshold is set and read back
 * as the wal_autocheckpoint pragma, so a test VFS can lower it. */
#define WAL_CHECKPOINT_FRAMES 4000
#define WAL_BACKSTOP 4
/* The database file grows in chunks of this size. */
#define DB_CHUNK_SIZE (4 * 1024 * 1024)
#define QUEUE_CACHE_MAX 4096

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

/* A commit whose write or sync failed may leave its frames, commit frame
 * included, on disk past the end of the WAL this process knows: invisible
 * here, but recovery after a crash would find and replay them, and a
 * transaction answered "nothing was written" would come back. Truncating
 * the WAL (after checkpointing what did commit) removes them. */
static int clear_wal(er_store *s, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            rc = sqlite3_column_int(st, 0) == 0 ? SQLITE_OK : SQLITE_BUSY;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK)
        return er_sqlite_error(s->db, rc, "clear the write-ahead log after a failed commit", err);
    s->wal_suspect = false;
    return 0;
}

static int sq_begin(er_store *s, er_error *err)
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

static int sq_commit(er_store *s, er_error *err)
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
static void sq_rollback(er_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        (void)run_id(s, ER_SQ_ROLLBACK, NULL);
    er_sqlite_queue_cache_clear(s);
}

int er_sqlite_op_begin(er_store *s, bool *own, er_error *err)
{
    *own = sqlite3_get_autocommit(s->db) != 0;
    return *own ? sq_begin(s, err) : 0;
}

int er_sqlite_op_end(er_store *s, bool own, int rc, er_error *err)
{
    if (!own)
        return rc;
    if (rc == 0)
        rc = sq_commit(s, err);
    if (rc < 0)
        sq_rollback(s);
    return rc;
}

/* ---- queue cache ---- */

void er_sqlite_queue_cache_clear(er_store *s)
{
    for (size_t i = 0; i < s->nqc; i++) {
        free(s->qc[i]->name);
        free(s->qc[i]);
    }
    s->nqc = 0;
}

static int queue_load(er_store *s, er_sqlite_queue *q, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_QUEUE_GET, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, q->name, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        q->in_table = true;
        q->throttled_until = sqlite3_column_int64(st, 2);
        rc = er_settings_decode_row((const char *)sqlite3_column_text(st, 0),
                                      sqlite3_column_int(st, 1), &q->settings, err);
    } else if (src == SQLITE_DONE) {
        q->in_table = false;
        q->throttled_until = 0;
        er_queue_settings_default(&q->settings);
    } else {
        rc = er_sqlite_error(s->db, src, "read queue", err);
    }
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_queue_get(er_store *s, const char *queue, er_sqlite_queue **out, er_error *err)
{
    for (size_t i = 0; i < s->nqc; i++) {
        if (strcmp(s->qc[i]->name, queue) == 0) {
            *out = s->qc[i];
            return 0;
        }
    }
    if (s->nqc >= QUEUE_CACHE_MAX)
        er_sqlite_queue_cache_clear(s);
    if (ER_GROW(&s->qc, &s->capqc, s->nqc + 1, QUEUE_CACHE_MAX) < 0)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    er_sqlite_queue *q = calloc(1, sizeof *q);
    if (!q || !(q->name = strdup(queue))) {
        free(q);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    int rc = queue_load(s, q, err);
    if (rc < 0) {
        free(q->name);
        free(q);
        return rc;
    }
    s->qc[s->nqc++] = q;
    *out = q;
    return 0;
}

int er_sqlite_queue_register(er_store *s, const char *queue, er_error *err)
{
    er_sqlite_queue *q;
    int rc = er_sqlite_queue_get(s, queue, &q, err);
    if (rc < 0 || q->in_table)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = er_sqlite_prep(s, ER_SQ_QUEUE_REGISTER, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    rc = er_sqlite_run(s, st, err);
    if (rc == 0)
        q->in_table = true;
    return rc;
}

/* ---- rows ---- */

int er_sqlite_bind_job(er_store *s, sqlite3_stmt *st, const er_job *j, er_error *err)
{
    int rc = SQLITE_OK;
    for (int i = 0; i < ER_JOB_NCOLS; i++) {
        const er_job_col *c = &er_job_cols[i];
        size_t n;
        const char *t;
        switch (c->kind) {
        case ER_COL_STR:
        case ER_COL_TEXT:
        case ER_COL_PAYLOAD:
            t = er_job_col_text(j, c, &n);
            rc |= t ? sqlite3_bind_text(st, i + 1, t, (int)n, SQLITE_STATIC)
                    : sqlite3_bind_null(st, i + 1);
            break;
        case ER_COL_F64:
            rc |= sqlite3_bind_double(st, i + 1, er_job_col_f64(j, c));
            break;
        default:
            rc |= sqlite3_bind_int64(st, i + 1, er_job_col_int(j, c));
            break;
        }
    }
    if (rc != SQLITE_OK)
        return er_sqlite_error(s->db, sqlite3_errcode(s->db), "bind", err);
    return 0;
}

int er_sqlite_col_text(sqlite3_stmt *st, int i, char **dst, size_t *len)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (!t) {
        *dst = NULL;
        /* NULL for a non-NULL value means sqlite ran out of memory */
        return sqlite3_column_type(st, i) == SQLITE_NULL ? 0 : -1;
    }
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    char *p = malloc(n + 1);
    if (!p)
        return -1;
    memcpy(p, t, n);
    p[n] = '\0';
    *dst = p;
    if (len)
        *len = n;
    return 0;
}

int er_sqlite_row_job(sqlite3_stmt *st, er_job *j, er_error *err)
{
    int bad = 0;
    for (int i = 0; i < ER_JOB_NCOLS; i++) {
        const er_job_col *c = &er_job_cols[i];
        switch (c->kind) {
        case ER_COL_STR:
        case ER_COL_TEXT:
        case ER_COL_PAYLOAD: {
            const unsigned char *t = sqlite3_column_text(st, i);
            /* NULL for a non-NULL value means sqlite ran out of memory */
            if (!t && sqlite3_column_type(st, i) != SQLITE_NULL)
                bad = 1;
            else if (er_job_col_set_text(j, c, (const char *)t,
                                         (size_t)sqlite3_column_bytes(st, i)) < 0)
                bad = 1;
            break;
        }
        case ER_COL_F64:
            er_job_col_set_f64(j, c, sqlite3_column_double(st, i));
            break;
        default:
            er_job_col_set_int(j, c, sqlite3_column_int64(st, i));
            break;
        }
    }
    if (bad)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    return 0;
}

int er_sqlite_load_job(er_store *s, const char *id, er_job *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_GET_JOB, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        er_job_init(out);
        rc = er_sqlite_row_job(st, out, err);
        if (rc < 0)
            er_job_fini(out);
    } else if (src == SQLITE_DONE) {
        rc = er_error_set(err, ER_ENOTFOUND, "id", "job '%s' not found", id);
    } else {
        rc = er_sqlite_error(s->db, src, "read job", err);
    }
    sqlite3_reset(st);
    return rc;
}

/* ---- open / close ---- */

static void fn_token(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    er_store *s = sqlite3_user_data(ctx);
    if (!s->rand) {
        sqlite3_result_error(ctx, "er_token() is only available during fetch", -1);
        return;
    }
    char tok[33];
    er_rand_token(s->rand, tok);
    sqlite3_result_text(ctx, tok, 32, SQLITE_TRANSIENT);
}

/* er_acks: an eponymous virtual table over the items of the complete_many
 * call running on this connection (s->acks), so one UPDATE ... FROM
 * applies a whole batch. Columns: id, token, result. Empty outside such a
 * call. */
typedef struct acks_vtab {
    sqlite3_vtab base;
    er_store *s;
} acks_vtab;

typedef struct acks_cursor {
    sqlite3_vtab_cursor base;
    size_t i;
} acks_cursor;

static er_store *acks_store(sqlite3_vtab_cursor *cur)
{
    return ((acks_vtab *)cur->pVtab)->s;
}

/* Declares a batch table's columns and makes its vtab (both batch tables). */
static int batch_connect(sqlite3 *db, void *aux, const char *schema, sqlite3_vtab **out)
{
    int rc = sqlite3_declare_vtab(db, schema);
    if (rc != SQLITE_OK)
        return rc;
    acks_vtab *vt = sqlite3_malloc(sizeof *vt);
    if (!vt)
        return SQLITE_NOMEM;
    memset(vt, 0, sizeof *vt);
    vt->s = aux;
    (void)sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
    *out = &vt->base;
    return SQLITE_OK;
}

static int acks_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **out, char **errmsg)
{
    return batch_connect(db, aux, "CREATE TABLE x(id TEXT, token TEXT, result TEXT)", out);
}

static int acks_disconnect(sqlite3_vtab *vt)
{
    sqlite3_free(vt);
    return SQLITE_OK;
}

/* A full scan is the only plan; its cost says "a few rows" so the join
 * drives from here into jobs' id index. */
static int acks_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    info->estimatedCost = 100;
    info->estimatedRows = 100;
    return SQLITE_OK;
}

static int acks_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out)
{
    acks_cursor *c = sqlite3_malloc(sizeof *c);
    if (!c)
        return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int acks_close(sqlite3_vtab_cursor *cur)
{
    sqlite3_free(cur);
    return SQLITE_OK;
}

static int acks_filter(sqlite3_vtab_cursor *cur, int idx, const char *idxstr, int argc,
                       sqlite3_value **argv)
{
    ((acks_cursor *)cur)->i = 0;
    return SQLITE_OK;
}

static int acks_next(sqlite3_vtab_cursor *cur)
{
    ((acks_cursor *)cur)->i++;
    return SQLITE_OK;
}

static int acks_eof(sqlite3_vtab_cursor *cur)
{
    er_store *s = acks_store(cur);
    return !s->acks || ((acks_cursor *)cur)->i >= s->nacks;
}

static void result_opt_text(sqlite3_context *ctx, const char *v)
{
    if (v)
        sqlite3_result_text(ctx, v, -1, SQLITE_STATIC);
    else
        sqlite3_result_null(ctx);
}

static int acks_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    const er_complete_item *it = &acks_store(cur)->acks[((acks_cursor *)cur)->i];
    result_opt_text(ctx, col == 0 ? it->id : col == 1 ? it->token : it->result);
    return SQLITE_OK;
}

static int acks_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid)
{
    *rowid = (sqlite3_int64)((acks_cursor *)cur)->i;
    return SQLITE_OK;
}

static const sqlite3_module acks_module = {
    .iVersion = 0,
    .xConnect = acks_connect,
    .xBestIndex = acks_best_index,
    .xDisconnect = acks_disconnect,
    .xOpen = acks_open,
    .xClose = acks_close,
    .xFilter = acks_filter,
    .xNext = acks_next,
    .xEof = acks_eof,
    .xColumn = acks_column,
    .xRowid = acks_rowid,
};

/* er_newjobs: an eponymous virtual table over the jobs of the
 * enqueue_many call running on this connection (s->newjobs), in order, with
 * ER_SQ_INSERT_MANY's columns, so one INSERT ... SELECT inserts a batch.
 * Empty outside such a call. */
#define VT_COL_(c, k, st, pt, m) #c " " st ", "
#define VT_COL_LAST_(c, k, st, pt, m) #c " " st
static int newjobs_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                           sqlite3_vtab **out, char **errmsg)
{
    return batch_connect(db, aux, "CREATE TABLE x(" ER_JOB_ROW(VT_COL_, VT_COL_LAST_) ")", out);
}

static int newjobs_eof(sqlite3_vtab_cursor *cur)
{
    er_store *s = acks_store(cur);
    return !s->newjobs || ((acks_cursor *)cur)->i >= s->nnew;
}

/* Column col of the current job: the value er_sqlite_bind_job binds to
 * ?col+1. */
static int newjobs_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    const er_job *j = &acks_store(cur)->newjobs[((acks_cursor *)cur)->i];
    const er_job_col *c = &er_job_cols[col];
    size_t n;
    const char *t;
    switch (c->kind) {
    case ER_COL_STR:
    case ER_COL_TEXT:
    case ER_COL_PAYLOAD:
        t = er_job_col_text(j, c, &n);
        if (t)
            sqlite3_result_text(ctx, t, (int)n, SQLITE_STATIC);
        else
            sqlite3_result_null(ctx);
        break;
    case ER_COL_F64:
        sqlite3_result_double(ctx, er_job_col_f64(j, c));
        break;
    default:
        sqlite3_result_int64(ctx, er_job_col_int(j, c));
        break;
    }
    return SQLITE_OK;
}

static const sqlite3_module newjobs_module = {
    .iVersion = 0,
    .xConnect = newjobs_connect,
    .xBestIndex = acks_best_index,
    .xDisconnect = acks_disconnect,
    .xOpen = acks_open,
    .xClose = acks_close,
    .xFilter = acks_filter,
    .xNext = acks_next,
    .xEof = newjobs_eof,
    .xColumn = newjobs_column,
    .xRowid = acks_rowid,
};

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

static int migrate(er_store *s, er_error *err)
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

static void sq_close(er_store *s)
{
    if (!s)
        return;
    for (int i = 0; i < ER_SQ_NSTMT; i++)
        sqlite3_finalize(s->st[i]);
    er_sqlite_queue_cache_clear(s);
    free(s->qc);
    sqlite3_close(s->db); /* rolls back an open transaction */
    free(s);
}

/* Runs after each commit, with the log's frame count. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
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

/* A PASSIVE checkpoint once the log is long. Between transactions the
 * writer adds no frames while it runs, so unless a reader's snapshot holds
 * frames back it copies them all and the next commit restarts the log from
 * its start. When a reader did hold some back, the next try waits for an
 * eighth of the threshold of new frames. */
static int sq_checkpoint(er_store *s, er_error *err)
{
    if (s->wal_frames < s->ckpt_frames || s->wal_frames < s->ckpt_tried + s->ckpt_frames / 8 ||
        !sqlite3_get_autocommit(s->db))
        return 0;
    int log = 0;
    int rc = sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, NULL);
    s->ckpt_tried = log > 0 ? log : s->wal_frames;
    if (rc == SQLITE_OK || (rc & 0xff) == SQLITE_BUSY)
        return 0;
    return er_sqlite_error(s->db, rc, "checkpoint", err);
}

static void global_init_once(void)
{
    /* SQLITE_MISUSE when SQLite is initialized already: the statistics then
     * stay on, which costs time but nothing else */
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

void er_sqlite_global_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, global_init_once);
}

/* `url` is a file path, or a SQLite URI ("file:PATH?vfs=NAME", used by the
 * fault tests) since the file is opened with SQLITE_OPEN_URI. */
static int sq_open(const char *url, const er_store_options *opt, er_store **out, er_error *err)
{
    *out = NULL;
    er_sqlite_global_init();
    er_store *s = calloc(1, sizeof *s);
    if (!s)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI |
                SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(url, &s->db, flags, NULL);
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
        sqlite3_wal_hook(s->db, wal_hook, s); /* replaces the autocheckpoint */
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
        int frc = sqlite3_create_function(s->db, "er_token", 0, SQLITE_UTF8 | SQLITE_DIRECTONLY,
                                          s, fn_token, NULL, NULL);
        if (frc == SQLITE_OK)
            frc = sqlite3_create_module(s->db, "er_acks", &acks_module, s);
        if (frc == SQLITE_OK)
            frc = sqlite3_create_module(s->db, "er_newjobs", &newjobs_module, s);
        if (frc != SQLITE_OK)
            rc = er_sqlite_error(s->db, frc, "create function", err);
    }
    if (rc == 0)
        rc = migrate(s, err);
    if (rc < 0) {
        if (err)
            snprintf(err->field, sizeof err->field, "store");
        sq_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

const er_store_ops er_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
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
    .list_jobs = er_sqlite_list_jobs,
    .list_queues = er_sqlite_list_queues,
    .get_queue_settings = er_sqlite_get_queue_settings,
    .put_queue_settings = er_sqlite_put_queue_settings,
    .list_dead = er_sqlite_list_dead,
    .redrive = er_sqlite_redrive,
    .delete_dead = er_sqlite_delete_dead,
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
    .checkpoint = sq_checkpoint,
};
