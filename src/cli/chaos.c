/* SPDX-License-Identifier: MIT
 *
 * `errand chaos`: proves "no job lost, no effect duplicated" by running a
 * server (this same binary, or --server URL), enqueueing N jobs, running W
 * worker processes (`errand chaos --worker`, chaos_worker.c) and, on a
 * schedule drawn from --seed, SIGKILLing and SIGTERMing workers, SIGKILLing
 * and restarting the server, and restarting PostgreSQL. It then collects
 * every job's state through the API and hands over to chaos_report.c, which
 * checks the ledger and prints the verdicts. Single-threaded: one loop polls,
 * produces, reaps children and fires events; nothing here touches the store.
 */
#include "cli/chaos.h"
#include "cli/cli.h"
#include "cli/remote.h"
#include "cli/settings.h"
#include "util/buf.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 20
#define POLL_MS 100
#define EVENT_GAP_MS 300  /* between two chaos events */
#define START_WAIT_MS 30000
#define MAX_WORKERS 64
#define CHAOS_MAX_RECORDS ((size_t)1 << 22) /* events, samples or killed pids of one run */

static const er_setting chaos_table[] = {
    {"jobs", ER_SET_INT, "10000", 1, 100000000, NULL, "jobs to enqueue (ids PREFIX-0 .. PREFIX-N-1)"},
    {"workers", ER_SET_INT, "4", 1, MAX_WORKERS, NULL, "worker processes"},
    {"concurrency", ER_SET_INT, "4", 1, 64, NULL, "handler threads per worker"},
    {"worker-kills", ER_SET_INT, "5", 0, 10000, NULL, "workers SIGKILLed (then restarted)"},
    {"worker-terms", ER_SET_INT, "2", 0, 10000, NULL, "workers SIGTERMed (restarted after they exit)"},
    {"server-kills", ER_SET_INT, "2", 0, 1000, NULL, "server SIGKILLs (restarted on the same store and port)"},
    {"pg-restarts", ER_SET_INT, "-1", -1, 1000, NULL,
     "PostgreSQL restarts (pg_ctl restart -m immediate); -1: 1 when --pg-ctl-data is given"},
    {"seed", ER_SET_INT, "1", 0, INT64_MAX, NULL, "seed of the chaos schedule"},
    {"store", ER_SET_ENUM, "sqlite", 0, 0, "sqlite|postgres", "the server's store"},
    {"pg-url", ER_SET_STRING, NULL, 0, 0, NULL, "PostgreSQL URL for --store postgres (a fresh schema is used)"},
    {"pg-ctl-data", ER_SET_STRING, NULL, 0, 0, NULL, "data directory of the cluster to restart"},
    {"pg-ctl", ER_SET_STRING, "/usr/lib/postgresql/15/bin/pg_ctl", 0, 0, NULL, "pg_ctl program (run as user postgres when root)"},
    {"handler", ER_SET_ENUM, "safe", 0, 0, "safe|unsafe",
     "safe: idempotent effect; unsafe: effect without the check, then a pause before the ack"},
    {"queue", ER_SET_STRING, "chaos", 0, 0, NULL, "queue name"},
    {"prefix", ER_SET_STRING, "chaos", 0, 0, NULL, "job id prefix ([A-Za-z0-9_.] only)"},
    {"permanent-every", ER_SET_INT, "0", 0, INT64_MAX, NULL,
     "jobs whose index is a multiple of this fail permanently (dead letters); 0: none"},
    {"work-ms", ER_SET_DURATION, "0", 0, 60000, NULL, "time each handler works before its effect"},
    {"unsafe-sleep", ER_SET_DURATION, "20ms", 0, 60000, NULL, "unsafe handler: pause between effect and ack"},
    {"lease", ER_SET_DURATION, "5s", 3000, 600000, NULL, "workers' lease (timeout = 2/5, grace = 3/5 of it)"},
    {"outage", ER_SET_DURATION, "500ms", 0, 600000, NULL, "time the server stays down after a kill"},
    {"sample", ER_SET_DURATION, "250ms", 100, 60000, NULL, "how often the queue counts are recorded"},
    {"timeout", ER_SET_DURATION, "10m", 1000, 86400000, NULL, "give up (and fail) after this long"},
    {"batch", ER_SET_INT, "1000", 1, 10000, NULL, "jobs per bulk enqueue request"},
    {"server", ER_SET_STRING, NULL, 0, 0, NULL, "use this running server instead of starting one (no server kills)"},
    {"token", ER_SET_STRING, NULL, 0, 0, NULL, "bearer token for --server (admin, to set max_stalled)"},
    {"report", ER_SET_STRING, NULL, 0, 0, NULL, "write the JSON report here"},
    {"plot", ER_SET_STRING, NULL, 0, 0, NULL, "write the SVG plot here [default: the report's name with .svg]"},
    {"dir", ER_SET_STRING, NULL, 0, 0, NULL, "work directory (store, ledger, logs); kept [default: a temporary one, removed on success]"},
};

