"""Fair sharing of what a parent's children borrow above their reservations (lending "fair").

One owner of the rule, called by the pass and by the pages that show a team's fair share:
`fair_shares(available, claims)` splits `available` milli-GPUs among children in proportion to
their over-quota weights, each capped at what it can use (its limit above its reservation, and
what it wants: its borrowed GPUs plus its waiting work); a child's unused part goes to the others
(weighted max-min, "water-filling"). Children of weight 0 share only what the weighted ones leave,
equally. Integer milli-GPUs throughout; a remainder too small to split goes one milli-GPU at a
time to the children in the order given, so the result is exact and deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Claim:
    """One child: `weight` in milli-weights; `cap` the most it can borrow (milli-GPUs)."""

    weight: int
    cap: int


def fair_shares(available: int, claims: list[Claim]) -> list[int]:
    """Each child's fair share of `available` borrowed milli-GPUs, in the order of `claims`."""
    shares = [0] * len(claims)
    left = max(0, available)
    weighted = [i for i, c in enumerate(claims) if c.weight > 0 and c.cap > 0]
    left = _fill(left, weighted, [claims[i].weight for i in weighted], claims, shares)
    rest = [i for i, c in enumerate(claims) if c.weight == 0 and c.cap > 0]
    _fill(left, rest, [1] * len(rest), claims, shares)
    return shares


def _fill(left: int, members: list[int], weights: list[int], claims: list[Claim], shares: list[int]) -> int:
    """Water-fill `left` over `members` by `weights`; returns what is left over."""
    active = dict(zip(members, weights, strict=True))
    while left > 0 and active:
        total = sum(active.values())
        capped = [i for i, w in active.items() if claims[i].cap - shares[i] <= left * w // total]
        if capped:
            for i in capped:
                left -= claims[i].cap - shares[i]
                shares[i] = claims[i].cap
                del active[i]
            continue
        given = 0
        for i, w in active.items():
            part = left * w // total
            shares[i] += part
            given += part
        left -= given
        for i in list(active):
            if left == 0:
                break
            shares[i] += 1
            left -= 1
            if shares[i] == claims[i].cap:
                del active[i]
    return left
