/* SPDX-License-Identifier: MIT
 *
 * `errand job get ID`: prints one job as JSON (state, attempts, last error,
 * timestamps) through liberrand. Read-only; any token role may call it.
 */
#include "cli/cli.h"
#include "cli/remote.h"

#include <stdio.h>
#include <string.h>

#define CMD "errand job"

static const char usage[] =
    "usage: errand job get ID [--server URL] [--token TOKEN]\n"
    "\n"
    "Prints the job as JSON: state, attempts, last_error, result, timestamps.\n"
    "\n"
    "options:\n"
    "  --server URL   server (default $ERRAND_SERVER or " ER_CLI_DEFAULT_SERVER ")\n"
    "  --token TOKEN  bearer token (default $ERRAND_TOKEN)\n"
    "\n"
    "exit status: 0 found, 1 not found or refused, 2 usage, 3 server unreachable\n";

int er_cli_job(int argc, char **argv)
{
    er_remote_opts remote = {0};
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
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
        int r = er_cli_remote_opt(argc, argv, &i, CMD, &remote);
        if (r < 0)
            return ER_EXIT_USAGE;
        if (r == 0)
            return er_cli_usage_error(CMD, "unknown option '%s'", s);
    }
    if (npos == 0 || strcmp(pos[0], "get") != 0)
        return er_cli_usage_error(CMD, "expected 'get ID'");
    if (npos < 2)
        return er_cli_usage_error(CMD, "ID is required");

    errand_client *c = NULL;
    int status = er_cli_connect(CMD, &remote, &c);
    if (status != ER_EXIT_OK)
        return status;
    char *job = NULL;
    int rc = errand_job_get(c, pos[1], &job);
    if (rc < 0)
        status = er_cli_report(CMD, c, rc);
    else if (er_cli_print_json(job) < 0)
        status = ER_EXIT_SERVER;
    errand_free(job);
    errand_client_free(c);
    return status;
}
