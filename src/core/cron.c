/* SPDX-License-Identifier: MIT
 *
 * Cron expression parsing, IANA zone rules and next-fire computation. Owns
 * the compiled er_cron bitsets and the immutable er_tz tables; reads one
 * TZif file per er_tz_open and nothing else, and never reads a clock.
 *
 * Zone rules: we read the system's TZif files (tzfile(5), RFC 8536) ourselves.
 *  - ICU (libicu-dev, ucal_*) was the alternative. Debian's ICU 72 carries
 *    its own compiled-in copy of the tz data (2022e here, while the system's
 *    tzdata is 2025b) and only follows the system data when the separate
 *    tzdata-icu files are installed, so two sources of truth could disagree
 *    with `date`; it is also a 30 MB dependency for a few hundred lines.
 *  - glibc's localtime_r/mktime with TZ switched under a mutex: TZ is
 *    process-global (every other localtime caller in the process would see
 *    our zone), each switch re-reads and re-parses the file, and a
 *    process-wide lock serialises all scheduler threads.
 *  - TZif is a small, stable, specified format and the files are the ones
 *    Debian updates with tzdata. Parsed once into immutable tables, a zone is
 *    safe to share between threads without locks. Dates past the table use
 *    the v2+ footer's POSIX TZ rule (Jn, n and Mm.w.d forms, v3 hour ranges).
 */
