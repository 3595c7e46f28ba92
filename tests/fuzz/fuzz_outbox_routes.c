/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for outbox routes files (er_outbox_routes_parse): a
 * refused file gets a message pointing to a line and leaves nothing; an
 * accepted one finds every topic it holds, each with valid, distinct routes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/outbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    er_outbox_routes r;
    er_error err = {0};
    int rc = er_outbox_routes_parse((const char *)data, size, &r, &err);
    if (rc < 0) {
        if (rc != ER_ENOMEM && strncmp(err.message, "line ", 5) != 0 &&
            !strstr(err.message, "printable"))
            abort();
        if (r.topics || r.ntopics)
            abort();
        return 0;
    }
    if (r.ntopics < 1)
        abort();
    for (size_t i = 0; i < r.ntopics; i++) {
        const er_outbox_topic *t = &r.topics[i];
        if (er_outbox_routes_find(&r, t->topic) != t || t->nroutes < 1 ||
            t->nroutes > ER_OUTBOX_ROUTES_MAX)
            abort();
        for (size_t j = 0; j < t->nroutes; j++) {
            const er_outbox_route *a = &t->routes[j];
            if (!er_name_ok(a->queue, strlen(a->queue)) || !er_name_ok(a->name, strlen(a->name)))
                abort();
            for (size_t k = 0; k < j; k++)
                if (!strcmp(a->queue, t->routes[k].queue) && !strcmp(a->name, t->routes[k].name))
                    abort();
            char id[ER_OUTBOX_JOB_ID_LEN + 1];
            if (er_outbox_job_id("0e259347-2665-453e-8cd3-eda792f3c6d0", a->queue, a->name, id,
                                 &err) != 0 || strlen(id) != ER_OUTBOX_JOB_ID_LEN)
                abort();
        }
    }
    er_outbox_routes_fini(&r);
    return 0;
}
