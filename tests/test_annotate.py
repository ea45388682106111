"""``annotate``: every input and output format, per-document errors, resume after SIGKILL, n_process,
the mention cache and a local Dask cluster, on the tiny BERT and a three-concept KB."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

import pytest
from spacy.language import Language
from spacy.training import Example
from typer.testing import CliRunner

from spacy_sapbert import shards
from spacy_sapbert.annotate import annotate
from spacy_sapbert.cli import app
from spacy_sapbert.documents import InputDocument, iter_documents
from spacy_sapbert.mention_cache import DamagedCacheError
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import LinkingKB
from spacy_sapbert.shards import (
    ENCODER_PASS_ROWS,
    SEARCH_PASS_QUERIES,
    PipelineSpec,
    ShardWorker,
    link_documents,
    prepare_pipeline,
)

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "Seizure and fever in a child.",
    "No cephalgia; fits since birth.",
    "Nothing to link here.",
    "Pyrexia, headache and convulsion.",
] * 5  # 20 documents
IDS = [f"doc{i:02d}" for i in range(len(TEXTS))]


def build_kb(path: Path, encoder) -> Path:
    """The three-concept KB the annotate tests link against."""
    records = [R("HP:1", "Seizure", ["Convulsion", "Fits"]), R("HP:2", "Headache", ["Cephalgia"]), R("HP:3", "Fever", ["Pyrexia"])]
    LinkingKB.build(records, encoder).to_disk(path)
    return path


@pytest.fixture(scope="module")
def kb(tmp_path_factory, tiny_encoder) -> Path:
    return build_kb(tmp_path_factory.mktemp("annotate") / "kb", tiny_encoder)


def write_jsonl(path: Path, texts=TEXTS, ids=IDS, extra: str = "") -> Path:
    lines = [json.dumps({"id": i, "text": t, "source": "test"}) for i, t in zip(ids, texts)]
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf8")
    return path


def files(folder: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def records(folder: Path) -> List[dict]:
    return [json.loads(line) for p in sorted(folder.glob("part-*.jsonl")) for line in p.read_text(encoding="utf8").splitlines()]


def run(input: Path, output: Path, kb: Path, **options):
    return annotate(input, output, kb=kb, detector="ruler", progress=False, **options)


# ---------------------------------------------------------------------------- formats
def test_every_input_format_gives_the_same_annotations(tmp_path, kb):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i, t in zip(IDS, TEXTS):
        (folder / f"{i}.txt").write_text(t, encoding="utf8")
    (folder / "notes.md").write_text("not a .txt file")
    pubtator = tmp_path / "corpus.txt"  # PubTator by its first line, as the corpora's .txt files are
    pubtator.write_text("".join(f"{i}|t|{t}\n{i}|a|\n{i}\t0\t3\tx\tDisease\t-1\n\n" for i, t in zip(IDS, TEXTS)), encoding="utf8")
    bioc = tmp_path / "corpus.xml"
    bioc.write_text(
        "<?xml version='1.0' encoding='UTF-8'?><collection><source>test</source>"
        + "".join(
            f"<document><id>{i}</id><passage><infon key='type'>title</infon><offset>0</offset><text>{t}</text></passage></document>"
            for i, t in zip(IDS, TEXTS)
        )
        + "</collection>",
        encoding="utf8",
    )
    tsv = tmp_path / "corpus.tsv"
    tsv.write_text("".join(f"{i}\t{t}\n" for i, t in zip(IDS, TEXTS)), encoding="utf8")
    jsonl = write_jsonl(tmp_path / "corpus.jsonl")
    with gzip.open(tmp_path / "corpus.jsonl.gz", "wb") as f:
        f.write(jsonl.read_bytes())
    results = {}
    for source in (folder, pubtator, bioc, tsv, jsonl, tmp_path / "corpus.jsonl.gz"):
        out = tmp_path / f"out-{source.name}"
        summary = run(source, out, kb, shard_size=6)
        assert summary.totals == {"docs": 20, "annotated": 20, "errors": 0, "mentions": 35} and summary.shards == 4
        rows = records(out)
        assert [r["id"] for r in rows] == IDS
        results[source.name] = [r["spans"] for r in rows]
    assert len({json.dumps(spans) for spans in results.values()}) == 1
    assert [s["cui"] for s in results["corpus.jsonl"][3]] == ["HP:3", "HP:2", "HP:1"]
    assert records(tmp_path / "out-corpus.jsonl")[0]["source"] == "test"  # other JSONL fields pass through


def test_jsonl_records_are_link_input_records(tmp_path, kb):
    jsonl = write_jsonl(tmp_path / "corpus.jsonl")
    run(jsonl, tmp_path / "out", kb)
    linked = tmp_path / "linked.jsonl"
    result = CliRunner().invoke(app, ["link", "--input", str(jsonl), "--kb", str(kb), "--detector", "ruler", "-o", str(linked)])
    assert result.exit_code == 0, result.output
    expected = [json.loads(line) for line in linked.read_text().splitlines()]
    assert [r["spans"] for r in records(tmp_path / "out")] == [r["spans"] for r in expected]


def test_pubtator_and_docbin_outputs(tmp_path, kb):
    from spacy.tokens import DocBin

    from spacy_sapbert.evaluation.datasets import read_pubtator

    source = tmp_path / "corpus.txt"
    source.write_text("7|t|Fever in a child.\n7|a|Seizure and fits.\n\n")
    run(source, tmp_path / "pt", kb, output_format="pubtator")
    written = (tmp_path / "pt" / "part-00000.pubtator").read_text()
    assert written.startswith("7|t|Fever in a child.\n7|a|Seizure and fits.\n")  # title and abstract kept apart
    write_jsonl(tmp_path / "lines.jsonl", ["Fever\nand\r\nfits."], ["n1"])
    run(tmp_path / "lines.jsonl", tmp_path / "pt2", kb, output_format="pubtator")
    docs = read_pubtator(tmp_path / "pt" / "part-00000.pubtator") + read_pubtator(tmp_path / "pt2" / "part-00000.pubtator")
    assert [(d.doc_id, d.text) for d in docs] == [("7", "Fever in a child. Seizure and fits."), ("n1", "Fever and  fits. ")]
    # read_pubtator checks every offset against the text
    assert [(m.text, m.ids) for m in docs[0].mentions] == [("Fever", ("HP:3",)), ("Seizure", ("HP:1",)), ("fits", ("HP:1",))]
    assert [(m.start, m.text) for m in docs[1].mentions] == [(0, "Fever"), (11, "fits")]

    write_jsonl(tmp_path / "corpus.jsonl", TEXTS[:4], IDS[:4])
    run(tmp_path / "corpus.jsonl", tmp_path / "bin", kb, output_format="spacy")
    nlp = PipelineSpec(kb=str(kb), detector="ruler").load()
    docs = list(DocBin().from_bytes((tmp_path / "bin" / "part-00000.spacy").read_bytes()).get_docs(nlp.vocab))
    assert [d.user_data["id"] for d in docs] == IDS[:4] and docs[0].user_data["fields"] == {"source": "test"}
    assert [(e.text, e.kb_id_, e._.cui, e._.cui_candidates[0][0]) for e in docs[0].ents] == [
        ("Seizure", "HP:1", "HP:1", "HP:1"), ("fever", "HP:3", "HP:3", "HP:3")
    ]


def test_bioc_passages_are_placed_at_their_offsets(tmp_path):
    path = tmp_path / "c.xml"
    path.write_text(
        "<collection><document><id>1</id>"
        "<passage><infon key='type'>title</infon><offset>0</offset><text>A title.</text></passage>"
        "<passage><infon key='type'>abstract</infon><offset>9</offset><text>Its abstract.</text></passage>"
        "<passage><offset>30</offset><sentence><offset>30</offset><text>Late.</text></sentence></passage>"
        "</document><document><passage><offset>0</offset><text>no id</text></passage></document></collection>"
    )
    first, second = iter_documents(path)
    assert first.text == "A title. Its abstract." + " " * 8 + "Late." and first.title_end == 8
    assert second.text is None and "without an <id>" in str(second.error)


# ---------------------------------------------------------------------------- errors
@Language.component("annotate_test_boom")
def boom(doc):
    if "BOOM" in doc.text:
        raise ValueError("this document breaks the component")
    return doc


class BatchBreaker:
    """A component whose ``pipe`` fails a whole batch (an error that escapes nlp.pipe, as the span finder's would)."""

    def __call__(self, doc):
        return next(self.pipe([doc]))

    def pipe(self, docs, batch_size=128):
        docs = list(docs)
        if any("CRASH" in d.text for d in docs):
            raise RuntimeError("the batch crashed")
        yield from docs


@Language.factory("annotate_test_batch_breaker")
def make_batch_breaker(nlp, name):
    return BatchBreaker()


def add_first(monkeypatch, *components: str) -> None:
    """Every pipeline the run loads (worker processes too: they are forked) gets ``components`` first."""
    original = PipelineSpec.load

    def load(spec):
        nlp = original(spec)
        for name in components:
            nlp.add_pipe(name, first=True)
        return nlp

    monkeypatch.setattr(PipelineSpec, "load", load)


@pytest.mark.parametrize("n_process", [1, 2])
def test_failing_documents_are_listed_and_the_rest_annotated(tmp_path, kb, monkeypatch, n_process):
    add_first(monkeypatch, "annotate_test_boom", "annotate_test_batch_breaker")
    texts = list(TEXTS)
    texts[5] = "Fever, then BOOM."
    texts[9] = "Seizure and a CRASH."
    texts[14] = "fever " * 50
    source = write_jsonl(tmp_path / "corpus.jsonl", texts, extra='{"id": "bad json"\n')
    with open(source, "ab") as f:
        f.write(b'{"id": "latin1", "text": "caf\xe9 fever"}\n')
    summary = run(source, tmp_path / "out", kb, shard_size=6, batch_size=4, max_chars=200, n_process=n_process)
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(e["id"], e["reason"]) for e in errors] == [
        ("doc05", "annotate_test_boom: ValueError: this document breaks the component"),
        ("doc09", "annotate_test_batch_breaker: RuntimeError: the batch crashed"),
        ("doc14", "300 characters, more than the limit of 200 (--max-chars)"),
        (None, "not a JSON line (Expecting ',' delimiter, column 18)"),  # a malformed line's id is null, with its line
        (None, "not UTF-8 (invalid continuation byte at byte 29)"),
    ]
    assert [e.get("line") for e in errors] == [6, 10, 15, 21, 22]
    good = [i for i in IDS if i not in ("doc05", "doc09", "doc14")]
    assert [r["id"] for r in records(tmp_path / "out")] == good  # the others of the failing batches too
    assert summary.failed == 5 and summary.totals["docs"] == 22


