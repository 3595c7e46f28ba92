/* SPDX-License-Identifier: MIT
 *
 * Settings table parsing: defaults, config file, environment, flags.
 */
#include "cli/settings.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int er_parse_duration(const char *s, int64_t *ms)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || v < 0)
        return ER_EINVAL;
    int64_t mul;
    if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0)
        mul = 1;
    else if (strcmp(end, "s") == 0)
        mul = 1000;
    else if (strcmp(end, "m") == 0)
        mul = 60000;
    else if (strcmp(end, "h") == 0)
        mul = 3600000;
    else if (strcmp(end, "d") == 0)
        mul = 86400000;
    else
        return ER_EINVAL;
    if (v > INT64_MAX / mul)
        return ER_EINVAL;
    *ms = (int64_t)v * mul;
    return 0;
}

int er_parse_size(const char *s, int64_t *bytes)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || v < 0)
        return ER_EINVAL;
    int64_t mul;
    if (!*end || strcasecmp(end, "b") == 0)
        mul = 1;
    else if (strcasecmp(end, "k") == 0 || strcasecmp(end, "kb") == 0 || strcasecmp(end, "kib") == 0)
        mul = 1024;
    else if (strcasecmp(end, "m") == 0 || strcasecmp(end, "mb") == 0 || strcasecmp(end, "mib") == 0)
        mul = 1024 * 1024;
    else if (strcasecmp(end, "g") == 0 || strcasecmp(end, "gb") == 0 || strcasecmp(end, "gib") == 0)
        mul = 1024 * 1024 * 1024;
    else
        return ER_EINVAL;
    if (v > INT64_MAX / mul)
        return ER_EINVAL;
    *bytes = (int64_t)v * mul;
    return 0;
}

int er_settings_init(er_settings *s, const er_setting *table, size_t n, er_error *err)
{
    s->table = table;
    s->n = n;
    s->file_also = NULL;
    s->nfile_also = 0;
    s->values = calloc(n, sizeof *s->values);
    if (!s->values)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    return 0;
}

static void value_clear(er_setting_value *v)
{
    free(v->text);
    v->text = NULL;
    for (size_t i = 0; i < v->nlist; i++)
        free(v->list[i]);
    v->nlist = 0;
}

void er_settings_fini(er_settings *s)
{
    if (!s->values)
        return;
    for (size_t i = 0; i < s->n; i++)
        value_clear(&s->values[i]);
    free(s->values);
    s->values = NULL;
}

static ssize_t find(const er_settings *s, const char *name, size_t len)
{
    for (size_t i = 0; i < s->n; i++)
        if (strlen(s->table[i].name) == len && strncmp(s->table[i].name, name, len) == 0)
            return (ssize_t)i;
    return -1;
}

const er_setting_value *er_settings_get(const er_settings *s, const char *name)
{
    ssize_t i = find(s, name, strlen(name));
    return i < 0 ? NULL : &s->values[i];
}

static int list_add(er_setting_value *v, const char *item, size_t len, const er_setting *def,
                    er_error *err)
{
    while (len && isspace((unsigned char)*item)) {
        item++;
        len--;
    }
    while (len && isspace((unsigned char)item[len - 1]))
        len--;
    if (!len)
        return 0;
    if (v->nlist == ER_SETTINGS_MAX_LIST)
        return er_error_set(err, ER_EINVAL, def->name, "%s: at most %d values", def->name,
                            ER_SETTINGS_MAX_LIST);
    v->list[v->nlist] = strndup(item, len);
    if (!v->list[v->nlist])
        return er_error_set(err, ER_ENOMEM, def->name, "out of memory");
    v->nlist++;
    return 0;
}

/* An INT's names ("auto=-1|off=0"): true and *num when text is one of them. */
static bool int_name(const char *names, const char *text, int64_t *num)
{
    size_t len = strlen(text);
    for (const char *p = names; p && *p;) {
        const char *bar = strchr(p, '|'), *eq = strchr(p, '=');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (eq && eq < p + l && (size_t)(eq - p) == len && strncmp(p, text, len) == 0) {
            *num = strtoll(eq + 1, NULL, 10);
            return true;
        }
        p += l + (bar ? 1 : 0);
    }
    return false;
}

/* The names alone of an INT's names ("auto=-1|off=0" -> "auto|off"). */
static void int_names(const char *names, char *out, size_t size)
{
    size_t n = 0;
    bool skip = false;
    for (const char *p = names; *p && n + 1 < size; p++) {
        if (*p == '=')
            skip = true;
        else if (*p == '|')
            skip = false;
        if (!skip)
            out[n++] = *p;
    }
    out[n] = '\0';
}

