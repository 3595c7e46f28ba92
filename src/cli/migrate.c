/* SPDX-License-Identifier: MIT
 *
 * `errand migrate`: applies the store's pending schema migrations and names
 * each, or (--dry-run) lists them, or (--status) shows the store's schema
 * version beside this binary's. It reads --store like errand serve (flag,
 * ERRAND_STORE, a config file shared with errand serve) and talks to the
 * store through ops->schema only.
 */
#include "cli/cli.h"
#include "cli/settings.h"
#include "store/store.h"

#include <stdio.h>
#include <string.h>

static const er_setting migrate_settings[] = {
    {"store", ER_SET_STRING, "sqlite:./errand.db", 0, 0, NULL,
     "store URL, as errand serve takes it (sqlite:PATH or postgres://...)"},
    {"config", ER_SET_STRING, NULL, 0, 0, NULL,
     "errand serve's config file (its other keys are accepted and not used)"},
    {"dry-run", ER_SET_SWITCH, "false", 0, 0, NULL, "list the pending migrations, apply none"},
    {"status", ER_SET_SWITCH, "false", 0, 0, NULL,
     "show the store's schema version and this binary's, apply none"},
};

const er_setting *er_cli_migrate_table(size_t *n)
{
    *n = sizeof migrate_settings / sizeof migrate_settings[0];
    return migrate_settings;
}

static const char *usage_line =
    "usage: errand migrate [--store URL] [--config FILE] [--dry-run | --status]\n"
    "Applies the store's pending schema migrations, in one transaction under the store's\n"
    "lock, and names each; exit 0 ok, 1 store error, 2 usage. See docs/operations.md.";

int er_cli_migrate(int argc, char **argv, char **envp)
{
    er_settings st;
    er_error err = {0};
    if (er_settings_init(&st, migrate_settings, sizeof migrate_settings / sizeof migrate_settings[0],
                         &err) < 0) {
        fprintf(stderr, "errand migrate: %s\n", err.message);
        return 1;
    }
    st.file_also = er_cli_serve_table(&st.nfile_also);
    int rc = er_settings_load(&st, argc, argv, envp, stdout, &err);
    if (rc == 1) {
        er_settings_help(&st, usage_line, stdout);
        er_settings_fini(&st);
        return 0;
    }
    int exit_code = 2;
    bool dry = false, status = false;
    if (rc < 0) {
        fprintf(stderr, "errand migrate: %s\n", err.message);
        goto out;
    }
    dry = er_settings_get(&st, "dry-run")->num != 0;
    status = er_settings_get(&st, "status")->num != 0;
    if (dry && status) {
        fprintf(stderr, "errand migrate: --dry-run and --status exclude each other\n");
        goto out;
    }
    const er_store_ops *ops = NULL;
    const char *rest = NULL;
    if (er_store_resolve(er_settings_get(&st, "store")->text, &ops, &rest, &err) < 0) {
        fprintf(stderr, "errand migrate: --store: %s\n", err.message);
        goto out;
    }
    er_store_options opt = {.busy_timeout_ms = 5000};
    er_schema_info info = {0};
    rc = ops->schema(rest, &opt, !dry && !status, &info, &err);
    if (ops->release_idle)
        ops->release_idle();
    if (rc < 0) {
        fprintf(stderr, "errand migrate: %s\n", err.message);
        exit_code = 1;
        goto out;
    }
    exit_code = 0;
    int pending = info.latest - info.version;
    if (status) {
        printf("store: %s\nschema version: %d\nthis errand: %d\npending: %d\n", ops->name,
               info.version, info.latest, pending);
        if (pending > 0)
            printf("run `errand migrate` to apply them\n");
        goto out;
    }
    if (pending == 0) {
        printf("nothing to apply: schema version %d is this errand's\n", info.version);
        goto out;
    }
    for (int v = info.version; v < info.latest; v++)
        printf("%s %d: %s\n", dry ? "pending" : "applied", v + 1, info.steps[v]);
    if (dry)
        printf("schema version %d; `errand migrate` would bring it to %d\n", info.version,
               info.latest);
    else
        printf("schema version %d (was %d)\n", info.latest, info.version);
out:
    er_settings_fini(&st);
    return exit_code;
}
