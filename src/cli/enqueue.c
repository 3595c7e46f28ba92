/* SPDX-License-Identifier: MIT
 *
 * `errand enqueue QUEUE NAME [PAYLOAD_JSON] [options]`: builds the enqueue
 * request from flags, sends it through liberrand and prints the stored job.
 * Range checks are the server's (one rule, one place); this file only turns
 * flags into JSON and refuses what is not a number or a duration.
 */
#include "cli/cli.h"
#include "cli/remote.h"
#include "cli/settings.h"
#include "util/buf.h"
#include "util/err.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "errand enqueue"
#define STDIN_MAX ((size_t)64 << 20)

static const char usage[] =
    "usage: errand enqueue QUEUE NAME [PAYLOAD_JSON | -] [options]\n"
    "\n"
    "Enqueues one job and prints it as JSON. PAYLOAD_JSON is any JSON value\n"
    "(default {}); - reads it from standard input.\n"
    "\n"
    "options:\n"
    "  --id ID                unique job id; enqueueing an existing id changes nothing\n"
    "                         (the existing job is printed, \"duplicate\" on stderr; a job\n"
    "                         retention deleted within the server's --dedup-window: its\n"
    "                         tombstone {queue, state, finished_at})\n"
    "  --delay D              run after D: 500ms, 30s, 5m, 1h\n"
    "  --run-at TIME          run at an RFC 3339 time, e.g. 2026-11-30T02:00:00Z\n"
    "  --priority N           0..1000, higher runs first (default 0)\n"
    "  --max-attempts N       attempts before the job is dead (default 8)\n"
    "  --timeout D            longest run of one attempt (default 30s)\n"
    "  --group G              fairness key, e.g. tenant:42\n"
    "  --idempotency-key K    key handed to the handler (default: the job id)\n"
    "  --trace-id T           trace id carried into logs\n"
    "  --server URL           server (default $ERRAND_SERVER or " ER_CLI_DEFAULT_SERVER ")\n"
    "  --token TOKEN          bearer token (default $ERRAND_TOKEN)\n"
    "\n"
    "exit status: 0 enqueued (or duplicate), 1 refused by the server, 2 usage,\n"
    "3 server unreachable\n";

/* Reads all of stdin (bounded); returns owned text or NULL. */
static char *read_stdin(void)
{
    er_buf b;
    er_buf_init(&b, STDIN_MAX);
    char chunk[16384];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (er_buf_add(&b, chunk, n) < 0)
            break;
    char *text = NULL;
    if (b.err == ER_ETOOBIG)
        fprintf(stderr, CMD ": the payload on stdin is larger than %zu bytes\n", STDIN_MAX);
    else if (!b.err && ferror(stdin))
        fprintf(stderr, CMD ": cannot read the payload from stdin\n");
    else if (!(text = er_buf_take(&b, NULL)))
        fprintf(stderr, CMD ": out of memory\n");
    er_buf_fini(&b);
    return text;
}

typedef struct enq_args {
    const char *pos[3];
    int npos;
    const char *id, *delay, *run_at, *priority, *max_attempts, *timeout, *group, *idem,
        *trace;
    er_remote_opts remote;
} enq_args;

/* Returns -1 on a usage error (printed), 1 for --help, else 0. */
static int parse_args(int argc, char **argv, enq_args *a)
{
    static const struct {
        const char *name;
        size_t off;
    } opts[] = {
        {"id", offsetof(enq_args, id)},
        {"delay", offsetof(enq_args, delay)},
        {"run-at", offsetof(enq_args, run_at)},
        {"priority", offsetof(enq_args, priority)},
        {"max-attempts", offsetof(enq_args, max_attempts)},
        {"timeout", offsetof(enq_args, timeout)},
        {"group", offsetof(enq_args, group)},
        {"idempotency-key", offsetof(enq_args, idem)},
        {"trace-id", offsetof(enq_args, trace)},
    };
    bool only_pos = false;
    for (int i = 0; i < argc;) {
        const char *s = argv[i];
        if (!only_pos && (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0))
            return 1;
        if (!only_pos && strcmp(s, "--") == 0) {
            only_pos = true;
            i++;
            continue;
        }
        if (only_pos || s[0] != '-' || strcmp(s, "-") == 0) {
            if (a->npos == 3) {
                er_cli_usage_error(CMD, "unexpected argument '%s'", s);
                return -1;
            }
            a->pos[a->npos++] = s;
            i++;
            continue;
        }
        int r = er_cli_remote_opt(argc, argv, &i, CMD, &a->remote);
        for (size_t k = 0; r == 0 && k < sizeof opts / sizeof opts[0]; k++)
            r = er_cli_opt(argc, argv, &i, opts[k].name, CMD,
                           (const char **)((char *)a + opts[k].off));
        if (r < 0)
            return -1;
        if (r == 0) {
            er_cli_usage_error(CMD, "unknown option '%s'", s);
            return -1;
        }
    }
    if (a->npos < 2) {
        er_cli_usage_error(CMD, "QUEUE and NAME are required");
        return -1;
    }
    return 0;
}

