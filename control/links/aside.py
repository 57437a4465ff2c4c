"""Setting an interface aside: out of its name's way at once, deleted a moment later.

Deleting a veth costs the kernel an RCU grace period (unregistering a device
waits in synchronize_net with the rtnl lock held); taking one down and
renaming it is far cheaper. When a pod restarts, its peer pod still holds its end of the
old pair under the link's name until the dead pod's netns is torn down, and
the new pair needs that name now. `Reaper.set_aside` frees it without the wait:
the interface is taken down, renamed `iface_names.aside_name(ifindex)` (it keeps its
mark) and stripped of its addresses, and the reaper deletes it from a thread of
its own once the caller is done.

What a caller may rely on:

- When `set_aside` returns, the name is free and the interface is down with no
  address left, so no two interfaces of the netns ever hold one address. An
  interface already gone is success.
- The reaper deletes only an interface still under the aside name, still
  carrying the mark it was set aside with, in the very netns it was set aside
  in: the one at the same path with the same identity. A netns gone from its
  path meanwhile is left as it is (a pod's netns torn down takes its
  interfaces along). Nothing else is ever touched, and nothing is held open
  while a deletion waits.
- Each deletion starts `REAP_DELAY` after its `set_aside`: a deletion holds the
  rtnl lock for its grace period, and the caller's next requests (the new pair, its
  addresses) need that lock.
- A failed deletion is retried with backoff, `REAP_ATTEMPTS` times in all, then
  left to pruning; so is an aside interface a crash left between the rename
  and the deletion: it is marked and no row wants its name, so the next full
  pass (`reconcile/prune.py`) deletes it. None survives a full pass.
- The reaper's thread runs only while deletions are pending. `flush` deletes
  what is pending without waiting out the delays (the daemon's stop); a
  process that exits with some pending leaves them to the next run's pruning,
  as a crash does.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

from pyroute2.netlink.exceptions import NetlinkError

from . import iface, rtnl
from .iface_names import Mark, aside_name
from .netns import Netlink, Netns, NetnsGone, NotANetns, netlink, open_netns

log = logging.getLogger(__name__)

# Wait this long before deleting what was set aside: the caller builds the new
# link within a few ms, and a deletion would hold the rtnl lock it needs.
REAP_DELAY = 0.2
# Attempts at one deletion, REAP_DELAY doubling between them (0.2 s to 3.2 s):
# a deletion fails only on a kernel error; pruning takes over after the last.
REAP_ATTEMPTS = 5


@dataclass(order=True)
class _Aside:
    due: float
    seq: int
    # The netns it was set aside in: its path, and its identity there then.
    path: str = field(compare=False)
    identity: tuple[int, int] = field(compare=False)
    name: str = field(compare=False)
    mark: Mark = field(compare=False)
    attempts: int = field(default=0, compare=False)


class Reaper:
    def __init__(self, delay: float = REAP_DELAY, attempts: int = REAP_ATTEMPTS) -> None:
        self._delay = delay
        self._attempts = attempts
        self._seq = itertools.count()
        self._cond = threading.Condition()
        # Entries waiting for their `due` time (a heap), and how many are being
        # deleted now (0 or 1: one thread). `_running` is set under `_cond` when
        # the thread starts, cleared by the thread itself when nothing is pending.
        self._pending: list[_Aside] = []
        self._deleting = 0
        self._running = False

    def set_aside(self, ipr: Netlink, ns: Netns, found: iface.Iface) -> None:
        """Free `found`'s name in `ns` (`ipr` talks to it) now, and delete it later.

        `found` must carry a mark: the reaper deletes only what still carries it.
        An aside name already taken (by nothing meshwire made) leaves no way
        around the wait: `found` is then deleted here and now.
        """
        assert found.mark is not None, "only a marked interface is set aside"
        name = aside_name(found.index)
        try:
            try:
                iface.set_link(ipr, found.index, name=name, down=True)
            except NetlinkError as exc:
                if exc.code != errno.EBUSY:
                    raise
                # Kernels before 6.x refuse to rename an interface that is up.
                iface.set_link(ipr, found.index, down=True)
                iface.set_link(ipr, found.index, name=name)
            for address in iface.addresses(ipr, found.index):
                _remove_address(ipr, address)
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return  # gone meanwhile (a dying netns takes its veths' peers)
            if exc.code != errno.EEXIST:
                raise
            iface.delete(ipr, found.index)
            return
        self._schedule(_Aside(0.0, next(self._seq), ns.path, ns.identity, name, found.mark))

    def flush(self, timeout: float) -> bool:
        """Delete everything pending now, without its delay, and wait for that
        (`settle`); whether it was done in time. Later entries wait as usual."""
        with self._cond:
            for entry in self._pending:
                entry.due = 0.0
            heapq.heapify(self._pending)
            self._cond.notify_all()
        return self.settle(timeout)

    def settle(self, timeout: float) -> bool:
        """Wait until nothing is pending or being deleted; whether that happened in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._deleting:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _schedule(self, entry: _Aside) -> None:
        entry.due = time.monotonic() + self._delay * 2**entry.attempts
        with self._cond:
            heapq.heappush(self._pending, entry)
            self._cond.notify_all()
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="reaper", daemon=True).start()

    def _run(self) -> None:
        while (entry := self._next()) is not None:
            deleted = self._delete(entry)
            entry.attempts += 1
            if not deleted and entry.attempts >= self._attempts:
                log.warning(
                    "gave up deleting %s in %s (link %s); the next full pass prunes it",
                    entry.name,
                    entry.path,
                    entry.mark.link,
                )
            elif not deleted:
                self._schedule(entry)
            with self._cond:
                self._deleting -= 1
                self._cond.notify_all()

    def _next(self) -> _Aside | None:
        """The next entry once it is due (counted as being deleted); None ends the thread."""
        with self._cond:
            while True:
                if not self._pending:
                    self._running = False
                    self._cond.notify_all()
                    return None
                wait = self._pending[0].due - time.monotonic()
                if wait <= 0:
                    self._deleting += 1
                    return heapq.heappop(self._pending)
                self._cond.wait(wait)

    def _delete(self, entry: _Aside) -> bool:
        """Delete `entry`'s interface if it is still there as set aside; whether that is done."""
        try:
            with open_netns(entry.path) as ns:
                if ns.identity != entry.identity:
                    return True
                with netlink(ns) as ipr:
                    found = iface.find(ipr, entry.name)
                    if found is not None and found.mark == entry.mark:
                        iface.delete(ipr, found.index)
        except (NetnsGone, NotANetns):
            return True
        except (NetlinkError, OSError) as exc:
            log.info("deleting %s in %s failed: %s", entry.name, entry.path, exc)
            return False
        return True


def _remove_address(ipr: Netlink, address: rtnl.Address) -> None:
    try:
        ipr.rtnl.request(rtnl.del_address(address))
    except NetlinkError as exc:
        # Already gone: removing a primary IPv4 address takes its secondaries along.
        if exc.code != errno.EADDRNOTAVAIL:
            raise
