/* SPDX-License-Identifier: MIT
 *
 * `errand work --queue Q -- CMD [ARGS...]`: a worker whose handler runs CMD
 * once per job through liberrand's worker runtime. The payload goes to the
 * command's stdin as JSON, job facts to ERRAND_* environment variables, a
 * control line may come back on fd 3, stdout (bounded) becomes the result,
 * and the exit status picks the outcome (docs/workers.md). Each command
 * runs in its own process group, so a timeout kills all of it and a
 * terminal's Ctrl-C reaches only errand work.
 */
#include "cli/cli.h"
#include "cli/remote.h"
#include "cli/settings.h"
#include "core/job.h"
#include "util/buf.h"
#include "util/clock.h"

#include <errand/errand.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* liberrand cuts worker delays to the bound the server takes (worker_job.c) */
_Static_assert(ERRAND_DELAY_MAX_MS == ER_DELAY_MAX_MS, "liberrand's delay bound is the server's");

extern char **environ;

#define CTL_MAX 65536 /* bytes of fd-3 output read */
#define EX_DATAERR 65
#define EX_TEMPFAIL 75

typedef struct work {
    char **argv;        /* the command (borrowed from main's argv) */
    int64_t kill_after; /* SIGTERM -> SIGKILL */
    size_t max_output;
    int log_level;
} work;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_log_level = ERRAND_LOG_INFO;

static void log_line(int level, const char *line, void *user)
{
    (void)user;
    if (level < g_log_level)
        return;
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}

/* Logs {"ts","level","msg","job_id",...extra} from this file. */
/* Shutdown by signal: SIGTERM (however often) and a first SIGINT drain;
 * a second SIGINT or SIGQUIT stops now: commands killed, jobs released. */
static atomic_int g_stopping, g_now, g_sigints; /* lock-free: async-signal-safe */

static void wlog(int level, const errand_job *job, const char *msg, const char *key,
                 const char *val)
{
    if (level < g_log_level)
        return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char t[32];
    er_time_format(er_now_ms(), t);
    json_t *o = json_pack("{s:s,s:s,s:s}", "ts", t, "level", names[level & 3], "msg", msg);
    if (!o)
        return;
    if (job) {
        json_object_set_new(o, "job_id", json_string(errand_job_id(job)));
        json_object_set_new(o, "queue", json_string(errand_job_queue(job)));
    }
    if (key && val)
        json_object_set_new(o, key, json_string(val));
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (text)
        log_line(level, text, NULL);
    free(text);
}

/* ---- child environment -------------------------------------------------- */

static const char *const job_vars[] = {"ERRAND_JOB_ID", "ERRAND_JOB_NAME", "ERRAND_QUEUE",
                                       "ERRAND_ATTEMPT", "ERRAND_IDEMPOTENCY_KEY",
                                       "ERRAND_TRACE_ID", "ERRAND_TOKEN"};

static bool is_job_var(const char *e)
{
    for (size_t i = 0; i < sizeof job_vars / sizeof job_vars[0]; i++) {
        size_t n = strlen(job_vars[i]);
        if (strncmp(e, job_vars[i], n) == 0 && e[n] == '=')
            return true;
    }
    return false;
}

/* environ without our variables (and without ERRAND_TOKEN: the command
 * does not need the server's credentials), plus the job's. Owned strings
 * are the last 6 entries; free with free_env. */
static char **child_env(const errand_job *job)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 7, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_job_var(environ[i]))
            env[k++] = environ[i];
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%d", errand_job_attempt(job));
    const char *vals[6] = {errand_job_id(job), errand_job_name(job), errand_job_queue(job),
                           attempt, errand_job_idempotency_key(job), errand_job_trace_id(job)};
    for (int i = 0; i < 6; i++) {
        size_t len = strlen(job_vars[i]) + strlen(vals[i]) + 2;
        char *s = malloc(len);
        if (!s) {
            for (int m = 0; m < i; m++)
                free(env[k - (size_t)i + (size_t)m]);
            free(env);
            return NULL;
        }
        snprintf(s, len, "%s=%s", job_vars[i], vals[i]);
        env[k++] = s;
    }
    env[k] = NULL;
    return env;
}

static void free_env(char **env)
{
    if (!env)
        return;
    size_t n = 0;
    while (env[n])
        n++;
    for (size_t i = n - 6; i < n; i++)
        free(env[i]);
    free(env);
}

