/* SPDX-License-Identifier: MIT
 *
 * Unit tests for zone loading (util/tz.h): name checks, unknown and damaged
 * zones with the messages users see, the built-in UTC, $TZDIR, the pure
 * TZif parser on real, cut and hand-made bytes, and the process-wide cache
 * (one zone per name, shared by racing threads, bounded). Needs the system
 * tz database (Debian tzdata).
 */
#include "util/tz.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NY_FILE "/usr/share/zoneinfo/America/New_York"

static const er_tz *zone(const char *name)
{
    const er_tz *tz = NULL;
    er_error err = {0};
    cr_assert_eq(er_tz_get(name, &tz, &err), 0, "%s: %s", name, err.message);
    cr_assert_not_null(tz);
    return tz;
}

static void get_fails(const char *name, const char *message)
{
    const er_tz *tz = NULL;
    er_error err = {0};
    cr_assert_eq(er_tz_get(name, &tz, &err), ER_EINVAL, "%s should fail", name);
    cr_assert_null(tz);
    cr_assert_str_eq(err.field, "tz");
    cr_assert_str_eq(err.message, message);
}

/* Reads a whole file into a malloc'd buffer. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    unsigned char *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

static void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* A temporary TZDIR with a subdirectory "Test"; returns its path. */
static char *temp_tzdir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/er_tzdir_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/Test", dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_assert_eq(setenv("TZDIR", dir, 1), 0);
    return dir;
}

static void rm_tzdir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* ---- names ---- */

