/* SPDX-License-Identifier: MIT
 *
 * What the client commands (enqueue, job, queues, dlq) share: the --server
 * and --token options with their ERRAND_SERVER / ERRAND_TOKEN fallbacks,
 * option scanning, one-line error reports with the exit-status convention,
 * JSON printing and aligned tables. These commands reach the server only
 * through the public liberrand API (include/errand/errand.h).
 */
#ifndef ER_CLI_REMOTE_H
#define ER_CLI_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errand/errand.h"

#define ER_CLI_DEFAULT_SERVER "http://127.0.0.1:7400"

/* Exit statuses of the client commands. */
enum {
    ER_EXIT_OK = 0,
    ER_EXIT_SERVER = 1,  /* the server refused or failed the request */
    ER_EXIT_USAGE = 2,   /* bad command line */
    ER_EXIT_CONNECT = 3, /* the server cannot be reached */
};

typedef struct er_remote_opts {
    const char *server; /* borrowed from argv; NULL: ERRAND_SERVER or the default */
    const char *token;  /* borrowed from argv; NULL: ERRAND_TOKEN or none */
} er_remote_opts;

/* Scans one option at argv[*i]. When argv[*i] is `--name VALUE` or
 * `--name=VALUE`, sets *val (borrowed from argv), advances *i past it and
 * returns 1; returns 0 when argv[*i] is another argument; returns -1 after
 * printing "CMD: --name needs a value" when the value is missing. */
int er_cli_opt(int argc, char **argv, int *i, const char *name, const char *cmd,
               const char **val);

/* True (and *i advanced) when argv[*i] is exactly `--name`. */
bool er_cli_flag(char **argv, int *i, const char *name);

/* Scans --server and --token; same returns as er_cli_opt. */
int er_cli_remote_opt(int argc, char **argv, int *i, const char *cmd, er_remote_opts *o);

/* Prints "CMD: message (see 'CMD --help')" on stderr; returns ER_EXIT_USAGE. */
int er_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Creates the client from the options (flag, then environment, then the
 * default). Returns ER_EXIT_OK and *out, or prints why and returns
 * ER_EXIT_USAGE (bad URL or token). */
int er_cli_connect(const char *cmd, const er_remote_opts *o, errand_client **out);

/* Prints the one-line report of a failed call (code rc) on stderr, naming
 * the field the server named, and returns the exit status: ER_EXIT_CONNECT
 * when the server was not reached, ER_EXIT_USAGE for an argument refused
 * before anything was sent, ER_EXIT_SERVER otherwise. */
int er_cli_report(const char *cmd, errand_client *c, int rc);

/* Prints JSON text indented on stdout; text that does not parse is
 * printed as it is. Returns 0, or -1 when stdout failed. */
int er_cli_print_json(const char *text);

/* Parses a whole decimal integer in [lo, hi]; returns 0 or -1. */
int er_cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Formats an age in ms as "45s", "3m12s", "2h5m" or "4d3h" into out. */
void er_cli_format_age(int64_t ms, char *out, size_t size);

/* An aligned text table: add the header row, then rows, then print. Each
 * cell is copied. Columns flagged in right_mask (bit i = column i) are
 * right-aligned. */
#define ER_TABLE_MAX_COLS 10
#define ER_TABLE_MAX_ROWS ((size_t)1 << 24)
typedef struct er_table {
    size_t ncols;
    unsigned right_mask;
    char **cells; /* owned, row-major */
    size_t nrows, cap; /* rows */
    bool oom;
} er_table;

void er_table_init(er_table *t, size_t ncols, unsigned right_mask);
/* Adds one row of ncols cells (copied); a NULL cell prints as "-". */
void er_table_add(er_table *t, const char *const *cells);
/* Prints the table on stdout; returns 0, or -1 on out of memory or a write error. */
int er_table_print(const er_table *t);
void er_table_fini(er_table *t);

#endif
