/* SPDX-License-Identifier: MIT
 *
 * `errand serve`: reads the settings, opens the engine and the HTTP server,
 * and runs the event loop until SIGTERM/SIGINT. Shutdown stops accepting,
 * answers in-flight requests, lets the writer finish its commit and exits 0;
 * a repeated SIGTERM changes nothing, a second SIGINT or SIGQUIT exits at once.
 */
#include "cli/cli.h"
#include "cli/sdnotify.h"
#include "cli/settings.h"
#include "engine/dispatcher.h"
#include "engine/engine.h"
#include "server/faktory/faktory.h"
#include "server/http/server.h"
#include "util/log.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <errno.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const er_setting serve_settings[] = {
    {"listen", ER_SET_STRING, "127.0.0.1:7400", 0, 0, NULL,
     "address to listen on, HOST:PORT (port 0 picks a free one)"},
    {"faktory-listen", ER_SET_STRING, "off", 0, 0, NULL,
     "address of the Faktory protocol port, HOST:PORT (port 0 picks a free one), or off "
     "(docs/faktory.md); off loopback it needs tokens, as --listen does"},
    {"faktory-tls-cert", ER_SET_STRING, NULL, 0, 0, NULL,
     "a PEM certificate chain: the Faktory port speaks TLS (clients use tcp+tls://); needs "
     "--faktory-tls-key"},
    {"faktory-tls-key", ER_SET_STRING, NULL, 0, 0, NULL,
     "the PEM private key of --faktory-tls-cert"},
    {"faktory-min-reserve", ER_SET_DURATION, "60s", 1000, 3600000, NULL,
     "the shortest lease a Faktory job's reserve_for gives (Faktory's is 60s)"},
    {"faktory-prefetch", ER_SET_INT, "32", 1, 256, NULL,
     "most jobs one Faktory FETCH leases to its wid, handing the rest out on its next "
     "FETCHes (adaptive up to this; 1: none)"},
    {"store", ER_SET_STRING, "sqlite:./errand.db", 0, 0, NULL,
     "store URL: sqlite:PATH (embedded, default) or "
     "postgres://USER:PASS@HOST:PORT/DB?schema=errand&pool_size=4 (several servers may share it)"},
    {"token", ER_SET_LIST, NULL, 0, 0, NULL,
     "ROLE:TOKEN or ROLE@NAME:TOKEN, repeatable (roles producer, worker, admin, viewer; NAME "
     "1..64 of A-Z a-z 0-9 . _ - shows in the access log); ERRAND_TOKENS takes a comma list"},
    {"token-file", ER_SET_STRING, NULL, 0, 0, NULL,
     "file of ROLE:TOKEN or ROLE@NAME:TOKEN lines (blank lines and # comments skipped), beside "
     "any --token; keeps tokens out of the process's command line"},
    {"config", ER_SET_STRING, NULL, 0, 0, NULL, "config file of 'name = value' lines"},
    {"auto-migrate", ER_SET_BOOL, "true", 0, 0, NULL,
     "apply pending schema migrations at start; --no-auto-migrate refuses to start (exit 2) on "
     "a schema behind this binary, which `errand migrate` then upgrades"},
    {"durability", ER_SET_ENUM, "full", 0, 0, "full|normal",
     "full fsyncs every commit; normal may lose the last commits on power loss"},
    {"log-level", ER_SET_ENUM, "info", 0, 0, "debug|info|warn|error|off", "log level"},
    {"log-format", ER_SET_ENUM, "json", 0, 0, "json|text",
     "log lines on stderr: one JSON object each, or text for a terminal"},
    {"otlp-endpoint", ER_SET_STRING, NULL, 0, 0, NULL,
     "OpenTelemetry collector (http://HOST:4318) to send a span per job attempt to, over "
     "OTLP/HTTP JSON; off when unset"},
    {"metrics-max-queues", ER_SET_INT, "1000", 1, 100000, NULL,
     "queues with their own queue label on /metrics; the others are summed under "
     "queue=\"_other\""},
    {"access-log", ER_SET_STRING, NULL, 0, 0, NULL,
     "file to append one JSON line a request to (time, peer, method, path, role, token name, "
     "status, bytes, ms); "
     "off when unset"},
    {"max-body", ER_SET_SIZE, "16m", 1024, 1LL << 30, NULL,
     "largest request body (HTTP) and command line (Faktory)"},
    {"payload-max", ER_SET_SIZE, "512k", 16, 64LL << 20, NULL, "largest job payload (JSON)"},
    {"max-reply", ER_SET_SIZE, "8m", 64LL << 10, 1LL << 30, NULL,
     "most bytes of jobs in one list page or fetch reply (64k..1g): a list stops early with "
     "a next_cursor, a fetch leases only the jobs that fit (the store counts them as it "
     "leases); one job larger than this still comes alone. Replies past 2 MiB are streamed "
     "(chunked)"},
    {"max-batch", ER_SET_INT, "512", 1, 100000, NULL, "most requests in one group commit"},
    {"max-connections", ER_SET_INT, "10000", 1, 1000000, NULL,
     "most open client connections on each port (HTTP, Faktory); past it a new HTTP one is "
     "answered 503 (Retry-After: 1) and closed"},
    {"head-timeout", ER_SET_DURATION, "10s", 100, 3600000, NULL,
     "longest time a request's head (request line and headers) may take to arrive, from the "
     "connection's accept or the first byte of a later request (100ms..1h)"},
    {"body-min-rate", ER_SET_SIZE, "1k", 0, 1LL << 30, NULL,
     "bytes a second a request body must arrive at after its first second, else the "
     "connection is closed with 408 (0: no minimum)"},
    {"max-body-in-flight", ER_SET_SIZE, "64m", 1024, 1LL << 40, NULL,
     "most bytes of request bodies being read at once (by their Content-Length); past it a "
     "request gets 503 with Retry-After: 1 before its body is read; at least --max-body"},
    {"max-waiters", ER_SET_INT, "10000", 0, ER_MAX_WAITERS_MAX, NULL,
     "most GET /v1/jobs/{id}?wait_ms requests waiting for their job at once; past it they get "
     "503 with Retry-After: 1 (0: no waits, an unfinished job's wait is refused)"},
    {"maintenance-interval", ER_SET_DURATION, "50ms", 1, 60000, NULL,
     "how often due jobs are promoted and expired leases reaped"},
    {"retention-interval", ER_SET_DURATION, "10s", 100, 3600000, NULL,
     "how often finished jobs are deleted by retention"},
    {"shutdown-grace", ER_SET_DURATION, "30s", 0, 3600000, NULL,
     "longest wait for in-flight requests on shutdown (HTTP dispatch's too: then their "
     "jobs are released)"},
    {"dispatch-concurrency", ER_SET_INT, "64", 1, 10000, NULL,
     "most HTTP dispatch requests in flight on this node, all queues"},
    {"dedup-window", ER_SET_DURATION, "30d", 0, ER_DEDUP_WINDOW_MAX_MS, NULL,
     "how long a job id a client gave stays a duplicate after retention deleted its job "
     "(up to 3650d; 0 remembers none)"},
    {"allowed-hosts", ER_SET_STRING, NULL, 0, 0, NULL,
     "comma-separated host names this server answers to beside the listen address and, on "
     "loopback, localhost: the dashboard always, and every request when no tokens are set "
     "(any other Host is refused: DNS rebinding)"},
    {"ui-session-idle-s", ER_SET_INT, "43200", 60, 2592000, NULL,
     "seconds a dashboard session may go unused before it ends (60..2592000)"},
    {"audit-retention-s", ER_SET_INT, "7776000", 3600, 315360000, NULL,
     "seconds audit log rows are kept before maintenance deletes them (3600..315360000)"},
    {"outbox-db", ER_SET_STRING, NULL, 0, 0, NULL,
     "the application's PostgreSQL database whose outbox_events this server relays "
     "(postgres://...; needs --outbox-routes; docs/outbox.md)"},
    {"outbox-routes", ER_SET_STRING, NULL, 0, 0, NULL,
     "JSON file of topic -> [{\"queue\", \"name\"}] routes for the outbox relay"},
    {"outbox-poll", ER_SET_DURATION, "500ms", 10, 60000, NULL,
     "how often the relay looks for new rows when no NOTIFY wakes it"},
    {"outbox-retention", ER_SET_DURATION, "7d", 1000, 3650LL * 86400000, NULL,
     "published outbox rows older than this are deleted"},
    {"outbox-processed-retention", ER_SET_DURATION, "30d", 1000, 3650LL * 86400000, NULL,
     "processed_messages rows older than this are deleted"},
};

