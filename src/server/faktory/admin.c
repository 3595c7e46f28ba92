/* SPDX-License-Identifier: MIT
 *
 * The Faktory admin commands over errand's bulk and queue requests:
 * MUTATE (clear, discard and requeue of dead letters; clear, discard,
 * kill and requeue of retries and scheduled jobs) as chains of ER_REQ_BULK
 * chunks, and QUEUE PAUSE,
 * RESUME, REMOVE and LATENCY. What errand cannot do the Faktory way is
 * refused, never approximated (docs/faktory.md). Each change writes an
 * audit row, as the HTTP API's do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/faktory/fk_internal.h"
#include "core/glob.h"
#include "server/faktory/job_map.h"
#include "util/jsonw.h"

void er_fk_names_free(fk_conn *c)
{
    for (size_t i = 0; i < c->nnames; i++)
        free(c->names[i]);
    free(c->names);
    c->names = NULL;
    c->nnames = c->at = 0;
}

static er_audit *audit_new(const fk_conn *c, const char *action, const char *target)
{
    er_audit *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    char who[80];
    snprintf(who, sizeof who, "faktory:%s",
             c->role == ER_ROLE_NONE ? "open" : er_role_name(c->role));
    a->who = strdup(who);
    a->action = strdup(action);
    a->target = target ? strdup(target) : NULL;
    if (!a->who || !a->action || (target && !a->target)) {
        er_audit_fini(a);
        free(a);
        return NULL;
    }
    return a;
}

/* ---- MUTATE ---- */

static const char *bulk_action_audit(er_bulk_action a)
{
    switch (a) {
    case ER_BULK_REDRIVE:
        return "bulk.redrive";
    case ER_BULK_DELETE:
        return "bulk.delete";
    case ER_BULK_KILL:
        return "bulk.kill";
    case ER_BULK_RUN_NOW:
        return "bulk.run_now";
    default:
        return "bulk.cancel";
    }
}

/* filter.regexp: the job hash FETCH would return, as compact JSON
 * (docs/faktory.md, "MUTATE"). Runs on the engine's writer thread. */
static bool job_matches(const er_job *job, const char *pattern)
{
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    er_fk_job_write(job, er_fk_lease_ms(job, ER_FK_RESERVE_MIN_MS) / 1000, &w);
    bool ok = !w.failed && !w.out.err &&
              er_glob_match(pattern, strlen(pattern), w.out.data, w.out.len);
    er_jsonw_fini(&w);
    return ok;
}

static void finish_chunk(fk_conn *c, er_req *r);

static char *dup_or_null(const char *s, bool *oom)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *oom = true;
    return d;
}

/* The chunk after r's (a filter's chain). */
static er_req *next_chunk(fk_conn *c, const er_req *r)
{
    er_req *n = er_req_new(ER_REQ_BULK);
    if (!n)
        return NULL;
    bool oom = false;
    n->bulk.action = r->bulk.action;
    n->bulk.filter = r->bulk.filter;
    n->bulk.filter.queue = NULL;
    n->bulk.filter.name = dup_or_null(r->bulk.filter.name, &oom);
    n->bulk.strict = r->bulk.strict;
    n->bulk.match = r->bulk.match;
    n->bulk.pattern = dup_or_null(r->bulk.pattern, &oom);
    n->bulk.reason = dup_or_null(r->bulk.reason, &oom);
    n->bulk.after = r->bulk.after;
    n->audit = audit_new(c, r->audit ? r->audit->action : bulk_action_audit(r->bulk.action),
                         r->audit ? r->audit->target : NULL);
    if (oom || !n->audit) {
        er_req_free(n);
        return NULL;
    }
    return n;
}

static void finish_chunk(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    if (!r->bulk.more) {
        er_fk_reply_ok(c);
        er_req_free(r);
        return;
    }
    er_req *n = next_chunk(c, r);
    er_req_free(r);
    if (!n) {
        er_fk_oom(c, NULL);
        return;
    }
    er_fk_submit(c, n, finish_chunk);
}

