"""An xMEN-style cross-encoder against the context prototypes, on dev: issue #21's comparison of the
two context rerankers, per unit of CPU time.

    python benchmarks/cross_encoder.py [--minutes 25] [--threads 2] [--top 8]

Both rerank the shipped linker's candidates for the dev gold mentions of NCBI-disease and
BC5CDR-disease, *ontology* dictionary (MEDIC), with the linker's own rule (``context.rerank``: the
candidates within 2w of the best score re-sorted by score + w × similarity):

- *prototypes*: the similarity is the cosine between the mention's sentence and the concept's
  prototype (self-supervision + the train mentions). Their dev rows are read from
  ``benchmarks/results/context_rerank_annotated.json`` (``context_rerank.py --annotated-prototypes``,
  through the component).
- *cross-encoder* (Borchert et al. 2023's design): MiniLM reads "mention in its sentence [SEP]
  candidate name", and a linear head on [CLS] gives a logit; the similarity is 2 × sigmoid(logit) - 1.
  It is fine-tuned here for ``--minutes`` on the train mentions of both corpora that the sentence could
  reorder (the best candidate is not an exact name of one concept, and the gold concept is among the
  first ``--top`` concepts): a softmax over those concepts, the gold one the target. At dev time it
  reads the first ``--top`` concepts of each such mention.

The candidates come from the component (``nlp.pipe`` over the dev documents with the gold spans,
context off); the cross-encoder's reranking is this script's own, since it is not shipped. Both are
scored by the evaluation's metrics (``score_queries``); at w = 0 the script reproduces the
prototypes' dev row. The weight is chosen on dev for both, as ``context_rerank.py`` does.
Writes ``benchmarks/results/cross_encoder.json`` and the README's ``CROSS-ENCODER`` block.
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import torch
from readme_tables import publish  # benchmarks/readme_tables.py, beside this script
from weight_sweep import command

from spacy_sapbert.context import contested, context_encoder, mention_in_context, rerank
from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path
from spacy_sapbert.evaluation import datasets, runner
from spacy_sapbert.evaluation.gold_spans import link_gold_mentions, ranking_of
from spacy_sapbert.evaluation.metrics import score_queries, summarize
from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description
from spacy_sapbert.search import Candidate, LinkingKB

DATASETS = ("ncbi-disease", "bc5cdr-disease")
PROTOTYPES = Path("benchmarks/results/context_rerank_annotated.json")
OUT = Path("benchmarks/results/cross_encoder.json")
README = Path("benchmarks/README.md")
MAX_LENGTH = 80  # tokens of sentence + name; the sentence is cut, the name kept
LISTS_PER_STEP = 4


def linked(dataset: str, split: str, encoder: SapEncoder) -> Tuple[list, Dict[Tuple[str, int, int], list], Dict[str, List[str]], Dict[str, str]]:
    """The split's queries, the linker's parts for each (context off), the KB's alternative ids and the texts."""
    kb = runner.build_dictionary(dataset, "ontology", [], datasets.DEFAULT_DATA_DIR, datasets.DEFAULT_RESOURCES_DIR)
    folder, _ = runner.dictionary_kb_folder(kb, encoder, "corpus/cache", 128, False)
    nlp = runner.gold_span_pipeline(folder, LinkingKB.from_disk(folder), encoder, batch_size=128)
    queries, _ = runner.load_queries(dataset, split)
    documents = datasets.load_split(dataset, split)
    found = link_gold_mentions(nlp, documents, runner.load_spelling(dataset), batch_size=128)
    parts = {key: [(query, [Candidate(*c) for c in cands]) for query, cands in found_parts] for key, found_parts in found.parts.items()}
    return queries, parts, kb.concept_aliases(), {d.doc_id: d.text for d in documents}


def rerankable(queries: Sequence[Any], parts: Dict[Tuple[str, int, int], list], texts: Dict[str, str], top: int
               ) -> Iterator[Tuple[Any, str, List[Candidate]]]:
    """The queries the sentence could reorder, with their sentence and first ``top`` concepts: one
    searched part whose best candidate is not an exact name of one concept (``contested`` at weight 1
    counts every candidate then, since scores are cosines)."""
    for q in queries:
        found = parts.get((q.doc_id, q.start, q.end)) or []
        if len(found) == 1 and contested(found[0][1], 1.0) > 1:
            yield q, mention_in_context(texts[q.doc_id], q.start, q.end), first_concepts(found[0][1], top)


