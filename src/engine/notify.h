/* SPDX-License-Identifier: MIT
 *
 * Wake-ups from other nodes: a thread that holds a store's listener
 * (store.h's optional listener ops) and reports each queue another node (or
 * an application's SQL enqueue) made ready, and the jobs another node
 * finished. It reconnects with backoff when
 * its connection drops and then reports that any queue may be ready, since
 * wake-ups sent meanwhile are lost. It knows no store. Internal to
 * src/engine.
 */
#ifndef ER_ENGINE_NOTIFY_H
#define ER_ENGINE_NOTIFY_H

#include "store/store.h"
#include "util/err.h"

typedef struct er_notify er_notify;

typedef struct er_notify_cbs {
    /* A queue got ready jobs (borrowed name, valid during the call). */
    void (*ready)(const char *queue, void *arg);
    /* Jobs finished on another node (store.h's er_store_finished_fn: n 0
     * means any job may have). */
    void (*finished)(const uint32_t *keys, size_t n, void *arg);
    /* The listen connection was (re)established: any queue may be ready,
     * any job may have finished. */
    void (*all)(void *arg);
    void *arg;
} er_notify_cbs;

/* Starts the listener thread for the store at `url` (copied; as ops->open
 * takes it). `ops` (borrowed: valid until er_notify_stop) must have the
 * listener ops. The callbacks run on that thread. Connection failures are
 * retried inside the thread, so this fails only when the thread cannot
 * start. */
int er_notify_start(const er_store_ops *ops, const char *url, const er_notify_cbs *cbs,
                    er_notify **out, er_error *err);

/* Stops and joins the thread, closes its connection. NULL-safe. */
void er_notify_stop(er_notify *n);

#endif
