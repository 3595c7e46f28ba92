/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's per-connection cache of queue settings, pause and
 * throttle state, loaded from the queues table on a miss (defaults when no
 * row) and through the settings codec. The cache is dropped on rollback and
 * when another connection committed (txn.c), so it never outlives a change
 * made elsewhere; it holds at most QUEUE_CACHE_MAX queues.
 */
#include "store/settings_codec.h"
#include "store/sqlite/sqlite_int.h"
#include "util/buf.h"

#include <stdlib.h>
#include <string.h>

#define QUEUE_CACHE_MAX 4096

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
        q->rate_tat = sqlite3_column_int64(st, 3);
        rc = er_settings_decode_row((const char *)sqlite3_column_text(st, 0),
                                      sqlite3_column_int(st, 1), &q->settings, err);
    } else if (src == SQLITE_DONE) {
        q->in_table = false;
        q->throttled_until = 0;
        q->rate_tat = 0;
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

er_fetch_cursor *er_sqlite_rr_get(er_store *s, const char *queue)
{
    for (size_t i = 0; i < s->nrr; i++)
        if (strcmp(s->rr[i].queue, queue) == 0)
            return &s->rr[i].cur;
    if (s->nrr >= QUEUE_CACHE_MAX)
        er_sqlite_rr_clear(s); /* the rotations start again */
    if (ER_GROW(&s->rr, &s->caprr, s->nrr + 1, QUEUE_CACHE_MAX) < 0)
        return NULL;
    er_sqlite_rr *c = &s->rr[s->nrr];
    memset(c, 0, sizeof *c);
    if (!(c->queue = strdup(queue)))
        return NULL;
    s->nrr++;
    return &c->cur;
}

void er_sqlite_rr_clear(er_store *s)
{
    for (size_t i = 0; i < s->nrr; i++)
        free(s->rr[i].queue);
    s->nrr = 0;
}
