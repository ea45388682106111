"""Every command's ``--help`` exits 0 with the help and nothing after it, under ``python -m
spacy_sapbert`` and ``spacy sapbert`` (typer 0.29's ``Exit`` is no longer click's: the one-line error
handler once caught it and printed ``error: 0``)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from spacy_sapbert.cli import app

ROOT = Path(__file__).resolve().parents[1]


def command_paths(group, prefix=()) -> List[tuple]:
    """Every command and sub-command of a click/typer group, as argument prefixes."""
    out = [prefix]
    for name, command in getattr(group, "commands", {}).items():
        out += command_paths(command, prefix + (name,))
    return out


COMMANDS = command_paths(get_command(app))


def assert_only_help(output: str) -> None:
    assert "Usage:" in output and "--help" in output, output
    assert not [line for line in output.splitlines() if line.lower().startswith("error")], output


def test_the_app_has_the_commands_the_readme_documents():
    assert {c[0] for c in COMMANDS if c} >= {"annotate", "build-kb", "link", "info", "demo", "build-pipeline", "evaluate"}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "(app)")
def test_help_exits_0_with_nothing_after_it(command):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert_only_help(result.output)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "(app)")
def test_help_under_spacys_cli(command):
    from spacy.cli import app as spacy_app

    import spacy_sapbert.spacy_cli  # noqa: F401  (what spaCy's spacy_cli entry point imports: adds 'sapbert')

    result = CliRunner().invoke(spacy_app, ["sapbert", *command, "--help"])
    assert result.exit_code == 0, result.output
    assert_only_help(result.output)


def test_help_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-m", "spacy_sapbert", "build-kb", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert_only_help(out.stdout)
