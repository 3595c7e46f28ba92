/* SPDX-License-Identifier: MIT
 *
 * The errand command's subcommands. Each takes the arguments after its name
 * and returns the process exit status.
 */
#ifndef ER_CLI_CLI_H
#define ER_CLI_CLI_H

int er_cli_serve(int argc, char **argv, char **envp);

/* Client commands (enqueue.c, job.c, queues.c, dlq.c): they talk to a server
 * through liberrand only. Exit 0 ok, 1 server error, 2 usage, 3 unreachable. */
int er_cli_enqueue(int argc, char **argv);
int er_cli_job(int argc, char **argv);
int er_cli_queues(int argc, char **argv);
int er_cli_dlq(int argc, char **argv);
int er_cli_bench(int argc, char **argv, char **envp);
/* `errand work` (work.c): runs a command per job through liberrand's worker
 * runtime. Exit 0 after a graceful stop, 1 when it could not run, 2 usage. */
int er_cli_work(int argc, char **argv);
/* `errand cron next` (cron.c): local, no server. Exit 0 ok, 2 usage. */
int er_cli_cron(int argc, char **argv);

#endif
