/* SPDX-License-Identifier: MIT
 *
 * `errand lease run --type T --code C --run-key K [--ttl D] -- CMD [ARGS]`:
 * runs CMD at most once per (type, code, run key) across every machine that
 * shares the server, through liberrand's errand_run_exclusive(): the lease
 * is renewed every ttl/3 while CMD runs, completed when CMD exits 0 and
 * released otherwise. CMD gets ERRAND_IDEMPOTENCY_KEY, ERRAND_OWNER_TOKEN
 * and ERRAND_FENCE in its environment.
 */
#include "cli/cli.h"
#include "cli/remote.h"
#include "cli/settings.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CMD "errand lease"
#define EXIT_TEMPFAIL 75 /* sysexits.h EX_TEMPFAIL: held elsewhere or lease lost; try later */

extern char **environ;

static const char usage[] =
    "usage: errand lease run --type T --code C --run-key K [--ttl D] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD at most once for (T, C, K): acquires the server lease, renews it\n"
    "every ttl/3 while CMD runs, completes it when CMD exits 0 (later runs for\n"
    "the same key do nothing) and releases it otherwise (a later run may retry).\n"
    "CMD gets ERRAND_IDEMPOTENCY_KEY (the same for (T, C, K) everywhere),\n"
    "ERRAND_OWNER_TOKEN and ERRAND_FENCE (grows with every acquire).\n"
    "\n"
    "options:\n"
    "  --type T       kind of work, e.g. schedule\n"
    "  --code C       which work, e.g. daily-billing\n"
    "  --run-key K    which run, e.g. 2026-11-30\n"
    "  --ttl D        lease time, 1s..24h (default 60s): another runner may take\n"
    "                 over this long after this one stops renewing\n"
    "  --server URL   server (default $ERRAND_SERVER or " ER_CLI_DEFAULT_SERVER ")\n"
    "  --token TOKEN  bearer token with the worker role (default $ERRAND_TOKEN)\n"
    "\n"
    "exit status: CMD's status when it ran (128+N when killed by signal N);\n"
    "0 without running CMD when the key is already done; 75 when another runner\n"
    "holds the key or the lease was lost; 1 server error, 2 usage, 3 unreachable\n";

typedef struct runctx {
    char **argv;                /* CMD and its arguments */
} runctx;

static _Atomic pid_t g_child = 0;

static void forward(int sig)
{
    pid_t p = atomic_load(&g_child);
    if (p > 0)
        kill(p, sig);
}

static void on_lost(void *user)
{
    (void)user;
    fprintf(stderr, CMD ": the lease was lost (another runner may take over); stopping CMD\n");
    forward(SIGTERM);
}

/* Our environment without old ERRAND_{IDEMPOTENCY_KEY,OWNER_TOKEN,FENCE},
 * plus the lease's. Returns owned (free the three added strings and the
 * array), or NULL. */
static char **child_env(const errand_lease_info *l, char *added[3])
{
    static const char *const names[] = {"ERRAND_IDEMPOTENCY_KEY=", "ERRAND_OWNER_TOKEN=",
                                        "ERRAND_FENCE="};
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 4, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool ours = false;
        for (int j = 0; j < 3; j++)
            ours = ours || strncmp(environ[i], names[j], strlen(names[j])) == 0;
        if (!ours)
            env[k++] = environ[i];
    }
    char fence[32];
    snprintf(fence, sizeof fence, "%lld", l->fence);
    const char *vals[3] = {l->idempotency_key, l->owner_token, fence};
    for (int j = 0; j < 3; j++) {
        size_t len = strlen(names[j]) + strlen(vals[j]) + 1;
        added[j] = malloc(len);
        if (!added[j]) {
            for (int m = 0; m < j; m++)
                free(added[m]);
            free(env);
            return NULL;
        }
        snprintf(added[j], len, "%s%s", names[j], vals[j]);
        env[k++] = added[j];
    }
    env[k] = NULL;
    return env;
}

