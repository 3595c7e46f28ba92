/* SPDX-License-Identifier: MIT
 *
 * `errand cron`: `next` prints the next fire instants of a cron expression
 * (local only: src/core/cron.h, no server); `add`, `list`, `rm` and
 * `trigger` manage the server's schedulers through liberrand (API.md
 * "Schedulers"). Exit 0 ok, 1 refused by the server, 2 bad command line,
 * expression or zone, 3 server unreachable.
 */
#include "cli/cli.h"
#include "cli/remote.h"
#include "core/cron.h"
#include "util/clock.h"
#include "util/tz.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "errand cron"

static const char usage[] =
    "usage: errand cron next EXPR [--tz ZONE] [--from RFC3339] [--count N]\n"
    "       errand cron add KEY --cron EXPR --queue Q --name N [--tz ZONE]\n"
    "                       [--payload JSON] [--missed skip|once|all] [--max-catchup N]\n"
    "       errand cron list [--json]\n"
    "       errand cron rm KEY\n"
    "       errand cron trigger KEY\n"
    "\n"
    "add      creates or updates the scheduler KEY (admin token): the same KEY\n"
    "         never makes a second schedule; each tick enqueues one job with id\n"
    "         sched:KEY:TICK and payload.run_key = TICK\n"
    "list     schedulers with their next run (in their zone) and last tick\n"
    "rm       deletes a scheduler (its jobs stay)\n"
    "trigger  enqueues the job of the current second now (admin token)\n"
    "add/list/rm/trigger take --server URL (default $ERRAND_SERVER or\n"
    "  " ER_CLI_DEFAULT_SERVER ") and --token TOKEN (default $ERRAND_TOKEN).\n"
    "--missed: what to run for ticks missed while the server was down: skip\n"
    "  (default), once (the latest), all (the latest --max-catchup, default 24)\n"
    "\n"
    "next prints the next N fire instants of a cron expression as RFC 3339 UTC.\n"
    "EXPR: 5 fields (min hour dom month dow), 6 with seconds first, or\n"
    "@yearly @monthly @weekly @daily @hourly; quote it, or pass its fields as\n"
    "separate arguments. See docs/cron.md for the syntax and the DST policy.\n"
    "\n"
    "options:\n"
    "  --tz ZONE        IANA time zone, e.g. America/New_York (default UTC)\n"
    "  --from RFC3339   start after this instant (default now)\n"
    "  --count N        how many instants, 1..1000 (default 5)\n"
    "\n"
    "exit status: 0 ok, 1 refused by the server, 2 bad arguments, expression or\n"
    "zone, 3 server unreachable\n";

static int cron_next(int argc, char **argv)
{
    const char *tzname = NULL, *from = NULL, *count_s = NULL;
    char expr[1100];
    size_t len = 0;
    expr[0] = '\0';
    for (int i = 0; i < argc;) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(usage, stdout);
            return ER_EXIT_OK;
        }
        /* "-5" is not a cron field, so anything after "--" or not starting
         * with "--" is part of the expression. */
        if (s[0] != '-' || s[1] != '-' || s[2] == '\0') {
            if (strcmp(s, "--") == 0) {
                i++;
                continue;
            }
            size_t n = strlen(s);
            if (len + n + 2 > sizeof expr)
                return er_cli_usage_error(CMD, "expression is too long");
            if (len > 0)
                expr[len++] = ' ';
            memcpy(expr + len, s, n + 1);
            len += n;
            i++;
            continue;
        }
        int r = er_cli_opt(argc, argv, &i, "tz", CMD, &tzname);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "from", CMD, &from);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "count", CMD, &count_s);
        if (r < 0)
            return ER_EXIT_USAGE;
        if (r == 0)
            return er_cli_usage_error(CMD, "unknown option '%s'", s);
    }
    if (len == 0)
        return er_cli_usage_error(CMD, "EXPR is required");
    int64_t count = 5;
    if (count_s && er_cli_parse_int(count_s, 1, 1000, &count) < 0)
        return er_cli_usage_error(CMD, "--count must be a whole number in 1..1000");
    int64_t after = 0;
    if (from) {
        if (er_time_parse(from, &after) < 0)
            return er_cli_usage_error(CMD, "--from must be an RFC 3339 time, e.g. "
                                           "2026-03-08T00:00:00Z");
    } else {
        after = er_now_ms();
    }

    er_error err = {0};
    er_cron c;
    if (er_cron_parse(expr, &c, &err) < 0) {
        fprintf(stderr, "%s: %s\n", CMD, err.message);
        return ER_EXIT_USAGE;
    }
    const er_tz *tz;
    if (er_tz_get(tzname, &tz, &err) < 0) {
        fprintf(stderr, "%s: %s\n", CMD, err.message);
        return ER_EXIT_USAGE;
    }
    int status = ER_EXIT_OK;
    for (int64_t k = 0; k < count; k++) {
        int64_t next;
        if (er_cron_next(&c, tz, after, &next, &err) < 0) {
            fprintf(stderr, "%s: %s\n", CMD, err.message);
            status = ER_EXIT_USAGE;
            break;
        }
        char buf[32];
        er_time_format(next, buf);
        printf("%s\n", buf);
        after = next;
    }
    if (fflush(stdout) != 0)
        status = ER_EXIT_SERVER;
    return status;
}

