/* SPDX-License-Identifier: MIT
 *
 * liberrand: the C client of the errand job server (docs/api.md). This header
 * is the whole public contract: an opaque client that speaks the HTTP/JSON
 * API over one kept-alive connection, a generic request call and typed
 * helpers for the common calls. JSON goes in and comes out as text, so the
 * application may use any JSON library. The library never prints and never
 * exits; it reports through return values and errand_last_error().
 */
#ifndef ERRAND_ERRAND_H
#define ERRAND_ERRAND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ERRAND_API __attribute__((visibility("default")))
#else
#define ERRAND_API
#endif

#define ERRAND_VERSION_MAJOR 0
#define ERRAND_VERSION_MINOR 1
#define ERRAND_VERSION_PATCH 0
#define ERRAND_VERSION_STRING "0.1.0"

/* Every function that can fail returns 0 or one of these negative codes.
 * -1..-12 mirror the server's error codes (the JSON "code" is in
 * parentheses); the others are found by the client itself. */
enum {
    ERRAND_OK = 0,
    ERRAND_EINVAL = -1,     /* invalid_argument (400), or a bad argument to this library */
    ERRAND_EAUTH = -2,      /* unauthenticated (401): missing or unknown token */
    ERRAND_EPERM = -3,      /* permission_denied (403): the token's role may not do this */
    ERRAND_ENOTFOUND = -4,  /* not_found (404) */
    ERRAND_ESTALE = -5,     /* lease_lost (409): the lease expired or moved */
    ERRAND_ECONFLICT = -6,  /* conflict (409) */
    ERRAND_ETOOBIG = -7,    /* payload_too_large (413), or a reply above the client's limit */
    ERRAND_ERATE = -8,      /* rate_limited (429) */
    ERRAND_EUNAVAIL = -9,   /* unavailable (503): store down, nothing was written */
    ERRAND_EFULL = -10,     /* disk full (the server reports it as unavailable, 503) */
    ERRAND_ENOMEM = -11,    /* out of memory in this process */
    ERRAND_EINTERNAL = -12, /* internal (500), or a reply this library cannot read */
    ERRAND_ECONNECT = -20,  /* cannot reach the server: refused, unresolvable, reset, timed out */
};

/* A client: one server URL, one token, one reused connection. Opaque. */
typedef struct errand_client errand_client;

/* What went wrong in the last call on a client. For an error reply the
 * fields come from the server's {"error": {"code", "message", "field"}}. */
typedef struct errand_error {
    int code;              /* ERRAND_E* of the last call, 0 when it succeeded */
    long http_status;      /* HTTP status of the last reply, 0 when none arrived */
    const char *code_name; /* "invalid_argument", ... ; "connect_failed" for
                            * ERRAND_ECONNECT; "" when the call succeeded */
    const char *message;   /* one line, "" when none */
    const char *field;     /* the offending request field, "" when none */
} errand_error;

/* Creates a client for `server_url` ("http://HOST:PORT" or https://; a
 * trailing '/' is ignored) that sends `token` as "Authorization: Bearer
 * TOKEN" (NULL or "" sends no token). Both strings are copied. No network
 * I/O happens here; the connection opens on the first request.
 * Returns 0 and *out (free with errand_client_free), ERRAND_EINVAL for a
 * URL that is not http(s) or a token with control characters, or
 * ERRAND_ENOMEM. Thread safety: may be called from any thread. */
ERRAND_API int errand_client_new(const char *server_url, const char *token, errand_client **out);

/* Closes the connection and frees the client. NULL does nothing. */
ERRAND_API void errand_client_free(errand_client *c);

/* Sets the time limits of every later request: connect_ms to open the
 * connection (default 10000) and total_ms for the whole exchange (default
 * 120000, above the server's longest long-poll; 0 = no limit). Returns 0 or
 * ERRAND_EINVAL for a negative value. */
ERRAND_API int errand_client_set_timeouts(errand_client *c, long connect_ms, long total_ms);

/* Sets the largest reply body the client accepts (default 64 MiB); a longer
 * reply fails the call with ERRAND_ETOOBIG. Returns 0 or ERRAND_EINVAL for 0. */