/* ---- one run of the command --------------------------------------------- */

/* What the command wrote to one pipe, up to b.max bytes. */
typedef struct capture {
    er_buf b;
    bool truncated; /* bytes past b.max, or past a failed allocation, were dropped */
} capture;

/* Reads what is available from fd into c (bounded); returns false at EOF or error. */
static bool drain(int fd, capture *c)
{
    char tmp[16384];
    for (;;) {
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return errno == EAGAIN;
        if (r == 0)
            return false;
        size_t take = (size_t)r, room = c->b.max - c->b.len;
        if (take > room) {
            take = room;
            c->truncated = true;
        }
        /* out of memory: the rest is dropped too, so there is no hole */
        if (take && er_buf_add(&c->b, tmp, take) < 0)
            c->truncated = true;
    }
}

/* A pipe whose ends are moved to fds >= 10, close-on-exec. */
static int high_pipe(int fds[2])
{
    int raw[2];
    if (pipe2(raw, O_CLOEXEC) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        fds[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
        close(raw[i]);
    }
    if (fds[0] < 0 || fds[1] < 0) {
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        return -1;
    }
    return 0;
}

typedef struct run_result {
    int spawn_errno;   /* posix_spawnp failed with it */
    int status;        /* waitpid status */
    bool timed_out, stopped, killed;
    capture out, ctl;
} run_result;

static void run_command(const work *wk, errand_job *job, run_result *rr)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, ctl[2] = {-1, -1};
    char **env = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    bool fa_ok = false, at_ok = false;
    pid_t pid = -1;
    if (high_pipe(in) || high_pipe(out) || high_pipe(ctl) || !(env = child_env(job))) {
        rr->spawn_errno = errno ? errno : ENOMEM;
        goto out;
    }
    fa_ok = posix_spawn_file_actions_init(&fa) == 0;
    at_ok = posix_spawnattr_init(&at) == 0;
    if (!fa_ok || !at_ok) {
        rr->spawn_errno = ENOMEM;
        goto out;
    }
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, ctl[1], 3);
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGQUIT);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    int e = posix_spawnp(&pid, wk->argv[0], &fa, &at, wk->argv, env);
    if (e != 0) {
        rr->spawn_errno = e;
        pid = -1;
        goto out;
    }
    close(in[0]), close(out[1]), close(ctl[1]);
    in[0] = out[1] = ctl[1] = -1;
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(ctl[0], F_SETFL, O_NONBLOCK);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

    const char *payload = errand_job_payload(job);
    size_t plen = payload ? strlen(payload) : 0, poff = 0;
    if (plen == 0) {
        close(in[1]);
        in[1] = -1;
    }
    int64_t kill_at = 0;
    bool exited = false;
    while (!exited) {
        struct pollfd p[4];
        int np = 0, iin = -1, iout = -1, ictl = -1, ipid = -1;
        if (in[1] >= 0)
            p[iin = np++] = (struct pollfd){.fd = in[1], .events = POLLOUT};
        if (out[0] >= 0)
            p[iout = np++] = (struct pollfd){.fd = out[0], .events = POLLIN};
        if (ctl[0] >= 0)
            p[ictl = np++] = (struct pollfd){.fd = ctl[0], .events = POLLIN};
        if (pidfd >= 0)
            p[ipid = np++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
        int tick = pidfd >= 0 ? 100 : 10;
        poll(p, (nfds_t)np, tick);
        if (iin >= 0 && p[iin].revents) {
            ssize_t wr = write(in[1], payload + poff, plen - poff);
            if (wr > 0)
                poff += (size_t)wr;
            if ((wr < 0 && errno != EAGAIN && errno != EINTR) || poff >= plen) {
                close(in[1]); /* EPIPE: the command did not read its input */
                in[1] = -1;
            }
        }
        if (iout >= 0 && p[iout].revents && !drain(out[0], &rr->out)) {
            close(out[0]);
            out[0] = -1;
        }
        if (ictl >= 0 && p[ictl].revents && !drain(ctl[0], &rr->ctl)) {
            close(ctl[0]);
            ctl[0] = -1;
        }
        if ((ipid < 0 || p[ipid].revents) && waitpid(pid, &rr->status, WNOHANG) == pid) {
            exited = true;
            break;
        }
        /* Timeout, lost lease, or the grace period over: stop the command,
         * at once when the shutdown is immediate. */
        int stop = errand_job_should_stop(job);
        if (atomic_load(&g_now) && stop == ERRAND_STOP_SHUTDOWN && !rr->killed) {
            kill(-pid, SIGKILL);
            rr->stopped = rr->killed = true;
            kill_at = kill_at ? kill_at : er_mono_ms();
        } else if (!kill_at && (stop || errand_job_remaining_ms(job) <= 0)) {
            rr->timed_out = stop == 0 || stop == ERRAND_STOP_TIMEOUT;
            rr->stopped = true;
            kill(-pid, SIGTERM);
            kill_at = er_mono_ms() + wk->kill_after;
        } else if (kill_at && !rr->killed && er_mono_ms() >= kill_at) {
            kill(-pid, SIGKILL);
            rr->killed = true;
        }
    }
    /* The command's own children may still hold the pipes: take what is there. */
    if (out[0] >= 0)
        drain(out[0], &rr->out);
    if (ctl[0] >= 0)
        drain(ctl[0], &rr->ctl);
    if (kill_at)
        kill(-pid, SIGKILL); /* what is left of its process group */
    if (pidfd >= 0)
        close(pidfd);
out:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (ctl[i] >= 0)
            close(ctl[i]);
    }
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (at_ok)
        posix_spawnattr_destroy(&at);
    free_env(env);
}

