/* SPDX-License-Identifier: MIT
 *
 * Unit tests for the job state machine (ARCHITECTURE.md §2): state names,
 * parsing, and every (state, event) pair, allowed or refused.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/job.h"

#define S_SCH ER_STATE_SCHEDULED
#define S_WAI ER_STATE_WAITING
#define S_ACT ER_STATE_ACTIVE
#define S_COM ER_STATE_COMPLETED
#define S_DEA ER_STATE_DEAD
#define S_CAN ER_STATE_CANCELLED

Test(state, names_match_the_api)
{
    cr_assert_str_eq(er_state_name(S_SCH), "scheduled");
    cr_assert_str_eq(er_state_name(S_WAI), "waiting");
    cr_assert_str_eq(er_state_name(S_ACT), "active");
    cr_assert_str_eq(er_state_name(S_COM), "completed");
    cr_assert_str_eq(er_state_name(S_DEA), "dead");
    cr_assert_str_eq(er_state_name(S_CAN), "cancelled");
}

Test(state, out_of_range_name_is_null)
{
    cr_assert_null(er_state_name((er_state)6));
    cr_assert_null(er_state_name((er_state)-1));
}

Test(state, parse_round_trips_every_name)
{
    for (int i = 0; i <= 5; i++) {
        er_state s = (er_state)99;
        cr_assert_eq(er_state_parse(er_state_name((er_state)i), &s), 0);
        cr_assert_eq((int)s, i);
    }
}

Test(state, parse_refuses_unknown_names)
{
    er_state s = S_WAI;
    cr_assert_eq(er_state_parse("Waiting", &s), ER_EINVAL);
    cr_assert_eq(er_state_parse("", &s), ER_EINVAL);
    cr_assert_eq(er_state_parse("failed", &s), ER_EINVAL);
    cr_assert_eq(er_state_parse(NULL, &s), ER_EINVAL);
    cr_assert_eq(s, S_WAI, "a failed parse leaves the output alone");
}

/* expected[from][event]: the one state machine, -1 = refused. */
#define NEV 10
static const int expected[6][NEV] = {
    /*     PROMOTE FETCH COMPLETE RETRY KILL RELEASE STALL CANCEL RUN_NOW BURY */
    [S_SCH] = {S_WAI, -1, -1, -1, -1, -1, -1, S_CAN, S_WAI, S_DEA},
    [S_WAI] = {-1, S_ACT, -1, -1, -1, -1, -1, S_CAN, -1, -1},
    [S_ACT] = {-1, -1, S_COM, S_SCH, S_DEA, S_WAI, S_WAI, -1, -1, -1},
    [S_COM] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
    [S_DEA] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
    [S_CAN] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
};

Test(state, every_pair_follows_the_table)
{
    for (int s = 0; s < 6; s++)
        for (int e = 0; e < NEV; e++)
            cr_assert_eq(er_state_next((er_state)s, (er_event)e), expected[s][e],
                         "from %s on event %d", er_state_name((er_state)s), e);
}

Test(state, scheduled_is_promoted_to_waiting)
{
    cr_assert_eq(er_state_next(S_SCH, ER_EV_PROMOTE), S_WAI);
}

Test(state, only_waiting_jobs_are_fetched)
{
    cr_assert_eq(er_state_next(S_WAI, ER_EV_FETCH), S_ACT);
    cr_assert_eq(er_state_next(S_SCH, ER_EV_FETCH), -1);
    cr_assert_eq(er_state_next(S_ACT, ER_EV_FETCH), -1);
}

Test(state, active_job_cannot_be_cancelled)
{
    cr_assert_eq(er_state_next(S_ACT, ER_EV_CANCEL), -1);
}

Test(state, finished_states_are_final)
{
    er_state fin[] = {S_COM, S_DEA, S_CAN};
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < NEV; e++)
            cr_assert_eq(er_state_next(fin[i], (er_event)e), -1);
}

Test(state, finished_means_no_event_leaves_the_state)
{
    for (int s = 0; s < 6; s++) {
        bool final = true;
        for (int e = 0; e < NEV; e++)
            final = final && expected[s][e] == -1;
        cr_assert_eq(er_state_finished((er_state)s), final, "%s", er_state_name((er_state)s));
    }
    cr_assert(er_state_finished(S_COM) && er_state_finished(S_DEA) && er_state_finished(S_CAN));
    cr_assert(!er_state_finished((er_state)6));
}

Test(state, retry_goes_back_to_scheduled_and_kill_to_dead)
{
    cr_assert_eq(er_state_next(S_ACT, ER_EV_RETRY), S_SCH);
    cr_assert_eq(er_state_next(S_ACT, ER_EV_KILL), S_DEA);
}

Test(state, release_and_stall_return_to_waiting)
{
    cr_assert_eq(er_state_next(S_ACT, ER_EV_RELEASE), S_WAI);
    cr_assert_eq(er_state_next(S_ACT, ER_EV_STALL), S_WAI);
    cr_assert_eq(er_state_next(S_WAI, ER_EV_STALL), -1);
}

Test(state, an_operator_runs_or_buries_only_scheduled_jobs)
{
    cr_assert_eq(er_state_next(S_SCH, ER_EV_RUN_NOW), S_WAI);
    cr_assert_eq(er_state_next(S_SCH, ER_EV_BURY), S_DEA);
    cr_assert_eq(er_state_next(S_WAI, ER_EV_BURY), -1);
    cr_assert_eq(er_state_next(S_ACT, ER_EV_RUN_NOW), -1);
}

Test(state, unknown_event_is_refused)
{
    cr_assert_eq(er_state_next(S_ACT, (er_event)42), -1);
}