#include "core/cron.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- calendar arithmetic (proleptic Gregorian, days since 1970-01-01) ---- */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int month_days(int64_t y, int m)
{
    static const int n[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : n[m - 1];
}

/* ---- parsing ---- */

typedef struct field_def {
    const char *name;
    int lo, hi;
    const char *const *names; /* names[i] stands for lo + i (or NULL) */
    int nnames;
} field_def;

static const char *const MONTH_NAMES[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const DOW_NAMES[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW };
static const field_def FIELDS[] = {
    {"second", 0, 59, NULL, 0},       {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},         {"day-of-month", 1, 31, NULL, 0},
    {"month", 1, 12, MONTH_NAMES, 12}, {"day-of-week", 0, 7, DOW_NAMES, 7},
};

static int bad(er_error *err, const field_def *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(er_error *err, const field_def *f, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return er_error_set(err, ER_EINVAL, "cron", "%s: %s", f->name, what);
}

/* Quoted tokens in messages are cut to this many characters. */
static int clip(size_t n)
{
    return n > 40 ? 40 : (int)n;
}

/* Parses one value (number or name) of tok[0..n). */
static int parse_value(const field_def *f, const char *tok, size_t n, int *out, er_error *err)
{
    if (n == 0)
        return er_error_set(err, ER_EINVAL, "cron", "%s: missing value", f->name);
    if (tok[0] >= '0' && tok[0] <= '9') {
        long v = 0;
        for (size_t i = 0; i < n; i++) {
            if (tok[i] < '0' || tok[i] > '9')
                return bad(err, f, "\"%.*s\" is not a number", clip(n), tok);
            if (v < 1000)
                v = v * 10 + (tok[i] - '0');
        }
        if (v < f->lo || v > f->hi)
            return bad(err, f, "%.*s is out of range %d..%d", clip(n), tok, f->lo, f->hi);
        *out = (int)v;
        return 0;
    }
    for (int i = 0; i < f->nnames && n == 3; i++) {
        if (strncasecmp(tok, f->names[i], 3) == 0) {
            *out = f->lo + i;
            return 0;
        }
    }
    if (f->names)
        return bad(err, f, "unknown name \"%.*s\"", clip(n), tok);
    return bad(err, f, "\"%.*s\" is not a number", clip(n), tok);
}

/* Parses one comma-separated field text[0..n) into *bits. */
static int parse_field(const field_def *f, const char *text, size_t n, uint64_t *bits,
                       er_error *err)
{
    uint64_t set = 0;
    size_t pos = 0;
    while (pos <= n) {
        size_t end = pos;
        while (end < n && text[end] != ',')
            end++;
        const char *item = text + pos;
        size_t len = end - pos;
        if (len == 0)
            return er_error_set(err, ER_EINVAL, "cron", "%s: empty list item", f->name);
        const char *slash = memchr(item, '/', len);
        size_t base_len = slash ? (size_t)(slash - item) : len;
        int step = 1;
        if (slash) {
            const char *st = slash + 1;
            size_t sn = len - base_len - 1;
            int span = f->hi - f->lo + 1;
            if (sn == 0)
                return bad(err, f, "missing step in \"%.*s\"", clip(len), item);
            long v = 0;
            for (size_t i = 0; i < sn; i++) {
                if (st[i] < '0' || st[i] > '9')
                    return bad(err, f, "step \"%.*s\" is not a number", clip(sn), st);
                if (v < 1000)
                    v = v * 10 + (st[i] - '0');
            }
            if (v < 1 || v > span)
                return bad(err, f, "step %.*s is out of range %d..%d", clip(sn), st, 1, span);
            step = (int)v;
        }
        int a, b;
        if (base_len == 1 && item[0] == '*') {
            a = f->lo;
            b = f->hi;
        } else {
            const char *dash = memchr(item, '-', base_len);
            size_t an = dash ? (size_t)(dash - item) : base_len;
            if (dash && an == 0)
                return bad(err, f, "bad item \"%.*s\"", clip(len), item);
            int rc = parse_value(f, item, an, &a, err);
            if (rc < 0)
                return rc;
            if (dash) {
                rc = parse_value(f, dash + 1, base_len - an - 1, &b, err);
                if (rc < 0)
                    return rc;
                /* FRI-SUN: Sunday as the end of a range is day 7. */
                if (f == &FIELDS[F_DOW] && b == 0 && a > 0)
                    b = 7;
                if (a > b)
                    return bad(err, f, "range \"%.*s\" runs backwards", clip(base_len), item);
            } else {
                b = slash ? f->hi : a;
            }
        }
        for (int v = a; v <= b; v += step)
            set |= (uint64_t)1 << v;
        pos = end + 1;
    }
    *bits = set;
    return 0;
}

static const struct {
    const char *name, *expr;
} MACROS[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

int er_cron_parse(const char *expr, er_cron *out, er_error *err)
{
    if (!expr)
        return er_error_set(err, ER_EINVAL, "cron", "expression is missing");
    while (is_space(*expr))
        expr++;
    size_t total = strlen(expr);
    while (total > 0 && is_space(expr[total - 1]))
        total--;
    if (total > 1024)
        return er_error_set(err, ER_EINVAL, "cron", "expression is longer than 1024 characters");
    if (total > 0 && expr[0] == '@') {
        for (size_t i = 0; i < sizeof MACROS / sizeof MACROS[0]; i++) {
            if (strlen(MACROS[i].name) == total && strncasecmp(expr, MACROS[i].name, total) == 0)
                return er_cron_parse(MACROS[i].expr, out, err);
        }
        return er_error_set(err, ER_EINVAL, "cron", "unknown macro \"%.*s\"",
                            (int)(total > 40 ? 40 : total), expr);
    }
    const char *fs[7];
    size_t fl[7];
    int nf = 0;
    for (size_t i = 0; i < total;) {
        if (is_space(expr[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < total && !is_space(expr[j]))
            j++;
        if (nf < 7) {
            fs[nf] = expr + i;
            fl[nf] = j - i;
        }
        nf++;
        i = j;
    }
    if (nf != 5 && nf != 6)
        return er_error_set(err, ER_EINVAL, "cron", "expected 5 or 6 fields, got %d", nf);

    er_cron c = {0};
    uint64_t bits[6] = {1, 0, 0, 0, 0, 0};
    int first = nf == 6 ? F_SEC : F_MIN;
    for (int k = first; k <= F_DOW; k++) {
        int i = k - first;
        int rc = parse_field(&FIELDS[k], fs[i], fl[i], &bits[k], err);
        if (rc < 0)
            return rc;
    }
    if (bits[F_DOW] & (1u << 7))
        bits[F_DOW] = (bits[F_DOW] | 1u) & 0x7f;
    c.seconds = bits[F_SEC];
    c.minutes = bits[F_MIN];
    c.hours = (uint32_t)bits[F_HOUR];
    c.dom = (uint32_t)bits[F_DOM];
    c.months = (uint16_t)bits[F_MON];
    c.dow = (uint8_t)bits[F_DOW];
    /* Vixie cron's rule: a field written starting with '*' is unrestricted. */
    c.hour_star = fs[F_HOUR - first][0] == '*';
    c.dom_restricted = fs[F_DOM - first][0] != '*';
    c.dow_restricted = fs[F_DOW - first][0] != '*';
    c.has_seconds = nf == 6;
    *out = c;
    return 0;
}

/* ---- time zones ---- */

typedef struct tz_rule {
    char kind;    /* 'J' (1..365, no Feb 29), 'D' (0..365), 'M' (month.week.day) */
    int n, m, w, d;
    int32_t time; /* seconds after local midnight, may be negative or > 24h */
} tz_rule;

struct er_tz {
    char name[256];
    int32_t ntrans;
    int64_t *at;      /* ntrans transition instants, ascending */
    uint8_t *idx;     /* ntrans indexes into utoff */
    int32_t ntypes;
    int32_t *utoff;   /* ntypes offsets; utoff[0] applies before at[0] */
    bool has_rule;    /* footer rule for instants after the table */
    bool rule_dst;
    int32_t std_off, dst_off;
    tz_rule start, end;
};

#define TZ_MAX_FILE (1 << 20)
#define TZ_MAX_OFF (26 * 3600)

static int tz_fail(er_error *err, const char *name)
{
    return er_error_set(err, ER_EINVAL, "tz", "unknown time zone '%.200s'", name);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* [+-]hh[:mm[:ss]] with hours up to maxh; returns seconds, or INT32_MIN. */
static int32_t posix_time(const char **pp, int maxh)
{
    const char *p = *pp;
    int sign = 1;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    int part[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        if (k > 0) {
            if (*p != ':')
                break;
            p++;
        }
        if (*p < '0' || *p > '9')
            return INT32_MIN;
        int v = 0, nd = 0;
        while (*p >= '0' && *p <= '9' && nd < 3) {
            v = v * 10 + (*p++ - '0');
            nd++;
        }
        if ((k == 0 && v > maxh) || (k > 0 && v > 59))
            return INT32_MIN;
        part[k] = v;
    }
    *pp = p;
    return sign * (part[0] * 3600 + part[1] * 60 + part[2]);
}

static bool posix_name(const char **pp)
{
    const char *p = *pp;
    if (*p == '<') {
        const char *q = strchr(p, '>');
        if (!q)
            return false;
        *pp = q + 1;
        return true;
    }
    int n = 0;
    while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')) {
        p++;
        n++;
    }
    *pp = p;
    return n >= 3;
}

static bool posix_num(const char **pp, int lo, int hi, int *out)
{
    const char *p = *pp;
    if (*p < '0' || *p > '9')
        return false;
    int v = 0;
    while (*p >= '0' && *p <= '9' && v <= hi)
        v = v * 10 + (*p++ - '0');
    if (v < lo || v > hi)
        return false;
    *out = v;
    *pp = p;
    return true;
}

static bool posix_rule(const char **pp, tz_rule *r)
{
    const char *p = *pp;
    memset(r, 0, sizeof *r);
    if (*p == 'J') {
        p++;
        r->kind = 'J';
        if (!posix_num(&p, 1, 365, &r->n))
            return false;
    } else if (*p == 'M') {
        p++;
        r->kind = 'M';
        if (!posix_num(&p, 1, 12, &r->m) || *p++ != '.' || !posix_num(&p, 1, 5, &r->w) ||
            *p++ != '.' || !posix_num(&p, 0, 6, &r->d))
            return false;
    } else {
        r->kind = 'D';
        if (!posix_num(&p, 0, 365, &r->n))
            return false;
    }
    r->time = 2 * 3600;
    if (*p == '/') {
        p++;
        r->time = posix_time(&p, 167);
        if (r->time == INT32_MIN)
            return false;
    }
    *pp = p;
    return true;
}

/* Parses a TZif footer such as "EST5EDT,M3.2.0,M11.1.0" or "<+07>-7". */
static bool parse_footer(const char *s, er_tz *tz)
{
    const char *p = s;
    if (!posix_name(&p))
        return false;
    int32_t off = posix_time(&p, 24);
    if (off == INT32_MIN)
        return false;
    tz->std_off = -off; /* POSIX offsets count west */
    tz->has_rule = true;
    if (*p == '\0')
        return true;
    if (!posix_name(&p))
        return false;
    tz->rule_dst = true;
    tz->dst_off = tz->std_off + 3600;
    if (*p != ',' && *p != '\0') {
        off = posix_time(&p, 24);
        if (off == INT32_MIN)
            return false;
        tz->dst_off = -off;
    }
    if (*p == '\0') { /* no rules given: POSIX leaves them open; use the US ones */
        tz->start = (tz_rule){'M', 0, 3, 2, 0, 7200};
        tz->end = (tz_rule){'M', 0, 11, 1, 0, 7200};
        return true;
    }
    if (*p++ != ',' || !posix_rule(&p, &tz->start) || *p++ != ',' || !posix_rule(&p, &tz->end))
        return false;
    return *p == '\0';
}

/* Parses a TZif file (v1, or the 64-bit block of v2+ with its footer). */
static bool parse_tzif(const unsigned char *buf, size_t len, er_tz *tz)
{
    if (len < 44 || memcmp(buf, "TZif", 4) != 0)
        return false;
    const unsigned char *h = buf;
    size_t tsz = 4;
    for (int pass = 0; pass < 2; pass++) {
        if ((size_t)(h - buf) + 44 > len || memcmp(h, "TZif", 4) != 0)
            return false;
        uint32_t isut = be32(h + 20), isstd = be32(h + 24), leap = be32(h + 28);
        uint32_t timecnt = be32(h + 32), typecnt = be32(h + 36), charcnt = be32(h + 40);
        if (timecnt > 100000 || typecnt == 0 || typecnt > 256 || charcnt > 100000 ||
            leap > 100000 || isut > 256 || isstd > 256)
            return false;
        size_t body = timecnt * (tsz + 1) + typecnt * 6 + charcnt + leap * (tsz + 4) +
                      isstd + isut;
        const unsigned char *d = h + 44;
        if ((size_t)(d - buf) + body > len)
            return false;
        if (pass == 0 && h[4] >= '2') {
            h = d + body; /* skip the 32-bit block */
            tsz = 8;
            continue;
        }
        if (leap != 0)
            return false; /* "right/" zones count leap seconds; not supported */
        tz->at = malloc(timecnt * sizeof *tz->at + 1);
        tz->idx = malloc(timecnt + 1);
        tz->utoff = malloc(typecnt * sizeof *tz->utoff);
        if (!tz->at || !tz->idx || !tz->utoff)
            return false;
        tz->ntrans = (int32_t)timecnt;
        tz->ntypes = (int32_t)typecnt;
        for (uint32_t i = 0; i < timecnt; i++) {
            tz->at[i] = tsz == 8 ? be64(d + i * 8) : (int32_t)be32(d + i * 4);
            if (i > 0 && tz->at[i] <= tz->at[i - 1])
                return false;
        }
        d += timecnt * tsz;
        for (uint32_t i = 0; i < timecnt; i++) {
            tz->idx[i] = d[i];
            if (d[i] >= typecnt)
                return false;
        }
        d += timecnt;
        for (uint32_t i = 0; i < typecnt; i++) {
            int32_t o = (int32_t)be32(d + i * 6);
            if (o < -TZ_MAX_OFF || o > TZ_MAX_OFF)
                return false;
            tz->utoff[i] = o;
        }
        d += body - timecnt * (tsz + 1);
        if (tsz == 8) { /* footer: "\n" TZ "\n" */
            size_t rest = len - (size_t)(d - buf);
            if (rest < 2 || d[0] != '\n')
                return false;
            const unsigned char *nl = memchr(d + 1, '\n', rest - 1);
            if (!nl || nl - d - 1 > 200)
                return false;
            char footer[208];
            memcpy(footer, d + 1, (size_t)(nl - d - 1));
            footer[nl - d - 1] = '\0';
            if (footer[0] && !parse_footer(footer, tz))
                return false;
        }
        return true;
    }
    return false;
}

static bool valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n > 200 || name[0] == '/' || strstr(name, ".."))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '/' || ch == '_' || ch == '+' || ch == '-'))
            return false;
    }
    return true;
}

void er_tz_free(er_tz *tz)
{
    if (!tz)
        return;
    free(tz->at);
    free(tz->idx);
    free(tz->utoff);
    free(tz);
}

int er_tz_open(const char *name, er_tz **out, er_error *err)
{
    if (!name || !*name)
        name = "UTC";
    if (!valid_name(name))
        return er_error_set(err, ER_EINVAL, "tz", "invalid time zone name '%.200s'", name);
    er_tz *tz = calloc(1, sizeof *tz);
    if (!tz)
        return er_error_set(err, ER_ENOMEM, "tz", "out of memory");
    snprintf(tz->name, sizeof tz->name, "%s", name);
    if (strcmp(name, "UTC") == 0) { /* built in: works without tzdata */
        tz->utoff = calloc(1, sizeof *tz->utoff);
        if (!tz->utoff) {
            er_tz_free(tz);
            return er_error_set(err, ER_ENOMEM, "tz", "out of memory");
        }
        tz->ntypes = 1;
        *out = tz;
        return 0;
    }
    const char *dir = getenv("TZDIR");
    if (!dir || dir[0] != '/')
        dir = "/usr/share/zoneinfo";
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        er_tz_free(tz);
        return tz_fail(err, name);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > TZ_MAX_FILE) {
        if (fd >= 0)
            close(fd);
        er_tz_free(tz);
        return tz_fail(err, name);
    }
    size_t len = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(len + 1);
    if (!buf) {
        close(fd);
        er_tz_free(tz);
        return er_error_set(err, ER_ENOMEM, "tz", "out of memory");
    }
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    bool ok = got == len && parse_tzif(buf, len, tz);
    free(buf);
    if (!ok) {
        er_tz_free(tz);
        return er_error_set(err, ER_EINVAL, "tz", "time zone '%.200s' has no usable zone file",
                            name);
    }
    *out = tz;
    return 0;
}