/* ---- outcome ------------------------------------------------------------ */

/* An HTTP status the command reported on fd 3, through liberrand's
 * classifier (errand_error_from_http): sets the outcome and returns 1, or
 * returns 2 for a 2xx (complete as an exit 0 would), -1 when malformed. */
static int http_outcome(errand_job *job, const json_t *st, const json_t *ra)
{
    if (!json_is_integer(st) || json_integer_value(st) < 0 || json_integer_value(st) > 999 ||
        (ra && !json_is_string(ra)))
        return -1;
    long status = (long)json_integer_value(st);
    int cls;
    long long delay;
    if (errand_error_from_http(status, ra ? json_string_value(ra) : NULL, er_now_ms(), &cls,
                               &delay) < 0)
        return -1;
    char msg[64];
    snprintf(msg, sizeof msg, "HTTP status %ld", status);
    switch (cls) {
    case ERRAND_CLASS_SUCCESS:
        return 2;
    case ERRAND_CLASS_PERMANENT:
        return errand_job_fail_permanent(job, msg) == 0 ? 1 : -1;
    case ERRAND_CLASS_RETRY_LATER:
        return errand_job_retry_later(job, (long)delay) == 0 ? 1 : -1;
    case ERRAND_CLASS_THROTTLED:
        return errand_job_throttled(job, (long)delay) == 0 ? 1 : -1;
    default:
        return errand_job_fail_transient(job, msg) == 0 ? 1 : -1;
    }
}

/* Reads the fd-3 control line. Returns 1 when it set the outcome
 * (retry_later, throttled, or an HTTP status's class), 2 for an HTTP 2xx,
 * 0 when there was none, -1 for garbage (warned). */
static int control_line(errand_job *job, const capture *ctl)
{
    size_t len = ctl->b.len;
    if (len == 0)
        return 0;
    json_error_t jerr;
    json_t *o = ctl->truncated ? NULL : json_loadb(ctl->b.data, len, 0, &jerr);
    json_t *e = json_object_get(o, "errand");
    json_t *rl = json_object_get(e, "retry_later_ms");
    json_t *th = json_object_get(e, "throttled_ms");
    json_t *st = json_object_get(e, "http_status");
    json_t *ra = json_object_get(e, "retry_after");
    int rc = -1;
    if (json_is_object(e) && json_object_size(e) == 1 && json_integer_value(rl) >= 0 &&
        json_is_integer(rl)) {
        rc = errand_job_retry_later(job, (long)json_integer_value(rl)) == 0 ? 1 : -1;
    } else if (json_is_object(e) && json_object_size(e) == 1 && json_is_integer(th) &&
               json_integer_value(th) >= 0) {
        rc = errand_job_throttled(job, (long)json_integer_value(th)) == 0 ? 1 : -1;
    } else if (json_is_object(e) && st && json_object_size(e) == 1u + (ra != NULL)) {
        rc = http_outcome(job, st, ra);
    }
    if (rc < 0) {
        char shown[128];
        snprintf(shown, sizeof shown, "%.*s", (int)(len < 100 ? len : 100), ctl->b.data);
        wlog(ERRAND_LOG_WARN, job,
             "ignoring fd 3: expected one line {\"errand\":{\"retry_later_ms\":N}}, "
             "{\"errand\":{\"throttled_ms\":N}} or {\"errand\":{\"http_status\":N, "
             "\"retry_after\":\"...\"}}; using the exit status",
             "fd3", shown);
    }
    json_decref(o);
    return rc;
}

