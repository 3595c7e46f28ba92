/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's rows: binding an er_job's columns (store/job_row.h) to
 * a statement, reading a row back into an er_job, copying a text column,
 * and loading one job by id. SQL NULL stays NULL; a NULL for a non-NULL
 * value (SQLite out of memory) is ER_ENOMEM, never an empty field.
 */
#include "store/sqlite/sqlite_int.h"

#include <stdlib.h>
#include <string.h>

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
