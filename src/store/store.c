/* SPDX-License-Identifier: MIT
 *
 * Store-independent helpers: URL resolution and the list types of store.h
 * (jobs, queues, schedulers, audit rows).
 */
#include "store/store.h"
#include "util/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void er_job_list_fini(er_job_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->len; i++)
        er_job_fini(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->len = l->cap = 0;
}

er_job *er_job_list_push(er_job_list *l)
{
    if (ER_GROW(&l->items, &l->cap, l->len + 1, ER_LIST_MAX) < 0)
        return NULL;
    er_job *j = &l->items[l->len++];
    er_job_init(j);
    return j;
}

int er_job_list_take(er_job_list *dst, er_job_list *src)
{
    if (src->len == 0)
        return 0;
    if (ER_GROW(&dst->items, &dst->cap, dst->len + src->len, ER_LIST_MAX) < 0)
        return ER_ENOMEM;
    memcpy(dst->items + dst->len, src->items, src->len * sizeof *src->items);
    dst->len += src->len;
    src->len = 0;
    return 0;
}

void er_audit_fini(er_audit *a)
{
    if (!a)
        return;
    free(a->who);
    free(a->action);
    free(a->target);
    memset(a, 0, sizeof *a);
}

void er_audit_list_fini(er_audit_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->len; i++)
        er_audit_fini(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->len = l->cap = 0;
}

er_audit *er_audit_list_push(er_audit_list *l)
{
    if (ER_GROW(&l->items, &l->cap, l->len + 1, ER_LIST_MAX) < 0)
        return NULL;
    er_audit *a = &l->items[l->len++];
    memset(a, 0, sizeof *a);
    return a;
}

void er_worker_row_fini(er_worker_row *w)
{
    if (!w)
        return;
    free(w->labels);
    memset(w, 0, sizeof *w);
}

void er_worker_list_fini(er_worker_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->len; i++)
        er_worker_row_fini(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->len = l->cap = 0;
}

er_worker_row *er_worker_list_push(er_worker_list *l)
{
    if (ER_GROW(&l->items, &l->cap, l->len + 1, ER_LIST_MAX) < 0)
        return NULL;
    er_worker_row *w = &l->items[l->len++];
    memset(w, 0, sizeof *w);
    return w;
}

int er_store_resolve(const char *url, const er_store_ops **ops, const char **rest,
                     er_error *err)
{
    if (strncmp(url, "sqlite:", 7) == 0) {
        *ops = &er_sqlite_ops;
        *rest = url + 7;
        return 0;
    }
    if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0) {
        *ops = &er_postgres_ops;
        *rest = url; /* libpq takes the whole URL */
        return 0;
    }
    if (strstr(url, "://"))
        return er_error_set(err, ER_EINVAL, "store", "unknown store scheme in '%s'", url);
    if (!*url)
        return er_error_set(err, ER_EINVAL, "store", "store path is empty");
    *ops = &er_sqlite_ops;
    *rest = url;
    return 0;
}

void er_queue_info_list_free(er_queue_info *qs, size_t n)
{
    if (!qs)
        return;
    for (size_t i = 0; i < n; i++)
        free(qs[i].name);
    free(qs);
}

int er_store_queue_defaults(const er_store_ops *ops, er_store *s, const char *queue,
                            er_job_defaults *out, er_error *err)
{
    if (ops->cached_queue_defaults) {
        int rc = ops->cached_queue_defaults(s, queue, out, err);
        if (rc <= 0)
            return rc;
    }
    er_queue_settings *qs = malloc(sizeof *qs);
    if (!qs)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    int rc = ops->get_queue_settings(s, queue, qs, err);
    if (rc == 0)
        *out = qs->defaults;
    free(qs);
    return rc;
}

int er_store_enqueue_many(const er_store_ops *ops, er_store *s, const er_job *jobs, size_t n,
                          bool *duplicate, er_tombstone_list *tombs, er_error *err)
{
    if (ops->enqueue_many)
        return ops->enqueue_many(s, jobs, n, duplicate, tombs, err);
    for (size_t i = 0; i < n; i++) {
        size_t had = tombs ? tombs->len : 0;
        int rc = ops->enqueue(s, &jobs[i], &duplicate[i], NULL, tombs, err);
        if (rc < 0)
            return rc;
        if (tombs && tombs->len > had)
            tombs->items[had].index = i;
    }
    return 0;
}

int er_store_redrive_check(er_tombstone_find_fn find, er_store *s, const er_job *copy,
                           int64_t now, er_error *err)
{
    er_tombstone_list tl = {0};
    int rc = find(s, copy, now, 0, &tl, err);
    if (rc == 0 && tl.len) {
        const char *state = er_state_name(tl.items[0].state);
        rc = er_error_set(err, ER_ECONFLICT, "id",
                          "job '%s' existed (%s in queue '%s', deleted by retention) and its id "
                          "is still remembered (the dedup window)",
                          copy->id, state ? state : "?", tl.items[0].queue);
    }
    er_tombstone_list_fini(&tl);
    return rc;
}

