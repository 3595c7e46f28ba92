/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the Faktory frontend's readers (src/server/faktory):
 * the input is cut into command lines (er_fk_line_next, a 4 KiB limit),
 * each split into a verb and an argument (er_fk_command_parse) and, for
 * PUSH, read as a job (er_fk_job_spec) and judged by core. Checks: lines and
 * slices stay inside the input; a parsed verb is capitals and a known one
 * names itself; an accepted job is written back as a job hash that jansson
 * reads, with an args array; a refused one names a field and holds nothing.
 * The same bytes are also read as server replies (er_fk_reply_next), and a
 * bulk reply of each line reads back as that line.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/job_spec.h"
#include "server/faktory/job_map.h"
#include "server/faktory/proto.h"
#include "util/jsonw.h"

#define LINE_MAX_ 4096

static void check(bool ok)
{
    if (!ok)
        abort();
}

static void push(const char *arg, size_t n)
{
    json_t *o = json_loadb(arg, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
    if (!o)
        return;
    er_job_spec sp;
    er_error err = {0};
    er_job job;
    er_job_init(&job);
    char *custom = NULL;
    int rc = er_fk_job_spec(o, 1764547200000, &sp, &custom, &err);
    if (rc == 0) {
        er_job_limits lim = {.payload_max = 65536};
        er_rand r;
        er_rand_init_seeded(&r, 1);
        rc = er_job_validate(&sp, &lim, 1764547200000, &r, &job, &err);
    }
    er_job_spec_fini(&sp);
    free(custom);
    if (rc < 0) {
        er_fk_error_rename(&err);
        check(err.code == rc && err.message[0]);
        check(!job.id && !job.payload);
    } else {
        check(job.max_attempts >= 1 && job.timeout_ms >= 1000);
        er_jsonw w;
        er_jsonw_init(&w, 1 << 20);
        er_fk_job_write(&job, er_fk_lease_ms(&job, ER_FK_RESERVE_MIN_MS) / 1000, &w);
        check(!w.failed);
        json_t *back = json_loadb(w.out.data, w.out.len, 0, NULL);
        check(back && json_is_array(json_object_get(back, "args")));
        check(strcmp(json_string_value(json_object_get(back, "jid")), job.id) == 0);
        json_decref(back);
        er_jsonw_fini(&w);
    }
    er_job_fini(&job);
    json_decref(o);
}

static void replies(const char *buf, size_t len)
{
    size_t at = 0;
    while (at < len) {
        er_fk_reply r;
        size_t used = 0;
        int rc = er_fk_reply_next(buf + at, len - at, LINE_MAX_, LINE_MAX_, &r, &used);
        if (rc <= 0)
            return;
        check(used > 0 && used <= len - at);
        if (r.kind != ER_FK_R_NULL)
            check(r.data >= buf + at && r.data + r.len <= buf + at + used);
        at += used;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    replies(buf, size);
    size_t at = 0;
    while (at < size) {
        size_t n = 0, used = 0;
        int rc = er_fk_line_next(buf + at, size - at, LINE_MAX_, &n, &used);
        if (rc <= 0)
            break;
        check(n <= LINE_MAX_ && n < used && used <= size - at);
        const char *line = buf + at;
        at += used;
        (void)er_fk_looks_like_http(line, n);
        er_fk_command cmd;
        const char *why = NULL;
        if (er_fk_command_parse(line, n, &cmd, &why) < 0) {
            check(why != NULL);
        } else {
            check(cmd.name == line && cmd.name_len >= 1 && cmd.name_len <= 16);
            for (size_t i = 0; i < cmd.name_len; i++)
                check(line[i] >= 'A' && line[i] <= 'Z');
            if (cmd.verb != ER_FK_UNKNOWN)
                check(strlen(er_fk_verb_name(cmd.verb)) == cmd.name_len &&
                      memcmp(er_fk_verb_name(cmd.verb), line, cmd.name_len) == 0);
            check(!cmd.arg_len || (cmd.arg > line && cmd.arg + cmd.arg_len == line + n));
            if (cmd.verb == ER_FK_PUSH)
                push(cmd.arg, cmd.arg_len);
        }
        er_buf b;
        er_buf_init(&b, 2 * LINE_MAX_);
        er_fk_reply_bulk(&b, line, n);
        er_fk_reply r;
        size_t u = 0;
        check(b.err == 0);
        check(er_fk_reply_next(b.data, b.len, LINE_MAX_, LINE_MAX_, &r, &u) == 1);
        check(r.kind == ER_FK_R_BULK && r.len == n && memcmp(r.data, line, n) == 0 && u == b.len);
        er_buf_fini(&b);
    }
    return 0;
}
