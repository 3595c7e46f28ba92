/* SPDX-License-Identifier: MIT
 *
 * Time zones from the system tz database: finding a zone's TZif file
 * (tzfile(5), RFC 8536), reading it, parsing it into an immutable er_tz, and
 * a process-wide cache that loads each zone at most once. This module owns
 * all zone I/O; core (cron.c) only reads the parsed tables to compute
 * offsets and never opens a file. It knows nothing of cron or schedulers.
 */
#ifndef ER_UTIL_TZ_H
#define ER_UTIL_TZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Longest zone name accepted (IANA names are far shorter). */
#define ER_TZ_NAME_MAX 200
/* Largest |UTC offset| accepted in a zone, in seconds. */
#define ER_TZ_MAX_OFF (26 * 3600)
/* Distinct zones the cache holds, for the life of the process. Debian's
 * tzdata has about 1,800 names (aliases included), so only a TZDIR with more
 * zone files than this can fill it. */
#define ER_TZ_CACHE_MAX 4096

/* When a footer rule's DST starts or ends, as in POSIX TZ ("M3.2.0/2"). */
typedef struct er_tz_rule {
    char kind;    /* 'J': day n = 1..365, Feb 29 never counted; 'D': day n = 0..365
                     counting Feb 29; 'M': weekday d (0 = Sunday) of week w (1..5,
                     5 = last) of month m */
    int n, m, w, d;
    int32_t time; /* seconds after local midnight, -167 h..167 h */
} er_tz_rule;

/* A parsed zone: plain data, immutable once built, so any number of threads
 * may read it. Built only by er_tz_parse and er_tz_get (which also has the
 * built-in UTC). Guarantees: ntypes >= 1; at[] strictly ascending; every
 * idx[i] < ntypes; every offset (utoff[], std_off, dst_off) within
 * +-ER_TZ_MAX_OFF. */
typedef struct er_tz {
    const char *name;     /* as given ("UTC" for the default) */
    int32_t ntrans;
    const int64_t *at;    /* ntrans transition instants (s since the epoch, UTC) */
    const uint8_t *idx;   /* ntrans indexes into utoff: the offset from at[i] on */
    int32_t ntypes;
    const int32_t *utoff; /* ntypes offsets (s, east positive); utoff[0] applies
                             before at[0] */
    bool has_rule;        /* the v2+ footer gives a rule for instants past the table */
    bool rule_dst;        /* ... with DST (start, end); else std_off all year */
    int32_t std_off, dst_off;
    er_tz_rule start, end; /* start: in standard time; end: in DST */
} er_tz;

/* Whether name may name a zone file: 1..ER_TZ_NAME_MAX characters of
 * [A-Za-z0-9/_+-], no "..", no leading '/'. Thread-safe; no I/O. */
bool er_tz_name_valid(const char *name);

/* Parses the bytes of a TZif file (v1, or the 64-bit block of v2+ with its
 * POSIX TZ footer) into a zone named name. Pure: no I/O, no globals, so it
 * can be fuzzed. name, buf: copied. Returns 0 and *out (returns owned: free
 * with er_tz_free); ER_EINVAL with err->field "tz" ("time zone '...' has no
 * usable zone file") for bytes that are not a usable zone, leap-second
 * ("right/") zones included; ER_ENOMEM. On failure *out is untouched.
 * Thread-safe. */
int er_tz_parse(const char *name, const unsigned char *buf, size_t len, er_tz **out,
                er_error *err);

/* Frees a zone from er_tz_parse; NULL does nothing. Never pass a zone from
 * er_tz_get. */
void er_tz_free(er_tz *tz);

/* The zone called name, from the process-wide cache. A zone not yet there
 * is read from $TZDIR (when set to an absolute path, else
 * /usr/share/zoneinfo) and parsed, at most once per name and directory,
 * and stays for the life of the process. name: copied; NULL or "" means
 * "UTC", which is built in and reads no file. Returns 0 and *out
 * (borrowed: valid until the process exits); ER_EINVAL with err->field "tz" for an invalid name
 * ("invalid time zone name '...'"), a missing zone ("unknown time zone
 * '...'"), a damaged file ("... has no usable zone file") or a full cache
 * ("too many time zones in use ..."); ER_ENOMEM. Failures are not cached.
 * Blocks on one small file read the first time a zone is asked for, and
 * then only to wait for another thread's first read; a cached zone is
 * found without a lock. Thread-safe. */
int er_tz_get(const char *name, const er_tz **out, er_error *err);

/* The zone's name. Returns borrowed storage, valid as long as tz. */
const char *er_tz_name(const er_tz *tz);

#endif
