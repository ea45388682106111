"""The accuracy-vs-minutes curve: resumable snapshot scoring and the generated README block."""
from __future__ import annotations

import json

import pytest

from training import dev_eval, report

START, END = "<!-- TRAINING-CURVE:START -->", "<!-- TRAINING-CURVE:END -->"


def write_run(run):
    snaps = run / "snapshots"
    for step in (10, 20):
        (snaps / f"step-{step:08d}").mkdir(parents=True)
    events = [{"event": "snapshot", "step": s, "elapsed_s": 60.0 * s, "path": str(snaps / f"step-{s:08d}")} for s in (10, 20)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf8")
    summary = {"steps": 20, "total_steps": 100, "stopped_early": True, "pairs_seen": 1280, "train_seconds": 1200.0,
               "pairs_per_s": 1.07, "peak_rss_mb": 1900.0, "threads": 1, "precision": "bf16"}
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf8")
    return [str(snaps / f"step-{s:08d}") for s in (10, 20)]


def curve_rows(snapshots):
    rows = []
    for model, minutes, acc in (("minilm", 0.0, 79.69), (snapshots[0], 10.0, 80.5), (snapshots[1], 20.0, 81.25)):
        for dataset in ("ncbi-disease", "bc5cdr-disease"):
            rows.append({"model": model, "dataset": dataset, "metric": "benchmark", "minutes": minutes,
                         "lenient_acc@1": acc, "strict_acc@1": acc - 2})
    return rows


def test_dev_eval_skips_what_its_output_already_holds(tmp_path, monkeypatch):
    run = tmp_path / "run"
    snapshots = write_run(run)
    out = tmp_path / "curve.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in curve_rows(snapshots)[:4]), encoding="utf8")
    scored = []

    def fake_scores(model, datasets, *args):
        scored.append((model, tuple(datasets)))
        return iter([{"dataset": d, "metric": "benchmark", "lenient_acc@1": 1.0} for d in datasets])

    monkeypatch.setattr(dev_eval, "benchmark_scores", fake_scores)
    dev_eval.main(["minilm"], run=run, dataset=["ncbi-disease", "bc5cdr-disease"], out=out, quick=False,
                  data_dir=tmp_path, precision="bf16", cache_dir=None, threads=1)
    assert scored == [(snapshots[1], ("ncbi-disease", "bc5cdr-disease"))]  # only the unscored snapshot
    rows = [json.loads(line) for line in out.read_text(encoding="utf8").splitlines()]
    assert len(rows) == 6 and rows[-1]["minutes"] == 20.0


def test_report_plots_and_rewrites_only_its_readme_block(tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    snapshots = write_run(run)
    curve = tmp_path / "curve.jsonl"
    curve.write_text("".join(json.dumps(r) + "\n" for r in curve_rows(snapshots)), encoding="utf8")
    readme = tmp_path / "README.md"
    readme.write_text(f"# T\n\n{START}\nold\n{END}\n\nkept\n", encoding="utf8")
    png = tmp_path / "curve.png"
    report.main(run, curve, png=png, readme=readme)
    text = readme.read_text(encoding="utf8")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "old" not in text and text.endswith(f"{END}\n\nkept\n")
    assert "](curve.png)" in text  # linked relative to the README's folder (benchmarks/README.md in the repo)
    assert "| 0.0 | 0 | 79.69 | 77.69 | 79.69 | 77.69 |" in text
    assert "| 20.0 | 20 | 81.25 | 79.25 | 81.25 | 79.25 |" in text
    assert "20 steps of 100" in text and "stopped by the time budget" in text and "1.1 pairs/s" in text
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf8")
    with pytest.raises(Exception, match="no benchmark results"):
        report.main(run, empty, png=png, readme=readme)
