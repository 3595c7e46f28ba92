/* SPDX-License-Identifier: MIT
 *
 * What the PostgreSQL store offers beyond store.h: the URL options it
 * understands, its connection pool, and a LISTEN connection that tells a
 * server when another node (or an application's errand.enqueue) made jobs
 * ready, so long-polling fetchers on every node wake up.
 *
 * URL: postgres://user:pass@host:port/db?schema=errand&pool_size=4&clock=store
 *   schema     the schema holding errand's tables and functions (default
 *              "errand"; [a-z_][a-z0-9_]*, at most 57 characters)
 *   pool_size  connections this process keeps open to that URL at most
 *              (default 4; open() waits busy_timeout_ms for a free one)
 *   clock      "store" (default): leases, schedules and maintenance use
 *              PostgreSQL's now() of the transaction, not the caller's now;
 *              "caller": the caller's now (tests with an injected clock)
 * Every other query parameter is passed on to libpq.
 */
#ifndef ER_STORE_POSTGRES_H
#define ER_STORE_POSTGRES_H

#include <stdint.h>

#include "util/err.h"

/* Closes every idle pooled connection of every URL (connections of open
 * er_stores close when those stores are closed). For shutdown and tests. */
void er_postgres_pool_drain(void);

typedef struct er_postgres_listener er_postgres_listener;

/* Called once per notification with the queue that got ready jobs. */
typedef void (*er_postgres_ready_fn)(const char *queue, void *arg);

/* Opens a dedicated connection to `url` (same options as the store) and
 * LISTENs on the schema's channel ("<schema>_ready", errand_ready by
 * default). Returns 0 and *out, or a negative code with *err. */
int er_postgres_listen(const char *url, er_postgres_listener **out, er_error *err);

/* The connection's socket: poll it for reading (e.g. from an event loop),
 * then call er_postgres_listener_poll. */
int er_postgres_listener_fd(const er_postgres_listener *l);

/* Reads what arrived without blocking and calls fn for each notification.
 * ER_EUNAVAIL when the connection broke: close the listener, listen again,
 * and treat every queue as possibly ready (notifications may be lost). */
int er_postgres_listener_poll(er_postgres_listener *l, er_postgres_ready_fn fn, void *arg,
                              er_error *err);

/* Waits up to timeout_ms for notifications, then polls. Returns how many
 * were delivered (0 on timeout) or a negative code. */
int er_postgres_listener_wait(er_postgres_listener *l, int timeout_ms, er_postgres_ready_fn fn,
                              void *arg, er_error *err);

void er_postgres_listener_close(er_postgres_listener *l);

#endif
