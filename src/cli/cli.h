/* SPDX-License-Identifier: MIT
 *
 * The errand command's subcommands. Each takes the arguments after its name
 * and returns the process exit status.
 */
#ifndef ER_CLI_CLI_H
#define ER_CLI_CLI_H

#include "cli/settings.h"

int er_cli_serve(int argc, char **argv, char **envp);
/* errand serve's settings table (static), for migrate and the man pages. */
const er_setting *er_cli_serve_table(size_t *n);
/* `errand migrate` (migrate.c): applies, lists (--dry-run) or shows
 * (--status) the store's pending schema migrations. Exit 0 ok, 1 store
 * error, 2 usage. */
int er_cli_migrate(int argc, char **argv, char **envp);
/* The settings tables of errand work and errand migrate (static). */
const er_setting *er_cli_work_table(size_t *n);
const er_setting *er_cli_migrate_table(size_t *n);

/* The commands `errand --help` and errand(1) list (main.c): `text` may hold
 * newlines, continued lines of the same entry. */
typedef struct er_cli_command {
    const char *name, *text;
} er_cli_command;
extern const er_cli_command er_cli_commands[];
extern const size_t er_cli_ncommands;

/* `errand help --man PAGE` (errand, errand-serve, errand-work, errand-api)
 * prints that man page, `errand help --config-example` the example config
 * file, `errand help --write-docs DIR` writes all of them into DIR; all
 * from the settings tables, the command list and the route table, so they
 * cannot drift from --help (manpage.c). Exit 0, 1 on a write error, 2
 * usage. */
int er_cli_doc(int argc, char **argv);

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
/* `errand cron next|add|list|rm|trigger` (cron.c): `next` is local. Exit 0
 * ok, 1 server error, 2 usage, 3 unreachable. */
int er_cli_cron(int argc, char **argv);
/* `errand lease run ... -- CMD` (lease.c): CMD's exit status, 0 when the key
 * is done, 75 when held elsewhere or the lease was lost, 1/2/3 as above. */
int er_cli_lease(int argc, char **argv);
/* `errand outbox install` (outbox.c). */
int er_cli_outbox(int argc, char **argv);

/* `errand chaos` (chaos.c): kills workers and the server on a seeded
 * schedule and checks that no job is lost and no effect duplicated. Exit 0
 * when every check holds, 1 on a violation, 2 usage. */
int er_cli_chaos(int argc, char **argv);

#endif
