/* SPDX-License-Identifier: MIT
 *
 * TZif parsing, zone file loading and the process-wide zone cache (tz.h).
 * The cache is an open-addressing table of entries that are never removed:
 * readers find a cached zone with one acquire load per probe and no lock;
 * misses take one mutex, so a zone is read and parsed once however many
 * threads ask for it at the same time.
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
 *    the v2+ footer's POSIX TZ rule (Jn, n and Mm.w.d forms, v3 hour
 *    ranges), parsed here and evaluated by core/cron.c.
 */
#include "util/tz.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TZ_MAX_FILE (1 << 20)

/* ---- the POSIX TZ footer ---- */

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

static bool posix_rule(const char **pp, er_tz_rule *r)
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
        tz->start = (er_tz_rule){'M', 0, 3, 2, 0, 7200};
        tz->end = (er_tz_rule){'M', 0, 11, 1, 0, 7200};
        return true;
    }
    if (*p++ != ',' || !posix_rule(&p, &tz->start) || *p++ != ',' || !posix_rule(&p, &tz->end))
        return false;
    return *p == '\0';
}

/* ---- TZif ---- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* The data block a zone is built from: v1's, or v2+'s 64-bit one. */
typedef struct tzif_block {
    const unsigned char *d; /* transition times, then indexes, then types */
    size_t tsz;             /* 4 or 8 bytes per transition time */
    uint32_t timecnt, typecnt;
    char footer[208];       /* v2+ footer text without its newlines ("" when none) */
} tzif_block;

/* Finds and bounds-checks the block; false when buf is not usable TZif. */
static bool find_block(const unsigned char *buf, size_t len, tzif_block *b)
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
        b->d = d;
        b->tsz = tsz;
        b->timecnt = timecnt;
        b->typecnt = typecnt;
        b->footer[0] = '\0';
        if (tsz == 8) { /* footer: "\n" TZ "\n" */
            const unsigned char *f = d + body;
            size_t rest = len - (size_t)(f - buf);
            if (rest < 2 || f[0] != '\n')
                return false;
            const unsigned char *nl = memchr(f + 1, '\n', rest - 1);
            if (!nl || nl - f - 1 > 200)
                return false;
            memcpy(b->footer, f + 1, (size_t)(nl - f - 1));
            b->footer[nl - f - 1] = '\0';
        }
        return true;
    }
    return false;
}

static int unusable(er_error *err, const char *name)
{
    return er_error_set(err, ER_EINVAL, "tz", "time zone '%.200s' has no usable zone file", name);
}

int er_tz_parse(const char *name, const unsigned char *buf, size_t len, er_tz **out,
                er_error *err)
{
    if (!name)
        name = "";
    tzif_block b;
    if (!buf || !find_block(buf, len, &b))
        return unusable(err, name);
    /* One block: the struct, at[], utoff[], idx[], name. */
    size_t n = b.timecnt, nlen = strlen(name);
    size_t size = sizeof(er_tz) + n * sizeof(int64_t) + b.typecnt * sizeof(int32_t) + n +
                  nlen + 1;
    er_tz *tz = calloc(1, size);
    if (!tz)
        return er_error_set(err, ER_ENOMEM, "tz", "out of memory");
    int64_t *at = (int64_t *)(tz + 1);
    int32_t *utoff = (int32_t *)(at + n);
    uint8_t *idx = (uint8_t *)(utoff + b.typecnt);
    char *nm = (char *)(idx + n);
    memcpy(nm, name, nlen + 1);
    tz->name = nm;
    tz->ntrans = (int32_t)n;
    tz->at = at;
    tz->idx = idx;
    tz->ntypes = (int32_t)b.typecnt;
    tz->utoff = utoff;

    const unsigned char *d = b.d;
    for (size_t i = 0; i < n; i++) {
        at[i] = b.tsz == 8 ? be64(d + i * 8) : (int32_t)be32(d + i * 4);
        if (i > 0 && at[i] <= at[i - 1])
            goto bad;
    }
    d += n * b.tsz;
    for (size_t i = 0; i < n; i++) {
        idx[i] = d[i];
        if (d[i] >= b.typecnt)
            goto bad;
    }
    d += n;
    for (uint32_t i = 0; i < b.typecnt; i++) {
        int32_t o = (int32_t)be32(d + i * 6);
        if (o < -ER_TZ_MAX_OFF || o > ER_TZ_MAX_OFF)
            goto bad;
        utoff[i] = o;
    }
    if (b.footer[0] && !parse_footer(b.footer, tz))
        goto bad;
    *out = tz;
    return 0;
bad:
    free(tz);
    return unusable(err, name);
}

