"""Micro benchmarks through pytest-benchmark, so runs can be saved and compared:

    make bench-micro                       # run, save under .benchmarks/
    .venv/bin/python -m pytest bench/micro --benchmark-compare   # against the last saved run

The batch codec (Python's and the C reader's), derivation of one pod's rows,
the inverted peer index (`dependents`) and the work queue's add/get/done. Each
works on data built in memory; nothing touches the kernel. Not part of
`make test`: figures from a busy machine mean little.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from bench.dependents_bench import NODE_A, _OneSlot, lab
from meshwire.control.reconcile.derive import NodeView, derive_pods
from meshwire.control.reconcile.queue import WorkQueue
from meshwire.control.tables.topologies import TopologyTable
from meshwire.dataplane import codec

PODS = 1000


@pytest.fixture(scope="module")
def table() -> TopologyTable:
    built = TopologyTable()
    for topology in lab(PODS, seed=1):
        built.upsert(topology)
    built.mark_initialized()
    return built


def frames(count: int, size: int) -> list[tuple[int, bytes]]:
    rng = random.Random(7)
    return [(rng.randrange(1, 1 << 20) << 1, rng.randbytes(size)) for _ in range(count)]


@pytest.mark.parametrize("size", [64, 1500])
def test_python_codec_pack_256(benchmark, size: int) -> None:  # type: ignore[no-untyped-def]
    batch = frames(256, size)
    packed = benchmark(codec.pack, batch)
    assert codec.unpack(packed) == batch


@pytest.mark.parametrize("size", [64, 1500])
def test_python_codec_unpack_256(benchmark, size: int) -> None:  # type: ignore[no-untyped-def]
    batch = frames(256, size)
    packed = codec.pack(batch)
    assert benchmark(codec.unpack, packed) == batch


def test_derive_one_pod(benchmark, table: TopologyTable) -> None:  # type: ignore[no-untyped-def]
    key = table.keys()[0]
    view = NodeView(node_ip=NODE_A)
    derived = benchmark(derive_pods, table, {key}, view, _OneSlot())
    assert derived.rows or derived.problems is not None


def test_dependents_lookup(benchmark, table: TopologyTable) -> None:  # type: ignore[no-untyped-def]
    keys = table.keys()
    rng = random.Random(3)
    picks = [rng.choice(keys) for _ in range(1000)]

    def lookups() -> int:
        return sum(len(table.dependents(key)) for key in picks)

    assert benchmark(lookups) > 0


def test_queue_add_get_done_1000(benchmark) -> None:  # type: ignore[no-untyped-def]
    keys = [f"lab/p{i}" for i in range(1000)]
    loop = asyncio.new_event_loop()

    async def cycle() -> int:
        queue = WorkQueue(debounce=0)
        for key in keys:
            queue.add(key)
        served = 0
        while len(queue):
            key = await queue.get()
            assert key is not None
            queue.done(key)
            served += 1
        return served

    try:
        assert benchmark(lambda: loop.run_until_complete(cycle())) == len(keys)
    finally:
        loop.close()