/* ---- add / list / rm / trigger ---- */

typedef struct remote_args {
    er_remote_opts remote;
    const char *key;
    const char *cron, *tz, *queue, *name, *payload, *missed, *max_catchup;
    bool json;
} remote_args;

/* Scans the options of a remote verb; `add` allows the spec options. */
static int scan(int argc, char **argv, bool add, bool list, remote_args *a)
{
    for (int i = 0; i < argc;) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        if (s[0] != '-') {
            if (a->key || list)
                return er_cli_usage_error(CMD, "unexpected argument '%s'", s);
            a->key = s;
            i++;
            continue;
        }
        if (list && er_cli_flag(argv, &i, "json")) {
            a->json = true;
            continue;
        }
        int r = er_cli_remote_opt(argc, argv, &i, CMD, &a->remote);
        if (add) {
            if (r == 0)
                r = er_cli_opt(argc, argv, &i, "cron", CMD, &a->cron);
            if (r == 0)
                r = er_cli_opt(argc, argv, &i, "tz", CMD, &a->tz);
            if (r == 0)
                r = er_cli_opt(argc, argv, &i, "queue", CMD, &a->queue);
            if (r == 0)
                r = er_cli_opt(argc, argv, &i, "name", CMD, &a->name);
            if (r == 0)
                r = er_cli_opt(argc, argv, &i, "payload", CMD, &a->payload);
            if (r == 0)
                r = er_cli_opt(argc, argv, &i, "missed", CMD, &a->missed);
            if (r == 0)
                r = er_cli_opt(argc, argv, &i, "max-catchup", CMD, &a->max_catchup);
        }
        if (r < 0)
            return ER_EXIT_USAGE;
        if (r == 0)
            return er_cli_usage_error(CMD, "unknown option '%s'", s);
    }
    if (!list && !a->key)
        return er_cli_usage_error(CMD, "KEY is required");
    return 0;
}

/* The spec object of `add`; NULL after printing why. */
static json_t *add_spec(const remote_args *a, int *status)
{
    *status = ER_EXIT_USAGE;
    if (!a->cron || !a->queue || !a->name) {
        er_cli_usage_error(CMD, "add needs --cron, --queue and --name");
        return NULL;
    }
    json_t *spec = json_pack("{s:s,s:s,s:s}", "cron", a->cron, "queue", a->queue, "name",
                             a->name);
    if (!spec) {
        er_cli_usage_error(CMD, "arguments must be UTF-8 text");
        return NULL;
    }
    if (a->tz)
        json_object_set_new(spec, "tz", json_string(a->tz));
    if (a->missed)
        json_object_set_new(spec, "missed", json_string(a->missed));
    if (a->max_catchup) {
        int64_t n;
        if (er_cli_parse_int(a->max_catchup, 1, 1000, &n) < 0) {
            json_decref(spec);
            er_cli_usage_error(CMD, "--max-catchup must be a whole number in 1..1000");
            return NULL;
        }
        json_object_set_new(spec, "max_catchup", json_integer(n));
    }
    if (a->payload) {
        json_error_t je;
        json_t *p = json_loads(a->payload, JSON_DECODE_ANY, &je);
        if (!p) {
            json_decref(spec);
            er_cli_usage_error(CMD, "--payload is not valid JSON: %s", je.text);
            return NULL;
        }
        json_object_set_new(spec, "payload", p);
    }
    *status = ER_EXIT_OK;
    return spec;
}

