"""Where the suite's shipped data lives, and the one way to list it.

Every file a test or bench reads ships in the repository under `tests/data/`.
`files()` never returns an empty list: a missing or emptied folder is an error
at collection time, so a parametrized test cannot silently become zero tests.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
# meshnet-cni's own test topologies, unchanged (BSD-3, see its LICENSE and README).
MESHNET = DATA / "meshnet"
# The Topology CRDs clusters already have: KNE's and upstream meshnet's.
CRDS = DATA / "crds"


def files(folder: Path, pattern: str) -> list[Path]:
    """The files in `folder` matching `pattern`, sorted; raises when there are none."""
    found = sorted(folder.glob(pattern))
    if not found:
        raise FileNotFoundError(f"no {pattern} in {folder}: the repository's test data is missing")
    return found


def meshnet_fixtures() -> list[Path]:
    """meshnet's test topologies (`*.yml`), at least one."""
    return files(MESHNET, "*.yml")