/* Sets value i from text. `append` keeps earlier list items of the same source. */
static int set_value(er_settings *s, size_t i, const char *text, int source, er_error *err)
{
    const er_setting *def = &s->table[i];
    er_setting_value *v = &s->values[i];
    if (def->type == ER_SET_LIST) {
        if (v->source != source)
            value_clear(v);
        v->source = source;
        bool split = source != 3;
        const char *p = text;
        while (split && *p) {
            const char *c = strchr(p, ',');
            size_t len = c ? (size_t)(c - p) : strlen(p);
            int rc = list_add(v, p, len, def, err);
            if (rc < 0)
                return rc;
            p += len + (c ? 1 : 0);
        }
        return split ? 0 : list_add(v, text, strlen(text), def, err);
    }
    int64_t num = 0;
    int rc = 0;
    bool named = false; /* an INT given by one of its names: outside the range */
    switch (def->type) {
    case ER_SET_INT: {
        if (int_name(def->choices, text, &num))
            named = true;
        char *end;
        errno = 0;
        long long x = named ? num : strtoll(text, &end, 10);
        if (!named && (end == text || *end || errno))
            rc = ER_EINVAL;
        num = x;
        break;
    }
    case ER_SET_SIZE:
        rc = er_parse_size(text, &num);
        break;
    case ER_SET_DURATION:
        rc = er_parse_duration(text, &num);
        break;
    case ER_SET_BOOL:
    case ER_SET_SWITCH:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
            num = 1;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
            num = 0;
        else
            return er_error_set(err, ER_EINVAL, def->name,
                                "--%s takes true or false (1 or 0), not '%s'", def->name, text);
        break;
    case ER_SET_ENUM: {
        rc = ER_EINVAL;
        size_t len = strlen(text);
        for (const char *p = def->choices; p && *p;) {
            const char *bar = strchr(p, '|');
            size_t l = bar ? (size_t)(bar - p) : strlen(p);
            if (l == len && strncmp(p, text, len) == 0)
                rc = 0;
            p += l + (bar ? 1 : 0);
        }
        if (rc < 0)
            return er_error_set(err, ER_EINVAL, def->name, "--%s must be one of %s, not '%s'",
                                def->name, def->choices, text);
        break;
    }
    default:
        break;
    }
    char names[64] = "";
    if (def->type == ER_SET_INT && def->choices)
        int_names(def->choices, names, sizeof names);
    if (rc < 0 && names[0])
        return er_error_set(err, ER_EINVAL, def->name, "--%s takes %lld..%lld or %s, not '%s'",
                            def->name, (long long)def->min, (long long)def->max, names, text);
    if (rc < 0)
        return er_error_set(err, ER_EINVAL, def->name, "--%s: cannot parse '%s'", def->name, text);
    if (def->type != ER_SET_STRING && def->type != ER_SET_ENUM && def->type != ER_SET_BOOL &&
        def->type != ER_SET_SWITCH && !named && (num < def->min || num > def->max))
        return er_error_set(err, ER_EINVAL, def->name, "--%s must be in %lld..%lld%s%s, not '%s'",
                            def->name, (long long)def->min, (long long)def->max,
                            names[0] ? " or " : "", names, text);
    char *copy = strdup(text);
    if (!copy)
        return er_error_set(err, ER_ENOMEM, def->name, "out of memory");
    value_clear(v);
    v->text = copy;
    v->num = num;
    v->source = source;
    return 0;
}

static bool also_has(const er_settings *s, const char *name, size_t len)
{
    for (size_t i = 0; i < s->nfile_also; i++)
        if (strlen(s->file_also[i].name) == len && strncmp(s->file_also[i].name, name, len) == 0 &&
            strcmp(s->file_also[i].name, "config") != 0)
            return true;
    return false;
}

static int load_file(er_settings *s, const char *path, er_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return er_error_set(err, ER_EINVAL, "config", "cannot open config file '%s': %s", path,
                            strerror(errno));
    char line[4096];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '#')
            continue;
        char *eq = strchr(p, '=');
        if (!eq) {
            rc = er_error_set(err, ER_EINVAL, "config", "%s:%d: expected 'name = value'", path,
                              lineno);
            break;
        }
        char *k_end = eq;
        while (k_end > p && isspace((unsigned char)k_end[-1]))
            k_end--;
        char *val = eq + 1;
        while (isspace((unsigned char)*val))
            val++;
        size_t vl = strlen(val);
        while (vl && isspace((unsigned char)val[vl - 1]))
            val[--vl] = '\0';
        ssize_t i = find(s, p, (size_t)(k_end - p));
        if (i < 0 && also_has(s, p, (size_t)(k_end - p)))
            continue;
        if (i < 0 || strcmp(s->table[i].name, "config") == 0 || s->table[i].type == ER_SET_SWITCH) {
            rc = er_error_set(err, ER_EINVAL, "config", "%s:%d: unknown setting '%.*s'", path,
                              lineno, (int)(k_end - p), p);
            break;
        }
        rc = set_value(s, (size_t)i, val, 1, err);
    }
    fclose(f);
    return rc;
}

static void env_name(const char *name, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "ERRAND_");
    for (const char *p = name; *p && n + 1 < cap; p++)
        out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[n] = '\0';
}

