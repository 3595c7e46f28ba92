/* SPDX-License-Identifier: MIT
 *
 * Wake-ups from other nodes: a thread that LISTENs on the PostgreSQL
 * store's channel and reports each queue another node (or an application's
 * SQL enqueue) made ready. It reconnects with backoff when its connection
 * drops and then reports that any queue may be ready, since notifications
 * sent meanwhile are lost. Internal to src/engine.
 */
#ifndef ER_ENGINE_NOTIFY_H
#define ER_ENGINE_NOTIFY_H

#include "util/err.h"

typedef struct er_notify er_notify;

typedef struct er_notify_cbs {
    /* A queue got ready jobs (borrowed name, valid during the call). */
    void (*ready)(const char *queue, void *arg);
    /* The listen connection was (re)established: any queue may be ready. */
    void (*all)(void *arg);
    void *arg;
} er_notify_cbs;

/* Starts the listener thread for the postgres:// store `url` (copied). The
 * callbacks run on that thread. Connection failures are retried inside the
 * thread, so this fails only when the thread cannot start. */
int er_notify_start(const char *url, const er_notify_cbs *cbs, er_notify **out, er_error *err);

/* Stops and joins the thread, closes its connection. NULL-safe. */
void er_notify_stop(er_notify *n);

#endif
