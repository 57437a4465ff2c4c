"""Lanes: keys whose rows share a network namespace, or a pod end, run one at a time.

The kernel serializes every link change under one lock (rtnl), so two
threads building links in the same pod netns gain nothing and lose a lot:
they spin on that lock and fight for the GIL on the same cores, so more
threads make one pod pair's links slower, not faster. Rows in different
namespaces still run in parallel: a restarted pod's links never wait behind
another pod pair's long pass, and one key waiting on the kernel (a deletion's
RCU grace period, a wire's handshake) holds up only its own namespaces.

`claim(key, netns)` takes every namespace the key's rows touch, or none: if
one is held by a running key, the key is parked behind that namespace and
whoever asked is free to take other work. `release(key, netns_of)` frees the
key's namespaces and, behind each, claims for the keys parked there in the
order they came until one holds it again: those keys are returned, to run
now. Each parked key is looked at once per release of its lane, so 1,500
keys behind one lane cost O(1) each, not a pass over all of them.
`follow(key, ...)` takes the keys at the front of the queues behind `key`'s
namespaces that touch nothing else, to run with it under its hold. Pure
bookkeeping: called from one thread (the reconciler's event loop), nothing
locks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable


class Lanes:
    def __init__(self) -> None:
        # netns -> the running key that holds it.
        self._holder: dict[str, str] = {}
        # running key -> the namespaces it holds.
        self._held: dict[str, frozenset[str]] = {}
        # netns -> keys parked until it is released, oldest first.
        self._parked: dict[str, deque[str]] = {}

    def claim(self, key: str, netns: Iterable[str]) -> bool:
        """Hold every namespace in `netns` ("" ignored) for `key` and say True; or, if
        another running key holds one of them, park `key` behind it and say False."""
        wanted = frozenset(ns for ns in netns if ns)
        for ns in sorted(wanted):
            holder = self._holder.get(ns)
            if holder is not None and holder != key:
                self._parked.setdefault(ns, deque()).append(key)
                return False
        for ns in wanted:
            self._holder[ns] = key
        self._held[key] = wanted
        return True

    def release(self, key: str, netns_of: Callable[[str], Iterable[str]]) -> list[str]:
        """Free what `key` holds; claim for the keys parked behind it (`netns_of(k)`:
        what key `k` touches now) and return those that now hold their namespaces."""
        freed = self._held.pop(key, frozenset())
        for ns in freed:
            if self._holder.get(ns) == key:
                del self._holder[ns]
        ready: list[str] = []
        for ns in sorted(freed):
            parked = self._parked.get(ns)
            # A key claimed here may hold `ns` again (it touches two freed lanes).
            while parked and ns not in self._holder:
                waiting = parked.popleft()
                if self.claim(waiting, netns_of(waiting)):
                    ready.append(waiting)
            if not parked:
                self._parked.pop(ns, None)
        return ready

    def follow(self, key: str, netns_of: Callable[[str], Iterable[str]], limit: int) -> list[str]:
        """Up to `limit` keys parked behind the namespaces `key` holds that touch none
        other (`netns_of`), from the front of each queue: they leave it, to run in
        `key`'s turn under its hold; `release(key)` ends it for them all."""
        held = self._held.get(key, frozenset())
        taken: list[str] = []
        for ns in sorted(held):
            parked = self._parked.get(ns)
            while parked and len(taken) < limit:
                if not {n for n in netns_of(parked[0]) if n} <= held:
                    break
                taken.append(parked.popleft())
            if parked is not None and not parked:
                del self._parked[ns]
        return taken

    def running(self) -> int:
        """How many keys hold their namespaces."""
        return len(self._held)

    def parked(self) -> int:
        """How many keys wait for a namespace."""
        return sum(len(keys) for keys in self._parked.values())
