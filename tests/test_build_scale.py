"""build-kb at UMLS scale, in miniature: a synthetic MRCONSO through the CLI, a build killed in each
stage and resumed there, damaged stage outputs found and redone, encoding split into parts, and the
KB tables written as the source streams in (issue 44, item 4)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_sapbert import build as build_module
from spacy_sapbert.build import build_kb_folder, work_path
from spacy_sapbert.cli import app
from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.kb_writer import write_kb
from spacy_sapbert.ontologies.umls import read_umls
from spacy_sapbert.records import ConceptRecord
from spacy_sapbert.search import LinkingKB

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["fever", "asthma", "tumour", "anaemia", "seizure", "migraine", "colitis", "nephritis", "gout", "rash"]
CHUNK = 20  # names per encoding chunk: the fixture's 78 names make 4


def _umls_build():
    spec = importlib.util.spec_from_file_location("umls_build", ROOT / "benchmarks" / "umls_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def concept_records(n: int = 30):
    """Concepts with three names each, some names shared between concepts, some with a '|'."""
    return [
        ConceptRecord(id=f"X{i}", name=f"{WORDS[i % 10]} {i}", synonyms=[f"{WORDS[(i + 3) % 10]} type {i}", f"acute {WORDS[i % 10]}" if i % 4 else f"a|b {i}"],
                      types=[f"T{i % 3:03d}"], sources=[("SYN", f"X{i}")])
        for i in range(n)
    ]


@pytest.fixture
def meta(tmp_path) -> Path:
    folder = tmp_path / "META"
    list(_umls_build().write_meta(concept_records(), folder))
    return folder


def chunk_sizes(meta: Path) -> list:
    """The names per encoding chunk of the fixture's KB."""
    n = ConceptKB.from_records(read_umls(meta)).n_names
    return [min(CHUNK, n - start) for start in range(0, n, CHUNK)]