/* Whether a command that died by a signal was killed by the shutdown. A
 * group kill reaches the command and the worker at once, and the command's
 * exit may be seen first: a SIGTERM'd command waits up to 250 ms for the
 * worker's own signal. */
static bool shutting_down(const run_result *rr)
{
    if (atomic_load(&g_stopping))
        return true;
    if (!WIFSIGNALED(rr->status) || WTERMSIG(rr->status) != SIGTERM)
        return false;
    for (int i = 0; i < 25 && !atomic_load(&g_stopping); i++)
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    return atomic_load(&g_stopping);
}

static int handle(errand_job *job, void *user)
{
    const work *wk = user;
    run_result rr = {0};
    er_buf_init(&rr.out.b, wk->max_output);
    er_buf_init(&rr.ctl.b, CTL_MAX);
    run_command(wk, job, &rr);
    char msg[300];
    int ctl = 0;
    if (rr.spawn_errno) {
        if (rr.spawn_errno == ENOENT || rr.spawn_errno == EACCES || rr.spawn_errno == ENOEXEC) {
            snprintf(msg, sizeof msg, "%s: %s", wk->argv[0],
                     rr.spawn_errno == ENOENT ? "command not found" : strerror(rr.spawn_errno));
            errand_job_fail_permanent(job, msg);
        } else {
            snprintf(msg, sizeof msg, "cannot start %s: %s", wk->argv[0],
                     strerror(rr.spawn_errno));
            errand_job_fail_transient(job, msg);
        }
    } else if (rr.timed_out) {
        snprintf(msg, sizeof msg, "timed out: sent SIGTERM%s",
                 rr.killed ? ", then SIGKILL" : "");
        errand_job_fail_transient(job, msg);
    } else if (rr.stopped) {
        /* Lease lost or released at shutdown: the runtime reports nothing. */
    } else if ((ctl = control_line(job, &rr.ctl)) == 1) {
        /* retry_later / throttled / an HTTP status's class, whatever the exit status */
    } else if (ctl == 2 || (WIFEXITED(rr.status) && WEXITSTATUS(rr.status) == 0)) {
        const char *result = NULL;
        if (rr.out.b.len && !rr.out.truncated) {
            json_t *v = json_loadb(rr.out.b.data, rr.out.b.len, JSON_DECODE_ANY, NULL);
            if (v)
                result = rr.out.b.data;
            json_decref(v);
        } else if (rr.out.truncated) {
            wlog(ERRAND_LOG_WARN, job, "stdout over the limit; completing without a result",
                 NULL, NULL);
        }
        errand_job_complete(job, result);
    } else if (WIFEXITED(rr.status)) {
        int st = WEXITSTATUS(rr.status);
        snprintf(msg, sizeof msg, "%s exited with status %d%s", wk->argv[0], st,
                 st == EX_TEMPFAIL ? " (EX_TEMPFAIL)" : st == EX_DATAERR ? " (EX_DATAERR)" : "");
        if (st == EX_DATAERR)
            errand_job_fail_permanent(job, msg);
        else
            errand_job_fail_transient(job, msg);
    } else if (shutting_down(&rr)) {
        /* Killed by the shutdown (systemd and timeout signal the whole
         * group): the work was not done, so the attempt does not count. */
        wlog(ERRAND_LOG_WARN, job, "command killed during shutdown; job released", NULL, NULL);
        errand_job_release(job);
    } else {
        snprintf(msg, sizeof msg, "%s killed by signal %d", wk->argv[0],
                 WIFSIGNALED(rr.status) ? WTERMSIG(rr.status) : 0);
        errand_job_fail_transient(job, msg);
    }
    er_buf_fini(&rr.out.b);
    er_buf_fini(&rr.ctl.b);
    return 0;
}

/* ---- command line ------------------------------------------------------- */

