"""Links are made only where this node's CNI put a pod: `GuardedDriver`.

A Topology status names the netns a pod runs in, and anyone who may patch
that status (on a cluster, `patch topologies/status`; in a lab, any local
user of an open API) could name any namespace on the node, the host's own
included. The daemon runs as root, so the status must never be what decides
where it acts. `GuardedDriver` wraps the link driver and asks the node's own
authority (the placement keeper, from the CNI ADDs in its sandbox store)
about every pod end's netns before passing a call on:

- build (`update`): each pod end's netns must be handed, i.e. a sandbox
  this node added is there, and the path still has the identity (st_dev,
  st_ino) the ADD found: a path re-pointed at another namespace is refused.
  A refusal is a `SpecError` on that row alone (its status and the pod's
  `plumbing_error` say it); the pod's other links are untouched. The row is
  tried again when it changes or at the next ADD of its pod.
- clear (`delete`, `move`, and the pruner's `owned`/`remove`): each pod end's
  netns must be handed, released (handed once, and still the same
  namespace), or gone (nothing is at its path: the driver touches no
  namespace for it, and still drops what it keeps of the link, a wire in
  the workers). Otherwise nothing is done and the call succeeds: the daemon
  built nothing there.

Each refusal is counted (`on_refused`) and logged naming the link, the
netns and the pod object. Ends without a netns (a vxlan's or wire's far end,
a macvlan's host interface) are the node's own and not asked about.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Protocol

from meshwire.control.links.driver import LinkDriver, OwnedInterface
from meshwire.control.links.driver_errors import SpecError
from meshwire.control.links.netns import identity_of
from meshwire.control.tables.links import End, LinkRow

log = logging.getLogger(__name__)


class NetnsAuthority(Protocol):
    """Which namespaces this node's CNI handed the daemon (placements.PlacementKeeper)."""

    def handed(self, netns: str) -> bool: ...

    def was_handed(self, netns: str) -> bool: ...


class GuardedDriver:
    """A `LinkDriver` that acts only in namespaces `authority` vouches for.

    Until `authority` is set, no namespace is vouched for.
    """

    def __init__(self, inner: LinkDriver, on_refused: Callable[[str], None]) -> None:
        self._inner = inner
        # Called with the action refused ("build", "clear") once per refusal.
        self._on_refused = on_refused
        self.authority: NetnsAuthority | None = None

    def update(self, row: LinkRow) -> None:
        for end in _pod_ends(row):
            if self.authority is None or not self.authority.handed(end.netns):
                self._refuse("build", row, end)
                raise SpecError(
                    _link(row),
                    end.netns,
                    end.intf,
                    f"no CNI ADD on this node put pod {row.namespace}/{end.pod} in this "
                    "netns; nothing is built there",
                )
        self._inner.update(row)

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """`keep`: pod ends (netns, interface) another row holds now; see `LinkDriver`."""
        if self._may_clear(row):
            self._inner.delete(row, keep)

    def move(self, previous: LinkRow, row: LinkRow) -> None:
        if self._may_clear(previous):
            self._inner.move(previous, row)

    def owned(self, netns: str) -> list[OwnedInterface]:
        if not self._was_handed(netns):
            self._on_refused("clear")
            log.warning("not listing netns %s: no CNI ADD on this node handed it", netns)
            return []
        return self._inner.owned(netns)

    def remove(self, netns: str, ifname: str) -> None:
        if not self._was_handed(netns):
            self._on_refused("clear")
            log.warning(
                "not removing %s in netns %s: no CNI ADD on this node handed it", ifname, netns
            )
            return
        self._inner.remove(netns, ifname)

    def _may_clear(self, row: LinkRow) -> bool:
        for end in _pod_ends(row):
            if identity_of(end.netns) is not None and not self._was_handed(end.netns):
                self._refuse("clear", row, end)
                return False
        return True

    def _was_handed(self, netns: str) -> bool:
        return self.authority is not None and self.authority.was_handed(netns)

    def _refuse(self, action: str, row: LinkRow, end: End) -> None:
        self._on_refused(action)
        log.warning(
            "link %s: refusing to %s interface %r in netns %s, which Topology %s/%s names "
            "but no CNI ADD on this node handed the daemon",
            _link(row),
            action,
            end.intf,
            end.netns,
            row.namespace,
            end.pod,
        )


def _pod_ends(row: LinkRow) -> list[End]:
    """The ends of `row` in a pod's netns."""
    return [end for end in (row.local, row.peer) if end.netns]


def _link(row: LinkRow) -> str:
    return f"{row.namespace}/{row.uid}"
