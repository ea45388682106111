"""Unit tests of the trainer's parts: pair files, batch plans, losses, checkpoints, logs."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from spacy_sapbert.records import InputError
from training import checkpoint as ckpt
from training.config import load_config
from training.data import (
    ConfusableBatches,
    RandomBatches,
    make_pair_set,
    plan_from_arrays,
    plan_to_arrays,
    read_context_file,
    read_pair_file,
    shard,
)
from training.registry import registry
from training.runlog import MetricsLog, read_log
from training.trainer import lr_lambda, steps_per_epoch


def toy_pairs(n_concepts=12, per_concept=3):
    triples = [(f"C{c}", f"name {c} a{i}", f"Name {c}  B{i}") for c in range(n_concepts) for i in range(per_concept)]
    return make_pair_set(triples)


def test_read_pair_file_labels_and_normalisation(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("C1||Heart  Attack||MI\n\nC2||asthma||Bronchial Asthma\nC1||mi||myocardial infarction\n")
    pairs = read_pair_file(path)
    assert pairs.left == ["heart attack", "asthma", "mi"]
    assert pairs.labels.tolist() == [0, 1, 0]
    assert pairs.concepts == ["C1", "C2"]
    names, labels = pairs.batch(np.array([2, 1]))
    assert names == ["mi", "asthma", "myocardial infarction", "bronchial asthma"]
    assert labels.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize("line", ["C1||only one name", "C1||a||b||c", "||a||b"])
def test_read_pair_file_rejects_malformed_lines(tmp_path, line):
    path = tmp_path / "pairs.txt"
    path.write_text(f"C0||x||y\n{line}\n")
    with pytest.raises(InputError, match=":2:"):
        read_pair_file(path)


def test_random_plan_is_a_seeded_permutation():
    pairs = toy_pairs()
    batcher = RandomBatches()
    plan = batcher.plan(pairs, epoch=0, seed=1, batch_size=5)
    assert sorted(np.concatenate(plan).tolist()) == list(range(len(pairs)))
    assert [len(b) for b in plan] == [5] * 7 + [1]
    again = batcher.plan(pairs, epoch=0, seed=1, batch_size=5)
    assert all((a == b).all() for a, b in zip(plan, again))
    other_epoch = batcher.plan(pairs, epoch=1, seed=1, batch_size=5)
    assert not all((a == b).all() for a, b in zip(plan, other_epoch))
    # ranks need at least one pair each: a last batch smaller than the world size is dropped
    assert len(batcher.plan(pairs, epoch=0, seed=1, batch_size=5, min_batch=2)) == 7
    assert steps_per_epoch(len(pairs), 5, 2) == 7


class KeyedEncoder:
    """Encodes a name to a one-hot vector of its concept group: concepts 2k and 2k+1 look alike."""

    def encode(self, names, batch_size=0):
        out = np.zeros((len(names), 16), dtype=np.float32)
        for i, n in enumerate(names):
            out[i, int(n.split()[1]) // 2] = 1.0
        return out


def test_confusable_plan_uses_every_pair_once_and_groups_neighbours():
    pairs = toy_pairs()
    batcher = ConfusableBatches(group_size=2, neighbours=3)
    plan = batcher.plan(pairs, epoch=0, seed=0, batch_size=4, encoder=KeyedEncoder())
    assert sorted(np.concatenate(plan).tolist()) == list(range(len(pairs)))
    # a batch of 4 = one round of two groups of look-alike concepts {2k, 2k+1}
    for batch in plan:
        concepts = pairs.labels[batch]
        assert len(set(concepts)) == 4
        assert len(set(c // 2 for c in concepts.tolist())) == 2
    with pytest.raises(ValueError):
        batcher.plan(pairs, epoch=0, seed=0, batch_size=4, encoder=None)


def test_plan_round_trips_through_arrays_and_shards_cover_batches():
    plan = [np.array([3, 1, 2]), np.array([0]), np.array([5, 4])]
    back = plan_from_arrays(*plan_to_arrays(plan))
    assert [b.tolist() for b in back] == [b.tolist() for b in plan]
    batch = np.arange(7)
    assert np.concatenate([shard(batch, r, 3) for r in range(3)]).tolist() == batch.tolist()


LOSSES = ["multi_similarity.v1", "infonce.v1", "circle.v1", "triplet.v1", "nca.v1", "lifted_structure.v1"]


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("miner", ["triplet_margin.v1", "none.v1"])
def test_every_loss_resolves_from_config_and_gives_gradients(name, miner):
    resolved = registry.resolve({"loss": {"@losses": name}, "miner": {"@miners": miner}})
    torch.manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(16, 8, requires_grad=True), dim=-1)
    labels = torch.arange(8).repeat(2)
    miner_fn = resolved["miner"]
    indices = miner_fn(emb, labels) if miner_fn is not None else None
    loss = resolved["loss"](emb, labels, indices)
    assert torch.isfinite(loss) and loss.item() > 0
    loss.backward()


def test_none_loss_and_none_miner():
    resolved = registry.resolve({"loss": {"@losses": "none.v1"}, "miner": {"@miners": "none.v1"}})
    assert resolved["miner"] is None
    emb = torch.randn(4, 3, requires_grad=True)
    loss = resolved["loss"](emb, torch.tensor([0, 1, 0, 1]), None)
    loss.backward()
    assert loss.item() == 0 and emb.grad.abs().sum() == 0


def test_faithful_config_holds_the_authors_settings():
    cfg = load_config("sapbert")
    assert cfg["encoder"]["pooling"] == "cls" and cfg["encoder"]["max_length"] == 25
    assert cfg["data"]["batch_size"] == 256 and cfg["data"]["epochs"] == 1
    assert cfg["training"]["lr"] == 2e-5 and cfg["training"]["weight_decay"] == 0.01
    assert dict(cfg["training"]["miner"]) == {"@miners": "triplet_margin.v1", "margin": 0.2, "type_of_triplets": "all"}
    loss = dict(cfg["training"]["loss"])
    assert loss == {"@losses": "multi_similarity.v1", "alpha": 1, "beta": 60, "base": 0.5}
    resolved = registry.resolve(load_config("sapbert", {"training.loss.alpha": 2, "training.loss.beta": 50}))
    assert resolved["training"]["loss"].alpha == 2 and resolved["training"]["loss"].beta == 50


@pytest.mark.parametrize("name", ["cpu", "finetune", "finetune-cpu"])
def test_other_bundled_configs_resolve(name):
    resolved = registry.resolve(load_config(name))
    assert resolved["training"]["loss"] is not None


def test_adapter_is_off_by_default_and_peft_is_imported_only_to_apply_it(monkeypatch):
    from training.adapter import LoraAdapter

    monkeypatch.setitem(sys.modules, "peft", None)  # as if peft were not installed
    for name in ("sapbert", "cpu", "finetune", "finetune-cpu"):
        assert registry.resolve(load_config(name))["training"]["adapter"] is None
    lora = {"@adapters": "lora.v1", "r": 4, "target_modules": ["query", "key"]}
    adapter = registry.resolve(load_config("sapbert", {"training.adapter": lora}))["training"]["adapter"]
    assert adapter == LoraAdapter(r=4, lora_alpha=16.0, lora_dropout=0.1, target_modules=("query", "key"))
    assert adapter.describe() == {"type": "lora", "r": 4, "lora_alpha": 16.0, "lora_dropout": 0.1, "target_modules": ["query", "key"]}
    with pytest.raises(ImportError, match="pip install peft"):
        adapter.apply(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="r must be"):
        registry.resolve(load_config("sapbert", {"training.adapter": {**lora, "r": 0}}))


def test_lr_schedule_warmup_then_constant_or_linear():
    f = lr_lambda("constant", 4, 100)
    assert [f(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    g = lr_lambda("linear", 0, 10)
    assert g(0) == 1.0 and g(5) == 0.5 and g(10) == 0.0


def test_optimizer_state_round_trips_without_pickle():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
    tensors, meta = ckpt.optimizer_to_tensors(opt)
    import json

    meta = json.loads(json.dumps(meta))  # what a JSON file gives back
    fresh = torch.optim.AdamW(model.parameters(), lr=1.0)
    ckpt.optimizer_from_tensors(fresh, tensors, meta)
    a, b = opt.state_dict(), fresh.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for pid in a["state"]:
        for key, value in a["state"][pid].items():
            assert torch.equal(value, b["state"][pid][key])


def test_metrics_log_forgets_steps_after_the_resumed_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in (10, 20, 30):
        log.write({"step": step, "loss": 1.0})
    log.close()
    with open(path, "a") as f:
        f.write('{"step": 40, "lo')  # a line cut short by a kill
    log = MetricsLog(path, resume_step=20)
    log.write({"step": 30, "loss": 0.5})
    log.close()
    assert [(r["step"], r["loss"]) for r in read_log(path)] == [(10, 1.0), (20, 1.0), (30, 0.5)]


def test_loss_plot_is_written(tmp_path):
    from training.plot import plot_accuracy, plot_loss

    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in range(1, 6):
        log.write({"step": step, "loss": 1.0 / step})
    log.close()
    png = plot_loss(path, tmp_path / "loss.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    png = plot_accuracy({"ncbi": [{"minutes": 0, "lenient_acc@1": 50.0}, {"minutes": 10, "lenient_acc@1": 60.0}]}, tmp_path / "acc.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("line, problem", [
    ("not json", "not JSON"),
    ('{"concept": "C1"}', "two non-empty strings"),
    ('["C1", "a [b] c"]', "two non-empty strings"),
])
def test_read_context_file_names_the_line_of_a_malformed_record(tmp_path, line, problem):
    path = tmp_path / "contexts.jsonl"
    path.write_text('{"concept": "C1", "text": "a [b] c"}\n\n' + line + "\n", encoding="utf8")
    with pytest.raises(InputError, match=f"{path}:3: .*{problem}"):
        read_context_file(path)
    path.write_text('{"concept": "C1", "text": "a [b] c"}\n{"concept": "C2", "text": "d [e]"}\n', encoding="utf8")
    with pytest.raises(InputError, match="no concept has two or more examples"):
        read_context_file(path)
