/* SPDX-License-Identifier: MIT
 *
 * Internals shared by the HTTP frontend's files: the server struct, the
 * per-request context and its pool (http.c), the route table and dispatch
 * (http_dispatch.c), the reply helpers (http_reply.c) and the request
 * parsing helpers (http_parse.c). Nothing outside src/server includes this.
 * A handler either replies at once or submits one engine request whose
 * finish callback replies; it never does both.
 */
#ifndef ER_SERVER_HTTP_INTERNAL_H
#define ER_SERVER_HTTP_INTERNAL_H

#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "util/jsonw.h"
#include "server/http/server.h"
#include "util/clock.h"
#include "util/err.h"

struct evhttp;
struct evhttp_request;
struct evhttp_connection;
struct evhttp_bound_socket;
struct evkeyvalq;

#define ER_PARAM_MAX 255 /* decoded path parameter, bytes */
#define ER_HTTP_CTX_CACHE 1024
#define ER_HTTP_MAX_HEADERS 16384 /* libevent's limit on a request's header lines */
#define ER_HTTP_OPEN_BODY_MAX 4096 /* a body an open route reads (the login form) */
/* An error body: {"error":{...}} with its message and field escaped. */
#define ER_HTTP_ERROR_BODY_MAX (64 + 6 * ER_MESSAGE_MAX + 6 * ER_FIELD_MAX)

/* Who may call a route. */
typedef enum er_access {
    ER_ACCESS_OPEN,    /* no auth (health probes) */
    ER_ACCESS_READ,    /* any role, viewer included */
    ER_ACCESS_PRODUCE, /* producer or admin */
    ER_ACCESS_WORK,    /* worker or admin */
    ER_ACCESS_ADMIN,   /* admin */
    ER_ACCESS_UI,      /* a dashboard page: a session (or no tokens configured); without
                          one, a redirect to the login page */
} er_access;

typedef struct er_hctx er_hctx;
typedef void (*er_route_fn)(er_hctx *c);
/* Formats the reply of a finished engine request (c is live). */
typedef void (*er_finish_fn)(er_hctx *c, er_req *r);

typedef struct er_route {
    int method;          /* EVHTTP_REQ_* */
    const char *pattern; /* "/v1/queues/{queue}/jobs": one {queue}, {key}, {name} or {id} at most */
    er_access access;
    er_route_fn fn;
    int flags;           /* handler-specific (e.g. which ack kind) */
    const char *audit;   /* an administrative action: its audit row's action, written
                            with the request's transaction (er_http_submit); NULL: none */
} er_route;

/* The route table (http_dispatch.c). */
extern const er_route er_routes[];
extern const size_t er_nroutes;

/* The per-request context: from the evhttp callback until the reply. Pooled
 * by the server; never outlives it (er_server_free requires a drained engine). */
struct er_hctx {
    er_server *s;
    struct evhttp_request *req; /* NULL once libevent freed it (connection freed) */
    int route;                  /* index in er_routes, or er_nroutes when unmatched */
    int flags;                  /* the route's flags */
    char param[ER_PARAM_MAX + 1]; /* decoded {queue}, {key}, {name} or {id} */
    const char *query;          /* raw query string or NULL; handler only */
    er_finish_fn finish;
    er_req *ereq;               /* while parked: the engine's request (not ours) */
    struct event *closed_ev;    /* a parked long-poll: fires when the client hangs up */
    bool orphan;                /* connection gone, request detached: free it ourselves */
    bool parked;                /* waiting for the engine */
    bool sending;               /* reply handed to libevent, not yet written */
    int64_t started_ms;         /* monotonic, when the request arrived (access log) */
    /* Who made the request, set by dispatch before the handler runs (and
     * before a 403): role and token name. {ER_ROLE_NONE, ""} until then,
     * for a refused (401) token, an open route, or when no tokens are
     * configured. Handlers read it, never change it. */
    er_caller caller;
    /* the matched route's path parameter, raw (borrowed from the request's URI) */
    const char *pv, *pname;
    size_t pl;
    /* who is calling as audit rows name it: "admin", "admin:NAME", "open" */
    char who[80];
    bool by_session;            /* authorized by a dashboard session cookie */
    char sid_hash[65];          /* by_session: the session's hash */
    er_session session;         /* by_session: the session (caller.name points into it) */
    struct er_stream *stream;   /* a streamed reply being written (http_reply.c) */
    er_hctx *next_free;
};

