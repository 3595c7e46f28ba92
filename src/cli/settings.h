/* SPDX-License-Identifier: MIT
 *
 * One table of settings drives `errand serve` flags, ERRAND_* environment
 * variables, the config file and --help. Precedence: flag, environment,
 * config file, default. Pure parsing; serve.c turns values into configs.
 */
#ifndef ER_CLI_SETTINGS_H
#define ER_CLI_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

typedef enum er_setting_type {
    ER_SET_STRING,
    ER_SET_INT,      /* int64 within [min, max], or one of the names in `choices` */
    ER_SET_SIZE,     /* bytes: 123, 64k, 1m */
    ER_SET_DURATION, /* ms: 500ms, 30s, 5m, 1h, 7d, or a bare number of ms */
    ER_SET_ENUM,     /* one of `choices` ("a|b|c") */
    ER_SET_LIST,     /* repeatable; env and file give comma-separated values */
    ER_SET_BOOL,     /* --name sets it, --no-name clears it; env and file: true|false */
    ER_SET_SWITCH,   /* --name sets it (num 1); a flag alone: no variable, no file key */
} er_setting_type;

typedef struct er_setting {
    const char *name;     /* flag --name, env ERRAND_NAME (upper, '-' -> '_'), file key */
    er_setting_type type;
    const char *def;      /* default as text, NULL = unset */
    int64_t min, max;     /* INT, SIZE, DURATION */
    const char *choices;  /* ENUM: "a|b|c"; INT: NULL or names of values ("auto=-1") */
    const char *help;
} er_setting;

#define ER_SETTINGS_MAX_LIST 32

/* Values, parallel to the table. */
typedef struct er_setting_value {
    char *text;           /* owned; NULL when unset */
    int64_t num;          /* parsed INT/SIZE/DURATION; BOOL 1 or 0 */
    char *list[ER_SETTINGS_MAX_LIST]; /* LIST: owned items */
    size_t nlist;
    int source;           /* 0 default, 1 file, 2 env, 3 flag */
} er_setting_value;

typedef struct er_settings {
    const er_setting *table;
    size_t n;
    er_setting_value *values;
    /* Borrowed, may be NULL: another command's table whose keys the config
     * file may also hold (a file shared with errand serve); they are
     * accepted there and not used. Unknown keys are still refused. */
    const er_setting *file_also;
    size_t nfile_also;
} er_settings;

int er_settings_init(er_settings *s, const er_setting *table, size_t n, er_error *err);
void er_settings_fini(er_settings *s);

/* Loads, in order: defaults; the config file (from --config / ERRAND_CONFIG
 * when the table has "config"); ERRAND_* variables from envp; argv flags
 * (--name value or --name=value). Leftover positional arguments are an
 * error. Returns 0, 1 when --help was asked (help printed to out), or
 * ER_EINVAL with *err naming the setting. */
int er_settings_load(er_settings *s, int argc, char **argv, char **envp, FILE *out,
                     er_error *err);

const er_setting_value *er_settings_get(const er_settings *s, const char *name);

/* Parses a duration ("500ms", "30s", "5m", "1h", "7d", "250") into ms. */
int er_parse_duration(const char *s, int64_t *ms);
/* Parses a size ("1024", "64k", "1m", "1g") into bytes. */
int er_parse_size(const char *s, int64_t *bytes);

void er_settings_help(const er_settings *s, const char *usage, FILE *out);
/* The flag as --help shows it: "--name", or "--[no-]name" for a BOOL. */
void er_setting_flag(const er_setting *d, char *out, size_t size);
/* The environment variable of setting `name`: ERRAND_NAME. */
void er_setting_env(const char *name, char *out, size_t size);
/* The same for a command that reads flags only (no environment variables,
 * no config file): lists the flags alone. */
void er_settings_help_flags(const er_settings *s, const char *usage, FILE *out);

#endif
