"""A ping every 10 ms across one link, from inside a pod's netns, for the real-node tests."""

from __future__ import annotations

import re
import signal
import subprocess


class PingLoop:
    """A ping every 10 ms from the netns `netns` (a path) to `address` until `stop()`;
    `lost()` counts the gaps in the replies' sequence (the last request in flight at the
    stop is not a loss)."""

    def __init__(self, netns: str, address: str) -> None:
        self.address = address
        self.proc = subprocess.Popen(
            ["nsenter", f"--net={netns}", "ping", "-i", "0.01", "-W", "1", address],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output = ""
        self._stopped = False

    def stop(self) -> None:
        """SIGINT to the ping (by its PID) and its output read; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.output, _ = self.proc.communicate(timeout=30)

    def replies(self) -> list[int]:
        return [int(s) for s in re.findall(r"icmp_seq=(\d+) ttl", self.output)]

    def lost(self) -> list[int]:
        seen = set(self.replies())
        return [seq for seq in range(1, max(seen, default=0)) if seq not in seen]
