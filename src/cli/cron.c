/* SPDX-License-Identifier: MIT
 *
 * `errand cron next EXPR [--tz ZONE] [--from RFC3339] [--count N]`: prints
 * the next fire instants of a cron expression as RFC 3339 UTC, one a line.
 * Local only: it parses and computes through src/core/cron.h and never talks
 * to a server. Exit 0 ok, 2 for a bad command line, expression or zone.
 */
#include "cli/cli.h"
#include "cli/remote.h"
#include "core/cron.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "errand cron"

static const char usage[] =
    "usage: errand cron next EXPR [--tz ZONE] [--from RFC3339] [--count N]\n"
    "\n"
    "Prints the next N fire instants of a cron expression as RFC 3339 UTC.\n"
    "EXPR: 5 fields (min hour dom month dow), 6 with seconds first, or\n"
    "@yearly @monthly @weekly @daily @hourly; quote it, or pass its fields as\n"
    "separate arguments. See docs/cron.md for the syntax and the DST policy.\n"
    "\n"
    "options:\n"
    "  --tz ZONE        IANA time zone, e.g. America/New_York (default UTC)\n"
    "  --from RFC3339   start after this instant (default now)\n"
    "  --count N        how many instants, 1..1000 (default 5)\n"
    "\n"
    "exit status: 0 ok, 2 bad arguments, expression or zone\n";

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
    er_tz *tz = NULL;
    if (er_tz_open(tzname, &tz, &err) < 0) {
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
    er_tz_free(tz);
    if (fflush(stdout) != 0)
        status = ER_EXIT_SERVER;
    return status;
}

int er_cli_cron(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fputs(usage, stdout);
        return ER_EXIT_OK;
    }
    if (argc < 1)
        return er_cli_usage_error(CMD, "expected a verb: next");
    if (strcmp(argv[0], "next") == 0)
        return cron_next(argc - 1, argv + 1);
    return er_cli_usage_error(CMD, "unknown verb '%s' (expected: next)", argv[0]);
}