struct er_server {
    struct event_base *base;
    er_engine *engine;
    er_dispatcher *dispatcher; /* for /metrics; NULL when none */
    struct er_faktory *faktory; /* the worker routes; NULL when no Faktory port */
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    const er_token *tokens;
    size_t ntokens;
    size_t max_body;
    size_t payload_max;
    er_outbox *outbox; /* NULL when no relay runs */
    FILE *access_log;       /* --access-log, NULL when off; flushed every second */
    struct event *access_flush;
    uint64_t auth_failures; /* refused tokens since the last log line */
    int64_t auth_log_next;  /* monotonic ms: the next such line may be written */
    int port;
    /* the dashboard (routes_ui.c): Host values a cookie is accepted with */
    char host_self[80];         /* "127.0.0.1:7400", the listen address */
    bool host_loopback;         /* localhost, 127.0.0.1 and [::1] with the port too */
    char **allowed_hosts;            /* --allowed-hosts names (owned) */
    size_t nallowed_hosts;
    int64_t ui_idle_ms;         /* a session ends after this long unused */
    bool accepting;
    size_t inflight;
    er_rand rand;
    er_hctx *free_ctx;
    size_t nfree;
    char *wbuf;        /* reply writer buffer, reused (NULL while lent out) */
    size_t wcap;
    int64_t date_secs; /* the second date[] shows */
    char date[32];     /* Date header value, "Sun, 06 Nov 1994 08:49:37 GMT" */
    /* requests answered, by route (last row: unmatched) and status class 1xx..5xx */
    uint64_t *http_counts; /* (er_nroutes + 1) * 5 */
    /* the queue sampler of /metrics (metrics.c) */
    struct event *sample_ev;
    bool sampling;          /* a sample is in flight */
    int64_t sample_started; /* monotonic ms */
    int64_t sample_next;    /* monotonic ms: the next sample may start */
    int64_t sample_ms;      /* how long the last one took */
    /* connections (http_conn.c) */
    struct er_conn **conns; /* by socket; NULL where none */
    size_t conns_cap;
    size_t nconns;          /* open client connections */
    size_t max_connections;
    int64_t head_timeout_ms;
    size_t body_min_rate;   /* bytes a second after the first; 0: no minimum */
    size_t body_budget;     /* --max-body-in-flight */
    size_t body_inflight;   /* bytes of bodies announced by requests being read */
    struct event *accept_ev; /* accepting again after a failed accept */
    int64_t accept_backoff_ms;
    uint64_t accept_failures; /* since the last log line */
    int64_t accept_log_next;
    uint64_t conns_refused;   /* past --max-connections, since the last log line */
    int64_t refuse_log_next;
    er_server *next_server;   /* the servers of this process (accept errors find theirs) */
};

/* ---- request contexts (http.c) ---- */

/* A context from the server's pool (or malloc'd), reset, its route
 * "unmatched"; NULL on ENOMEM. */
er_hctx *er_http_ctx_get(er_server *s);
/* Ends the request in flight: gives c back to the pool (or frees it). */
void er_http_ctx_release(er_hctx *c);

/* ---- connections (http_conn.c) ---- */

/* Watches every connection evhttp accepts (its own bufferevent): refuses
 * those past max_connections, holds each request head until it is whole,
 * checks route, token and Content-Length before libevent reads a body,
 * bounds the bodies in flight, the head's time and the body's rate; backs
 * off when accept fails. Call after s->http exists, before binding. */
int er_http_conn_init(er_server *s, er_error *err);
/* After binding: a failed accept (EMFILE) pauses accepting for a while. */
void er_http_conn_listen(er_server *s);
/* Frees what er_http_conn_init made; after evhttp_free. */
void er_http_conn_fini(er_server *s);
/* The request's head and body are in: dispatch starts. */
void er_http_conn_request(er_server *s, struct evhttp_request *req);
/* The reply was written: the connection waits for its next head. */
void er_http_conn_next(er_server *s, struct evhttp_connection *evcon);
/* Who to tell when evcon closes (one callback a connection, as
 * evhttp_connection_set_closecb; NULL clears it). */
void er_http_conn_set_closecb(er_server *s, struct evhttp_connection *evcon,
                              void (*cb)(struct evhttp_connection *, void *), void *arg);

