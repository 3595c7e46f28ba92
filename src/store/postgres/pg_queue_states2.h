/* SPDX-License-Identifier: MIT
 *
 * The fetch's first round trip, queue_states2 (core/fetch.h's inputs of
 * each queue), as migration 6 created it (verb "CREATE") and migration 14
 * replaced it ("CREATE OR REPLACE"): active_queue is how the count of a
 * queue's active jobs names j.queue (migration 14: in byte order, the key
 * of jobs_queue_state).
 */
#ifndef ERRAND_STORE_POSTGRES_PG_QUEUE_STATES2_H
#define ERRAND_STORE_POSTGRES_PG_QUEUE_STATES2_H

#define ER_PG_QUEUE_STATES2(verb, active_queue) \
    verb " FUNCTION queue_states2(p_queues text[])\n"                                              \
    " RETURNS TABLE (paused boolean, throttled_until bigint, concurrency integer, active bigint,\n" \
    "  lease_ms bigint, rate_max bigint, rate_per_ms bigint, rate_burst bigint, rate_tat bigint,\n" \
    "  grouped boolean, planned boolean, settings text)\n"                                         \
    " LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$\n"                                      \
    "DECLARE v_q text; v_r queues;\n"                                                              \
    "BEGIN\n"                                                                                      \
    " FOREACH v_q IN ARRAY p_queues LOOP\n"                                                        \
    "  SELECT * INTO v_r FROM queues q WHERE q.name = v_q;\n"                                      \
    "  IF FOUND AND (v_r.concurrency > 0 OR v_r.rate_max > 0 OR v_r.group_limited) THEN\n"         \
    "   SELECT * INTO v_r FROM queues q WHERE q.name = v_q FOR UPDATE; /* its latest version */\n" \
    "  END IF;\n"                                                                                  \
    "  paused := coalesce(v_r.paused, false);\n"                                                   \
    "  throttled_until := coalesce(v_r.throttled_until, 0);\n"                                     \
    "  concurrency := coalesce(v_r.concurrency, 0);\n"                                             \
    "  lease_ms := coalesce(v_r.lease_ms, 0);\n"                                                   \
    "  rate_max := coalesce(v_r.rate_max, 0);\n"                                                   \
    "  rate_per_ms := coalesce(v_r.rate_per_ms, 0);\n"                                             \
    "  rate_burst := coalesce(v_r.rate_burst, 1);\n"                                               \
    "  rate_tat := coalesce(v_r.rate_tat, 0);\n"                                                   \
    "  active := 0;\n"                                                                             \
    "  IF concurrency > 0 THEN\n"                                                                  \
    "   SELECT count(*) INTO active FROM jobs j WHERE " active_queue " = v_q AND j.state = 2;\n"   \
    "  END IF;\n"                                                                                  \
    "  grouped := EXISTS (SELECT 1 FROM jobs j WHERE j.queue = v_q AND j.state = 1\n"              \
    "   AND j.grp IS NOT NULL);\n"                                                                 \
    "  planned := grouped OR coalesce(v_r.group_limited OR v_r.aged, false);\n"                    \
    "  settings := CASE WHEN planned THEN v_r.settings END;\n"                                     \
    "  RETURN NEXT;\n"                                                                             \
    " END LOOP;\n"                                                                                 \
    "END $f$;\n"

#endif