Test(tz_names, unknown_and_unsafe_names_are_refused)
{
    get_fails("Mars/Olympus", "unknown time zone 'Mars/Olympus'");
    get_fails("America", "unknown time zone 'America'"); /* a directory */
    get_fails("../etc/passwd", "invalid time zone name '../etc/passwd'");
    get_fails("America/../../etc/passwd", "invalid time zone name 'America/../../etc/passwd'");
    get_fails("/etc/localtime", "invalid time zone name '/etc/localtime'");
    get_fails("America/New York", "invalid time zone name 'America/New York'");
    get_fails("zone.tab", "invalid time zone name 'zone.tab'");
    cr_assert(er_tz_name_valid("Etc/GMT+5"));
    cr_assert(er_tz_name_valid("America/Port-au-Prince"));
    cr_assert_not(er_tz_name_valid(""));
    cr_assert_not(er_tz_name_valid("Europe/London\n"));
    char long_name[ER_TZ_NAME_MAX + 2];
    memset(long_name, 'A', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    cr_assert_not(er_tz_name_valid(long_name));
    long_name[ER_TZ_NAME_MAX] = '\0';
    cr_assert(er_tz_name_valid(long_name));
}

Test(tz_names, default_is_utc_without_a_file)
{
    cr_assert_eq(setenv("TZDIR", "/nonexistent", 1), 0);
    const er_tz *tz = zone(NULL);
    cr_assert_str_eq(er_tz_name(tz), "UTC");
    cr_assert_eq(tz->ntrans, 0);
    cr_assert_eq(tz->ntypes, 1);
    cr_assert_eq(tz->utoff[0], 0);
    cr_assert_not(tz->has_rule);
    cr_assert_eq(zone(""), tz);
    cr_assert_eq(zone("UTC"), tz);
    get_fails("Europe/London", "unknown time zone 'Europe/London'");
    er_tz_free(NULL);
}

/* ---- loading ---- */

Test(tz_load, tzdir_is_where_zones_are_read)
{
    char *dir = temp_tzdir();
    size_t len;
    unsigned char *ny = slurp(NY_FILE, &len);
    char path[160];
    snprintf(path, sizeof path, "%s/Test/Zone", dir);
    spit(path, ny, len);
    free(ny);
    const er_tz *tz = zone("Test/Zone");
    cr_assert_str_eq(er_tz_name(tz), "Test/Zone");
    cr_assert_gt(tz->ntrans, 100);
    /* Zones outside TZDIR are not found, and a relative TZDIR is ignored. */
    get_fails("America/New_York", "unknown time zone 'America/New_York'");
    cr_assert_eq(setenv("TZDIR", "relative/dir", 1), 0);
    get_fails("Test/Zone", "unknown time zone 'Test/Zone'");
    zone("America/New_York");
    rm_tzdir(dir);
}

Test(tz_load, damaged_zone_files_are_refused)
{
    char *dir = temp_tzdir();
    char path[160];
    /* Not TZif at all, a real file cut short, and an empty file. */
    snprintf(path, sizeof path, "%s/Test/Junk", dir);
    spit(path, "hello, not a zone\n", 18);
    size_t len;
    unsigned char *ny = slurp(NY_FILE, &len);
    snprintf(path, sizeof path, "%s/Test/Cut", dir);
    spit(path, ny, 600);
    free(ny);
    snprintf(path, sizeof path, "%s/Test/Empty", dir);
    spit(path, "", 0);
    get_fails("Test/Junk", "time zone 'Test/Junk' has no usable zone file");
    get_fails("Test/Cut", "time zone 'Test/Cut' has no usable zone file");
    get_fails("Test/Empty", "time zone 'Test/Empty' has no usable zone file");
    rm_tzdir(dir);
}

Test(tz_load, leap_second_zones_are_refused)
{
    get_fails("right/UTC", "time zone 'right/UTC' has no usable zone file");
}

/* ---- the pure parser ---- */

Test(tz_parse, real_zone_bytes_parse_without_a_file)
{
    size_t len;
    unsigned char *buf = slurp(NY_FILE, &len);
    er_tz *tz = NULL;
    er_error err = {0};
    cr_assert_eq(er_tz_parse("Some/Name", buf, len, &tz, &err), 0, "%s", err.message);
    free(buf); /* the zone keeps no pointer into the bytes */
    cr_assert_str_eq(er_tz_name(tz), "Some/Name");
    cr_assert_gt(tz->ntrans, 100);
    for (int32_t i = 1; i < tz->ntrans; i++)
        cr_assert_gt(tz->at[i], tz->at[i - 1]);
    cr_assert(tz->has_rule);
    cr_assert(tz->rule_dst);
    cr_assert_eq(tz->std_off, -5 * 3600);
    cr_assert_eq(tz->dst_off, -4 * 3600);
    /* EST5EDT,M3.2.0,M11.1.0 */
    cr_assert_eq(tz->start.kind, 'M');
    cr_assert_eq(tz->start.m, 3);
    cr_assert_eq(tz->start.w, 2);
    cr_assert_eq(tz->start.time, 7200);
    cr_assert_eq(tz->end.m, 11);
    cr_assert_eq(tz->end.w, 1);
    er_tz_free(tz);
}

Test(tz_parse, every_cut_of_a_real_file_is_refused)
{
    size_t len;
    unsigned char *buf = slurp("/usr/share/zoneinfo/Australia/Lord_Howe", &len);
    for (size_t n = 0; n < len; n++) {
        /* a copy of exactly n bytes, so ASan sees any read past the end */
        unsigned char *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        er_tz *tz = NULL;
        er_error err = {0};
        cr_assert_eq(er_tz_parse("Cut", cut, n, &tz, &err), ER_EINVAL, "cut at %zu", n);
        cr_assert_null(tz);
        cr_assert_str_eq(err.message, "time zone 'Cut' has no usable zone file");
        free(cut);
    }
    free(buf);
}

/* Appends a big-endian 32-bit value. */
static unsigned char *put32(unsigned char *p, uint32_t v)
{
    *p++ = (unsigned char)(v >> 24);
    *p++ = (unsigned char)(v >> 16);
    *p++ = (unsigned char)(v >> 8);
    *p++ = (unsigned char)v;
    return p;
}

/* A version 1 file (no 64-bit block, no footer): +01:00, then +02:00 from
 * t = 1000. */
static size_t make_v1(unsigned char *buf)
{
    unsigned char *p = buf;
    memcpy(p, "TZif", 4);
    p += 4;
    memset(p, 0, 16); /* version 0 (v1) and reserved */
    p += 16;
    p = put32(p, 0); /* isutcnt */
    p = put32(p, 0); /* isstdcnt */
    p = put32(p, 0); /* leapcnt */
    p = put32(p, 1); /* timecnt */
    p = put32(p, 2); /* typecnt */
    p = put32(p, 8); /* charcnt */
    p = put32(p, 1000);
    *p++ = 1;
    p = put32(p, 3600);
    *p++ = 0;
    *p++ = 0;
    p = put32(p, 7200);
    *p++ = 1;
    *p++ = 4;
    memcpy(p, "ONE\0TWO\0", 8);
    p += 8;
    return (size_t)(p - buf);
}

Test(tz_parse, version_1_files_use_their_32_bit_table)
{
    unsigned char buf[128];
    size_t len = make_v1(buf);
    er_tz *tz = NULL;
    cr_assert_eq(er_tz_parse("V1", buf, len, &tz, NULL), 0);
    cr_assert_eq(tz->ntrans, 1);
    cr_assert_eq(tz->at[0], 1000);
    cr_assert_eq(tz->utoff[tz->idx[0]], 7200);
    cr_assert_eq(tz->utoff[0], 3600);
    cr_assert_not(tz->has_rule);
    er_tz_free(tz);
}

Test(tz_parse, bad_tables_are_refused)
{
    unsigned char buf[128];
    size_t len = make_v1(buf);
    er_tz *tz = NULL;
    buf[44 + 4] = 2; /* transition's type index past typecnt */
    cr_assert_eq(er_tz_parse("Bad", buf, len, &tz, NULL), ER_EINVAL);
    len = make_v1(buf);
    put32(buf + 44 + 5, 30 * 3600); /* an offset beyond 26 hours */
    cr_assert_eq(er_tz_parse("Bad", buf, len, &tz, NULL), ER_EINVAL);
    len = make_v1(buf);
    put32(buf + 28, 1); /* a leap-second record the body does not hold */
    cr_assert_eq(er_tz_parse("Bad", buf, len, &tz, NULL), ER_EINVAL);
    cr_assert_eq(er_tz_parse("Bad", NULL, 0, &tz, NULL), ER_EINVAL);
    cr_assert_null(tz);
}

/* ---- the cache ---- */

Test(tz_cache, one_zone_per_name)
{
    const er_tz *a = zone("Europe/London");
    cr_assert_eq(zone("Europe/London"), a);
    const er_tz *b = zone("GB"); /* a link to the same file is its own name */
    cr_assert_neq(b, a);
    cr_assert_str_eq(er_tz_name(b), "GB");
    cr_assert_eq(zone("GB"), b);
}

Test(tz_cache, a_zone_is_read_once)
{
    char *dir = temp_tzdir();
    size_t len;
    unsigned char *ny = slurp(NY_FILE, &len);
    char path[160];
    snprintf(path, sizeof path, "%s/Test/Once", dir);
    spit(path, ny, len);
    free(ny);
    const er_tz *tz = zone("Test/Once");
    cr_assert_eq(unlink(path), 0); /* later lookups do not need the file */
    cr_assert_eq(zone("Test/Once"), tz);
    get_fails("Test/Other", "unknown time zone 'Test/Other'");
    rm_tzdir(dir);
}

#define RACERS 8

static void *race(void *arg)
{
    const er_tz **out = arg;
    er_error err = {0};
    if (er_tz_get("Australia/Lord_Howe", out, &err) < 0)
        *out = NULL;
    return NULL;
}

Test(tz_cache, racing_threads_share_one_zone)
{
    pthread_t th[RACERS];
    const er_tz *got[RACERS];
    for (int i = 0; i < RACERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, race, &got[i]), 0);
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    cr_assert_not_null(got[0]);
    for (int i = 1; i < RACERS; i++)
        cr_assert_eq(got[i], got[0]);
}

