/* SPDX-License-Identifier: MIT
 *
 * The Faktory Work Protocol frontend (docs/faktory.md): a TCP listener on
 * the engine's event loop whose connections speak protocol version 2, and
 * the registry of the worker processes that said HELLO with a wid. It only
 * reads commands into core specs and formats the engine's answers; every
 * rule about jobs lives in src/core and the stores. Loop thread only.
 */
#ifndef ER_SERVER_FAKTORY_FAKTORY_H
#define ER_SERVER_FAKTORY_FAKTORY_H

#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "engine/engine.h"
#include "server/http/server.h"
#include "util/err.h"

struct event_base;

typedef struct er_faktory er_faktory;

typedef struct er_faktory_config {
    const char *listen;      /* "HOST:PORT"; port 0 picks a free port */
    const er_token *tokens;  /* borrowed for the frontend's life; HELLO passwords */
    size_t ntokens;
    size_t line_max;         /* longest command line (bytes) */
    size_t payload_max;      /* one job's serialized args */
    int max_connections;
    int64_t reserve_min_ms;  /* reserve_for's floor; 0: ER_FK_RESERVE_MIN_MS (60 s) */
    int prefetch;            /* most jobs a FETCH leases to its wid, 1..256 (1: none);
                                0: ER_FK_PREFETCH_DEFAULT */
    const char *node_id;     /* this server in the worker registry; NULL: "errand" */
    /* TLS (both or neither; NULL: plain TCP): a PEM certificate chain and
     * its private key, read once at start */
    const char *tls_cert, *tls_key;
} er_faktory_config;

#define ER_FK_PREFETCH_DEFAULT 32

/* Binds and starts serving. Refuses (ER_EINVAL) a non-loopback address with
 * no tokens, as the HTTP listener does, and TLS files that cannot be used
 * (field "faktory-tls-cert" or "faktory-tls-key"): one without the other,
 * an unreadable or malformed file, a key that is not the certificate's. Logs {"msg":"faktory listening",
 * "listen":"HOST:PORT"} with the real port. Returns 0 and *out, or a
 * negative code with *err. */
int er_faktory_start(struct event_base *base, er_engine *engine, const er_faktory_config *cfg,
                     er_faktory **out, er_error *err);

/* The TLS rules of er_faktory_start for cert and key (NULL: not given),
 * without listening: 0 when both are usable or neither is given. */
int er_faktory_tls_check(const char *cert, const char *key, er_error *err);

/* The bound port. */
int er_faktory_port(const er_faktory *f);

/* Stops accepting connections (shutdown); open ones keep being served. */
void er_faktory_stop_accepting(er_faktory *f);

/* Closes every connection and frees the frontend. NULL-safe. */
void er_faktory_free(er_faktory *f);

/* ---- worker processes (BEAT) ----
 * The registry is the store's (one row per wid, shared by every server of
 * the store: ER_REQ_WORKER_*); this node keeps what is per connection (its
 * connections, the wid's prefetch) and writes the beats it sees every
 * ER_FK_BEAT_FLUSH_MS. */

#define ER_FK_WORKER_TTL_MS 60000 /* a worker without a beat this long is reaped */

typedef enum er_fk_signal {
    ER_FK_RUN = ER_WORKER_RUN,
    ER_FK_QUIET = ER_WORKER_QUIET,         /* fetch no more jobs, finish the ones running */
    ER_FK_TERMINATE = ER_WORKER_TERMINATE, /* stop */
} er_fk_signal;

/* "", "quiet", "terminate". */
const char *er_fk_signal_name(er_fk_signal s);

typedef struct er_fk_worker_view {
    char wid[ER_NAME_MAX + 1];
    char hostname[ER_NAME_MAX + 1];
    int64_t pid;
    int64_t started_at;  /* first HELLO (ms) */
    int64_t last_beat;   /* last HELLO or BEAT on this node (ms) */
    er_fk_signal signal;  /* what the next BEAT tells it */
    char current_state[16]; /* what its last BEAT said ("", "quiet", "terminate") */
    int64_t rss_kb;       /* -1 when never told */
    int connections;      /* open connections with this wid now */
} er_fk_worker_view;

/* The workers seen within the last 60 s on this node, into *out (returns
 * owned: free()) and *n. f NULL: none. 0 or ER_ENOMEM. */
int er_faktory_workers(const er_faktory *f, er_fk_worker_view **out, size_t *n);

/* wid's labels as its HELLO here gave them (JSON text, borrowed until the
 * loop runs again), or NULL. */
const char *er_faktory_worker_labels(er_faktory *f, const char *wid);

/* This node's name in the registry ("errand" when f is NULL). */
const char *er_faktory_node(const er_faktory *f);

/* Sends the beats not yet written to the store now (before a signal, so
 * the store knows a worker that just said HELLO here). NULL-safe. */
void er_faktory_flush_beats(er_faktory *f);

/* A signal the store holds for wid (as an ER_REQ_WORKER_SIGNAL answered):
 * the next BEAT here says it, its FETCHes here get nothing, and its
 * buffered jobs here are released. NULL-safe; a wid unknown here is
 * ignored. */
void er_faktory_worker_signalled(er_faktory *f, const char *wid, er_fk_signal s);

#endif
