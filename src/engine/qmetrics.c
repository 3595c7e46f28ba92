/* SPDX-License-Identifier: MIT
 *
 * Per-queue metrics: slots found by an open-addressing hash of the queue
 * name, made on first sight up to the bound, "_other" after it.
 */
#include "engine/qmetrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const double er_qm_bucket_bounds[ER_QM_NBUCKETS] = {
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600};

const double er_qm_batch_bounds[ER_QM_NBUCKETS] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};

struct er_qmetrics {
    er_qm_store store;
    er_qm_cron cron;
    pthread_mutex_t mu;
    size_t max;        /* labelled slots, "_other" not counted */
    er_qm_queue *slots; /* [0] is "_other" */
    size_t nslots;
    int32_t *table;    /* slot index + 1, 0 = empty; size tmask + 1 */
    size_t tmask;
    int hist_head;     /* newest history index, -1 before the first */
    int64_t hist_at;   /* when the newest history entry was taken */
    int64_t sampled_at;
};

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static void slot_init(er_qm_queue *q, const char *name)
{
    memset(q, 0, sizeof *q);
    size_t n = strnlen(name, ER_NAME_MAX);
    memcpy(q->name, name, n);
    q->name[n] = '\0';
    for (int i = 0; i < ER_QM_HISTORY; i++)
        q->hist_waiting[i] = -1;
}

er_qmetrics *er_qm_new(size_t max_queues)
{
    if (max_queues < 1 || max_queues > ER_QM_MAX_QUEUES_MAX)
        return NULL;
    er_qmetrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    size_t tsize = 16;
    while (tsize < 2 * (max_queues + 1))
        tsize *= 2;
    m->max = max_queues;
    m->tmask = tsize - 1;
    m->slots = malloc((max_queues + 1) * sizeof *m->slots);
    m->table = calloc(tsize, sizeof *m->table);
    if (!m->slots || !m->table || pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m->slots);
        free(m->table);
        free(m);
        return NULL;
    }
    slot_init(&m->slots[0], ER_QM_OTHER);
    m->nslots = 1;
    m->hist_head = -1;
    return m;
}

void er_qm_free(er_qmetrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m->slots);
    free(m->table);
    free(m);
}

void er_qm_lock(er_qmetrics *m)
{
    pthread_mutex_lock(&m->mu);
}

void er_qm_unlock(er_qmetrics *m)
{
    pthread_mutex_unlock(&m->mu);
}

/* The table position holding `queue`, or the empty one where it would go. */
static size_t probe(const er_qmetrics *m, const char *queue)
{
    size_t i = (size_t)hash_name(queue) & m->tmask;
    while (m->table[i] && strcmp(m->slots[m->table[i] - 1].name, queue) != 0)
        i = (i + 1) & m->tmask;
    return i;
}

er_qm_queue *er_qm_slot(er_qmetrics *m, const char *queue)
{
    if (!queue || !*queue)
        return &m->slots[0];
    size_t i = probe(m, queue);
    if (m->table[i])
        return &m->slots[m->table[i] - 1];
    if (m->nslots > m->max || strcmp(queue, ER_QM_OTHER) == 0)
        return &m->slots[0];
    er_qm_queue *q = &m->slots[m->nslots];
    slot_init(q, queue);
    m->table[i] = (int32_t)++m->nslots;
    return q;
}

const er_qm_queue *er_qm_find(er_qmetrics *m, const char *queue)
{
    size_t i = probe(m, queue);
    return m->table[i] ? &m->slots[m->table[i] - 1] : NULL;
}

void er_qm_hist_add(er_qm_hist *h, const double *bounds, double v)
{
    if (!(v > 0))
        v = 0;
    for (int i = 0; i < ER_QM_NBUCKETS; i++)
        if (v <= bounds[i]) {
            h->buckets[i]++;
            break;
        }
    h->count++;
    h->sum += v;
}

void er_qm_observe(er_qm_queue *q, er_qm_hist_kind k, double seconds)
{
    er_qm_hist_add(&q->h[k], er_qm_bucket_bounds, seconds);
}

er_qm_store *er_qm_store_stats(er_qmetrics *m)
{
    return &m->store;
}

er_qm_cron *er_qm_cron_stats(er_qmetrics *m)
{
    return &m->cron;
}

void er_qm_count_cron(er_qmetrics *m, const er_cron_event *ev, size_t n, uint64_t missed)
{
    if (!n && !missed)
        return;
    er_qm_lock(m);
    m->cron.missed += missed;
    for (size_t i = 0; i < n; i++) {
        er_qm_slot(m, ev[i].queue)->c[ER_QM_ENQUEUED]++;
        m->cron.runs++;
        if (ev[i].catchup)
            m->cron.catchup++;
        else
            er_qm_hist_add(&m->cron.lateness, er_qm_bucket_bounds, (double)ev[i].late_ms / 1000.0);
    }
    er_qm_unlock(m);
}

void er_qm_count_reaped(er_qmetrics *m, const er_job_list *reaped)
{
    if (!reaped->len)
        return;
    er_qm_lock(m);
    for (size_t i = 0; i < reaped->len; i++) {
        const er_job *j = &reaped->items[i];
        er_qm_queue *q = er_qm_slot(m, j->queue);
        q->c[ER_QM_LEASE_EXPIRED]++;
        q->c[j->state == ER_STATE_DEAD ? ER_QM_DEAD_STALLED : ER_QM_STALLED]++;
    }
    er_qm_unlock(m);
}

void er_qm_unsample(er_qmetrics *m)
{
    for (size_t i = 0; i < m->nslots; i++) {
        er_qm_queue *q = &m->slots[i];
        q->sampled = false;
        memset(q->counts, 0, sizeof q->counts);
        q->oldest_waiting_ms = 0;
    }
    m->sampled_at = 0;
}

void er_qm_sample(er_qmetrics *m, const er_queue_info *qs, size_t n, int64_t now)
{
    er_qm_unsample(m);
    for (size_t i = 0; i < n; i++) {
        er_qm_queue *q = er_qm_slot(m, qs[i].name);
        q->sampled = true;
        for (int s = 0; s < 6; s++)
            q->counts[s] += qs[i].counts[s];
        int64_t old = qs[i].oldest_waiting_ms;
        if (old > 0 && (q->oldest_waiting_ms == 0 || old < q->oldest_waiting_ms))
            q->oldest_waiting_ms = old;
    }
    m->sampled_at = now;
    if (m->hist_head >= 0 && now - m->hist_at < ER_QM_HISTORY_MS)
        return;
    m->hist_head = (m->hist_head + 1) % ER_QM_HISTORY;
    m->hist_at = now;
    for (size_t i = 0; i < m->nslots; i++) {
        er_qm_queue *q = &m->slots[i];
        q->hist_waiting[m->hist_head] = q->sampled ? q->counts[ER_STATE_WAITING] : -1;
    }
}

int64_t er_qm_sampled_at(const er_qmetrics *m)
{
    return m->sampled_at;
}

size_t er_qm_count(const er_qmetrics *m)
{
    return m->nslots;
}

const er_qm_queue *er_qm_at(const er_qmetrics *m, size_t i)
{
    return i < m->nslots ? &m->slots[i] : NULL;
}

int er_qm_history_head(const er_qmetrics *m, int64_t *newest_at)
{
    *newest_at = m->hist_head >= 0 ? m->hist_at : 0;
    return m->hist_head;
}
