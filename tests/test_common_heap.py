"""The collector policy of common/heap.py, against the real `gc` of this process."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from meshwire.control.common import heap


class Node:
    me: object


@pytest.fixture
def collector() -> Iterator[None]:
    """Leave the collector as found: enabled, nothing frozen by the test."""
    was_enabled = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        gc.unfreeze()
        if not was_enabled:
            gc.disable()


def test_bulk_pauses_collection_and_nested_blocks_resume_only_at_the_outermost(
    collector: None,
) -> None:
    with heap.bulk():
        assert not gc.isenabled()
        with heap.bulk():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_bulk_resumes_collection_when_its_block_raises(collector: None) -> None:
    with pytest.raises(RuntimeError), heap.bulk():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_bulk_leaves_a_collector_that_was_off_off(collector: None) -> None:
    gc.disable()
    with heap.bulk():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_settle_freezes_what_is_alive_and_collects_young_garbage_first(collector: None) -> None:
    kept = [[n] for n in range(1000)]
    cycle = Node()
    cycle.me = cycle
    gone = weakref.ref(cycle)
    del cycle
    frozen = heap.settle()
    assert gone() is None  # collected, not frozen
    assert frozen == gc.get_freeze_count() >= len(kept)
    alive = {id(o) for o in gc.get_objects()}
    assert id(kept[0]) not in alive  # frozen: no longer walked by collections
    gc.unfreeze()
    assert id(kept[0]) in {id(o) for o in gc.get_objects()}
