/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's rows: a job as the JSON object of its row (which
 * json_populate_record reads), a result row back into an er_job, integer
 * columns, and loading one job by id. SQL NULL stays NULL (an integer NULL
 * reads as 0).
 */
#include "store/postgres/pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t er_pg_i64(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return 0;
    return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* ---- rows ---- */

void er_pg_job_json(const er_job *j, er_jsonw *w)
{
    er_jsonw_begin_object(w);
    for (int i = 0; i < ER_JOB_NCOLS; i++) {
        const er_job_col *c = &er_job_cols[i];
        size_t n;
        const char *t;
        er_jsonw_key(w, c->name);
        switch (c->kind) {
        case ER_COL_STR:
        case ER_COL_TEXT:
        case ER_COL_PAYLOAD:
            t = er_job_col_text(j, c, &n);
            er_jsonw_str(w, t);
            break;
        case ER_COL_F64:
            er_jsonw_double(w, er_job_col_f64(j, c));
            break;
        default:
            er_jsonw_int(w, er_job_col_int(j, c));
            break;
        }
    }
    er_jsonw_end_object(w);
}

/* COPY's text format for a text value: backslash, tab, newline and
 * carriage return escaped. */
static void copy_text(er_buf *b, const char *t, size_t n)
{
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        char e;
        switch (t[i]) {
        case '\\': e = '\\'; break;
        case '\t': e = 't'; break;
        case '\n': e = 'n'; break;
        case '\r': e = 'r'; break;
        default: continue;
        }
        er_buf_add(b, t + from, i - from);
        char esc[2] = {'\\', e};
        er_buf_add(b, esc, 2);
        from = i + 1;
    }
    er_buf_add(b, t + from, n - from);
}

/* v in decimal at out (room for 20 bytes); returns the length. */
static size_t fmt_i64(char *out, int64_t v)
{
    char tmp[20];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t k = 0;
    if (v < 0)
        out[k++] = '-';
    while (n)
        out[k++] = tmp[--n];
    return k;
}

void er_pg_job_copy_row(const er_job *j, int64_t ord, er_pg_copy_memo *m, er_buf *b)
{
    char *p;
    if (ord >= 0 && (p = er_buf_reserve(b, 21)) != NULL) {
        size_t k = fmt_i64(p, ord);
        p[k] = '\t';
        er_buf_commit(b, k + 1);
    }
    for (int i = 0; i < ER_JOB_NCOLS; i++) {
        const er_job_col *c = &er_job_cols[i];
        size_t n;
        const char *t;
        switch (c->kind) {
        case ER_COL_STR:
        case ER_COL_TEXT:
        case ER_COL_PAYLOAD:
            t = er_job_col_text(j, c, &n);
            if (t)
                copy_text(b, t, n);
            else
                er_buf_add(b, "\\N", 2);
            break;
        case ER_COL_F64: {
            /* one printf a batch: a batch's jobs mostly share their jitter */
            double v = er_job_col_f64(j, c);
            if (!m->set || memcmp(&m->v, &v, sizeof v) != 0) {
                int k = snprintf(m->text, sizeof m->text, "%.17g", v);
                m->len = k > 0 && (size_t)k < sizeof m->text ? (size_t)k : 0;
                m->v = v;
                m->set = true;
            }
            er_buf_add(b, m->text, m->len);
            break;
        }
        default:
            if ((p = er_buf_reserve(b, 20)) != NULL)
                er_buf_commit(b, fmt_i64(p, er_job_col_int(j, c)));
            break;
        }
        er_buf_add(b, i + 1 < ER_JOB_NCOLS ? "\t" : "\n", 1);
    }
}

int er_pg_row_job(const PGresult *res, int row, int c0, er_job *j, er_error *err)
{
    int bad = 0;
    for (int i = 0; i < ER_JOB_NCOLS; i++) {
        const er_job_col *c = &er_job_cols[i];
        int k = c0 + i;
        switch (c->kind) {
        case ER_COL_STR:
        case ER_COL_TEXT:
        case ER_COL_PAYLOAD:
            if (er_job_col_set_text(j, c, PQgetisnull(res, row, k) ? NULL : PQgetvalue(res, row, k),
                                    (size_t)PQgetlength(res, row, k)) < 0)
                bad = 1;
            break;
        case ER_COL_F64:
            er_job_col_set_f64(j, c, strtod(PQgetvalue(res, row, k), NULL));
            break;
        default:
            er_job_col_set_int(j, c, er_pg_i64(res, row, k));
            break;
        }
    }
    if (bad)
        return er_pg_nomem(err);
    return 0;
}

int er_pg_load_job(er_store *s, const char *id, bool lock, er_job *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, id);
    PGresult *r;
    int rc = er_pg_exec(s, lock ? ER_PG_GET_JOB_LOCK : ER_PG_GET_JOB, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        rc = er_error_set(err, ER_ENOTFOUND, "id", "job '%s' not found", id);
    } else {
        er_job_init(out);
        rc = er_pg_row_job(r, 0, 0, out, err);
        if (rc < 0)
            er_job_fini(out);
    }
    PQclear(r);
    return rc;
}