ERRAND_API int errand_client_set_max_reply(errand_client *c, size_t bytes);

/* Sends one request and waits for the reply.
 * method: "GET", "POST", "PUT" or "DELETE" (copied). path: starts with '/',
 * query string included, already percent-encoded (copied). json_body: sent
 * as application/json; NULL sends no body (copied).
 * On return 0 a reply arrived, whatever its status: *status (when not NULL)
 * is the HTTP status and *body_out (when not NULL) returns owned the reply
 * body, NUL-terminated, "" when empty (free with errand_free). When the status
 * is 400 or more, errand_last_error() also describes the server's error.
 * On a negative return no reply arrived (ERRAND_EINVAL for bad arguments,
 * ERRAND_ECONNECT, ERRAND_ETOOBIG, ERRAND_ENOMEM) and *status and *body_out
 * are untouched.
 * Blocking: up to the client's timeouts. Thread safety: a client is used by
 * one thread at a time; different clients may be used in parallel. */
ERRAND_API int errand_request(errand_client *c, const char *method, const char *path,
                              const char *json_body, long *status, char **body_out);

/* The typed helpers below share these rules. They block up to the client's
 * timeouts and use a client from one thread at a time. They return 0 on a
 * 2xx reply; otherwise the negative code of the server's error (or of the
 * transport) and errand_last_error() says why, and *..._out is untouched.
 * On success *..._out returns owned JSON text (free with errand_free).
 * String arguments are copied. */

/* Enqueues one job (POST /v1/queues/{queue}/jobs).
 * queue, name: required. payload_json: any JSON value as text, or NULL for
 * {} . options_json: NULL, or a JSON object of further enqueue fields ("id",
 * "delay_ms" or "run_at", "priority", "max_attempts", "backoff",
 * "timeout_ms", "group", "trace_id", "idempotency_key"); it may not contain
 * "name" or "payload". Text that is not valid JSON fails with ERRAND_EINVAL
 * (field "payload" or "options") before anything is sent.
 * *job_json_out: the stored job object. When a job with the given id already
 * existed nothing changed, the existing job is returned and
 * errand_last_status() is 200 (a new job: 201). */
ERRAND_API int errand_enqueue(errand_client *c, const char *queue, const char *name,
                              const char *payload_json, const char *options_json,
                              char **job_json_out);

/* Reads one job (GET /v1/jobs/{id}); *job_json_out: the job object.
 * ERRAND_ENOTFOUND when there is no such job. */
ERRAND_API int errand_job_get(errand_client *c, const char *id, char **job_json_out);

/* Lists the queues (GET /v1/queues); *json_out: the reply object
 * {"queues": [{"name", "counts", "oldest_waiting_age_ms", "paused",
 * "settings"}, ...]}. */
ERRAND_API int errand_queues(errand_client *c, char **json_out);

/* Lists dead letters, newest failure first (GET /v1/dead). queue: NULL for
 * every queue. limit: 0 for the server's default page size, else 1..1000.
 * *json_out: the reply object {"jobs": [...], "next_cursor": ...}. */
ERRAND_API int errand_dead_list(errand_client *c, const char *queue, int limit, char **json_out);

/* Redrives a dead job (POST /v1/dead/{id}/redrive, admin): the server
 * enqueues a copy with a new id. *json_out: the new job object.
 * ERRAND_ENOTFOUND when `id` is not a dead job. */
ERRAND_API int errand_dead_redrive(errand_client *c, const char *id, char **json_out);

/* The error of the last call on c (borrowed: valid until the next call on c
 * or errand_client_free). Never NULL for a non-NULL c. */
ERRAND_API const errand_error *errand_last_error(const errand_client *c);

/* The HTTP status of the last call's reply, 0 when none arrived. */
ERRAND_API long errand_last_status(const errand_client *c);

/* A short English description of an ERRAND_E* code (static string). */
ERRAND_API const char *errand_strerror(int code);

/* Frees memory this library returned. NULL does nothing. */
ERRAND_API void errand_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