/* Adds the flags to opts; returns -1 after a usage error. */
static int build_options(const enq_args *a, json_t *opts)
{
    int64_t n;
    int bad = 0;
    if (a->delay && a->run_at) {
        er_cli_usage_error(CMD, "give --delay or --run-at, not both");
        return -1;
    }
    if (a->id)
        bad |= json_object_set_new(opts, "id", json_string(a->id));
    if (a->delay) {
        if (er_parse_duration(a->delay, &n) < 0) {
            er_cli_usage_error(CMD, "--delay must be a duration like 500ms, 30s, 5m, 1h");
            return -1;
        }
        bad |= json_object_set_new(opts, "delay_ms", json_integer(n));
    }
    if (a->run_at)
        bad |= json_object_set_new(opts, "run_at", json_string(a->run_at));
    if (a->priority) {
        if (er_cli_parse_int(a->priority, INT64_MIN, INT64_MAX, &n) < 0) {
            er_cli_usage_error(CMD, "--priority must be an integer");
            return -1;
        }
        bad |= json_object_set_new(opts, "priority", json_integer(n));
    }
    if (a->max_attempts) {
        if (er_cli_parse_int(a->max_attempts, INT64_MIN, INT64_MAX, &n) < 0) {
            er_cli_usage_error(CMD, "--max-attempts must be an integer");
            return -1;
        }
        bad |= json_object_set_new(opts, "max_attempts", json_integer(n));
    }
    if (a->timeout) {
        if (er_parse_duration(a->timeout, &n) < 0) {
            er_cli_usage_error(CMD, "--timeout must be a duration like 500ms, 30s, 5m, 1h");
            return -1;
        }
        bad |= json_object_set_new(opts, "timeout_ms", json_integer(n));
    }
    if (a->group)
        bad |= json_object_set_new(opts, "group", json_string(a->group));
    if (a->idem)
        bad |= json_object_set_new(opts, "idempotency_key", json_string(a->idem));
    if (a->trace)
        bad |= json_object_set_new(opts, "trace_id", json_string(a->trace));
    if (bad) {
        /* json_string refuses text that is not UTF-8. */
        er_cli_usage_error(CMD, "option values must be UTF-8 text");
        return -1;
    }
    return 0;
}

int er_cli_enqueue(int argc, char **argv)
{
    enq_args a = {0};
    int r = parse_args(argc, argv, &a);
    if (r == 1) {
        fputs(usage, stdout);
        return ER_EXIT_OK;
    }
    if (r < 0)
        return ER_EXIT_USAGE;

    json_t *opts = json_object();
    if (!opts) {
        fprintf(stderr, CMD ": out of memory\n");
        return ER_EXIT_SERVER;
    }
    if (build_options(&a, opts) < 0) {
        json_decref(opts);
        return ER_EXIT_USAGE;
    }
    char *opts_text = json_dumps(opts, JSON_COMPACT);
    json_decref(opts);
    char *payload_stdin = NULL;
    const char *payload = a.npos == 3 ? a.pos[2] : NULL;
    if (payload && strcmp(payload, "-") == 0) {
        payload = payload_stdin = read_stdin();
        if (!payload) {
            free(opts_text);
            return ER_EXIT_USAGE;
        }
    }

    errand_client *c = NULL;
    int status = opts_text ? er_cli_connect(CMD, &a.remote, &c) : ER_EXIT_SERVER;
    if (!opts_text)
        fprintf(stderr, CMD ": out of memory\n");
    if (status == ER_EXIT_OK) {
        char *job = NULL;
        int rc = errand_enqueue(c, a.pos[0], a.pos[1], payload, opts_text, &job);
        if (rc < 0) {
            status = er_cli_report(CMD, c, rc);
        } else {
            json_t *o = errand_last_status(c) == 200 ? json_loads(job, 0, NULL) : NULL;
            const char *st = json_string_value(json_object_get(o, "state"));
            const char *at = json_string_value(json_object_get(o, "finished_at"));
            if (o && !json_object_get(o, "id"))
                fprintf(stderr,
                        CMD ": duplicate: job '%s' was %s (finished %s) and deleted by retention; "
                        "its id is still remembered; nothing changed\n",
                        a.id ? a.id : "?", st ? st : "?", at ? at : "?");
            else if (errand_last_status(c) == 200)
                fprintf(stderr, CMD ": duplicate: a job with id '%s' exists; nothing changed\n",
                        a.id ? a.id : "?");
            json_decref(o);
            if (er_cli_print_json(job) < 0)
                status = ER_EXIT_SERVER;
            errand_free(job);
        }
    }
    errand_client_free(c);
    free(opts_text);
    free(payload_stdin);
    return status;
}
