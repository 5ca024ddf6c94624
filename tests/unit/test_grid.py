"""The evaluation grid (`s3 leaderboard --grid`): expansion into cells, checks of the grid file, which cells a re-run
skips. Running cells for real (local and on Ray): tests/integration/test_ray_grid.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.grid import CELL_FILE, Cell, expand_grid, load_grid, run_grid, settings_fingerprint
from eval.rundir import SUMMARY_FILE
from s3.cli import main
from s3.config import load_config
from s3core.errors import ConfigError


def _setup(tmp_path: Path, text: str) -> Path:
    for d in ("data/hotpot", "data/musique", "idx/hotpot"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "ctx.jsonl").write_text("")
    grid = tmp_path / "grid.toml"
    grid.write_text(text)
    return grid


GOOD = """
generators = ["local/a", "openai/gpt-4o-mini"]
methods = ["no_retrieval", "naive_rag", "searcher", "search_r1"]
limit = 5
batch_size = 2

[[datasets]]
dir = "data/hotpot"
index = "idx/hotpot"
contexts = "ctx.jsonl"

[[datasets]]
dir = "data/musique"
name = "mq"
index = "idx/hotpot"
"""


def test_expand_grid_cells_folders_and_options(tmp_path: Path) -> None:
    grid = load_grid(_setup(tmp_path, GOOD))
    assert grid.datasets[0].dir == str(tmp_path / "data/hotpot")  # relative to the grid file's folder
    cells = expand_grid(grid, tmp_path / "out")
    # 2 generators x 2 datasets x 3 generator methods + search_r1 once per dataset (no frozen generator)
    assert len(cells) == 2 * 2 * 3 + 2
    keys = [c.key for c in cells]
    assert keys[:3] == ["local/a / hotpot / no_retrieval", "local/a / hotpot / naive_rag", "local/a / hotpot / searcher"]
    assert keys[-2:] == ["search_r1_agent / hotpot / search_r1", "search_r1_agent / mq / search_r1"]
    by = {c.key: c for c in cells}
    rag = by["openai/gpt-4o-mini / mq / naive_rag"]
    assert rag.out == tmp_path / "out" / "runs" / "openai_gpt-4o-mini" / "mq" / "naive_rag"
    assert rag.opts.index == tmp_path / "idx/hotpot" and rag.opts.generator == "openai/gpt-4o-mini"
    assert (rag.opts.limit, rag.opts.batch_size, rag.opts.progress) == (5, 2, False)
    # each method gets only the options it uses (what `s3 eval` would refuse otherwise)
    none = by["local/a / hotpot / no_retrieval"]
    assert none.opts.index is None and none.opts.contexts is None and none.opts.given == {"generator"}
    srch = by["local/a / hotpot / searcher"]
    assert srch.opts.contexts == tmp_path / "ctx.jsonl" and srch.opts.given == {"index", "contexts", "generator"}
    assert by["local/a / mq / searcher"].opts.contexts is None  # that dataset has none: the searcher runs live
    r1 = by["search_r1_agent / hotpot / search_r1"]
    assert r1.generator is None and r1.opts.generator is None and r1.opts.given == {"index"}
    assert len({c.out for c in cells}) == len(cells)  # one run directory per cell


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not toml [", "not valid TOML"),
        ('methods = ["naive_rag"]\n[[datasets]]\ndir = "data/hotpot"\nindex = "idx/hotpot"\n', "generators"),
        ('generators = []\nmethods = ["naive_rag"]\n[[datasets]]\ndir = "data/hotpot"\n', "generators"),
        ('generators = ["g"]\nmethods = ["rag"]\n[[datasets]]\ndir = "data/hotpot"\n', "unknown method(s) 'rag'"),
        ('generators = ["g"]\nmethods = ["no_retrieval"]\n', "datasets"),
        ('generators = ["g"]\nmethods = ["no_retrieval"]\nlimt = 3\n[[datasets]]\ndir = "data/hotpot"\n',
         "unknown key 'limt'"),
        ('generators = ["g"]\nmethods = ["no_retrieval"]\n[[datasets]]\ndir = "data/hotpot"\ncorpus = "x"\n',
         "unknown key 'datasets.0.corpus'"),
        ('generators = ["g"]\nmethods = ["no_retrieval"]\nlimit = 0\n[[datasets]]\ndir = "data/hotpot"\n', "limit"),
        ('generators = ["g", "g"]\nmethods = ["no_retrieval"]\n[[datasets]]\ndir = "data/hotpot"\n',
         "generators repeat: g"),
        ('generators = ["a/b", "a_b"]\nmethods = ["no_retrieval"]\n[[datasets]]\ndir = "data/hotpot"\n',
         "generator folder names repeat: a_b"),
        ('generators = ["g"]\nmethods = ["no_retrieval"]\n[[datasets]]\ndir = "data/hotpot"\n'
         '[[datasets]]\ndir = "other/hotpot"\n', "dataset names repeat: hotpot"),
        ('generators = ["g"]\nmethods = ["naive_rag"]\n[[datasets]]\ndir = "data/hotpot"\ncontexts = "ctx.jsonl"\n',
         "no method uses them"),
    ],
)
def test_bad_grid_file_is_a_config_error_naming_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    grid = _setup(tmp_path, text)
    with pytest.raises(ConfigError, match="grid") as err:
        load_grid(grid)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('generators = ["g"]\nmethods = ["no_retrieval"]\n[[datasets]]\ndir = "data/nowhere"\n',
         "grid cell g / nowhere / no_retrieval: --dataset"),
        ('generators = ["g"]\nmethods = ["naive_rag"]\n[[datasets]]\ndir = "data/hotpot"\nindex = "idx/none"\n',
         "grid cell g / hotpot / naive_rag: --index"),
        ('generators = ["g"]\nmethods = ["naive_rag"]\n[[datasets]]\ndir = "data/hotpot"\n',
         "grid cell g / hotpot / naive_rag: the method needs a retrieval index"),
        ('generators = ["g"]\nmethods = ["searcher"]\n[[datasets]]\ndir = "data/hotpot"\ncontexts = "nope.jsonl"\n',
         "--contexts"),
    ],
)
def test_bad_cell_is_a_config_error_naming_the_cell(tmp_path: Path, text: str, expected: str) -> None:
    grid = load_grid(_setup(tmp_path, text))
    with pytest.raises(ConfigError) as err:
        expand_grid(grid, tmp_path / "out")
    assert expected in str(err.value)


def test_searcher_with_contexts_needs_no_index(tmp_path: Path) -> None:
    grid = load_grid(_setup(tmp_path, 'generators = ["g"]\nmethods = ["searcher"]\n[[datasets]]\n'
                                      'dir = "data/hotpot"\ncontexts = "ctx.jsonl"\n'))
    (cell,) = expand_grid(grid, tmp_path / "out")
    assert cell.opts.index is None and cell.opts.contexts == tmp_path / "ctx.jsonl"


def _finish(cell: Cell, cfg: Any, *, n_failed: int = 0, n_missing: int = 0, spec: dict[str, Any] | None = None) -> None:
    cell.out.mkdir(parents=True, exist_ok=True)
    (cell.out / SUMMARY_FILE).write_text(json.dumps({"n_scored": 3, "n_failed": n_failed, "n_missing": n_missing}))
    (cell.out / CELL_FILE).write_text(json.dumps({"cell": spec or cell.spec, "settings_sha256": settings_fingerprint(cfg)}))


def test_rerun_skips_only_cells_finished_with_the_same_entry_and_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = load_grid(_setup(tmp_path, 'generators = ["g"]\nmethods = ["no_retrieval", "naive_rag", "searcher"]\n'
                                      '[[datasets]]\ndir = "data/hotpot"\nindex = "idx/hotpot"\n'
                                      '[[datasets]]\ndir = "data/musique"\nindex = "idx/hotpot"\n'))
    cfg = load_config(None, ["generator.max_tokens=16"])
    cells = expand_grid(grid, tmp_path / "out")
    assert len(cells) == 6
    _finish(cells[0], cfg)                                           # finished: skipped
    _finish(cells[1], cfg, n_failed=1)                               # a failed row to retry: resumed
    _finish(cells[2], cfg, n_missing=2)                              # cut short: resumed
    _finish(cells[3], cfg, spec={**cells[3].spec, "limit": 99})      # another grid entry: run (identity checks it)
    _finish(cells[4], load_config(None, ["generator.max_tokens=32"]))  # other settings: run
    ran: list[str] = []

    def fake_run_cell(cfg: Any, cell: Cell) -> dict[str, Any]:  # the harness itself: tests/integration
        ran.append(cell.key)
        return {"n_scored": 1, "n_failed": 0, "n_missing": 0}

    monkeypatch.setattr("eval.grid.run_cell", fake_run_cell)
    results = run_grid(cfg, cells)
    assert [r.status for r in results] == ["skipped", "ran", "ran", "ran", "ran", "ran"]
    assert ran == [c.key for c in cells[1:]]
    assert results[0].summary == {"n_scored": 3, "n_failed": 0, "n_missing": 0}
    # settings that do not change rows (the backend, where caches live) do not make a finished cell run again
    same = load_config(None, ["generator.max_tokens=16", "eval.backend=ray", "generator.cache_path=elsewhere.sqlite"])
    assert settings_fingerprint(same) == settings_fingerprint(cfg)


def test_a_failing_cell_is_reported_and_the_others_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3core.errors import S3Error

    (tmp_path / "data/third").mkdir(parents=True)
    grid = load_grid(_setup(tmp_path, 'generators = ["g"]\nmethods = ["no_retrieval"]\n[[datasets]]\n'
                                      'dir = "data/hotpot"\n[[datasets]]\ndir = "data/musique"\n'
                                      '[[datasets]]\ndir = "data/third"\n'))
    cells = expand_grid(grid, tmp_path / "out")

    def fake_run_cell(cfg: Any, cell: Cell) -> dict[str, Any]:
        if cell.dataset == "hotpot":
            raise S3Error("no such model")
        if cell.dataset == "musique":
            raise FileNotFoundError(2, "No such file or directory", "data/musique/questions.jsonl")
        return {"n_scored": 1}

    monkeypatch.setattr("eval.grid.run_cell", fake_run_cell)
    results = run_grid(load_config(None, []), cells)
    assert [r.status for r in results] == ["failed", "failed", "ran"]
    assert results[0].error == "no such model" and "data/musique/questions.jsonl" in str(results[1].error)

    def buggy(cfg: Any, cell: Cell) -> dict[str, Any]:
        raise KeyError("a bug")

    monkeypatch.setattr("eval.grid.run_cell", buggy)
    with pytest.raises(KeyError):  # a bug in our code is not a cell's failure: it propagates
        run_grid(load_config(None, []), cells)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["leaderboard", "--out", "o"], "give the RUN_DIRs"),
        (["leaderboard", "run1", "--grid", "grid.toml", "--out", "o"], "not both"),
        (["leaderboard", "run1", "--ray", "--out", "o"], "without --grid"),
        (["leaderboard", "--grid", "missing.toml", "--out", "o"], "not found"),
        (["leaderboard", "--grid", "grid.toml", "--out", "o"], "unknown method(s) 'rag'"),
    ],
)
def test_cli_refuses_bad_leaderboard_invocations_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    _setup(tmp_path, 'generators = ["g"]\nmethods = ["rag"]\n[[datasets]]\ndir = "data/hotpot"\n')
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err


def test_doctests() -> None:
    import doctest

    import eval.grid

    assert doctest.testmod(eval.grid).failed == 0