/* Header entries of a head kept in the head itself; more are allocated. */
#define ER_HTTP_HEAD_SLOTS 32

/* A request head as http_conn.c reads it before evhttp does. */
typedef struct er_http_head {
    int method;             /* EVHTTP_REQ_* */
    int major, minor;       /* HTTP/1.x */
    const char *target;     /* the request target (borrowed from the parsed text) */
    struct evhttp_uri *uri; /* the target parsed by libevent (owned) */
    /* in order, names and values borrowed from the parsed text; the
     * entries are slots[] first, then allocated ones */
    struct evkeyvalq headers;
    struct evkeyval slots[ER_HTTP_HEAD_SLOTS];
} er_http_head;

/* Parses a whole request head h[0..len) (its blank line included; h is
 * changed in place, and must outlive *out) as libevent would, but refusing
 * a folded header line: NULL, or why it is refused (static text). Either
 * way *out is filled as far as it got and needs er_http_head_fini. */
const char *er_http_head_parse(char *h, size_t len, er_http_head *out);
void er_http_head_fini(er_http_head *h);

/* The route of method and path: its index, and its path parameter (raw,
 * borrowed from path); -1 when none, with allow[] naming the methods the
 * path takes ("" when the path matches no route). */
int er_http_route_find(int method, const char *path, char allow[64], const char **pv, size_t *pl,
                       const char **pname);
/* Framing a proxy in front of errand might read otherwise: NULL when
 * none, else why the request is refused (static text). */
const char *er_http_framing_problem(const struct evkeyvalq *h, int major, int minor);
/* One log line a second at most for refused tokens, with how many were
 * refused since the last line; the token itself is never logged. */
void er_http_log_auth_failure(er_server *s, const char *peer, unsigned port, const er_route *rt,
                              const er_error *err);

/* The evhttp callback of every request (arg: the server). */
void er_http_on_request(struct evhttp_request *req, void *arg);

/* ---- replies (http_reply.c); each one ends the request and releases c ---- */

/* Sends `body` (takes the reference; NULL means out of memory -> 503). */
void er_http_reply_json(er_hctx *c, int status, json_t *body);
/* Starts a reply writer on the server's reusable buffer (loop thread). */
void er_http_jsonw_init(er_hctx *c, er_jsonw *w);
/* Replies with what w holds (503 when it failed) and finalizes w (its
 * buffer goes back to the server for the next reply). */
void er_http_reply_jsonw(er_hctx *c, int status, er_jsonw *w);
/* Replies 200 {"jobs": [r's jobs], ...rest}: the jobs in their lease view
 * (lease) or their full view for the caller's role; rest (NULL: none) an
 * object of the other members, finalized here. A reply whose jobs could
 * pass ER_HTTP_STREAM_MIN bytes (er_job_reply_bytes) to an HTTP/1.1 GET
 * or POST is streamed: chunked, its jobs taken from r and written a slice
 * (ER_HTTP_STREAM_SLICE bytes or so) a loop turn, the next one when the
 * connection's output has drained, so big replies never hold the event
 * loop; a smaller one is written whole with a Content-Length. */
void er_http_reply_jobs(er_hctx *c, er_req *r, bool lease, er_jsonw *rest);
#ifndef ER_HTTP_STREAM_MIN /* a build may move it (bench/README.md measures one without) */
#define ER_HTTP_STREAM_MIN ((size_t)2 << 20)
#endif
#define ER_HTTP_STREAM_SLICE ((size_t)128 * 1024)
/* Frees a streamed reply's state (er_http_ctx_release). */
void er_http_stream_free(er_hctx *c);
/* Sends {"error":{code,message,field}} with the code's HTTP status. */
void er_http_reply_error(er_hctx *c, const er_error *err);
/* Sends that error body with any status (the 405 of dispatch); strings
 * copied, a message or field over its limit is left out. */
/* "GET", "POST", ... for an evhttp command. */
const char *er_http_method_name(int m);
void er_http_send_error(er_hctx *c, int status, const char *code_name, const char *message,
                        const char *field);
/* Appends one access-log line (s->access_log is open); uri borrowed. */
void er_http_access_line(er_server *s, struct evhttp_connection *evcon, int method,
                         const char *uri, er_caller caller, int status, size_t bytes,
                         int64_t started_ms);
/* The Date header's value for this second (loop thread; borrowed until
 * the next call). */
