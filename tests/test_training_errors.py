"""Training faults print one line naming what failed (``-v``: the traceback), and a checkpoint folder
without ``state.json`` is reported, not skipped silently (issue 43, item 5)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from training import checkpoint as ckpt
from training import pretrain
from training.trainer import NonFiniteLossError, Trainer


@pytest.mark.parametrize("error", [
    NonFiniteLossError("step 3: the loss is nan; training stopped before this step changed the weights"),
    ckpt.CorruptCheckpointError("/runs/x/checkpoints/step-4/model.safetensors: damaged (its sha256 differs)"),
])
def test_training_faults_are_one_line_and_verbose_shows_the_traceback(monkeypatch, error):
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(pretrain, "train_from_file", fail)
    result = CliRunner().invoke(pretrain.app, ["cpu"])
    assert result.exit_code == 1 and result.output.strip() == f"error: {error}"
    verbose = CliRunner().invoke(pretrain.app, ["cpu", "-v"])
    assert verbose.exception is error


def test_a_checkpoint_without_state_json_is_named_in_a_warning(tmp_path, capsys):
    root = tmp_path / "checkpoints"
    (root / "step-10").mkdir(parents=True)
    (root / "step-10" / "model.safetensors").write_bytes(b"x")
    assert ckpt.incomplete_checkpoints(root) == [root / "step-10"] and ckpt.list_checkpoints(root) == []
    stub = SimpleNamespace(paths=SimpleNamespace(checkpoints=root), info=SimpleNamespace(is_main=True, enabled=False))
    assert Trainer.intact_checkpoint(stub) is None  # type: ignore[arg-type]
    assert f"warning: {root / 'step-10'} has no state.json: not a complete checkpoint, not resumed from" in capsys.readouterr().err
