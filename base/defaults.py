"""The dataplane's defaults that the daemon's config also names, written once.

The dataplane imports nothing from control, so its own types take these;
`control/common/config.py` gives its keys (`dataplane.batch_frames`, `mtu`,
`log.level`, `log.format`, `dataplane.cgroup_root`, `dataplane.orphan_grace`)
these defaults, with each one's reason there.
"""

from __future__ import annotations

from typing import Final

# Frames per gRPC message at most (config `dataplane.batch_frames`).
BATCH_FRAMES = 256
# A link's MTU when nothing sets one (config `mtu`).
MTU = 1500
# How much a worker logs, and how (config `log.level`, `log.format`).
LOG_LEVEL: Final = "info"
LOG_FORMAT: Final = "json"
# Seconds between a worker's reports (StreamReport, WireReports) to control.
REPORT_INTERVAL = 1.0
# Where the host's cgroup hierarchy is mounted (config `dataplane.cgroup_root`).
CGROUP_ROOT: Final = "/sys/fs/cgroup"
# Seconds a worker with neither control nor wires waits to exit (`dataplane.orphan_grace`).
ORPHAN_GRACE = 60.0
