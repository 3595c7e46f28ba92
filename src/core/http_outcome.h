/* SPDX-License-Identifier: MIT
 *
 * What an HTTP response means for a job: the one classifier HTTP dispatch
 * (src/engine/dispatch.c) and liberrand (errand_error_from_http) use, and
 * the Retry-After parser under it (RFC 9110 section 10.2.3: delay-seconds
 * or an HTTP-date in IMF-fixdate, RFC 850 or asctime form). Pure logic: the
 * time is an argument. Includes util only, because liberrand compiles this
 * file in too (CMakeLists.txt, er_http_outcome_obj).
 */
#ifndef ER_CORE_HTTP_OUTCOME_H
#define ER_CORE_HTTP_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest delay a response can ask for (1 hour): a larger Retry-After
 * is cut to it, so a target cannot park a job or pause a queue for days
 * (a retry_later round is bounded by the queue's max_started besides). */
#define ER_HTTP_DELAY_MAX_MS (3600LL * 1000)
/* A 429 without a usable Retry-After pauses the queue this long. */
#define ER_HTTP_THROTTLE_DEFAULT_MS 10000

/* The outcome classes; the numbers are liberrand's ERRAND_CLASS_* too. */
typedef enum er_http_class {
    ER_HTTP_SUCCESS = 0,
    ER_HTTP_TRANSIENT = 1,   /* retry with backoff, the attempt counted */
    ER_HTTP_PERMANENT = 2,   /* dead at once */
    ER_HTTP_RETRY_LATER = 3, /* retry after delay, the attempt not counted */
    ER_HTTP_THROTTLED = 4,   /* retry after delay, and the whole queue pauses */
} er_http_class;

/* Reads a Retry-After field value (NUL-terminated; surrounding spaces and
 * tabs ignored): delay-seconds, or an HTTP-date (RFC 850's two-digit year
 * read as RFC 9110 says: more than 50 years ahead of now means the century
 * before). Sets *delay_ms to the delay from now_ms (ms since the epoch),
 * 0 for a date in the past, at most max_ms (>= 0), and returns true; false
 * for NULL or anything else (then the header counts as absent and
 * *delay_ms is untouched). Never overflows, whatever the digits. */
bool er_retry_after_parse(const char *value, int64_t now_ms, int64_t max_ms, int64_t *delay_ms);

/* Classifies a response: status 0 (no response: connection error or
 * timeout), or the status received, with its Retry-After value (NULL when
 * absent) at now_ms. Delays are capped at max_ms.
 *   2xx                       success, delay 0
 *   429                       throttled for Retry-After, or
 *                             ER_HTTP_THROTTLE_DEFAULT_MS when absent
 *   408, 5xx with Retry-After retry_later for that delay
 *   408, 5xx without          transient
 *   other 4xx                 permanent
 *   1xx, 3xx                  permanent (a redirect not followed is a target
 *                             misconfigured; a final 1xx is a broken server)
 *   0, or not 100..599        transient (no usable response)
 * Sets *delay_ms (0 unless retry_later or throttled). */
er_http_class er_http_classify(long status, const char *retry_after, int64_t now_ms,
                               int64_t max_ms, int64_t *delay_ms);

/* "success", "transient", "permanent", "retry_later", "throttled". */
const char *er_http_class_name(er_http_class c);

#endif