def folder_bytes(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


class Spies:
    """Counts what a build does: KB tables written, names encoded per call, indexes built."""

    def __init__(self, monkeypatch, encoder):
        self.kb_writes, self.encoded, self.indexes = 0, [], 0
        real_write, real_encode, real_build = build_module.write_kb, encoder.encode, build_module.VectorIndex.build

        def write(*args, **kwargs):
            self.kb_writes += 1
            return real_write(*args, **kwargs)

        def encode(texts, batch_size=128, progress=False):
            self.encoded.append(len(texts))
            return real_encode(texts, batch_size=batch_size)

        def index(*args, **kwargs):
            self.indexes += 1
            return real_build(*args, **kwargs)

        monkeypatch.setattr(build_module, "write_kb", write)
        monkeypatch.setattr(encoder, "encode", encode)
        monkeypatch.setattr(build_module.VectorIndex, "build", index)


def build(meta: Path, encoder, out: Path, **kwargs):
    kwargs.setdefault("progress", False)
    return build_kb_folder(read_umls(meta), encoder, out, index_kind="flat", chunk_size=CHUNK, source_key={"fixture": "META"},
                           **kwargs)


def test_build_kb_reads_a_synthetic_mrconso_in_stages_and_a_rerun_verifies_and_skips_them(tmp_path, meta, tiny_bert_path):
    out, work = tmp_path / "kb", tmp_path / "work"
    args = ["build-kb", str(meta / "MRCONSO.RRF"), str(out), "--encoder", str(tiny_bert_path), "--work-dir", str(work), "--keep-work"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    for stage in ("kb", "encode", "index", "write"):
        assert f"stage {stage}: done in" in first.output
    assert "peak resident memory" in first.output
    built = LinkingKB.from_disk(out)
    expected = ConceptKB.from_records(read_umls(meta))
    assert built.kb.fingerprint == expected.fingerprint and built.kb.n_names == 78
    assert built.kb.concept_ids[0] == "C0000001" and list(built.kb.concept_types[0]) == ["T000"]  # MRSTY, merge-joined
    assert any("a¦b" in name for name in built.kb.names)  # '|' cannot be an RRF field's: written as '¦'
    assert {p.name for p in work.iterdir() if not p.name.startswith(".")} == {"kb", "chunks", "index"}
    before = folder_bytes(out)

    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "stage kb: finished earlier" in second.output and "stage index: finished earlier" in second.output
    assert "all 1 chunks finished earlier (verified by sha256)" in second.output  # the CLI's chunks hold 50,000 names
    assert folder_bytes(out) == before


@pytest.mark.parametrize("stage", ["kb", "encode", "index", "write"])
def test_a_build_killed_in_a_stage_resumes_there_and_writes_the_same_kb(tmp_path, meta, tiny_encoder, monkeypatch, stage):
    reference = tmp_path / "reference"
    build(meta, tiny_encoder, reference)
    out = tmp_path / "kb"
    with monkeypatch.context() as m:
        if stage == "kb":
            def killed_reader(path):
                for n, rec in enumerate(read_umls(path)):
                    if n == 10:
                        raise KeyboardInterrupt
                    yield rec
            with pytest.raises(KeyboardInterrupt):
                build_kb_folder(killed_reader(meta), tiny_encoder, out, index_kind="flat", progress=False, chunk_size=CHUNK,
                                source_key={"fixture": "META"})
        else:
            calls = []

            def kill(*args, **kwargs):
                calls.append(1)
                if stage != "encode" or len(calls) == 3:
                    raise KeyboardInterrupt
                return real(*args, **kwargs)
            target = {"encode": (tiny_encoder, "encode"), "index": (build_module.VectorIndex, "build"),
                      "write": (build_module, "link_or_copy")}[stage]
            real = getattr(*target)
            m.setattr(*target, kill)
            with pytest.raises(KeyboardInterrupt):
                build(meta, tiny_encoder, out)
    assert not out.exists()
    work = work_path(out)
    if stage == "kb":
        assert not (work / "kb").exists()  # a stage is either complete or absent
    else:
        assert (work / "kb" / "stage.json").is_file()
    spies = Spies(monkeypatch, tiny_encoder)
    build(meta, tiny_encoder, out)
    assert spies.kb_writes == (1 if stage == "kb" else 0)
    sizes = chunk_sizes(meta)
    encoded = {"kb": sizes, "encode": sizes[2:] + [64], "index": [], "write": []}[stage]
    assert spies.encoded == encoded  # after an encoding kill: the missing chunks, then 64 names to check the 2 kept
    assert spies.indexes == (0 if stage == "write" else 1)
    assert folder_bytes(out) == folder_bytes(reference)
    assert not work.exists() and not list(tmp_path.glob(".kb.*"))


@pytest.mark.parametrize("damage", ["kb", "chunk", "index"])
def test_a_damaged_stage_output_is_found_by_its_checksum_and_redone(tmp_path, meta, tiny_encoder, monkeypatch, capsys, damage):
    out, work = tmp_path / "kb", tmp_path / "work"
    build(meta, tiny_encoder, out, work_dir=work, keep_work=True)
    before = folder_bytes(out)
    victim = {"kb": work / "kb" / "names.utf8.npy", "chunk": work / "chunks" / "chunk_00002.npy",
              "index": work / "index" / "index.faiss"}[damage]
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF  # one flipped byte: same size, different sha256
    victim.write_bytes(bytes(data))
    spies = Spies(monkeypatch, tiny_encoder)
    capsys.readouterr()
    build(meta, tiny_encoder, out, work_dir=work, keep_work=True, progress=True)
    said = capsys.readouterr().err
    assert str(victim) in said and "sha256" in said
    # a chunk encoded again is the same bytes, so the index made from it still verifies
    assert (spies.kb_writes, spies.encoded, spies.indexes) == {"kb": (1, [], 0), "chunk": (0, [CHUNK], 0), "index": (0, [], 1)}[damage]
    assert folder_bytes(out) == before


def test_encoding_split_into_parts_is_finished_by_one_build_that_checks_the_chunks(tmp_path, meta, tiny_encoder, monkeypatch):
    from spacy_sapbert.build import SourceOptions, encode_part

    reference = tmp_path / "reference"
    build(meta, tiny_encoder, reference)
    shared, sizes = tmp_path / "shared", chunk_sizes(meta)
    for which in (0, 1):  # one process or machine each
        present, total = encode_part(read_umls(meta), tiny_encoder, shared, (which, 2), progress=False, chunk_size=CHUNK,
                                     options=SourceOptions(key={"fixture": "META"}))
        assert total == len(sizes) and present == (len(sizes) + 1) // 2 + (which and len(sizes) // 2)
    spies = Spies(monkeypatch, tiny_encoder)
    out = tmp_path / "kb"
    build(meta, tiny_encoder, out, work_dir=shared)
    assert (spies.kb_writes, spies.encoded, spies.indexes) == (0, [64], 1)  # nothing left to encode but the check
    assert folder_bytes(out) == folder_bytes(reference) and not shared.exists()


def test_build_kb_encode_part_on_the_command_line(tmp_path, meta, tiny_bert_path):
    out, shared = tmp_path / "kb", tmp_path / "shared"
    base = ["build-kb", str(meta), str(out), "--encoder", str(tiny_bert_path), "--work-dir", str(shared)]
    for part in ("0/2", "1/2"):
        result = CliRunner().invoke(app, base + ["--encode-part", part])
        assert result.exit_code == 0, result.output
        assert f"encoded part {part}" in result.output and "1 chunks are in" in result.output
    assert not out.exists()
    bad = CliRunner().invoke(app, base + ["--encode-part", "2/2"])
    assert bad.exit_code != 0 and "0 <= I < N" in bad.output
    result = CliRunner().invoke(app, base)
    assert result.exit_code == 0 and LinkingKB.from_disk(out).kb.n_names == 78


def test_chunks_from_another_encoder_are_refused(tmp_path, meta, tiny_encoder):
    from conftest import make_tiny_bert

    from spacy_sapbert.build import SourceOptions, encode_part
    from spacy_sapbert.encoder import SapEncoder

    other = SapEncoder.load(make_tiny_bert(tmp_path / "other", seed=1), device="cpu", precision="fp32")
    other._fingerprint = tiny_encoder.fingerprint  # as if the state.json had been copied along with the wrong chunks
    work = tmp_path / "work"
    encode_part(read_umls(meta), other, work, (0, 1), progress=False, chunk_size=CHUNK, options=SourceOptions(key={"fixture": "META"}))
    with pytest.raises(ValueError, match="is not the vector of name"):
        build(meta, tiny_encoder, tmp_path / "kb", work_dir=work)


def test_a_changed_source_file_redoes_the_kb_stage_and_reuses_vectors_of_the_same_names(tmp_path, meta, tiny_bert_path, monkeypatch):
    out, work = tmp_path / "kb", tmp_path / "work"
    args = ["build-kb", str(meta), str(out), "--encoder", str(tiny_bert_path), "--work-dir", str(work), "--keep-work"]
    assert CliRunner().invoke(app, args).exit_code == 0
    sty = meta / "MRSTY.RRF"
    sty.write_text(sty.read_text(encoding="utf8").replace("|T000|", "|T047|"), encoding="utf8")  # types: not in the fingerprint
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "stage kb: made from other input or settings; doing it again" in result.output
    assert "all 1 chunks finished earlier" in result.output and "stage index: finished earlier" in result.output
    assert list(LinkingKB.from_disk(out).kb.concept_types[0]) == ["T047"]


def test_what_killed_builds_left_half_written_is_removed_unless_a_part_may_be_writing_it(tmp_path, meta, tiny_encoder):
    from filelock import FileLock

    out, work = tmp_path / "kb", tmp_path / "work"
    stale = [work / ".kb.abcd1234.tmp", work / ".index.abcd1234.tmp", tmp_path / ".kb.abcd1234.tmp", tmp_path / ".kb.old-42"]
    other = tmp_path / ".kb.v2.abcd1234.tmp"  # another output's ("kb.v2")
    for folder in (*stale, other):
        folder.mkdir(parents=True)
    build(meta, tiny_encoder, out, work_dir=work, keep_work=True)
    assert not any(f.exists() for f in stale) and other.exists()
    stale[0].mkdir()
    stale[1].mkdir()
    with FileLock(str(work / "encode-part-1-of-2.lock")):  # a part is encoding: its KB stage may be half-written
        build(meta, tiny_encoder, out, work_dir=work, keep_work=True)
    assert stale[0].exists() and not stale[1].exists()


def test_the_staged_build_writes_the_bytes_the_one_step_build_writes(tmp_path, tiny_encoder):
    records = [ConceptRecord(f"C{i}", f"name {i}", [f"syn {i}", f"other {i % 7}"], types=["T1"], parents=[f"C{i - 1}"] if i else [])
               for i in range(60)]
    LinkingKB.build(records, tiny_encoder, index_kind="flat").to_disk(tmp_path / "one-step")
    build_kb_folder(records, tiny_encoder, tmp_path / "staged", index_kind="flat", progress=False, chunk_size=CHUNK)
    assert folder_bytes(tmp_path / "staged") == folder_bytes(tmp_path / "one-step")


RECORD_CASES = {
    "shared names and repeats": [ConceptRecord("C1", "Fever", ["Pyrexia", "fever", "FEVER "], types=["T1", "T1", "T2"]),
                                 ConceptRecord("C2", "ms", ["Multiple sclerosis"], xrefs=["X:1"]),
                                 ConceptRecord("C3", "MS", ["mitral stenosis", "Pyrexia"])],
    "none": [],
    "no names": [ConceptRecord("C1", "")],
    "unicode and parents": [ConceptRecord("C1", "Ménière\x1fdisease", ["naïve  T-cell", "ＡＢＣ"]),
                            ConceptRecord("C2", "x", parents=["C1", "ZZ"])],
    "merged": [ConceptRecord("C1", "a", ["b"], types=["T1"]), ConceptRecord("C2", "b", ["c"]),
               ConceptRecord("C1", "A2", ["b", "d"], types=["T2", "T1"], xrefs=["q"], parents=["C2"])],
}


@pytest.mark.parametrize("case", list(RECORD_CASES))
@pytest.mark.parametrize("options", [{}, {"strip_punctuation": True}, {"priors": True}, {"name_lookup": True}])
def test_write_kb_writes_byte_for_byte_what_from_records_and_to_disk_write(tmp_path, case, options, monkeypatch):
    records = RECORD_CASES[case]
    kwargs = dict(options, on_duplicate="merge" if case == "merged" else "error")
    if kwargs.pop("priors", False):
        kwargs["priors"] = {r.id: 1.5 for r in records}
    if kwargs.pop("name_lookup", False):  # a KB above the size where the exact-name lookup is saved with it
        import spacy_sapbert.kb as kb_module

        monkeypatch.setattr(kb_module, "DICT_LOOKUP_NAMES", 0)
    ConceptKB.from_records(records, **kwargs).to_disk(tmp_path / "a")
    write_kb(iter(records), tmp_path / "b", **kwargs)
    assert folder_bytes(tmp_path / "a") == folder_bytes(tmp_path / "b")
    has_names = ConceptKB.from_disk(tmp_path / "b").n_names > 0
    assert (tmp_path / "b" / "names.hashes.npy").is_file() == (bool(options.get("name_lookup")) and has_names)


def test_write_kb_refuses_a_repeated_id_like_from_records(tmp_path):
    with pytest.raises(ValueError, match="duplicate concept id 'C1' \\(record 2\\)"):
        write_kb(iter([ConceptRecord("C1", "a"), ConceptRecord("C1", "b")]), tmp_path / "kb")


def test_paged_out_takes_a_maps_pages_out_of_resident_memory(tmp_path):
    from spacy_sapbert.mapped_pages import page_out

    path = tmp_path / "big.npy"
    np.save(path, np.ones((4096, 2048), np.float32))  # 32 MB
    mapped = np.load(path, mmap_mode="r")

    def file_mb():
        with open("/proc/self/status", encoding="utf8") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("RssFile")) / 1024

    assert float(mapped.sum()) == 4096 * 2048
    touched = file_mb()
    if page_out([path]) == 0:
        pytest.skip("this kernel cannot page out (MADV_PAGEOUT needs Linux 5.4)")
    assert file_mb() < touched - 16
    assert float(mapped.sum()) == 4096 * 2048  # read back from the file: nothing was lost


def test_unmap_pages_drops_a_read_only_maps_pages_and_leaves_other_arrays_alone(tmp_path):
    from spacy_sapbert.mapped_pages import unmap_pages

    path = tmp_path / "big.npy"
    np.save(path, np.ones((4096, 2048), np.float32))  # 32 MB
    mapped, anonymous = np.load(path, mmap_mode="r"), np.ones(1000, np.float32)

    def file_mb():
        with open("/proc/self/status", encoding="utf8") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("RssFile")) / 1024

    assert float(mapped.sum()) == 4096 * 2048
    touched = file_mb()
    assert unmap_pages([mapped, anonymous, np.load(path, mmap_mode="c")]) == 1  # only the read-only map
    assert file_mb() < touched - 16
    assert float(mapped.sum()) == 4096 * 2048 and float(anonymous.sum()) == 1000  # mapped again from the page cache