void er_tz_free(er_tz *tz)
{
    free(tz);
}

const char *er_tz_name(const er_tz *tz)
{
    return tz->name;
}

bool er_tz_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > ER_TZ_NAME_MAX || name[0] == '/' || strstr(name, ".."))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '/' || ch == '_' || ch == '+' || ch == '-'))
            return false;
    }
    return true;
}

/* ---- loading ---- */

static int unknown(er_error *err, const char *name)
{
    return er_error_set(err, ER_EINVAL, "tz", "unknown time zone '%.200s'", name);
}

/* Reads and parses the zone file at path. Returns what er_tz_parse does, or
 * "unknown" when there is no regular file there. */
static int load(const char *name, const char *path, er_tz **out, er_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > TZ_MAX_FILE) {
        if (fd >= 0)
            close(fd);
        return unknown(err, name);
    }
    size_t len = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(len + 1);
    if (!buf) {
        close(fd);
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
    int rc = got == len ? er_tz_parse(name, buf, len, out, err) : unusable(err, name);
    free(buf);
    return rc;
}

/* ---- the cache ---- */

typedef struct cache_ent {
    const er_tz *tz;
    char path[]; /* the key: TZDIR + "/" + name */
} cache_ent;

#define SLOTS (2 * ER_TZ_CACHE_MAX) /* a power of two; never more than half full */

static _Atomic(cache_ent *) slots[SLOTS];
static size_t cached; /* entries in slots; under lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const int32_t utc_off = 0;
static const er_tz utc_zone = {.name = "UTC", .ntypes = 1, .utoff = &utc_off};

/* The entry for path, or NULL with *slot set to the empty slot that ends
 * its probe sequence. */
static cache_ent *find(const char *path, size_t *slot)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = path; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (size_t i = (size_t)h & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1)) {
        cache_ent *e = atomic_load_explicit(&slots[i], memory_order_acquire);
        if (!e) {
            *slot = i;
            return NULL;
        }
        if (strcmp(e->path, path) == 0)
            return e;
    }
}

int er_tz_get(const char *name, const er_tz **out, er_error *err)
{
    if (!name || !*name)
        name = "UTC";
    if (!er_tz_name_valid(name))
        return er_error_set(err, ER_EINVAL, "tz", "invalid time zone name '%.200s'", name);
    if (strcmp(name, "UTC") == 0) { /* built in: works without tzdata */
        *out = &utc_zone;
        return 0;
    }
    const char *dir = getenv("TZDIR");
    if (!dir || dir[0] != '/')
        dir = "/usr/share/zoneinfo";
    char path[PATH_MAX];
    int plen = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (plen < 0 || plen >= (int)sizeof path)
        return unknown(err, name);
    size_t slot;
    cache_ent *e = find(path, &slot);
    if (e) {
        *out = e->tz;
        return 0;
    }
    pthread_mutex_lock(&lock);
    int rc = 0;
    if ((e = find(path, &slot))) { /* another thread loaded it meanwhile */
        *out = e->tz;
        goto done;
    }
    if (cached >= ER_TZ_CACHE_MAX) {
        rc = er_error_set(err, ER_EINVAL, "tz",
                          "too many time zones in use (%d); '%.100s' was not loaded",
                          ER_TZ_CACHE_MAX, name);
        goto done;
    }
    er_tz *tz = NULL;
    if ((rc = load(name, path, &tz, err)) < 0)
        goto done;
    if (!(e = malloc(sizeof *e + (size_t)plen + 1))) {
        er_tz_free(tz);
        rc = er_error_set(err, ER_ENOMEM, "tz", "out of memory");
        goto done;
    }
    e->tz = tz;
    memcpy(e->path, path, (size_t)plen + 1);
    atomic_store_explicit(&slots[slot], e, memory_order_release);
    cached++;
    *out = tz;
done:
    pthread_mutex_unlock(&lock);
    return rc;
}
