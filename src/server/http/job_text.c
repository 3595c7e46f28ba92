/* SPDX-License-Identifier: MIT
 *
 * The enqueue request read straight from the body text. The common request
 * ({"name":"x","payload":{...}} with a few options) needs no jansson tree:
 * its slices point into the body, and the payload's compact text is the
 * input minus its whitespace. Anything this reader is not sure of (escapes,
 * non-ASCII, reals, -0, long integers, deep or wide objects, backoff,
 * run_at, unknown or repeated fields, bad syntax) is declined, and the
 * caller takes the jansson path. It judges nothing: an accepted request
 * gives the spec er_http_job_spec would give, and er_job_validate decides.
 * A bulk body ({"jobs":[...]}) is read the same way, request by request;
 * one request it is not sure of sends the whole body to the jansson path.
 */
#include "server/http/job_json.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FAST_DEPTH 16 /* nesting the fast path follows */
#define FAST_KEYS 32  /* members per payload object it checks for duplicates */

typedef struct fast_in {
    const char *p, *end;
    char *out; /* compact payload text being written (room for the input) */
    size_t olen;
} fast_in;

typedef struct fast_slice {
    const char *s;
    size_t n;
} fast_slice;

static void fast_ws(fast_in *in)
{
    while (in->p < in->end &&
           (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r'))
        in->p++;
}

/* A string of printable ASCII without escapes; in->p at the opening quote.
 * Jansson dumps such a string exactly as it reads. */
static bool fast_string(fast_in *in, fast_slice *out)
{
    const char *q = ++in->p;
    while (q < in->end && *q != '"') {
        unsigned char ch = (unsigned char)*q;
        if (ch < 0x20 || ch >= 0x7f || ch == '\\')
            return false;
        q++;
    }
    if (q >= in->end)
        return false;
    out->s = in->p;
    out->n = (size_t)(q - in->p);
    in->p = q + 1;
    return true;
}

/* An integer token of at most 18 digits (so no overflow), not "-0" (which
 * jansson would dump as "0"). */
static bool fast_int(fast_in *in, int64_t *out, fast_slice *tok)
{
    const char *q = in->p;
    bool neg = q < in->end && *q == '-';
    if (neg)
        q++;
    const char *d = q;
    int64_t v = 0;
    while (q < in->end && *q >= '0' && *q <= '9' && q - d < 18)
        v = v * 10 + (*q++ - '0');
    size_t nd = (size_t)(q - d);
    if (nd == 0 || (nd > 1 && *d == '0') || (neg && v == 0))
        return false;
    if (q < in->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E'))
        return false; /* longer than 18 digits, or a real */
    *out = neg ? -v : v;
    tok->s = in->p;
    tok->n = (size_t)(q - in->p);
    in->p = q;
    return true;
}

static bool fast_literal(fast_in *in, const char *lit, size_t n)
{
    if ((size_t)(in->end - in->p) < n || memcmp(in->p, lit, n) != 0)
        return false;
    in->p += n;
    return true;
}

static void fast_put(fast_in *in, const char *s, size_t n)
{
    memcpy(in->out + in->olen, s, n);
    in->olen += n;
}

/* Copies one value compactly to in->out; at in->p (whitespace skipped). */
static bool fast_value(fast_in *in, int depth)
{
    if (in->p >= in->end)
        return false;
    char ch = *in->p;
    fast_slice t;
    int64_t n;
    if (ch == '"') {
        if (!fast_string(in, &t))
            return false;
        fast_put(in, t.s - 1, t.n + 2);
        return true;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        if (!fast_int(in, &n, &t))
            return false;
        fast_put(in, t.s, t.n);
        return true;
    }
    if (ch == 't' || ch == 'f' || ch == 'n') {
        const char *lit = ch == 't' ? "true" : ch == 'f' ? "false" : "null";
        size_t len = strlen(lit);
        if (!fast_literal(in, lit, len))
            return false;
        fast_put(in, lit, len);
        return true;
    }
    if (ch != '{' && ch != '[')
        return false;
    if (depth >= FAST_DEPTH)
        return false;
    bool obj = ch == '{';
    char close = obj ? '}' : ']';
    fast_slice keys[FAST_KEYS];
    size_t nkeys = 0;
    fast_put(in, &ch, 1);
    in->p++;
    fast_ws(in);
    if (in->p < in->end && *in->p == close) {
        in->p++;
        fast_put(in, &close, 1);
        return true;
    }
    for (;;) {
        if (obj) {
            if (in->p >= in->end || *in->p != '"' || nkeys == FAST_KEYS ||
                !fast_string(in, &keys[nkeys]))
                return false;
            for (size_t i = 0; i < nkeys; i++)
                if (keys[i].n == keys[nkeys].n && memcmp(keys[i].s, keys[nkeys].s, keys[i].n) == 0)
                    return false; /* a duplicate key: jansson's error */
            fast_put(in, keys[nkeys].s - 1, keys[nkeys].n + 2);
            nkeys++;
            fast_ws(in);
            if (in->p >= in->end || *in->p != ':')
                return false;
            in->p++;
            fast_put(in, ":", 1);
            fast_ws(in);
        }
        if (!fast_value(in, depth + 1))
            return false;
        fast_ws(in);
        if (in->p >= in->end)
            return false;
        if (*in->p == close) {
            in->p++;
            fast_put(in, &close, 1);
            return true;
        }
        if (*in->p != ',')
            return false;
        in->p++;
        fast_put(in, ",", 1);
        fast_ws(in);
    }
}

/* Where each request field goes in the spec; "payload" is read apart. */
typedef enum { K_STR, K_INT, K_PAYLOAD, K_OTHER } field_kind;

static const struct {
    const char *name;
    field_kind kind;
    size_t off;
} fields[] = {
    {"name", K_STR, offsetof(er_job_spec, name)},
    {"payload", K_PAYLOAD, 0},
    {"id", K_STR, offsetof(er_job_spec, id)},
    {"priority", K_INT, offsetof(er_job_spec, priority)},
    {"delay_ms", K_INT, offsetof(er_job_spec, delay_ms)},
    {"run_at", K_OTHER, 0},
    {"max_attempts", K_INT, offsetof(er_job_spec, max_attempts)},
    {"backoff", K_OTHER, 0},
    {"timeout_ms", K_INT, offsetof(er_job_spec, timeout_ms)},
    {"group", K_STR, offsetof(er_job_spec, group)},
    {"trace_id", K_STR, offsetof(er_job_spec, trace_id)},
    {"idempotency_key", K_STR, offsetof(er_job_spec, idempotency_key)},
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

/* Index in fields, or -1. */
static int find_field(fast_slice k)
{
    for (int i = 0; i < NFIELDS; i++)
        if (strlen(fields[i].name) == k.n && memcmp(fields[i].name, k.s, k.n) == 0)
            return i;
    return -1;
}

/* Reads one request object at in->p (whitespace skipped) into *sp, leaving
 * in->p after its '}'. Its payload is compacted into `scratch` (room for
 * the rest of the input) when one is given, then copied to a buffer of its
 * own size; without one, into a new buffer the size of the whole input. */
static bool read_object(fast_in *in, size_t len, char *scratch, er_job_spec *sp)
{
    unsigned seen = 0;
    if (in->p >= in->end || *in->p != '{')
        return false;
    in->p++;
    fast_ws(in);
    bool first = true;
    while (in->p < in->end && *in->p != '}') {
        if (!first) {
            if (*in->p != ',')
                return false;
            in->p++;
            fast_ws(in);
        }
        first = false;
        fast_slice k;
        if (in->p >= in->end || *in->p != '"' || !fast_string(in, &k))
            return false;
        int f = find_field(k);
        if (f < 0 || (seen & (1u << f)))
            return false; /* unknown ("jobs" too) or repeated: the JSON path */
        seen |= 1u << f;
        fast_ws(in);
        if (in->p >= in->end || *in->p != ':')
            return false;
        in->p++;
        fast_ws(in);
        char *slot = (char *)sp + fields[f].off;
        if (fields[f].kind == K_PAYLOAD) {
            in->olen = 0;
            in->out = scratch ? scratch : (sp->payload_buf = malloc(len + 1));
            if (!in->out || !fast_value(in, 0))
                return false;
            in->out[in->olen] = '\0';
            if (scratch) {
                if (!(sp->payload_buf = malloc(in->olen + 1)))
                    return false;
                memcpy(sp->payload_buf, scratch, in->olen + 1);
            } else if (len - in->olen > 1024) { /* a padded body: keep no slack while queued */
                char *fit = realloc(sp->payload_buf, in->olen + 1);
                if (fit)
                    sp->payload_buf = fit;
            }
            sp->payload = (er_spec_str){ER_SPEC_SET, sp->payload_buf, in->olen};
        } else if (fast_literal(in, "null", 4)) {
            /* null is "absent" for every option */
        } else if (fields[f].kind == K_INT) {
            fast_slice t;
            int64_t v;
            if (!fast_int(in, &v, &t))
                return false;
            *(er_spec_int *)slot = (er_spec_int){ER_SPEC_SET, v};
        } else if (fields[f].kind == K_STR) {
            fast_slice v;
            if (in->p >= in->end || *in->p != '"' || !fast_string(in, &v))
                return false;
            *(er_spec_str *)slot = (er_spec_str){ER_SPEC_SET, v.s, v.n};
        } else {
            return false; /* backoff objects and run_at times: the JSON path */
        }
        fast_ws(in);
    }
    if (in->p >= in->end)
        return false;
    in->p++;
    return true;
}

bool er_http_job_spec_from_text(const char *text, size_t len, const char *queue, er_job_spec *sp)
{
    memset(sp, 0, sizeof *sp);
    fast_in in = {.p = text, .end = text + len};
    fast_ws(&in);
    if (!read_object(&in, len, NULL, sp))
        goto decline;
    fast_ws(&in);
    if (in.p != in.end)
        goto decline;
    sp->queue = (er_spec_str){ER_SPEC_SET, queue, strlen(queue)};
    return true;
decline:
    er_job_spec_fini(sp);
    memset(sp, 0, sizeof *sp);
    return false;
}

void er_http_job_specs_free(er_job_spec *specs, size_t n)
{
    for (size_t i = 0; specs && i < n; i++)
        er_job_spec_fini(&specs[i]);
    free(specs);
}

bool er_http_job_specs_from_text(const char *text, size_t len, const char *queue, size_t max,
                                 er_job_spec **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    fast_in in = {.p = text, .end = text + len};
    fast_slice k;
    fast_ws(&in);
    if (!fast_literal(&in, "{", 1))
        return false;
    fast_ws(&in);
    if (in.p >= in.end || *in.p != '"' || !fast_string(&in, &k) || k.n != 4 ||
        memcmp(k.s, "jobs", 4) != 0)
        return false;
    fast_ws(&in);
    if (!fast_literal(&in, ":", 1))
        return false;
    fast_ws(&in);
    if (!fast_literal(&in, "[", 1))
        return false;
    size_t cap = 0, n = 0;
    er_job_spec *sp = NULL;
    char *scratch = malloc(len + 1);
    if (!scratch)
        return false;
    for (;;) {
        fast_ws(&in);
        if (n == max || (n > 0 && !fast_literal(&in, ",", 1)))
            goto decline; /* too many, or not a list: the JSON path says so */
        fast_ws(&in);
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            er_job_spec *g = realloc(sp, ncap * sizeof *sp);
            if (!g)
                goto decline;
            sp = g;
            cap = ncap;
        }
        memset(&sp[n], 0, sizeof *sp);
        if (!read_object(&in, len, scratch, &sp[n])) {
            n++; /* what it read is freed with the rest */
            goto decline;
        }
        sp[n].queue = (er_spec_str){ER_SPEC_SET, queue, strlen(queue)};
        n++;
        fast_ws(&in);
        if (in.p < in.end && *in.p == ']')
            break;
    }
    in.p++;
    fast_ws(&in);
    if (!fast_literal(&in, "}", 1))
        goto decline;
    fast_ws(&in);
    if (in.p != in.end)
        goto decline;
    free(scratch);
    *out = sp;
    *nout = n;
    return true;
decline:
    free(scratch);
    er_http_job_specs_free(sp, n);
    return false;
}
