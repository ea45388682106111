"""``annotate`` trusts nothing it cannot check (issue 43): finished shards checked on resume, one run
per OUTPUT, a mention cache checked against the KB, errors that name their file, a per-document
time limit, and the small input rules (empty input, duplicate ids, BOM, control characters)."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spacy.language import Language
from test_annotate import IDS, ROOT, TEXTS, add_first, build_kb, files, records, run, write_jsonl
from typer.testing import CliRunner

from spacy_sapbert.cli import app
from spacy_sapbert.documents import visible_span
from spacy_sapbert.locks import OutputLockedError, output_lock
from spacy_sapbert.mention_cache import DamagedCacheError, _entries_sha256
from spacy_sapbert.shards import PipelineSpec, prepare_pipeline, span_records


@pytest.fixture(scope="module")
def kb(tmp_path_factory, tiny_encoder) -> Path:
    return build_kb(tmp_path_factory.mktemp("trust") / "kb", tiny_encoder)


def cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


# ---------------------------------------------------------------------------- verified resume
def damage(path: Path, how: str) -> None:
    if how == "tampered":  # the same size, one byte changed
        data = bytearray(path.read_bytes())
        data[data.index(b"doc")] = ord("D")
        path.write_bytes(bytes(data))
    elif how == "missing":
        path.unlink()
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("how, reason", [("tampered", "its sha256 differs"), ("missing", "missing"), ("emptied", "0 bytes, not the")])
def test_a_damaged_finished_shard_is_redone_and_said_so(tmp_path, kb, capfd, how, reason):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    whole = tmp_path / "whole"
    run(source, whole, kb, shard_size=3)
    out = tmp_path / "out"
    shutil.copytree(whole, out)
    damage(out / "part-00003.jsonl", how)
    capfd.readouterr()
    summary = run(source, out, kb, shard_size=3)
    err = capfd.readouterr().err
    assert f"warning: {out / 'part-00003.jsonl'}: {reason}" in err and "and the 3 shard(s) after it" in err
    assert list(summary.redone) == [f"part-0000{i}.jsonl" for i in range(3, 7)] and summary.run_docs == 20 - 9
    assert files(out) == files(whole)


def test_a_tampered_first_shard_of_an_unfinished_run_is_redone(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    whole = tmp_path / "whole"
    run(source, whole, kb, shard_size=3)
    out = tmp_path / "out"
    shutil.copytree(whole, out)
    m = manifest(out)  # as if killed after two shards
    m["shards"], m["complete"] = m["shards"][:2], False
    (out / "manifest.json").write_text(json.dumps(m, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    damage(out / "part-00000.jsonl", "tampered")
    summary = run(source, out, kb, shard_size=3)
    assert summary.redone == ["part-00000.jsonl", "part-00001.jsonl"] and summary.shards_skipped == 0
    assert files(out) == files(whole)


def test_a_complete_output_refuses_an_input_that_changed_since(tmp_path, kb):
    """A finished OUTPUT is checked against its input on every run, as an unfinished one is: a document
    added or replaced since is named in one line, not left out of the output without a word."""
    source = write_jsonl(tmp_path / "corpus.jsonl")
    out = tmp_path / "out"
    run(source, out, kb, shard_size=len(TEXTS))  # one full shard
    before = files(out)
    assert run(source, out, kb, shard_size=len(TEXTS)).run_docs == 0 and files(out) == before  # the same input: nothing to do
    write_jsonl(source, texts=TEXTS + ["Asthma again."], ids=IDS + ["added"])
    result = cli("annotate", source, out, "--kb", kb, "--detector", "ruler", "--shard-size", len(TEXTS))
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"more documents than the {len(TEXTS)} that {out} was written from; the input changed" in result.output
    write_jsonl(source, ids=["replaced"] + IDS[1:])
    with pytest.raises(ValueError, match="are not those it was written from; the input changed"):
        run(source, out, kb, shard_size=len(TEXTS))
    assert files(out) == before
    write_jsonl(source, texts=TEXTS + ["Asthma again."], ids=IDS + ["added"])
    assert run(source, out, kb, shard_size=len(TEXTS), overwrite=True).run_docs == len(TEXTS) + 1


def test_every_manifest_entry_has_size_and_checksum(tmp_path, kb):
    out = tmp_path / "out"
    run(write_jsonl(tmp_path / "corpus.jsonl"), out, kb, shard_size=7)
    for entry in manifest(out)["shards"]:
        assert entry["bytes"] == (out / entry["file"]).stat().st_size and len(entry["sha256"]) == 64


# ---------------------------------------------------------------------------- one writer per OUTPUT
def test_a_second_run_on_the_same_output_is_refused_naming_the_lock_and_the_holder(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from spacy_sapbert.locks import output_lock\n"
                               f"with output_lock({str(out)!r}):\n    print('held', flush=True); time.sleep(60)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # type: ignore[union-attr]
        t0 = time.perf_counter()
        result = cli("annotate", source, out, "--kb", kb, "--detector", "ruler")
        line = one_line(result)
        assert result.exit_code == 1 and time.perf_counter() - t0 < 10  # at once, before loading a pipeline
        assert f"pid {holder.pid} on " in line and str(tmp_path / "out.lock") in line and "another annotate run" in line
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    assert cli("annotate", source, out, "--kb", kb, "--detector", "ruler").exit_code == 0  # the killed holder's lock is gone


def test_the_lock_is_held_for_the_run_and_released_after(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    with output_lock(tmp_path / "out"):
        with pytest.raises(OutputLockedError, match=f"pid {os.getpid()} on "):
            run(source, tmp_path / "out", kb)
    run(source, tmp_path / "out", kb)
    with output_lock(tmp_path / "out"):  # free again
        pass


def test_overwrite_with_another_shard_size_leaves_only_the_new_shards(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    out = tmp_path / "out"
    run(source, out, kb, shard_size=3)
    (out / "part-00042.jsonl").write_text("a stray shard\n")
    result = cli("annotate", source, out, "--kb", kb, "--detector", "ruler", "--overwrite", "--shard-size", "7")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.glob("part-*")) == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    assert len(records(out)) == 20


def test_a_shard_the_manifest_does_not_list_is_removed_on_resume(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    whole = tmp_path / "whole"
    run(source, whole, kb, shard_size=7)
    (whole / "part-00009.jsonl").write_text("left by another run\n")
    run(source, whole, kb, shard_size=7)
    assert not (whole / "part-00009.jsonl").exists()


# ---------------------------------------------------------------------------- errors that name their file
def test_half_a_manifest_is_named_and_does_not_block_overwrite(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    out = tmp_path / "out"
    run(source, out, kb, shard_size=7)
    text = (out / "manifest.json").read_text()
    (out / "manifest.json").write_text(text[: len(text) // 2])
    result = cli("annotate", source, out, "--kb", kb, "--detector", "ruler", "--shard-size", "7")
    assert result.exit_code == 1 and one_line(result).startswith(f"error: {out / 'manifest.json'}: not valid JSON")
    again = cli("annotate", source, out, "--kb", kb, "--detector", "ruler", "--shard-size", "7", "--overwrite")
    assert again.exit_code == 0, again.output
    assert len(records(out)) == 20 and manifest(out)["complete"] is True


def test_an_output_that_is_a_file_is_named(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    (tmp_path / "out").write_text("a file")
    result = cli("annotate", source, tmp_path / "out", "--kb", kb, "--detector", "ruler")
    assert result.exit_code == 1 and one_line(result) == (
        f"error: {tmp_path / 'out'}: a file, not a folder: annotate writes its shards, manifest.json and errors.jsonl "
        "into a folder; choose another OUTPUT")


def gz(tmp_path: Path) -> bytes:
    lines = "".join(json.dumps({"id": f"d{i}", "text": f"Fever number {i} with seizures and more words {i * 7919}."}) + "\n"
                    for i in range(400))
    return gzip.compress(lines.encode(), mtime=0)


@pytest.mark.parametrize("command", ["annotate", "link"])
def test_a_truncated_gz_is_named(tmp_path, kb, command):
    data = gz(tmp_path)
    source = tmp_path / "corpus.jsonl.gz"
    source.write_bytes(data[: len(data) // 2])
    args = ["annotate", source, tmp_path / "out"] if command == "annotate" else ["link", "-i", source, "-o", tmp_path / "out.jsonl"]
    result = cli(*args, "--kb", kb, "--detector", "ruler")
    assert result.exit_code == 1
    assert one_line(result) == f"{source}: truncated gzip file: it ends before its compressed stream does"
    assert not list(tmp_path.glob("out/part-*")) and not (tmp_path / "out.jsonl").exists()


def test_bytes_corrupted_inside_a_gz_are_refused_before_any_shard_is_written(tmp_path, kb):
    data = bytearray(gz(tmp_path))
    data[len(data) // 2] ^= 0x55
    source = tmp_path / "corpus.jsonl.gz"
    source.write_bytes(bytes(data))
    result = cli("annotate", source, tmp_path / "out", "--kb", kb, "--detector", "ruler", "--shard-size", "10")
    assert result.exit_code == 1 and one_line(result).startswith(f"{source}: damaged gzip file (")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- the mention cache
def rewrite_cache(path: Path, edit, checksum: bool = True) -> None:
    saved = json.loads(path.read_text())
    edit(saved["entries"])
    if checksum:  # as a careful forger would: the checksum alone does not catch it
        saved["sha256"] = _entries_sha256(saved["entries"])
    path.write_text(json.dumps(saved))


def set_concept(concept: str):
    def edit(entries):
        for query, cands in entries:
            if query in ("convulsion", "fits", "seizure"):
                cands[0][0] = concept
    return edit


@pytest.mark.parametrize("case, message", [
    ("wrong id", "does not have that name in the KB"),
    ("id not in the KB", "is not a concept of the KB"),
    ("edited without its checksum", "do not match the checksum"),
    ("garbage", "not a JSON mention cache"),
    ("an older lookup", "was written by another version of the linker's lookup"),  # after an upgrade
])
def test_a_bad_cache_file_is_discarded_with_a_warning_naming_it(tmp_path, kb, capfd, case, message):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    cache = tmp_path / "cache"
    run(source, tmp_path / "first", kb, shard_size=7, cache_dir=cache)
    path = cache / "sapbert_linker.mentions.json"
    if case == "garbage":
        path.write_text("garbage, not JSON")
    elif case == "an older lookup":
        saved = json.loads(path.read_text())
        saved["key"]["lookup"] = "2"  # an older release's (a number then)
        path.write_text(json.dumps(saved))
    else:
        rewrite_cache(path, set_concept("HP:2" if case != "id not in the KB" else "HP:999"), checksum=case != "edited without its checksum")
    capfd.readouterr()
    run(source, tmp_path / "second", kb, shard_size=7, cache_dir=cache)
    err = capfd.readouterr().err
    assert f"warning: {path}" in err and message in err and "Traceback" not in err
    assert records(tmp_path / "second") == records(tmp_path / "first")  # nothing linked to the wrong concept
    json.loads(path.read_text())  # written again, whole


def test_load_cache_refuses_a_wrong_concept_id(tmp_path, kb):
    nlp = PipelineSpec(kb=str(kb), detector="ruler").load()
    (linker,) = prepare_pipeline(nlp, 1000)
    linker.link_strings(["fits"])
    linker.save_cache(tmp_path / "c.json")
    rewrite_cache(tmp_path / "c.json", set_concept("HP:3"))
    (fresh,) = prepare_pipeline(PipelineSpec(kb=str(kb), detector="ruler").load(), 1000)
    with pytest.raises(DamagedCacheError, match="'HP:3' .* of 'fits' does not have that name"):
        fresh.load_cache(tmp_path / "c.json")
    assert len(fresh._cache) == 0


def test_the_cache_file_does_not_depend_on_the_number_of_processes(tmp_path, kb):
    source = write_jsonl(tmp_path / "corpus.jsonl")
    for n in (1, 2):
        run(source, tmp_path / f"out{n}", kb, shard_size=3, n_process=n)
    one, two = (files(tmp_path / f"out{n}" / "mention-cache") for n in (1, 2))
    assert one == two and json.loads(one["sapbert_linker.mentions.json"])["entries"] == sorted(
        json.loads(one["sapbert_linker.mentions.json"])["entries"])


# ---------------------------------------------------------------------------- --max-seconds
class Slow:
    def __call__(self, doc):
        if "SLOW" in doc.text:
            time.sleep(60)
        return doc


@Language.factory("annotate_test_slow")
def make_slow(nlp, name):
    return Slow()


@pytest.mark.parametrize("n_process", [1, 2])
def test_a_document_over_the_time_limit_is_an_error_and_the_rest_is_annotated(tmp_path, kb, monkeypatch, n_process):
    add_first(monkeypatch, "annotate_test_slow")
    texts = list(TEXTS)
    texts[6] = "Fever, then SLOW."
    source = write_jsonl(tmp_path / "corpus.jsonl", texts)
    t0 = time.perf_counter()
    summary = run(source, tmp_path / "out", kb, shard_size=5, batch_size=4, n_process=n_process, max_seconds=1.5)
    assert time.perf_counter() - t0 < 50
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert errors == [{"id": "doc06", "line": 7, "reason": "annotate_test_slow: took more than 1.5 s (--max-seconds)"}]
    assert summary.failed == 1 and [r["id"] for r in records(tmp_path / "out")] == [f"doc{i:02d}" for i in range(20) if i != 6]
    # resumable: a run killed after the first shard writes the same bytes
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "out", resumed)
    m = manifest(resumed)
    m["shards"], m["complete"] = m["shards"][:1], False
    (resumed / "manifest.json").write_text(json.dumps(m, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    run(source, resumed, kb, shard_size=5, batch_size=4, n_process=n_process, max_seconds=1.5)
    assert files(resumed) == files(tmp_path / "out")


def test_max_seconds_is_refused_with_a_scheduler(tmp_path, kb):
    with pytest.raises(ValueError, match="--max-seconds works in local runs only"):
        run(write_jsonl(tmp_path / "c.jsonl"), tmp_path / "out", kb, max_seconds=5, scheduler="tcp://nowhere:1")


# ---------------------------------------------------------------------------- the small rules
@pytest.mark.parametrize("command", ["annotate", "link"])
def test_an_empty_input_is_an_error_in_both_commands(tmp_path, kb, command):
    source = tmp_path / "empty.jsonl"
    source.write_text("")
    args = ["annotate", source, tmp_path / "out"] if command == "annotate" else ["link", "-i", source]
    result = cli(*args, "--kb", kb, "--detector", "ruler")
    verb = "annotate" if command == "annotate" else "link"
    assert result.exit_code == 1 and one_line(result) == f"{source}: empty input: no documents to {verb}"


def test_duplicate_ids_are_counted_or_refused(tmp_path, kb):
    ids = [f"doc{i % 15:02d}" for i in range(20)]  # 5 repeats
    source = write_jsonl(tmp_path / "corpus.jsonl", ids=ids)
    result = cli("annotate", source, tmp_path / "out", "--kb", kb, "--detector", "ruler")
    assert result.exit_code == 0 and "5 documents repeat an earlier document's id" in result.output
    refused = cli("annotate", source, tmp_path / "out2", "--kb", kb, "--detector", "ruler", "--unique-ids")
    assert refused.exit_code == 1 and "Traceback" not in refused.output  # the last line (after the progress bar's)
    assert refused.output.strip().splitlines()[-1] == f"{source}:16: the id 'doc00' repeats an earlier document's (--unique-ids)"


@pytest.mark.parametrize("fmt", ["jsonl", "text", "tsv"])
def test_a_bom_is_stripped_before_offsets_are_counted(tmp_path, kb, fmt):
    plain = {"jsonl": write_jsonl(tmp_path / "plain.jsonl").read_text(),
             "text": "\n".join(TEXTS) + "\n", "tsv": "".join(f"d{i}\t{t}\n" for i, t in enumerate(TEXTS))}[fmt]
    for name, text in (("plain", plain), ("bom", "\ufeff" + plain)):
        (tmp_path / f"{name}.{fmt}").write_text(text, encoding="utf8")
        run(tmp_path / f"{name}.{fmt}", tmp_path / f"out-{name}", kb, input_format=fmt)
    assert records(tmp_path / "out-bom") == records(tmp_path / "out-plain")
    first = records(tmp_path / "out-bom")[0]["spans"][0]
    assert (first["text"], first["start_char"]) == ("Seizure", 0)


def test_a_span_never_starts_or_ends_on_a_control_or_bidi_character(kb):
    assert visible_span("a\x00fever\u200f b", 1, 8) == {"text": "fever", "start_char": 2, "end_char": 7}
    assert visible_span("\x07\x7f", 0, 2)["text"] == ""
    nlp = PipelineSpec(kb=str(kb), detector="ruler").load()
    (linker,) = prepare_pipeline(nlp, 1000)
    text = "\x00fever\u202e\x07 and \u2066seizure\x7f today"
    doc = nlp.make_doc(text)
    doc.ents = [doc.char_span(0, 8, "X", alignment_mode="expand"), doc.char_span(13, 22, "X", alignment_mode="expand")]
    doc = linker(doc)
    found = [(r["text"], r["start_char"], r["end_char"]) for r in span_records(doc, [linker])]
    assert found == [("fever", 1, 6), ("seizure", 14, 21)]
    assert doc.text == text  # the text keeps them


def test_a_broader_concept_ranked_first_is_a_valid_cache_entry(tmp_path):
    """``prefer_broader`` puts an ancestor within ``BROADER_MARGIN`` of the best first, and
    ``QualityWords.prefer_agreeing`` a name keeping the mention's quality within ``QUALITY_MARGIN``: a cache
    of such a KB (the HPO default's) is not damaged; scores that no search gives still are."""
    from spacy_sapbert.mention_cache import _entries_sha256, check_entries, ranked_as_searched
    from spacy_sapbert.qualities import QUALITY_MARGIN
    from spacy_sapbert.search import BROADER_MARGIN

    margin = max(BROADER_MARGIN, QUALITY_MARGIN)
    assert ranked_as_searched([0.95, 0.97, 0.9]) and ranked_as_searched([1.0, 0.9]) and ranked_as_searched([])
    assert ranked_as_searched([0.97 - margin + 0.01, 0.97])
    assert not ranked_as_searched([0.97 - margin - 0.01, 0.97]) and not ranked_as_searched([0.97, 0.8, 0.9])
    entries = [["systolic murmur", [["HP:1", "systolic heart murmur", 0.955, False], ["HP:2", "late systolic murmur", 0.97, False]]]]
    assert check_entries(tmp_path / "c.json", {"entries": entries, "sha256": _entries_sha256(entries)}, None)[0][1][0].concept_id == "HP:1"
    entries[0][1][0][2] = 0.97 - margin - 0.01  # further below the best than a broader concept may be
    with pytest.raises(DamagedCacheError, match="not finite and in the order a search gives"):
        check_entries(tmp_path / "c.json", {"entries": entries, "sha256": _entries_sha256(entries)}, None)
