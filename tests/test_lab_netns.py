"""The lab's named namespaces are made and removed in-process, as `ip netns` makes them."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshwire.tools.lab import netns
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import netns_path

pytestmark = pytest.mark.root


@pytest.fixture
def name() -> Iterator[str]:
    made = f"mwtns{secrets.token_hex(3)}"
    try:
        yield made
    finally:
        subprocess.run(["ip", "netns", "delete", made], capture_output=True, check=False)
        if os.path.lexists(netns_path(made)):
            os.unlink(netns_path(made))


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def test_a_created_namespace_is_one_ip_netns_lists_and_enters_with_loopback_up(
    name: str,
) -> None:
    netns.create(name)
    assert name in ip("netns", "list").split()
    assert "<LOOPBACK,UP,LOWER_UP>" in ip("-n", name, "link", "show", "lo")
    # It is a namespace of its own, not the host's.
    assert os.stat(netns_path(name)).st_ino != os.stat("/proc/self/ns/net").st_ino
    # Created again, it is reused as it is: an interface made in it stays.
    ip("-n", name, "link", "add", "mwtnsbr", "type", "bridge")
    netns.create(name)
    assert "mwtnsbr" in ip("-n", name, "link", "show")


def test_a_deleted_namespace_is_gone_for_ip_netns_and_deleting_it_again_is_success(
    name: str,
) -> None:
    netns.create(name)
    netns.delete(name)
    assert name not in ip("netns", "list").split()
    assert not os.path.lexists(netns_path(name))
    assert netns_path(name) not in Path("/proc/self/mounts").read_text()
    netns.delete(name)


def test_one_made_by_ip_netns_is_deleted_and_a_plain_file_in_the_way_is_named(
    name: str,
) -> None:
    ip("netns", "add", name)
    netns.delete(name)
    assert name not in ip("netns", "list").split()
    # A file no namespace is bound at (a create cut short) cannot be entered: the
    # error names the namespace, and delete clears it.
    open(netns_path(name), "w").close()
    with pytest.raises(LabError, match=name):
        netns.create(name)
    netns.delete(name)
    assert not os.path.lexists(netns_path(name))