void er_tombstone_list_fini(er_tombstone_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->len; i++)
        free(l->items[i].queue);
    free(l->items);
    l->items = NULL;
    l->len = l->cap = 0;
}

int er_tombstone_list_add(er_tombstone_list *l, size_t index, const char *queue, er_state state,
                          int64_t finished_at)
{
    if (ER_GROW(&l->items, &l->cap, l->len + 1, ER_LIST_MAX) < 0)
        return ER_ENOMEM;
    char *q = strdup(queue ? queue : "");
    if (!q)
        return ER_ENOMEM;
    l->items[l->len++] = (er_tombstone){index, q, state, finished_at};
    return 0;
}

void er_sched_row_fini(er_sched_row *r)
{
    if (!r)
        return;
    free(r->key);
    free(r->spec);
    memset(r, 0, sizeof *r);
}

void er_sched_list_fini(er_sched_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->len; i++)
        er_sched_row_fini(&l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

er_sched_row *er_sched_list_push(er_sched_list *l)
{
    if (ER_GROW(&l->items, &l->cap, l->len + 1, ER_LIST_MAX) < 0)
        return NULL;
    er_sched_row *r = &l->items[l->len++];
    memset(r, 0, sizeof *r);
    return r;
}

void er_lease_list_truncate(er_lease_list *l, size_t len)
{
    while (l->len > len) {
        er_lease_row *r = &l->items[--l->len];
        free(r->type);
        free(r->code);
        free(r->run_key);
    }
}

void er_lease_list_fini(er_lease_list *l)
{
    if (!l)
        return;
    er_lease_list_truncate(l, 0);
    free(l->items);
    memset(l, 0, sizeof *l);
}

er_lease_row *er_lease_list_push(er_lease_list *l)
{
    if (ER_GROW(&l->items, &l->cap, l->len + 1, ER_LIST_MAX) < 0)
        return NULL;
    er_lease_row *r = &l->items[l->len++];
    memset(r, 0, sizeof *r);
    return r;
}

void er_cursor_list_truncate(er_cursor_list *l, size_t len)
{
    while (l->len > len) {
        er_cursor_row *r = &l->items[--l->len];
        free(r->name);
        free(r->value);
    }
}

void er_cursor_list_fini(er_cursor_list *l)
{
    if (!l)
        return;
    er_cursor_list_truncate(l, 0);
    free(l->items);
    memset(l, 0, sizeof *l);
}

er_cursor_row *er_cursor_list_push(er_cursor_list *l)
{
    if (ER_GROW(&l->items, &l->cap, l->len + 1, ER_LIST_MAX) < 0)
        return NULL;
    er_cursor_row *r = &l->items[l->len++];
    memset(r, 0, sizeof *r);
    return r;
}

int er_name_set_add(er_name_set *ns, const char *name)
{
    for (size_t i = 0; i < ns->n; i++)
        if (strcmp(ns->v[i], name) == 0)
            return 0;
    return er_name_set_push(ns, name);
}

int er_name_set_push(er_name_set *ns, const char *name)
{
    if (ER_GROW(&ns->v, &ns->cap, ns->n + 1, ER_LIST_MAX) < 0)
        return ER_ENOMEM;
    if (!(ns->v[ns->n] = strdup(name)))
        return ER_ENOMEM;
    ns->n++;
    return 0;
}

void er_name_set_free(er_name_set *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free(ns->v[i]);
    free(ns->v);
    memset(ns, 0, sizeof *ns);
}

void er_name_set_give(er_name_set *ns, char ***queues, size_t *nqueues)
{
    if (queues && nqueues) {
        *queues = ns->v;
        *nqueues = ns->n;
        memset(ns, 0, sizeof *ns);
    } else {
        er_name_set_free(ns);
    }
}

int er_dead_cursor_parse(const char *cursor, int64_t *at, int64_t *seq, er_error *err)
{
    *at = INT64_MAX;
    *seq = INT64_MAX;
    if (!cursor || !*cursor)
        return 0;
    char *end;
    errno = 0;
    long long a = strtoll(cursor, &end, 10);
    if (errno || *end != '.')
        return er_error_set(err, ER_EINVAL, "cursor", "invalid cursor");
    const char *p = end + 1;
    long long b = strtoll(p, &end, 10);
    if (errno || end == p || *end)
        return er_error_set(err, ER_EINVAL, "cursor", "invalid cursor");
    *at = a;
    *seq = b;
    return 0;
}
