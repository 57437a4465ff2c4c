"""Latency without losing coalescing, as the reconciler sees it (`reconcile.debounce` 1 s).

A link's first change is built at once: a restarted pod waits for no timer.
A delete waits out the quiet: a link whose two Topology objects are edited one
after the other (`meshwire apply` of a file), so that its ends disagree in
between and it has no row for a moment, is updated in place, never torn down
and built again (its interfaces keep their ifindex, its peers their neighbour
entries).
"""

from __future__ import annotations

from reconciler_helpers import Scenario

from meshwire.control.model.topology import Link

KEY = "default/1"


async def linked_pair() -> Scenario:
    scenario = Scenario("quiet", debounce=1.0)
    scenario.cmd_pod("r1", "r2")
    scenario.cmd_link("1", "r1:eth1=10.0.0.1/24", "r2:eth1=10.0.0.2/24")
    for pod in ("r1", "r2"):
        scenario.cmd_place(pod, f"/ns/{pod}")
    scenario.cmd_synced()
    await scenario.cmd_settle()
    return scenario


async def test_a_new_link_is_built_at_once() -> None:
    scenario = await linked_pair()
    try:
        assert scenario.driver.log == [f"update({KEY})"]
        assert scenario.clock.now() == 0.0
    finally:
        await scenario.daemon.stop()


async def test_a_link_whose_ends_disagree_for_a_moment_is_updated_not_rebuilt() -> None:
    scenario = await linked_pair()
    try:
        scenario.clock.advance(5.0)  # long quiet: the next change is taken at once
        ifindexes = {end: found.ifindex for end, found in scenario.driver.kernel.items()}
        # r1's object first: its end now disagrees with r2's (no row), then r2's.
        scenario.set_link("r1", Link(1, "r2", "eth1", "eth1", "10.0.9.1/24", "10.0.9.2/24"))
        await scenario.cmd_settle()
        assert KEY not in scenario.daemon.links
        scenario.set_link("r2", Link(1, "r1", "eth1", "eth1", "10.0.9.2/24", "10.0.9.1/24"))
        await scenario.cmd_settle()
        await scenario.cmd_advance("1.0")

        assert scenario.driver.log == [f"update({KEY})", f"update({KEY})"]
        assert {e: f.ifindex for e, f in scenario.driver.kernel.items()} == ifindexes
    finally:
        await scenario.daemon.stop()


async def test_a_link_taken_out_for_good_is_deleted_once_the_quiet_is_over() -> None:
    scenario = await linked_pair()
    try:
        scenario.clock.advance(5.0)
        scenario.cmd_unlink("1")
        await scenario.cmd_settle()
        assert scenario.driver.log == [f"update({KEY})"]

        await scenario.cmd_advance("1.0")
        assert scenario.driver.log == [f"update({KEY})", f"delete({KEY})"]
        assert scenario.driver.kernel == {}
    finally:
        await scenario.daemon.stop()


async def test_a_restarted_pods_link_is_rebuilt_at_once_even_right_after_a_pass() -> None:
    # DEL then ADD a moment later: the row goes and comes back with the new
    # netns. Nothing to coalesce it with, so it waits for no quiet.
    scenario = await linked_pair()
    try:
        scenario.cmd_unplace("r2")
        await scenario.cmd_settle()
        scenario.cmd_place("r2", "/ns/r2-restarted")
        await scenario.cmd_settle()

        assert scenario.clock.now() == 0.0
        # The old ends are cleared (the fake driver logs move as a delete), then built;
        # meanwhile r1 held its end alone (a detached row), built at once too.
        assert scenario.driver.log == [
            f"update({KEY})",
            f"update({KEY}/r1)",
            f"delete({KEY})",
            f"update({KEY})",
        ]
        assert ("/ns/r2-restarted", "eth1") in scenario.driver.kernel
    finally:
        await scenario.daemon.stop()
