/* SPDX-License-Identifier: MIT
 *
 * errand_faulty: `errand serve` (the unchanged er_cli_serve) with the
 * "errfault" VFS registered, for disk-fault tests; use the store URL
 * "sqlite:file:PATH?vfs=errfault". Faults are armed at run time, so one
 * process runs a whole fault loop: the test writes one command line to the
 * file named by ERRAND_FAULT_CTL and sends SIGUSR1; a control thread (the
 * only thread with SIGUSR1 unblocked, via sigwait) applies it and answers
 * in ERRAND_FAULT_CTL.ack (written whole, by rename) with one JSON line.
 * Commands: "SEQ arm write|sync|full any|db|wal N STICKY" (fail the Nth
 * matching write/sync from now on; STICKY 1: and every later one),
 * "SEQ disarm", "SEQ stat"; the reply carries SEQ and the counters.
 * ERRAND_FAULT_AUTOCHECKPOINT=PAGES makes the WAL checkpoint after PAGES
 * pages, so short workloads reach checkpoint writes and database syncs.
 * Test code only.
 */
#include "cli/cli.h"
#include "support/faultvfs.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_ctl;

/* Applies one command line; writes the reply into out. */
static void apply(const char *line, char *out, size_t size)
{
    long seq = -1, n = 0;
    int sticky = 0;
    char cmd[16] = "", kind[16] = "", file[16] = "";
    int got = sscanf(line, "%ld %15s %15s %15s %ld %d", &seq, cmd, kind, file, &n, &sticky);
    const char *error = NULL;
    if (got >= 2 && strcmp(cmd, "arm") == 0) {
        er_faultvfs_kind k = strcmp(kind, "write") == 0  ? ER_FAULTVFS_WRITE
                             : strcmp(kind, "sync") == 0 ? ER_FAULTVFS_SYNC
                                                         : ER_FAULTVFS_FULL;
        er_faultvfs_file f = strcmp(file, "db") == 0    ? ER_FAULTVFS_DB
                             : strcmp(file, "wal") == 0 ? ER_FAULTVFS_WAL
                                                        : ER_FAULTVFS_ANY;
        if (got != 6 || n < 1 ||
            (strcmp(kind, "write") != 0 && strcmp(kind, "sync") != 0 &&
             strcmp(kind, "full") != 0) ||
            (strcmp(file, "any") != 0 && strcmp(file, "db") != 0 && strcmp(file, "wal") != 0))
            error = "usage: SEQ arm write|sync|full any|db|wal N STICKY";
        else
            er_faultvfs_arm_on(k, f, n, sticky != 0);
    } else if (got >= 2 && strcmp(cmd, "disarm") == 0) {
        er_faultvfs_disarm();
    } else if (!(got >= 2 && strcmp(cmd, "stat") == 0)) {
        error = "unknown command";
    }
    er_faultvfs_counts c;
    er_faultvfs_counts_get(&c);
    snprintf(out, size,
             "{\"seq\":%ld,\"ok\":%s,\"error\":\"%s\",\"db_writes\":%ld,\"db_syncs\":%ld,"
             "\"wal_writes\":%ld,\"wal_syncs\":%ld,\"other_writes\":%ld,\"other_syncs\":%ld,"
             "\"armed_calls\":%ld,\"faults\":%ld}\n",
             seq, error ? "false" : "true", error ? error : "", c.db_writes, c.db_syncs,
             c.wal_writes, c.wal_syncs, c.other_writes, c.other_syncs, c.armed_calls, c.faults);
}

static void reply(const char *text)
{
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s.ack", g_ctl);
    snprintf(tmp, sizeof tmp, "%s.ack.tmp", g_ctl);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fputs(text, f);
    if (fclose(f) == 0)
        rename(tmp, path);
}

static void *control_main(void *arg)
{
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0)
            continue;
        char line[256] = "", out[512];
        FILE *f = fopen(g_ctl, "r");
        if (f) {
            if (!fgets(line, sizeof line, f))
                line[0] = '\0';
            fclose(f);
        }
        apply(line, out, sizeof out);
        reply(out);
    }
    return NULL;
}

extern char **environ;

int main(int argc, char **argv)
{
    if (er_faultvfs_register() != 0) {
        fprintf(stderr, "errand_faulty: cannot register the fault VFS\n");
        return 1;
    }
    const char *ck = getenv("ERRAND_FAULT_AUTOCHECKPOINT");
    if (ck && er_faultvfs_autocheckpoint((int)strtol(ck, NULL, 10)) != 0) {
        fprintf(stderr, "errand_faulty: cannot install the checkpoint override\n");
        return 1;
    }
    g_ctl = getenv("ERRAND_FAULT_CTL");
    if (g_ctl && *g_ctl) {
        /* blocked here, before any thread starts, so every thread inherits
         * the mask and only sigwait() sees the signal */
        static sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        pthread_t th;
        if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0 ||
            pthread_create(&th, NULL, control_main, &set) != 0) {
            fprintf(stderr, "errand_faulty: cannot start the control thread\n");
            return 1;
        }
        pthread_detach(th);
    }
    /* accept both `errand_faulty serve ARGS` and `errand_faulty ARGS` */
    int skip = argc > 1 && strcmp(argv[1], "serve") == 0 ? 2 : 1;
    return er_cli_serve(argc - skip, argv + skip, environ);
}
