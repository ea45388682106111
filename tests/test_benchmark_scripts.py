"""The benchmark scripts' own logic that the README's figures rest on."""
import importlib.util
import json
import time
from pathlib import Path

import pytest
import torch

from spacy_sapbert.evaluation.end_to_end import Counts, summarize_counts
from spacy_sapbert.kb import ConceptKB

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bundle(tmp_path):
    path = tmp_path / "bundle.jsonl"
    rows = [
        {"id": "C1", "name": "Asthma", "synonyms": ["bronchial asthma", "ASTHMA"]},
        {"id": "C2", "name": "Heart attack", "synonyms": ["myocardial infarction", "chronic asthma"]},
        {"id": "C3", "name": "Asthma", "synonyms": ["gout"]},  # a name another concept has
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    return path


@pytest.mark.parametrize("n_names", [3, 5, 12, 40])
def test_umls_scale_kb_has_exactly_the_asked_number_of_distinct_names(bundle, n_names):
    umls_scale = _load("umls_scale")
    records = list(umls_scale.scaled_records(bundle, n_names))
    kb = ConceptKB.from_records(records)
    assert kb.n_names == n_names  # variants colliding with existing names ("chronic asthma") are skipped
    assert {r.id for r in records} <= {"C1", "C2", "C3"}
    if n_names > 5:  # every bundle name is kept before any variant
        assert {"asthma", "bronchial asthma", "heart attack", "myocardial infarction", "chronic asthma", "gout"} <= set(kb.names)


def test_speed_table_has_a_scispacy_column_only_when_scispacy_was_measured(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # speed.py imports umls_scale beside it
    speed = _load("speed")
    run = {
        "command": "python benchmarks/speed.py --quick", "machine": {"cpu": "cpu", "nproc": 2, "threads": 2},
        "repeats": 3, "kb": {"name": "MEDIC", "names": 10, "index": "flat"}, "default_precision": "bf16",
        "n_mentions": 9, "mentions_per_s": 2000.0, "n_distinct_mentions": 7, "distinct_mentions_per_s": 800.0,
        "untuned": {"mentions_per_s": 700.0, "distinct_mentions_per_s": 300.0},
        "precision": {"fp32": {"names_per_s": 600.0, "ncbi_test_raw_acc@1": 67.0, "top5_overlap_with_fp32": 1.0}},
        "pipeline_load": {"load_s": 5.0, "first_link_s": 0.1, "rss_mb": 700.0}, "peak_rss_mb": 1500.0,
    }
    rows = [line for line in speed.render_speed(run, tmp_path / "speed.json").splitlines() if "mentions/s" in line]
    assert [line.count("|") for line in rows] == [4, 4]
    run["scispacy"] = {
        "scispacy": "0.6.2", "mentions_per_s": 1234.5, "distinct_mentions_per_s": 321.0, "indexed_aliases": 10,
        "index_build_seconds": 99.0, "index_build_threads": 2, "index_seconds": 1.5, "peak_rss_mb": 400.0,
        "linked_fraction": 0.5, "index_cached": True,
    }
    text = speed.render_speed(run, tmp_path / "speed.json")
    rows = [line for line in text.splitlines() if "mentions/s" in line]
    assert rows[0].endswith("| 2,000.0 | 700.0 | 1,234.5 |") and rows[1].endswith("| 800.0 | 300.0 | 321.0 |")
    assert "scispacy 0.6.2 `EntityLinker`, same KB" in text and "99.0 s to build on 2 thread(s) (when first built" in text and "50.0% of the gold mentions" in text
    assert "1.62× on the gold spans, 2.49× on the distinct strings" in text  # 2000 / 1234.5, 800 / 321


def test_pipeline_profile_counts_encoder_flops_and_runs_a_checkout_with_its_own_entry_points(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # it imports readme_tables beside it
    profile = _load("pipeline_profile")
    # MiniLM-L6: 6 layers, hidden 384, feed-forward 1536; 8 tokens: 8 x 7.08 MFLOP + 2 x 2 x 64 x 384 per layer
    assert profile.flops_per_name([8], 6, 384, 1536) == 6 * (8 * 2 * (4 * 384**2 + 2 * 384 * 1536) + 4 * 64 * 384)
    assert profile.flops_per_name([4, 12], 6, 384, 1536) > profile.flops_per_name([8, 8], 6, 384, 1536)  # t² term
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "setup.cfg").write_text(
        "[options.entry_points]\nspacy_factories =\n    sapbert_linker = spacy_sapbert.linker:make_sapbert_linker\n", encoding="utf8")
    shim = profile.entry_points_shim(tmp_path / "code", tmp_path / "shim")
    from importlib.metadata import PathDistribution

    dist = PathDistribution(next(shim.glob("*.dist-info")))
    assert [(e.group, e.name, e.value) for e in dist.entry_points] == [
        ("spacy_factories", "sapbert_linker", "spacy_sapbert.linker:make_sapbert_linker")]


def test_pipeline_profile_times_what_n_process_adds_per_doc(monkeypatch):
    """After the components, the Doc round trip that nlp.pipe(n_process > 1) makes for every document."""
    import spacy

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    profile = _load("pipeline_profile")
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    out = profile.stage_times(nlp, ["One text. Two."] * 3, profile.Timers())
    assert list(out["stages"]) == ["tokenizer", "sentencizer", profile.SENT, profile.RECEIVED]
    assert all(t["wall"] > 0 for t in out["stages"].values())
    assert out["bytes_per_doc"] == len(nlp("One text. Two.").to_bytes())


def test_pipeline_profile_ratios_compare_runs_of_the_same_run(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    profile = _load("pipeline_profile")

    def run(rate1, rate2):
        return {"pipe": [{"n_process": 1, "abstracts_per_s": rate1}, {"n_process": 2, "abstracts_per_s": rate2}]}

    result = {"processes": [1, 2], "fasthpocr": {"abstracts_per_s": 1000.0},
              "runs": {"after": {"hpo": run(400.0, 700.0), "ner": run(40.0, 70.0), "ner-alone": run(50.0, 100.0)}}}
    assert profile.ratios(result) == {
        "hpo / FastHPOCR (1 process), after, 1 process(es)": "0.400", "ner / its NER alone, after, 1 process(es)": "0.80",
        "hpo / FastHPOCR (1 process), after, 2 process(es)": "0.700", "ner / its NER alone, after, 2 process(es)": "0.70",
    }
    # on a shared machine the same run's rates per CPU second are set side by side too
    # (with 3 decimals: 0.296 must not print as the 0.30 of a 0.3x target)
    result["runs"]["after"]["hpo"]["pipe"][0]["abstracts_per_cpu_s"] = 444.0
    result["fasthpocr"]["abstracts_per_cpu_s"] = 1500.0
    assert profile.ratios(result)["hpo / FastHPOCR per CPU second, after"] == "0.296"


def test_cpu_profile_shares_out_time_by_where_it_is_spent(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    cpu_profile = _load("cpu_profile")
    assert cpu_profile.bucket_of(("~", 0, "<built-in method torch._C._nn.linear>")) == "encoder: torch linear/matmul"
    assert cpu_profile.bucket_of(("/x/spacy_sapbert/bert.py", 10, "forward")) == "encoder: other torch ops"
    assert cpu_profile.bucket_of(("/x/spacy_sapbert/span_proposals.py", 1, "propose")) == "span-finder proposals"
    assert cpu_profile.bucket_of(("spacy/tokens/doc.pyx", 507, "__iter__")) == "spaCy (tokenizer, Doc, Span)"
    assert cpu_profile.bucket_of(("/usr/lib/python3.11/re/_parser.py", 1, "parse")) == "other Python"
    shares = cpu_profile.profile_shares(lambda: sum(i * i for i in range(20000)))
    assert abs(sum(shares["shares"].values()) - 1) < 0.01 and shares["top_functions"]


def test_annotate_benchmark_corpus_is_every_distinct_abstract_once(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # annotate.py imports readme_tables beside it
    bench = _load("annotate")
    monkeypatch.setattr(bench, "WORK", tmp_path)
    corpus = bench.build_corpus(ROOT / "assets" / "benchmarks", None)
    assert corpus["distinct_pmids"] == corpus["documents"] == 2292 and corpus["shared_pmids"] == 0
    assert corpus["per_corpus"] == {"ncbi-disease": 792, "bc5cdr": 1500}
    rows = [json.loads(line) for line in (tmp_path / "abstracts.jsonl").read_text().splitlines()]
    assert len({r["id"] for r in rows}) == 2292 and all(r["text"] for r in rows)
    series = [[0.5, 300.0, 0], [2.0, 410.0, 250], [3.0, 420.0, 750], [4.0, 415.0, 1000]]
    memory = {"series_t_rss_mb_docs": series, "documents": 1000, "repeat": 2, "pipeline": "p", "docs_per_s": 9.0,
              "peak_rss_mb": {"driver": 420.0, "workers": []}}
    result = {"command": "c", "json": "j", "machine": {"cpu": "cpu", "nproc": 2}, "corpus": corpus, "shard_size": 250, "runs": [], "memory": memory}
    table = bench.render(result)["ANNOTATE-MEMORY"]
    assert [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()] == [
        "| 2 | 250 | 410 |", "| 3 | 750 | 420 |", "| 4 | 1,000 | 415 |"
    ]


# ---------------------------------------------------------------------------- ner_libraries.py

def test_step_speed_leaves_out_the_gaps_that_include_an_evaluation():
    worker = _load("ner_libraries_worker")
    # steps 0..4, evaluation after steps 0 and 2 (eval_frequency 2): those gaps (10 s) are left out
    counted = {"at": [0.0, 10.0, 11.0, 21.0, 22.0], "cpu": [0.0, 5.0, 5.5, 10.5, 11.0], "words": [100, 200, 300, 400, 500]}
    speed = worker.step_speed(counted, eval_frequency=2)
    assert speed["steps"] == 5 and speed["words"] == 1500
    assert speed["seconds_per_step"] == 1.0 and speed["cpu_seconds_per_step"] == 0.5  # gaps after steps 1 and 3
    assert speed["words_per_second"] == (200 + 400) / 2.0
    assert speed["words_per_cpu_second"] == (200 + 400) / 1.0


def _busy(seconds: float) -> None:
    started = time.process_time()
    while time.process_time() - started < seconds:
        pass


def test_counting_batcher_counts_words_and_stops_at_the_cpu_budget(tmp_path):
    worker = _load("ner_libraries_worker")
    out = tmp_path / "steps.json"

    def inner(items):
        for item in items:
            _busy(0.02)
            yield [item]

    docs = [["w"] * n for n in (3, 4, 5, 6)]
    everything = list(worker.counting_batcher(inner, str(out))(docs))
    assert len(everything) == 4 and json.loads(out.read_text())["words"] == [3, 4, 5, 6]
    capped = list(worker.counting_batcher(inner, str(out), max_cpu_seconds=0.03)(docs))
    assert 1 <= len(capped) < 4  # stopped once 0.03 CPU seconds were used
    assert json.loads(out.read_text())["words"] == [3, 4, 5, 6][: len(capped)]


def test_torch_pickles_are_told_from_other_weights(tmp_path):
    worker = _load("ner_libraries_worker")
    torch.save({"w": torch.zeros(2)}, tmp_path / "model.pt")
    (tmp_path / "cfg.json").write_text("{}")
    assert worker.is_torch_pickle(tmp_path / "model.pt")
    assert not worker.is_torch_pickle(tmp_path / "cfg.json")


def test_our_taggers_training_command_is_one_its_cli_accepts(monkeypatch):
    """The library comparison trains ours with OURS_COMMAND: every option in it must be one the trainer has."""
    import typer.main

    from training import ner_trf

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = _load("ner_libraries")
    line = bench.OURS_COMMAND.format(output="out", corpus="corpus/ner", minutes=1, threads=1).split()
    assert line[:4] == ["python", "-m", "training.ner_trf", "train"]
    train = typer.main.get_command(ner_trf.app).commands["train"]
    known = {opt for param in train.params for opt in param.opts}
    assert [word for word in line if word.startswith("--") and word not in known] == []


def test_table_shows_what_a_library_moves_and_why_a_run_failed(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # ner_libraries.py imports readme_tables beside it
    bench = _load("ner_libraries")
    results = {
        "machine": {"cpu": "test CPU", "nproc": 2},
        "install": {"spacy-transformers": {
            "versions": {"spacy-transformers": "1.4.0"}, "added_mb": 1.5, "base_site_packages_mb": 1900.0,
            "added": {"spacy-transformers": "1.4.0"}, "changed": {"transformers": ["5.24.0", "4.53.2"]}, "removed": {},
            "pip_check_returncode": 1, "pip_check": ["x 1.0 has requirement transformers>=5"],
            "startup_base": {"seconds": 0.5, "imported": []},
            "startup_with_library": {"seconds": 3.0, "imported": ["torch", "transformers"]},
            "tests": {"returncode": 1, "summary": "1 failed, 2 passed", "failures": ["E  assert 1", "FAILED tests/test_x.py::test_y"]},
        }},
        "runs": {"spacy-curated-transformers": {
            "budget_minutes": 5, "budget_clock": "cpu", "threads": 1,
            "train": {"ok": False, "error": ["...", "TypeError: only 0-dimensional arrays can be converted"]},
        }},
    }
    table = bench.render(results)
    assert "transformers 5.24.0 → 4.53.2" in table
    assert "x 1.0 has requirement transformers>=5" in table
    assert "0.50 (nothing heavy) → 3.00 (torch, transformers)" in table
    assert "1 failed, 2 passed; failed: `test_y`" in table
    row = next(line for line in table.splitlines() if line.startswith("| spacy-curated-transformers |"))
    assert "5 CPU min" in row and "fails: `TypeError: only 0-dimensional arrays can be converted`" in row


def test_fusion_weight_is_chosen_on_dev_and_the_table_shows_the_change(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    fusion = _load("fusion")
    dev = [{"weight": 0.0, "link_f1": 0.80}, {"weight": 0.2, "link_f1": 0.81}, {"weight": 0.35, "link_f1": 0.81}]
    assert fusion.choose(dev) == 0.2  # the best, and of equals the smaller
    assert fusion.choose(dev[:1] + [{"weight": 0.5, "link_f1": 0.79}]) == 0.0
    scores = lambda acc, f1: {"gold_spans": {"lenient_acc@1": acc, "strict_acc@1": acc - 5, "mentions_per_s": 900.0},  # noqa: E731
                              "end_to_end": {"link_f1": f1, "abstracts_per_s": 30.0}}
    row = {"dataset": "ncbi-disease", "dictionary": "ontology", "dev": dev, "chosen_weight": 0.2,
           "test": {"0.0": scores(80.0, 0.70), "0.2": scores(81.5, 0.705)}}
    table = fusion.render({"command": "python benchmarks/fusion.py", "machine": {"cpu": "x"}, "weights": [0.0, 0.2, 0.35], "rows": [row]})
    assert "| ncbi-disease | ontology | 0.0: 80.0, 0.2: 81.0, 0.35: 81.0 | 0.2 | 80.0 → 81.5 (+1.5) | 75.0 → 76.5 (+1.5) | 70.0 → 70.5 (+0.5) |" in table


def test_link_errors_sort_a_wrong_top_concept_into_the_first_kind_that_applies(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    kind = _load("link_errors").error_kind
    exact, near = ("D2", "Remifentanil", 1.0), ("C9", "penicillin N", 0.97)
    assert kind("remifentanil", False, exact, None, False) == "gold id not in the KB, renamed id"
    assert kind("quetiapine", False, near, None, False) == "gold id not in the KB"
    assert kind("ketamine", True, exact, 1, True) == "another concept of the same name first"
    assert kind("penicillin", True, near, 1, False) == "gold ranked 2-5"
    assert kind("Na", True, near, None, False) == "short form"
    assert kind("KF17837", True, near, None, False) == "code or formula"
    assert kind("dosulepine hydrochloride", True, near, None, False) == "salt or ion word"
    assert kind("adriamycin", True, near, None, False) == "other"


def test_encoder_choice_scores_dev_splits_only_and_records_how_an_encoder_was_trained(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    choice = _load("encoder_choice")
    calls = []

    def fake_evaluate(bench, encoder, dictionary, *, split, threads):
        calls.append((getattr(bench, "name", bench), encoder, dictionary, split))
        acc = 80.0 if encoder is None else 82.0
        return {"lenient_acc@1": acc, "strict_acc@1": acc - 1, "lenient_acc@5": 90.0, "n_queries": 10, "mentions_per_s": 1.0}

    monkeypatch.setattr(choice, "evaluate", fake_evaluate)
    trained = tmp_path / "run" / "model"
    trained.mkdir(parents=True)
    (tmp_path / "run" / "summary.json").write_text(json.dumps(
        {"steps": 6081, "pairs_seen": 1556646, "epochs_started": 1, "train_seconds": 290.7, "device": "cuda", "precision": "fp16"}))
    gsc = tmp_path / "gsc.tsv"
    gsc.write_text("1\nSeizures.\n0\t8\tSeizures\tHP:0001250\n", encoding="utf8")
    result = choice.measure([list(choice.DEFAULT_ENCODER), ["trained", str(trained)]], gsc, threads=1)
    assert {c[3] for c in calls} == {"dev"} and {c[2] for c in calls} == {"ontology"}
    assert result["datasets"] == ["ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical", "gscplus"]
    assert calls[0][1] is None and calls[-1][1] == str(trained)  # "minilm" is the offline default: no folder passed
    table = choice.render({**result, "command": "python benchmarks/encoder_choice.py", "machine": {"cpu": "x"}})
    assert "| trained | 82.0 / 81.0 | 82.0 / 81.0 | 82.0 / 81.0 | 82.0 / 81.0 | 82.00 | 1,556,646 pairs, 6,081 steps, 4.8 min on cuda (fp16) |" in table
    assert "| all-MiniLM-L6-v2 (untrained, shipped default) | 80.0 / 79.0 |" in table and table.count("| — |") == 1


def test_encoder_choice_append_keeps_the_earlier_rows_and_names_both_commands(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    choice = _load("encoder_choice")
    monkeypatch.setattr(choice, "OUT", tmp_path / "encoder_choice.json")
    monkeypatch.setattr(choice, "README", tmp_path / "README.md")
    (tmp_path / "README.md").write_text("<!-- ENCODER-CHOICE:START -->\n<!-- ENCODER-CHOICE:END -->\n", encoding="utf8")
    measured = []

    def fake_measure(encoders, gsc, threads):
        measured.append([name for name, _ in encoders])
        dev = {"lenient_acc@1": 80.0 + len(measured), "strict_acc@1": 79.0, "n_queries": 10}
        rows = [{"encoder": name, "folder": folder, "training": None, "dev": {"ncbi-disease": dev}} for name, folder in encoders]
        return {"rows": rows, "datasets": ["ncbi-disease"], "threads": threads}

    monkeypatch.setattr(choice, "measure", fake_measure)
    monkeypatch.setattr(choice, "machine_description", lambda: {"cpu": "x"})
    choice.main(["--encoder", "gpu=/gone/model"])
    choice.main(["--encoder", "cpu=/here/model", "--append"])
    assert measured == [[choice.DEFAULT_ENCODER[0], "gpu"], ["cpu"]]  # the earlier rows are not measured again
    result = json.loads((tmp_path / "encoder_choice.json").read_text())
    assert [r["encoder"] for r in result["rows"]] == [choice.DEFAULT_ENCODER[0], "gpu", "cpu"]
    block = (tmp_path / "README.md").read_text()
    assert ("Generated by `python benchmarks/encoder_choice.py --encoder 'gpu=/gone/model'`, then "
            "`python benchmarks/encoder_choice.py --encoder 'cpu=/here/model' --append`") in block
    assert "| cpu | 82.0 / 79.0 |" in block and "| gpu | 81.0 / 79.0 |" in block


def test_context_weight_is_chosen_on_dev_and_the_table_shows_ambiguous_names_apart(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    rerank = _load("context_rerank")
    dev = [{"weight": 0.0, "lenient_acc@1": 82.0, "strict_acc@1": 80.0}, {"weight": 0.1, "lenient_acc@1": 81.0, "strict_acc@1": 81.0},
           {"weight": 0.2, "lenient_acc@1": 81.0, "strict_acc@1": 81.0}]
    choose = _load("weight_sweep").choose_by_strict
    assert choose(dev) == 0.1 and choose(dev[:1]) == 0.0  # strict decides: lenient rewards not deciding
    calls = []

    def fake_evaluate(dataset, *, dictionary, context_weight, context_examples, split="test"):
        calls.append((dataset, dictionary, split, context_weight, context_examples))
        gain = 10 * context_weight
        subset = lambda acc, n: {"lenient_acc@1": acc, "strict_acc@1": acc - 20, "n_queries": n}  # noqa: E731
        return {"lenient_acc@1": 80 + gain, "strict_acc@1": 75 + gain, "lenient_acc@5": 90.0, "n_queries": 100, "mentions_per_s": 900.0 - 1000 * context_weight,
                "breakdown": {"name_ambiguous": subset(70 + 10 * gain, 10), "name_unambiguous": subset(81.0, 90)}}

    monkeypatch.setattr(rerank, "evaluate", fake_evaluate)
    row = rerank.measure("ncbi-disease", "ontology", [0.0, 0.1])
    assert [c[2] for c in calls] == ["dev", "dev", "test", "test"] and {c[4] for c in calls} == {"self"}  # no labels on the ontology row
    assert row["chosen_weight"] == 0.1 and set(row["test"]) == {"0.0", "0.1"}
    table = rerank.render({"command": "python benchmarks/context_rerank.py", "machine": {"cpu": "x"}, "weights": [0.0, 0.1], "rows": [row]})
    row["end_to_end"] = {"0.0": {"link_p": 0.8, "link_r": 0.7, "link_f1": 0.75, "abstracts_per_s": 30.0},
                         "0.1": {"link_p": 0.8, "link_r": 0.72, "link_f1": 0.76, "abstracts_per_s": 20.0}}
    table = rerank.render({"command": "python benchmarks/context_rerank.py", "end_to_end_command": "python benchmarks/context_rerank.py --from-saved --end-to-end",
                           "machine": {"cpu": "x"}, "weights": [0.0, 0.1], "rows": [row]})
    assert "| ncbi-disease | ontology | 0.1 | 80.0 | 70.0 → 72.0 (+2.0) | 75.0 → 76.0 (+1.0) | 30.0 → 20.0 |" in table
    assert ("| ncbi-disease | ontology | 0.0: 75.0, 0.1: 76.0 | 0.1 | 80.0 → 81.0 (+1.0) | 75.0 → 76.0 (+1.0) | 90.0 "
            "| 50.0 → 60.0 (+10.0) (10) | 81.0 | 900 → 800 |") in table


def test_fasthpocr_is_scored_on_gsc_as_the_default_is(kb_folder, monkeypatch):
    """FastHPOCR's annotations, one predicted span per distinct offsets with every concept it gives
    there that the KB holds (others dropped), through the end-to-end scorer."""
    from spacy_sapbert.evaluation.datasets import ConceptRecord, Document, Mention

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # hpo_default.py imports its neighbours
    hpo_default = _load("hpo_default")
    kb = kb_folder([ConceptRecord("HP:1", "Seizure", ["Seizures"]), ConceptRecord("HP:2", "Ataxia", [])])
    text = "Seizures and mild ataxia."
    doc = Document("d1", text, [Mention("d1", 0, 8, "Seizures", "Phenotype", ("HP:1",)),
                                Mention("d1", 13, 24, "mild ataxia", "Phenotype", ("HP:2",))])
    reply = {"annotations": [[[0, 8, "HP:1"], [0, 8, "HP:9"], [18, 24, "HP:2"], [13, 17, "HP:0000006"]]]}
    asked = []
    monkeypatch.setattr(hpo_default, "run_fasthpocr", lambda python, texts, cache, longest_match: asked.append((texts, longest_match)) or reply)
    per_doc = hpo_default.fasthpocr_counts("python", kb, [doc], longest_match=True)
    assert asked == [([text], True)] and hpo_default.fasthpocr_label(True) == "FastHPOCR, longest match"
    row = summarize_counts(Counts.total(per_doc))
    assert (row["mention_p"], row["mention_r"]) == (0.5, 0.5)  # "Seizures" right; "ataxia" not the gold "mild ataxia"
    assert (row["link_p"], row["link_r"]) == (0.5, 0.5)  # HP:9 and HP:0000006 are not in the KB: dropped
    found = hpo_default.uncertainty(per_doc * 3, {"peer": per_doc * 3})
    assert found["span finder, shipped - peer"]["difference"] == 0.0 and found["peer"]["value"] == 0.5
    sentence = hpo_default.uncertainty_sentence(found)
    assert "span finder, shipped 0.500 [0.500, 0.500]; peer 0.500" in sentence
    assert "span finder, shipped minus peer +0.000 [+0.000, +0.000], higher in 0% of the resamples" in sentence


def test_consistency_is_chosen_on_dev_gold_spans_and_set_on_the_linker(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    consistency = _load("consistency")
    calls = []

    def fake_evaluate(dataset, *, dictionary, split, consistency):
        calls.append((split, consistency))
        subset = {"lenient_acc@1": 50.0, "strict_acc@1": 40.0, "n_queries": 10}
        return {"lenient_acc@1": 80.0, "strict_acc@1": 75.0 + (consistency == 0.9), "lenient_acc@5": 90.0, "n_queries": 100,
                "mentions_per_s": 900.0, "breakdown": {"name_ambiguous": subset, "name_unambiguous": subset}}

    monkeypatch.setattr(consistency, "evaluate", fake_evaluate)
    row = consistency.measure("bc5cdr-chemical", "ontology", [0.0, 0.9, 1.0])
    assert calls == [("dev", 0.0), ("dev", 0.9), ("dev", 1.0), ("test", 0.0), ("test", 0.9)]
    assert row["chosen_weight"] == 0.9 and row["test"]["0.9"]["command"].endswith("--dictionary ontology --consistency 0.9")
    table = consistency.render({"command": "python benchmarks/consistency.py", "machine": {"cpu": "x"}, "weights": [0.0, 0.9, 1.0], "rows": [row]})
    assert "| bc5cdr-chemical | ontology | 0.0: 75.0, 0.9: 76.0, 1.0: 75.0 | 0.9 | 80.0 | 75.0 → 76.0 (+1.0) |" in table


def test_ner_errors_sorts_a_missed_chemical_into_the_first_kind_that_applies(monkeypatch):
    import spacy

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    ner_errors = _load("ner_errors")
    text = "Lidocaine-induced asystole and STZ with CB 3717 or xenon-133 and aspirin."
    doc = spacy.blank("en").make_doc(text)

    def kind(mention, entities=()):
        start = text.index(mention)
        return ner_errors.miss_kind(text, start, start + len(mention), doc, list(entities))

    assert kind("xenon") == "not on token boundaries"  # inside "xenon-133" for English's rules
    assert kind("asystole", [(18, 26, "Disease")]) == "tagged Disease"
    assert kind("aspirin", [(64, 70, "Chemical")]) == "wrong boundaries"
    assert kind("STZ") == kind("CB 3717") == "short form"
    assert kind("aspirin") == "one word, not found"
    assert kind("asystole and STZ") == "several words, not found"
    run = {"gold": 3, "precision": 0.5, "recall": 1 / 3, "missed": 2, "missed_by_kind": {k: 0 for k in ner_errors.KINDS},
           "most_frequent": {k: [] for k in ner_errors.KINDS}}
    run["missed_by_kind"]["short form"] = 2
    run["most_frequent"]["short form"] = [["STZ", 2]]
    block = ner_errors.render({"command": "python benchmarks/ner_errors.py", "machine": {"cpu": "cpu"}, "split": "dev",
                               "file": "bc5cdr/dev", "runs": {"ner": run}})
    assert "| `ner` | 3 | 50.0 | 33.3 | 2 | 0 | 0 | 0 | 2 | 0 | 0 |" in block and '- short form: "STZ" ×2' in block


def test_linker_overlap_times_the_ner_alone_and_the_linkers_in_turn_and_overlapped(monkeypatch, kb_folder, tiny_bert_path):
    import spacy

    from spacy_sapbert.records import ConceptRecord

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    overlap = _load("linker_overlap")
    kb = kb_folder([ConceptRecord("HP:1", "Seizure", ["Convulsion"]), ConceptRecord("HP:2", "Fever", ["Pyrexia"])])
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler", name="ner").add_patterns([{"label": "PHEN", "pattern": p} for p in ("Convulsion", "Pyrexia")])
    nlp.add_pipe("sapbert_linker", config={"kb": str(kb), "encoder": str(tiny_bert_path), "precision": "fp32"})
    texts = ["Convulsion.", "Pyrexia and Convulsion."] * 3
    runs = {v: overlap.run_variant(nlp, texts, v) for v in overlap.VARIANTS}
    assert nlp.get_pipe("sapbert_linker").overlap is True  # the last variant run
    assert runs["NER alone"]["links"][1] == [(0, 7, "PHEN", ""), (12, 22, "PHEN", "")]  # found, not linked
    assert runs["linkers in turn"]["links"] == runs["linkers overlapped"]["links"]
    assert runs["linkers in turn"]["links"][1] == [(0, 7, "PHEN", "HP:2"), (12, 22, "PHEN", "HP:1")]
    rates = {"NER alone": 100.0, "linkers in turn": 70.0, "linkers overlapped": 85.0}
    result = {"command": "c", "machine": {"cpu": "m", "nproc": 2}, "threads": 2, "texts": 6, "repeats": 1, "load_average": {"before": [0], "after": [0]},
              "runs": [{"pipeline": "ner", "overlap_by_default": [True], "abstracts_per_s": rates, "same_links": True},
                       {"pipeline": "hpo", "overlap_by_default": [False], "abstracts_per_s": {k: v for k, v in rates.items() if k != "NER alone"},
                        "same_links": True}]}
    table = overlap.render(result)
    assert "| ner | on | 100.0 | 70.0 | 85.0 | 0.70 | 0.85 | yes |" in table
    assert "| hpo | off | – | 70.0 | 85.0 | – | – | yes |" in table


def test_parts_together_takes_each_sweeps_choice_and_takes_out_one_part_at_a_time(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    together = _load("parts_together")
    chosen = {"fusion": 0.25, "context_rerank": 0.1, "consistency": 0.0}  # consistency: its sweep left it off
    for sweep, w in chosen.items():
        rows = [{"dataset": "ncbi-disease", "dictionary": "ontology", "chosen_weight": w}]
        (tmp_path / f"{sweep}.json").write_text(json.dumps({"rows": rows}))
    calls = []

    def fake_evaluate(dataset, encoder, dictionary, *, split, **settings):
        calls.append((encoder, split, settings))
        gain = 10 * settings.get("fusion_weight", 0) + 20 * settings.get("context_weight", 0) + (1 if encoder else 0)
        subset = {"lenient_acc@1": 50.0, "strict_acc@1": 40.0 + gain, "n_queries": 5}
        return {"lenient_acc@1": 80 + gain, "strict_acc@1": 78 + gain, "lenient_acc@5": 90.0, "n_queries": 100, "mentions_per_s": 1.0,
                "breakdown": {"name_ambiguous": subset, "name_unambiguous": subset}, "pipeline_options": settings}

    monkeypatch.setattr(together, "evaluate", fake_evaluate)
    monkeypatch.setattr(together, "machine_description", lambda: {"cpu": "x"})
    (tmp_path / "model").mkdir()
    (tmp_path / "README.md").write_text("<!-- PARTS-TOGETHER:START -->\n<!-- PARTS-TOGETHER:END -->\n", encoding="utf8")
    result = together.main(["--datasets", "ncbi-disease", "--dictionaries", "ontology", "--encoder", f"trained 40 min={tmp_path / 'model'}",
                            "--results", str(tmp_path), "--output", str(tmp_path / "out.json"), "--readme", str(tmp_path / "README.md")])
    variants = result["rows"][0]["variants"]
    assert [v["name"] for v in variants] == ["all off (defaults)", "fusion alone", "context alone", "encoder alone", "all",
                                             "all but fusion", "all but context", "all but encoder"]
    assert {c[1] for c in calls} == {"test"} and all("consistency" not in c[2] for c in calls)  # chosen 0: off everywhere
    assert calls[0] == (None, "test", {})  # the defaults: no part set, the untrained encoder
    assert calls[4] == (str(tmp_path / "model"), "test", {"fusion_weight": 0.25, "context_weight": 0.1, "context_examples": "self"})
    assert calls[6][2] == {"fusion_weight": 0.25} and calls[7][0] is None  # all but context; all but encoder
    assert variants[4]["command"] == ("python -m spacy_sapbert evaluate --dataset ncbi-disease --dictionary ontology --fusion-weight 0.25 "
                                      f"--context-weight 0.1 --context-examples self --encoder {tmp_path / 'model'}")
    block = (tmp_path / "README.md").read_text()
    assert "| ncbi-disease | ontology | all | fusion 0.25, context 0.1, encoder | 85.5 | 83.5 | 90.0 | 45.5 (5) |" in block
    assert "| ncbi-disease | ontology | all off (defaults) | – | 80.0 | 78.0 |" in block
    assert f"--encoder 'trained 40 min={tmp_path / 'model'}'" in block  # the recorded command runs as it reads
    two = together.variants({"fusion": 0.25, "context": 0.1}, None)
    assert [v["name"] for v in two] == ["all off (defaults)", "fusion alone", "context alone", "all"]  # no row twice
    with pytest.raises(FileNotFoundError, match="consistency.json.*benchmarks/consistency.py"):
        (tmp_path / "consistency.json").unlink()
        together.chosen_settings(tmp_path, "ncbi-disease", "ontology")


def test_behaviour_snapshot_tells_rounding_from_changed_links():
    """``compare`` sorts a difference: the same spans and concepts with candidates reordered and scores
    moved (rounding), or a span or concept gone (behaviour)."""
    snapshot = _load("behaviour_snapshot")

    def line(*spans):
        return json.dumps({"id": "1", "ents": [list(s) for s in spans], "nested": []})

    cands = [["C1", "a", 0.9, False], ["C2", "b", 0.8, False]]
    before = [line([0, 5, "D", "C1", "C1", cands, [], None])]
    rounded = [line([0, 5, "D", "C1", "C1", [["C1", "a", 0.9005, False], ["C2", "b", 0.8, False]], [], None])]
    reordered = [line([0, 5, "D", "C1", "C1", cands[::-1], [], None])]
    relinked = [line([0, 5, "D", "C2", "C2", cands[::-1], [], None])]
    assert snapshot.what_differs(before, rounded).startswith("spans with their concepts: 0 only before, 0 only after, 1 in both")
    assert "another order: 0 of 1; largest change of a top score: 5.00e-04" in snapshot.what_differs(before, rounded)
    assert "another order: 1 of 1" in snapshot.what_differs(before, reordered)
    assert "1 only before, 1 only after, 0 in both" in snapshot.what_differs(before, relinked)


def test_speed_times_nlp_pipe_of_a_pipeline_holding_the_linker(kb_folder, tiny_encoder, monkeypatch):
    """``speed.py``'s rates are ``nlp.pipe``'s, as users run it: the docs come back linked, and the
    rate counts the linked spans."""
    from spacy_sapbert.records import ConceptRecord
    from spacy_sapbert.search import LinkingKB

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    speed = _load("speed")
    umls_scale = _load("umls_scale")
    lkb = LinkingKB.from_disk(kb_folder([ConceptRecord("C1", "asthma", ()), ConceptRecord("C2", "fever", ())]))
    nlp = speed.linker_pipeline(lkb, tiny_encoder, cache_size=0)
    assert nlp.pipe_names == ["sapbert_linker"] and nlp.get_pipe("sapbert_linker").cache_size == 0
    docs = umls_scale.mention_docs(nlp, ["asthma", "fever", "asthma attack"])
    assert speed.pipe_rate(nlp, docs, repeats=1) > 0
    assert [d.ents[0]._.cui for d in docs[:2]] == ["C1", "C2"]
    # the index's own path and fp32 in turn: an index that would search in int8 (a spy here) is also timed in fp32
    index, paths = type(lkb.index), []
    fp32 = index.fp32_search
    monkeypatch.setattr(index, "search_path", lambda self, k: "int8")
    monkeypatch.setattr(index, "int8_search", lambda self, q, k: paths.append("int8") or fp32(self, q, k))
    monkeypatch.setattr(index, "fp32_search", lambda self, q, k: paths.append("fp32") or fp32(self, q, k))
    rates = speed.search_path_rates(nlp, docs[:2], docs, repeats=1)
    assert rates["path"] == "int8" and sorted(rates) == ["fp32_distinct_per_s", "fp32_gold_per_s", "own_distinct_per_s", "own_gold_per_s", "path"]
    assert paths == ["int8", "fp32"] + ["fp32", "int8", "int8", "fp32"]  # a first round, then each order once; the KB names in docs[:2] need no search
    assert "search_path" not in vars(lkb.index)  # the index's own method again afterwards
    # the encoder's passes shared among threads and on one thread, in turn; shared again afterwards
    encoder, shared = nlp.get_pipe("sapbert_linker").encoder, []
    encode = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts, **kw: shared.append(encoder.threaded_passes) or encode(texts, **kw))
    rates = speed.pass_thread_rates(nlp, docs[:2], docs, repeats=1)
    assert rates["threads"] == 1 and sorted(rates) == [
        "one_thread_distinct_per_s", "one_thread_gold_per_s", "shared_distinct_per_s", "shared_gold_per_s", "threads"]
    assert shared == [True, False, False, True, True, False] and encoder.threaded_passes


def test_dev_before_after_runs_each_evaluation_in_each_checkout_and_keeps_its_figures(tmp_path, monkeypatch):
    """Each ``evaluate`` runs with the checkout it measures as working directory (``-m`` imports its
    code); the old checkout gets this one's KB cache; the figures are read from the printed JSON."""
    script = _load("dev_before_after")
    before = tmp_path / "before"
    before.mkdir()
    calls = []

    real_run = script.subprocess.run

    def run(command, *args, cwd=None, env=None, **kw):
        if command[0] == "git":
            return type("Done", (), {"stdout": "abc1234\n"})()
        if "spacy_sapbert" not in command:
            return real_run(command, *args, cwd=cwd, env=env, **kw)  # machine_description's own look
        calls.append((Path(cwd), command))
        if Path(cwd) == before and "--per-document" in command:  # an old checkout without the option
            return type("Done", (), {"stdout": "", "stderr": "Error: No such option: --per-document", "returncode": 2})()
        score = 0.5 if Path(cwd) == before else 0.6
        out = {"lenient_acc@1": score, "n_queries": 7} if "--end-to-end" not in command else {"link_f1": score, "label": "x"}
        return type("Done", (), {"stdout": json.dumps(out), "stderr": "", "returncode": 0})()

    monkeypatch.setattr(script.subprocess, "run", run)
    result = script.main(["--before-code", str(before), "--output", str(tmp_path / "out.json")])
    assert len(calls) == 3 * len(script.DATASETS) * len(script.RUNS)  # the old checkout asked twice
    assert {cwd for cwd, _ in calls[::3]} == {before.resolve()} and {cwd for cwd, _ in calls[1::3]} == {before.resolve()}
    assert {cwd for cwd, _ in calls[2::3]} == {script.ROOT} and all("--per-document" in c for _, c in calls[2::3])
    assert all(c[1][c[1].index("--split") + 1] == "dev" for c in calls)
    first, e2e = result["rows"][0], result["rows"][2]
    assert first["before"] == {"lenient_acc@1": 0.5} and first["after"] == {"lenient_acc@1": 0.6} and first["paired"] is None
    assert e2e["after"] == {"link_f1": 0.6} and result["before_commit"] == "abc1234" and json.loads((tmp_path / "out.json").read_text())["rows"] == result["rows"]


def test_the_padded_forward_traces_with_shapes_left_open(tiny_bert_path):
    """ONNX export (``benchmarks/onnx_int8.py``: ``torch.onnx.export`` with dynamic axes) traces the
    plain BERT's padded ``forward``: the trace of one batch must run another batch of other widths as
    the module does, so that forward takes its sizes from its inputs, never from Python numbers of one batch."""
    import warnings

    from spacy_sapbert.encoder import SapEncoder

    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision="fp32", plain_bert=True)
    hidden = _load("onnx_int8")._LastHidden(encoder.model).eval()  # what onnx_int8.py exports
    texts = ["diabetes mellitus type 2", "Myocardial Infarction", "café-au-lait spots", "x" * 300, "", "  heart   attack  ", "seizure " * 40]
    keys = ("input_ids", "attention_mask", "token_type_ids")
    first, other = encoder.tokenize(texts[:2]), encoder.tokenize(texts[2:])
    assert other["input_ids"].shape != first["input_ids"].shape
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's own notes
        traced = torch.jit.trace(hidden, tuple(first[k] for k in keys), check_trace=False)
        got = traced(*(other[k] for k in keys))
        expected = hidden(*(other[k] for k in keys))
    mask = other["attention_mask"].bool()
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)


def test_encoder_layers_cuts_a_bert_to_its_first_layers(tiny_bert_path, tmp_path, monkeypatch):
    """``encoder_layers.truncated``: the config says the new depth, the later layers' weights are gone,
    and the encoder loads the cut model and encodes with it (other vectors than the whole model's)."""
    from safetensors.torch import load_file

    from spacy_sapbert.encoder import SapEncoder

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its sibling imports
    encoder_layers = _load("encoder_layers")
    depth = json.loads((tiny_bert_path / "config.json").read_text())["num_hidden_layers"]
    assert depth >= 2
    cut = encoder_layers.truncated(tiny_bert_path, 1, tmp_path / "cut")
    assert json.loads((cut / "config.json").read_text())["num_hidden_layers"] == 1
    assert not [k for k in load_file(str(cut / "model.safetensors")) if ".layer.1." in k]
    full, short = SapEncoder.load(tiny_bert_path, precision="fp32"), SapEncoder.load(cut, precision="fp32")
    assert short.encode(["asthma"]).shape == full.encode(["asthma"]).shape
    assert not torch.allclose(torch.as_tensor(short.encode(["asthma"])), torch.as_tensor(full.encode(["asthma"])))
    with pytest.raises(ValueError, match="layers, not"):
        encoder_layers.truncated(tiny_bert_path, depth + 1, tmp_path / "deeper")


def test_assertion_abstracts_compare_sample_and_score(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # assertion_abstracts.py imports abstract_spans beside it
    script = _load("assertion_abstracts")
    assert script.sentence_of("No fever. No cough here. Done.", 13, 18) == "No [[cough]] here."
    assert script.sentence_of("A fever here. Done.", 2, 7) == "A [[fever]] here."  # no sentence before it

    def snap(path, lexicon, negated):
        docs = [[[0, 5, "fever", "[[fever]] ...", negated[0], False, False, False, False],
                 [10, 15, "cough", "... [[cough]]", negated[1], True, False, False, False]]]
        path.write_text(json.dumps({"lexicon": lexicon, "abstracts": 1, "texts_sha256": "x", "docs": docs}))
        return path

    before, after = snap(tmp_path / "b.json", "1.0", [True, True]), snap(tmp_path / "a.json", "1.1", [True, False])
    result = script.compare(before, after, tmp_path / "c.json", show=10)
    assert result["counts"]["negated"] == {"before": 2, "after": 1, "turned_on": 0, "turned_off": 1}
    assert result["counts"]["historical"] == {"before": 1, "after": 1, "turned_on": 0, "turned_off": 0}
    assert result["changed"] == ["negated True -> False | cough | ... [[cough]]"]
    script.sample(before, "negated", 2, 0, tmp_path / "s.tsv")
    lines = (tmp_path / "s.tsv").read_text().splitlines()
    assert lines[0].startswith("# 2 of the 2 spans with negated set (lexicon 1.0)") and len(lines) == 4
    with pytest.raises(SystemExit, match="no judgement"):
        script.score([tmp_path / "s.tsv"])
    judged = tmp_path / "j.tsv"
    judged.write_text("\n".join([lines[0], lines[1], lines[2] + "correct", lines[3] + "arguable"]) + "\n")
    capsys.readouterr()
    script.score([judged])
    assert "2 judged, 1 correct, 1 arguable, 0 wrong: precision 0.750 (arguable as half), standard error 0.306" in capsys.readouterr().out


def test_link_changes_compare_and_sample(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # link_changes.py imports abstract_spans beside it
    script = _load("link_changes")

    def snap(path, spans):
        path.write_text(json.dumps({"abstracts": 2, "texts_sha256": "x", "docs": spans}))
        return path

    pressure = [0, 14, "blood pressure", "HP:1", "Increased blood pressure", "[[blood pressure]] ..."]
    fever, seizures = [20, 25, "fever", "HP:2", "Fever", "... [[fever]]"], [0, 8, "seizures", "HP:3", "Seizures", "[[seizures]]"]
    before = snap(tmp_path / "b.json", [[pressure, fever], []])
    after = snap(tmp_path / "a.json", [[fever[:3] + ["HP:4", "Pyrexia", fever[5]]], [seizures]])
    result = script.compare(before, after, "test", tmp_path / "c.json")
    assert result["spans"] == {"before": 2, "after": 2, "removed": 1, "added": 1, "relinked": 1}
    assert result["removed"] == [[0, *pressure]] and result["added"] == [[1, *seizures]]
    assert result["relinked"] == [[0, *fever, "HP:4", "Pyrexia"]]
    assert result["removed_most_often"] == [("blood pressure", 1)]
    script.sample(tmp_path / "c.json", "removed", 5, 0, tmp_path / "s.tsv")
    lines = (tmp_path / "s.tsv").read_text().splitlines()
    assert lines[0].startswith("# 1 of the 1 spans removed in c.json") and len(lines) == 3
    assert lines[2].split("\t") == ["0", "0", "blood pressure", "HP:1", "Increased blood pressure", "[[blood pressure]] ...", ""]
    with pytest.raises(SystemExit, match="no judgement"):  # scored as assertion_abstracts scores
        script.score([tmp_path / "s.tsv"])


def test_summary_has_the_assertion_row(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # summary.py imports readme_tables beside it
    summary = _load("summary")
    context = {"rules_version": "9.9.9", "gennegex_published": {"name": "GenNegEx", "f": 0.9467},
               "sapbert_context": {"dev (lines 1-1200)": {}, "test (lines 1201-2376)": {
                   a: {"f": f} for a, f in (("negated", 0.97), ("historical", 0.7181), ("hypothetical", 0.96))}}}
    (tmp_path / "negex_context.json").write_text(json.dumps(context))
    row = [line for line in summary.render(tmp_path).splitlines() if "assertion" in line]
    assert row == ["| assertion (`sapbert_context`, lexicon 9.9.9) on the NegEx/ConText test set, lines 1,201-2,376 "
                   "(tuned on 1-1,200) | negated F 0.970, historical F 0.718, hypothetical F 0.960; GenNegEx: negated F "
                   "0.947 | (README) Clinical context |"]
    context["gencontext"] = {"test (lines 1201-2376)": {
        a: {"f": f} for a, f in (("negated", 0.98), ("historical", 0.6552), ("hypothetical", 0.96))}}
    (tmp_path / "negex_context.json").write_text(json.dumps(context))
    row = [line for line in summary.render(tmp_path).splitlines() if "assertion" in line]
    assert "hypothetical F 0.960; GenConText (its authors' output): negated F 0.980, historical F 0.655, " \
           "hypothetical F 0.960; GenNegEx: negated F 0.947 |" in row[0]


def test_word_variants_rows_show_their_lead_over_the_default_with_its_interval(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    word_variants = _load("word_variants")
    scores = {k: 0.5 for k in ("mention_p", "mention_r", "mention_f1", "link_p", "link_r", "link_f1")}
    lead = {"difference": 0.005, "low": -0.03, "high": 0.04, "first_higher": 0.6, "level": 0.95, "resamples": 2000, "documents": 22}
    hpo = {"command": "python benchmarks/word_variants.py", "load_average": [0.5], "rows": [
        {"kb": "default (no variants)", **scores, "vs_default": {**lead, "difference": 0.0, "low": 0.0, "high": 0.0}},
        {"kb": "default (no variants)", "span_finder": {"min_variant_score": 0.9}, **scores, "vs_default": lead}],
        "table": {"candidates": {"substitution": 1}, "word_order": ["of"], "thresholds": {}, "sources": {}}}
    monkeypatch.setattr(word_variants, "sample_precision", lambda: {})
    block = word_variants.render(hpo, None)
    assert "| default (no variants); span finder min_variant_score 0.9 | 0 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | +0.005 [-0.030, +0.040] |" in block
    assert "95% interval over 2,000 bootstrap resamples of the 22 dev abstracts" in block
    row = {"dataset": "ncbi-disease", "split": "dev", "dictionary": "ontology", "span_finder": {}, **scores,
           "missed": {"not found at its offsets": 3, "found, another concept": 1},
           "wrong": {f"wrong_{k}_gold": 1 for k in ("inside", "containing", "crossing", "apart_from")}}
    medic = {"command": "python benchmarks/word_variants.py --medic", "rows": [
        row, {**row, "dictionary": "ontology+variants", "vs_first": {**lead, "difference": -0.013, "low": -0.03, "high": 0.004}}]}
    table = word_variants.render(hpo, medic)
    assert "| ncbi-disease | dev | ontology | – | 0.500 | 0.500 | 0.500 | 0.500 | – | 3 / 1 | 1 / 1 / 1 / 1 |" in table
    assert "| ncbi-disease | dev | ontology+variants | – | 0.500 | 0.500 | 0.500 | 0.500 | -0.013 [-0.030, +0.004] | 3 / 1 |" in table


def test_dev_before_after_pairs_two_runs_document_by_document():
    script = _load("dev_before_after")
    before = [{"doc": "a", "lenient_acc@1": [3, 4], "strict_acc@1": [3, 4]}, {"doc": "b", "lenient_acc@1": [1, 2], "strict_acc@1": [1, 2]}]
    after = [{"doc": "a", "lenient_acc@1": [4, 4], "strict_acc@1": [4, 4]}, {"doc": "b", "lenient_acc@1": [1, 2], "strict_acc@1": [1, 2]}]
    change = script.paired(before, after)
    assert change["figure"] == "lenient_acc@1" and change["difference"] == round(100 * 5 / 6 - 100 * 4 / 6, 4)
    assert change["low"] >= 0 and change["documents"] == 2
    assert script.paired(before, None) is None and script.paired(before, after[::-1]) is None  # not the same documents
    counts = {"gold": 2, "predicted": 2, "exact": 2, "link_gold": 2, "link_predicted": 2, "link_right": 1}
    end_to_end = script.paired([{"doc": "a", **counts}, {"doc": "b", **counts}],
                               [{"doc": "a", **counts, "link_right": 2}, {"doc": "b", **counts}])
    assert end_to_end["figure"] == "link_f1" and end_to_end["difference"] == 0.25
