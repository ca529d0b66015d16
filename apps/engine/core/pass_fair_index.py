"""Fair reclaim's index of victims (`pass_fair`): the running work of each fair parent's children
that are above their share when the phase first needs it, in placement order, on every pool and by
pool, and what each child's lists still hold, so that a fair reclaim that cannot succeed is refused
before it takes anything (`_fair_cannot`).

The index is built once, when first asked for: work stopped before then is left out, and only the
children above their share then are listed (one above it only falls in the phase). What the lists
hold is counted when a refusal first needs it and kept as victims are stopped.
"""

from __future__ import annotations

from itertools import compress
from operator import and_, not_

from .pass_reclaim import ReclaimPhase


class FairIndex(ReclaimPhase):
    def _fair_frozen(self) -> None:
        """On first use: the listed children under each fair parent, and their work then running,
        in placement order, on every pool and by pool (`fair_at`), with the pools it is on."""
        if self.fair_members is not None:
            return
        U, res, share, children = self.U, self.res, self.share, self.children
        members = self.fair_members = {}
        within: dict[int, list[int]] = {}  # policy -> the listed children it is in
        parent_of: dict[int, int] = {}
        for parent in self.fair_parents:
            listed = [m for m in children[parent] if m in share and U[m] - res[m] > share[m]]
            members[parent] = listed
            for m in listed:
                parent_of[m] = parent
                for q in self._subtree(m):
                    within.setdefault(q, []).append(m)
        cr_pol, run_pool, sizes, gone = self.cr_pol, self.run_pool, self.run_size, self.gone
        pol = list(map(cr_pol.__getitem__, self.run_cr))
        listed_pol = bytearray(len(self.res))
        for q in within:
            listed_pol[q] = 1
        live = map(and_, map(listed_pol.__getitem__, pol), map(bool, sizes))
        ks = compress(range(len(pol)), map(and_, live, map(not_, gone)))
        every: dict[int, list[int]] = {m: [] for m in parent_of}
        cells: dict[int, list[int]] = {}
        wide = len(self.cap)
        for k in ks:
            pi = run_pool[k]
            for m in within[pol[k]]:
                every[m].append(k)
                on = cells.get(m * wide + pi)
                if on is None:
                    cells[m * wide + pi] = [k]
                else:
                    on.append(k)
        at = self.fair_at
        for parent, listed in members.items():
            at[parent] = ({m: every[m] for m in listed}, {}, {}, {})
        for cell, on in cells.items():
            m, pi = divmod(cell, wide)
            at[parent_of[m]][1].setdefault(pi, {})[m] = on

    def _fair_parent(self, parent: int) -> tuple:
        """The parent's lists: on every pool (child -> work), by pool (pool -> child -> work), and
        what each still holds (child -> [GPUs of work not stopped, largest task]) on every pool
        and by pool (pool -> child -> ...), those two filled by `_held`."""
        self._fair_frozen()
        return self.fair_at.get(parent) or ({}, {}, {}, {})

    def _over_pools(self, parent: int) -> set[int]:
        """The pools where the parent's listed children run listed work (a superset of where
        victims can be found as the phase goes on)."""
        got = self.over_at.get(parent)
        if got is None:
            got = self.over_at[parent] = set(self._fair_parent(parent)[1])
        return got

    def _fair_lists(self, parent: int, pi: int | None) -> dict[int, list[int]]:
        """The listed work of each listed child of `parent`, in placement order: on pool pi, or on
        every pool (pi None); work stopped since is skipped when read."""
        every, by_pool, _, _ = self._fair_parent(parent)
        return every if pi is None else by_pool.get(pi, {})

    def _fair_gone(self, k: int) -> None:
        """Victim k is stopped for good: the GPUs held by the lists it is in fall by its size."""
        size, pi, at = self.run_size[k], self.run_pool[k], self.fair_at
        chain = self.chain[self.cr_pol[self.run_cr[k]]]
        for m, parent in zip(chain, chain[1:], strict=False):
            lists = at.get(parent)
            if lists is not None and m in lists[0]:
                held = lists[2].get(m)
                if held is not None:
                    held[0] -= size
                held = lists[3].get(pi, {}).get(m)
                if held is not None:
                    held[0] -= size

    def _held(self, lists: tuple, m: int, pi: int) -> list[int]:
        """[GPUs, largest task] of m's listed work not stopped: on pool pi, or everywhere (-1)."""
        every, by_pool, every_held, pool_held = lists
        held = every_held if pi < 0 else pool_held.setdefault(pi, {})
        got = held.get(m)
        if got is None:
            ks = every.get(m, ()) if pi < 0 else by_pool.get(pi, {}).get(m, ())
            gone, sizes = self.gone, self.run_size
            live = [sizes[k] for k in ks if not gone[k]]
            got = held[m] = [sum(live), max(live, default=0)]
        return got

    def _fair_cannot(self, parent: int, pi: int, s: int, floor: int, short_above: bool, cursor) -> bool:
        """Whether a fair reclaim of a task of size s on pool pi surely fails: even if every sibling
        in `cursor` gave all it could, the pool (and, short_above, the parent's chain) would still
        lack room. A sibling m gives its listed work (on pi, or anywhere when short_above) while it
        is further above its share than `floor`, never below its reservation: at most what its
        lists hold, U - res, and its excess over the floor less one milli-GPU plus its largest task
        there. The siblings give independently of each other, so this is exact enough to refuse
        only what the selection itself would refuse."""
        U, res, share, held_by = self.U, self.res, self.share, self._held
        lists = self._fair_parent(parent)
        room = self.cap[pi] - self.occ[pi]
        if not short_above:
            for m in cursor:
                held, big = held_by(lists, m, pi)
                room += min(held, U[m] - res[m], U[m] - res[m] - share[m] - floor - 1 + big)
                if room >= s:
                    return False
            return True
        give = 0
        for m in cursor:
            held, big = held_by(lists, m, -1)
            most = min(held, U[m] - res[m], U[m] - res[m] - share[m] - floor - 1 + big)
            give += most
            room += min(held_by(lists, m, pi)[0], most)
        return room < s or any(self.lim[a] - U[a] + give < s for a in self.chain[parent])
