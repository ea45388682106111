"""Training faults (issue 13, item 4): a damaged checkpoint is never resumed from (the previous
intact one is), a non-finite loss stops the run with a clear message, and the metrics log stays
valid JSON. Tiny BERT, CPU, seconds."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_training_runs import overrides, synthetic_ontology, tiny_model, write_pairs

from training import checkpoint as ckpt
from training.config import load_config
from training.runlog import MetricsLog
from training.trainer import NonFiniteLossError, train


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    words, train_names, _, _ = synthetic_ontology()
    root = tmp_path_factory.mktemp("faults")
    return {"pairs": write_pairs(root / "pairs.txt", train_names), "model": tiny_model(root / "bert", words), "root": root}


def strict_json_lines(path: Path):
    def refuse(constant):
        raise ValueError(f"{path}: bare {constant} is not JSON")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def weights(folder: Path):
    return load_file(str(folder / "model" / "model.safetensors"))


def damage(path: Path) -> None:
    """Overwrite the last 4 kB (tensor data, not the header) with 0xFF bytes: NaN floats."""
    data = bytearray(path.read_bytes())
    data[-4096:] = b"\xff" * 4096
    path.write_bytes(bytes(data))


def test_a_damaged_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before(setup, tmp_path, capsys):
    settings = overrides(setup, tmp_path / "run", **{"data.batch_size": 8, "data.max_steps": 12,
                                                     "training.checkpoint_every": 5, "training.log_every": 1})
    config = load_config("sapbert", settings)
    train(config, progress=False)
    straight = weights(tmp_path / "run")
    step5, step10 = ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")
    assert step10.name == "step-00000010"
    sums = json.loads((step10 / ckpt.CHECKSUM_FILE).read_text())["sha256"]
    assert {ckpt.MODEL_FILE, ckpt.OPTIMIZER_FILE, ckpt.PLAN_FILE, ckpt.STATE_FILE, "rng-rank0.safetensors"} <= set(sums)
    shutil.copytree(tmp_path / "run", tmp_path / "all_damaged")

    damage(step10 / ckpt.MODEL_FILE)
    capsys.readouterr()
    summary = train(config, resume=True, progress=False)
    err = capsys.readouterr().err
    assert f"{step10 / ckpt.MODEL_FILE}: damaged" in err
    assert summary["steps"] == 12
    resumed = weights(tmp_path / "run")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)  # steps 6-12 again, exactly
    assert (step10.parent / ".step-00000010.damaged").is_dir()  # kept for inspection, never listed
    steps = [r for r in strict_json_lines(tmp_path / "run" / "metrics.jsonl") if "loss" in r and "event" not in r]
    assert [r["step"] for r in steps] == list(range(1, 13)) and all(math.isfinite(r["loss"]) for r in steps)

    # with every checkpoint damaged there is nothing to resume from: say so, naming the files
    other = tmp_path / "all_damaged"
    for folder in ckpt.list_checkpoints(other / "checkpoints"):
        damage(folder / ckpt.OPTIMIZER_FILE)
    with pytest.raises(ckpt.CorruptCheckpointError) as error:
        train(load_config("sapbert", {**settings, "paths.output": str(other)}), resume=True, progress=False)
    message = str(error.value)
    assert str(other / "checkpoints" / "step-00000005" / ckpt.OPTIMIZER_FILE) in message
    assert str(other / "checkpoints" / "step-00000010" / ckpt.OPTIMIZER_FILE) in message


def test_a_non_finite_loss_stops_the_run_without_writing_a_model(setup, tmp_path):
    broken = tmp_path / "nan_bert"
    shutil.copytree(setup["model"], broken)
    tensors = load_file(str(broken / "model.safetensors"))
    name = next(k for k in tensors if "word_embeddings" in k)
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "run"
    settings = overrides(setup, out, **{"paths.encoder": str(broken), "data.batch_size": 8, "data.max_steps": 5,
                                        "training.log_every": 1})
    with pytest.raises(NonFiniteLossError) as error:
        train(load_config("sapbert", settings), progress=False)
    message = str(error.value)
    assert message.startswith("step 1: the loss is nan") and str(broken) in message and "word_embeddings" in message
    assert not (out / "model").exists() and not (out / "summary.json").exists()
    records = strict_json_lines(out / "metrics.jsonl")
    assert records[-1]["event"] == "stopped" and records[-1]["reason"] == message


def test_the_metrics_log_writes_null_for_non_finite_numbers(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write({"step": 1, "loss": float("nan"), "rates": [1.0, float("inf")], "nested": {"x": -float("inf")}})
    log.close()
    (record,) = strict_json_lines(tmp_path / "metrics.jsonl")
    assert record == {"step": 1, "loss": None, "rates": [1.0, None], "nested": {"x": None}}