def first_concepts(candidates: Sequence[Candidate], top: int) -> List[Candidate]:
    """The first ``top`` distinct concepts: what the cross-encoder reads of a candidate list."""
    out: List[Candidate] = []
    for c in candidates:
        if all(c.concept_id != o.concept_id for o in out):
            out.append(c)
        if len(out) == top:
            break
    return out


class CrossEncoder(torch.nn.Module):
    """MiniLM over "sentence [SEP] name" pairs, a linear head on [CLS]: one logit per candidate name."""

    def __init__(self, path: Path):
        from transformers import AutoModel, AutoTokenizer

        super().__init__()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.bert = AutoModel.from_pretrained(path)
        self.head = torch.nn.Linear(self.bert.config.hidden_size, 1)

    def forward(self, sentence: str, names: Sequence[str]) -> torch.Tensor:
        batch = self.tokenizer([sentence] * len(names), list(names), truncation="only_first", max_length=MAX_LENGTH,
                               padding=True, return_tensors="pt")
        return self.head(self.bert(**batch).last_hidden_state[:, 0]).squeeze(-1)


def training_lists(dataset: str, encoder: SapEncoder, top: int) -> List[Tuple[str, List[str], int]]:
    """(sentence, first concept names, index of the gold one) for each train query the sentence could reorder."""
    queries, parts, aliases, texts = linked(dataset, "train", encoder)
    out = []
    for q, sentence, cands in rerankable(queries, parts, texts, top):
        gold = [bool(({c.concept_id} | set(aliases.get(c.concept_id, ()))) & set(q.gold)) for c in cands]
        if any(gold):
            out.append((sentence, [c.name for c in cands], gold.index(True)))
    return out


def train(model: CrossEncoder, lists: List[Tuple[str, List[str], int]], minutes: float) -> Dict[str, Any]:
    """Listwise fine-tuning for ``minutes`` of wall time (shuffled lists, repeated when they run out)."""
    random.Random(0).shuffle(lists)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
    model.train()
    t0, seen, losses = time.perf_counter(), 0, []
    while time.perf_counter() - t0 < minutes * 60:
        sentence, names, gold = lists[seen % len(lists)]
        loss = torch.nn.functional.cross_entropy(model(sentence, names)[None], torch.tensor([gold])) / LISTS_PER_STEP
        loss.backward()
        seen += 1
        if seen % LISTS_PER_STEP == 0:
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item() * LISTS_PER_STEP)
        if seen % 500 == 0:
            print(f"{seen} lists, {time.perf_counter() - t0:.0f} s, loss {np.mean(losses[-500:]):.3f}", flush=True)
    model.eval()
    return {"lists": len(lists), "lists_seen": seen, "epochs": round(seen / len(lists), 2), "seconds": round(time.perf_counter() - t0, 1),
            "last_500_loss": round(float(np.mean(losses[-500:])), 3)}


def dev_sweep(dataset: str, model: CrossEncoder, encoder: SapEncoder, top: int, weights: Sequence[float]) -> Dict[str, Any]:
    """Strict/lenient Acc@1 on dev at each weight with the cross-encoder's similarities, and the time its
    passes took against the prototypes' sentence passes over the same mentions."""
    queries, parts, aliases, texts = linked(dataset, "dev", encoder)
    similarities: Dict[Tuple[str, int, int], List[float]] = {}
    sentences = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for q, sentence, cands in rerankable(queries, parts, texts, top):
            logits = model(sentence, [c.name for c in cands])
            by_concept = dict(zip((c.concept_id for c in cands), (2 * torch.sigmoid(logits) - 1).tolist()))
            key = (q.doc_id, q.start, q.end)
            similarities[key] = [by_concept.get(c.concept_id) for c in parts[key][0][1]]
            sentences.append(sentence)
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    context_encoder(encoder).encode(sentences, batch_size=64)  # what the prototypes read of the same mentions
    prototype_seconds = time.perf_counter() - t1
    rows = []
    for w in weights:
        rankings = []
        for q in queries:
            key = (q.doc_id, q.start, q.end)
            found = parts.get(key) or [("", [])]
            rankings.append([ranking_of([x.to_tuple() for x in (rerank(c, similarities[key], w) if w and key in similarities else c)])
                             for _, c in found])
        scores = summarize(score_queries([q.gold for q in queries], rankings, aliases))
        rows.append({"weight": w, "lenient_acc@1": scores["lenient_acc@1"], "strict_acc@1": scores["strict_acc@1"]})
        print(f"{dataset} cross-encoder dev w={w}: lenient@1 {scores['lenient_acc@1']} strict@1 {scores['strict_acc@1']}", flush=True)
    return {"dataset": dataset, "dev": rows, "reranked_mentions": len(similarities),
            "pairs_read": sum(sum(s is not None for s in v) for v in similarities.values()), "rerank_seconds": round(seconds, 1),
            "prototype_sentence_seconds": round(prototype_seconds, 1)}


