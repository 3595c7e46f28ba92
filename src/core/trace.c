/* SPDX-License-Identifier: MIT */
#include "core/trace.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* n hex digits (upper case too when `any_case`), not all zero. */
static bool hex_run(const char *s, size_t n, bool any_case)
{
    bool nonzero = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
              (any_case && c >= 'A' && c <= 'F')))
            return false;
        nonzero |= c != '0';
    }
    return nonzero;
}

static bool flags_ok(const char *s, bool any_case)
{
    return hex_run(s, 2, any_case) || memcmp(s, "00", 2) == 0;
}

static bool parent_shape(const char *s, bool any_case)
{
    return s && strlen(s) == ER_TRACEPARENT_LEN && memcmp(s, "00-", 3) == 0 && s[35] == '-' &&
           s[52] == '-' && hex_run(s + 3, 32, any_case) && hex_run(s + 36, 16, any_case) &&
           flags_ok(s + 53, any_case);
}

bool er_traceparent_ok(const char *s)
{
    return parent_shape(s, false);
}

static void lower_copy(char *dst, const char *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)(src[i] >= 'A' && src[i] <= 'F' ? src[i] + 32 : src[i]);
    dst[n] = '\0';
}

bool er_trace_of(const char *trace_id, char trace[33], char parent[17])
{
    parent[0] = '\0';
    if (parent_shape(trace_id, true)) {
        lower_copy(trace, trace_id + 3, 32);
        lower_copy(parent, trace_id + 36, 16);
        return true;
    }
    if (trace_id && strlen(trace_id) == 32 && hex_run(trace_id, 32, true)) {
        lower_copy(trace, trace_id, 32);
        return true;
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    const char *in = trace_id ? trace_id : "";
    if (!EVP_Digest(in, strlen(in), d, &dlen, EVP_sha256(), NULL) || dlen < 16)
        memset(d, 0x11, 16);
    for (int i = 0; i < 16; i++)
        snprintf(trace + 2 * i, 3, "%02x", d[i]);
    return false;
}

void er_trace_span_id(const char *job_id, int attempt, char out[17])
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the id, then the attempt */
    for (const char *p = job_id; p && *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ (uint64_t)attempt) * 1099511628211ull;
    snprintf(out, 17, "%016llx", (unsigned long long)(h ? h : 1));
}

bool er_trace_header(const char *trace_id, const char *job_id, int attempt, char out[64])
{
    char trace[33], parent[17], span[17];
    if (!trace_id || !er_trace_of(trace_id, trace, parent))
        return false;
    er_trace_span_id(job_id, attempt, span);
    char flags[3] = "01";
    if (parent[0])
        lower_copy(flags, trace_id + 53, 2);
    snprintf(out, 64, "00-%s-%s-%s", trace, span, flags);
    return true;
}
