"""The one error `meshwire lab` reports to its user."""

from __future__ import annotations


class LabError(RuntimeError):
    """A lab step failed; the message names the object (lab, node, pod, link, file) and why."""
