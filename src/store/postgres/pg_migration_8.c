/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 8: errand.enqueue (and enqueue_job, enqueue_bulk)
 * follows core's job id rule (er_job_id_check): a job id a client gives is
 * at most ER_JOB_ID_MAX bytes and does not end in "-redrive-" and digits,
 * the form of redriven copies. _check_id checks every id field; only the
 * field `id` gets the extra rule, so idempotency keys and trace ids keep
 * theirs.
 */
#include "core/job.h"
#include "store/postgres/pg_int.h"

#define STR_(x) #x
#define STR(x) STR_(x)

const char er_pg_migration_8[] =
    "CREATE OR REPLACE FUNCTION _check_id(l limits, v jsonb, at text, field text) RETURNS text\n"
    " LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$\n"
    "DECLARE s text;\n"
    "BEGIN\n"
    " IF jsonb_typeof(v) <> 'string' THEN PERFORM _raise(l, at || field, field || ' must be a string'); END IF;\n"
    " s := v #>> '{}';\n"
    " IF octet_length(s) NOT BETWEEN 1 AND l.id_max OR s !~ '^[!-.0-~]*$' THEN\n"
    "  PERFORM _raise(l, at || field, field || ' must be 1..' || l.id_max\n"
    "   || ' printable ASCII characters without spaces or ''/''');\n"
    " END IF;\n"
    " IF field = 'id' AND octet_length(s) > " STR(ER_JOB_ID_MAX) " THEN\n"
    "  PERFORM _raise(l, at || field, field || ' must be at most " STR(ER_JOB_ID_MAX)
    " bytes (a redriven copy adds up to " STR(ER_REDRIVE_SUFFIX_MAX) ")');\n"
    " END IF;\n"
    " IF field = 'id' AND s ~ '-redrive-[0-9]+$' THEN\n"
    "  PERFORM _raise(l, at || field, field || ' may not end in -redrive- and a number: that is '\n"
    "   || 'the id of a redriven copy ({id}-redrive-{n})');\n"
    " END IF;\n"
    " RETURN s;\n"
    "END $f$;\n";
