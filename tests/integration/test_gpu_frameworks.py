"""No s3 process initialises a GPU framework it does not use (issue 29, defect 1).

bm25s imports JAX when it is installed and calls `jax.lax.top_k` at import; a real JAX then preallocates 75% of the
GPU. JAX is not installed here, so a stand-in `jax` package on PYTHONPATH records every import of it in a file: the
real `s3 index build` / `s3 index retrieve` commands (bm25s index, real corpus) run in subprocesses, and the file must
stay empty. On the parent commit bm25s imported the stand-in from both commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FAKE_JAX = '''
import os
with open(os.environ["S3_TEST_JAX_MARKER"], "a") as f:
    f.write("jax imported\\n")
from . import lax  # noqa: E402
'''
FAKE_LAX = '''
def top_k(x, k):
    return None, None
'''


def _corpus(path: Path) -> Path:
    rows = [{"id": f"d{i}", "title": t, "text": f"{t} is a test passage about {w}."}
            for i, (t, w) in enumerate([("Kant", "philosophy"), ("Paris", "France"), ("Tokyo", "Japan"),
                                        ("Lima", "Peru"), ("Oslo", "Norway")])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def jax_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    pkg = tmp_path / "fakejax" / "jax"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_JAX)
    (pkg / "lax.py").write_text(FAKE_LAX)
    marker = tmp_path / "jax_imports.txt"
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)
    env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fakejax"), str(root), env.get("PYTHONPATH", "")])
    env["S3_TEST_JAX_MARKER"] = str(marker)
    # the stand-in is importable in this environment: a plain `import jax` does record itself
    subprocess.run([sys.executable, "-c", "import jax"], env=env, check=True)
    assert marker.read_text() == "jax imported\n"
    marker.unlink()
    return env, marker


def test_s3_bm25_commands_never_import_jax(jax_env: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, marker = jax_env
    corpus = _corpus(tmp_path / "corpus.jsonl")
    s3 = [sys.executable, "-m", "s3.cli"]
    build = subprocess.run([*s3, "index", "build", "--corpus", str(corpus), "--backend", "bm25",
                            "--out", str(tmp_path / "idx")], env=env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    ret = subprocess.run([*s3, "retrieve", "--index", str(tmp_path / "idx"), "--k", "2", "Kant philosophy"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert ret.returncode == 0, ret.stderr
    assert "Kant" in ret.stdout
    assert not marker.exists(), marker.read_text()


def test_library_import_hides_jax_but_keeps_a_host_programs_jax(jax_env: tuple[dict[str, str], Path]) -> None:
    """In a user's program: our bm25s import does not load JAX; a program that loaded JAX itself keeps it, and
    keep_jax_off_gpus() (the CLI's) leaves its environment alone."""
    env, marker = jax_env
    code = ("from searcher.retrieval import bm25; import sys; "
            "bm25.import_bm25s(); assert 'jax' not in sys.modules or sys.modules['jax'] is None, 'jax loaded'; "
            "import bm25s.selection as sel; assert not sel.JAX_IS_AVAILABLE")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    assert not marker.exists()
    host = ("import jax, os; from s3core.frameworks import import_bm25s, keep_jax_off_gpus; import_bm25s(); "
            "keep_jax_off_gpus(); assert 'JAX_PLATFORMS' not in os.environ")
    subprocess.run([sys.executable, "-c", host], env=env, check=True, timeout=300)
    assert marker.read_text() == "jax imported\n"  # the host's own import, once


def test_cli_sets_jax_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from s3core.frameworks import JAX_ENV, keep_jax_off_gpus

    for k in JAX_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")  # a user's own setting wins
    if "jax" in sys.modules:
        pytest.skip("this test process imported JAX")
    keep_jax_off_gpus()
    assert os.environ["JAX_PLATFORMS"] == "cpu"
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
