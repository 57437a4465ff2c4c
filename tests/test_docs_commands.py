"""What the docs show is what the code takes: every `meshwire ...` command in a shell block
of README.md or docs/*.md parses with the real CLI's argparse, and every `MESHWIRE_*`
variable and dotted config key they name exists.

Commands are parsed, never run: `ArgumentParser.parse_args` is wrapped to stop right
after a successful parse, so no lab is built and nothing is touched.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from meshwire.control.common.config import ENV_NESTING, ENV_PREFIX, Config
from meshwire.tools import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|shell|console)\n(.*?)^```", re.S | re.M)
# Where product code and the scripts that ship with it may read a variable.
CODE = [ROOT / d for d in ("base", "control", "dataplane", "tools", "cext", "scripts", "deploy")]
CODE_SUFFIXES = {".py", ".c", ".h", ".sh", ".yaml", ".yml"}
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")"}
REDIRECTIONS = {">", ">>", "<", "2>", "&>"}


class Parsed(Exception):
    """Raised in place of running a command whose arguments parsed."""


def shell_lines(text: str) -> Iterator[str]:
    """Each logical line of the page's shell blocks, continuations joined, prompts removed."""
    for block in SHELL_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            yield line.strip().removeprefix("$ ")


def meshwire_commands(line: str) -> Iterator[list[str]]:
    """The argument lists given to `meshwire` on one shell line: as the first word of a
    pipeline segment (also as `.venv/bin/meshwire`), or after a `--` (kubectl exec)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segment: list[str] = []
    tokens = iter(lexer)
    for token in tokens:
        if token in SEPARATORS:
            yield from _in_segment(segment)
            segment = []
        elif token in REDIRECTIONS:
            next(tokens, None)
        else:
            segment.append(token)
    yield from _in_segment(segment)


def _in_segment(words: list[str]) -> Iterator[list[str]]:
    starts = [0] + [i + 1 for i, word in enumerate(words) if word == "--"]
    for start in starts:
        if start < len(words) and Path(words[start]).name == "meshwire":
            yield words[start + 1 :]
            return


def documented_commands() -> list[tuple[str, list[str]]]:
    out = []
    for page in PAGES:
        for line in shell_lines(page.read_text()):
            for argv in meshwire_commands(line):
                out.append((f"{page.relative_to(ROOT)}: meshwire {shlex.join(argv)}", argv))
    return out


COMMANDS = documented_commands()


def test_the_docs_show_commands_of_every_kind() -> None:
    """The extraction finds what the pages show (a guard against a regex that finds nothing)."""
    shown = {" ".join(argv[:2]) for _, argv in COMMANDS}
    assert {"lab up", "lab impair", "apply -f", "certs init", "config defaults"} <= shown


@pytest.mark.parametrize("argv", [argv for _, argv in COMMANDS], ids=[i for i, _ in COMMANDS])
def test_a_documented_command_parses(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise Parsed(original(self, *args, **kwargs))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    try:
        result = cli.main(argv)
    except Parsed:
        return
    except SystemExit as done:
        pytest.fail(f"meshwire {shlex.join(argv)}: exit {done.code}\n{capsys.readouterr().err}")
    pytest.fail(f"meshwire {shlex.join(argv)}: no parser took it (returned {result})")


def test_a_command_the_cli_refuses_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(pytest.fail.Exception, match="exit 2"):
        test_a_documented_command_parses(
            ["lab", "impair", "r1:eth1", "--latency", "5"], monkeypatch, capsys
        )
    with pytest.raises(pytest.fail.Exception, match="no parser took it"):
        test_a_documented_command_parses(["lab-up"], monkeypatch, capsys)


def config_keys(model: type[BaseModel] = Config, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        section = info.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            keys |= config_keys(section, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def variables_in_code() -> set[str]:
    found: set[str] = set()
    for folder in CODE:
        for path in folder.rglob("*"):
            if path.suffix in CODE_SUFFIXES and "build" not in path.parts:
                found |= set(re.findall(r"MESHWIRE_[A-Z0-9_]+", path.read_text(errors="ignore")))
    return found


def test_every_variable_the_docs_name_exists() -> None:
    """A `MESHWIRE_*` variable is a config key's environment twin, or one the code reads."""
    twins = {ENV_PREFIX + key.upper().replace(".", ENV_NESTING) for key in config_keys()}
    known = twins | variables_in_code()
    named = {
        (page.relative_to(ROOT).as_posix(), name)
        for page in PAGES
        for name in re.findall(r"MESHWIRE_[A-Z0-9_]*[A-Z0-9]", page.read_text())
    }
    assert named, "the docs name no MESHWIRE_ variable: the search is broken"
    unknown = sorted(f"{page}: {name}" for page, name in named if name not in known)
    assert not unknown, "variables no code reads:\n" + "\n".join(unknown)


def test_every_key_a_documented_set_flag_names_exists() -> None:
    keys = config_keys()
    set_keys = [
        (where, argv[i + 1].partition("=")[0])
        for where, argv in COMMANDS
        for i, word in enumerate(argv[:-1])
        if word == "--set"
    ]
    assert set_keys, "the docs show no --set: the search is broken"
    unknown = [f"{where}: {key}" for where, key in set_keys if key not in keys]
    assert not unknown, "--set of keys that do not exist:\n" + "\n".join(unknown)


def test_every_dotted_config_key_the_docs_name_exists() -> None:
    """`section.key` in backquotes, for the config's sections, names a real key."""
    keys = config_keys()
    sections = {key.split(".")[0] for key in keys if "." in key}
    pattern = re.compile(rf"`((?:{'|'.join(sorted(sections))})\.[a-z_]+)`")
    named = {
        (page.relative_to(ROOT).as_posix(), key)
        for page in PAGES
        if page.name != "style.md"  # names other projects' files, e.g. `metrics.go`
        for key in pattern.findall(page.read_text())
    }
    assert named, "the docs name no dotted config key: the search is broken"
    unknown = sorted(f"{page}: {key}" for page, key in named if key not in keys)
    assert not unknown, "config keys that do not exist:\n" + "\n".join(unknown)
