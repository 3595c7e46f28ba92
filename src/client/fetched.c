/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's reader of one leased job (fetched.h): it finds the
 * job's members among a reply's tokens and copies them, unescaped, into
 * one allocation with the job's and the payload's JSON text, so a job
 * costs one malloc and no jansson tree.
 */
#include "client/fetched.h"

#include <stdlib.h>
#include <string.h>

/* ---- one leased job --------------------------------------------------------- */

enum { F_ID, F_TOKEN, F_QUEUE, F_NAME, F_IDEM, F_TRACE, F_CREATED, F_PAYLOAD, F_ATTEMPT,
       F_STARTED, F_TIMEOUT, NF };
static const struct {
    const char *s;
    size_t n;
} fnames[NF] = {
    {"id", 2},          {"lease_token", 11}, {"queue", 5},      {"name", 4},
    {"idempotency_key", 15}, {"trace_id", 8}, {"created_at", 10}, {"payload", 7},
    {"attempt", 7},     {"started", 7},      {"timeout_ms", 10},
};

void *er_fetched_read(const char *text, const er_jscan *s, long obj, size_t head,
                      er_fetched *out)
{
    if (obj < 0 || (size_t)obj >= s->n || s->tok[obj].type != ER_JS_OBJECT)
        return NULL;
    long at[NF];
    for (int f = 0; f < NF; f++)
        at[f] = -1;
    size_t end = s->tok[obj].next;
    for (size_t k = (size_t)obj + 1; k < end; k = s->tok[k + 1].next) {
        const er_jstok *kt = &s->tok[k];
        for (int f = 0; f < NF; f++)
            if (er_jscan_key_is(text, kt, fnames[f].s, fnames[f].n)) {
                at[f] = (long)k + 1;
                break;
            }
    }
    if (at[F_ID] < 0 || s->tok[at[F_ID]].type != ER_JS_STRING || at[F_TOKEN] < 0 ||
        s->tok[at[F_TOKEN]].type != ER_JS_STRING)
        return NULL;
    /* One block: head, the job's text, the payload's text, the strings. */
    const er_jstok *o = &s->tok[obj];
    size_t need = head + (o->end - o->start) + 1;
    const er_jstok *pl = at[F_PAYLOAD] >= 0 ? &s->tok[at[F_PAYLOAD]] : NULL;
    /* A string payload's span excludes its quotes. */
    size_t pstart = 0, pend = 0;
    if (pl) {
        pstart = pl->start - (pl->type == ER_JS_STRING);
        pend = pl->end + (pl->type == ER_JS_STRING);
    }
    need += pl ? pend - pstart + 1 : 5;
    for (int f = F_ID; f <= F_CREATED; f++)
        if (at[f] >= 0 && s->tok[at[f]].type == ER_JS_STRING)
            need += s->tok[at[f]].end - s->tok[at[f]].start + 1;
    char *block = malloc(need);
    if (!block)
        return NULL;
    memset(block, 0, head);
    char *w = block + head;
    out->json = w;
    memcpy(w, text + o->start, o->end - o->start);
    w += o->end - o->start;
    *w++ = '\0';
    out->payload = w;
    if (pl) {
        memcpy(w, text + pstart, pend - pstart);
        w += pend - pstart;
    } else {
        memcpy(w, "null", 4);
        w += 4;
    }
    *w++ = '\0';
    const char **dst[] = {&out->id,   &out->token, &out->queue,     &out->name,
                          &out->idem, &out->trace, &out->created_at};
    for (int f = F_ID; f <= F_CREATED; f++) {
        if (at[f] < 0 || s->tok[at[f]].type != ER_JS_STRING) {
            *dst[f] = "";
            continue;
        }
        *dst[f] = w;
        w += er_jscan_unescape(text, &s->tok[at[f]], w) + 1;
    }
    int64_t *nums[] = {&out->attempt, &out->started, &out->timeout_ms};
    for (int f = F_ATTEMPT; f <= F_TIMEOUT; f++) {
        int64_t v = 0;
        if (at[f] < 0 || !er_jscan_int(text, &s->tok[at[f]], &v))
            v = 0;
        *nums[f - F_ATTEMPT] = v;
    }
    return block;
}