def test_errors_of_a_folder_input_name_their_file(tmp_path, kb):
    """A folder's documents are files: a failed one's record names it, as a line format's names its line."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("Fever.", encoding="utf8")
    (folder / "b.txt").write_bytes(b"caf\xe9 fever")
    (folder / "c.txt").write_text("fever " * 50, encoding="utf8")
    run(folder, tmp_path / "out", kb, max_chars=200)
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(e["id"], e["file"], "line" in e) for e in errors] == [("b", str(folder / "b.txt"), False), ("c", str(folder / "c.txt"), False)]
    assert errors[1]["reason"] == "300 characters, more than the limit of 200 (--max-chars)"


def test_cli_exit_status_and_message_count_the_failures(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl", extra="not json\n")
    args = ["annotate", str(source), str(tmp_path / "out"), "--kb", str(kb), "--detector", "ruler", "--max-chars", "30"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == f"error: 11 of 21 documents failed: see {tmp_path / 'out' / 'errors.jsonl'}"
    again = CliRunner().invoke(app, args[:-1] + ["40"])
    assert again.exit_code == 1 and "holds the output of another run (max_chars: 30 then, 40 now)" in again.output
    assert (tmp_path / "out" / "mention-cache" / "sapbert_linker.mentions.json").is_file()  # a local run's default cache
    other = CliRunner().invoke(app, args[:-1] + ["40", "--top-k", "2", "--overwrite"])  # the old cache goes with the old output
    assert other.exit_code == 1 and "error: 1 of 21 documents failed" in other.output  # only the bad JSON line now
    assert len((tmp_path / "out" / "errors.jsonl").read_text().splitlines()) == 1


# ---------------------------------------------------------------------------- resume, processes, cache
FIFO = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")


def children_of(pid: int) -> List[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@FIFO
@pytest.mark.parametrize("n_process", [1, 2])
def test_killed_run_resumes_to_the_same_bytes(tmp_path, kb, n_process):
    """SIGKILL mid-shard (the run waits for input in shard 2), then a restart with the same arguments;
    with worker processes, they exit with the driver."""
    source = tmp_path / "corpus.jsonl"  # a FIFO for the first run: it blocks where the test stops writing
    os.mkfifo(source)
    texts = TEXTS + ["Fever again."] * 10
    ids = [f"d{i}" for i in range(len(texts))]
    lines = [json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts)]
    lines[3] = '{"id": "broken"\n'  # an error in a finished shard
    out = tmp_path / "out"
    args = [sys.executable, "-m", "spacy_sapbert", "annotate", str(source), str(out), "--kb", str(kb), "--detector", "ruler",
            "--shard-size", "10", "--batch-size", "4", "--n-process", str(n_process)]
    proc = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE)
    with open(source, "w") as fifo:
        fifo.writelines(lines[:25])
        fifo.flush()
        deadline = time.time() + 120
        while not (out / "manifest.json").is_file() or len(json.loads((out / "manifest.json").read_text())["shards"]) < 2:
            assert time.time() < deadline and proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            time.sleep(0.05)
        time.sleep(0.5)  # it has read documents 20-24 of shard 2 and waits for the rest
        workers = [p for p in children_of(proc.pid) if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
        assert len(workers) == (n_process if n_process > 1 else 0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 10
    while any(Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] for p in workers):
        assert time.time() < deadline, "worker processes outlived their driver"
        time.sleep(0.1)
    assert json.loads((out / "manifest.json").read_text())["complete"] is False
    with open(out / "errors.jsonl", "a") as f:  # as if it had died while committing shard 2
        f.write('{"id": "half-written"')
    (out / ".part-00002.jsonl.x.tmp").write_text("partial")
    os.unlink(source)
    source.write_text("".join(lines), encoding="utf8")  # the same documents at the same path
    resumed = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert resumed.returncode == 1 and "error: 1 of 30 documents failed" in resumed.stderr, resumed.stderr
    assert "(2 finished before); this run: 10 documents" in resumed.stderr
    summary = run(source, tmp_path / "whole", kb, shard_size=10, batch_size=4, n_process=n_process)
    assert summary.shards == 3 and files(out) == files(tmp_path / "whole")
    assert files(out / "mention-cache") == files(tmp_path / "whole" / "mention-cache")  # the cache file too


@pytest.mark.parametrize("output_format", ["jsonl", "spacy"])
def test_two_processes_write_what_one_does(tmp_path, kb, output_format):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    for n in (1, 2):
        run(source, tmp_path / f"out{n}", kb, shard_size=7, batch_size=3, n_process=n, output_format=output_format)
    assert files(tmp_path / "out1") == files(tmp_path / "out2")


def test_the_mention_cache_spares_a_repeated_run_the_search(tmp_path, kb, monkeypatch):
    """The second run finds every string in the cache: nothing is encoded or searched (a KB name is
    searched with its stored vector, so searches are what a cache saves for those)."""
    from spacy_sapbert.search import LinkingKB

    searched: List[str] = []
    real = LinkingKB.candidates
    monkeypatch.setattr(LinkingKB, "candidates", lambda self, vectors, *a, queries=(), **k: searched.extend(queries) or real(self, vectors, *a, queries=queries, **k))
    source = write_jsonl(tmp_path / "corpus.jsonl")
    options = dict(shard_size=6, cache_dir=tmp_path / "cache", detector="span_finder")
    annotate(source, tmp_path / "first", kb=kb, progress=False, **options)
    assert searched and (tmp_path / "cache" / "sapbert_linker.mentions.json").is_file()
    first = len(searched)
    annotate(source, tmp_path / "second", kb=kb, progress=False, **options)
    assert len(searched) == first  # nothing searched the second time
    assert files(tmp_path / "first") == files(tmp_path / "second")


def test_a_cache_save_waits_for_another_process_writing_it_then_merges(tmp_path, kb, capfd):
    """Runs sharing a cache folder save in turn: while another process holds a linker's cache lock
    (``locks.HeldLock``), a save waits, saying who holds it, then merges what that process wrote."""
    from spacy_sapbert.mention_cache import MentionCaches

    (linker,) = prepare_pipeline(PipelineSpec(kb=str(kb), detector="ruler").load(), 1000)
    (other,) = prepare_pipeline(PipelineSpec(kb=str(kb), detector="ruler").load(), 1000)
    linker.link_strings(["fever"])
    other.link_strings(["fits"])
    lock = tmp_path / "cache" / "sapbert_linker.mentions.json.lock"
    lock.parent.mkdir()
    script = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
              "os.pwrite(fd, b'pid 1 on elsewhere', 0); print('held', flush=True); time.sleep(1.5)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    saving = threading.Thread(target=MentionCaches(tmp_path / "cache").save, args=([linker],))
    saving.start()
    saving.join(0.5)
    assert saving.is_alive()  # waits for the holder
    holder.wait()
    saving.join(30)
    assert not saving.is_alive() and "pid 1 on elsewhere" in capfd.readouterr().err
    MentionCaches(tmp_path / "cache").save([other])  # another process's save merges what is there
    (fresh,) = prepare_pipeline(PipelineSpec(kb=str(kb), detector="ruler").load(), 1000)
    assert fresh.load_cache(tmp_path / "cache" / "sapbert_linker.mentions.json") == 2


def test_a_cache_of_another_linker_is_refused(tmp_path, kb):
    nlp = PipelineSpec(kb=str(kb), detector="ruler").load()
    (linker,) = prepare_pipeline(nlp, 1000)
    linker.link_strings(["fever", "fits"])
    assert linker.save_cache(tmp_path / "c.json") == 2
    other = PipelineSpec(kb=str(kb), detector="ruler", top_k=2).load()
    (other_linker,) = prepare_pipeline(other, 1000)
    with pytest.raises(ValueError, match=r"caches the mentions of another linker .*'top_k': 5.* not of sapbert_linker .*'top_k': 2"):
        other_linker.load_cache(tmp_path / "c.json")
    (fresh,) = prepare_pipeline(PipelineSpec(kb=str(kb), detector="ruler").load(), 1000)
    assert fresh.load_cache(tmp_path / "c.json") == 2 and fresh.link_strings(["fits"]) == linker.link_strings(["fits"])
    saved = json.loads((tmp_path / "c.json").read_text())
    del saved["key"]["lookup"]  # saved before names spelt another way and British spellings were looked up as now
    (tmp_path / "old.json").write_text(json.dumps(saved))
    with pytest.raises(DamagedCacheError, match=r"another version of the linker's lookup \(lookup none, now \d+/[0-9a-f]+\)"):
        fresh.load_cache(tmp_path / "old.json")  # (annotate warns and writes it again: tests/test_annotate_trust.py)
    saved["key"]["lookup"] = "3"  # saved before the lookup's word keys were part of its version
    (tmp_path / "old.json").write_text(json.dumps(saved))
    with pytest.raises(DamagedCacheError, match=r"lookup 3, now 4/[0-9a-f]{16}"):
        fresh.load_cache(tmp_path / "old.json")
    from spacy_sapbert.normalize import word_key_fingerprint

    saved["key"]["lookup"] = f"3/{word_key_fingerprint()}"  # saved before a quality the mention states was kept first
    (tmp_path / "old.json").write_text(json.dumps(saved))
    with pytest.raises(DamagedCacheError, match=r"lookup 3/[0-9a-f]{16}, now 4/[0-9a-f]{16}"):
        fresh.load_cache(tmp_path / "old.json")


def test_a_worker_keeps_the_words_of_its_first_documents_only(kb, monkeypatch):
    """The first ``KEPT_WORDS_DOCS`` documents a worker annotates leave their words in the vocabulary
    (later shards then find the common words made); every later document's words go with its shard."""
    monkeypatch.setattr(shards, "KEPT_WORDS_DOCS", 2)
    worker = ShardWorker(PipelineSpec(kb=str(kb), detector="ruler"), 1000, None, None)
    first = [InputDocument(i, t) for i, t in enumerate(["fever zyxkept", "fits qwvkept", "cephalgia jqxdropped"])]
    later = [InputDocument(3, "pyrexia vbzdropped")]
    shard = worker.run(0, first, "jsonl")
    worker.run(1, later, "jsonl")
    strings = worker.nlp.vocab.strings
    assert "zyxkept" in strings and "qwvkept" in strings
    assert "jqxdropped" not in strings and "vbzdropped" not in strings
    assert shard.mentions == 3 and [json.loads(line)["id"] for line in shard.data.decode().splitlines()] == [0, 1, 2]
    assert worker.run(0, first, "jsonl").data == shard.data  # the same output with its words already made


