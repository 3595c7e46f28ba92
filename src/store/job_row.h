/* SPDX-License-Identifier: MIT
 *
 * The job row: the one list of the columns both stores keep for a job, in
 * the order every SELECT, INSERT and batch table uses, with each column's
 * SQL types and the er_job member it holds. The SQL texts are spelled from
 * ER_JOB_ROW at compile time; binds, reads and batch tables walk
 * er_job_cols. Adding a column: one line here, the er_job member, and a
 * migration in each store (ALTER TABLE ... ADD COLUMN); store tests check
 * that the list matches both tables.
 */
#ifndef ER_STORE_JOB_ROW_H
#define ER_STORE_JOB_ROW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/job.h"
#include "core/job_spec.h"

/* X(column, kind, SQLite type, PostgreSQL type, er_job member); the last
 * column goes through LAST, so lists can be spelled without a trailing
 * comma. Kinds: ER_COL_STR (text or NULL), ER_COL_TEXT (text, "" for NULL),
 * ER_COL_PAYLOAD (payload + payload_len, "null" for NULL), ER_COL_INT,
 * ER_COL_I64, ER_COL_F64, ER_COL_FLAGS (er_job_set_flags). */
#define ER_JOB_ROW(X, LAST)                                                                \
    X(id, ER_COL_STR, "TEXT", "text", id)                                                   \
    X(queue, ER_COL_STR, "TEXT", "text", queue)                                             \
    X(name, ER_COL_TEXT, "TEXT", "text", name)                                              \
    X(payload, ER_COL_PAYLOAD, "TEXT", "text", payload)                                     \
    X(state, ER_COL_INT, "INTEGER", "smallint", state)                                      \
    X(priority, ER_COL_INT, "INTEGER", "integer", priority)                                 \
    X(grp, ER_COL_STR, "TEXT", "text", group)                                               \
    X(run_at, ER_COL_I64, "INTEGER", "bigint", run_at)                                      \
    X(max_attempts, ER_COL_INT, "INTEGER", "integer", max_attempts)                         \
    X(backoff_type, ER_COL_INT, "INTEGER", "smallint", backoff.type)                        \
    X(backoff_delay_ms, ER_COL_I64, "INTEGER", "bigint", backoff.delay_ms)                  \
    X(backoff_max_ms, ER_COL_I64, "INTEGER", "bigint", backoff.max_delay_ms)                \
    X(backoff_jitter, ER_COL_F64, "REAL", "double precision", backoff.jitter)               \
    X(timeout_ms, ER_COL_I64, "INTEGER", "bigint", timeout_ms)                              \
    X(trace_id, ER_COL_STR, "TEXT", "text", trace_id)                                       \
    X(idempotency_key, ER_COL_STR, "TEXT", "text", idempotency_key)                         \
    X(attempts, ER_COL_INT, "INTEGER", "integer", attempts)                                 \
    X(started, ER_COL_INT, "INTEGER", "integer", started)                                   \
    X(stalled, ER_COL_INT, "INTEGER", "integer", stalled)                                   \
    X(lease_owner, ER_COL_STR, "TEXT", "text", lease_owner)                                 \
    X(lease_token, ER_COL_STR, "TEXT", "text", lease_token)                                 \
    X(lease_expires_at, ER_COL_I64, "INTEGER", "bigint", lease_expires_at)                  \
    X(last_error, ER_COL_STR, "TEXT", "text", last_error)                                   \
    X(result, ER_COL_STR, "TEXT", "text", result)                                           \
    X(progress, ER_COL_STR, "TEXT", "text", progress)                                       \
    X(created_at, ER_COL_I64, "INTEGER", "bigint", created_at)                              \
    X(updated_at, ER_COL_I64, "INTEGER", "bigint", updated_at)                              \
    X(started_at, ER_COL_I64, "INTEGER", "bigint", started_at)                              \
    X(finished_at, ER_COL_I64, "INTEGER", "bigint", finished_at)                            \
    X(redriven_at, ER_COL_I64, "INTEGER", "bigint", redriven_at)                            \
    X(redrive_count, ER_COL_INT, "INTEGER", "integer", redrive_count)                       \
    X(custom, ER_COL_STR, "TEXT", "text", custom)                                           \
    X(unique_token, ER_COL_STR, "TEXT", "text", unique_token)                               \
    LAST(set_flags, ER_COL_FLAGS, "INTEGER", "integer", set_max_attempts)

/* Spellings of the list for SQL texts. */
#define ER_ROW_NAME_(c, k, st, pt, m) #c ", "
#define ER_ROW_NAME_LAST_(c, k, st, pt, m) #c
/* "id, queue, ..., set_flags" */
#define ER_JOB_ROW_NAMES ER_JOB_ROW(ER_ROW_NAME_, ER_ROW_NAME_LAST_)

typedef enum er_col_kind {
    ER_COL_STR,
    ER_COL_TEXT,
    ER_COL_PAYLOAD,
    ER_COL_INT,
    ER_COL_I64,
    ER_COL_F64,
    ER_COL_FLAGS,
} er_col_kind;

/* One column: its name, kind and SQL types, and where er_job keeps it. */
typedef struct er_job_col {
    const char *name;
    er_col_kind kind;
    const char *sqlite_type, *pg_type;
    size_t off;  /* offsetof(er_job, member) */
    size_t size; /* sizeof that member */
} er_job_col;

#define ER_ROW_COUNT_(c, k, st, pt, m) +1
enum { ER_JOB_NCOLS = 0 ER_JOB_ROW(ER_ROW_COUNT_, ER_ROW_COUNT_) };

extern const er_job_col er_job_cols[ER_JOB_NCOLS];

/* The readers are inline: batch tables call them for every column of
 * every job. */
#define ER_JOB_COL_AT(j, c) ((const char *)(j) + (c)->off)

/* A text column's value (borrowed from j) and its length; NULL for SQL
 * NULL. */
static inline const char *er_job_col_text(const er_job *j, const er_job_col *c, size_t *len)
{
    const char *s = *(char *const *)ER_JOB_COL_AT(j, c);
    if (c->kind == ER_COL_PAYLOAD) {
        *len = s ? j->payload_len : 4;
        return s ? s : "null";
    }
    if (!s && c->kind == ER_COL_TEXT)
        s = "";
    *len = s ? strlen(s) : 0;
    return s;
}

/* An integer column's value (ER_COL_INT, ER_COL_I64, ER_COL_FLAGS). */
static inline int64_t er_job_col_int(const er_job *j, const er_job_col *c)
{
    if (c->kind == ER_COL_FLAGS)
        return er_job_set_flags(j);
    if (c->size == sizeof(int64_t))
        return *(const int64_t *)ER_JOB_COL_AT(j, c);
    return *(const int *)ER_JOB_COL_AT(j, c);
}

static inline double er_job_col_f64(const er_job *j, const er_job_col *c)
{
    return *(const double *)ER_JOB_COL_AT(j, c);
}

/* Sets a text column from s[0..n) (copied; s NULL: NULL). 0 or ER_ENOMEM. */
int er_job_col_set_text(er_job *j, const er_job_col *c, const char *s, size_t n);
void er_job_col_set_int(er_job *j, const er_job_col *c, int64_t v);
void er_job_col_set_f64(er_job *j, const er_job_col *c, double v);

#endif