const char *er_http_date(er_server *s);
/* Writes that error body into body[ER_HTTP_ERROR_BODY_MAX]; returns its length. */
size_t er_http_error_body(char *body, const char *code_name, const char *message,
                          const char *field);
/* Builds an error and sends it. */
void er_http_fail(er_hctx *c, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The error of a failed engine request (r->rc != 0). */
void er_http_reply_req_error(er_hctx *c, const er_req *r);
/* Sends a text body with a content type (used by /metrics). text NULL: the
 * caller already wrote the body into the request's output buffer. */
void er_http_reply_text(er_hctx *c, int status, const char *content_type, const char *text,
                        size_t len);

/* Hands r to the engine; `finish` formats the reply when it is done. Takes r.
 * On an administrative route (er_route.audit) it attaches the audit row
 * first (who: c->who; which: c->param). */
void er_http_submit(er_hctx *c, er_req *r, er_finish_fn finish);

/* ---- request parsing (http_parse.c) ---- */

/* Parses the body as a JSON object (Content-Type checked). Returns 0 and a
 * new reference in *out, or replies with the error and returns < 0. */
int er_http_body_object(er_hctx *c, json_t **out);
/* The two halves of er_http_body_object: the size and Content-Type checks,
 * giving the body as one contiguous piece (borrowed until the reply), and
 * its parse. Each replies with the error and returns < 0 on failure. */
int er_http_body_text(er_hctx *c, const char **data, size_t *len);
int er_http_body_parse(er_hctx *c, const char *data, size_t len, json_t **out);

/* Fails with ER_EINVAL naming prefix+key for the first key of obj not in
 * `allowed` (NULL-terminated). */
int er_json_check_keys(const json_t *obj, const char *const *allowed, const char *prefix,
                       er_error *err);
/* Reads an optional integer member in [min, max]; *out untouched when absent.
 * Returns 1 when present, 0 when absent, ER_EINVAL (naming prefix+key). */
int er_json_get_int(const json_t *obj, const char *key, int64_t min, int64_t max,
                    const char *prefix, int64_t *out, er_error *err);
/* Reads a required string member and checks it with er_id_validate. */
int er_json_get_id(const json_t *obj, const char *key, const char *prefix, const char **out,
                   er_error *err);
/* Serializes any JSON value to compact text (owned; NULL on ENOMEM). Fails
 * with ER_ETOOBIG when longer than max. */
int er_json_to_text(const json_t *v, size_t max, const char *field, char **out, er_error *err);

/* Query string: calls fn for each key=value (both decoded, NUL-terminated
 * in a scratch buffer). Stops at the first nonzero return. Returns 0, fn's
 * value, or ER_EINVAL for bad encoding. */
int er_query_foreach(const char *query, int (*fn)(void *arg, const char *k, const char *v),
                     void *arg, er_error *err);
/* The largest `limit` of a list (jobs, dead letters, schedulers). */
#define ER_HTTP_LIST_LIMIT_MAX 1000

/* A decimal query value lo..hi into *out, or ER_EINVAL naming the key
 * ("<key> must be lo..hi"). */
int er_query_int(const char *key, const char *v, int lo, int hi, int *out, er_error *err);
/* Refuses a query parameter a route does not take: ER_EINVAL naming it. */
int er_query_unknown(const char *key, er_error *err);
/* Percent-decodes src[0..n) into dst (cap includes the NUL), '+' as a space
 * when plus_space. Returns the length, or -1 on a bad escape, an embedded
 * NUL or overflow. */
long er_http_pct_decode(const char *src, size_t n, bool plus_space, char *dst, size_t cap);

/* ---- handlers ---- */
void er_route_healthz(er_hctx *c);
void er_route_readyz(er_hctx *c);
void er_route_metrics(er_hctx *c);
/* The sampler's timer (every 250 ms): starts a sample of the store's
 * queues when one is due and this node is the maintenance leader. */
void er_metrics_sample_tick(er_server *s);

void er_route_enqueue(er_hctx *c);
void er_route_fetch(er_hctx *c);
void er_route_heartbeat(er_hctx *c);
void er_route_ack_one(er_hctx *c); /* flags: er_ack_kind */
void er_route_acks(er_hctx *c);
void er_route_get_job(er_hctx *c);
void er_route_cancel_job(er_hctx *c);

void er_route_list_queues(er_hctx *c);
void er_route_get_queue(er_hctx *c);
void er_route_list_jobs(er_hctx *c);
void er_route_put_queue(er_hctx *c);
void er_route_pause_queue(er_hctx *c); /* flags: 1 pause, 0 resume */
void er_route_list_dead(er_hctx *c);
void er_route_redrive(er_hctx *c);
void er_route_delete_dead(er_hctx *c);

/* routes_sched.c: schedulers, cron, run-once leases, cursors */
void er_route_cron_next(er_hctx *c);
void er_route_list_schedulers(er_hctx *c);
void er_route_put_scheduler(er_hctx *c);
void er_route_get_scheduler(er_hctx *c);
void er_route_delete_scheduler(er_hctx *c);
void er_route_trigger_scheduler(er_hctx *c);
void er_route_list_leases(er_hctx *c);
void er_route_lease_acquire(er_hctx *c);
void er_route_lease_op(er_hctx *c); /* flags: ER_REQ_LEASE_RENEW / _COMPLETE / _RELEASE */
void er_route_list_cursors(er_hctx *c);
void er_route_get_cursor(er_hctx *c);
void er_route_put_cursor(er_hctx *c);

/* ---- auth (auth.c) ---- */

/* Checks the Authorization header against the configured tokens for the
 * access level. Sets *who to the matching token's role and name (borrowed
 * from s->tokens), also on ER_EPERM; to {ER_ROLE_NONE, ""} when no token is
 * checked (an open route, no tokens configured) or none matched. Returns 0,
 * ER_EAUTH or ER_EPERM with *err. */
int er_http_authorize(const er_server *s, const char *authorization, er_access access,
                      er_caller *who, er_error *err);
/* The configured token given as len bytes (compared in constant time with
 * every token; borrowed from s), NULL when none. */
const er_token *er_http_token_find(const er_server *s, const char *tok, size_t len);
/* Whether `role` may call a route of `access`. */
bool er_http_role_allows(er_role role, er_access access);

/* ---- the dashboard (routes_ui.c) ---- */

/* True when the request's Host is this server's (the listen address, on
 * loopback also localhost, 127.0.0.1 and [::1] with its port, or a
 * --allowed-hosts name with any port). */
bool er_host_ok(const er_server *s, struct evhttp_request *req);
/* True when the request has no Origin header, or its Origin is
 * http(s)://<Host> and Host passes er_host_ok. */
bool er_ui_origin_ok(const er_server *s, struct evhttp_request *req);
/* The same over a header list. */
bool er_ui_cookie_headers(const struct evkeyvalq *h, char sid[65]);
/* The session id of the request's errand_session cookie into sid[65]
 * (64 hex characters); false when there is none or it is malformed. */
bool er_ui_cookie(struct evhttp_request *req, char sid[65]);
/* The same for one Cookie header's value: the first errand_session pair
 * whose value is 64 lowercase hex digits (spaces around pairs ignored). */
bool er_ui_cookie_in(const char *value, char sid[65]);
/* hex(SHA-256(sid)) into out[65]. */
void er_ui_hash(const char *sid, char out[65]);
/* Sends 303 to `location` (a path of this server). */
void er_ui_redirect(er_hctx *c, const char *location);
/* Sets c->who from c->caller: "ROLE@NAME", "ROLE" for an unnamed token,
 * "open" when no tokens are configured. */
void er_http_set_who(er_hctx *c);
/* A new audit row for this caller (who from c), action and target copied;
 * NULL on ENOMEM. */
er_audit *er_http_audit_new(const er_hctx *c, const char *action, const char *target,
                            int64_t count);
/* Attaches an audit row to r (written in r's transaction when it succeeds).
 * 0, or ER_ENOMEM (r untouched). */
int er_http_audit(const er_hctx *c, er_req *r, const char *action, const char *target);

void er_route_ui_page(er_hctx *c);   /* flags: which page */
void er_route_ui_asset(er_hctx *c);
void er_route_ui_login(er_hctx *c);
void er_route_ui_logout(er_hctx *c);
void er_route_ui_session(er_hctx *c);
void er_route_list_audit(er_hctx *c);
/* routes_bulk.c */
void er_route_bulk(er_hctx *c);
void er_route_list_workers(er_hctx *c);
void er_route_signal_worker(er_hctx *c); /* flags: 0 quiet, 1 terminate */

#endif
