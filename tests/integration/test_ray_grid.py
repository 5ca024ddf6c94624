"""`s3 leaderboard --grid` locally and on the session's real Ray cluster: 2 methods x 1 dataset (hotpotqa_dev500 from
../shared/data, a real bm25 index) x 3 questions, the frozen generator a real loopback OpenAI-compatible HTTP server
(generator_adapters.testing.FakeLLMServer) reached through litellm. Each grid run has its own empty generator cache,
so equal rows mean equal computation. Cells are equal local vs Ray, row for row; a re-run skips finished cells and a
cell cut short resumes."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from eval.rundir import RESULTS_FILE, read_results

pytestmark = [pytest.mark.integration]
pytest.importorskip("ray")

SAME = ("id", "context_ids", "answer", "metrics", "support_recall", "error", "prompt_tokens", "completion_tokens",
        "cost_usd", "attempt")
CELLS = ("runs/openai_fake/hotpot/no_retrieval", "runs/openai_fake/hotpot/naive_rag")


@pytest.fixture(scope="module")
def hotpot(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from dataprep import prepare
    from searcher.retrieval import build_index

    root = tmp_path_factory.mktemp("raygrid")
    ds = root / "hotpot"
    prepare("hotpotqa", [shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"], ds)
    return ds, build_index(ds / "corpus.jsonl", "bm25", root / "index")


def _board(out: Path) -> list[dict[str, str]]:
    """leaderboard.csv's rows, latency aside (wall-clock time differs between two runs)."""
    with (out / "leaderboard.csv").open(newline="") as fh:
        return [{k: v for k, v in row.items() if k != "mean_latency_s"} for row in csv.DictReader(fh)]


def _rows(cell: Path) -> dict[str, dict[str, Any]]:
    return {i: {k: r[k] for k in SAME} for i, r in read_results(cell / RESULTS_FILE).items()}


def test_grid_local_equals_ray_cell_by_cell_and_resumes(
    ray_cluster, hotpot: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    from generator_adapters.testing import FakeLLMServer
    from s3.cli import main

    ds, index = hotpot
    grid = tmp_path / "grid.toml"
    grid.write_text(f'generators = ["openai/fake"]\nmethods = ["no_retrieval", "naive_rag"]\nlimit = 3\n'
                    f'batch_size = 2\n\n[[datasets]]\ndir = "{ds}"\nindex = "{index}"\n')
    with FakeLLMServer() as srv:

        def board(name: str, *extra: str) -> int:
            out = tmp_path / name
            return main(["leaderboard", "--grid", str(grid), "--out", str(out), "--set", "eval.use_judge=false",
                         "--set", f"generator.api_base={srv.api_base}", "--set", "retriever.k=2",
                         "--set", f"generator.cache_path={tmp_path / (name + '.sqlite')}",
                         "--set", "ray.eval_worker_cpus=0.5", *extra])

        assert board("local") in (0, 1)  # 1 = a cell's verdict (too many wrong rows); rows are what is compared
        assert board("ray", "--ray") in (0, 1)
        for cell in CELLS:
            local, on_ray = _rows(tmp_path / "local" / cell), _rows(tmp_path / "ray" / cell)
            assert len(local) == 3 and local == on_ray, cell
            assert all(r["error"] is None and r["answer"] for r in local.values())
            s_l = json.loads((tmp_path / "local" / cell / "summary.json").read_text())
            s_r = json.loads((tmp_path / "ray" / cell / "summary.json").read_text())
            assert s_l["metrics"] == s_r["metrics"] and s_l["config"]["method"] == s_r["config"]["method"]
        for name in ("local", "ray"):
            md = (tmp_path / name / "leaderboard.md").read_text()
            assert "Naive RAG" in md and "No retrieval" in md
        assert _board(tmp_path / "local") == _board(tmp_path / "ray")

        # a re-run on Ray skips both finished cells; a cell cut short (its last row lost) resumes just that row
        capsys.readouterr()
        cut = tmp_path / "ray" / CELLS[1] / RESULTS_FILE
        cut.write_text("".join(cut.read_text().splitlines(keepends=True)[:2]))
        (tmp_path / "ray" / CELLS[1] / "summary.json").unlink()
        assert board("ray", "--ray") in (0, 1)
        printed = capsys.readouterr().out
        assert "skipped openai/fake / hotpot / no_retrieval" in printed
        assert "ran     openai/fake / hotpot / naive_rag" in printed
        resumed = json.loads((tmp_path / "ray" / CELLS[1] / "summary.json").read_text())["invocation"]
        assert resumed["rows_written"] == 1 and resumed["skipped_finished"] == 2
        assert _rows(tmp_path / "ray" / CELLS[1]) == _rows(tmp_path / "local" / CELLS[1])