static const char *env_get(char **envp, const char *name)
{
    size_t len = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=')
            return *e + len + 1;
    return NULL;
}

int er_settings_load(er_settings *s, int argc, char **argv, char **envp, FILE *out,
                     er_error *err)
{
    int rc;
    for (size_t i = 0; i < s->n; i++)
        if (s->table[i].def && (rc = set_value(s, i, s->table[i].def, 0, err)) < 0)
            return rc;
    /* find --config first: the file sits below env and flags */
    const char *config = NULL;
    char envn[96];
    if (find(s, "config", 6) >= 0) {
        env_name("config", envn, sizeof envn);
        config = env_get(envp, envn);
        for (int a = 0; a < argc; a++) {
            if (strcmp(argv[a], "--config") == 0 && a + 1 < argc)
                config = argv[a + 1];
            else if (strncmp(argv[a], "--config=", 9) == 0)
                config = argv[a] + 9;
        }
        if (config && *config && (rc = load_file(s, config, err)) < 0)
            return rc;
    }
    for (size_t i = 0; i < s->n; i++) {
        if (s->table[i].type == ER_SET_SWITCH)
            continue;
        env_name(s->table[i].name, envn, sizeof envn);
        const char *v = env_get(envp, envn);
        /* ERRAND_TOKENS is the documented plural of --token */
        if (!v && strcmp(s->table[i].name, "token") == 0)
            v = env_get(envp, "ERRAND_TOKENS");
        if (v && (rc = set_value(s, i, v, 2, err)) < 0)
            return rc;
    }
    for (int a = 0; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return 1;
        if (strncmp(arg, "--", 2) != 0)
            return er_error_set(err, ER_EINVAL, "", "unexpected argument '%s'", arg);
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        ssize_t i = find(s, name, len);
        if (i < 0 && len > 3 && strncmp(name, "no-", 3) == 0 &&
            (i = find(s, name + 3, len - 3)) >= 0 && s->table[i].type == ER_SET_BOOL) {
            if (eq)
                return er_error_set(err, ER_EINVAL, s->table[i].name, "--no-%s takes no value",
                                    s->table[i].name);
            if ((rc = set_value(s, (size_t)i, "false", 3, err)) < 0)
                return rc;
            continue;
        }
        if (i < 0 || (s->table[i].type != ER_SET_BOOL && len > 3 && strncmp(name, "no-", 3) == 0))
            return er_error_set(err, ER_EINVAL, "", "unknown flag '%s' (see --help)", arg);
        const char *val = eq ? eq + 1 : NULL;
        if (s->table[i].type == ER_SET_SWITCH && eq)
            return er_error_set(err, ER_EINVAL, s->table[i].name, "--%s takes no value",
                                s->table[i].name);
        if (!val && (s->table[i].type == ER_SET_BOOL || s->table[i].type == ER_SET_SWITCH))
            val = "true";
        if (!val) {
            if (a + 1 >= argc)
                return er_error_set(err, ER_EINVAL, s->table[i].name, "--%s needs a value",
                                    s->table[i].name);
            val = argv[++a];
        }
        if ((rc = set_value(s, (size_t)i, val, 3, err)) < 0)
            return rc;
    }
    (void)out;
    return 0;
}

void er_setting_flag(const er_setting *d, char *out, size_t size)
{
    snprintf(out, size, "--%s%s", d->type == ER_SET_BOOL ? "[no-]" : "", d->name);
}

void er_setting_env(const char *name, char *out, size_t size)
{
    env_name(name, out, size);
}

void er_settings_help(const er_settings *s, const char *usage, FILE *out)
{
    fprintf(out, "%s\n\nSettings (flag, environment variable, config-file key; flags win, then "
                 "environment, then the file):\n",
            usage);
    char envn[96], flag[96];
    for (size_t i = 0; i < s->n; i++) {
        const er_setting *d = &s->table[i];
        if (d->type == ER_SET_SWITCH)
            snprintf(envn, sizeof envn, "(flag only)");
        else
            env_name(d->name, envn, sizeof envn);
        er_setting_flag(d, flag, sizeof flag);
        fprintf(out, "  %-22s %-26s %s", flag, envn, d->help);
        if (d->type == ER_SET_ENUM)
            fprintf(out, " (%s)", d->choices);
        fprintf(out, " [default: %s]\n", d->def ? d->def : "none");
    }
}

void er_settings_help_flags(const er_settings *s, const char *usage, FILE *out)
{
    fprintf(out, "%s\n\nFlags:\n", usage);
    char flag[96];
    for (size_t i = 0; i < s->n; i++) {
        const er_setting *d = &s->table[i];
        er_setting_flag(d, flag, sizeof flag);
        fprintf(out, "  %-22s %s", flag, d->help);
        if (d->type == ER_SET_ENUM)
            fprintf(out, " (%s)", d->choices);
        fprintf(out, " [default: %s]\n", d->def ? d->def : "none");
    }
}