const er_setting *er_cli_serve_table(size_t *n)
{
    *n = sizeof serve_settings / sizeof serve_settings[0];
    return serve_settings;
}

#define ROUTES_FILE_MAX (4 << 20)
#define TOKEN_FILE_MAX 1000 /* tokens in --token-file */

/* Appends the tokens of a --token-file to *tokens (n, cap): 0, or 2 with
 * the reason on stderr (naming the line, never a token). */
static int load_token_file(const char *path, er_token **tokens, size_t *n, size_t *cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "errand serve: --token-file %s: %s\n", path, strerror(errno));
        return 2;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077))
        ER_LOG(ER_LOG_WARN, NULL, "--token-file %s can be read by other users (chmod 600)", path);
    char line[512];
    int rc = 0, lineno = 0, nfile = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            fprintf(stderr, "errand serve: --token-file %s line %d: longer than %zu bytes\n", path,
                    lineno, sizeof line - 2);
            rc = 2;
            break;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                       line[len - 1] == '\t'))
            line[--len] = '\0';
        char *p = line + strspn(line, " \t");
        if (!*p || *p == '#')
            continue;
        if (++nfile > TOKEN_FILE_MAX) {
            fprintf(stderr, "errand serve: --token-file %s: more than %d tokens\n", path,
                    TOKEN_FILE_MAX);
            rc = 2;
            break;
        }
        if (*n == *cap) {
            size_t ncap = *cap * 2 + 8;
            er_token *t = realloc(*tokens, ncap * sizeof *t);
            if (!t) {
                fprintf(stderr, "errand serve: out of memory\n");
                rc = 2;
                break;
            }
            *tokens = t;
            *cap = ncap;
        }
        er_error err = {0};
        if (er_token_parse(p, &(*tokens)[*n], &err) < 0) {
            fprintf(stderr, "errand serve: --token-file %s line %d: %s\n", path, lineno,
                    err.message);
            rc = 2;
        } else {
            (*n)++;
        }
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "errand serve: --token-file %s: read error\n", path);
        rc = 2;
    }
    explicit_bzero(line, sizeof line);
    fclose(f);
    return rc;
}

