"""`s3 eval` on Ray (eval.backend = "ray" / `s3 eval --ray`) on the session's real Ray cluster: hotpotqa_dev500 from
../shared/data, a real bm25 index, the real offline Qwen2.5-Coder-0.5B generator. Each run has its own empty
generator cache, so equal rows mean equal computation, not a shared cache. A run cut short resumes on Ray as locally.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.rundir import RESULTS_FILE, read_results

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("ray")

QWEN = "local/qwen2.5-coder-0.5b-instruct"
# what must be equal row for row (time stamps, latencies and the cache flag aside)
SAME = ("id", "context_ids", "answer", "metrics", "support_recall", "error", "prompt_tokens", "completion_tokens",
        "cost_usd", "attempt")


@pytest.fixture(scope="module")
def hotpot(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from dataprep import prepare
    from searcher.retrieval import build_index

    root = tmp_path_factory.mktemp("rayeval")
    ds = root / "data"
    prepare("hotpotqa", [shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"], ds)
    return ds, build_index(ds / "corpus.jsonl", "bm25", root / "index")


def _run(ds: Path, index: Path, out: Path, *, ray: bool, method: str = "naive_rag", limit: int = 4) -> dict[str, Any]:
    from eval.build import build_run
    from eval.harness import EvalOptions, run_eval, validate_options
    from s3.config import load_config

    cfg = load_config(None, [f"generator.model={QWEN}", f"generator.cache_path={out.parent / (out.name + '.sqlite')}",
                             "generator.max_tokens=16", "eval.use_judge=false", "retriever.k=2", "ray.eval_workers=2"])
    opts = EvalOptions(dataset=ds, method=method, out=out, index=index, limit=limit, batch_size=1, progress=False,
                       given={"index"})
    validate_options(opts)
    dataset, comp, config = build_run(cfg, opts)
    runner = None
    if ray:
        from eval.ray_eval import RayBatchRunner

        runner = RayBatchRunner(cfg, opts, config)
    try:
        return run_eval(opts, dataset, comp, config, n_resamples=100, runner=runner)
    finally:
        if runner is not None:
            runner.close()


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    return {i: {k: r[k] for k in SAME} for i, r in read_results(out / RESULTS_FILE).items()}


def test_ray_eval_rows_equal_local_rows_and_resume(ray_cluster, hotpot: tuple[Path, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ds, index = hotpot
    local = _run(ds, index, tmp_path / "local", ray=False)
    on_ray = _run(ds, index, tmp_path / "ray", ray=True)
    assert local["n_scored"] == on_ray["n_scored"] == 4
    rows_l, rows_r = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
    assert rows_l == rows_r and len(rows_l) == 4
    assert any(r["answer"] for r in rows_r.values())
    assert on_ray["metrics"] == local["metrics"]
    assert on_ray["invocation"]["cache"]["misses"] == local["invocation"]["cache"]["misses"] > 0  # both started empty

    # a Ray run cut short (its last two rows lost) resumes: only the missing rows are run again, on Ray
    path = tmp_path / "ray" / RESULTS_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]))
    (tmp_path / "ray" / "summary.json").unlink()
    resumed = _run(ds, index, tmp_path / "ray", ray=True)
    assert resumed["invocation"]["rows_written"] == 2 and resumed["invocation"]["skipped_finished"] == 2
    assert _rows(tmp_path / "ray") == rows_l
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["n_scored"] == 4


def test_s3_eval_ray_flag_and_eval_backend_setting(
    ray_cluster, hotpot: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    """The command line: `s3 eval --ray` and `--set eval.backend=ray` run the batches on the workers, `s3 eval` alone
    does not; all three write the same rows."""
    from eval.ray_eval import RayBatchRunner
    from s3.cli import main

    ds, _ = hotpot
    ran: list[int] = []
    run = RayBatchRunner.run

    def counting(self, batches, attempts):  # type: ignore[no-untyped-def]
        ran.append(len(batches))
        yield from run(self, batches, attempts)

    monkeypatch.setattr(RayBatchRunner, "run", counting)

    def cli(name: str, *extra: str) -> dict[str, dict[str, Any]]:
        out = tmp_path / name
        rc = main(["eval", "--dataset", str(ds), "--method", "no_retrieval", "--generator", QWEN, "--limit", "2",
                   "--batch-size", "1", "--no-progress", "--out", str(out), "--set", f"generator.cache_path={out}.sqlite",
                   "--set", "eval.use_judge=false", "--set", "generator.max_tokens=16", "--set", "ray.eval_workers=1",
                   *extra])
        assert rc in (0, 1)  # 1 = too many wrong-or-failed rows for the verdict; the rows are what is compared here
        return _rows(out)

    local = cli("local")
    assert ran == []
    flag = cli("flag", "--ray")
    setting = cli("setting", "--set", "eval.backend=ray")
    assert ran == [2, 2]
    assert local == flag == setting and len(local) == 2