static const char *usage_line =
    "usage: errand chaos [--jobs N] [--workers W] [--worker-kills K] [--server-kills S] [--seed X]\n"
    "                    [--store sqlite|postgres] [--handler safe|unsafe] [--report FILE] ...\n"
    "Enqueues N jobs, runs W workers whose handler records each execution and applies an effect\n"
    "in a ledger, kills workers and the server on a seeded schedule, then checks: every job\n"
    "completed, every effect applied exactly once, executions >= effects, nothing left active.\n"
    "Exit 0 when every check holds, 1 on a violation, 2 usage. Flags only: ERRAND_*\n"
    "variables and config files are ignored. See docs/chaos.md.";

/* ---- run state ---------------------------------------------------------- */

typedef enum { SRV_NONE, SRV_UP, SRV_DOWN, SRV_STARTING } srv_state;
typedef enum { WK_RUNNING, WK_KILLED, WK_TERMINATING, WK_GONE } wk_state;

typedef struct planned {
    chaos_event_kind kind;
    double at;  /* fraction of the jobs finished */
    int slot;
    bool fired;
} planned;

typedef struct chaos {
    chaos_run run;
    char exe[PATH_MAX];
    char store_url[1024];
    char url[128];
    const char *token;
    const char *pg_ctl, *pg_data;
    int port;
    pid_t server_pid;
    srv_state srv;
    int64_t srv_restart_at, srv_start_deadline;
    off_t srv_log_off;
    pid_t pg_pid;
    pid_t wk_pid[MAX_WORKERS];
    wk_state wk[MAX_WORKERS];
    planned *plan;
    size_t nplan;
    int64_t t0, last_event;
    uint64_t rng;
    errand_client *client;
    long long next_enq;       /* first job not yet acknowledged */
    int64_t enq_retry_at;
    chaos_sample cur;         /* latest poll */
    int64_t next_poll, next_sample;
} chaos;

static volatile sig_atomic_t g_interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) / (double)(1ULL << 53);
}

const char *chaos_event_name(chaos_event_kind k)
{
    static const char *const names[CH_EV_KINDS] = {
        "worker_sigkill", "worker_sigterm", "server_sigkill", "pg_restart",
        "server_up",      "pg_up",          "worker_exit",    "worker_crash"};
    return (unsigned)k < CH_EV_KINDS ? names[k] : "?";
}

static double now_s(const chaos *c)
{
    return (double)(er_mono_ms() - c->t0) / 1000.0;
}

static void add_event(chaos *c, chaos_event_kind kind, int slot, long pid, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void add_event(chaos *c, chaos_event_kind kind, int slot, long pid, const char *fmt, ...)
{
    chaos_run *r = &c->run;
    if (ER_GROW(&r->events, &r->capevents, r->nevents + 1, CHAOS_MAX_RECORDS) < 0)
        return;
    chaos_event *e = &r->events[r->nevents++];
    memset(e, 0, sizeof *e);
    e->t = now_s(c);
    e->kind = kind;
    e->slot = slot;
    e->pid = pid;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
    fprintf(stderr, "chaos: %7.2fs %-15s %s\n", e->t, chaos_event_name(kind), e->detail);
}

/* ---- child processes ---------------------------------------------------- */

/* Starts argv with stdout and stderr appended to log_path; the child dies
 * with us (PDEATHSIG) unless keep_alone. Returns the pid or -1. */
static pid_t spawn(char *const *argv, const char *log_path, bool keep_alone)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    if (!keep_alone)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    if (nul >= 0)
        dup2(nul, 0);
    execv(argv[0], argv);
    _exit(127);
}

static void path_in(const chaos *c, const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", c->run.workdir, name);
}

static int server_spawn(chaos *c)
{
    char listen[64], log[400];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", c->port);
    path_in(c, "server.log", log, sizeof log);
    struct stat sb;
    c->srv_log_off = stat(log, &sb) == 0 ? sb.st_size : 0;
    char *argv[] = {c->exe, "serve", "--listen", listen, "--store", c->store_url,
                    "--log-level", "info", NULL};
    c->server_pid = spawn(argv, log, false);
    if (c->server_pid < 0)
        return -1;
    c->srv = SRV_STARTING;
    c->srv_start_deadline = er_mono_ms() + START_WAIT_MS;
    return 0;
}

/* Looks for the "listening" line the server logged since it was spawned;
 * returns its port, 0 when not there yet. */
