/* SPDX-License-Identifier: MIT
 *
 * The HTTP/JSON frontend (API.md) on libevent's evhttp. It only parses
 * requests into engine requests and formats the answers; every rule about
 * jobs lives in src/core and the stores. Runs on the event-loop thread.
 */
#ifndef ER_SERVER_SERVER_H
#define ER_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/dispatcher.h"
#include "engine/engine.h"
#include "engine/outbox_relay.h"
#include "util/err.h"

struct event_base;

/* ER_ROLE_NONE: nobody authenticated (no tokens configured, or an open
 * route); such a caller is let through and sees everything. */
typedef enum er_role {
    ER_ROLE_NONE = 0,
    ER_ROLE_PRODUCER = 1,
    ER_ROLE_WORKER = 2,
    ER_ROLE_ADMIN = 3,
    ER_ROLE_VIEWER = 4, /* every read; job payloads and results shown as null */
} er_role;

#define ER_TOKEN_NAME_MAX 64 /* a token's name: 1..64 chars of [A-Za-z0-9._-] */

typedef struct er_token {
    er_role role;
    char name[ER_TOKEN_NAME_MAX + 1]; /* "" for an unnamed token */
    char token[128];
} er_token;

/* Who made a request: the role and name of the token that matched. */
typedef struct er_caller {
    er_role role;     /* ER_ROLE_NONE when no token was checked */
    const char *name; /* borrowed from the server's tokens (valid for the
                         server's life); "" when unnamed or unauthenticated,
                         never NULL */
} er_caller;

/* Parses "ROLE:TOKEN" or "ROLE@NAME:TOKEN" (role producer|worker|admin|viewer,
 * NAME 1..64 chars of [A-Za-z0-9._-], token 16..127 chars of
 * [A-Za-z0-9._~+/=-]). Returns 0 or ER_EINVAL with *err, whose message
 * never holds any part of the spec. */
int er_token_parse(const char *spec, er_token *out, er_error *err);

/* "producer", "worker", "admin", "viewer"; "" for ER_ROLE_NONE. Static text. */
const char *er_role_name(er_role role);

typedef struct er_server_config {
    const char *listen;        /* "HOST:PORT"; port 0 picks a free port */
    const er_token *tokens;    /* borrowed for the server's life */
    size_t ntokens;
    size_t max_body;           /* request body limit in bytes */
    size_t payload_max;        /* one job's serialized payload limit */
    int max_connections;
    er_outbox *outbox;         /* the outbox relay, for /readyz and /metrics; NULL: none */
    const char *access_log;    /* a file to append one JSON line a request to; NULL: off */
    const char *ui_hosts;      /* comma-separated Host names the dashboard answers to beside
                                  the listen address; NULL: none */
    int64_t ui_session_idle_ms; /* a dashboard session ends after this long unused; 0: 12 h */
} er_server_config;

#define ER_UI_SESSION_IDLE_DEFAULT_MS (12LL * 3600000)

/* Checks a --ui-host list as er_server_start would (comma-separated host
 * names of A-Z a-z 0-9 . -, 1..253 characters each): 0 or ER_EINVAL. */
int er_server_check_ui_hosts(const char *list, er_error *err);

typedef struct er_server er_server;

/* Binds and starts serving. Refuses (ER_EINVAL) a non-loopback address with
 * no tokens. Logs {"msg":"listening","listen":"HOST:PORT"} with the real port.
 * Returns 0 and *out, or a negative code with *err. */
int er_server_start(struct event_base *base, er_engine *engine, const er_server_config *cfg,
                    er_server **out, er_error *err);

/* Shows d's counters on /metrics (borrowed: outlives the server, or is
 * unset with NULL first). */
void er_server_set_dispatcher(er_server *s, er_dispatcher *d);

/* Serves the worker routes (/v1/workers) from f's registry (borrowed:
 * outlives the server, or is unset with NULL first). NULL: no Faktory
 * port, so no workers. */
struct er_faktory;
void er_server_set_faktory(er_server *s, struct er_faktory *f);

/* The bound port (useful with port 0). */
int er_server_port(const er_server *s);

/* Stops accepting new connections; /readyz answers 503 from now on.
 * Requests already received are still answered. */
void er_server_stop_accepting(er_server *s);

/* Number of requests received and not yet answered. */
size_t er_server_inflight(const er_server *s);

/* Closes every connection and frees the server. NULL-safe. */
void er_server_free(er_server *s);

#endif
