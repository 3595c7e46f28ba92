/* SPDX-License-Identifier: MIT
 *
 * Clocks, a small PRNG and RFC 3339 formatting/parsing (dates through
 * calendar.h).
 */
#include "util/clock.h"
#include "util/calendar.h"
#include "util/err.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int64_t er_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t er_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t er_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t xorshift_next(er_rand *r)
{
    uint64_t s1 = r->state[0];
    const uint64_t s0 = r->state[1];
    r->state[0] = s0;
    s1 ^= s1 << 23;
    r->state[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return r->state[1] + s0;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void er_rand_init_seeded(er_rand *r, uint64_t seed)
{
    r->next = xorshift_next;
    r->state[0] = splitmix(&seed);
    r->state[1] = splitmix(&seed);
    if (!r->state[0] && !r->state[1])
        r->state[1] = 1;
}

void er_rand_init_system(er_rand *r)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = (uint64_t)er_mono_ms() ^ (uint64_t)(uintptr_t)r;
    er_rand_init_seeded(r, seed);
}

double er_rand_unit(er_rand *r)
{
    return (double)(r->next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Tokens come from the kernel's CSPRNG, read 256 bytes at a time into a
 * per-thread buffer; a forked child refills before its first token, so it
 * never repeats its parent's. */
static atomic_uint fork_generation;

static void on_fork_child(void)
{
    atomic_fetch_add(&fork_generation, 1);
}

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

void er_secure_random(void *out, size_t n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static _Thread_local unsigned char buf[256];
    static _Thread_local size_t avail;
    static _Thread_local unsigned generation;
    pthread_once(&once, register_fork_handler);
    unsigned char *p = out;
    while (n > 0) {
        unsigned g = atomic_load(&fork_generation);
        if (generation != g) {
            generation = g;
            avail = 0;
        }
        if (avail == 0) {
            size_t got = 0;
            while (got < sizeof buf) {
                ssize_t r = getrandom(buf + got, sizeof buf - got, 0);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r <= 0) {
                    /* no predictable fallback: a guessable token breaks leases */
                    fprintf(stderr, "errand: getrandom failed: %s\n", strerror(errno));
                    abort();
                }
                got += (size_t)r;
            }
            avail = sizeof buf;
        }
        size_t take = n < avail ? n : avail;
        unsigned char *src = buf + sizeof buf - avail;
        memcpy(p, src, take);
        memset(src, 0, take); /* a byte handed out is never handed out again */
        avail -= take;
        p += take;
        n -= take;
    }
}

void er_secure_token(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    er_secure_random(b, sizeof b);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

static void digits2(char *p, int v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

/* Hand-formatted: this runs for every time field of every job in a reply,
 * where snprintf and gmtime_r showed up in profiles. */
void er_time_put(int64_t ms, char *out)
{
    /* remainders, not ms - secs * 1000: that overflows near INT64_MIN */
    int64_t secs = er_floor_div(ms, 1000), days = er_floor_div(secs, 86400), y;
    int frac = (int)(ms % 1000 + (ms % 1000 < 0 ? 1000 : 0));
    int sod = (int)(secs % 86400 + (secs % 86400 < 0 ? 86400 : 0)), mo, d;
    er_civil_from_days(days, &y, &mo, &d);
    int year = y < 0 ? 0 : y > 9999 ? 9999 : (int)y;
    /* YYYY-MM-DDTHH:MM:SS.mmmZ */
    digits2(out, year / 100);
    digits2(out + 2, year % 100);
    out[4] = '-';
    digits2(out + 5, mo);
    out[7] = '-';
    digits2(out + 8, d);
    out[10] = 'T';
    digits2(out + 11, sod / 3600);
    out[13] = ':';
    digits2(out + 14, sod / 60 % 60);
    out[16] = ':';
    digits2(out + 17, sod % 60);
    out[19] = '.';
    out[20] = (char)('0' + frac / 100);
    digits2(out + 21, frac % 100);
    out[23] = 'Z';
}

void er_time_format(int64_t ms, char out[32])
{
    er_time_put(ms, out);
    out[ER_TIME_LEN] = '\0';
}

static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)**p))
            return -1;
        v = v * 10 + (**p - '0');
        (*p)++;
    }
    *out = v;
    return 0;
}

int er_time_parse(const char *s, int64_t *ms)
{
    const char *p = s;
    int Y, M, D, h, m, sec, frac = 0;
    if (digits(&p, 4, &Y) || *p++ != '-' || digits(&p, 2, &M) || *p++ != '-' ||
        digits(&p, 2, &D) || (*p != 'T' && *p != 't' && *p != ' '))
        return ER_EINVAL;
    p++;
    if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &m) || *p++ != ':' ||
        digits(&p, 2, &sec))
        return ER_EINVAL;
    if (*p == '.') {
        p++;
        int n = 0;
        while (isdigit((unsigned char)*p)) {
            if (n < 3)
                frac = frac * 10 + (*p - '0');
            n++;
            p++;
        }
        if (n == 0)
            return ER_EINVAL;
        for (; n < 3; n++)
            frac *= 10;
    }
    int offset_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p == '-' ? -1 : 1, oh, om;
        p++;
        if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) || oh > 23 || om > 59)
            return ER_EINVAL;
        offset_min = sign * (oh * 60 + om);
    } else {
        return ER_EINVAL;
    }
    if (*p != '\0')
        return ER_EINVAL;
    if (Y < 1970 || Y > 9999 || M < 1 || M > 12 || D < 1 || D > er_month_days(Y, M) ||
        h > 23 || m > 59 || sec > 60)
        return ER_EINVAL;
    int64_t days = er_days_from_civil(Y, M, D);
    int64_t t = days * 86400 + h * 3600 + m * 60 + (sec > 59 ? 59 : sec) - offset_min * 60;
    *ms = t * 1000 + frac;
    return 0;
}
