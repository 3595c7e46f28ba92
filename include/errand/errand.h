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
 * errand_last_status() is 200 (a new job: 201). When such a job finished
 * and retention deleted it but its id is still remembered (the server's
 * dedup window), nothing changed either: status 200 and *job_json_out is
 * the tombstone {"queue", "state", "finished_at"} (no "id", unlike a job). */
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

/* ---- more calls, one per API endpoint (docs/api.md) --------------------
 * Same rules as above. Arguments named *_json are JSON text, checked to
 * parse before anything is sent (ERRAND_EINVAL, field named); ids and queue
 * names are percent-encoded here. */

/* POST /v1/queues/{queue}/jobs {"jobs": jobs_json}: jobs_json is a JSON
 * array of job objects (each with "name"). *json_out: {"ids", "duplicates"}. */
ERRAND_API int errand_enqueue_bulk(errand_client *c, const char *queue, const char *jobs_json,
                                   char **json_out);

/* POST /v1/fetch with request_json (an object: "queues", "worker_id",
 * "max", "wait_ms", "lease_ms", "acks"). Blocks up to its wait_ms.
 * *json_out: the reply {"jobs": [...], "acks"?: [...]}. The worker runtime
 * below does this for you. */
ERRAND_API int errand_fetch(errand_client *c, const char *request_json, char **json_out);

/* POST /v1/jobs/{id}/heartbeat: extends the lease to now + extend_ms
 * (1000..86400000) and stores progress_json when not NULL.
 * *json_out (may be NULL): {"lease_expires_at"}. ERRAND_ESTALE: lease lost. */
ERRAND_API int errand_heartbeat(errand_client *c, const char *id, const char *lease_token,
                                long extend_ms, const char *progress_json, char **json_out);

/* POST /v1/jobs/{id}/complete with result_json (NULL: no result). */
ERRAND_API int errand_complete(errand_client *c, const char *id, const char *lease_token,
                               const char *result_json);

/* POST /v1/jobs/{id}/fail; error_json is the "error" object ({"class",
 * "message", "delay_ms"|"retry_after_ms", "backtrace"}). *json_out (may be
 * NULL): {"state", "run_at"?}. */
ERRAND_API int errand_fail(errand_client *c, const char *id, const char *lease_token,
                           const char *error_json, char **json_out);

/* POST /v1/jobs/{id}/release: back to waiting at once, attempt not counted. */
ERRAND_API int errand_release(errand_client *c, const char *id, const char *lease_token);

/* POST /v1/acks {"acks": acks_json}: many outcomes in one request.
 * *json_out: {"results": [...]}, one per item, in order. */
ERRAND_API int errand_acks(errand_client *c, const char *acks_json, char **json_out);

/* DELETE /v1/jobs/{id} (admin): cancels a scheduled or waiting job.
 * *json_out: the job. ERRAND_ECONFLICT when it is active or finished. */
ERRAND_API int errand_job_cancel(errand_client *c, const char *id, char **json_out);

/* GET /v1/queues/{queue}: *json_out is the queue object. */
ERRAND_API int errand_queue_get(errand_client *c, const char *queue, char **json_out);

/* GET /v1/queues/{queue}/jobs: state NULL = waiting; limit 0 = server
 * default; cursor NULL = first page. *json_out: {"jobs", "next_cursor"}. */
ERRAND_API int errand_queue_jobs(errand_client *c, const char *queue, const char *state,
                                 int limit, const char *cursor, char **json_out);

/* PUT /v1/queues/{queue} (admin) with settings_json (an object, merged
 * field by field). *json_out: {"settings": {...}}. */
ERRAND_API int errand_queue_settings(errand_client *c, const char *queue,
                                     const char *settings_json, char **json_out);

/* POST /v1/queues/{queue}/pause (paused != 0) or /resume (admin). */
ERRAND_API int errand_queue_pause(errand_client *c, const char *queue, int paused,
                                  char **json_out);

/* DELETE /v1/dead/{id} (admin). */
ERRAND_API int errand_dead_delete(errand_client *c, const char *id);

/* GET /healthz (ready == 0) or /readyz (ready != 0), no token needed:
 * 0 when the server answers 200; ERRAND_EUNAVAIL while it is not ready. */
ERRAND_API int errand_health(errand_client *c, int ready);

