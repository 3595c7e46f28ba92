/* SPDX-License-Identifier: MIT
 *
 * The shop's job handlers (handlers.c), one per role; each takes an outbox
 * envelope job and reports one outcome. They are plain functions of the job
 * and the environment (SHOP_DB, GATEWAY_URL, CARRIER_URL), so the tests can
 * run them against a real database and the fakes.
 */
#ifndef SHOP_HANDLERS_H
#define SHOP_HANDLERS_H

#include <errand/errand.h>

int shop_handle_payments(errand_job *job, void *user); /* capture-payment, void-authorization */
int shop_handle_shipping(errand_job *job, void *user); /* create-shipment */
int shop_handle_loyalty(errand_job *job, void *user);  /* award-points */
/* ops.c: critical, default and bulk messages; outbox-cleanup, daily-sales-rollup */
int shop_handle_message(errand_job *job, void *user);
int shop_handle_maintenance(errand_job *job, void *user);

#endif