static int server_listening(const chaos *c)
{
    char log[400];
    path_in(c, "server.log", log, sizeof log);
    FILE *f = fopen(log, "r");
    if (!f)
        return 0;
    fseeko(f, c->srv_log_off, SEEK_SET);
    char line[2048];
    int port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"listen\":\"");
        if (!p || !strstr(line, "\"msg\":\"listening\""))
            continue;
        const char *colon = strchr(p + 10, '"');
        if (!colon)
            continue;
        const char *q = colon;
        while (q > p + 10 && q[-1] != ':')
            q--;
        long v = strtol(q, NULL, 10);
        port = v > 0 && v < 65536 ? (int)v : 0;
    }
    fclose(f);
    return port;
}

static int worker_spawn(chaos *c, int slot)
{
    char log[400], name[32], conc[16], work[24], unsafe_ms[24], lease[24], perm[24];
    snprintf(name, sizeof name, "worker-%d.log", slot);
    path_in(c, name, log, sizeof log);
    const chaos_params *p = &c->run.p;
    snprintf(conc, sizeof conc, "%d", p->concurrency);
    snprintf(work, sizeof work, "%ld", p->work_ms);
    snprintf(unsafe_ms, sizeof unsafe_ms, "%ld", p->unsafe_sleep_ms);
    snprintf(lease, sizeof lease, "%ld", p->lease_ms);
    snprintf(perm, sizeof perm, "%lld", p->permanent_every);
    char *argv[32] = {c->exe, "chaos", "--worker", "--server", c->url, "--ledger",
                      c->run.ledger_path, "--queue", (char *)p->queue, "--prefix",
                      (char *)p->prefix, "--handler", (char *)p->handler, "--concurrency", conc,
                      "--work-ms", work, "--unsafe-sleep-ms", unsafe_ms, "--lease-ms", lease,
                      "--permanent-every", perm};
    int n = 23;
    if (c->token) {
        argv[n++] = "--token";
        argv[n++] = (char *)c->token;
    }
    argv[n] = NULL;
    c->wk_pid[slot] = spawn(argv, log, false);
    c->wk[slot] = c->wk_pid[slot] > 0 ? WK_RUNNING : WK_GONE;
    return c->wk_pid[slot] > 0 ? 0 : -1;
}

static void pg_restart(chaos *c)
{
    char log[400];
    path_in(c, "pg_ctl.log", log, sizeof log);
    char *root_argv[] = {"/usr/sbin/runuser", "-u", "postgres", "--", (char *)c->pg_ctl, "-D",
                         (char *)c->pg_data, "restart", "-m", "immediate", "-w", "-t", "60", NULL};
    char **argv = geteuid() == 0 ? root_argv : root_argv + 4;
    c->pg_pid = spawn(argv, log, true);
}

static const char *status_text(int st, char *buf, size_t size)
{
    if (WIFEXITED(st))
        snprintf(buf, size, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, size, "signal %d", WTERMSIG(st));
    else
        snprintf(buf, size, "status %d", st);
    return buf;
}

static void reap(chaos *c, bool restart)
{
    int st;
    pid_t pid;
    char sb[32];
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == c->server_pid) {
            c->server_pid = 0;
            if (c->srv == SRV_UP || c->srv == SRV_STARTING) {
                /* not killed by us: a crash, or a failed bind on restart */
                c->run.worker_crashes++;
                add_event(c, CH_EV_WORKER_CRASH, -1, pid, "server exited unexpectedly (%s)",
                          status_text(st, sb, sizeof sb));
                c->srv = SRV_DOWN;
                c->srv_restart_at = er_mono_ms() + 200;
            }
            continue;
        }
        if (pid == c->pg_pid) {
            c->pg_pid = 0;
            add_event(c, CH_EV_PG_UP, -1, pid, "pg_ctl restart ended (%s)",
                      status_text(st, sb, sizeof sb));
            continue;
        }
        for (int s = 0; s < c->run.p.workers; s++) {
            if (c->wk_pid[s] != pid)
                continue;
            c->wk_pid[s] = 0;
            if (c->wk[s] == WK_TERMINATING) {
                if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
                    c->run.term_exit_nonzero++;
                add_event(c, CH_EV_WORKER_EXIT, s, pid, "worker %d (pid %ld) stopped: %s", s,
                          (long)pid, status_text(st, sb, sizeof sb));
            } else if (c->wk[s] == WK_RUNNING) {
                c->run.worker_crashes++;
                add_event(c, CH_EV_WORKER_CRASH, s, pid, "worker %d (pid %ld) exited: %s", s,
                          (long)pid, status_text(st, sb, sizeof sb));
            }
            c->wk[s] = WK_GONE;
            if (restart)
                worker_spawn(c, s);
        }
    }
}

/* ---- polling and producing ---------------------------------------------- */

static long long count_of(json_t *counts, const char *k)
{
    return (long long)json_integer_value(json_object_get(counts, k));
}