/* --queue-weight QUEUE=N into weights[i] for each --queue (1 when not
 * named); -1 with a message on stderr for a bad one. */
static int queue_weights(const er_setting_value *q, const er_setting_value *qw, int *weights)
{
    if (q->nlist > 16) {
        fprintf(stderr, "errand work: at most 16 queues (got %zu)\n", q->nlist);
        return -1;
    }
    for (size_t i = 0; i < q->nlist && i < 16; i++)
        weights[i] = 1;
    for (size_t k = 0; k < qw->nlist; k++) {
        const char *v = qw->list[k], *eq = strchr(v, '=');
        char *end = NULL;
        long n = eq ? strtol(eq + 1, &end, 10) : 0;
        size_t i = 0;
        while (eq && i < q->nlist && !(strlen(q->list[i]) == (size_t)(eq - v) &&
                                       strncmp(q->list[i], v, (size_t)(eq - v)) == 0))
            i++;
        if (!eq || !end || *end || eq[1] == '\0' || n < 1 || n > 1000 || i >= q->nlist) {
            fprintf(stderr,
                    "errand work: --queue-weight %s: give QUEUE=N, N 1..1000, for a queue "
                    "named by --queue\n",
                    v);
            return -1;
        }
        weights[i] = (int)n;
    }
    return 0;
}

static const er_setting work_table[] = {
    {"server", ER_SET_STRING, "http://127.0.0.1:7400", 0, 0, NULL, "server URL"},
    {"token", ER_SET_STRING, NULL, 0, 0, NULL, "bearer token (a worker or admin token)"},
    {"queue", ER_SET_LIST, NULL, 0, 0, NULL, "queue to work on, repeatable, tried in order"},
    {"queue-weight", ER_SET_LIST, NULL, 0, 0, NULL, "QUEUE=N (1..1000), repeatable: each fetch a weighted mix of the queues instead of their order (unnamed queues weigh 1)"},
    {"concurrency", ER_SET_INT, "1", 1, 1000, NULL, "jobs run at once"},
    {"prefetch", ER_SET_INT, "auto", 0, 10000, "auto=-1", "jobs leased ahead of free slots, 0..10000, or auto: enough for two fetch round trips of the measured run time, started within a quarter of the lease (see docs/workers.md, Prefetch)"},
    {"timeout", ER_SET_DURATION, "30s", 1, 86400000, NULL, "longest run of one job (the job's own timeout_ms if shorter)"},
    {"grace", ER_SET_DURATION, "45s", 1, 86400000, NULL, "on SIGTERM/SIGINT, how long running jobs may finish (SIGINT twice or SIGQUIT: none)"},
    {"lease", ER_SET_DURATION, "60s", 1000, 86400000, NULL, "lease asked for and renewed every lease/3"},
    {"kill-after", ER_SET_DURATION, "5s", 0, 3600000, NULL, "SIGKILL this long after the timeout's SIGTERM"},
    {"max-started", ER_SET_INT, "0", 0, 100000, NULL, "retry-later rounds before the job fails permanently (0: the queue's setting)"},
    {"max-output", ER_SET_SIZE, "1m", 0, 16 << 20, NULL, "stdout kept as the result"},
    {"poll-wait", ER_SET_DURATION, "2s", 100, 60000, NULL, "long-poll of an idle fetch"},
    {"worker-id", ER_SET_STRING, NULL, 0, 0, NULL, "worker id shown as lease owner [default: HOST-PID]"},
    {"log-level", ER_SET_ENUM, "info", 0, 0, "debug|info|warn|error", "log level of the JSON lines on stderr"},
};

const er_setting *er_cli_work_table(size_t *n)
{
    *n = sizeof work_table / sizeof work_table[0];
    return work_table;
}

static const char *usage_line =
    "usage: errand work --queue Q [--queue Q2 ...] [--concurrency N] [--timeout D] [--grace D] "
    "[--lease D] -- CMD [ARGS...]\n"
    "Runs CMD once per job: payload JSON on stdin, ERRAND_JOB_ID, ERRAND_JOB_NAME, ERRAND_QUEUE,\n"
    "ERRAND_ATTEMPT, ERRAND_IDEMPOTENCY_KEY, ERRAND_TRACE_ID in the environment. Exit 0 completes\n"
    "(JSON stdout is the result), 75 fails transiently, 65 permanently, others transiently; one line\n"
    "{\"errand\":{\"retry_later_ms\":N}} or {\"errand\":{\"throttled_ms\":N}} on fd 3 asks for those.\n"
    "Durations: 500ms, 30s, 5m, 1h. See docs/workers.md.";