static int print_list(errand_client *c, bool json)
{
    json_t *all = json_array();
    char cursor[160] = "";
    int status = ER_EXIT_OK;
    for (;;) {
        char path[256];
        snprintf(path, sizeof path, "/v1/schedulers?limit=1000%s%s", cursor[0] ? "&cursor=" : "",
                 cursor);
        long st = 0;
        char *body = NULL;
        int rc = errand_request(c, "GET", path, NULL, &st, &body);
        if (rc == 0 && st != 200) {
            rc = errand_last_error(c)->code ? errand_last_error(c)->code : ERRAND_EINTERNAL;
            errand_free(body);
            body = NULL;
        }
        if (rc < 0) {
            json_decref(all);
            return er_cli_report(CMD, c, rc);
        }
        json_t *root = json_loads(body, 0, NULL);
        errand_free(body);
        json_array_extend(all, json_object_get(root, "schedulers"));
        const char *next = json_string_value(json_object_get(root, "next_cursor"));
        snprintf(cursor, sizeof cursor, "%s", next ? next : "");
        json_decref(root);
        if (!cursor[0])
            break;
    }
    if (json) {
        json_t *o = json_pack("{s:o}", "schedulers", all);
        char *text = json_dumps(o, JSON_COMPACT);
        status = text && er_cli_print_json(text) == 0 ? ER_EXIT_OK : ER_EXIT_SERVER;
        free(text);
        json_decref(o);
        return status;
    }
    er_table t;
    er_table_init(&t, 7, 0);
    const char *head[7] = {"KEY", "CRON", "TZ", "QUEUE/NAME", "MISSED", "NEXT RUN", "LAST TICK"};
    er_table_add(&t, head);
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s) {
        char qn[300];
        snprintf(qn, sizeof qn, "%s/%s", json_string_value(json_object_get(s, "queue")),
                 json_string_value(json_object_get(s, "name")));
        const char *row[7] = {json_string_value(json_object_get(s, "key")),
                              json_string_value(json_object_get(s, "cron")),
                              json_string_value(json_object_get(s, "tz")),
                              qn,
                              json_string_value(json_object_get(s, "missed")),
                              json_string_value(json_array_get(json_object_get(s, "next_runs"), 0)),
                              json_string_value(json_object_get(s, "last_tick"))};
        er_table_add(&t, row);
    }
    status = er_table_print(&t) < 0 ? ER_EXIT_SERVER : ER_EXIT_OK;
    if (json_array_size(all) == 0)
        fprintf(stderr, CMD ": no schedulers\n");
    er_table_fini(&t);
    json_decref(all);
    return status;
}

static int cron_remote(const char *verb, int argc, char **argv)
{
    bool add = strcmp(verb, "add") == 0, list = strcmp(verb, "list") == 0;
    remote_args a = {0};
    int status = scan(argc, argv, add, list, &a);
    if (status == 1)
        return ER_EXIT_OK; /* --help */
    if (status != 0)
        return status;
    json_t *spec = NULL;
    if (add && !(spec = add_spec(&a, &status)))
        return status;
    errand_client *c = NULL;
    status = er_cli_connect(CMD, &a.remote, &c);
    if (status != ER_EXIT_OK) {
        json_decref(spec);
        return status;
    }
    char *out = NULL;
    int rc = 0;
    if (list) {
        status = print_list(c, a.json);
    } else if (add) {
        char *text = json_dumps(spec, JSON_COMPACT);
        rc = text ? errand_scheduler_put(c, a.key, text, &out) : ERRAND_ENOMEM;
        free(text);
    } else if (strcmp(verb, "rm") == 0) {
        rc = errand_scheduler_delete(c, a.key);
        if (rc == 0)
            fprintf(stderr, CMD ": scheduler %s deleted\n", a.key);
    } else {
        rc = errand_scheduler_trigger(c, a.key, &out);
    }
    if (rc < 0)
        status = er_cli_report(CMD, c, rc);
    else if (out && er_cli_print_json(out) < 0)
        status = ER_EXIT_SERVER;
    errand_free(out);
    json_decref(spec);
    errand_client_free(c);
    return status;
}

int er_cli_cron(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fputs(usage, stdout);
        return ER_EXIT_OK;
    }
    if (argc < 1)
        return er_cli_usage_error(CMD, "expected a verb: next, add, list, rm or trigger");
    if (strcmp(argv[0], "next") == 0)
        return cron_next(argc - 1, argv + 1);
    if (strcmp(argv[0], "add") == 0 || strcmp(argv[0], "list") == 0 ||
        strcmp(argv[0], "rm") == 0 || strcmp(argv[0], "trigger") == 0)
        return cron_remote(argv[0], argc - 1, argv + 1);
    return er_cli_usage_error(CMD, "unknown verb '%s' (expected: next, add, list, rm, trigger)",
                              argv[0]);
}
