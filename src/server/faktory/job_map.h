/* SPDX-License-Identifier: MIT
 *
 * The Faktory job hash and errand's job (docs/faktory.md, "Field mapping"):
 * reading a PUSH job into an er_job_spec, a FAIL body into an
 * er_failure_spec, and writing a leased job as the hash FETCH returns.
 * Only reads and writes: every rule is core's (er_job_validate,
 * er_failure_validate). Pure: no I/O.
 */
#ifndef ER_SERVER_FAKTORY_JOB_MAP_H
#define ER_SERVER_FAKTORY_JOB_MAP_H

#include <jansson.h>
#include <stdint.h>

#include "core/ack.h"
#include "core/job.h"
#include "core/job_spec.h"
#include "util/jsonw.h"

#define ER_FK_RETRY_DEFAULT 25                  /* Faktory's: 26 attempts */
#define ER_FK_RESERVE_DEFAULT_MS (1800LL * 1000) /* Faktory's reserve_for */
#define ER_FK_RESERVE_MIN_MS (60LL * 1000) /* the default floor (--faktory-min-reserve) */
#define ER_FK_RESERVE_MAX_MS (24LL * 3600 * 1000)

/* Fills *spec from one job hash (slices borrowed from obj, which must
 * outlive the spec; args serialized into spec->payload_buf: free with
 * er_job_spec_fini unless er_job_validate took it; custom serialized into
 * *custom_buf, returned owned: free() after er_job_validate). A member the
 * mapping cannot carry is refused here (ER_EINVAL naming it): a wrong JSON
 * type, args that are not an array, reserve_for that is not an integer, a
 * custom member naming a Faktory Enterprise feature errand does not do
 * (bid); custom.unique_for must be 1..86400 and unique_until "success" or
 * "start". custom.expires_in (seconds,
 * 1..ER_DELAY_MAX_MS / 1000) is stored as custom.expires_at = now + it;
 * custom.expires_at must be an RFC 3339 time; not both. Values
 * are judged by core. Returns 0, ER_EINVAL or ER_ENOMEM. */
int er_fk_job_spec(const json_t *obj, int64_t now, er_job_spec *spec, char **custom_buf,
                   er_error *err);

/* When a job's custom has unique_for: 1, with the lock's ttl, whether it is
 * held until the job starts (unique_until "start") rather than succeeds,
 * and its key (hex SHA-256 of jobtype and args) in key[65]; 0 when not;
 * ER_EINTERNAL when hashing failed. */
int er_fk_job_unique(const er_job *job, int64_t *ttl_ms, bool *until_start, char key[65]);

/* When a job's custom.expires_at (an RFC 3339 time; PUSH turns expires_in
 * into it) has passed at now: 1 with its text in out[32]; else 0. */
int er_fk_job_expired(const er_job *job, int64_t now, char out[32]);

/* After er_job_validate refused a spec of er_fk_job_spec: names the
 * Faktory field instead of errand's (max_attempts -> retry, id -> jid,
 * name -> jobtype, payload -> args, timeout_ms -> reserve_for, run_at ->
 * at, group -> custom.group, ...). */
void er_fk_error_rename(er_error *err);

/* Fills *sp from a FAIL body {jid, errtype, message, backtrace}; the class
 * is transient (the job's retry decides). Slices borrowed from obj; the
 * backtrace serialized into *bt (returns owned: free()). 0 or ER_ENOMEM. */
int er_fk_failure_spec(const json_t *obj, er_failure_spec *sp, char **bt, er_error *err);

/* The job hash FETCH returns for a leased job: jid, jobtype, queue, args
 * (the payload when it is an array, else [payload]), priority, retry
 * (max_attempts - 1), reserve_for (lease_s), created_at, enqueued_at,
 * custom as it was pushed, or for a job pushed over HTTP (group, idempotency_key
 * when not the jid, trace_id) when it has any. */
void er_fk_job_write(const er_job *job, int64_t lease_s, er_jsonw *w);

/* The lease a job fetched over Faktory gets: its timeout_ms (reserve_for)
 * clamped to min_ms..ER_FK_RESERVE_MAX_MS. */
int64_t er_fk_lease_ms(const er_job *job, int64_t min_ms);

#endif