def render(result: Dict[str, Any]) -> str:
    t = result["training"]
    lines = [
        f"Generated by `{result['command']}` on {result['machine']['cpu']} ({result['threads']} torch threads). Dev gold mentions, "
        "*ontology* dictionary (MEDIC), the linker's candidates reranked by its own rule with the similarity of each reranker; "
        "strict / lenient Acc@1 in percent at each weight w (0: no reranking). CPU per contested mention: the same "
        "mentions' sentences read by the prototypes' encoder (batches of 64), and the cross-encoder's passes over "
        f"sentence + name pairs (up to {MAX_LENGTH} tokens, one batch per mention), on this run's threads. The cross-encoder was fine-tuned for "
        f"{t['seconds'] / 60:.1f} minutes: {t['lists_seen']:,} candidate lists ({t['epochs']} epochs over {t['lists']:,}, "
        f"the first {result['top']} concepts each), last loss {t['last_500_loss']}. The prototypes need no training.",
        "",
        "| dataset | reranker | " + " | ".join(f"w = {w}" for w in result["weights"]) + " | best strict @1 | CPU per contested mention |",
        "|---|---|" + "--:|" * (len(result["weights"]) + 2),
    ]
    for row in result["rows"]:
        ce = row["cross_encoder"]
        n = max(1, ce["reranked_mentions"])
        for name, dev, cost in (
            ("prototypes", row["prototypes"], f"1 sentence pass: {ce['prototype_sentence_seconds'] / n * 1000:.1f} ms"),
            ("cross-encoder", ce["dev"], f"{ce['pairs_read'] / n:.1f} pair passes: {ce['rerank_seconds'] / n * 1000:.1f} ms"),
        ):
            by_weight = {r["weight"]: r for r in dev}
            cells = [f"{by_weight[w]['strict_acc@1']:.1f} / {by_weight[w]['lenient_acc@1']:.1f}" for w in result["weights"]]
            best = max(dev, key=lambda r: (r["strict_acc@1"], -r["weight"]))
            lines.append(f"| {row['dataset']} | {name} | " + " | ".join(cells) + f" | {best['strict_acc@1']:.1f} (w = {best['weight']}) | {cost} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=25.0, help="wall-clock training budget")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=8, help="concepts per candidate list the cross-encoder reads")
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(argv)
    if args.render_only:
        result = read_json(OUT)
    else:
        runner.set_threads(args.threads)
        torch.manual_seed(0)
        encoder = SapEncoder.load(resolve_encoder_path(None), precision="fp32")
        prototypes = read_json(PROTOTYPES)
        saved = {row["dataset"]: row["dev"] for row in prototypes["rows"]}
        weights = prototypes["weights"]  # the prototypes' dev sweep, for the same weights
        lists = [x for dataset in DATASETS for x in training_lists(dataset, encoder, args.top)]
        model = CrossEncoder(resolve_encoder_path(None))
        training = train(model, lists, args.minutes)
        rows = [{"dataset": d, "prototypes": saved[d], "cross_encoder": dev_sweep(d, model, encoder, args.top, weights)} for d in DATASETS]
        result = {"command": command("benchmarks/cross_encoder.py", argv), "machine": machine_description(), "threads": args.threads,
                  "top": args.top, "weights": weights, "training": training, "rows": rows}
        write_json(OUT, result)
    publish(README, "CROSS-ENCODER", render(result))
    return result


if __name__ == "__main__":
    main()