static errand_worker *g_worker;

static void on_signal(int sig)
{
    atomic_store(&g_stopping, 1);
    if (sig == SIGQUIT || (sig == SIGINT && atomic_fetch_add(&g_sigints, 1) > 0)) {
        atomic_store(&g_now, 1);
        errand_worker_stop_now(g_worker);
    } else {
        errand_worker_stop(g_worker);
    }
}

int er_cli_work(int argc, char **argv)
{
    int dash = -1;
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            dash = i;
            break;
        }
    er_settings st;
    er_error err = {0};
    if (er_settings_init(&st, work_table, sizeof work_table / sizeof work_table[0], &err) < 0) {
        fprintf(stderr, "errand work: %s\n", err.message);
        return ER_EXIT_USAGE;
    }
    int rc = er_settings_load(&st, dash < 0 ? argc : dash, argv, environ, stdout, &err);
    if (rc == 1) {
        er_settings_help(&st, usage_line, stdout);
        er_settings_fini(&st);
        return ER_EXIT_OK;
    }
    int exit_code = ER_EXIT_USAGE;
    if (rc < 0) {
        fprintf(stderr, "errand work: %s (see 'errand work --help')\n", err.message);
        goto done;
    }
    if (dash < 0 || dash + 1 >= argc) {
        fprintf(stderr, "errand work: give the command after '--' (see 'errand work --help')\n");
        goto done;
    }
    const er_setting_value *q = er_settings_get(&st, "queue");
    if (q->nlist == 0) {
        fprintf(stderr, "errand work: --queue is required (see 'errand work --help')\n");
        goto done;
    }
    const char *lvl = er_settings_get(&st, "log-level")->text;
    g_log_level = strcmp(lvl, "debug") == 0 ? ERRAND_LOG_DEBUG
                  : strcmp(lvl, "warn") == 0 ? ERRAND_LOG_WARN
                  : strcmp(lvl, "error") == 0 ? ERRAND_LOG_ERROR
                                              : ERRAND_LOG_INFO;
    const char *server = er_settings_get(&st, "server")->text;
    const char *token = er_settings_get(&st, "token")->text;

    work wk = {.argv = argv + dash + 1,
               .kill_after = er_settings_get(&st, "kill-after")->num,
               .max_output = (size_t)er_settings_get(&st, "max-output")->num};
    errand_worker_config cfg;
    errand_worker_config_init(&cfg);
    cfg.server_url = server && *server ? server : ER_CLI_DEFAULT_SERVER;
    cfg.token = token && *token ? token : NULL;
    cfg.queues = (const char *const *)q->list;
    cfg.nqueues = q->nlist;
    int weights[16];
    const er_setting_value *qw = er_settings_get(&st, "queue-weight");
    if (qw->nlist > 0) {
        if (queue_weights(q, qw, weights) < 0)
            goto done;
        cfg.queue_weights = weights;
    }
    cfg.concurrency = (int)er_settings_get(&st, "concurrency")->num;
    cfg.prefetch = (int)er_settings_get(&st, "prefetch")->num;
    cfg.timeout_ms = er_settings_get(&st, "timeout")->num;
    cfg.grace_ms = er_settings_get(&st, "grace")->num;
    cfg.lease_ms = er_settings_get(&st, "lease")->num;
    cfg.poll_wait_ms = er_settings_get(&st, "poll-wait")->num;
    cfg.max_started = (int)er_settings_get(&st, "max-started")->num;
    cfg.worker_id = er_settings_get(&st, "worker-id")->text;
    cfg.log = log_line;

    char ebuf[256];
    rc = errand_worker_new(&cfg, handle, &wk, &g_worker, ebuf, sizeof ebuf);
    if (rc < 0) {
        fprintf(stderr, "errand work: %s\n", ebuf[0] ? ebuf : errand_strerror(rc));
        goto done;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    rc = errand_worker_run(g_worker);
    errand_worker_free(g_worker); /* waits for commands being stopped */
    g_worker = NULL;
    exit_code = rc == 0 ? ER_EXIT_OK : ER_EXIT_SERVER;
done:
    er_settings_fini(&st);
    return exit_code;
}