static bool poll_counts(chaos *c, chaos_sample *out)
{
    char *text = NULL;
    memset(out, 0, sizeof *out);
    out->t = now_s(c);
    if (errand_queue_get(c->client, c->run.p.queue, &text) != 0)
        return false;
    json_t *root = json_loads(text, 0, NULL);
    errand_free(text);
    json_t *q = json_object_get(root, "queue"); /* liberrand returns the queue object itself */
    json_t *counts = json_object_get(q ? q : root, "counts");
    if (json_is_object(counts)) {
        out->up = true;
        out->completed = count_of(counts, "completed");
        out->waiting = count_of(counts, "waiting");
        out->active = count_of(counts, "active");
        out->scheduled = count_of(counts, "scheduled");
        out->dead = count_of(counts, "dead");
    }
    json_decref(root);
    return out->up;
}

static void add_sample(chaos *c, const chaos_sample *s)
{
    chaos_run *r = &c->run;
    if (ER_GROW(&r->samples, &r->capsamples, r->nsamples + 1, CHAOS_MAX_RECORDS) < 0)
        return;
    r->samples[r->nsamples++] = *s;
}

/* Enqueues the next batch (one bulk request, one transaction); a failure
 * leaves it for a retry, which reports the jobs already stored as
 * duplicates. Returns -1 on a refusal that retrying cannot fix. */
static int produce(chaos *c)
{
    const chaos_params *p = &c->run.p;
    long long first = c->next_enq, n = p->jobs - first;
    if (n <= 0 || er_mono_ms() < c->enq_retry_at)
        return 0;
    if (n > p->batch)
        n = p->batch;
    size_t cap = (size_t)n * (160 + strlen(p->prefix)) + 16, len = 0;
    char *body = malloc(cap);
    if (!body)
        return -1;
    body[len++] = '[';
    for (long long i = first; i < first + n; i++) {
        int w = snprintf(body + len, cap - len,
                         "%s{\"name\":\"chaos\",\"id\":\"%s-%lld\",\"payload\":{\"i\":%lld},"
                         "\"max_attempts\":1000,\"backoff\":{\"type\":\"fixed\",\"delay_ms\":200}}",
                         i > first ? "," : "", p->prefix, i, i);
        if (w < 0 || (size_t)w >= cap - len) {
            free(body);
            return -1;
        }
        len += (size_t)w;
    }
    body[len++] = ']';
    body[len] = '\0';
    char *out = NULL;
    int rc = errand_enqueue_bulk(c->client, p->queue, body, &out);
    free(body);
    if (rc == 0) {
        json_t *root = json_loads(out, 0, NULL);
        c->run.enqueue_duplicates += (long long)json_array_size(json_object_get(root, "duplicates"));
        json_decref(root);
        errand_free(out);
        for (long long i = first; i < first + n; i++)
            c->run.jobs[i].acked = 1;
        c->next_enq = first + n;
        return 0;
    }
    c->run.enqueue_failures++;
    long hs = errand_last_status(c->client);
    if (hs >= 400 && hs < 500 && hs != 408 && hs != 429) {
        fprintf(stderr, "errand chaos: enqueue refused: %s\n", errand_last_error(c->client)->message);
        return -1;
    }
    c->enq_retry_at = er_mono_ms() + 200;
    return 0;
}

/* ---- the chaos schedule ------------------------------------------------- */

static int cmp_planned(const void *a, const void *b)
{
    double x = ((const planned *)a)->at, y = ((const planned *)b)->at;
    return x < y ? -1 : x > y;
}

/* Draws every event's moment (a fraction of the jobs finished, 5%..85%)
 * and target worker from the seed: the same seed gives the same schedule
 * whatever the machine's speed. */
static int make_plan(chaos *c, int pg_restarts)
{
    const chaos_params *p = &c->run.p;
    int counts[4] = {p->worker_kills, p->worker_terms, p->server_kills, pg_restarts};
    static const chaos_event_kind kinds[4] = {CH_EV_WORKER_SIGKILL, CH_EV_WORKER_SIGTERM,
                                              CH_EV_SERVER_SIGKILL, CH_EV_PG_RESTART};
    size_t n = (size_t)counts[0] + (size_t)counts[1] + (size_t)counts[2] + (size_t)counts[3];
    c->plan = calloc(n ? n : 1, sizeof *c->plan);
    if (!c->plan)
        return -1;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < counts[k]; i++) {
            planned *e = &c->plan[c->nplan++];
            e->kind = kinds[k];
            e->at = 0.05 + 0.80 * rng_unit(&c->rng);
            e->slot = (int)(rng_next(&c->rng) % (uint64_t)p->workers);
        }
    qsort(c->plan, c->nplan, sizeof *c->plan, cmp_planned);
    return 0;
}

static bool all_workers_running(const chaos *c)
{
    for (int s = 0; s < c->run.p.workers; s++)
        if (c->wk[s] != WK_RUNNING)
            return false;
    return true;
}