/* GET /metrics: *text_out is the Prometheus text. */
ERRAND_API int errand_metrics(errand_client *c, char **text_out);

/* Schedulers (API.md "Schedulers"): PUT /v1/schedulers/{key} with
 * spec_json; GET one (key) or all (key NULL); DELETE; POST .../trigger.
 * json_out may be NULL where a reply is not wanted. */
ERRAND_API int errand_scheduler_put(errand_client *c, const char *key, const char *spec_json,
                                    char **json_out);
ERRAND_API int errand_scheduler_get(errand_client *c, const char *key, char **json_out);
ERRAND_API int errand_scheduler_delete(errand_client *c, const char *key);
ERRAND_API int errand_scheduler_trigger(errand_client *c, const char *key, char **json_out);

/* Leases (API.md "Leases"): POST /v1/leases with request_json ({"type",
 * "code", "run_key", "ttl_ms"}), and renew / complete / release with an
 * owner token (ttl_ms only for renew). ERRAND_ECONFLICT when the key is
 * held or done (the reply body is in errand_last_error()'s message). */
ERRAND_API int errand_lease_acquire(errand_client *c, const char *request_json, char **json_out);
ERRAND_API int errand_lease_renew(errand_client *c, const char *owner_token, long ttl_ms,
                                  char **json_out);
ERRAND_API int errand_lease_complete(errand_client *c, const char *owner_token);
ERRAND_API int errand_lease_release(errand_client *c, const char *owner_token);

/* The error of the last call on c (borrowed: valid until the next call on c
 * or errand_client_free). Never NULL for a non-NULL c. */
ERRAND_API const errand_error *errand_last_error(const errand_client *c);

/* The HTTP status of the last call's reply, 0 when none arrived. */
ERRAND_API long errand_last_status(const errand_client *c);

/* A short English description of an ERRAND_E* code (static string). */
ERRAND_API const char *errand_strerror(int code);

/* ---- what an HTTP response means for a job -----------------------------
 * The classifier errand's HTTP dispatch uses (docs/api.md "HTTP dispatch"),
 * for a handler that calls an HTTP service itself and wants the same
 * mapping. */

enum {
    ERRAND_CLASS_SUCCESS = 0,     /* complete the job */
    ERRAND_CLASS_TRANSIENT = 1,   /* errand_job_fail_transient: backoff, attempt counted */
    ERRAND_CLASS_PERMANENT = 2,   /* errand_job_fail_permanent: dead at once */
    ERRAND_CLASS_RETRY_LATER = 3, /* errand_job_retry_later(delay_ms): attempt not counted */
    ERRAND_CLASS_THROTTLED = 4,   /* errand_job_throttled(delay_ms): the queue pauses too */
};

/* The longest delay a failure may ask for (366 days): errand_job_retry_later
 * and errand_job_throttled cut a longer one to it. */
#define ERRAND_DELAY_MAX_MS (366LL * 24 * 3600 * 1000)

/* The longest delay errand_error_from_http gives (1 hour); a longer
 * Retry-After is cut to it. */
#define ERRAND_HTTP_DELAY_MAX_MS 3600000LL

/* Classifies an HTTP response for a job. status: the status received, or
 * 0 when none came (connection error, timeout). retry_after: the
 * Retry-After header's value (NULL when absent), as delay-seconds or an
 * HTTP-date (IMF-fixdate, RFC 850 or asctime; a past date is 0 ms; a value
 * that is neither counts as absent). now_ms: the current time, ms since the
 * Unix epoch. Sets *cls (ERRAND_CLASS_*) and *delay_ms (0 unless
 * retry_later or throttled; at most ERRAND_HTTP_DELAY_MAX_MS):
 *   2xx                              success
 *   429                              throttled, for Retry-After or 10 s
 *   408 or 5xx with Retry-After      retry_later, for that delay
 *   408 or 5xx without Retry-After   transient
 *   other 4xx, 1xx, 3xx              permanent
 *   0, or a status outside 100..599  transient
 * Returns 0, or ERRAND_EINVAL when cls or delay_ms is NULL. Pure: no I/O,
 * any thread. */
ERRAND_API int errand_error_from_http(long status, const char *retry_after, long long now_ms,
                                      int *cls, long long *delay_ms);

/* Frees memory this library returned. NULL does nothing. */
ERRAND_API void errand_free(void *p);

