/* SPDX-License-Identifier: MIT
 *
 * Unit tests for run-once leases (core/lease.h): deterministic idempotency
 * keys with unambiguous framing, part and ttl validation, and the rules of
 * acquire, renew, complete, release and reclaim after expiry, with the
 * clock and the random source injected.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/lease.h"

#define T0 1790000000000LL

static er_rand R;
static er_error err;

static void setup(void)
{
    er_rand_init_seeded(&R, 7);
    er_error_clear(&err);
}

TestSuite(lease, .init = setup);

static void key_of(const char *t, const char *c, const char *k, char out[ER_LEASE_KEY_SIZE])
{
    cr_assert_eq(er_lease_key(t, c, k, out, &err), 0, "%s", err.message);
}

Test(lease, identical_inputs_give_identical_keys)
{
    char a[ER_LEASE_KEY_SIZE], b[ER_LEASE_KEY_SIZE];
    key_of("schedule", "daily-billing", "2026-11-30", a);
    key_of("schedule", "daily-billing", "2026-11-30", b);
    cr_assert_str_eq(a, b);
    cr_assert_eq(strlen(a), 35);
    cr_assert_eq(strncmp(a, "ik_", 3), 0);
    for (size_t i = 3; i < 35; i++)
        cr_assert(strchr("0123456789abcdef", a[i]), "non-hex in %s", a);
}

Test(lease, key_is_stable_across_releases)
{
    /* the key is part of the contract: it must never change for these inputs */
    char a[ER_LEASE_KEY_SIZE];
    key_of("schedule", "daily-billing", "2026-11-30", a);
    /* sha256(be32 len + "errand-lease-v1", then each part framed the same) */
    cr_assert_str_eq(a, "ik_627dd425705e405cc3e46397d8a5e2ff");
    char other[ER_LEASE_KEY_SIZE];
    key_of("schedule", "daily-billing", "2026-12-01", other);
    cr_assert_str_neq(a, other);
}

Test(lease, different_run_keys_types_or_codes_give_different_keys)
{
    char a[ER_LEASE_KEY_SIZE], b[ER_LEASE_KEY_SIZE], c[ER_LEASE_KEY_SIZE], d[ER_LEASE_KEY_SIZE];
    key_of("schedule", "billing", "2026-11-30", a);
    key_of("schedule", "billing", "2026-11-29", b);
    key_of("report", "billing", "2026-11-30", c);
    key_of("schedule", "billing2", "2026-11-30", d);
    cr_assert_str_neq(a, b);
    cr_assert_str_neq(a, c);
    cr_assert_str_neq(a, d);
}

Test(lease, framing_is_unambiguous)
{
    char a[ER_LEASE_KEY_SIZE], b[ER_LEASE_KEY_SIZE], c[ER_LEASE_KEY_SIZE];
    key_of("ab", "c", "x", a);
    key_of("a", "bc", "x", b);
    key_of("a", "b", "cx", c);
    cr_assert_str_neq(a, b);
    cr_assert_str_neq(a, c);
    cr_assert_str_neq(b, c);
}