static void kill_server(chaos *c)
{
    pid_t pid = c->server_pid;
    c->srv = SRV_DOWN; /* before the reap, so the exit is not taken for a crash */
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    c->server_pid = 0;
    c->srv_restart_at = er_mono_ms() + c->run.p.outage_ms;
    errand_client_free(c->client); /* drop the dead connection */
    c->client = NULL;
    errand_client_new(c->url, c->token, &c->client);
    if (c->client)
        errand_client_set_timeouts(c->client, 1000, 10000);
    add_event(c, CH_EV_SERVER_SIGKILL, -1, (long)pid, "server (pid %ld) SIGKILLed", (long)pid);
}

static void fire(chaos *c, planned *e)
{
    chaos_run *r = &c->run;
    e->fired = true;
    c->last_event = er_mono_ms();
    if (e->kind == CH_EV_SERVER_SIGKILL) {
        kill_server(c);
        return;
    }
    if (e->kind == CH_EV_PG_RESTART) {
        add_event(c, CH_EV_PG_RESTART, -1, 0, "pg_ctl restart -m immediate");
        pg_restart(c);
        return;
    }
    int s = e->slot;
    for (int k = 0; k < r->p.workers && c->wk[s] != WK_RUNNING; k++)
        s = (s + 1) % r->p.workers;
    pid_t pid = c->wk_pid[s];
    if (e->kind == CH_EV_WORKER_SIGKILL) {
        c->wk[s] = WK_KILLED;
        if (ER_GROW(&r->killed_pids, &r->capkilled, r->nkilled + 1, CHAOS_MAX_RECORDS) == 0)
            r->killed_pids[r->nkilled++] = (long)pid;
        kill(pid, SIGKILL);
        add_event(c, CH_EV_WORKER_SIGKILL, s, (long)pid, "worker %d (pid %ld) SIGKILLed", s,
                  (long)pid);
    } else {
        c->wk[s] = WK_TERMINATING;
        kill(pid, SIGTERM);
        add_event(c, CH_EV_WORKER_SIGTERM, s, (long)pid, "worker %d (pid %ld) SIGTERMed", s,
                  (long)pid);
    }
}

/* Fires the next event when its moment has come and nothing is recovering. */
static void maybe_fire(chaos *c, long long finished, bool jobs_done)
{
    int64_t now = er_mono_ms();
    if (c->srv != SRV_UP && c->srv != SRV_NONE)
        return;
    if (c->pg_pid || !all_workers_running(c) || now - c->last_event < EVENT_GAP_MS)
        return;
    for (size_t i = 0; i < c->nplan; i++) {
        planned *e = &c->plan[i];
        if (e->fired)
            continue;
        /* once every job is done, the events left fire one by one */
        if (jobs_done || (double)finished >= e->at * (double)c->run.p.jobs)
            fire(c, e);
        return;
    }
}

static bool plan_done(const chaos *c)
{
    for (size_t i = 0; i < c->nplan; i++)
        if (!c->plan[i].fired)
            return false;
    return true;
}

/* Restarts a killed server after the outage; notices when it listens. */
static int tend_server(chaos *c)
{
    int64_t now = er_mono_ms();
    if (c->srv == SRV_DOWN && now >= c->srv_restart_at) {
        if (server_spawn(c) < 0)
            return -1;
    } else if (c->srv == SRV_STARTING) {
        int port = server_listening(c);
        if (port) {
            if (c->port == 0) {
                c->port = port;
                snprintf(c->url, sizeof c->url, "http://127.0.0.1:%d", port);
            } else {
                add_event(c, CH_EV_SERVER_UP, -1, (long)c->server_pid,
                          "server (pid %ld) listening again", (long)c->server_pid);
            }
            c->srv = SRV_UP;
        } else if (now > c->srv_start_deadline) {
            fprintf(stderr, "errand chaos: the server did not start within %d s (see %s/server.log)\n",
                    START_WAIT_MS / 1000, c->run.workdir);
            return -1;
        }
    }
    return 0;
}

/* ---- the end ------------------------------------------------------------ */

static void stop_workers(chaos *c)
{
    const chaos_params *p = &c->run.p;
    for (int s = 0; s < p->workers; s++)
        if (c->wk_pid[s] > 0) {
            if (c->wk[s] == WK_RUNNING)
                c->wk[s] = WK_TERMINATING;
            kill(c->wk_pid[s], SIGTERM);
        }
    int64_t deadline = er_mono_ms() + p->lease_ms + 5000;
    for (;;) {
        reap(c, false);
        bool left = false;
        for (int s = 0; s < p->workers; s++)
            left |= c->wk_pid[s] > 0;
        if (!left)
            return;
        if (er_mono_ms() > deadline)
            break;
        sleep_ms(TICK_MS);
    }
    for (int s = 0; s < p->workers; s++)
        if (c->wk_pid[s] > 0) {
            c->run.stop_forced++;
            kill(c->wk_pid[s], SIGKILL);
            waitpid(c->wk_pid[s], NULL, 0);
            c->wk_pid[s] = 0;
        }
}