const char *er_tz_name(const er_tz *tz)
{
    return tz->name;
}

/* Day (days since the epoch) on which rule r falls in year y. */
static int64_t rule_day(const tz_rule *r, int64_t y)
{
    int64_t jan1 = days_from_civil(y, 1, 1);
    if (r->kind == 'J')
        return jan1 + r->n - 1 + (is_leap(y) && r->n >= 60);
    if (r->kind == 'D')
        return jan1 + r->n;
    int64_t first = days_from_civil(y, r->m, 1);
    int wd1 = (int)(((first + 4) % 7 + 7) % 7);
    int64_t day = first + (r->d - wd1 + 7) % 7 + (int64_t)(r->w - 1) * 7;
    while (day >= first + month_days(y, r->m))
        day -= 7;
    return day;
}

/* Offset at t and the next boundary after t, from the footer rule. */
static void rule_seg(const er_tz *tz, int64_t t, int32_t *off, int64_t *next)
{
    *off = tz->std_off;
    *next = INT64_MAX;
    if (!tz->rule_dst)
        return;
    int64_t y;
    int m, d;
    civil_from_days(floor_div(t + tz->std_off, 86400), &y, &m, &d);
    struct {
        int64_t at;
        int32_t off;
    } ev[6];
    int n = 0;
    for (int64_t yy = y - 1; yy <= y + 1; yy++) {
        /* The start time is in standard time, the end time in DST. */
        ev[n].at = rule_day(&tz->start, yy) * 86400 + tz->start.time - tz->std_off;
        ev[n++].off = tz->dst_off;
        ev[n].at = rule_day(&tz->end, yy) * 86400 + tz->end.time - tz->dst_off;
        ev[n++].off = tz->std_off;
    }
    for (int i = 1; i < n; i++) /* insertion sort; southern zones interleave */
        for (int j = i; j > 0 && ev[j].at < ev[j - 1].at; j--) {
            int64_t a = ev[j].at;
            int32_t o = ev[j].off;
            ev[j] = ev[j - 1];
            ev[j - 1].at = a;
            ev[j - 1].off = o;
        }
    for (int i = 0; i < n; i++) {
        if (ev[i].at <= t)
            *off = ev[i].off;
        else {
            *next = ev[i].at;
            break;
        }
    }
}

