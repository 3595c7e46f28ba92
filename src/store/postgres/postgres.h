/* SPDX-License-Identifier: MIT
 *
 * What the PostgreSQL store offers beyond store.h: the URL options it
 * understands and its connection pool. Its wake-ups (a LISTEN connection
 * that tells a server when another node or an application's
 * errand.enqueue made jobs ready) are store.h's optional listener ops.
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
 * er_stores close when those stores are closed). For shutdown and tests;
 * it is er_postgres_ops.release_idle. */
void er_postgres_pool_drain(void);

#endif