static uint8_t state_code(const char *s)
{
    static const char *const names[] = {"scheduled", "waiting", "active",
                                        "completed", "dead",    "cancelled"};
    for (int i = 0; i < 6; i++)
        if (strcmp(s, names[i]) == 0)
            return (uint8_t)(CH_ST_SCHEDULED + i);
    return CH_ST_MISSING;
}

/* Pages through the queue's jobs of every state; fills run->jobs[].state. */
static int collect_states(chaos *c)
{
    static const char *const states[] = {"completed", "dead", "waiting",
                                         "active", "scheduled", "cancelled"};
    const chaos_params *p = &c->run.p;
    size_t plen = strlen(p->prefix);
    for (size_t k = 0; k < sizeof states / sizeof states[0]; k++) {
        char *cursor = NULL;
        for (;;) {
            char *text = NULL;
            int rc = -1;
            for (int attempt = 0; attempt < 20 && rc != 0; attempt++) {
                rc = errand_queue_jobs(c->client, p->queue, states[k], 1000, cursor, &text);
                if (rc != 0)
                    sleep_ms(500);
            }
            free(cursor);
            cursor = NULL;
            if (rc != 0) {
                fprintf(stderr, "errand chaos: listing %s jobs failed: %s\n", states[k],
                        errand_last_error(c->client)->message);
                return -1;
            }
            json_t *root = json_loads(text, 0, NULL);
            errand_free(text);
            json_t *jobs = json_object_get(root, "jobs"), *j;
            size_t i;
            json_array_foreach(jobs, i, j)
            {
                const char *id = json_string_value(json_object_get(j, "id"));
                if (!id || strncmp(id, p->prefix, plen) != 0 || id[plen] != '-')
                    continue;
                int64_t idx;
                if (er_cli_parse_int(id + plen + 1, 0, p->jobs - 1, &idx) < 0)
                    continue;
                chaos_job *cj = &c->run.jobs[idx];
                cj->state = state_code(states[k]);
                const char *cls = json_string_value(
                    json_object_get(json_object_get(j, "last_error"), "class"));
                cj->dead_permanent = cj->state == CH_ST_DEAD && cls && strcmp(cls, "permanent") == 0;
            }
            const char *next = json_string_value(json_object_get(root, "next_cursor"));
            cursor = next && *next ? strdup(next) : NULL;
            json_decref(root);
            if (!cursor)
                break;
        }
    }
    return 0;
}

/* ---- setup and the main loop -------------------------------------------- */

static int parse(chaos *c, er_settings *st, int argc, char **argv, int *pg_restarts)
{
    char *noenv[] = {NULL}; /* flags only: a stray ERRAND_SERVER must not redirect a chaos run */
    er_error err = {0};
    if (er_settings_init(st, chaos_table, sizeof chaos_table / sizeof chaos_table[0], &err) < 0) {
        fprintf(stderr, "errand chaos: %s\n", err.message);
        return ER_EXIT_USAGE;
    }
    int rc = er_settings_load(st, argc, argv, noenv, stdout, &err);
    if (rc == 1) {
        er_settings_help_flags(st, usage_line, stdout);
        return -1;
    }
    if (rc < 0) {
        fprintf(stderr, "errand chaos: %s (see 'errand chaos --help')\n", err.message);
        return ER_EXIT_USAGE;
    }
#define NUM(name) (er_settings_get(st, name)->num)
#define TEXT(name) (er_settings_get(st, name)->text)
    chaos_params *p = &c->run.p;
    p->jobs = NUM("jobs");
    p->workers = (int)NUM("workers");
    p->concurrency = (int)NUM("concurrency");
    p->worker_kills = (int)NUM("worker-kills");
    p->worker_terms = (int)NUM("worker-terms");
    p->server_kills = (int)NUM("server-kills");
    p->seed = (uint64_t)NUM("seed");
    p->store = TEXT("store");
    p->handler = TEXT("handler");
    p->queue = TEXT("queue");
    p->prefix = TEXT("prefix");
    p->permanent_every = NUM("permanent-every");
    p->work_ms = (long)NUM("work-ms");
    p->unsafe_sleep_ms = (long)NUM("unsafe-sleep");
    p->lease_ms = (long)NUM("lease");
    p->outage_ms = (long)NUM("outage");
    p->timeout_s = (long)(NUM("timeout") / 1000);
    p->batch = (int)NUM("batch");
    p->sample_ms = (long)NUM("sample");
    p->server_url = TEXT("server");
    p->report_path = TEXT("report");
    p->plot_path = TEXT("plot");
    c->token = TEXT("token");
    c->pg_ctl = TEXT("pg-ctl");
    c->pg_data = TEXT("pg-ctl-data");
    *pg_restarts = (int)NUM("pg-restarts");
    if (*pg_restarts < 0)
        *pg_restarts = c->pg_data ? 1 : 0;
    p->pg_restarts = *pg_restarts;
    for (const char *s = p->prefix; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '.'))
            return er_cli_usage_error("errand chaos", "--prefix may hold only A-Z a-z 0-9 _ .");
    if (!*p->prefix || strlen(p->prefix) > 100)
        return er_cli_usage_error("errand chaos", "--prefix must be 1..100 characters");
    if (p->server_url && p->server_kills > 0)
        return er_cli_usage_error("errand chaos",
                                  "--server-kills needs a server of our own (drop --server or "
                                  "give --server-kills 0)");
    if (*pg_restarts > 0 && !c->pg_data)
        return er_cli_usage_error("errand chaos", "--pg-restarts needs --pg-ctl-data DIR");
    if (!p->server_url && strcmp(p->store, "postgres") == 0 && !TEXT("pg-url"))
        return er_cli_usage_error("errand chaos", "--store postgres needs --pg-url URL");
    if (!p->server_url && strcmp(p->store, "postgres") == 0) {
        const char *u = TEXT("pg-url");
        snprintf(c->store_url, sizeof c->store_url, "%s%cschema=chaos_%ld_%lld", u,
                 strchr(u, '?') ? '&' : '?', (long)getpid(), (long long)time(NULL));
    }
