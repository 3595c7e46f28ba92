/* SPDX-License-Identifier: MIT
 *
 * Clocks, a small PRNG and RFC 3339 formatting/parsing.
 */
#include "util/clock.h"
#include "util/err.h"

#include <ctype.h>
#include <stdio.h>
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

void er_rand_token(er_rand *r, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t a = r->next(r), b = r->next(r);
    for (int i = 0; i < 16; i++) {
        out[i] = hex[(a >> (60 - 4 * i)) & 15];
        out[16 + i] = hex[(b >> (60 - 4 * i)) & 15];
    }
    out[32] = '\0';
}

/* Writes n digits of v (zero-padded) at p. */
static void put_digits(char *p, int v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* Hand-formatted: this runs for every time field of every job in a reply,
 * where snprintf showed up in profiles. */
void er_time_format(int64_t ms, char out[32])
{
    time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int frac = (int)(ms - (int64_t)secs * 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    int year = tm.tm_year + 1900;
    if (year < 0 || year > 9999)
        year = year < 0 ? 0 : 9999;
    /* YYYY-MM-DDTHH:MM:SS.mmmZ */
    put_digits(out, year, 4);
    out[4] = '-';
    put_digits(out + 5, tm.tm_mon + 1, 2);
    out[7] = '-';
    put_digits(out + 8, tm.tm_mday, 2);
    out[10] = 'T';
    put_digits(out + 11, tm.tm_hour, 2);
    out[13] = ':';
    put_digits(out + 14, tm.tm_min, 2);
    out[16] = ':';
    put_digits(out + 17, tm.tm_sec, 2);
    out[19] = '.';
    put_digits(out + 20, frac, 3);
    out[23] = 'Z';
    out[24] = '\0';
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
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (Y < 1970 || Y > 9999 || M < 1 || M > 12 || D < 1 || D > mdays[M - 1] || h > 23 ||
        m > 59 || sec > 60)
        return ER_EINVAL;
    int leap = (Y % 4 == 0 && Y % 100 != 0) || Y % 400 == 0;
    if (M == 2 && D == 29 && !leap)
        return ER_EINVAL;
    /* days from civil (Howard Hinnant's algorithm) */
    int y = Y - (M <= 2);
    int era = y / 400;
    int yoe = y - era * 400;
    int doy = (153 * (M + (M > 2 ? -3 : 9)) + 2) / 5 + D - 1;
    int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = (int64_t)era * 146097 + doe - 719468;
    int64_t t = days * 86400 + h * 3600 + m * 60 + (sec > 59 ? 59 : sec) - offset_min * 60;
    *ms = t * 1000 + frac;
    return 0;
}
