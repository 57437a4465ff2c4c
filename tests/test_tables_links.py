"""The links table's row statuses: kept with the row, outside its revisions."""

from __future__ import annotations

from links_helpers import veth_row

from meshwire.control.tables.links import PENDING, LinkRow, LinkStatus, State, new_links_table

FAILED = LinkStatus().failed("eth1: name is taken (foreign)", permanent=True)


def test_a_status_is_the_rows_and_goes_with_it_but_wakes_no_tracker() -> None:
    links = new_links_table()
    tracker = links.track()
    row = veth_row("/ns/a", "/ns/b")
    links.upsert(row.key, row)
    assert links.status(row.key) is PENDING  # not attempted yet
    tracker.next()
    revision = links.revision

    heard: list[tuple[LinkRow, LinkStatus, LinkStatus]] = []
    stop = links.watch_status(lambda r, before, after: heard.append((r, before, after)))
    assert links.set_status(row.key, FAILED) == row
    assert links.revision == revision and tracker.next() == []
    assert heard == [(row, PENDING, FAILED)]
    assert links.with_status() == [(row, FAILED)]
    assert links.errors({row.key, "lab/9"}) == [FAILED.message]

    links.upsert(row.key, row)  # kept until the reconciler takes the change
    assert links.status(row.key) == FAILED
    links.delete(row.key)
    assert links.status(row.key) is PENDING
    assert links.set_status(row.key, LinkStatus(State.DONE)) is None  # no row: nothing kept
    links.upsert(row.key, row)
    assert links.status(row.key) is PENDING

    stop()
    stop()  # stopping twice is harmless
    links.set_status(row.key, LinkStatus(State.DONE))
    assert len(heard) == 1