/* ---- worker runtime (docs/workers.md) ----------------------------------
 * A worker leases jobs from one or more queues and runs a handler for each
 * on one of `concurrency` handler threads. Two fetcher threads keep up to
 * concurrency + prefetch jobs leased between them (so one fetch is on its
 * way while the other is answered; the prefetch fixed, or adaptive by
 * default), carrying finished outcomes on their
 * fetches; an acker thread sends outcomes as they come (POST /v1/acks, on
 * its own connection, also while the fetches long-poll); a timer thread
 * extends the leases of held jobs every lease/3 and enforces the per-job
 * timeout. Each of these threads has its own connection (four in all).
 * errand_worker_stop() (async-signal-safe) starts a graceful stop: no more
 * fetches, prefetched jobs released at once, running handlers given up to
 * grace_ms, then the leases of jobs still running released (not failed) so
 * another worker gets them at once. */

typedef struct errand_worker errand_worker;
typedef struct errand_job errand_job;

/* Log levels of the log callback. */
enum { ERRAND_LOG_DEBUG = 0, ERRAND_LOG_INFO = 1, ERRAND_LOG_WARN = 2, ERRAND_LOG_ERROR = 3 };

/* Why a job must stop (errand_job_stop_reason, the on_stop callback). */
enum {
    ERRAND_STOP_NONE = 0,
    ERRAND_STOP_LEASE_LOST = 1, /* a heartbeat got 409: another worker may run it now */
    ERRAND_STOP_TIMEOUT = 2,    /* the job ran past its timeout: it counts as transient */
    ERRAND_STOP_SHUTDOWN = 3,   /* the grace period ended: its lease was released */
};

/* The handler: runs one job on a handler thread, may block. It reports the
 * outcome with one of errand_job_complete / _fail_transient /
 * _fail_permanent / _retry_later / _throttled (the last call wins) and
 * returns 0. Returning without an outcome completes the job with no result
 * when it returns 0, and fails it as transient when it returns non-zero. */
typedef int (*errand_handler_fn)(errand_job *job, void *user);

/* Log callback: one JSON object per line (no newline), e.g. the per-job
 * line {"level","msg":"job done","job_id","queue","name","attempt",
 * "duration_ms","age_ms","outcome",...}. Called from any worker thread,
 * possibly at once from several: it must be thread-safe. */
typedef void (*errand_log_fn)(int level, const char *json_line, void *user);

/* Stop callback: `job` must stop (reason ERRAND_STOP_*). Called once per job
 * from the timer or main thread while the handler runs; it must not block
 * and must not free the job. The job is valid until the handler returns. */
typedef void (*errand_stop_fn)(errand_job *job, int reason, void *user);

typedef struct errand_worker_config {
    const char *server_url;     /* required, copied */
    const char *token;          /* NULL: none; copied */
    const char *const *queues;  /* required: 1..16 queue names, tried in order; copied */
    size_t nqueues;
    int concurrency;            /* handler threads, 1..1000 (0: 1) */
    int prefetch;               /* jobs leased ahead of free threads: 0..10000, or
                                 * ERRAND_PREFETCH_AUTO (the default of config_init):
                                 * sized from the measured handler run time, fetch
                                 * round trip and lease (docs/workers.md, "Prefetch") */
    long lease_ms;              /* lease asked for and extended to (0: 60000) */
    long timeout_ms;            /* per job, the job's own timeout_ms if smaller (0: 30000) */
    long grace_ms;              /* shutdown grace (0: 45000); must be timeout < grace < lease */
    long poll_wait_ms;          /* long-poll of an idle fetch, 100..60000 (0: 2000); an idle
                                 * worker notices a stop within this time */
    int max_started;            /* > 0: a retry_later/throttled outcome of a job leased
                                 * max_started times or more becomes permanent; 0: only the
                                 * queue's max_started on the server applies (default 100) */
    const char *worker_id;      /* NULL: "HOSTNAME-PID"; copied */
    errand_log_fn log;          /* NULL: no logs */
    void *log_user;
    errand_stop_fn on_stop;     /* NULL: handlers poll errand_job_should_stop() */
    void *stop_user;
    const int *queue_weights;   /* NULL: queues in order; else nqueues weights 1..1000: each
                                 * fetch a weighted mix of the queues ("queue_weights" of
                                 * POST /v1/fetch); copied */
} errand_worker_config;

