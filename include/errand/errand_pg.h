/* SPDX-License-Identifier: MIT
 *
 * liberrand-pg: what an application calls inside its own PostgreSQL
 * transaction (docs/outbox.md). It links libpq only (liberrand stays free
 * of it) and never begins, commits or rolls back: the caller's transaction
 * decides whether the write happened. Errors are libpq's: read
 * PQerrorMessage(conn).
 */
#ifndef ERRAND_ERRAND_PG_H
#define ERRAND_ERRAND_PG_H

#include <libpq-fe.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ERRAND_PG_API __attribute__((visibility("default")))
#else
#define ERRAND_PG_API
#endif

/* One event for outbox_events (installed by `errand outbox install`). */
typedef struct errand_outbox_event {
    const char *topic;           /* required, routed by the relay's --outbox-routes */
    const char *payload_json;    /* required: the text of a JSON object */
    const char *idempotency_key; /* optional: a second write with this key adds nothing */
    const char *aggregate_id;    /* optional, e.g. the order's id */
    const char *trace_id;        /* optional */
    const char *id;              /* optional uuid; NULL: the database makes one */
} errand_outbox_event;

enum {
    ERRAND_PG_INSERTED = 1,      /* errand_outbox_write: a new row */
    ERRAND_PG_EXISTS = 0,        /* errand_outbox_write: the key (or id) was written before */
    ERRAND_PG_FIRST = 1,         /* errand_pg_claim_once: apply the effect now */
    ERRAND_PG_ALREADY = 0,       /* errand_pg_claim_once: it was applied before */
    ERRAND_PG_ERROR = -1,        /* the statement failed (PQerrorMessage(conn)), or bad input */
};

/* Writes ev into outbox_events inside the caller's transaction. Returns
 * ERRAND_PG_INSERTED or ERRAND_PG_EXISTS (insert-once by idempotency key,
 * ON CONFLICT DO NOTHING), or ERRAND_PG_ERROR: a payload that is not a JSON
 * object, a missing topic, or a database error (the transaction is then
 * aborted, as with any failed statement). id_out, when not NULL, gets the
 * row's id (the earlier row's on ERRAND_PG_EXISTS, when its key matched). */
ERRAND_PG_API int errand_outbox_write(PGconn *conn, const errand_outbox_event *ev,
                                      char id_out[37]);

/* Records that `consumer` processed `message_id`, inside the transaction
 * that applies the effect. ERRAND_PG_FIRST: first time, apply it and
 * commit; ERRAND_PG_ALREADY: it was processed (and committed) before, do
 * nothing. A concurrent transaction with the same pair waits for the first
 * to end, so the effect is applied once. ERRAND_PG_ERROR on failure. */
ERRAND_PG_API int errand_pg_claim_once(PGconn *conn, const char *consumer,
                                       const char *message_id);

#ifdef __cplusplus
}
#endif

#endif
