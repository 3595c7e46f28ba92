/* SPDX-License-Identifier: MIT
 *
 * Sets the shop up, and may run again at every deploy: applies schema.sql to
 * the shop's database and sends each queue's settings from queues.json to
 * errand (PUT /v1/queues/{q}, which merges field by field, so a queue names
 * only what differs from the server's defaults). ${MAIL_URL} in the file is
 * replaced by $MAIL_URL. Then declares the schedulers of schedulers.json
 * (PUT /v1/schedulers/{key} is an upsert: a deploy never makes a second).
 *   SHOP_DB=… ERRAND_URL=… MAIL_URL=… shop_setup schema.sql queues.json [schedulers.json]
 */
#include "shop.h"

#include <errand/errand.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *np = realloc(p, cap);
            if (!np) {
                free(p);
                fclose(f);
                return NULL;
            }
            p = np;
        }
        size_t got = fread(p + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    p[n] = '\0';
    return p;
}

/* Replaces every ${MAIL_URL} in the strings of j (in place). */
static void substitute(json_t *j, const char *mail)
{
    const char var[] = "${MAIL_URL}";
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            if (json_is_string(v) && strncmp(json_string_value(v), var, sizeof var - 1) == 0) {
                size_t n = strlen(mail) + strlen(json_string_value(v)) + 1;
                char *s = malloc(n);
                if (s) {
                    snprintf(s, n, "%s%s", mail, json_string_value(v) + sizeof var - 1);
                    json_string_set(v, s);
                    free(s);
                }
            } else {
                substitute(v, mail);
            }
        }
    }
}

int main(int argc, char **argv)
{
    shop_set_prog("shop_setup");
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: shop_setup schema.sql queues.json [schedulers.json]\n");
        return 2;
    }
    char *schema = slurp(argv[1]);
    if (!schema) {
        fprintf(stderr, "shop_setup: cannot read %s\n", argv[1]);
        return 1;
    }
    PGconn *db = PQconnectdb(shop_env("SHOP_DB", "postgres:///shop"));
    int bad = PQstatus(db) != CONNECTION_OK || shop_exec(db, schema) < 0;
    if (PQstatus(db) != CONNECTION_OK)
        fprintf(stderr, "shop_setup: %s", PQerrorMessage(db));
    PQfinish(db);
    free(schema);
    if (bad)
        return 1;

    json_error_t jerr;
    json_t *queues = json_load_file(argv[2], 0, &jerr);
    if (!json_is_object(queues)) {
        fprintf(stderr, "shop_setup: %s: line %d: %s\n", argv[2], jerr.line, jerr.text);
        json_decref(queues);
        return 1;
    }
    substitute(queues, shop_env("MAIL_URL", "http://127.0.0.1:7503"));
    errand_client *c = NULL;
    if (errand_client_new(shop_env("ERRAND_URL", "http://127.0.0.1:7400"), getenv("ERRAND_TOKEN"),
                          &c) < 0) {
        json_decref(queues);
        return 1;
    }
    const char *name;
    json_t *settings;
    int rc = 0;
    json_object_foreach(queues, name, settings) {
        char *text = json_dumps(settings, JSON_COMPACT);
        char *out = NULL;
        int r = text ? errand_queue_settings(c, name, text, &out) : -1;
        if (r < 0) {
            const errand_error *e = errand_last_error(c);
            fprintf(stderr, "shop_setup: queue %s: %s\n", name,
                    e && e->message[0] ? e->message : errand_strerror(r));
            rc = 1;
        } else {
            printf("queue %s: %s\n", name, out);
        }
        errand_free(out);
        free(text);
    }
    json_t *scheds = argc == 4 ? json_load_file(argv[3], 0, &jerr) : NULL;
    if (argc == 4 && !json_is_object(scheds)) {
        fprintf(stderr, "shop_setup: %s: line %d: %s\n", argv[3], jerr.line, jerr.text);
        rc = 1;
    }
    json_object_foreach(scheds, name, settings) {
        char *text = json_dumps(settings, JSON_COMPACT);
        char *out = NULL;
        int r = text ? errand_scheduler_put(c, name, text, &out) : -1;
        if (r < 0) {
            const errand_error *e = errand_last_error(c);
            fprintf(stderr, "shop_setup: scheduler %s: %s\n", name,
                    e && e->message[0] ? e->message : errand_strerror(r));
            rc = 1;
        } else {
            printf("scheduler %s: %s\n", name, out);
        }
        errand_free(out);
        free(text);
    }
    json_decref(scheds);
    errand_client_free(c);
    json_decref(queues);
    return rc;
}