#undef NUM
#undef TEXT
    return 0;
}

static int setup_dir(chaos *c, const char *dir)
{
    chaos_run *r = &c->run;
    if (dir) {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "errand chaos: cannot create %s: %s\n", dir, strerror(errno));
            return -1;
        }
        snprintf(r->workdir, sizeof r->workdir, "%s", dir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(r->workdir, sizeof r->workdir, "%s/errand-chaos-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(r->workdir)) {
            fprintf(stderr, "errand chaos: mkdtemp: %s\n", strerror(errno));
            return -1;
        }
    }
    snprintf(r->ledger_path, sizeof r->ledger_path, "%s/ledger.db", r->workdir);
    char eb[400];
    if (chaos_ledger_create(r->ledger_path, eb, sizeof eb) < 0) {
        fprintf(stderr, "errand chaos: %s\n", eb);
        return -1;
    }
    if (!c->store_url[0])
        snprintf(c->store_url, sizeof c->store_url, "sqlite:%s/errand.db", r->workdir);
    return 0;
}

/* Runs until every job is finished and every event fired, or the timeout. */
static int main_loop(chaos *c)
{
    const chaos_params *p = &c->run.p;
    int64_t deadline = c->t0 + (int64_t)p->timeout_s * 1000;
    for (;;) {
        if (g_interrupted) {
            c->run.interrupted = true;
            return -1;
        }
        int64_t now = er_mono_ms();
        if (now > deadline) {
            c->run.timed_out = true;
            fprintf(stderr, "errand chaos: timed out after %ld s\n", p->timeout_s);
            return 0;
        }
        reap(c, true);
        if (tend_server(c) < 0)
            return -1;
        if (c->srv == SRV_UP || c->srv == SRV_NONE) {
            if (produce(c) < 0)
                return -1;
        }
        if (now >= c->next_poll) {
            c->next_poll = now + POLL_MS;
            chaos_sample s;
            if (c->srv == SRV_UP || c->srv == SRV_NONE)
                poll_counts(c, &s);
            else
                memset(&s, 0, sizeof s), s.t = now_s(c);
            if (s.up)
                c->cur = s;
            if (now >= c->next_sample) {
                c->next_sample += p->sample_ms;
                add_sample(c, &s);
            }
            bool produced = c->next_enq >= p->jobs;
            long long finished = c->cur.completed + c->cur.dead;
            bool jobs_done = produced && s.up && finished >= p->jobs && s.waiting == 0 &&
                             s.active == 0 && s.scheduled == 0;
            maybe_fire(c, finished, jobs_done);
            if (jobs_done && plan_done(c) && c->pg_pid == 0 &&
                (c->srv == SRV_UP || c->srv == SRV_NONE) && all_workers_running(c))
                return 0;
        }
        sleep_ms(TICK_MS);
    }
}

static void cleanup_dir(const char *dir)
{
    static const char *const names[] = {"errand.db", "errand.db-wal", "errand.db-shm",
                                        "ledger.db", "ledger.db-wal", "ledger.db-shm",
                                        "server.log", "pg_ctl.log"};
    char path[400];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    for (int s = 0; s < MAX_WORKERS; s++) {
        snprintf(path, sizeof path, "%s/worker-%d.log", dir, s);
        unlink(path);
    }
    rmdir(dir);
}

