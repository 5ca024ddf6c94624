"""The import layers (s3core <- s3runtime <- searcher | dataprep <- generator_adapters <- eval <- training <- s3 <-
experiments) hold, checked by import-linter."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_layers_contract() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is not installed (pip install -e '.[dev]')"
    r = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "KEPT" in r.stdout


def test_contract_catches_an_upward_import(tmp_path: Path) -> None:
    """The same contract on a copy of the tree with wrong-way imports must fail, naming them."""
    for pkg in ("s3core", "s3runtime", "searcher", "dataprep", "generator_adapters", "eval", "training", "s3", "experiments"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "searcher" / "_bad.py").write_text("import training.config  # wrong way\n")
    (tmp_path / "s3core" / "_bad.py").write_text("import s3runtime.raycluster  # wrong way: s3core imports nothing of ours\n")
    (tmp_path / "s3" / "_bad.py").write_text("import experiments  # wrong way: nothing imports the experiments\n")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    r = subprocess.run([exe, "--config", "pyproject.toml", "--no-cache"], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)})
    assert r.returncode != 0
    assert "searcher._bad -> training.config" in r.stdout
    assert "s3core._bad -> s3runtime.raycluster" in r.stdout
    assert "s3._bad -> experiments" in r.stdout
