"""The `meshwire` command: each subcommand is listed in its usage and answers --help."""

from __future__ import annotations

import argparse

import pytest

from meshwire.tools import cli
from meshwire.tools.lab import command as lab_command


def lab_subcommands() -> list[str]:
    (sub,) = (a for a in lab_command.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize("words", sorted(cli.COMMANDS), ids=" ".join)
def test_a_command_is_in_the_usage_and_answers_help(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert f"\n  {' '.join(words)} " in cli.USAGE
    with pytest.raises(SystemExit) as done:
        cli.main([*words, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: meshwire")


@pytest.mark.parametrize("name", lab_subcommands())
def test_every_lab_command_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["lab", name, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: meshwire lab {name}")


def test_an_unknown_command_is_named_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["remove", "-f", "x"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'remove -f'" in err
    assert "delete -f FILE" in err