/* Reads and judges the routes file: 0, or 2 with the reason on stderr. */
static int load_routes(const char *path, er_outbox_routes *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "errand serve: --outbox-routes %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *text = malloc(ROUTES_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, ROUTES_FILE_MAX + 1, f) : 0;
    bool bad = !text || ferror(f) || n > ROUTES_FILE_MAX;
    fclose(f);
    er_error err = {0};
    int rc = bad ? 2 : er_outbox_routes_parse(text, n, out, &err) < 0 ? 2 : 0;
    if (bad)
        fprintf(stderr, "errand serve: --outbox-routes %s: %s\n", path,
                !text ? "out of memory" : n > ROUTES_FILE_MAX ? "larger than 4 MiB" : "read error");
    else if (rc)
        fprintf(stderr, "errand serve: --outbox-routes %s: %s\n", path, err.message);
    free(text);
    return rc;
}

typedef struct serve_ctx {
    struct event_base *base;
    er_engine *engine;
    er_server *server;
    er_faktory *faktory;
    er_dispatcher *dispatcher;
    int64_t grace_ms;
    er_outbox *outbox;
    struct event *sigterm, *sigint, *sigquit, *poll, *watchdog;
    bool watchdog_failed;
    char started[512]; /* the "errand started" line's fields, logged once the loop runs */
    int signals, sigints;
    int64_t grace_deadline;
} serve_ctx;

/* The store URL for logs: the password of a URL's user info replaced by
 * "***", and JSON-unsafe characters dropped (the text goes into a log line). */
