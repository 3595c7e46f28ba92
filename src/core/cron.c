/* SPDX-License-Identifier: MIT
 *
 * Cron expression parsing, zone offsets and next-fire computation. Owns the
 * compiled er_cron bitsets. Zones come parsed from util/tz.c; this file
 * evaluates them (the transition table, then the footer's POSIX rule for
 * dates past it). No I/O, and never reads a clock.
 */
#include "core/cron.h"
#include "util/calendar.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

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

/* ---- zone offsets (the zone itself is parsed by util/tz.c) ---- */

/* Day (days since the epoch) on which rule r falls in year y. */
static int64_t rule_day(const er_tz_rule *r, int64_t y)
{
    int64_t jan1 = er_days_from_civil(y, 1, 1);
    if (r->kind == 'J')
        return jan1 + r->n - 1 + (er_is_leap_year(y) && r->n >= 60);
    if (r->kind == 'D')
        return jan1 + r->n;
    int64_t first = er_days_from_civil(y, r->m, 1);
    int wd1 = er_weekday(first);
    int64_t day = first + (r->d - wd1 + 7) % 7 + (int64_t)(r->w - 1) * 7;
    while (day >= first + er_month_days(y, r->m))
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
    er_civil_from_days(er_floor_div(t + tz->std_off, 86400), &y, &m, &d);
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
    int wd = er_weekday(days);
    bool dm = (c->dom >> d) & 1, wm = (c->dow >> wd) & 1;
    if (c->dom_restricted && c->dow_restricted)
        return dm || wm;
    return dm && wm;
}

/* Smallest matching wall time (local seconds on the epoch scale) in
 * [lo, hi); skips whole months, days, hours and minutes. */
static bool find_match(const er_cron *c, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t days = er_floor_div(lo, 86400), y;
    int sod = (int)(lo - days * 86400), m, d;
    er_civil_from_days(days, &y, &m, &d);
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
            days = er_days_from_civil(y, m, 1);
            h = mi = s = 0;
            continue;
        }
        int nh = day_ok(c, days, d) ? next_bit(c->hours, h, 23) : -1;
        if (nh < 0) {
            er_civil_from_days(++days, &y, &m, &d);
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
    int64_t t = er_floor_div(after_ms, 1000) + 1; /* fires are whole seconds */
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