/* Why a MUTATE body is refused, or NULL. */
static const char *mutate_refusal(const char *cmd, const char *target, const json_t *filter,
                                  const json_t *jids, const json_t *jobtype, const json_t *regexp)
{
    static const char *const cmds[] = {"clear", "discard", "kill", "requeue"};
    static const char *const targets[] = {"dead", "retries", "retry", "scheduled"};
    bool cmd_ok = false, target_ok = false;
    for (size_t i = 0; i < 4; i++) {
        cmd_ok |= cmd && strcmp(cmd, cmds[i]) == 0;
        target_ok |= target && strcmp(target, targets[i]) == 0;
    }
    if (!cmd_ok)
        return "cmd must be clear, kill, discard or requeue";
    if (!target_ok)
        return "target must be retries, scheduled or dead";
    if (filter && !json_is_null(filter) && !json_is_object(filter))
        return "filter must be an object";
    if (regexp && !json_is_null(regexp) && !json_is_string(regexp))
        return "filter.regexp must be a string";
    if (json_is_string(regexp) && json_string_length(regexp) > ER_GLOB_MAX)
        return "filter.regexp must be at most 1024 bytes";
    if (jids && !json_is_null(jids) && !json_is_array(jids))
        return "filter.jids must be an array of jids";
    if (jobtype && !json_is_null(jobtype) && !json_is_string(jobtype))
        return "filter.jobtype must be a string";
    if (json_is_array(jids) &&
        (json_array_size(jids) == 0 || json_array_size(jids) > ER_BULK_CHUNK))
        return "filter.jids must hold 1..1000 jids";
    return NULL;
}

