/* SPDX-License-Identifier: MIT
 *
 * The shop's workers, one role per process (liberrand's worker runtime):
 *   payments  capture-payment, void-authorization (the gateway's
 *             Idempotency-Key; compare-and-set + outbox in one transaction)
 *   shipping  create-shipment (the carrier has no idempotency key: look up
 *             by reference before creating; a 429 throttles the queue)
 *   loyalty   award-points (processed_messages in the points transaction)
 *   critical, default, bulk   messages to the mail service (ops.c)
 *   maintenance  outbox-cleanup, daily-sales-rollup (ops.c)
 * Every job is an outbox envelope {"event_id","topic","trace_id","payload"};
 * the payload carries ids only, and the handlers read the rest.
 *   SHOP_ROLE=payments SHOP_DB=… ERRAND_URL=… GATEWAY_URL=… shop_worker
 */
#include "handlers.h"
#include "shop.h"

#include <curl/curl.h>
#include <errand/errand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void log_cb(int level, const char *line, void *user)
{
    (void)user;
    if (level >= ERRAND_LOG_INFO)
        fprintf(stderr, "%s\n", line);
}

int main(int argc, char **argv)
{
    const char *role = argc > 1 ? argv[1] : shop_env("SHOP_ROLE", "");
    const char *queue = NULL;
    errand_handler_fn fn = NULL;
    if (strcmp(role, "payments") == 0)
        queue = "payments", fn = shop_handle_payments;
    else if (strcmp(role, "shipping") == 0)
        queue = "shipping", fn = shop_handle_shipping;
    else if (strcmp(role, "loyalty") == 0)
        queue = "loyalty", fn = shop_handle_loyalty;
    else if (strcmp(role, "critical") == 0 || strcmp(role, "default") == 0 ||
             strcmp(role, "bulk") == 0)
        queue = role, fn = shop_handle_message;
    else if (strcmp(role, "maintenance") == 0)
        queue = "maintenance", fn = shop_handle_maintenance;
    else {
        fprintf(stderr, "usage: shop_worker payments|shipping|loyalty|critical|default|bulk|"
                        "maintenance (or SHOP_ROLE)\n");
        return 2;
    }
    char prog[64];
    snprintf(prog, sizeof prog, "shop_worker.%s", role);
    shop_set_prog(prog);

    /* The three numbers: the longest job must end before the shutdown
     * grace, and the grace before the lease, or a stopping worker's job
     * runs on while another worker takes it. */
    long timeout = shop_env_long("SHOP_JOB_TIMEOUT_MS", 10000);
    long grace = shop_env_long("SHOP_GRACE_MS", 20000);
    long lease = shop_env_long("SHOP_LEASE_MS", 30000);
    if (!(timeout > 0 && timeout < grace && grace < lease)) {
        fprintf(stderr,
                "shop_worker: need longest job < shutdown grace < lease, got %ld ms, %ld ms, "
                "%ld ms (SHOP_JOB_TIMEOUT_MS, SHOP_GRACE_MS, SHOP_LEASE_MS)\n",
                timeout, grace, lease);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    errand_worker_config cfg;
    errand_worker_config_init(&cfg);
    cfg.server_url = shop_env("ERRAND_URL", "http://127.0.0.1:7400");
    cfg.token = getenv("ERRAND_TOKEN");
    cfg.queues = &queue;
    cfg.nqueues = 1;
    cfg.concurrency = (int)shop_env_long("SHOP_CONCURRENCY", 4);
    cfg.prefetch = (int)shop_env_long("SHOP_PREFETCH", -1);
    cfg.timeout_ms = timeout;
    cfg.grace_ms = grace;
    cfg.lease_ms = lease;
    cfg.poll_wait_ms = 1000;
    cfg.log = log_cb;
    errand_worker *w = NULL;
    char err[256] = "";
    int rc = errand_worker_new(&cfg, fn, NULL, &w, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "shop_worker: %s\n", err[0] ? err : errand_strerror(rc));
        return 2;
    }
    errand_worker_install_signal_handlers(w);
    char extra[200];
    snprintf(extra, sizeof extra,
             "\"queue\":\"%s\",\"job_timeout_ms\":%ld,\"grace_ms\":%ld,\"lease_ms\":%ld", queue,
             timeout, grace, lease);
    shop_log("info", "worker starting", NULL, extra);
    rc = errand_worker_run(w);
    errand_worker_free(w);
    curl_global_cleanup();
    return rc < 0 ? 1 : 0;
}