/* Runs CMD (on errand_run_exclusive's thread) and returns its exit status. */
static int run_cmd(const errand_lease_info *l, void *user)
{
    runctx *r = user;
    char *added[3];
    char **env = child_env(l, added);
    if (!env) {
        fprintf(stderr, CMD ": out of memory\n");
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execvpe(r->argv[0], r->argv, env);
        /* only async-signal-safe calls between fork and exec/_exit */
        static const char msg[] = CMD ": cannot run the command\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    int status = 1;
    if (pid < 0) {
        fprintf(stderr, CMD ": cannot start '%s': %s\n", r->argv[0], strerror(errno));
    } else {
        atomic_store(&g_child, pid);
        int ws = 0;
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
            ;
        atomic_store(&g_child, 0);
        status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 1;
    }
    for (int j = 0; j < 3; j++)
        free(added[j]);
    free(env);
    return status;
}

int er_cli_lease(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fputs(usage, stdout);
        return ER_EXIT_OK;
    }
    if (argc < 1 || strcmp(argv[0], "run") != 0)
        return er_cli_usage_error(CMD, "expected 'run'");
    er_remote_opts remote = {0};
    const char *type = NULL, *code = NULL, *run_key = NULL, *ttl_s = NULL;
    int i = 1, cmd_at = -1;
    while (i < argc) {
        const char *s = argv[i];
        if (strcmp(s, "--") == 0) {
            cmd_at = i + 1;
            break;
        }
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(usage, stdout);
            return ER_EXIT_OK;
        }
        int r = er_cli_remote_opt(argc, argv, &i, CMD, &remote);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "type", CMD, &type);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "code", CMD, &code);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "run-key", CMD, &run_key);
        if (r == 0)
            r = er_cli_opt(argc, argv, &i, "ttl", CMD, &ttl_s);
        if (r < 0)
            return ER_EXIT_USAGE;
        if (r == 0)
            return er_cli_usage_error(CMD, "unknown argument '%s' (the command goes after --)", s);
    }
    if (!type || !*type || !code || !*code || !run_key || !*run_key)
        return er_cli_usage_error(CMD, "--type, --code and --run-key are required and not empty");
    if (cmd_at < 0 || cmd_at >= argc)
        return er_cli_usage_error(CMD, "the command to run goes after --");
    int64_t ttl = 60000;
    if (ttl_s && (er_parse_duration(ttl_s, &ttl) < 0 || ttl < 1000 || ttl > 86400000))
        return er_cli_usage_error(CMD, "--ttl must be a duration of 1s..24h, e.g. 30s");

    errand_client *c = NULL;
    int status = er_cli_connect(CMD, &remote, &c);
    if (status != ER_EXIT_OK)
        return status;
    runctx r = {.argv = argv + cmd_at};
    struct sigaction sa = {.sa_handler = forward}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int result = -1;
    int rc = errand_run_exclusive(c, type, code, run_key, (long)ttl, run_cmd, on_lost, &r,
                                  &result);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    switch (rc) {
    case 0:
        status = ER_EXIT_OK;
        break;
    case ERRAND_EXCLUSIVE_DONE:
        fprintf(stderr, CMD ": %s/%s/%s is already done; not running the command\n", type, code,
                run_key);
        status = ER_EXIT_OK;
        break;
    case ERRAND_EXCLUSIVE_FAILED:
        status = result;
        break;
    case ERRAND_ECONFLICT:
        fprintf(stderr, CMD ": %s/%s/%s is held by another runner; not running the command\n",
                type, code, run_key);
        status = EXIT_TEMPFAIL;
        break;
    case ERRAND_ESTALE:
        fprintf(stderr, CMD ": the lease was lost while the command ran; not completed\n");
        status = EXIT_TEMPFAIL;
        break;
    default:
        status = er_cli_report(CMD, c, rc);
        break;
    }
    errand_client_free(c);
    return status;
}
