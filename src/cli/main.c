/* SPDX-License-Identifier: MIT
 *
 * The errand command: dispatches to subcommands.
 */
#include "cli/cli.h"
#include "er_commit.h" /* generated: ER_COMMIT */

#include <stdio.h>
#include <string.h>

extern char **environ;

const er_cli_command er_cli_commands[] = {
    {"serve", "run the job server (errand serve --help)"},
    {"migrate", "apply the store's pending schema migrations; --dry-run lists\n"
                "them, --status shows the versions (errand migrate --help)"},
    {"enqueue", "add a job: errand enqueue QUEUE NAME [PAYLOAD_JSON]"},
    {"job get", "show a job: errand job get ID"},
    {"queues", "list queues with job counts"},
    {"dlq", "dead letters: errand dlq list | errand dlq redrive ID"},
    {"work", "run a command per job: errand work --queue Q -- CMD [ARGS]"},
    {"bench", "load scenarios against a server (errand bench --help)"},
    {"cron", "schedulers: errand cron add|list|rm|trigger, cron next EXPR"},
    {"lease run", "run a command once per key: errand lease run --type T\n"
                  "--code C --run-key K -- CMD [ARGS]"},
    {"chaos", "kill workers and the server, prove no job lost or duplicated\n"
              "(errand chaos --help)"},
    {"outbox install", "create the outbox tables in an application's\n"
                       "PostgreSQL database: errand outbox install --db URL"},
    {"version", "print the version and the source commit (also --version)"},
};
const size_t er_cli_ncommands = sizeof er_cli_commands / sizeof er_cli_commands[0];

static void usage(FILE *out)
{
    fprintf(out, "usage: errand COMMAND [ARGS]   (errand COMMAND --help for its options)\n\n"
                 "commands:\n");
    for (size_t i = 0; i < er_cli_ncommands; i++) {
        const char *t = er_cli_commands[i].text;
        fprintf(out, "  %-10s ", er_cli_commands[i].name);
        for (; *t; t++) {
            fputc(*t, out);
            if (*t == '\n')
                fprintf(out, "             ");
        }
        fputc('\n', out);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0)
        return er_cli_serve(argc - 2, argv + 2, environ);
    if (strcmp(cmd, "migrate") == 0)
        return er_cli_migrate(argc - 2, argv + 2, environ);
    if (strcmp(cmd, "enqueue") == 0)
        return er_cli_enqueue(argc - 2, argv + 2);
    if (strcmp(cmd, "job") == 0)
        return er_cli_job(argc - 2, argv + 2);
    if (strcmp(cmd, "queues") == 0)
        return er_cli_queues(argc - 2, argv + 2);
    if (strcmp(cmd, "dlq") == 0)
        return er_cli_dlq(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0)
        return er_cli_bench(argc - 2, argv + 2, environ);
    if (strcmp(cmd, "work") == 0)
        return er_cli_work(argc - 2, argv + 2);
    if (strcmp(cmd, "cron") == 0)
        return er_cli_cron(argc - 2, argv + 2);
    if (strcmp(cmd, "chaos") == 0)
        return er_cli_chaos(argc - 2, argv + 2);
    if (strcmp(cmd, "lease") == 0)
        return er_cli_lease(argc - 2, argv + 2);
    if (strcmp(cmd, "outbox") == 0)
        return er_cli_outbox(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("errand %s (commit %s)\n", ER_VERSION, ER_COMMIT);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 && argc > 2)
        return er_cli_doc(argc - 2, argv + 2);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "errand: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
