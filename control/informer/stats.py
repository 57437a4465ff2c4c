"""The informer's counters and its last failure: for metrics, readiness and tests.

Plain values written by the informer's task only; a reader on the same loop
sees a consistent value of each counter (not a consistent set of them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class InformerStats:
    # Watch events received, by type: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    # (and any type a server invents, counted and otherwise ignored).
    events: Counter[str] = field(default_factory=Counter)
    # Full lists applied; the first one is the initial sync.
    lists: int = 0
    # Lists after the first: after a 410 Gone or a failed list.
    relists: int = 0
    # Restarts after an error (connection, timeout, HTTP error, bad stream).
    reconnects: int = 0
    # Objects skipped because they could not be read as a Topology.
    unreadable: int = 0
    # Rows written (upserts and deletions), i.e. changes the table saw.
    changes: int = 0
    # The resourceVersion the next watch starts from ("" before the first list).
    resource_version: str = ""
    # Why the last list or watch failed, in one line; "" once one succeeds again.
    last_error: str = ""