int er_cli_chaos(int argc, char **argv)
{
    if (argc > 0 && strcmp(argv[0], "--worker") == 0)
        return chaos_worker_main(argc - 1, argv + 1);
    chaos *c = calloc(1, sizeof *c);
    if (!c)
        return 1;
    er_settings st = {0};
    chaos_run *r = &c->run;
    const chaos_params *p = &r->p;
    int pg_restarts = 0, exit_code = ER_EXIT_USAGE;
    int rc = parse(c, &st, argc, argv, &pg_restarts);
    if (rc != 0) {
        exit_code = rc < 0 ? ER_EXIT_OK : rc;
        goto out_settings;
    }
    exit_code = 1;
    ssize_t n = readlink("/proc/self/exe", c->exe, sizeof c->exe - 1);
    if (n <= 0) {
        fprintf(stderr, "errand chaos: cannot find my own binary: %s\n", strerror(errno));
        goto out_settings;
    }
    c->exe[n] = '\0';
    r->jobs = calloc((size_t)p->jobs, sizeof *r->jobs);
    if (!r->jobs || setup_dir(c, er_settings_get(&st, "dir")->text) < 0)
        goto out_settings;
    c->rng = p->seed;
    if (make_plan(c, pg_restarts) < 0)
        goto out_settings;

    struct sigaction sa = {0};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    c->t0 = er_mono_ms();
    if (p->server_url) {
        snprintf(c->url, sizeof c->url, "%s", p->server_url);
        c->srv = SRV_NONE;
    } else {
        if (server_spawn(c) < 0)
            goto out_procs;
        while (c->srv == SRV_STARTING) {
            reap(c, false);
            if (c->srv != SRV_STARTING || tend_server(c) < 0 || g_interrupted) {
                fprintf(stderr, "errand chaos: the server did not start (see %s/server.log)\n",
                        r->workdir);
                goto out_procs;
            }
            sleep_ms(TICK_MS);
        }
    }
    if (errand_client_new(c->url, c->token, &c->client) != 0) {
        fprintf(stderr, "errand chaos: bad server URL '%s'\n", c->url);
        goto out_procs;
    }
    errand_client_set_timeouts(c->client, 1000, 10000);
    /* kills stall jobs; they must not die of it (max_stalled 3 by default) */
    char *out = NULL;
    if (errand_queue_settings(c->client, p->queue, "{\"max_stalled\":1000}", &out) != 0)
        fprintf(stderr, "errand chaos: warning: cannot raise max_stalled of queue %s: %s\n",
                p->queue, errand_last_error(c->client)->message);
    errand_free(out);
    fprintf(stderr, "chaos: %lld jobs, %d workers x %d, handler %s, store %s, seed %llu, dir %s\n",
            p->jobs, p->workers, p->concurrency, p->handler,
            p->server_url ? p->server_url : p->store, (unsigned long long)p->seed, r->workdir);
    c->t0 = er_mono_ms();
    c->next_poll = c->next_sample = c->t0;
    c->last_event = c->t0;
    for (int s = 0; s < p->workers; s++)
        if (worker_spawn(c, s) < 0) {
            fprintf(stderr, "errand chaos: cannot start worker %d: %s\n", s, strerror(errno));
            goto out_procs;
        }
    if (main_loop(c) < 0)
        goto out_procs;
    stop_workers(c);
    r->duration_s = now_s(c);
    /* the server may be restarting when the run timed out */
    for (int i = 0; i < 300 && (c->srv == SRV_DOWN || c->srv == SRV_STARTING); i++) {
        if (tend_server(c) < 0)
            break;
        sleep_ms(100);
    }
    for (int i = 0; i < 50 && !(r->final_ok = poll_counts(c, &r->final)); i++)
        sleep_ms(200);
    if (collect_states(c) < 0)
        goto out_procs;
    exit_code = chaos_report_finish(r);

out_procs:
    for (int s = 0; s < p->workers; s++)
        if (c->wk_pid[s] > 0) {
            kill(c->wk_pid[s], SIGKILL);
            waitpid(c->wk_pid[s], NULL, 0);
        }
    if (c->server_pid > 0) {
        kill(c->server_pid, SIGTERM);
        int stt;
        for (int i = 0; i < 100 && waitpid(c->server_pid, &stt, WNOHANG) == 0; i++)
            sleep_ms(100);
        kill(c->server_pid, SIGKILL);
        waitpid(c->server_pid, NULL, 0);
    }
    if (c->pg_pid > 0)
        waitpid(c->pg_pid, NULL, 0);
    errand_client_free(c->client);
    if (r->interrupted)
        exit_code = 130;
    if (r->workdir[0]) {
        if (exit_code == 0 && !er_settings_get(&st, "dir")->text)
            cleanup_dir(r->workdir);
        else if (exit_code != 0)
            fprintf(stderr, "chaos: logs, store and ledger kept in %s\n", r->workdir);
    }
out_settings:
    free(r->events);
    free(r->samples);
    free(r->jobs);
    free(r->killed_pids);
    free(c->plan);
    er_settings_fini(&st);
    free(c);
    return exit_code;
}