/* Offset in effect at t, and the first instant after t where it may change
 * (INT64_MAX when it never does). */
static void seg_at(const er_tz *tz, int64_t t, int32_t *off, int64_t *next)
{
    if (tz->ntrans == 0) {
        if (tz->has_rule)
            rule_seg(tz, t, off, next);
        else {
            *off = tz->utoff[0];
            *next = INT64_MAX;
        }
        return;
    }
    if (t < tz->at[0]) {
        *off = tz->utoff[0];
        *next = tz->at[0];
        return;
    }
    int32_t lo = 0, hi = tz->ntrans - 1; /* last i with at[i] <= t */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (tz->at[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo + 1 < tz->ntrans) {
        *off = tz->utoff[tz->idx[lo]];
        *next = tz->at[lo + 1];
    } else if (tz->has_rule) {
        rule_seg(tz, t, off, next);
    } else {
        *off = tz->utoff[tz->idx[lo]];
        *next = INT64_MAX;
    }
}

int32_t er_tz_offset(const er_tz *tz, int64_t t)
{
    int32_t off;
    int64_t next;
    seg_at(tz, t, &off, &next);
    return off;
}

/* ---- next fire ---- */

/* Smallest n in [from, max] with bit n set, or -1. */
static int next_bit(uint64_t bits, int from, int max)
{
    if (from > max)
        return -1;
    uint64_t m = bits >> from;
    if (!m)
        return -1;
    int n = from + __builtin_ctzll(m);
    return n <= max ? n : -1;
}

static bool day_ok(const er_cron *c, int64_t days, int d)
{
    int wd = (int)(((days + 4) % 7 + 7) % 7); /* 1970-01-01 was a Thursday */
    bool dm = (c->dom >> d) & 1, wm = (c->dow >> wd) & 1;
    if (c->dom_restricted && c->dow_restricted)
        return dm || wm;
    return dm && wm;
}

/* Smallest matching wall time (local seconds on the epoch scale) in
 * [lo, hi); skips whole months, days, hours and minutes. */
static bool find_match(const er_cron *c, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t days = floor_div(lo, 86400), y;
    int sod = (int)(lo - days * 86400), m, d;
    civil_from_days(days, &y, &m, &d);
    int h = sod / 3600, mi = sod / 60 % 60, s = sod % 60;
    for (;;) {
        if (days * 86400 + h * 3600 + mi * 60 + s >= hi)
            return false;
        if (!((c->months >> m) & 1)) {
            int nm = next_bit(c->months, m + 1, 12);
            if (nm < 0) {
                y++;
                nm = next_bit(c->months, 1, 12);
            }
            m = nm;
            d = 1;
            days = days_from_civil(y, m, 1);
            h = mi = s = 0;
            continue;
        }
        int nh = day_ok(c, days, d) ? next_bit(c->hours, h, 23) : -1;
        if (nh < 0) {
            civil_from_days(++days, &y, &m, &d);
            h = mi = s = 0;
            continue;
        }
        if (nh != h) {
            h = nh;
            mi = s = 0;
        }
        int nmi = next_bit(c->minutes, mi, 59);
        if (nmi < 0) {
            h++;
            mi = s = 0;
            continue;
        }
        if (nmi != mi) {
            mi = nmi;
            s = 0;
        }
        int ns = next_bit(c->seconds, s, 59);
        if (ns < 0) {
            mi++;
            s = 0;
            continue;
        }
        int64_t w = days * 86400 + h * 3600 + mi * 60 + ns;
        if (w >= hi)
            return false;
        *out = w;
        return true;
    }
}

/* The latest wall time shown at or before instant t. After a fall-back it is
 * the end of the repeated stretch, not the wall time at t. Offsets span less
 * than 26 h, so an instant two days before t cannot show a later wall time. */
static int64_t highwater(const er_tz *tz, int64_t t)
{
    int64_t hw = INT64_MIN, u = t - 2 * 86400;
    for (;;) {
        int32_t o;
        int64_t next;
        seg_at(tz, u, &o, &next);
        int64_t last = next - 1 < t ? next - 1 : t;
        if (last + o > hw)
            hw = last + o;
        if (next > t)
            return hw;
        u = next;
    }
}

/* Instants of years 1..9999, in ms. */
#define MIN_MS (-62135596800000LL)
#define MAX_MS (253402300799999LL - ER_CRON_HORIZON_S * 1000)

int er_cron_next(const er_cron *c, const er_tz *tz, int64_t after_ms, int64_t *next_ms,
                 er_error *err)
{
    if (after_ms < MIN_MS || after_ms > MAX_MS)
        return er_error_set(err, ER_EINVAL, "cron", "start time is out of range");
    /* A hand-built er_cron must have a value in every field's range. */
    if (!(c->seconds & 0x0FFFFFFFFFFFFFFFull) || !(c->minutes & 0x0FFFFFFFFFFFFFFFull) ||
        !(c->hours & 0xFFFFFFu) || !(c->dom & 0xFFFFFFFEu) || !(c->months & 0x1FFEu) ||
        !(c->dow & 0x7Fu))
        return er_error_set(err, ER_EINVAL, "cron", "a field matches no value");
    int64_t t = floor_div(after_ms, 1000) + 1; /* fires are whole seconds */
    int64_t limit = t + ER_CRON_HORIZON_S;
    bool wall = !c->hour_star;
    int64_t hw = wall ? highwater(tz, t - 1) : 0;
    for (;;) {
        int32_t o;
        int64_t next, w;
        seg_at(tz, t, &o, &next);
        int64_t seg_end = next > limit ? limit + 1 : next;
        int64_t lo = t + o;
        if (wall) {
            /* Spring forward: wall times in (hw, t+o) never showed; a match
             * there fires once, at t, the first instant after the gap. */
            if (hw + 1 < lo && find_match(c, hw + 1, lo, &w)) {
                *next_ms = t * 1000;
                return 0;
            }
            if (hw + 1 > lo)
                lo = hw + 1; /* skip wall times already shown (fall-back repeat) */
        }
        if (find_match(c, lo, seg_end + o, &w)) {
            *next_ms = (w - o) * 1000;
            return 0;
        }
        if (next > limit)
            break;
        if (wall && next - 1 + o > hw)
            hw = next - 1 + o;
        t = next;
    }
    return er_error_set(err, ER_EINVAL, "cron", "the expression never fires within 9 years");
}

int er_cron_next_n(const er_cron *c, const er_tz *tz, int64_t after_ms, int count,
                   int64_t *out, er_error *err)
{
    for (int i = 0; i < count; i++) {
        int rc = er_cron_next(c, tz, after_ms, &out[i], err);
        if (rc < 0)
            return rc;
        after_ms = out[i];
    }
    return 0;
}
