/* SPDX-License-Identifier: MIT
 *
 * `errand dlq list` and `errand dlq redrive ID`: inspect dead letters (jobs
 * that failed for good, with their last error and attempts) and send one back
 * to its queue as a new job, through liberrand. Redrive needs an admin token
 * when the server has tokens.
 */
#include "cli/cli.h"
#include "cli/remote.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define CMD "errand dlq"
#define ERROR_COL_MAX 80 /* bytes of the last error shown in the table */

static const char usage[] =
    "usage: errand dlq list [--queue Q] [--limit N] [--json]\n"
    "       errand dlq redrive ID\n"
    "\n"
    "list     dead jobs, newest failure first, with attempts and last error\n"
    "redrive  enqueue a copy of dead job ID (new id ID-redrive-N) and print it;\n"
    "         needs an admin token when the server has tokens\n"
    "\n"
    "options:\n"
    "  --queue Q      only dead jobs of queue Q\n"
    "  --limit N      at most N jobs (server default when absent)\n"
    "  --json         print the server's JSON reply instead of a table\n"
    "  --server URL   server (default $ERRAND_SERVER or " ER_CLI_DEFAULT_SERVER ")\n"
    "  --token TOKEN  bearer token (default $ERRAND_TOKEN)\n"
    "\n"
    "exit status: 0 done, 1 refused by the server, 2 usage, 3 server unreachable\n";

/* "class: message" on one line, cut at a character boundary. */
static void error_cell(json_t *last_error, char *out, size_t size)
{
    const char *cls = json_string_value(json_object_get(last_error, "class"));
    const char *msg = json_string_value(json_object_get(last_error, "message"));
    if (!cls && !msg) {
        snprintf(out, size, "-");
        return;
    }
    snprintf(out, size, "%s%s%s", cls ? cls : "", cls && msg ? ": " : "", msg ? msg : "");
    size_t n = strlen(out);
    if (n > ERROR_COL_MAX) {
        n = ERROR_COL_MAX - 3;
        while (n > 0 && ((unsigned char)out[n] & 0xc0) == 0x80)
            n--;
        snprintf(out + n, size - n, "...");
    }
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
}

static int print_table(const char *text)
{
    json_t *root = json_loads(text, 0, NULL);
    json_t *jobs = json_object_get(root, "jobs");
    if (!json_is_array(jobs)) {
        fprintf(stderr, CMD ": unexpected reply from the server (no \"jobs\" list)\n");
        json_decref(root);
        return ER_EXIT_SERVER;
    }
    er_table t;
    er_table_init(&t, 7, 0x8u); /* ATTEMPTS right-aligned */
    const char *head[7] = {"ID", "QUEUE", "NAME", "ATTEMPTS", "FAILED AT", "REDRIVES",
                           "LAST ERROR"};
    er_table_add(&t, head);
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j) {
        char attempts[48], redrives[24], err[ERROR_COL_MAX + 8];
        snprintf(attempts, sizeof attempts, "%lld/%lld",
                 (long long)json_integer_value(json_object_get(j, "attempts")),
                 (long long)json_integer_value(json_object_get(j, "max_attempts")));
        snprintf(redrives, sizeof redrives, "%lld",
                 (long long)json_integer_value(json_object_get(j, "redrive_count")));
        error_cell(json_object_get(j, "last_error"), err, sizeof err);
        const char *row[7] = {json_string_value(json_object_get(j, "id")),
                              json_string_value(json_object_get(j, "queue")),
                              json_string_value(json_object_get(j, "name")),
                              attempts,
                              json_string_value(json_object_get(j, "finished_at")),
                              redrives,
                              err};
        er_table_add(&t, row);
    }
    int status = er_table_print(&t) < 0 ? ER_EXIT_SERVER : ER_EXIT_OK;
    if (json_array_size(jobs) == 0)
        fprintf(stderr, CMD ": no dead jobs\n");
    else if (json_is_string(json_object_get(root, "next_cursor")))
        fprintf(stderr, CMD ": more dead jobs than shown (a page stops at --limit jobs or at "
                        "the server's --max-reply bytes); raise --limit or use --json\n");
    er_table_fini(&t);
    json_decref(root);
    return status;
}

int er_cli_dlq(int argc, char **argv)
{
    er_remote_opts remote = {0};
    const char *pos[2] = {NULL, NULL}, *queue = NULL, *limit_s = NULL;
    int npos = 0;
    bool json = false;
    for (int i = 0; i < argc;) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(usage, stdout);
            return ER_EXIT_OK;
        }
        if (s[0] != '-') {
            if (npos == 2)
                return er_cli_usage_error(CMD, "unexpected argument '%s'", s);
            pos[npos++] = s;
            i++;
            continue;
        }
        if (er_cli_flag(argv, &i, "json")) {
            json = true;
            continue;
        }
        int r = er_cli_remote_opt(argc, argv, &i, CMD, &remote);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "queue", CMD, &queue);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "limit", CMD, &limit_s);
        if (r < 0)
            return ER_EXIT_USAGE;
        if (r == 0)
            return er_cli_usage_error(CMD, "unknown option '%s'", s);
    }
    bool list = npos >= 1 && strcmp(pos[0], "list") == 0;
    bool redrive = npos >= 1 && strcmp(pos[0], "redrive") == 0;
    if (!list && !redrive)
        return er_cli_usage_error(CMD, "expected 'list' or 'redrive ID'");
    if (list && npos > 1)
        return er_cli_usage_error(CMD, "unexpected argument '%s'", pos[1]);
    if (redrive && npos < 2)
        return er_cli_usage_error(CMD, "ID is required");
    if (redrive && (queue || limit_s || json))
        return er_cli_usage_error(CMD, "--queue, --limit and --json go with 'list'");
    int64_t limit = 0;
    if (limit_s && er_cli_parse_int(limit_s, 1, 1000000, &limit) < 0)
        return er_cli_usage_error(CMD, "--limit must be a positive integer");

    errand_client *c = NULL;
    int status = er_cli_connect(CMD, &remote, &c);
    if (status != ER_EXIT_OK)
        return status;
    char *text = NULL;
    int rc = list ? errand_dead_list(c, queue, (int)limit, &text)
                  : errand_dead_redrive(c, pos[1], &text);
    if (rc < 0)
        status = er_cli_report(CMD, c, rc);
    else if (redrive || json)
        status = er_cli_print_json(text) < 0 ? ER_EXIT_SERVER : ER_EXIT_OK;
    else
        status = print_table(text);
    errand_free(text);
    errand_client_free(c);
    return status;
}