static void mask_password(const char *url, char *out, size_t size)
{
    const char *scheme = strstr(url, "://");
    const char *at = NULL, *colon = NULL;
    if (scheme) {
        const char *auth = scheme + 3;
        size_t alen = strcspn(auth, "/?#");
        for (size_t i = 0; i < alen; i++)
            if (auth[i] == '@')
                at = auth + i; /* the last '@' ends the user info */
        if (at) {
            colon = memchr(auth, ':', (size_t)(at - auth));
        }
    }
    size_t n = 0;
    for (const char *p = url; *p && n + 4 < size; p++) {
        if (colon && p == colon + 1) {
            memcpy(out + n, "***", 3);
            n += 3;
            p = at - 1;
            continue;
        }
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            continue;
        out[n++] = *p;
    }
    out[n] = '\0';
}

static void poll_inflight(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    serve_ctx *c = arg;
    if (er_server_inflight(c->server) == 0 || er_mono_ms() >= c->grace_deadline) {
        event_base_loopexit(c->base, NULL);
        return;
    }
    struct timeval tv = {0, 10000};
    evtimer_add(c->poll, &tv);
}

static void on_drained(void *arg)
{
    serve_ctx *c = arg;
    poll_inflight(-1, 0, c);
}

/* Dispatch finished its requests (or cut them at the grace period's end
 * and released their jobs): the engine may drain now. */
static void on_dispatch_stopped(void *arg)
{
    serve_ctx *c = arg;
    er_engine_drain(c->engine, on_drained, c);
}

/* Tells systemd (Type=notify) a state; a failure is logged, never fatal. */
static void notify(const char *msg)
{
    char why[128];
    if (er_sd_notify(msg, why) < 0)
        ER_LOG(ER_LOG_WARN, NULL, "sd_notify %s: %s", msg, why);
}

/* Run by the loop once it turns: the store is open, the listener accepts
 * and from now on requests are answered. */
/* The loop's first turn: from here on a signal is handled (a SIGTERM
 * that came during start-up may not be, under ThreadSanitizer). */
static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    serve_ctx *c = arg;
    ER_LOG(ER_LOG_INFO, c->started, "errand started");
    notify("READY=1\nSTATUS=accepting requests");
}

/* WatchdogSec=: pinged from the loop, so a stuck loop stops the pings. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    serve_ctx *c = arg;
    char why[128];
    if (er_sd_notify("WATCHDOG=1", why) < 0 && !c->watchdog_failed) {
        c->watchdog_failed = true; /* once, not every ping */
        ER_LOG(ER_LOG_WARN, NULL, "sd_notify WATCHDOG=1: %s", why);
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    serve_ctx *c = arg;
    if (sig == SIGQUIT || (sig == SIGINT && c->sigints++ > 0)) {
        ER_LOG(ER_LOG_WARN, NULL, "signal %d: exiting at once", (int)sig);
        _exit(1);
    }
    if (++c->signals > 1) {
        ER_LOG(ER_LOG_INFO, NULL,
               "signal %d: already shutting down (SIGINT twice or SIGQUIT exits at once)",
               (int)sig);
        return;
    }
    notify("STOPPING=1");
    ER_LOG(ER_LOG_INFO, NULL, "signal %d: shutting down", (int)sig);
    er_server_stop_accepting(c->server);
    er_faktory_stop_accepting(c->faktory);
    er_engine_stop_waits(c->engine); /* now, not after HTTP dispatch's grace */
    er_outbox_stop(c->outbox); /* after the batch in flight, which the drain answers */
    er_dispatcher_stop(c->dispatcher, c->grace_ms, on_dispatch_stopped, c);
}