Test(lease, empty_or_bad_parts_are_refused_naming_the_field)
{
    char k[ER_LEASE_KEY_SIZE];
    cr_assert_eq(er_lease_key("schedule", "", "r", k, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "code");
    cr_assert_eq(er_lease_key("", "c", "r", k, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "type");
    cr_assert_eq(er_lease_key("t", "c", NULL, k, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "run_key");
    cr_assert_eq(er_lease_key("t", "c\n", "r", k, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "code");
    char big[ER_LEASE_PART_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_assert_eq(er_lease_key("t", "c", big, k, &err), ER_EINVAL);
    big[ER_LEASE_PART_MAX] = '\0';
    cr_assert_eq(er_lease_key("t", "c", big, k, &err), 0);
}

Test(lease, ttl_range_is_one_second_to_one_day)
{
    cr_assert_eq(er_lease_ttl_validate(999, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "ttl_ms");
    cr_assert_eq(er_lease_ttl_validate(1000, &err), 0);
    cr_assert_eq(er_lease_ttl_validate(ER_LEASE_TTL_MAX_MS, &err), 0);
    cr_assert_eq(er_lease_ttl_validate(ER_LEASE_TTL_MAX_MS + 1, &err), ER_EINVAL);
}

Test(lease, first_acquire_gets_fence_one_and_a_token)
{
    er_lease l;
    er_lease_init(&l, "ik_x");
    cr_assert_eq(er_lease_acquire(&l, T0, 60000), 0);
    cr_assert_eq(l.state, ER_LEASE_HELD);
    cr_assert_eq(l.fence, 1);
    cr_assert_eq(l.expires_at, T0 + 60000);
    cr_assert_eq(strlen(l.owner_token), 32);
}

Test(lease, held_lease_refuses_a_second_owner)
{
    er_lease l;
    er_lease_init(&l, "ik_x");
    cr_assert_eq(er_lease_acquire(&l, T0, 60000), 0);
    er_lease before = l;
    cr_assert_eq(er_lease_acquire(&l, T0 + 59999, 60000), ER_ECONFLICT);
    cr_assert_eq(memcmp(&before, &l, sizeof l), 0, "a refused acquire changed the lease");
    cr_assert_eq(er_lease_state_at(&l, T0 + 59999), ER_LEASE_HELD);
}

Test(lease, reclaim_rotates_owner_but_keeps_key)
{
    er_lease l;
    er_lease_init(&l, "ik_abc");
    cr_assert_eq(er_lease_acquire(&l, T0, 60000), 0);
    er_lease a = l;
    /* a's lease expires: judged by the injected clock */
    cr_assert_eq(er_lease_acquire(&l, T0 + 60000, 60000), 0);
    er_lease b = l;
    cr_assert_str_eq(a.idempotency_key, b.idempotency_key);
    cr_assert_str_neq(a.owner_token, b.owner_token);
    cr_assert_gt(b.fence, a.fence);
    cr_assert_eq(er_lease_renew(&l, a.owner_token, T0 + 60001, 60000), ER_ESTALE);
    cr_assert_eq(er_lease_complete(&l, a.owner_token, T0 + 60001), ER_ESTALE);
    cr_assert_eq(er_lease_release(&l, a.owner_token, T0 + 60001), ER_ESTALE);
    cr_assert_eq(memcmp(&b, &l, sizeof l), 0, "a stale owner changed the lease");
}

Test(lease, renew_extends_only_for_the_live_owner)
{
    er_lease l;
    er_lease_init(&l, "ik_x");
    cr_assert_eq(er_lease_acquire(&l, T0, 10000), 0);
    char tok[ER_LEASE_TOKEN_SIZE];
    memcpy(tok, l.owner_token, sizeof tok);
    cr_assert_eq(er_lease_renew(&l, tok, T0 + 9000, 10000), 0);
    cr_assert_eq(l.expires_at, T0 + 19000);
    cr_assert_eq(er_lease_renew(&l, "ffffffffffffffffffffffffffffffff", T0 + 9000, 10000),
                 ER_ESTALE);
    cr_assert_eq(er_lease_renew(&l, tok, T0 + 19000, 10000), ER_ESTALE, "expired lease renewed");
    cr_assert_eq(er_lease_renew(&l, "", T0, 10000), ER_ESTALE);
}

Test(lease, completed_key_answers_done_forever)
{
    er_lease l;
    er_lease_init(&l, "ik_x");
    cr_assert_eq(er_lease_acquire(&l, T0, 10000), 0);
    char tok[ER_LEASE_TOKEN_SIZE];
    memcpy(tok, l.owner_token, sizeof tok);
    cr_assert_eq(er_lease_complete(&l, tok, T0 + 5000), 0);
    cr_assert_eq(l.state, ER_LEASE_DONE);
    cr_assert_eq(l.completed_at, T0 + 5000);
    cr_assert_eq(er_lease_acquire(&l, T0 + 5001, 10000), ER_ECONFLICT);
    cr_assert_eq(er_lease_acquire(&l, T0 + 100LL * 24 * 3600 * 1000, 10000), ER_ECONFLICT);
    cr_assert_eq(er_lease_state_at(&l, T0 + 100LL * 24 * 3600 * 1000), ER_LEASE_DONE);
    /* a retried complete by the same owner is fine; renew and release are not */
    cr_assert_eq(er_lease_complete(&l, tok, T0 + 6000), 0);
    cr_assert_eq(l.completed_at, T0 + 5000);
    cr_assert_eq(er_lease_renew(&l, tok, T0 + 6000, 10000), ER_ESTALE);
    cr_assert_eq(er_lease_release(&l, tok, T0 + 6000), ER_ESTALE);
    cr_assert_eq(er_lease_complete(&l, "00000000000000000000000000000000", T0 + 6000),
                 ER_ESTALE);
}

Test(lease, release_frees_at_once_and_the_next_owner_gets_a_larger_fence)
{
    er_lease l;
    er_lease_init(&l, "ik_x");
    cr_assert_eq(er_lease_acquire(&l, T0, 60000), 0);
    char tok[ER_LEASE_TOKEN_SIZE];
    memcpy(tok, l.owner_token, sizeof tok);
    cr_assert_eq(er_lease_release(&l, tok, T0 + 1), 0);
    cr_assert_eq(l.state, ER_LEASE_FREE);
    cr_assert_str_eq(l.owner_token, "");
    cr_assert_eq(er_lease_release(&l, tok, T0 + 2), ER_ESTALE);
    cr_assert_eq(er_lease_acquire(&l, T0 + 2, 60000), 0);
    cr_assert_eq(l.fence, 2);
    cr_assert_str_neq(l.owner_token, tok);
}

Test(lease, expired_owner_cannot_complete)
{
    er_lease l;
    er_lease_init(&l, "ik_x");
    cr_assert_eq(er_lease_acquire(&l, T0, 1000), 0);
    char tok[ER_LEASE_TOKEN_SIZE];
    memcpy(tok, l.owner_token, sizeof tok);
    cr_assert_eq(er_lease_complete(&l, tok, T0 + 1000), ER_ESTALE);
    cr_assert_eq(l.state, ER_LEASE_HELD); /* stored state unchanged; reads as free */
    cr_assert_eq(er_lease_state_at(&l, T0 + 1000), ER_LEASE_FREE);
}