/* errand_worker_config.prefetch: enough jobs ahead to keep every handler
 * busy for two fetch round trips (measured), no more than the handlers
 * start within a quarter of the lease, at most 10000; none until the first
 * run and round trip are measured. Other negative values are refused. */
#define ERRAND_PREFETCH_AUTO (-1)

/* Fills *cfg with zeroes and prefetch = ERRAND_PREFETCH_AUTO (every default). */
ERRAND_API void errand_worker_config_init(errand_worker_config *cfg);

/* Validates cfg and creates a worker; no network I/O and no threads yet.
 * Returns 0 and *out (free with errand_worker_free), ERRAND_EINVAL with a
 * one-line reason in errbuf (when not NULL) naming the wrong setting, e.g.
 * "timeout (30000 ms) must be shorter than grace (20000 ms)", or
 * ERRAND_ENOMEM. handler is called with `user`. */
ERRAND_API int errand_worker_new(const errand_worker_config *cfg, errand_handler_fn handler,
                                 void *user, errand_worker **out, char *errbuf,
                                 size_t errbuf_size);

/* Runs the worker on the calling thread until it is stopped. Returns 0
 * after a graceful stop (every job completed, failed or released), or a
 * negative code when threads could not start (ERRAND_ENOMEM). Server
 * errors do not end the run: fetches and acks are retried with backoff and
 * logged. Call once per worker. */
ERRAND_API int errand_worker_run(errand_worker *w);

/* Asks a running worker to stop gracefully. Async-signal-safe, callable
 * from any thread and before run() (run then returns at once). */
ERRAND_API void errand_worker_stop(errand_worker *w);

/* A stop without the grace period: as errand_worker_stop, and the leases
 * of jobs still running are released at once (their handlers see
 * ERRAND_STOP_SHUTDOWN), so no job is left active. run() returns once the
 * releases are sent. Async-signal-safe; may follow errand_worker_stop. */
ERRAND_API void errand_worker_stop_now(errand_worker *w);

/* Installs SIGTERM, SIGINT and SIGQUIT handlers for w. SIGTERM, however
 * often it comes, and a first SIGINT call errand_worker_stop(w) (systemd
 * and GNU timeout send SIGTERM to a whole process group, so a repeat is
 * the same request); a second SIGINT, or SIGQUIT, calls
 * errand_worker_stop_now(w). The process is never ended from the handler.
 * One worker per process can own the signals. Returns 0 or ERRAND_EINVAL. */
ERRAND_API int errand_worker_install_signal_handlers(errand_worker *w);

/* Counters since run() began (any thread may read them). */
typedef struct errand_worker_stats {
    long long fetched, completed, failed, released, lease_lost, timed_out, fetches, acks_sent;
    int prefetch; /* the prefetch now: the fixed one, or the adaptive size last computed */
} errand_worker_stats;
ERRAND_API void errand_worker_get_stats(errand_worker *w, errand_worker_stats *out);

/* Frees the worker. Blocks until every handler thread has returned (a
 * handler still running after run() returned had its lease released).
 * NULL does nothing. */
ERRAND_API void errand_worker_free(errand_worker *w);

/* Job facts, borrowed: valid until the handler returns. Strings are
 * NUL-terminated; trace_id is "" when the job has none. payload is the
 * JSON text of the job's payload; json the whole leased job object. */
ERRAND_API const char *errand_job_id(const errand_job *job);
ERRAND_API const char *errand_job_name(const errand_job *job);
ERRAND_API const char *errand_job_queue(const errand_job *job);
ERRAND_API const char *errand_job_payload(const errand_job *job);
ERRAND_API const char *errand_job_json(const errand_job *job);
ERRAND_API const char *errand_job_idempotency_key(const errand_job *job);
ERRAND_API const char *errand_job_trace_id(const errand_job *job);
ERRAND_API const char *errand_job_lease_token(const errand_job *job);
ERRAND_API int errand_job_attempt(const errand_job *job);
/* Times the job was leased in all (retry-later rounds included). */
ERRAND_API long errand_job_started(const errand_job *job);
/* When the handler must be done: ms since the Unix epoch. */
ERRAND_API long long errand_job_deadline(const errand_job *job);
/* The same as milliseconds left (negative once past). */
ERRAND_API long long errand_job_remaining_ms(const errand_job *job);

