/* SPDX-License-Identifier: MIT
 *
 * The checker of `errand chaos`: joins what the API says about every job
 * with what the ledger says was executed and applied, decides the verdicts,
 * prints a summary and each violation ("DUPLICATE EFFECT: ..."), and writes
 * the JSON report and an SVG plot (throughput and queue depth over time,
 * the chaos events marked), drawn by hand: no plotting dependency.
 */
#include "cli/chaos.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHOW_MAX 20 /* violations printed per kind */

enum { V_ENQUEUED, V_COMPLETED, V_EFFECTS, V_EXECS, V_ACTIVE, V_PROCS, V_COUNT };

typedef struct verdict {
    const char *name, *what;
    bool ok;
    long long bad;
    char detail[200];
} verdict;

typedef struct tally {
    long long acked, completed, dead, dead_expected, effects, execs, foreign;
    long long executed_jobs, reexecuted, reexec_after_kill, duplicates, missing_effects;
    long long kills[CH_EV_KINDS];
} tally;

static const char *state_name(int s)
{
    static const char *const n[] = {"missing", "scheduled", "waiting", "active",
                                    "completed", "dead", "cancelled"};
    return s >= 0 && s <= CH_ST_CANCELLED ? n[s] : "?";
}

static bool poison(const chaos_run *r, long long i)
{
    return r->p.permanent_every > 0 && i % r->p.permanent_every == 0;
}

