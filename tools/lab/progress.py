"""Progress of a long lab step: a bar on a terminal, one plain line per step otherwise."""

from __future__ import annotations

import shutil
from typing import Protocol, TextIO

BAR_WIDTH = 24


class Progress(Protocol):
    def begin(self, total: int) -> None:
        """Announce `total` steps (it may grow with `begin` again)."""
        ...

    def step(self, message: str) -> None:
        """One step is starting; `message` says which object it touches."""
        ...

    def note(self, message: str) -> None:
        """A remark that is not a step (a degraded but working lab)."""
        ...

    def end(self) -> None: ...


class LineProgress:
    """Plain `[k/n] message` lines: logs and pipes read well, and nothing is overwritten."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.total, self.done = out, 0, 0

    def begin(self, total: int) -> None:
        self.total = total

    def step(self, message: str) -> None:
        self.done += 1
        print(f"[{self.done}/{self.total}] {message}", file=self.out, flush=True)

    def note(self, message: str) -> None:
        print(f"note: {message}", file=self.out, flush=True)

    def end(self) -> None:
        return None


class BarProgress:
    """A single redrawn line `[####....] k/n message` on a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.total, self.done = out, 0, 0

    def begin(self, total: int) -> None:
        self.total = total

    def step(self, message: str) -> None:
        self.done += 1
        filled = BAR_WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        line = f"[{bar}] {self.done}/{self.total} {message}"
        width = shutil.get_terminal_size().columns - 1
        print(f"\r{line[:width]:<{width}}", end="", file=self.out, flush=True)

    def note(self, message: str) -> None:
        print(f"\rnote: {message}", file=self.out, flush=True)

    def end(self) -> None:
        print(file=self.out, flush=True)


def for_stream(out: TextIO) -> Progress:
    return BarProgress(out) if out.isatty() else LineProgress(out)
