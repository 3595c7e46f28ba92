/* SPDX-License-Identifier: MIT
 *
 * Time and randomness as injectable sources. Core logic takes an er_clock and
 * an er_rand so tests can fix both; the server uses the real ones.
 */
#ifndef ER_UTIL_CLOCK_H
#define ER_UTIL_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t er_now_ms(void);
/* Monotonic milliseconds, for timeouts and measuring. */
int64_t er_mono_ms(void);
/* Monotonic nanoseconds, for measuring short spans. */
int64_t er_mono_ns(void);

/* A random source: next() returns 64 uniformly random bits. */
typedef struct er_rand {
    uint64_t (*next)(struct er_rand *r);
    uint64_t state[2];
} er_rand;

/* A fast PRNG (xorshift128+) seeded from getrandom(); one per thread. Its
 * outputs are predictable from earlier ones: jitter and sampling only,
 * never secrets (er_secure_token). */
void er_rand_init_system(er_rand *r);
/* The same PRNG with a fixed seed, for tests. */
void er_rand_init_seeded(er_rand *r, uint64_t seed);
/* Uniform double in [0, 1). */
double er_rand_unit(er_rand *r);

/* n bytes from the kernel's CSPRNG (getrandom, buffered per thread; a
 * forked child never repeats its parent's bytes). Aborts if the kernel
 * refuses. Any thread. */
void er_secure_random(void *out, size_t n);
/* A secret token (lease and owner tokens): 128 bits from er_secure_random
 * as 32 lowercase hex characters and a NUL, into out[33]. */
void er_secure_token(char out[33]);

/* Formats ms-since-epoch as RFC 3339 UTC with milliseconds
 * ("2026-11-30T02:00:00.000Z") into out[32]; years outside 0..9999 are
 * written as 0000 or 9999. */
void er_time_format(int64_t ms, char out[32]);
/* The same ER_TIME_LEN characters at out, without a NUL. */
#define ER_TIME_LEN 24
void er_time_put(int64_t ms, char *out);
/* Parses an RFC 3339 timestamp (Z or +hh:mm offset, optional fraction).
 * Returns 0 and sets *ms, or ER_EINVAL. */
int er_time_parse(const char *s, int64_t *ms);

#endif