Test(tz_cache, holds_at_most_the_bound, .timeout = 60)
{
    char *dir = temp_tzdir();
    size_t len;
    unsigned char *utc = slurp("/usr/share/zoneinfo/Etc/UTC", &len);
    char first[160], path[160];
    snprintf(first, sizeof first, "%s/Test/Z0", dir);
    spit(first, utc, len);
    free(utc);
    for (int i = 1; i <= ER_TZ_CACHE_MAX; i++) {
        snprintf(path, sizeof path, "%s/Test/Z%d", dir, i);
        cr_assert_eq(link(first, path), 0);
    }
    const er_tz *z0 = NULL;
    for (int i = 0; i < ER_TZ_CACHE_MAX; i++) {
        char name[32];
        snprintf(name, sizeof name, "Test/Z%d", i);
        const er_tz *tz = zone(name);
        if (i == 0)
            z0 = tz;
    }
    char msg[128];
    snprintf(msg, sizeof msg, "too many time zones in use (%d); 'Test/Z%d' was not loaded",
             ER_TZ_CACHE_MAX, ER_TZ_CACHE_MAX);
    snprintf(path, sizeof path, "Test/Z%d", ER_TZ_CACHE_MAX);
    get_fails(path, msg);
    cr_assert_eq(zone("Test/Z0"), z0); /* cached zones still answer */
    cr_assert_str_eq(er_tz_name(zone(NULL)), "UTC"); /* and UTC needs no slot */
    rm_tzdir(dir);
}