/* Prints one violation line (the first SHOW_MAX of a kind) on stderr. */
static void violation(long long *shown, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(long long *shown, const char *fmt, ...)
{
    if (++*shown > SHOW_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void more(long long shown, const char *what)
{
    if (shown > SHOW_MAX)
        fprintf(stderr, "... and %lld more %s\n", shown - SHOW_MAX, what);
}

static void check(chaos_run *r, tally *t, verdict *v)
{
    const chaos_params *p = &r->p;
    long long s_lost = 0, s_dup = 0, s_missing = 0, s_exec = 0;
    for (long long i = 0; i < p->jobs; i++) {
        const chaos_job *j = &r->jobs[i];
        t->acked += j->acked;
        t->completed += j->state == CH_ST_COMPLETED;
        t->dead += j->state == CH_ST_DEAD;
        if (j->executions > 0)
            t->executed_jobs++;
        if (j->executions > 1) {
            t->reexecuted++;
            t->reexec_after_kill += j->after_kill;
        }
        bool want_dead = poison(r, i);
        t->dead_expected += want_dead;
        if (j->acked) {
            bool fine = want_dead ? j->state == CH_ST_DEAD && j->dead_permanent
                                  : j->state == CH_ST_COMPLETED;
            if (!fine) {
                v[V_COMPLETED].bad++;
                if (j->state == CH_ST_MISSING)
                    violation(&s_lost, "LOST JOB: %s-%lld was acknowledged and is not on the server",
                              p->prefix, i);
                else
                    violation(&s_lost, "NOT COMPLETED: %s-%lld is %s (expected %s)", p->prefix, i,
                              state_name(j->state), want_dead ? "dead, permanent" : "completed");
            }
        }
        if (j->effects > 1) {
            t->duplicates++;
            v[V_EFFECTS].bad++;
            char id[160], pids[200] = "";
            snprintf(id, sizeof id, "%s-%lld", p->prefix, i);
            if (s_dup < SHOW_MAX) /* one ledger query per line printed */
                chaos_ledger_pids(r->ledger_path, "executions", id, pids, sizeof pids);
            violation(&s_dup, "DUPLICATE EFFECT: %s applied %u times (executions by pids %s)", id,
                      j->effects, pids);
        } else if (j->effects == 0 && j->state == CH_ST_COMPLETED && !want_dead) {
            t->missing_effects++;
            v[V_EFFECTS].bad++;
            violation(&s_missing, "MISSING EFFECT: %s-%lld is completed but its effect was never applied",
                      p->prefix, i);
        } else if (j->effects > 0 && want_dead) {
            v[V_EFFECTS].bad++;
            violation(&s_missing, "UNEXPECTED EFFECT: %s-%lld failed permanently yet has an effect",
                      p->prefix, i);
        }
        if (j->executions < j->effects ||
            (j->executions == 0 && (j->state == CH_ST_COMPLETED || j->state == CH_ST_DEAD))) {
            v[V_EXECS].bad++;
            violation(&s_exec, "NO EXECUTION: %s-%lld has %u executions and %u effects (state %s)",
                      p->prefix, i, j->executions, j->effects, state_name(j->state));
        }
    }
    more(s_lost, "jobs not completed");
    more(s_dup, "duplicate effects");
    more(s_missing, "effect errors");
    more(s_exec, "execution errors");
    for (size_t e = 0; e < r->nevents; e++)
        t->kills[r->events[e].kind]++;

    v[V_ENQUEUED].bad = p->jobs - t->acked;
    snprintf(v[V_ENQUEUED].detail, sizeof v[V_ENQUEUED].detail,
             "%lld of %lld acknowledged (%lld failed requests retried, %lld duplicates on retry)",
             t->acked, p->jobs, r->enqueue_failures, r->enqueue_duplicates);
    snprintf(v[V_COMPLETED].detail, sizeof v[V_COMPLETED].detail,
             "%lld completed, %lld dead (%lld expected dead), %lld not as expected", t->completed,
             t->dead, t->dead_expected, v[V_COMPLETED].bad);
    snprintf(v[V_EFFECTS].detail, sizeof v[V_EFFECTS].detail,
             "%lld effects for %lld completed jobs; %lld duplicated, %lld missing", t->effects,
             t->completed, t->duplicates, t->missing_effects);
    if (t->execs < t->effects)
        v[V_EXECS].bad++;
    snprintf(v[V_EXECS].detail, sizeof v[V_EXECS].detail,
             "%lld executions >= %lld effects; %lld redeliveries over %lld jobs", t->execs,
             t->effects, t->execs - t->executed_jobs, t->reexecuted);
    if (!r->final_ok)
        v[V_ACTIVE].bad = 1;
    else
        v[V_ACTIVE].bad = r->final.active;
    snprintf(v[V_ACTIVE].detail, sizeof v[V_ACTIVE].detail,
             r->final_ok ? "active %lld, waiting %lld, scheduled %lld at the end"
                         : "could not read the queue counts at the end (%lld %lld %lld)",
             r->final.active, r->final.waiting, r->final.scheduled);
    v[V_PROCS].bad = r->worker_crashes + r->term_exit_nonzero + r->stop_forced;
    snprintf(v[V_PROCS].detail, sizeof v[V_PROCS].detail,
             "%d unexpected exits, %d SIGTERMed workers exiting non-zero, %d not stopping in time",
             r->worker_crashes, r->term_exit_nonzero, r->stop_forced);
    if (r->timed_out) {
        v[V_COMPLETED].bad += v[V_COMPLETED].bad == 0;
        strncat(v[V_COMPLETED].detail, "; the run timed out",
                sizeof v[V_COMPLETED].detail - strlen(v[V_COMPLETED].detail) - 1);
    }
    for (int k = 0; k < V_COUNT; k++)
        v[k].ok = v[k].bad == 0;
}

/* ---- JSON report ---------------------------------------------------------- */

static int write_json(const chaos_run *r, const tally *t, const verdict *v, bool ok)
{
    const chaos_params *p = &r->p;
    json_t *params = json_pack(
        "{s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "jobs",
        (json_int_t)p->jobs, "workers", p->workers, "concurrency", p->concurrency, "worker_kills",
        p->worker_kills, "worker_terms", p->worker_terms, "server_kills", p->server_kills,
        "pg_restarts", p->pg_restarts, "store", p->server_url ? p->server_url : p->store,
        "handler", p->handler, "queue", p->queue, "prefix", p->prefix, "permanent_every",
        (json_int_t)p->permanent_every, "work_ms", (json_int_t)p->work_ms, "unsafe_sleep_ms",
        (json_int_t)p->unsafe_sleep_ms, "lease_ms", (json_int_t)p->lease_ms, "outage_ms",
        (json_int_t)p->outage_ms, "batch", (json_int_t)p->batch, "sample_ms",
        (json_int_t)p->sample_ms);
    json_t *events = json_array(), *samples = json_array(), *verdicts = json_array();
    for (size_t i = 0; i < r->nevents; i++) {
        const chaos_event *e = &r->events[i];
        json_t *o = json_pack("{s:f,s:s,s:s}", "t", round(e->t * 1000) / 1000,
                              "type", chaos_event_name(e->kind), "detail", e->detail);
        if (e->slot >= 0)
            json_object_set_new(o, "worker", json_integer(e->slot));
        if (e->pid)
            json_object_set_new(o, "pid", json_integer(e->pid));
        json_array_append_new(events, o);
    }
    for (size_t i = 0; i < r->nsamples; i++) {
        const chaos_sample *s = &r->samples[i];
        json_t *o = s->up ? json_pack("{s:f,s:b,s:I,s:I,s:I,s:I,s:I}", "t",
                                      round(s->t * 1000) / 1000, "up", 1, "completed",
                                      (json_int_t)s->completed, "waiting", (json_int_t)s->waiting,
                                      "active", (json_int_t)s->active, "scheduled",
                                      (json_int_t)s->scheduled, "dead", (json_int_t)s->dead)
                          : json_pack("{s:f,s:b}", "t", round(s->t * 1000) / 1000, "up", 0);
        json_array_append_new(samples, o);
    }
    for (int k = 0; k < V_COUNT; k++)
        json_array_append_new(verdicts, json_pack("{s:s,s:s,s:b,s:I,s:s}", "name", v[k].name,
                                                  "check", v[k].what, "ok", v[k].ok, "violations",
                                                  (json_int_t)v[k].bad, "detail", v[k].detail));
    json_t *totals = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "acknowledged",
        (json_int_t)t->acked, "completed", (json_int_t)t->completed, "dead", (json_int_t)t->dead,
        "dead_expected", (json_int_t)t->dead_expected, "effects", (json_int_t)t->effects,
        "executions", (json_int_t)t->execs, "redeliveries",
        (json_int_t)(t->execs - t->executed_jobs), "jobs_reexecuted", (json_int_t)t->reexecuted,
        "reexecuted_after_worker_sigkill", (json_int_t)t->reexec_after_kill, "duplicate_effects",
        (json_int_t)t->duplicates, "missing_effects", (json_int_t)t->missing_effects,
        "worker_sigkills", (json_int_t)t->kills[CH_EV_WORKER_SIGKILL], "worker_sigterms",
        (json_int_t)t->kills[CH_EV_WORKER_SIGTERM], "server_sigkills",
        (json_int_t)t->kills[CH_EV_SERVER_SIGKILL], "pg_restarts",
        (json_int_t)t->kills[CH_EV_PG_RESTART], "enqueue_failures",
        (json_int_t)r->enqueue_failures, "enqueue_duplicates", (json_int_t)r->enqueue_duplicates);
    json_t *dups = json_array();
    for (long long i = 0; i < p->jobs && json_array_size(dups) < 100; i++)
        if (r->jobs[i].effects > 1) {
            char id[160], pids[300];
            snprintf(id, sizeof id, "%s-%lld", p->prefix, i);
            chaos_ledger_pids(r->ledger_path, "executions", id, pids, sizeof pids);
            json_array_append_new(dups, json_pack("{s:s,s:i,s:i,s:s}", "job_id", id, "effects",
                                                  (int)r->jobs[i].effects, "executions",
                                                  (int)r->jobs[i].executions, "execution_pids",
                                                  pids));
        }
    json_t *root = json_pack("{s:i,s:b,s:I,s:o,s:f,s:b,s:o,s:o,s:o,s:o,s:o}", "version", 1, "ok",
                             ok, "seed", (json_int_t)p->seed, "parameters", params, "duration_s",
                             round(r->duration_s * 1000) / 1000, "timed_out", r->timed_out,
                             "totals", totals, "verdicts", verdicts, "duplicates", dups, "events",
                             events, "samples", samples);
    int rc = root ? json_dump_file(root, p->report_path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : -1;
    json_decref(root);
    if (rc != 0)
        fprintf(stderr, "errand chaos: cannot write %s\n", p->report_path);
    return rc == 0 ? 0 : -1;
}

/* ---- SVG plot --------------------------------------------------------------- */

#define W 960
#define H 480
#define ML 70
#define MR 80
#define MT 60
#define MB 56

static double nice_max(double v)
{
    if (v <= 0)
        return 1;
    double e = pow(10, floor(log10(v))), f = v / e;
    double n = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return n * e;
}

static const char *event_color(chaos_event_kind k)
{
    switch (k) {
    case CH_EV_WORKER_SIGKILL: return "#d62728";
    case CH_EV_WORKER_SIGTERM: return "#9467bd";
    case CH_EV_SERVER_SIGKILL: return "#000000";
    case CH_EV_PG_RESTART: return "#2ca02c";
    case CH_EV_WORKER_CRASH: return "#ff00ff";
    default: return NULL;
    }
}

static const char *event_label(chaos_event_kind k)
{
    switch (k) {
    case CH_EV_WORKER_SIGKILL: return "worker SIGKILL";
    case CH_EV_WORKER_SIGTERM: return "worker SIGTERM";
    case CH_EV_SERVER_SIGKILL: return "server SIGKILL";
    case CH_EV_PG_RESTART: return "PostgreSQL restart";
    case CH_EV_WORKER_CRASH: return "unexpected exit";
    default: return "";
    }
}

/* One polyline per run of samples taken while the server was up; a lone
 * sample becomes a dot. */
static void polyline(FILE *f, const chaos_run *r, const double *ys, double xmax, double ymax,
                     const char *color, const char *dash)
{
    size_t npts = 0;
    double lx = 0, ly = 0;
    for (size_t i = 0; i <= r->nsamples; i++) {
        bool gap = i == r->nsamples || !r->samples[i].up || isnan(ys[i]);
        if (gap) {
            if (npts > 1)
                fprintf(f, "\"/>\n");
            else if (npts == 1)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", lx, ly,
                        color);
            npts = 0;
            continue;
        }
        double x = ML + (W - ML - MR) * r->samples[i].t / xmax;
        double y = H - MB - (H - MT - MB) * ys[i] / ymax;
        if (npts == 1)
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%.1f,%.1f ",
                    color, dash, lx, ly);
        if (npts >= 1)
            fprintf(f, "%.1f,%.1f ", x, y);
        lx = x;
        ly = y;
        npts++;
    }
}

static int write_svg(const chaos_run *r, const char *path, bool ok)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "errand chaos: cannot write %s\n", path);
        return -1;
    }
    const chaos_params *p = &r->p;
    size_t n = r->nsamples;
    double *thr = calloc(n ? n : 1, sizeof *thr), *depth = calloc(n ? n : 1, sizeof *depth);
    double tmax = r->duration_s > 1 ? r->duration_s : 1, thrmax = 0, depmax = 0;
    size_t last_up = (size_t)-1;
    for (size_t i = 0; i < n && thr && depth; i++) {
        const chaos_sample *s = &r->samples[i];
        thr[i] = NAN;
        depth[i] = (double)(s->waiting + s->active + s->scheduled);
        if (s->up && last_up != (size_t)-1 && s->t > r->samples[last_up].t) {
            const chaos_sample *a = &r->samples[last_up];
            thr[i] = (double)(s->completed + s->dead - a->completed - a->dead) / (s->t - a->t);
        }
        if (s->up) {
            last_up = i;
            if (!isnan(thr[i]) && thr[i] > thrmax)
                thrmax = thr[i];
            if (depth[i] > depmax)
                depmax = depth[i];
        }
        if (s->t > tmax)
            tmax = s->t;
    }
    thrmax = nice_max(thrmax * 1.1);
    depmax = nice_max(depmax * 1.1);
    double tstep = nice_max(tmax / 8);
    tmax = ceil(tmax / tstep) * tstep;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">errand chaos: %lld "
               "jobs, %d workers, store %s, handler %s, seed %llu: %s</text>\n",
            ML, p->jobs, p->workers, p->server_url ? "external" : p->store, p->handler,
            (unsigned long long)p->seed, ok ? "PASS" : "FAIL");
    /* server outages: shaded from the kill to listening again */
    for (size_t i = 0; i < r->nevents; i++) {
        if (r->events[i].kind != CH_EV_SERVER_SIGKILL)
            continue;
        double t1 = r->duration_s;
        for (size_t k = i + 1; k < r->nevents; k++)
            if (r->events[k].kind == CH_EV_SERVER_UP) {
                t1 = r->events[k].t;
                break;
            }
        double x0 = ML + (W - ML - MR) * r->events[i].t / tmax;
        double x1 = ML + (W - ML - MR) * t1 / tmax;
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#dddddd\"/>\n",
                x0, MT, x1 - x0 < 1 ? 1 : x1 - x0, H - MT - MB);
    }
    /* axes and grid */
    for (int k = 0; k <= 5; k++) {
        double y = H - MB - (H - MT - MB) * k / 5.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n", ML,
                y, W - MR, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#1f77b4\">%g</text>\n",
                ML - 6, y + 4, thrmax * k / 5);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" fill=\"#ff7f0e\">%g</text>\n", W - MR + 6, y + 4,
                depmax * k / 5);
    }
    for (double tk = 0; tk <= tmax + tstep / 2; tk += tstep) {
        double x = ML + (W - ML - MR) * tk / tmax;
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, H - MB + 16,
                tk);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
            ML, MT, W - ML - MR, H - MT - MB);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">time (s)</text>\n", (ML + W - MR) / 2,
            H - MB + 34);
    fprintf(f, "<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\" "
               "fill=\"#1f77b4\">jobs finished per second</text>\n", (MT + H - MB) / 2);
    fprintf(f, "<text transform=\"translate(%d %d) rotate(90)\" text-anchor=\"middle\" "
               "fill=\"#ff7f0e\">queue depth (waiting + active + scheduled)</text>\n",
            W - 18, (MT + H - MB) / 2);
    if (thr && depth) {
        polyline(f, r, depth, tmax, depmax, "#ff7f0e", " stroke-dasharray=\"6 3\"");
        polyline(f, r, thr, tmax, thrmax, "#1f77b4", "");
    }
    /* events */
    for (size_t i = 0; i < r->nevents; i++) {
        const char *col = event_color(r->events[i].kind);
        if (!col)
            continue;
        double x = ML + (W - ML - MR) * r->events[i].t / tmax;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" "
                   "stroke-width=\"1.5\"/>\n", x, MT, x, H - MB, col);
        fprintf(f, "<text transform=\"translate(%.1f %d) rotate(90)\" font-size=\"10\" "
                   "fill=\"%s\">%s</text>\n", x + 3, MT + 4, col, event_label(r->events[i].kind));
    }
    /* legend */
    static const chaos_event_kind lk[] = {CH_EV_WORKER_SIGKILL, CH_EV_WORKER_SIGTERM,
                                          CH_EV_SERVER_SIGKILL, CH_EV_PG_RESTART};
    int lx = ML;
    fprintf(f, "<line x1=\"%d\" y1=\"40\" x2=\"%d\" y2=\"40\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
               "<text x=\"%d\" y=\"44\">throughput</text>\n", lx, lx + 20, lx + 24);
    lx += 100;
    fprintf(f, "<line x1=\"%d\" y1=\"40\" x2=\"%d\" y2=\"40\" stroke=\"#ff7f0e\" stroke-width=\"2\" "
               "stroke-dasharray=\"6 3\"/><text x=\"%d\" y=\"44\">queue depth</text>\n",
            lx, lx + 20, lx + 24);
    lx += 110;
    for (size_t k = 0; k < sizeof lk / sizeof lk[0]; k++) {
        fprintf(f, "<line x1=\"%d\" y1=\"34\" x2=\"%d\" y2=\"46\" stroke=\"%s\" stroke-width=\"2\"/>"
                   "<text x=\"%d\" y=\"44\">%s</text>\n",
                lx, lx, event_color(lk[k]), lx + 5, event_label(lk[k]));
        lx += 135;
    }
    fprintf(f, "<rect x=\"%d\" y=\"35\" width=\"12\" height=\"10\" fill=\"#dddddd\"/>"
               "<text x=\"%d\" y=\"44\">server down</text>\n", lx, lx + 16);
    fprintf(f, "</svg>\n");
    free(thr);
    free(depth);
    int rc = ferror(f) ? -1 : 0;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