/* r->bulk.ids from filter.jids; 0 or an error in *err. */
static void take_jids(er_req *r, const json_t *jids, er_error *err)
{
    size_t k = json_array_size(jids);
    r->bulk.ids = calloc(k, sizeof *r->bulk.ids);
    for (size_t i = 0; r->bulk.ids && i < k; i++) {
        const char *id = json_string_value(json_array_get(jids, i));
        if (!id || er_id_validate(id, "jid", err) < 0) {
            if (!id)
                er_error_set(err, ER_EINVAL, "jid", "filter.jids must hold jids");
            return;
        }
        if (!(r->bulk.ids[i] = strdup(id)))
            break;
        r->bulk.nids = i + 1;
    }
    if (!r->bulk.ids || r->bulk.nids != k)
        er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* Drops the jobtype and the pattern. */
static void drop_type_and_pattern(er_bulk *b)
{
    free((char *)b->filter.name);
    b->filter.name = NULL;
    free(b->pattern);
    b->pattern = NULL;
    b->match = NULL;
}

/* Takes the whole target set: no jids, jobtype or pattern. */
static void drop_filter(er_bulk *b)
{
    for (size_t i = 0; i < b->nids; i++)
        free(b->ids[i]);
    free(b->ids);
    b->ids = NULL;
    b->nids = 0;
    drop_type_and_pattern(b);
}

/* MUTATE {"cmd", "target", "filter": {"jids", "jobtype", "regexp"}}: the
 * jids alone when given, else jobtype and regexp together, as the real
 * server's matchForFilter; clear empties the whole set as its mutateClear
 * does (the filter is checked all the same, then dropped). */
void er_fk_mutate(fk_conn *c, const char *arg, size_t n)
{
    json_t *o = er_fk_arg_json(c, arg, n, true);
    if (!o)
        return;
    const char *cmd = json_string_value(json_object_get(o, "cmd"));
    const char *target = json_string_value(json_object_get(o, "target"));
    json_t *filter = json_object_get(o, "filter");
    json_t *jids = json_is_object(filter) ? json_object_get(filter, "jids") : NULL;
    json_t *jobtype = json_is_object(filter) ? json_object_get(filter, "jobtype") : NULL;
    json_t *regexp = json_is_object(filter) ? json_object_get(filter, "regexp") : NULL;
    const char *why = mutate_refusal(cmd, target, filter, jids, jobtype, regexp);
    if (why) {
        json_decref(o);
        er_fk_send_error(c, "ERR", why, false);
        return;
    }
    bool dead = strcmp(target, "dead") == 0;
    bool clear = strcmp(cmd, "clear") == 0 || strcmp(cmd, "discard") == 0;
    bool requeue = strcmp(cmd, "requeue") == 0;
    if (dead && strcmp(cmd, "kill") == 0) { /* already dead: nothing to do */
        json_decref(o);
        er_fk_reply_ok(c);
        return;
    }
    er_bulk_action action = dead    ? (requeue ? ER_BULK_REDRIVE : ER_BULK_DELETE)
                            : clear ? ER_BULK_CANCEL
                            : requeue ? ER_BULK_RUN_NOW
                                      : ER_BULK_KILL;
    er_req *r = er_req_new(ER_REQ_BULK);
    if (!r) {
        json_decref(o);
        er_fk_oom(c, NULL);
        return;
    }
    er_bulk *b = &r->bulk;
    b->action = action;
    b->strict = true;
    b->filter.state = dead ? ER_STATE_DEAD : ER_STATE_SCHEDULED;
    b->filter.not_redriven = action == ER_BULK_REDRIVE && !json_is_array(jids);
    b->filter.tries = dead                               ? ER_BULK_TRIES_ANY
                      : strcmp(target, "scheduled") == 0 ? ER_BULK_TRIES_NONE
                                                         : ER_BULK_TRIES_SOME;
    er_error err = {0};
    if (json_is_array(jids))
        take_jids(r, jids, &err);
    if (!err.code && json_is_string(jobtype)) {
        const char *t = json_string_value(jobtype);
        if (er_name_validate(t, "jobtype", &err) == 0 && !(b->filter.name = strdup(t)))
            er_error_set(&err, ER_ENOMEM, "", "out of memory");
    }
    /* "*" and "" take every job: no pattern to run */
    const char *pat = json_string_value(regexp);
    if (!err.code && pat && *pat && strcmp(pat, "*") != 0) {
        b->match = job_matches;
        if (!(b->pattern = strdup(pat)))
            er_error_set(&err, ER_ENOMEM, "", "out of memory");
    }
    if (!err.code && action == ER_BULK_KILL && !(b->reason = strdup("killed by Faktory MUTATE")))
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
    char what[160];
    snprintf(what, sizeof what, "faktory MUTATE %s %s", cmd, target);
    if (!err.code && !(r->audit = audit_new(c, bulk_action_audit(action), what)))
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
    /* with jids, the jids alone choose (jobtype and regexp are checked,
     * then dropped), as the real server's matchForFilter */
    if (!err.code && strcmp(cmd, "clear") == 0)
        drop_filter(b);
    else if (!err.code && json_is_array(jids))
        drop_type_and_pattern(b);
    json_decref(o);
    if (err.code) {
        er_req_free(r);
        er_fk_send_error(c, "ERR", err.message, false);
        return;
    }
    er_fk_submit(c, r, finish_chunk);
}

/* ---- FLUSH ---- */

/* FLUSH's steps: cancel the waiting jobs, then the scheduled ones, then
 * delete the dead letters, every queue, a chunk at a time. Active jobs are
 * left to their leases; finished ones to retention. */
static const struct {
    er_bulk_action action;
    er_state state;
} flush_steps[] = {
    {ER_BULK_CANCEL, ER_STATE_WAITING},
    {ER_BULK_CANCEL, ER_STATE_SCHEDULED},
    {ER_BULK_DELETE, ER_STATE_DEAD},
};

static void finish_flush(fk_conn *c, er_req *r);

static void flush_step(fk_conn *c, int64_t after)
{
    if (c->at >= sizeof flush_steps / sizeof flush_steps[0]) {
        er_fk_reply_ok(c);
        return;
    }
    er_req *r = er_req_new(ER_REQ_BULK);
    er_bulk_action a = flush_steps[c->at].action;
    if (!r || !(r->audit = audit_new(c, bulk_action_audit(a), "faktory FLUSH"))) {
        er_req_free(r);
        er_fk_oom(c, NULL);
        return;
    }
    r->bulk.action = a;
    r->bulk.filter.state = flush_steps[c->at].state;
    r->bulk.after = after;
    er_fk_submit(c, r, finish_flush);
}

static void finish_flush(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    int64_t after = r->bulk.more ? r->bulk.after : 0;
    if (!r->bulk.more)
        c->at++;
    er_req_free(r);
    flush_step(c, after);
}

void er_fk_flush(fk_conn *c)
{
    er_fk_names_free(c);
    c->at = 0;
    flush_step(c, 0);
}

/* ---- QUEUE ---- */

static void next_pause(fk_conn *c);

static void finish_pause(fk_conn *c, er_req *r)
{
    if (r->rc) {
        er_fk_names_free(c);
        er_fk_reply_req_error(c, r);
        er_req_free(r);
        return;
    }
    er_req_free(r);
    next_pause(c);
}

/* Pauses or resumes c->names[c->at], or answers when none is left. */
static void next_pause(fk_conn *c)
{
    if (c->at >= c->nnames) {
        er_fk_names_free(c);
        er_fk_reply_ok(c);
        return;
    }
    er_req *r = er_req_new(ER_REQ_PUT_QUEUE);
    const char *q = c->names[c->at++];
    if (!r || !(r->change = calloc(1, sizeof *r->change)) || !(r->queue = strdup(q)) ||
        !(r->audit = audit_new(c, c->pause ? "queue.pause" : "queue.resume", q))) {
        er_req_free(r);
        er_fk_names_free(c);
        er_fk_oom(c, NULL);
        return;
    }
    r->change->paused = ER_CHANGE_SET;
    r->change->paused_v = c->pause;
    er_fk_submit(c, r, finish_pause);
}

/* "*": every queue the store knows. */
static void finish_all_queues(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    er_fk_names_free(c);
    c->names = calloc(r->nqueue_infos + 1, sizeof *c->names);
    for (size_t i = 0; c->names && i < r->nqueue_infos; i++) {
        c->names[i] = r->queue_infos[i].name; /* taken */
        r->queue_infos[i].name = NULL;
        c->nnames = i + 1;
    }
    er_req_free(r);
    if (!c->names) {
        er_fk_oom(c, NULL);
        return;
    }
    next_pause(c);
}

static void finish_latency(fk_conn *c, er_req *r)
{
    if (r->rc) {
        er_fk_reply_req_error(c, r);
        er_req_free(r);
        er_fk_names_free(c);
        return;
    }
    int64_t now = er_now_ms();
    er_jsonw w;
    er_jsonw_init(&w, 1 << 20);
    er_jsonw_begin_object(&w);
    for (size_t i = 0; i < c->nnames; i++) {
        double lat = 0;
        for (size_t k = 0; k < r->nqueue_infos; k++)
            if (strcmp(r->queue_infos[k].name, c->names[i]) == 0 &&
                r->queue_infos[k].oldest_waiting_ms > 0 &&
                now > r->queue_infos[k].oldest_waiting_ms)
                lat = (double)(now - r->queue_infos[k].oldest_waiting_ms) / 1000.0;
        er_jsonw_key(&w, c->names[i]);
        er_jsonw_double(&w, lat);
    }
    er_jsonw_end_object(&w);
    if (w.failed || w.out.err) {
        er_fk_oom(c, NULL);
    } else {
        er_fk_reply_bulk(&c->out, w.out.data, w.out.len);
        er_fk_send(c, false);
    }
    er_jsonw_fini(&w);
    er_req_free(r);
    er_fk_names_free(c);
}

static void finish_remove(fk_conn *c, er_req *r);

/* Cancels the waiting jobs of c->names[c->at] (Faktory's queue is its
 * waiting jobs), a chunk at a time; then the next queue. */
static void next_remove(fk_conn *c, int64_t after)
{
    if (c->at >= c->nnames) {
        er_fk_names_free(c);
        er_fk_reply_ok(c);
        return;
    }
    const char *q = c->names[c->at];
    er_req *r = er_req_new(ER_REQ_BULK);
    if (!r || !(r->bulk.filter.queue = strdup(q)) ||
        !(r->audit = audit_new(c, "bulk.cancel", q))) {
        er_req_free(r);
        er_fk_names_free(c);
        er_fk_oom(c, NULL);
        return;
    }
    r->bulk.action = ER_BULK_CANCEL;
    r->bulk.filter.state = ER_STATE_WAITING;
    r->bulk.after = after;
    er_fk_submit(c, r, finish_remove);
}

static void finish_remove(fk_conn *c, er_req *r)
{
    if (r->rc) {
        er_fk_names_free(c);
        er_fk_reply_req_error(c, r);
        er_req_free(r);
        return;
    }
    int64_t after = r->bulk.more ? r->bulk.after : 0;
    if (!r->bulk.more)
        c->at++;
    er_req_free(r);
    next_remove(c, after);
}

/* QUEUE PAUSE|RESUME|REMOVE|LATENCY q1 q2 ... ("*" for every queue with
 * PAUSE and RESUME). Queue names are core's rule. */
void er_fk_queue(fk_conn *c, const char *arg, size_t n)
{
    size_t i = 0;
    while (i < n && arg[i] != ' ')
        i++;
    size_t sl = i;
    enum { PAUSE, RESUME, REMOVE, LATENCY, BAD } sub = BAD;
    static const char *const subs[] = {"PAUSE", "RESUME", "REMOVE", "LATENCY"};
    for (int k = 0; k < 4; k++)
        if (strlen(subs[k]) == sl && memcmp(subs[k], arg, sl) == 0)
            sub = k;
    if (sub == BAD) {
        er_fk_send_error(c, "ERR", "QUEUE takes PAUSE, RESUME, REMOVE or LATENCY", false);
        return;
    }
    er_fk_names_free(c);
    bool all = false;
    er_error err = {0};
    while (i < n) {
        while (i < n && arg[i] == ' ')
            i++;
        size_t s = i;
        while (i < n && arg[i] != ' ')
            i++;
        if (i == s)
            break;
        if (i - s == 1 && arg[s] == '*') {
            all = true;
            continue;
        }
        char name[ER_NAME_MAX + 2];
        size_t len = i - s < sizeof name - 1 ? i - s : sizeof name - 1;
        memcpy(name, arg + s, len);
        name[len] = '\0';
        if (er_name_validate(name, "queue", &err) < 0)
            break;
        char **nv = realloc(c->names, (c->nnames + 1) * sizeof *nv);
        if (!nv || !(nv[c->nnames] = strdup(name))) {
            if (nv)
                c->names = nv;
            er_error_set(&err, ER_ENOMEM, "", "out of memory");
            break;
        }
        c->names = nv;
        c->nnames++;
        if (c->nnames > 1000) {
            er_error_set(&err, ER_EINVAL, "queue", "QUEUE takes at most 1000 queues");
            break;
        }
    }
    if (!err.code && all && (c->nnames || (sub != PAUSE && sub != RESUME)))
        er_error_set(&err, ER_EINVAL, "queue",
                     "\"*\" stands alone, and only with PAUSE and RESUME");
    if (!err.code && !all && !c->nnames)
        er_error_set(&err, ER_EINVAL, "queue", "QUEUE needs queue names");
    if (err.code) {
        er_fk_names_free(c);
        er_fk_send_error(c, "ERR", err.message, false);
        return;
    }
    c->at = 0;
    c->pause = sub == PAUSE;
    if (sub == REMOVE) {
        next_remove(c, 0);
        return;
    }
    if (sub == LATENCY || all) {
        er_req *r = er_req_new(ER_REQ_LIST_QUEUES);
        if (!r) {
            er_fk_names_free(c);
            er_fk_oom(c, NULL);
            return;
        }
        er_fk_submit(c, r, sub == LATENCY ? finish_latency : finish_all_queues);
        return;
    }
    next_pause(c);
}
