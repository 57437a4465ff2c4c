"""The daemon's heap and Python's cyclic garbage collector.

A daemon among thousands of Topologies holds hundreds of thousands of
objects that live as long as their rows do. A full collection walks every one
of them, holding the GIL: the event loop and every netlink thread stop
meanwhile, and a restarted pod whose links are being built waits that long.

- `bulk()`: no automatic collection inside the block. For the synchronous work
  of reading a full list into rows: it allocates hundreds of thousands of
  objects that all stay, which sets off one full collection after another, and
  none of them finds garbage worth the walk. The block holds no await, so no
  other task runs until it ends and the pause lasts as long as that one
  computation; blocks nest.
- `settle()`: once the first sync has built the tables, every object then
  alive moves to the collector's permanent generation (`gc.freeze`), so a
  later full collection walks only what came after. A frozen object is still
  freed by reference counting when its row lets it go. Only a reference cycle
  among frozen objects that turns into garbage later is never collected: the
  rows hold none (Topologies, links and their indexes are acyclic), and what
  else was alive at that one moment bounds it. A table rebuilt later (a
  relist after an outage) is walked again as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = 0


@contextmanager
def bulk() -> Iterator[None]:
    """Automatic collection off inside the block (if it was on when the outermost began)."""
    global _paused
    enabled = gc.isenabled()
    if _paused == 0 and enabled:
        gc.disable()
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0 and enabled:
            gc.enable()


def settle() -> int:
    """Collect the young generations, then freeze every object alive; how many are
    frozen now in all (`gc.get_freeze_count`)."""
    gc.collect(1)
    gc.freeze()
    return gc.get_freeze_count()
