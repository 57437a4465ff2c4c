"""The links table's health: each row's, and derivation's findings per pod, kept with
the rows, outside their revisions, and told to the table's health watchers."""

from __future__ import annotations

from collections.abc import Set

from links_helpers import veth_row

from meshwire.control.tables.health import NOTHING_FOUND, PENDING, Findings
from meshwire.control.tables.links import new_links_table

FAILED = PENDING.failed("eth1: name is taken (foreign)", permanent=True)


def test_a_rows_health_goes_with_it_and_wakes_no_tracker() -> None:
    links = new_links_table()
    tracker = links.track()
    row = veth_row("/ns/a", "/ns/b")
    links.upsert(row.key, row)
    assert links.health(row.key) == PENDING  # not attempted yet
    tracker.next()
    revision = links.revision

    assert links.set_health(row.key, FAILED) == row
    assert links.revision == revision and tracker.next() == []
    assert links.with_health() == [(row, FAILED)]

    links.delete(row.key)
    assert links.health(row.key) == PENDING
    assert links.set_health(row.key, FAILED.done()) is None  # no row: nothing kept
    links.upsert(row.key, row)
    assert links.health(row.key) == PENDING


def test_an_upsert_makes_a_row_pending_and_keeps_its_handshake_problem() -> None:
    links = new_links_table()
    row = veth_row("/ns/a", "/ns/b")
    links.upsert(row.key, row)
    links.set_health(row.key, FAILED.with_handshake("peer node 10.0.0.2: unreachable"))
    links.upsert(row.key, row)
    assert links.health(row.key) == PENDING.with_handshake("peer node 10.0.0.2: unreachable")


def test_watchers_hear_the_pods_a_write_touches_and_whether_their_errors_may_change() -> None:
    links = new_links_table()
    row = veth_row("/ns/a", "/ns/b")  # pods lab/r1 and lab/r2
    heard: list[tuple[set[str], bool]] = []
    on_r1: list[bool] = []

    def every(pods: Set[str], errors: bool) -> None:
        heard.append((set(pods), errors))

    stop = links.watch_health(every)
    stop_r1 = links.watch_health(lambda pods, errors: on_r1.append(errors), "lab/r1")
    pods = {"lab/r1", "lab/r2"}

    links.upsert(row.key, row)
    links.set_health(row.key, PENDING.done())  # neither is nor replaces an error
    links.set_health(row.key, FAILED)
    links.set_health(row.key, FAILED.done())
    links.set_health(row.key, PENDING.done().with_handshake("no answer"))
    links.delete(row.key)  # with a handshake problem: the pods' errors change
    assert heard == [
        (pods, False),
        (pods, False),
        (pods, True),
        (pods, True),
        (pods, True),
        (pods, True),
    ]
    assert on_r1 == [errors for _, errors in heard]

    links.set_findings({"lab/r3": Findings(waiting_for_slot=True)})
    assert heard[-1] == ({"lab/r3"}, True) and len(on_r1) == 6

    stop()
    stop()  # stopping twice is harmless
    stop_r1()
    links.upsert(row.key, row)
    assert len(heard) == 7 and len(on_r1) == 6


def test_a_pods_findings_are_derivations_last_word() -> None:
    links = new_links_table()
    found = Findings(("topology lab/r1: link uid 1: mtu: too small",), waiting_for_slot=True)
    links.set_findings({"lab/r1": found, "lab/r2": NOTHING_FOUND})
    assert links.findings("lab/r1") == found
    assert links.findings("lab/r2") == NOTHING_FOUND
    links.set_findings({"lab/r1": NOTHING_FOUND})
    assert links.findings("lab/r1") == NOTHING_FOUND
