/* SPDX-License-Identifier: MIT
 *
 * The errand command's subcommands. Each takes the arguments after its name
 * and returns the process exit status.
 */
#ifndef ER_CLI_CLI_H
#define ER_CLI_CLI_H

int er_cli_serve(int argc, char **argv, char **envp);
int er_cli_bench(int argc, char **argv, char **envp);

#endif
