/* SPDX-License-Identifier: MIT
 *
 * `errand queues [--json]`: one line per queue with its job counts by state,
 * whether it is paused (or throttled) and the age of its oldest waiting job, read through
 * liberrand. --json prints the server's reply as it is, for scripts.
 */
#include "cli/cli.h"
#include "cli/remote.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define CMD "errand queues"

static const char usage[] =
    "usage: errand queues [--json] [--server URL] [--token TOKEN]\n"
    "\n"
    "Lists every queue: jobs by state, paused (or throttled), age of the oldest\n"
    "waiting job.\n"
    "\n"
    "options:\n"
    "  --json         print the server's JSON reply instead of a table\n"
    "  --server URL   server (default $ERRAND_SERVER or " ER_CLI_DEFAULT_SERVER ")\n"
    "  --token TOKEN  bearer token (default $ERRAND_TOKEN)\n"
    "\n"
    "exit status: 0 listed, 1 refused by the server, 2 usage, 3 server unreachable\n";

static const char *const count_names[] = {"scheduled", "waiting", "active", "completed",
                                          "dead"};
#define NCOUNTS (sizeof count_names / sizeof count_names[0])

static int print_table(const char *text)
{
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    json_t *qs = json_object_get(root, "queues");
    if (!json_is_array(qs)) {
        fprintf(stderr, CMD ": unexpected reply from the server (no \"queues\" list)\n");
        json_decref(root);
        return ER_EXIT_SERVER;
    }
    er_table t;
    er_table_init(&t, 8, 0x3eu); /* the five counts are right-aligned */
    const char *head[8] = {"QUEUE",     "SCHEDULED", "WAITING", "ACTIVE",
                           "COMPLETED", "DEAD",      "PAUSED",  "OLDEST WAITING"};
    er_table_add(&t, head);
    size_t i;
    json_t *q;
    char nums[NCOUNTS][24], age[32];
    json_array_foreach(qs, i, q) {
        const char *row[8];
        row[0] = json_string_value(json_object_get(q, "name"));
        json_t *counts = json_object_get(q, "counts");
        for (size_t k = 0; k < NCOUNTS; k++) {
            json_t *v = json_object_get(counts, count_names[k]);
            snprintf(nums[k], sizeof nums[k], "%lld",
                     json_is_integer(v) ? (long long)json_integer_value(v) : 0LL);
            row[1 + k] = nums[k];
        }
        /* "throttled": a throttled failure pauses it (throttled_until) */
        row[6] = json_is_true(json_object_get(q, "paused"))              ? "yes"
                 : json_is_string(json_object_get(q, "throttled_until")) ? "throttled"
                                                                         : "no";
        json_t *a = json_object_get(q, "oldest_waiting_age_ms");
        json_t *waiting = json_object_get(counts, "waiting");
        if (json_is_integer(a) && json_integer_value(waiting) > 0) {
            er_cli_format_age(json_integer_value(a), age, sizeof age);
            row[7] = age;
        } else {
            row[7] = "-";
        }
        er_table_add(&t, row);
    }
    int status = er_table_print(&t) < 0 ? ER_EXIT_SERVER : ER_EXIT_OK;
    if (json_array_size(qs) == 0)
        fprintf(stderr, CMD ": no queues yet (a queue appears with its first job or setting)\n");
    er_table_fini(&t);
    json_decref(root);
    return status;
}

int er_cli_queues(int argc, char **argv)
{
    er_remote_opts remote = {0};
    bool json = false;
    for (int i = 0; i < argc;) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(usage, stdout);
            return ER_EXIT_OK;
        }
        if (er_cli_flag(argv, &i, "json")) {
            json = true;
            continue;
        }
        int r = er_cli_remote_opt(argc, argv, &i, CMD, &remote);
        if (r < 0)
            return ER_EXIT_USAGE;
        if (r == 0)
            return er_cli_usage_error(CMD, "unexpected argument '%s'", s);
    }
    errand_client *c = NULL;
    int status = er_cli_connect(CMD, &remote, &c);
    if (status != ER_EXIT_OK)
        return status;
    char *text = NULL;
    int rc = errand_queues(c, &text);
    if (rc < 0)
        status = er_cli_report(CMD, c, rc);
    else if (json)
        status = er_cli_print_json(text) < 0 ? ER_EXIT_SERVER : ER_EXIT_OK;
    else
        status = print_table(text);
    errand_free(text);
    errand_client_free(c);
    return status;
}
