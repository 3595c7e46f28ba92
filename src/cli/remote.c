/* SPDX-License-Identifier: MIT
 *
 * Shared plumbing of the client commands: option scanning, the --server and
 * --token defaults, error reports mapped to exit statuses, JSON printing and
 * aligned tables. It uses only liberrand's public API and jansson; it must
 * not include server, engine or store headers.
 */
#include "cli/remote.h"
#include "util/buf.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int er_cli_opt(int argc, char **argv, int *i, const char *name, const char *cmd,
               const char **val)
{
    const char *a = argv[*i];
    if (a[0] != '-' || a[1] != '-')
        return 0;
    size_t n = strlen(name);
    if (strncmp(a + 2, name, n) != 0)
        return 0;
    if (a[2 + n] == '=') {
        *val = a + 3 + n;
        *i += 1;
        return 1;
    }
    if (a[2 + n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: --%s needs a value\n", cmd, name);
        return -1;
    }
    *val = argv[*i + 1];
    *i += 2;
    return 1;
}

bool er_cli_flag(char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    if (a[0] == '-' && a[1] == '-' && strcmp(a + 2, name) == 0) {
        *i += 1;
        return true;
    }
    return false;
}

int er_cli_remote_opt(int argc, char **argv, int *i, const char *cmd, er_remote_opts *o)
{
    int r = er_cli_opt(argc, argv, i, "server", cmd, &o->server);
    if (r == 0)
        r = er_cli_opt(argc, argv, i, "token", cmd, &o->token);
    return r;
}

int er_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    /* One line and where the usage is: a typo should not scroll the screen. */
    fprintf(stderr, " (see '%s --help')\n", cmd);
    return ER_EXIT_USAGE;
}

int er_cli_connect(const char *cmd, const er_remote_opts *o, errand_client **out)
{
    const char *server = o->server;
    if (!server || !*server)
        server = getenv("ERRAND_SERVER");
    if (!server || !*server)
        server = ER_CLI_DEFAULT_SERVER;
    const char *token = o->token;
    if (!token)
        token = getenv("ERRAND_TOKEN");
    int rc = errand_client_new(server, token, out);
    if (rc == ERRAND_EINVAL) {
        fprintf(stderr,
                "%s: --server must be an http:// or https:// URL and --token plain text "
                "(server '%s')\n",
                cmd, server);
        return ER_EXIT_USAGE;
    }
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n", cmd, errand_strerror(rc));
        return ER_EXIT_SERVER;
    }
    return ER_EXIT_OK;
}

int er_cli_report(const char *cmd, errand_client *c, int rc)
{
    const errand_error *e = errand_last_error(c);
    const char *msg = e->message[0] ? e->message : errand_strerror(rc);
    if (rc == ERRAND_ECONNECT) {
        fprintf(stderr, "%s: %s\n", cmd, msg);
        return ER_EXIT_CONNECT;
    }
    char where[160] = "";
    if (e->field[0])
        snprintf(where, sizeof where, "%s: ", e->field);
    if (e->http_status == 0) {
        /* Refused by the library before anything was sent. */
        fprintf(stderr, "%s: %s%s\n", cmd, where, msg);
        return rc == ERRAND_EINVAL ? ER_EXIT_USAGE : ER_EXIT_SERVER;
    }
    const char *hint = "";
    if (rc == ERRAND_EAUTH)
        hint = " (give a token with --token or ERRAND_TOKEN)";
    else if (rc == ERRAND_EPERM)
        hint = " (this needs a token with a stronger role)";
    fprintf(stderr, "%s: %s%s (%s, HTTP %ld)%s\n", cmd, where, msg,
            e->code_name[0] ? e->code_name : "error", e->http_status, hint);
    return ER_EXIT_SERVER;
}

int er_cli_print_json(const char *text)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    char *pretty = v ? json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    int rc = printf("%s\n", pretty ? pretty : text) < 0 ? -1 : 0;
    free(pretty);
    if (fflush(stdout) != 0)
        rc = -1;
    return rc;
}

int er_cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

void er_cli_format_age(int64_t ms, char *out, size_t size)
{
    int64_t s = ms / 1000;
    if (ms < 1000)
        snprintf(out, size, "%lldms", (long long)(ms < 0 ? 0 : ms));
    else if (s < 60)
        snprintf(out, size, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(out, size, "%lldm%llds", (long long)(s / 60), (long long)(s % 60));
    else if (s < 86400)
        snprintf(out, size, "%lldh%lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
    else
        snprintf(out, size, "%lldd%lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
}

/* ---- tables ---------------------------------------------------------- */

void er_table_init(er_table *t, size_t ncols, unsigned right_mask)
{
    memset(t, 0, sizeof *t);
    t->ncols = ncols > ER_TABLE_MAX_COLS ? ER_TABLE_MAX_COLS : ncols;
    t->right_mask = right_mask;
}

void er_table_add(er_table *t, const char *const *cells)
{
    if (t->oom)
        return;
    /* rows of ncols cell pointers */
    if (er_grow_array(&t->cells, &t->cap, t->nrows + 1, t->ncols * sizeof *t->cells,
                      ER_TABLE_MAX_ROWS) < 0) {
        t->oom = true;
        return;
    }
    char **row = t->cells + t->nrows * t->ncols;
    for (size_t i = 0; i < t->ncols; i++) {
        row[i] = strdup(cells[i] ? cells[i] : "-");
        if (!row[i]) {
            for (size_t j = 0; j < i; j++)
                free(row[j]);
            t->oom = true;
            return;
        }
    }
    t->nrows++;
}

int er_table_print(const er_table *t)
{
    if (t->oom)
        return -1;
    size_t w[ER_TABLE_MAX_COLS] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t i = 0; i < t->ncols; i++) {
            size_t n = strlen(t->cells[r * t->ncols + i]);
            if (n > w[i])
                w[i] = n;
        }
    int rc = 0;
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t i = 0; i < t->ncols; i++) {
            const char *cell = t->cells[r * t->ncols + i];
            bool last = i + 1 == t->ncols;
            bool right = (t->right_mask >> i) & 1u;
            int width = (int)w[i];
            if (right)
                rc |= printf("%*s", width, cell) < 0;
            else
                rc |= printf("%-*s", last ? 0 : width, cell) < 0;
            if (!last)
                rc |= printf("  ") < 0;
        }
        rc |= printf("\n") < 0;
    }
    if (fflush(stdout) != 0)
        rc = 1;
    return rc ? -1 : 0;
}

void er_table_fini(er_table *t)
{
    for (size_t k = 0; k < t->nrows * t->ncols; k++)
        free(t->cells[k]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}