int er_cli_serve(int argc, char **argv, char **envp)
{
    er_settings st;
    er_error err;
    er_error_clear(&err);
    int rc = er_settings_init(&st, serve_settings, sizeof serve_settings / sizeof serve_settings[0],
                              &err);
    if (rc == 0)
        rc = er_settings_load(&st, argc, argv, envp, stdout, &err);
    if (rc == 1) {
        er_settings_help(&st, "usage: errand serve [--listen HOST:PORT] [--store URL] "
                              "[--token ROLE:TOKEN ...] [--config FILE] ...",
                         stdout);
        er_settings_fini(&st);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "errand serve: %s\n", err.message);
        er_settings_fini(&st);
        return 2;
    }
    er_log_set_level(er_settings_get(&st, "log-level")->text);
    er_log_text = strcmp(er_settings_get(&st, "log-format")->text, "text") == 0;
    if (er_server_check_allowed_hosts(er_settings_get(&st, "allowed-hosts")->text, &err) < 0) {
        fprintf(stderr, "errand serve: %s\n", err.message);
        er_settings_fini(&st);
        return 2;
    }
    /* the Faktory port's TLS files, judged before anything listens */
    const char *tls_cert = er_settings_get(&st, "faktory-tls-cert")->text;
    const char *tls_key = er_settings_get(&st, "faktory-tls-key")->text;
    const char *fk_set = er_settings_get(&st, "faktory-listen")->text;
    if ((tls_cert || tls_key) && (!fk_set || strcmp(fk_set, "off") == 0)) {
        fprintf(stderr, "errand serve: --faktory-tls-cert and --faktory-tls-key need "
                        "--faktory-listen\n");
        er_settings_fini(&st);
        return 2;
    }
    if (er_faktory_tls_check(tls_cert, tls_key, &err) < 0) {
        fprintf(stderr, "errand serve: %s\n", err.message);
        er_settings_fini(&st);
        return 2;
    }

    const er_setting_value *tv = er_settings_get(&st, "token");
    size_t ntokens = 0, tcap = tv->nlist + 1;
    er_token *tokens = calloc(tcap, sizeof *tokens);
    if (!tokens) {
        fprintf(stderr, "errand serve: out of memory\n");
        er_settings_fini(&st);
        return 1;
    }
    for (size_t i = 0; i < tv->nlist; i++, ntokens++) {
        if (er_token_parse(tv->list[i], &tokens[i], &err) < 0) {
            /* the position, never the spec: it holds the token */
            fprintf(stderr, "errand serve: --token #%zu: %s\n", i + 1, err.message);
            free(tokens);
            er_settings_fini(&st);
            return 2;
        }
    }
    const char *token_file = er_settings_get(&st, "token-file")->text;
    if (token_file && load_token_file(token_file, &tokens, &ntokens, &tcap) != 0) {
        explicit_bzero(tokens, tcap * sizeof *tokens);
        free(tokens);
        er_settings_fini(&st);
        return 2;
    }

    serve_ctx c = {0};
    evthread_use_pthreads();
    /* the changelist coalesces evhttp's many per-request epoll_ctl calls */
    struct event_config *ecfg_base = event_config_new();
    if (ecfg_base)
        event_config_set_flag(ecfg_base, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    c.base = ecfg_base ? event_base_new_with_config(ecfg_base) : NULL;
    event_config_free(ecfg_base);
    if (!c.base) {
        fprintf(stderr, "errand serve: cannot create the event loop\n");
        free(tokens);
        er_settings_fini(&st);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "errand serve: cannot initialise libcurl\n");
        event_base_free(c.base);
        free(tokens);
        er_settings_fini(&st);
        return 1;
    }
    int exit_code = 1;
    er_engine_config ecfg = {
        .store_url = er_settings_get(&st, "store")->text,
        .store = {.durability = strcmp(er_settings_get(&st, "durability")->text, "full") == 0
                                    ? ER_DURABILITY_FULL
                                    : ER_DURABILITY_NORMAL,
                  .busy_timeout_ms = 5000,
                  .limits = {.payload_max = (size_t)er_settings_get(&st, "payload-max")->num},
                  .dedup_window_ms = er_settings_get(&st, "dedup-window")->num,
                  .reply_max = (size_t)er_settings_get(&st, "max-reply")->num,
                  .migrate = er_settings_get(&st, "auto-migrate")->num ? ER_MIGRATE_AUTO
                                                                        : ER_MIGRATE_REFUSE},
        .max_batch = (int)er_settings_get(&st, "max-batch")->num,
        .maintenance_ms = er_settings_get(&st, "maintenance-interval")->num,
        .retention_ms = er_settings_get(&st, "retention-interval")->num,
        .metrics_max_queues = (size_t)er_settings_get(&st, "metrics-max-queues")->num,
        .otlp_endpoint = er_settings_get(&st, "otlp-endpoint")->text,
        .audit_retention_ms = er_settings_get(&st, "audit-retention-s")->num * 1000,
    };
    int64_t max_waiters = er_settings_get(&st, "max-waiters")->num;
    ecfg.max_waiters = max_waiters > 0 ? (int)max_waiters : -1; /* the engine's 0 is its default */
    if (er_engine_start(c.base, &ecfg, &c.engine, &err) < 0) {
        char shown[384];
        mask_password(ecfg.store_url, shown, sizeof shown);
        if (strcmp(err.field, "schema_version") == 0) { /* --no-auto-migrate */
            fprintf(stderr, "errand serve: store '%s': %s; apply the pending migrations with "
                            "`errand migrate --store URL` first\n", shown, err.message);
            exit_code = 2;
        } else {
            fprintf(stderr, "errand serve: cannot open store '%s': %s\n", shown, err.message);
        }
        goto out;
    }
    const char *outbox_db = er_settings_get(&st, "outbox-db")->text;
    const char *routes_file = er_settings_get(&st, "outbox-routes")->text;
    if (!outbox_db != !routes_file) {
        fprintf(stderr, "errand serve: --outbox-db and --outbox-routes go together (%s is "
                        "missing)\n", outbox_db ? "--outbox-routes" : "--outbox-db");
        exit_code = 2;
        goto out;
    }
    if (outbox_db) {
        er_outbox_config ocfg = {
            .db_url = outbox_db,
            .store_url = strncmp(ecfg.store_url, "postgres", 8) == 0 ? ecfg.store_url : NULL,
            .poll_ms = er_settings_get(&st, "outbox-poll")->num,
            .retention_ms = er_settings_get(&st, "outbox-retention")->num,
            .processed_retention_ms = er_settings_get(&st, "outbox-processed-retention")->num,
            .limits = {.payload_max = (size_t)er_settings_get(&st, "payload-max")->num},
        };
        if (strncmp(outbox_db, "postgres://", 11) != 0 &&
            strncmp(outbox_db, "postgresql://", 13) != 0) {
            fprintf(stderr, "errand serve: --outbox-db must be a postgres:// URL\n");
            exit_code = 2;
            goto out;
        }
        if (load_routes(routes_file, &ocfg.routes) != 0) {
            exit_code = 2;
            goto out;
        }
        int orc = er_outbox_start(c.engine, &ocfg, &c.outbox, &err);
        er_outbox_routes_fini(&ocfg.routes);
        if (orc < 0) {
            fprintf(stderr, "errand serve: %s\n", err.message);
            goto out;
        }
    }
    er_server_config scfg = {
        .outbox = c.outbox,
        .access_log = er_settings_get(&st, "access-log")->text,
        .allowed_hosts = er_settings_get(&st, "allowed-hosts")->text,
        .ui_session_idle_ms = er_settings_get(&st, "ui-session-idle-s")->num * 1000,
        .listen = er_settings_get(&st, "listen")->text,
        .tokens = tokens,
        .ntokens = ntokens,
        .max_body = (size_t)er_settings_get(&st, "max-body")->num,
        .payload_max = (size_t)er_settings_get(&st, "payload-max")->num,
        .max_connections = (int)er_settings_get(&st, "max-connections")->num,
        .head_timeout_ms = er_settings_get(&st, "head-timeout")->num,
        .body_min_rate = (size_t)er_settings_get(&st, "body-min-rate")->num,
        .max_body_in_flight = (size_t)er_settings_get(&st, "max-body-in-flight")->num,
    };
    if (er_server_start(c.base, c.engine, &scfg, &c.server, &err) < 0) {
        fprintf(stderr, "errand serve: %s\n", err.message);
        goto out;
    }
    char node[300], host[256] = "errand";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(node, sizeof node, "%.200s-%ld", host, (long)getpid());
    const char *fk_listen = er_settings_get(&st, "faktory-listen")->text;
    bool fk_on = fk_listen && strcmp(fk_listen, "off") != 0;
    if (fk_on) {
        er_faktory_config fcfg = {
            .listen = fk_listen,
            .tokens = tokens,
            .ntokens = ntokens,
            .line_max = (size_t)er_settings_get(&st, "max-body")->num,
            .payload_max = (size_t)er_settings_get(&st, "payload-max")->num,
            .max_connections = (int)er_settings_get(&st, "max-connections")->num,
            .reserve_min_ms = er_settings_get(&st, "faktory-min-reserve")->num,
            .prefetch = (int)er_settings_get(&st, "faktory-prefetch")->num,
            .node_id = node,
            .tls_cert = tls_cert,
            .tls_key = tls_key,
        };
        if (er_faktory_start(c.base, c.engine, &fcfg, &c.faktory, &err) < 0) {
            bool tls = strncmp(err.field, "faktory-tls", 11) == 0; /* changed since the check */
            fprintf(stderr, "errand serve: %s%s\n", tls ? "" : "--faktory-listen: ", err.message);
            goto out;
        }
        er_server_set_faktory(c.server, c.faktory);
    }
    {
        er_dispatcher_config dcfg = {
            .node_id = node,
            .max_inflight = (int)er_settings_get(&st, "dispatch-concurrency")->num,
            .result_max = (size_t)er_settings_get(&st, "payload-max")->num,
        };
        if (er_dispatcher_start(c.base, c.engine, &dcfg, &c.dispatcher, &err) < 0) {
            fprintf(stderr, "errand serve: %s\n", err.message);
            goto out;
        }
        er_server_set_dispatcher(c.server, c.dispatcher);
    }
    c.grace_ms = er_settings_get(&st, "shutdown-grace")->num;
    c.sigterm = evsignal_new(c.base, SIGTERM, on_signal, &c);
    c.sigint = evsignal_new(c.base, SIGINT, on_signal, &c);
    c.sigquit = evsignal_new(c.base, SIGQUIT, on_signal, &c);
    c.poll = evtimer_new(c.base, poll_inflight, &c);
    if (!c.sigterm || !c.sigint || !c.sigquit || !c.poll) {
        fprintf(stderr, "errand serve: cannot install signal handlers\n");
        goto out;
    }
    evsignal_add(c.sigterm, NULL);
    evsignal_add(c.sigint, NULL);
    evsignal_add(c.sigquit, NULL);
    {
        char shown[384];
        mask_password(ecfg.store_url, shown, sizeof shown);
        snprintf(c.started, sizeof c.started, "\"store\":\"%s\",\"durability\":\"%s\"",
                 shown, er_settings_get(&st, "durability")->text);
    }
    c.grace_deadline = INT64_MAX;
    int64_t wd_usec = er_sd_watchdog_usec();
    if (wd_usec < 0)
        ER_LOG(ER_LOG_WARN, NULL, "WATCHDOG_USEC or WATCHDOG_PID is malformed: no watchdog pings");
    if (wd_usec > 0) {
        int64_t half = wd_usec / 2 > 0 ? wd_usec / 2 : 1; /* as sd_watchdog_enabled(3) advises */
        struct timeval wtv = {(time_t)(half / 1000000), (suseconds_t)(half % 1000000)};
        c.watchdog = event_new(c.base, -1, EV_PERSIST, on_watchdog, &c);
        if (!c.watchdog || evtimer_add(c.watchdog, &wtv) < 0) {
            fprintf(stderr, "errand serve: cannot start the watchdog timer\n");
            goto out;
        }
        on_watchdog(-1, 0, &c);
    }
    struct timeval now_tv = {0, 0};
    if (event_base_once(c.base, -1, EV_TIMEOUT, on_ready, &c, &now_tv) < 0) {
        fprintf(stderr, "errand serve: cannot schedule the readiness notice\n");
        goto out;
    }
    event_base_dispatch(c.base);
    ER_LOG(ER_LOG_INFO, NULL, "stopped");
    exit_code = 0;
out:
    if (c.sigterm)
        event_free(c.sigterm);
    if (c.sigint)
        event_free(c.sigint);
    if (c.sigquit)
        event_free(c.sigquit);
    if (c.poll)
        event_free(c.poll);
    if (c.watchdog)
        event_free(c.watchdog);
    er_outbox_free(c.outbox);
    er_faktory_free(c.faktory);
    er_server_free(c.server);
    er_dispatcher_free(c.dispatcher);
    er_engine_free(c.engine);
    event_base_free(c.base);
    explicit_bzero(tokens, tcap * sizeof *tokens);
    free(tokens);
    curl_global_cleanup();
    er_settings_fini(&st);
    return exit_code;
}
