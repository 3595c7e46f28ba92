# SPDX-License-Identifier: MIT
#
# The attack on predictable lease tokens (issue 16 item 1), run for real.
# Tokens used to be two outputs of xorshift128+ in hex. The low bit of an
# output is the XOR of two state bits, and each step is linear over GF(2),
# so the low bits of 80 tokens (160 outputs) are 160 linear equations in the
# 128 bits of the state: Gaussian elimination recovers it, and the next
# tokens follow. The test keeps that old generator as a reference — the
# recovery must succeed against it — then takes 80 lease tokens from a real
# server as one worker, predicts the next ones the same way, and tries them
# on another worker's job in another queue: every try must be refused and
# that worker's own token must still work.

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

M64 = (1 << 64) - 1


def old_next(s):
    """The old generator's step (src/util/clock.c, xorshift_next): s is
    [state0, state1]; returns the output."""
    s1, s0 = s[0], s[1]
    s[0] = s0
    s1 ^= (s1 << 23) & M64
    s[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26)
    return (s[1] + s0) & M64


def old_token(s):
    return "%016x%016x" % (old_next(s), old_next(s))


def halves(token):
    return int(token[:16], 16), int(token[16:32], 16)


def sym_next(s):
    """old_next on symbols: each state bit is a 128-bit mask of the initial
    state's bits (state0 bit i is bit i, state1 bit i is bit 64 + i). Returns
    the mask of the output's low bit (the low bit of a sum is an XOR)."""
    s1, s0 = s[0], s[1]
    s[0] = s0
    x = [s1[i] ^ (s1[i - 23] if i >= 23 else 0) for i in range(64)]  # s1 ^= s1 << 23
    s[1] = [x[i] ^ s0[i] ^ (x[i + 17] if i + 17 < 64 else 0) ^
            (s0[i + 26] if i + 26 < 64 else 0) for i in range(64)]
    return s[1][0] ^ s0[0]


def recover(tokens, strict=True):
    """The initial state from the tokens' low bits, or None when the
    equations have no solution (or more than one). Not strict, equations
    that contradict the first ones are skipped: a best guess."""
    sym = [[1 << i for i in range(64)], [1 << (64 + i) for i in range(64)]]
    rows = []
    for t in tokens:
        for half in halves(t):
            rows.append((sym_next(sym), half & 1))
    pivots = {}  # pivot bit -> (mask, value), reduced
    for mask, val in rows:
        for bit, (pm, pv) in pivots.items():
            if mask >> bit & 1:
                mask ^= pm
                val ^= pv
        if mask == 0:
            if val and strict:
                return None  # inconsistent: not this generator
            continue
        bit = mask.bit_length() - 1
        for b2, (pm, pv) in list(pivots.items()):
            if pm >> bit & 1:
                pivots[b2] = (pm ^ mask, pv ^ val)
        pivots[bit] = (mask, val)
    if len(pivots) < 128:
        return None
    state = 0
    for bit, (pm, pv) in pivots.items():
        if pv:
            state |= 1 << bit
    return [state & M64, state >> 64]


def predict(tokens, n, strict=True):
    """The n tokens after `tokens`, if the state can be recovered."""
    s = recover(tokens, strict)
    if s is None:
        return []
    for _ in tokens:
        old_token(s)
    return [old_token(s) for _ in range(n)]


class TokenAttack(unittest.TestCase):
    def test_the_attack_breaks_the_old_generator(self):
        rng = random.Random(20261201)
        for _ in range(3):
            s = [rng.getrandbits(64), rng.getrandbits(64)]
            tokens = [old_token(s) for _ in range(84)]
            self.assertEqual(predict(tokens[:80], 4), tokens[80:84])

    def test_the_attack_fails_against_the_servers_tokens(self):
        with Server() as srv:
            st, b, _ = srv.enqueue("mine", {"jobs": [{"name": "n", "id": "mine-%d" % i}
                                                     for i in range(80)]})
            self.assertEqual(st, 201, b)
            mine = []
            while len(mine) < 80:
                got = srv.fetch_jobs("mine", worker_id="attacker", max=80 - len(mine))
                self.assertTrue(got)
                mine += [j["lease_token"] for j in got]
            self.assertTrue(all(len(t) == 32 and int(t, 16) >= 0 for t in mine), mine[:3])
            st, b, _ = srv.enqueue("theirs", {"name": "pay", "id": "victim-1"})
            self.assertEqual(st, 201, b)
            [victim] = srv.fetch_jobs("theirs", worker_id="victim")
            self.assertIsNone(recover(mine), "160 random bits fit the old generator")
            guesses = predict(mine, 8, strict=False)
            self.assertEqual(len(guesses), 8)
            self.assertNotIn(victim["lease_token"], guesses)
            for g in guesses:
                st, b, _ = srv.complete("victim-1", g, {"forged": True})
                self.assertEqual(st, 409, b)
            self.assertEqual(srv.job("victim-1")["state"], "active")
            st, b, _ = srv.complete("victim-1", victim["lease_token"], {"ok": True})
            self.assertEqual(st, 200, b)
            self.assertEqual(srv.job("victim-1")["result"], {"ok": True})


if __name__ == "__main__":
    unittest.main()
