/* SPDX-License-Identifier: MIT
 *
 * HTTP dispatch: on every node, delivers the jobs of queues whose settings
 * have a dispatch target (core/queue.h er_dispatch) as HTTP requests. It
 * leases through the engine's fetch like any worker (so leases, retries,
 * concurrency and throttles apply, on one node or many), sends through
 * libcurl's multi interface driven by the event loop (no thread, no
 * blocking call), and reports each outcome as an ack, classified by
 * core/http_outcome.h. Everything here runs on the loop thread.
 */
#ifndef ER_ENGINE_DISPATCHER_H
#define ER_ENGINE_DISPATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "util/err.h"

struct event_base;

typedef struct er_dispatcher er_dispatcher;

typedef struct er_dispatcher_config {
    const char *node_id;  /* lease_owner of the jobs it leases; copied */
    int64_t discover_ms;  /* how often queue settings are re-read (0: 1000) */
    int max_inflight;     /* requests at once on this node, all queues (0: 64) */
    size_t result_max;    /* largest 2xx body kept as the result (the payload limit) */
} er_dispatcher_config;

/* Starts discovery and delivery on `base`, through `engine` (borrowed:
 * outlives the dispatcher). Returns 0 and *out, or ER_ENOMEM /
 * ER_EINTERNAL (libcurl) with *err. */
int er_dispatcher_start(struct event_base *base, er_engine *engine,
                        const er_dispatcher_config *cfg, er_dispatcher **out, er_error *err);

/* Stops leasing; requests in flight get up to grace_ms to finish (their
 * outcomes acked), then are cut and their jobs released. on_stopped(arg)
 * runs on the loop once nothing is in flight and every ack was answered
 * (possibly before this returns when nothing was). Call before
 * er_engine_drain, so the acks still go through. */
void er_dispatcher_stop(er_dispatcher *d, int64_t grace_ms, void (*on_stopped)(void *arg),
                        void *arg);

typedef struct er_dispatcher_stats {
    uint64_t requests;        /* responses and connection errors, all queues */
    uint64_t by_class[5];     /* indexed by er_http_class */
    uint64_t released;        /* cut at shutdown */
    int64_t inflight;         /* requests now */
    size_t queues;            /* dispatch queues known */
} er_dispatcher_stats;

void er_dispatcher_get_stats(const er_dispatcher *d, er_dispatcher_stats *out);

/* Frees the dispatcher (after on_stopped ran, or on a start-up error
 * path; requests still in flight are cut without acks). NULL-safe. */
void er_dispatcher_free(er_dispatcher *d);

#endif
