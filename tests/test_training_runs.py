"""End-to-end training runs on a tiny random BERT and a synthetic ontology (CPU, seconds).

- learning: Acc@1 on held-out synonyms rises far above chance; with the loss off it does not;
- resume: a run killed with SIGKILL and resumed ends with the same steps and the same weights;
- on a GPU (``-m gpu``): fp16 autocast learns, and its killed run resumes to the same weights;
- DDP: two gloo processes give the weights of one process on the same global batch;
- fine-tuning: the ``training.finetune`` entry point trains on mention–name pairs;
- adapter (needs peft): only LoRA weights train, the output is a plain merged encoder folder,
  and a killed LoRA run resumes to the same weights.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch
from conftest import make_tiny_bert, needs_cuda
from safetensors.torch import load_file

from spacy_sapbert.encoder import SapEncoder
from spacy_sapbert.evaluation.datasets import Mention, read_pubtator
from training.config import load_config
from training.dev_eval import accuracy_at_1
from training.trainer import Trainer, train

REPO = Path(__file__).resolve().parents[1]
FILLERS = ["disease", "syndrome", "chronic", "acute", "familial", "type"]


def fake_words(n: int, seed: int = 0) -> List[str]:
    cons, vows = "bdfgklmnprstvz", "aeiou"
    words = sorted({a + b + c + d for a in cons for b in vows for c in cons for d in vows})
    random.Random(seed).shuffle(words)
    return words[:n]


def synthetic_ontology(n_concepts: int = 30, aliases: int = 3, seed: int = 0):
    """Concepts whose names share no word, so only training can tell that they are synonyms.

    Training names: each alias alone and with two of three suffixes; held out: each alias
    with the third suffix (seen in training, but never with that alias).
    """
    rng = random.Random(seed)
    words = fake_words(aliases * n_concepts, seed)
    train_names: Dict[str, List[str]] = {}
    held_out: Dict[str, List[str]] = {}
    canonical: Dict[str, str] = {}
    for c in range(n_concepts):
        ws = words[aliases * c : aliases * (c + 1)]
        cid = f"C{c}"
        canonical[cid] = ws[0]
        train_names[cid], held_out[cid] = list(ws), []
        for w in ws[1:]:
            suffixes = rng.sample(FILLERS[:3], 3)
            train_names[cid] += [f"{w} {s}" for s in suffixes[:2]]
            held_out[cid].append(f"{w} {suffixes[2]}")
    return words, train_names, held_out, canonical


def write_pairs(path: Path, names: Dict[str, List[str]]) -> Path:
    with open(path, "w", encoding="utf8") as f:
        for cid, ns in names.items():
            for a, b in itertools.combinations(ns, 2):
                f.write(f"{cid}||{a}||{b}\n")
    return path


def tiny_model(folder: Path, words, dropout: bool = True) -> Path:
    from transformers import BertTokenizerFast

    make_tiny_bert(folder, list(words) + FILLERS)
    # transformers 5 ignores ``vocab_file=`` (every word became [UNK]); the vocabulary is
    # the first positional argument in both 4 and 5.
    BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(str(folder))
    if not dropout:
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture(scope="module")
def ontology():
    return synthetic_ontology()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, ontology):
    words, train_names, _, _ = ontology
    root = tmp_path_factory.mktemp("train")
    return {
        "pairs": write_pairs(root / "pairs.txt", train_names),
        "model": tiny_model(root / "bert", words),
        "model_nodrop": tiny_model(root / "bert_nodrop", words, dropout=False),
        "root": root,
    }


def overrides(setup, output: Path, **extra) -> Dict[str, object]:
    base = {
        "paths.pairs": str(setup["pairs"]),
        "paths.output": str(output),
        "paths.encoder": str(setup["model"]),
        "system.device": "cpu",
        "data.batch_size": 32,
        "training.lr": 5e-3,
        "training.log_every": 5,
        "training.checkpoint_every": 0,
        # fp32 on every CPU: "auto" autocasts to bf16 where that is faster (AMX, AMD with AVX512-BF16), and
        # these tests compare runs of different shapes (two processes and one, merged and adapted weights)
        "training.precision": "fp32",
    }
    base.update(extra)
    return base


def cli_args(values: Dict[str, object]) -> List[str]:
    out = []
    for k, v in values.items():
        out += [f"--{k}", json.dumps(v) if isinstance(v, (dict, list)) else str(v)]
    return out


def held_out_accuracy(model_path: Path, ontology) -> float:
    _, _, held_out, canonical = ontology
    encoder = SapEncoder.load(model_path, device="cpu")
    ids = [frozenset([c]) for c in canonical]
    mentions = [Mention("", 0, len(n), n, "", (c,)) for c, ns in held_out.items() for n in ns]
    return accuracy_at_1(encoder, list(canonical.values()), ids, mentions)["lenient_acc@1"] / 100


def test_tiny_model_learns_held_out_synonyms_and_the_control_does_not(setup, ontology, tmp_path):
    chance = 1 / len(ontology[3])
    before = held_out_accuracy(setup["model"], ontology)
    assert before < 3 * chance

    t0 = time.perf_counter()
    summary = train(load_config("sapbert", overrides(setup, tmp_path / "ms", **{"data.epochs": 8})), progress=False)
    assert time.perf_counter() - t0 < 60
    learned = held_out_accuracy(tmp_path / "ms" / "model", ontology)
    assert learned >= 0.8, learned

    control = overrides(setup, tmp_path / "none", **{"data.epochs": 8, "training.loss": {"@losses": "none.v1"}})
    train(load_config("sapbert", control), progress=False)
    assert held_out_accuracy(tmp_path / "none" / "model", ontology) < 3 * chance

    # the run's outputs: metrics log with loss and throughput, loss curve, summary, linker-ready model
    out = tmp_path / "ms"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r and "event" not in r]
    assert steps[-1]["step"] == summary["steps"] == summary["total_steps"]
    assert steps[-1]["loss"] < steps[0]["loss"] and steps[0]["pairs_per_s"] > 0
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "model" / "sapbert_encoder.json").read_text())["pooling"] == "cls"
    assert summary["peak_rss_mb"] > 0


def run_cli(module: str, args: List[str], **popen) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def final_weights(output: Path) -> Dict[str, torch.Tensor]:
    return load_file(str(output / "model" / "model.safetensors"))


def kill_and_resume(setup, tmp_path, settings: Dict[str, object], atol: float = 0.0) -> Path:
    """Train straight through; train again, SIGKILL it after its first checkpoint, resume it with
    ``--resume``: same steps, same pairs, same final weights (bit for bit, or within ``atol`` where
    the kernels are not deterministic). Returns the resumed run's folder."""
    total = settings["data.epochs"] * -(-sum(1 for _ in open(setup["pairs"])) // settings["data.batch_size"])

    straight = train(load_config("sapbert", {**settings, "paths.output": str(tmp_path / "straight")}), progress=False)
    assert straight["steps"] == total

    out = tmp_path / "killed"
    args = ["sapbert", "--no-progress", *cli_args({**settings, "paths.output": str(out)})]
    proc = run_cli("training.pretrain", args)
    deadline = time.time() + 120
    while not list((out / "checkpoints").glob("step-*")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stdout.read()
    assert not (out / "model").exists()
    killed_at = max(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("step-*"))
    assert 0 < killed_at < total

    # without --resume the old checkpoints are not silently overwritten
    with pytest.raises(FileExistsError):
        train(load_config("sapbert", {**settings, "paths.output": str(out)}), progress=False)
    resumed = run_cli("training.pretrain", [*args, "--resume"])
    log, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, log
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == straight["steps"] == total
    assert summary["pairs_seen"] == straight["pairs_seen"]
    a, b = final_weights(tmp_path / "straight"), final_weights(out)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0.0, atol=atol)
    logged = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in x and '"event"' not in x]
    assert logged == sorted(set(logged)) and logged[-1] == total
    return out


