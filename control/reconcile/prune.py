"""Pruning: delete meshwire-marked interfaces that no link row wants.

Only interfaces carrying meshwire's ownership mark are candidates (a NOS's own
interfaces are never touched), and only in the namespaces of pods this node
runs. `prune` refuses to run before the reconciler's `initial_done`: until every
row that existed when the table was initialized has been attempted once, a
missing row may be a row not derived yet, not a link that should go (the
WireGuard seed's rule).

The rows go on changing while a pass lists and removes in threads (a pod is
ADDed, its peer's status arrives). So what the rows want is read again after
each listing, never from a snapshot taken at the start; and a removal that a
row came to want while it ran is handed back to the reconciler, which builds
the interface again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from meshwire.control.links.driver import LinkDriver
from meshwire.control.reconcile.reconciler import LinkReconciler

log = logging.getLogger(__name__)


class PruneNotReady(RuntimeError):
    """Pruning was asked for before the initial reconciliation completed."""


async def prune(reconciler: LinkReconciler, driver: LinkDriver, netns_paths: Iterable[str]) -> int:
    """Remove unwanted marked interfaces from `netns_paths`; returns how many went.

    A namespace that vanished meanwhile is skipped; a failure to remove one
    interface is logged and left for the next pass.
    """
    if not reconciler.initial_done.is_set():
        raise PruneNotReady("initial reconciliation has not completed")
    removed = 0
    for netns in sorted(set(netns_paths)):
        try:
            owned = await asyncio.to_thread(driver.owned, netns)
        except Exception as exc:  # a pod netns can vanish at any time
            log.debug("prune: cannot list %s: %s", netns, exc)
            continue
        wanted = reconciler.ends_wanted()
        for intf in owned:
            if (netns, intf.name) in wanted:
                continue
            try:
                await asyncio.to_thread(driver.remove, netns, intf.name)
            except Exception as exc:
                log.warning("prune: removing %s in %s failed: %s", intf.name, netns, exc)
                continue
            if reconciler.recheck(netns, intf.name):
                log.info("prune: %s in %s was wanted meanwhile; rebuilding", intf.name, netns)
                continue
            log.info("pruned %s in %s (mark %s)", intf.name, netns, intf.mark)
            removed += 1
    return removed
