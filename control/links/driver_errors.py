"""The two ways a link driver fails, as the reconciler must tell them apart.

`LinkError` is transient: retry with backoff (a netns not there yet, a netlink
race, a name still held by another meshwire link). `SpecError` can never succeed
as specified (a name taken by an interface meshwire did not create, a netns path
that is not a netns, an address that does not parse); the reconciler records it
on the row's status instead of retrying in a loop.

Both carry the link (`ns/uid`), the netns and the interface they are about, and
put them in the message.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2.netlink.exceptions import NetlinkError

from .netns import NetnsGone, NotANetns


class DriverError(Exception):
    """`link` is "" for a call about no particular link (listing a netns)."""

    def __init__(self, link: str, netns: str, intf: str, problem: str) -> None:
        self.link = link
        self.netns = netns
        self.intf = intf
        self.problem = problem
        where = f"interface {intf!r} in netns {netns or '(host)'}" if intf else f"netns {netns}"
        super().__init__(f"link {link}: {where}: {problem}" if link else f"{where}: {problem}")


class LinkError(DriverError):
    """Transient: the same call may succeed later."""


class SpecError(DriverError):
    """Permanent: the row asks for something that cannot be realised as written."""


@contextmanager
def blame(link: str, netns: str, intf: str) -> Iterator[None]:
    """Turn what a kernel step raises into a `LinkError`/`SpecError` naming link, netns, intf.

    A missing netns is transient (a pod not started yet, or restarting: its row
    will name the new netns); a path that is not a netns is a bad spec; any other
    kernel refusal is transient. `DriverError`s pass through unchanged.
    """
    try:
        yield
    except DriverError:
        raise
    except NetnsGone as exc:
        raise LinkError(link, exc.path, "", "netns does not exist") from exc
    except NotANetns as exc:
        raise SpecError(link, exc.path, "", str(exc)) from exc
    except NetlinkError as exc:
        raise LinkError(link, netns, intf, f"netlink: {_netlink_reason(exc)}") from exc
    except OSError as exc:
        raise LinkError(link, netns, intf, f"{exc.strerror or exc}") from exc


def _netlink_reason(exc: NetlinkError) -> str:
    # With extended ack the kernel's own explanation replaces strerror.
    detail = exc.args[1] if len(exc.args) > 1 and exc.args[1] else os.strerror(exc.code)
    return f"{errno.errorcode.get(exc.code, exc.code)}: {detail}"
