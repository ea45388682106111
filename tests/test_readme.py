"""The README stays true to the code: its set-up commands, its CLI table and its config table."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf8")


def bash_blocks(text: str):
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readmes_test_command_verbatim():
    test_command = [line for line in bash_blocks(README)[1].splitlines() if not line.startswith("#")]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf8")
    assert test_command and all(line in ci.splitlines() for line in test_command)


def test_every_cli_command_is_in_the_readmes_command_table():
    from spacy_sapbert.cli import app

    names = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    documented = set(re.findall(r"^\| `([a-z-]+)[ `]", README, flags=re.M))
    assert names <= documented, f"missing from the README's command table: {sorted(names - documented)}"


def test_every_linker_setting_is_in_the_readmes_config_table():
    import spacy

    nlp = spacy.blank("en")
    settings = set(nlp.get_factory_meta("sapbert_linker").default_config)
    documented = set(re.findall(r"`([a-z_]+)`", README))
    assert settings <= documented, f"missing from the README's config table: {sorted(settings - documented)}"
