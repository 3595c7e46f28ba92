/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's batch helpers, registered on each connection: the
 * er_token() function (a lease token from the fetch's random source) and
 * the eponymous virtual tables er_acks (the items of a complete_many call)
 * and er_newjobs (the jobs of an enqueue_many call), so one statement
 * applies a whole batch. They read only what the running call lent the
 * connection, and are empty outside such a call.
 */
#include "store/sqlite/sqlite_int.h"

#include <string.h>

static void fn_token(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    char tok[33];
    er_secure_token(tok);
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

int er_sqlite_batch_register(er_store *s)
{
    int frc = sqlite3_create_function(s->db, "er_token", 0, SQLITE_UTF8 | SQLITE_DIRECTONLY, s,
                                      fn_token, NULL, NULL);
    if (frc == SQLITE_OK)
        frc = sqlite3_create_module(s->db, "er_acks", &acks_module, s);
    if (frc == SQLITE_OK)
        frc = sqlite3_create_module(s->db, "er_newjobs", &newjobs_module, s);
    return frc;
}
