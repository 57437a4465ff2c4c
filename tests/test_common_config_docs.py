"""README's "Configuration" section is the output of `meshwire config defaults`, verbatim."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import yaml

from meshwire.control.common.config import defaults_yaml

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Configuration"


def readme_section() -> str:
    text = README.read_text()
    assert SECTION in text, f"README.md has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1]
    return re.split(r"^## ", section, maxsplit=1, flags=re.M)[0]


def readme_config() -> str:
    blocks = re.findall(r"^```yaml\n(.*?)^```", readme_section(), re.S | re.M)
    assert len(blocks) == 1, "the Configuration section must hold one ```yaml block"
    block: str = blocks[0]
    return block


def test_the_readme_shows_exactly_what_config_defaults_prints() -> None:
    diff = "".join(
        difflib.unified_diff(
            readme_config().splitlines(True),
            defaults_yaml().splitlines(True),
            "README.md",
            "meshwire config defaults",
        )
    )
    assert not diff, (
        "README.md's Configuration block is out of date: replace it with the output of "
        "`meshwire config defaults`\n" + diff
    )


def test_every_key_config_defaults_prints_is_in_the_readme_section() -> None:
    def keys(tree: dict[str, object], prefix: str = "") -> set[str]:
        out: set[str] = set()
        for name, value in tree.items():
            out |= keys(value, f"{prefix}{name}.") if isinstance(value, dict) else {prefix + name}
        return out

    documented = keys(yaml.safe_load(readme_config()))
    assert documented == keys(yaml.safe_load(defaults_yaml()))


def test_the_readme_names_the_environment_twin_of_a_nested_key() -> None:
    assert "MESHWIRE_API__URL" in readme_section()
