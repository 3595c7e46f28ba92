/* SPDX-License-Identifier: MIT
 *
 * liberrand-pg (errand_pg.h): outbox writes and processed-message claims,
 * one statement each, in the caller's transaction.
 */
#include "errand/errand_pg.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A JSON text is an object exactly when its first non-blank byte is '{';
 * the ::jsonb cast checks the rest. */
static bool object_text(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return *s == '{';
}

static void copy_id(PGresult *r, char id_out[37])
{
    if (id_out && PQntuples(r) == 1)
        snprintf(id_out, 37, "%s", PQgetvalue(r, 0, 0));
}

int errand_outbox_write(PGconn *conn, const errand_outbox_event *ev, char id_out[37])
{
    if (id_out)
        id_out[0] = '\0';
    if (!conn || !ev || !ev->topic || !*ev->topic || !ev->payload_json ||
        !object_text(ev->payload_json))
        return ERRAND_PG_ERROR;
    const char *p[] = {ev->id, ev->idempotency_key, ev->topic, ev->aggregate_id,
                       ev->payload_json, ev->trace_id};
    PGresult *r = PQexecParams(conn,
                               "INSERT INTO outbox_events"
                               " (id, idempotency_key, topic, aggregate_id, payload, trace_id)"
                               " VALUES (coalesce($1::uuid, gen_random_uuid()), $2, $3, $4,"
                               " $5::jsonb, $6) ON CONFLICT DO NOTHING RETURNING id::text",
                               6, NULL, p, NULL, NULL, 0);
    int rc = ERRAND_PG_ERROR;
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
        rc = PQntuples(r) == 1 ? ERRAND_PG_INSERTED : ERRAND_PG_EXISTS;
        copy_id(r, id_out);
    }
    PQclear(r);
    if (rc == ERRAND_PG_EXISTS && id_out && ev->idempotency_key) {
        const char *k[] = {ev->idempotency_key};
        r = PQexecParams(conn, "SELECT id::text FROM outbox_events WHERE idempotency_key = $1",
                         1, NULL, k, NULL, NULL, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK)
            copy_id(r, id_out);
        else
            rc = ERRAND_PG_ERROR;
        PQclear(r);
    }
    return rc;
}

int errand_pg_claim_once(PGconn *conn, const char *consumer, const char *message_id)
{
    if (!conn || !consumer || !*consumer || !message_id || !*message_id)
        return ERRAND_PG_ERROR;
    const char *p[] = {consumer, message_id};
    PGresult *r = PQexecParams(conn,
                               "INSERT INTO processed_messages (consumer, message_id)"
                               " VALUES ($1, $2) ON CONFLICT DO NOTHING",
                               2, NULL, p, NULL, NULL, 0);
    int rc = ERRAND_PG_ERROR;
    if (PQresultStatus(r) == PGRES_COMMAND_OK)
        rc = strcmp(PQcmdTuples(r), "1") == 0 ? ERRAND_PG_FIRST : ERRAND_PG_ALREADY;
    PQclear(r);
    return rc;
}