/* ---- summary -------------------------------------------------------------- */

int chaos_report_finish(chaos_run *r)
{
    const chaos_params *p = &r->p;
    tally t = {0};
    verdict v[V_COUNT] = {
        {"enqueued", "every enqueue acknowledged", true, 0, ""},
        {"completed", "every acknowledged job completed (or dead when injected)", true, 0, ""},
        {"effects_once", "effects applied exactly once per job", true, 0, ""},
        {"executions_cover_effects", "executions >= effects", true, 0, ""},
        {"none_active", "no job stuck active", true, 0, ""},
        {"processes", "workers and server exited only when told", true, 0, ""},
    };
    char eb[400];
    if (chaos_ledger_read(r, &t.effects, &t.execs, &t.foreign, eb, sizeof eb) < 0) {
        fprintf(stderr, "errand chaos: %s\n", eb);
        return 1;
    }
    check(r, &t, v);
    bool ok = true;
    for (int k = 0; k < V_COUNT; k++)
        ok &= v[k].ok;

    printf("errand chaos: %lld jobs, %d workers x %d, handler %s, store %s, seed %llu, %.1f s\n",
           p->jobs, p->workers, p->concurrency, p->handler, p->server_url ? p->server_url : p->store,
           (unsigned long long)p->seed, r->duration_s);
    printf("events: %lld worker SIGKILLs, %lld worker SIGTERMs, %lld server SIGKILLs, "
           "%lld PostgreSQL restarts\n",
           t.kills[CH_EV_WORKER_SIGKILL], t.kills[CH_EV_WORKER_SIGTERM],
           t.kills[CH_EV_SERVER_SIGKILL], t.kills[CH_EV_PG_RESTART]);
    printf("  %-22s %10lld\n", "jobs acknowledged", t.acked);
    printf("  %-22s %10lld\n", "completed", t.completed);
    printf("  %-22s %10lld   (%lld expected)\n", "dead", t.dead, t.dead_expected);
    printf("  %-22s %10lld\n", "effects", t.effects);
    printf("  %-22s %10lld\n", "executions", t.execs);
    printf("  %-22s %10lld   (%lld jobs ran more than once; %lld of them after a worker "
           "SIGKILL, %lld otherwise)\n",
           "redeliveries", t.execs - t.executed_jobs, t.reexecuted, t.reexec_after_kill,
           t.reexecuted - t.reexec_after_kill);
    printf("  %-22s %10lld\n", "duplicate effects", t.duplicates);
    printf("  %-22s %10lld\n", "active at the end", r->final_ok ? r->final.active : -1);
    printf("verdicts:\n");
    for (int k = 0; k < V_COUNT; k++)
        printf("  %-4s %-58s %s\n", v[k].ok ? "ok" : "FAIL", v[k].what, v[k].detail);
    printf("%s\n", ok ? "PASS" : "FAIL");
    fflush(stdout);

    int rc = 0;
    if (p->report_path)
        rc |= write_json(r, &t, v, ok);
    char plot[600];
    const char *plot_path = p->plot_path;
    if (!plot_path && p->report_path) {
        snprintf(plot, sizeof plot, "%s", p->report_path);
        char *dot = strrchr(plot, '.'), *slash = strrchr(plot, '/');
        if (dot && (!slash || dot > slash))
            *dot = '\0';
        strncat(plot, ".svg", sizeof plot - strlen(plot) - 1);
        plot_path = plot;
    }
    if (plot_path)
        rc |= write_svg(r, plot_path, ok);
    return ok && rc == 0 ? 0 : 1;
}