def test_run_killed_with_sigkill_resumes_to_the_same_steps_and_weights(setup, tmp_path):
    settings = overrides(setup, tmp_path / "x", **{"data.batch_size": 8, "data.epochs": 2, "training.checkpoint_every": 10})
    kill_and_resume(setup, tmp_path, settings)


def write_contexts(path: Path, names: Dict[str, List[str]], seed: int = 0) -> Path:
    """Sentences whose mention is one of a concept's names, the rest filler words that every concept shares."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf8") as f:
        for cid, ns in names.items():
            for n in ns:
                words = rng.sample(FILLERS, 3)
                f.write(json.dumps({"concept": cid, "text": f"{words[0]} [{n}] {words[1]} {words[2]}"}) + "\n")
    return path


def context_accuracy(model_path: Path, ontology) -> float:
    """Held-out names in filler sentences, read as the linker reads a mention's sentence (context_encoder),
    each matched to the nearest concept prototype (the mean of its training sentences)."""
    from spacy_sapbert.context import ContextPrototypes, context_encoder

    _, train_names, held_out, _ = ontology
    encoder = SapEncoder.load(model_path, device="cpu", precision="fp32")
    examples = [(c, f"disease [{n}] type chronic") for c, ns in train_names.items() for n in ns]
    prototypes = ContextPrototypes.build(examples, encoder)
    queries = [(c, f"syndrome [{n}] acute familial") for c, ns in held_out.items() for n in ns]
    vectors = context_encoder(encoder).encode([q for _, q in queries])
    best = (vectors @ prototypes.vectors.T).argmax(1)
    return float(np.mean([prototypes.concept_ids[b] == c for b, (c, _) in zip(best, queries)]))


def test_context_examples_train_the_encoder_to_read_sentences(setup, ontology, tmp_path):
    """``data.contexts``: each step also pulls together the sentences of a few concepts (KRISSBERT-style);
    held-out names in sentences then find their concept's prototype, far better than with the
    same run at ``context_weight`` 0. The context loss is logged and falls."""
    contexts = write_contexts(tmp_path / "contexts.jsonl", ontology[1])
    settings = overrides(setup, tmp_path / "x", **{"data.epochs": 4, "data.contexts": str(contexts), "data.context_concepts": 8})
    with_contexts = train(load_config("sapbert", {**settings, "paths.output": str(tmp_path / "ctx")}), progress=False)
    train(load_config("sapbert", {**settings, "paths.output": str(tmp_path / "off"), "training.context_weight": 0.0}), progress=False)
    records = [json.loads(x) for x in (tmp_path / "ctx" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["context_concepts"] == len(ontology[1])
    logged = [r["context_loss"] for r in records if "context_loss" in r and "event" not in r]
    assert len(logged) >= 3 and logged[-1] < logged[0]
    before = context_accuracy(setup["model"], ontology)
    on, off = context_accuracy(tmp_path / "ctx" / "model", ontology), context_accuracy(tmp_path / "off" / "model", ontology)
    assert on > max(before, off) + 0.2, (before, off, on)
    assert with_contexts["contexts"] == str(contexts) and with_contexts["context_concepts"] == len(ontology[1])


def test_a_run_with_context_examples_killed_with_sigkill_resumes_to_the_same_weights(setup, ontology, tmp_path):
    contexts = write_contexts(tmp_path / "contexts.jsonl", ontology[1])
    settings = overrides(setup, tmp_path / "x", **{"data.batch_size": 8, "data.epochs": 1, "training.checkpoint_every": 10,
                                                   "data.contexts": str(contexts), "data.context_concepts": 4})
    kill_and_resume(setup, tmp_path, settings)


@pytest.mark.gpu
@needs_cuda
def test_pretraining_on_cuda_runs_fp16_autocast_and_learns(setup, ontology, tmp_path):
    out = tmp_path / "ms"
    summary = train(load_config("sapbert", overrides(setup, out, **{"system.device": "cuda", "data.epochs": 8})), progress=False)
    assert summary["device"].startswith("cuda") and summary["precision"] == "fp16"
    assert summary["peak_cuda_mb"] > 0
    assert held_out_accuracy(out / "model", ontology) >= 0.8


@pytest.mark.gpu
@needs_cuda
def test_pretraining_on_cuda_killed_and_resumed_ends_with_the_same_weights(setup, tmp_path):
    # the grad scaler's state and the CUDA random state travel in the checkpoint. CUDA's atomic adds
    # make two runs differ in the last bits; a lost optimiser or scaler state moves weights by ~lr.
    settings = overrides(setup, tmp_path / "x", **{"system.device": "cuda", "data.batch_size": 8, "data.epochs": 2,
                                                   "training.checkpoint_every": 10})
    kill_and_resume(setup, tmp_path, settings, atol=1e-5)


def test_ddp_on_gloo_with_two_processes_matches_one_process(setup, tmp_path):
    settings = overrides(setup, tmp_path / "x", **{"paths.encoder": str(setup["model_nodrop"]), "data.max_steps": 6,
                                                   "training.lr": 1e-3, "training.log_every": 1})
    single = train(load_config("sapbert", {**settings, "paths.output": str(tmp_path / "one")}), progress=False)
    assert single["world_size"] == 1

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "training.pretrain", "sapbert", "--no-progress", *cli_args({**settings, "paths.output": str(tmp_path / "two")})]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == single["steps"] == 6

    def losses(folder):
        return [json.loads(x)["loss"] for x in (folder / "metrics.jsonl").read_text().splitlines() if '"loss"' in x and '"event"' not in x]

    # the miner and the loss saw the global batch: same loss, same weights as one process
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-4)
    a, b = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-4)


def pubtator_doc(pmid: int, m1: str, c1: str, m2: str, c2: str, c3: str) -> str:
    """One document whose title holds both mentions, at the offsets the annotations give."""
    s2 = len(m1) + len(" and ")
    return (f"{pmid}|t|{m1} and {m2}\n{pmid}|a|An abstract.\n"
            f"{pmid}\t0\t{len(m1)}\t{m1}\tDisease\t{c1}\n{pmid}\t{s2}\t{s2 + len(m2)}\t{m2}\tDisease\t{c2}|{c3}\n\n")


def test_finetune_entry_point_trains_on_mention_name_pairs(setup, ontology, tmp_path):
    _, train_names, held_out, canonical = ontology
    # a task corpus: mentions (the held-out forms) annotated with their concepts
    corpus = tmp_path / "task.txt"
    with open(corpus, "w") as f:
        for i, (cid, names) in enumerate(held_out.items()):
            f.write(pubtator_doc(i + 100, m1=names[0], c1=cid, m2=names[1], c2=cid, c3="C999"))
    mentions = [m for d in read_pubtator(corpus) for m in d.mentions]
    assert len(mentions) == 2 * len(held_out) and set(mentions[1].ids) == {f"MESH:{list(held_out)[0]}", "MESH:C999"}
    pairs = tmp_path / "task_pairs.txt"
    with open(pairs, "w") as f:
        for m in mentions:
            for cid in sorted(m.ids):
                bare = cid.split(":", 1)[1]
                for name in train_names.get(bare, [])[:2]:
                    f.write(f"{bare}||{m.text}||{name}\n")

    out = tmp_path / "ft"
    args = ["finetune", "--no-progress", *cli_args({"paths.pairs": str(pairs), "paths.output": str(out), "paths.encoder": str(setup["model"]),
                                        "system.device": "cpu", "data.batch_size": 32, "training.lr": 5e-3, "data.epochs": 40})]
    proc = run_cli("training.finetune", args)
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log
    assert held_out_accuracy(out / "model", ontology) >= 0.8
    assert held_out_accuracy(setup["model"], ontology) < 0.2


# ---------------------------------------------------------------- the adapter variant (peft LoRA)
LORA = {"@adapters": "lora.v1", "r": 2, "lora_alpha": 4, "lora_dropout": 0.0}


@pytest.fixture(scope="module")
def lora_run(setup, tmp_path_factory):
    """One short LoRA run, snapshots on, kept in memory so the tests can look at the model."""
    pytest.importorskip("peft")
    out = tmp_path_factory.mktemp("lora") / "run"
    settings = overrides(setup, out, **{"training.adapter": LORA, "data.max_steps": 20, "training.snapshot_every_minutes": 0.002})
    trainer = Trainer(load_config("sapbert", settings), progress=False)
    summary = trainer.run()
    return {"trainer": trainer, "summary": summary, "out": out}


def test_lora_adapter_trains_a_small_share_and_leaves_the_base_weights(setup, lora_run):
    trainer, summary, out = lora_run["trainer"], lora_run["summary"], lora_run["out"]
    model = trainer.encoder.model  # the peft-wrapped encoder
    trainable = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert {n.split(".lora_")[0].rsplit(".", 1)[1] for n in trainable} == {"query", "value"}
    assert summary["trainable_params"] == sum(trainable.values())
    assert summary["total_params"] == sum(p.numel() for p in model.parameters())
    assert summary["trainable_percent"] == pytest.approx(100 * summary["trainable_params"] / summary["total_params"], abs=1e-3)
    assert 0 < summary["trainable_percent"] < 5  # r=2 on 2 layers x (query, value) of a 32-wide BERT
    assert summary["adapter"] == {"type": "lora", "r": 2, "lora_alpha": 4.0, "lora_dropout": 0.0, "target_modules": ["query", "value"]}
    start = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["trainable_percent"] == summary["trainable_percent"]

    # the frozen base weights did not move; the merged output differs exactly where the adapter sits
    base = load_file(str(setup["model"] / "model.safetensors"))
    during = {k.replace(".base_layer", ""): v for k, v in model.get_base_model().state_dict().items() if ".lora_" not in k}
    assert all(torch.equal(during[k], base[k]) for k in base)
    merged = final_weights(out)
    assert merged.keys() == base.keys()
    adapted = {k for k in base if k.endswith(("query.weight", "value.weight"))}
    assert len(adapted) == 4
    assert all(not torch.equal(merged[k], base[k]) for k in adapted)
    assert all(torch.equal(merged[k], base[k]) for k in base.keys() - adapted)


def test_lora_output_is_a_plain_encoder_folder(setup, ontology, lora_run, monkeypatch):
    trainer, summary, out = lora_run["trainer"], lora_run["summary"], lora_run["out"]
    snapshots = sorted((out / "snapshots").iterdir())
    assert snapshots and snapshots[-1].name == f"step-{summary['steps']:08d}"
    for folder in [out / "model", *snapshots]:
        assert not (folder / "adapter_config.json").exists()
        assert not any(".lora_" in k or "base_layer" in k for k in load_file(str(folder / "model.safetensors")))
    a, b = final_weights(out), load_file(str(snapshots[-1] / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)

    names = [n for ns in ontology[2].values() for n in ns][:20]
    adapted = trainer.encoder.encode(names)  # through the peft-wrapped model the run trained

    monkeypatch.setitem(sys.modules, "peft", None)  # loading needs no peft
    encoder = SapEncoder.load(out / "model", device="cpu", precision="fp32")
    assert type(encoder.model).__name__ in ("BertModel", "BertEncoder")  # transformers' or spacy_sapbert.bert's
    assert not hasattr(encoder.model, "peft_config")
    saved = json.loads((out / "model" / "sapbert_encoder.json").read_text())
    assert encoder.fingerprint == saved["fingerprint"] == summary["encoder_fingerprint"]
    vectors = encoder.encode(names)
    assert vectors.shape == (20, 32) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    # the same vectors as the adapted model in training, and not the base model's
    np.testing.assert_allclose(vectors, adapted, atol=1e-5)
    assert not np.allclose(vectors, SapEncoder.load(setup["model"], device="cpu", precision="fp32").encode(names), atol=1e-3)


def test_lora_run_killed_with_sigkill_resumes_to_the_same_weights(setup, tmp_path):
    pytest.importorskip("peft")
    adapter = {"@adapters": "lora.v1", "r": 4}  # LoRA dropout on: its masks come from the restored RNG
    settings = overrides(setup, tmp_path / "x", **{"data.batch_size": 8, "data.epochs": 1, "training.checkpoint_every": 10,
                                                   "training.adapter": adapter})
    out = kill_and_resume(setup, tmp_path, settings)
    last = sorted((out / "checkpoints").glob("step-*"))[-1]
    assert any(".lora_A." in k for k in load_file(str(last / "model.safetensors")))
    assert json.loads((last / "state.json").read_text())["adapter"]["r"] == 4
    # a checkpoint written with the adapter does not silently resume a run without it
    with pytest.raises(ValueError, match="adapter"):
        train(load_config("sapbert", {**settings, "paths.output": str(out), "training.adapter": {"@adapters": "none.v1"}}),
              resume=True, progress=False)