def test_link_documents_keeps_input_order_around_failures(tmp_path, kb):
    nlp = PipelineSpec(kb=str(kb), detector="ruler").load()
    nlp.add_pipe("annotate_test_boom")
    prepare_pipeline(nlp, 1000)
    linker = nlp.get_pipe("sapbert_linker")  # fixed passes: output that does not depend on batching
    assert linker.encoder.pass_rows == ENCODER_PASS_ROWS and linker.linking_kb.index.pass_queries == SEARCH_PASS_QUERIES
    docs = [InputDocument(i, t) for i, t in enumerate(["fever", "BOOM", "fits", "x" * 2000, "BOOM"])]
    out = [(d.id, doc is not None, reason) for d, doc, reason in link_documents(nlp, docs, batch_size=2, max_chars=1000)]
    assert [o[:2] for o in out] == [(0, True), (1, False), (2, True), (3, False), (4, False)]


def test_a_pipeline_with_spacys_compiled_ner_is_annotated(kb):
    """spaCy's own NER (the shipped ``ner`` detector's) cannot hold an error handler: Language.set_error_handler
    raises on it. Its documents are annotated all the same, and a failing one is still reported alone."""
    nlp = PipelineSpec(kb=str(kb), detector="ruler").load()
    ner = nlp.add_pipe("ner", before="sapbert_linker")
    example = Example.from_dict(nlp.make_doc("fever"), {"entities": [(0, 5, "Disease")]})
    ner.initialize(lambda: [example], nlp=nlp)
    nlp.add_pipe("annotate_test_boom")
    prepare_pipeline(nlp, 1000)
    docs = [InputDocument(i, t) for i, t in enumerate(["fever", "BOOM", "fits"])]
    out = [(d.id, doc is not None, reason) for d, doc, reason in link_documents(nlp, docs, batch_size=2)]
    assert out == [(0, True, None), (1, False, "annotate_test_boom: ValueError: this document breaks the component"), (2, True, None)]


