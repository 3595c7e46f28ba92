/* SPDX-License-Identifier: MIT
 *
 * The job row's column table (job_row.h) and its accessors, which the
 * stores' binds, reads and batch tables use instead of positional code.
 */
#include "store/job_row.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(er_state) == sizeof(int) && sizeof(er_backoff_type) == sizeof(int),
               "enum columns are read and written as int");

#define ER_ROW_ENTRY_(c, k, st, pt, m)                                                     \
    {#c, k, st, pt, offsetof(er_job, m), sizeof(((er_job *)0)->m)},

const er_job_col er_job_cols[ER_JOB_NCOLS] = {ER_JOB_ROW(ER_ROW_ENTRY_, ER_ROW_ENTRY_)};

#define AT(j, c) ((char *)(j) + (c)->off)

int er_job_col_set_text(er_job *j, const er_job_col *c, const char *s, size_t n)
{
    char **dst = (char **)AT(j, c);
    free(*dst);
    *dst = NULL;
    if (c->kind == ER_COL_PAYLOAD)
        j->payload_len = 0;
    if (!s)
        return 0;
    char *p = malloc(n + 1);
    if (!p)
        return ER_ENOMEM;
    memcpy(p, s, n);
    p[n] = '\0';
    *dst = p;
    if (c->kind == ER_COL_PAYLOAD)
        j->payload_len = n;
    return 0;
}

void er_job_col_set_int(er_job *j, const er_job_col *c, int64_t v)
{
    if (c->kind == ER_COL_FLAGS)
        er_job_set_flags_apply(j, (int)v);
    else if (c->size == sizeof(int64_t))
        *(int64_t *)AT(j, c) = v;
    else
        *(int *)AT(j, c) = (int)v;
}

void er_job_col_set_f64(er_job *j, const er_job_col *c, double v)
{
    *(double *)AT(j, c) = v;
}
