"""The import layers (s3core <- s3runtime <- searcher | dataprep <- generator_adapters <- eval <- training <- s3 <-
experiments), and inside training/ (rewards <- config | rundir <- prep | learn <- rollouts <- run <- report <- testing),
hold, checked by import-linter; no two modules of the tree import each other, directly or round a circle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("s3core", "s3runtime", "searcher", "dataprep", "generator_adapters", "eval", "training", "s3", "experiments")


def import_circles(*packages: str) -> list[list[str]]:
    """The modules of `packages` that import each other round a circle (each strongly connected set of two or more),
    every import counted: at the top, inside a function, under `if TYPE_CHECKING:`."""
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []
    for start in sorted(graph.modules):  # Tarjan's algorithm, iterative
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    m = stack.pop()
                    comp.append(m)
                    if m == v:
                        break
                if len(comp) > 1:
                    circles.append(sorted(comp))
    return circles


def test_no_import_circles_in_the_tree() -> None:
    assert import_circles(*PACKAGES) == []


def test_a_planted_circle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circ import b\n")
    (pkg / "b.py").write_text("def f():\n    from circ import c  # a lazy import closes it too\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import circ.a\n")
    (pkg / "d.py").write_text("import circ.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("circ") == [["circ.a", "circ.b", "circ.c"]]


def test_import_layers_contract() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is not installed (pip install -e '.[dev]')"
    r = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "KEPT" in r.stdout


def test_contract_catches_an_upward_import(tmp_path: Path) -> None:
    """The same contracts on a copy of the tree with wrong-way imports must fail, naming them."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "searcher" / "_bad.py").write_text("import training.config  # wrong way\n")
    (tmp_path / "s3core" / "_bad.py").write_text("import s3runtime.raycluster  # wrong way: s3core imports nothing of ours\n")
    (tmp_path / "s3" / "_bad.py").write_text("import experiments  # wrong way: nothing imports the experiments\n")
    # inside training/: the update reaching up into the loop, data preparation sideways into the learners, the run
    # directory (the bottom) into model code
    (tmp_path / "training" / "learn" / "_bad.py").write_text("import training.run.trainer  # wrong way\n")
    (tmp_path / "training" / "prep" / "_bad.py").write_text("import training.learn.api  # siblings: never\n")
    with (tmp_path / "training" / "rundir.py").open("a") as f:
        f.write("import training.learn.learner  # wrong way: the run directory imports no model code\n")
    with (tmp_path / "training" / "rewards.py").open("a") as f:
        f.write("import training.config  # wrong way: the settings check their reward against the registry\n")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    r = subprocess.run([exe, "--config", "pyproject.toml", "--no-cache"], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)})
    assert r.returncode != 0
    assert "searcher._bad -> training.config" in r.stdout
    assert "s3core._bad -> s3runtime.raycluster" in r.stdout
    assert "s3._bad -> experiments" in r.stdout
    assert "training.learn._bad -> training.run.trainer" in r.stdout
    assert "training.prep._bad -> training.learn.api" in r.stdout
    assert "training.rundir -> training.learn.learner" in r.stdout
    assert "training.rewards -> training.config" in r.stdout
