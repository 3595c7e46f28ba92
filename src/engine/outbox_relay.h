/* SPDX-License-Identifier: MIT
 *
 * The outbox relay (docs/outbox.md): a thread of `errand serve` that claims
 * unpublished rows of routed topics from the application's outbox_events
 * table (FOR UPDATE SKIP LOCKED, so several nodes may relay one table),
 * enqueues one job per route through the engine, and marks the rows
 * published in the same claim transaction once errand's store has
 * committed the jobs. Deterministic job ids make a second relay of a row
 * (after a crash between enqueue and mark) create nothing new.
 */
#ifndef ER_ENGINE_OUTBOX_RELAY_H
#define ER_ENGINE_OUTBOX_RELAY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/job_spec.h"
#include "core/outbox.h"
#include "engine/engine.h"
#include "util/err.h"

#define ER_OUTBOX_BATCH 100

typedef struct er_outbox_config {
    const char *db_url;             /* copied */
    const char *store_url;          /* errand's store when PostgreSQL (copied), else NULL */
    er_outbox_routes routes;        /* taken (zeroed in the caller's config) */
    int64_t poll_ms;                /* wait between empty batches (a NOTIFY ends it early) */
    int64_t retention_ms;           /* published rows older than this are deleted */
    int64_t processed_retention_ms; /* processed_messages older than this are deleted */
    er_job_limits limits;
} er_outbox_config;

typedef struct er_outbox er_outbox;

/* Starts the relay thread. It connects by itself (retrying with backoff
 * while the database is unreachable), so an unreachable database is not an
 * error here. Returns 0 or ER_ENOMEM. */
int er_outbox_start(er_engine *e, er_outbox_config *cfg, er_outbox **out, er_error *err);

/* Asks the relay to stop after the batch in flight. Any thread; returns at
 * once. */
void er_outbox_stop(er_outbox *o);

/* Stops, joins the thread and frees. Call on the loop thread after the
 * loop ran its last callbacks and before er_engine_free: a batch whose
 * enqueue the loop never answered is rolled back (its rows stay
 * unpublished). NULL-safe. */
void er_outbox_free(er_outbox *o);

typedef struct er_outbox_stats {
    bool connected;
    bool one_transaction;            /* the outbox shares errand's PostgreSQL database */
    char last_error[256];            /* "" when none */
    uint64_t events_published;       /* rows marked published by this node */
    uint64_t jobs_enqueued;          /* jobs created for them (duplicates not counted) */
    uint64_t row_failures;           /* rows that could not become jobs, each try */
    uint64_t connect_failures;
    int64_t lag_ms;                  /* age of the oldest routable unpublished row */
    int64_t backlog;                 /* routable unpublished rows (last count) */
    int64_t unroutable;              /* unpublished rows of topics without a route */
    int64_t set_aside;               /* rows set aside */
} er_outbox_stats;

/* A snapshot of the counters. Any thread. */
void er_outbox_get_stats(er_outbox *o, er_outbox_stats *out);

#endif