/* True once the job's lease is lost (a heartbeat got 409). */
ERRAND_API int errand_job_lease_lost(const errand_job *job);
/* ERRAND_STOP_* (0 = keep going): lease lost, timed out or released at
 * shutdown. Any thread may call it. */
ERRAND_API int errand_job_should_stop(const errand_job *job);

/* Outcomes; call from the handler. The last call before the handler
 * returns wins. After a stop (errand_job_should_stop) the outcome is
 * ignored: a lost or released lease cannot report, a timeout is transient.
 * complete: result_json NULL or JSON text (ERRAND_EINVAL when it does not
 * parse; no outcome is set then). fail_*: msg NULL or one line, copied.
 * retry_later: back to scheduled after delay_ms, attempt not counted.
 * throttled: the same, and the whole queue pauses for retry_after_ms (the
 * server caps both at the queue's throttle_max_ms). A delay above
 * ERRAND_DELAY_MAX_MS, the longest the server takes, is cut to it.
 * Returns 0, or ERRAND_EINVAL (negative delay, bad JSON). */
ERRAND_API int errand_job_complete(errand_job *job, const char *result_json);
ERRAND_API int errand_job_fail_transient(errand_job *job, const char *msg);
ERRAND_API int errand_job_fail_permanent(errand_job *job, const char *msg);
ERRAND_API int errand_job_retry_later(errand_job *job, long delay_ms);
ERRAND_API int errand_job_throttled(errand_job *job, long retry_after_ms);
/* Gives the job back without an outcome: its lease is released and the
 * attempt not counted (for work the worker did not get to do, such as a
 * command killed by the shutdown). Returns 0 or ERRAND_EINVAL. */
ERRAND_API int errand_job_release(errand_job *job);

/* ---- run exactly once per key (docs/leases.md) --------------------------
 * Appended with the scheduling work (src/client/exclusive.c). */

/* What fn learns about the lease it runs under; borrowed, valid while fn
 * runs. Pass idempotency_key and fence to whatever fn writes, so a store
 * can refuse writes of an older fence. */
typedef struct errand_lease_info {
    const char *idempotency_key; /* depends only on (type, code, run_key) */
    const char *owner_token;
    long long fence;             /* grows with every acquire of this key */
} errand_lease_info;

/* The work; runs on its own thread while the caller's thread renews the
 * lease. Returns 0 on success (the key is then completed). */
typedef int (*errand_exclusive_fn)(const errand_lease_info *lease, void *user);
/* Called (from the renewing thread, once) when a renew is refused: another
 * owner may run the work now, so fn should stop. Must not block. */
typedef void (*errand_lost_fn)(void *user);

enum {
    ERRAND_EXCLUSIVE_DONE = 1,   /* the key was already completed: fn did not run */
    ERRAND_EXCLUSIVE_FAILED = 2, /* fn ran and returned non-zero: the lease was released */
};

/* Acquires the lease of (type, code, run_key) for ttl_ms (1000..86400000;
 * 0: 60000) through POST /v1/leases, runs fn(lease, user) on a new thread,
 * renews the lease every ttl_ms/3 while fn runs, then completes the key
 * when fn returned 0 or releases it otherwise. Strings are copied.
 * Returns 0 (fn ran and succeeded; the key is done), ERRAND_EXCLUSIVE_DONE
 * (fn not run), ERRAND_ECONFLICT (another owner holds the key; fn not run),
 * ERRAND_EXCLUSIVE_FAILED, ERRAND_ESTALE (fn ran but the lease was lost:
 * a renew or the complete was refused; on_lost ran if a renew was), or
 * another negative code: acquiring failed (fn not run) or the complete
 * failed. *fn_result (may be NULL) is set to fn's return value when fn ran
 * and left untouched otherwise. on_lost may be NULL. Blocking: as long as
 * fn runs plus the requests. Uses c from the calling thread only. */
ERRAND_API int errand_run_exclusive(errand_client *c, const char *type, const char *code,
                                    const char *run_key, long ttl_ms, errand_exclusive_fn fn,
                                    errand_lost_fn on_lost, void *user, int *fn_result);

#ifdef __cplusplus
}
#endif

#endif