# ---------------------------------------------------------------------------- a local Dask cluster
def test_a_local_dask_cluster_writes_what_one_process_does(tmp_path, kb, tiny_bert_path):
    distributed = pytest.importorskip("distributed")
    saved = tmp_path / "pipeline"  # what workers load from shared storage
    PipelineSpec(kb=str(kb), detector="ruler").load().to_disk(saved)
    source = write_jsonl(tmp_path / "corpus.jsonl", extra="not json\n")
    local = annotate(source, tmp_path / "local", pipeline=saved, shard_size=5, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            summary = annotate(source, tmp_path / "dask", pipeline=saved, shard_size=5, progress=False, scheduler=client)
            maps = client.run(lambda: Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else None)
    assert summary.totals == local.totals and summary.shards == 5
    assert files(tmp_path / "dask") == files(tmp_path / "local")
    if sys.platform.startswith("linux"):  # each worker memory-maps the KB files inside the pipeline folder
        assert len(maps) == 2 and all(str(saved / "sapbert_linker" / "kb") in m for m in maps.values())


@FIFO
def test_reading_a_stream_keeps_one_document_at_a_time(tmp_path):
    writer_done = threading.Event()
    source = tmp_path / "corpus.jsonl"
    os.mkfifo(source)

    def write():
        with open(source, "w") as f:
            f.write(json.dumps({"id": 1, "text": "a"}) + "\n")
            f.flush()
            writer_done.wait(30)

    thread = threading.Thread(target=write)
    thread.start()
    first = next(iter_documents(source, "jsonl"))  # comes back before the writer has finished
    writer_done.set()
    thread.join()
    assert (first.id, first.text) == (1, "a")


def test_each_worker_process_loads_the_pipeline_once(tmp_path, kb, monkeypatch):
    """``n_process`` workers load the pipeline once each and keep it for all their shards (spaCy's
    ``n_process`` forks new workers for every shard), and nothing is loaded in the main process."""
    original = PipelineSpec.load
    loads = tmp_path / "loads.txt"

    def load(spec):
        with open(loads, "a") as f:
            f.write(f"{os.getpid()}\n")
        return original(spec)

    monkeypatch.setattr(PipelineSpec, "load", load)
    source = write_jsonl(tmp_path / "corpus.jsonl")
    summary = run(source, tmp_path / "out", kb, shard_size=3, n_process=2)
    pids = loads.read_text().split()
    assert summary.shards == 7 and len(pids) == 2 and len(set(pids)) == 2 and str(os.getpid()) not in pids


def test_a_worker_that_cannot_load_the_pipeline_stops_the_run_with_its_reason(tmp_path, kb, monkeypatch):
    def load(spec):
        raise ValueError("no such component")

    monkeypatch.setattr(PipelineSpec, "load", load)
    source = write_jsonl(tmp_path / "corpus.jsonl")
    with pytest.raises(RuntimeError, match="could not load the pipeline: ValueError: no such component"):
        run(source, tmp_path / "out", kb, n_process=2)
    assert not (tmp_path / "out").exists()


def test_a_worker_that_dies_while_loading_does_not_hang_the_run(tmp_path, kb, monkeypatch):
    monkeypatch.setattr(PipelineSpec, "load", lambda spec: os._exit(3))
    source = write_jsonl(tmp_path / "corpus.jsonl")
    with pytest.raises(RuntimeError, match="died while loading the pipeline"):
        run(source, tmp_path / "out", kb, n_process=2)
