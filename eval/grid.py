"""The evaluation grid: `s3 leaderboard --grid GRID.toml --out DIR [--ray]`, generators x datasets x methods.

    grid = load_grid(Path("grid.toml"))                  # GridSpec, checked; paths resolved against the file's folder
    cells = expand_grid(grid, Path("runs/board"))        # one Cell per (generator, dataset, method)
    results = run_grid(cfg, cells, backend="ray")        # each cell = one `s3 eval` run directory
    board = build_leaderboard([c.out for c in cells if ...])

A grid file (TOML; every key is checked, an unknown one is an error naming the valid keys):

    generators = ["local/qwen2.5-coder-0.5b-instruct", "openai/gpt-4o-mini"]
    methods = ["no_retrieval", "naive_rag", "searcher"]
    limit = 100            # optional: the first N questions of every dataset
    batch_size = 16        # optional

    [[datasets]]
    dir = "data/hotpot"            # what `s3 data prepare` wrote
    index = "indexes/hotpot"       # optional (default retriever.index); methods that retrieve need one
    contexts = "ctx/hotpot.jsonl"  # optional: the searcher's contexts file (method searcher; else it runs live)
    name = "hotpot"                # optional: the cell folder's name (default: the folder name of `dir`)

Every cell is its own run directory DIR/runs/GENERATOR/DATASET/METHOD, run by the same harness as `s3 eval`
(eval/build.py `build_run` + eval/harness.py `run_eval`): its rows, resume, lock and identity (run.json) are exactly an
`s3 eval` run's. `search_r1` (the agent answers itself, no frozen generator) is one cell per dataset, under
DIR/runs/search_r1_agent. A re-run skips a cell that finished (every question scored) with the same grid entry and
the same settings (DIR/runs/.../cell.json), and resumes every other one (finished rows skipped, failed ones retried).

Locally the cells run one after the other in this process. With Ray (`--ray` / eval.backend = "ray") each cell is a
Ray task reserving ray.eval_worker_cpus CPUs; Ray schedules as many at once as the cluster has room for, and retries a
cell whose worker died (ray.max_restarts times) - the retry resumes the cell's run directory, so no row is lost or
doubled. A cell task writes its own run directory, so on a multi-node cluster DIR must be a folder every node sees at
the same path (a shared filesystem); the driver checks each cell's summary.json and names any cell it cannot see.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from eval.config import EvalSettings
from eval.harness import EvalOptions, validate_options
from eval.methods import METHODS, OPTIONS_USED
from eval.rundir import SUMMARY_FILE
from s3core.configbase import Section, build_model, load_toml
from s3core.errors import ConfigError, S3Error
from s3core.io import write_json_atomic

__all__ = ["Cell", "CellResult", "GridDataset", "GridSpec", "cell_finished", "expand_grid", "load_grid", "run_cell",
           "run_grid"]

CELL_FILE = "cell.json"
RUNS_DIR = "runs"
AGENT_GENERATOR = "search_r1_agent"  # the generator folder of search_r1 cells (the agent answers itself)


class GridDataset(Section):
    """One [[datasets]] entry of a grid file."""

    dir: str = Field(description="A prepared dataset folder (what `s3 data prepare` wrote).")
    index: str | None = Field(None, description="Retrieval index of this dataset (default: retriever.index).")
    contexts: str | None = Field(None, description="Searcher contexts jsonl (method searcher; else it runs live).")
    name: str | None = Field(None, description="Cell folder name (default: the folder name of `dir`).")

    @property
    def label(self) -> str:
        return self.name or Path(self.dir).name


class GridSpec(Section):
    """A grid file: which generators x datasets x methods to evaluate."""

    generators: list[str] = Field(min_length=1, description="litellm model strings of the frozen generators.")
    methods: list[str] = Field(min_length=1, description=f"Methods, of: {', '.join(METHODS)}.")
    datasets: list[GridDataset] = Field(min_length=1, description="[[datasets]] tables.")
    limit: int | None = Field(None, ge=1, description="Only the first N questions of every dataset.")
    batch_size: int = Field(16, ge=1, description="Questions per batch.")

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, v: list[str]) -> list[str]:
        unknown = [m for m in v if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown method(s) {', '.join(map(repr, unknown))}; choose from: {', '.join(METHODS)}")
        return v

    @model_validator(mode="after")
    def _no_duplicates(self) -> GridSpec:
        for what, names in (("generators", self.generators), ("methods", self.methods),
                            ("dataset names", [d.label for d in self.datasets]),
                            ("generator folder names", [slug(g) for g in self.generators])):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"{what} repeat: {', '.join(dup)} (each cell must be one run directory; give "
                                 "datasets with the same folder name a `name`)")
        for d in self.datasets:
            if d.contexts is not None and "searcher" not in self.methods:
                raise ValueError(f"dataset {d.label!r} gives contexts, but no method uses them (only 'searcher' does)")
            if d.label in ("", ".", ".."):
                raise ValueError(f"dataset {d.dir!r}: give it a `name` (used as its cell folder)")
        return self


def slug(name: str) -> str:
    """A folder name for a model string.

    >>> slug("openai/gpt-4o-mini"), slug("local/qwen2.5-coder-0.5b-instruct")
    ('openai_gpt-4o-mini', 'local_qwen2.5-coder-0.5b-instruct')
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "_"


def load_grid(path: Path) -> GridSpec:
    """Read and check a grid file; relative paths in it are resolved against its folder. Every problem is a
    ConfigError naming the file and the key."""
    data = load_toml(path)
    grid = build_model(GridSpec, data, where=f" in grid file {path}")
    base = path.resolve().parent
    fixed = []
    for d in grid.datasets:
        update = {k: str(base / v) for k in ("dir", "index", "contexts")
                  if (v := getattr(d, k)) is not None and not Path(v).expanduser().is_absolute()}
        fixed.append(d.model_copy(update=update))
    grid.datasets = fixed
    return grid


@dataclass(frozen=True)
class Cell:
    """One (generator, dataset, method) of a grid, and the `s3 eval` options that run it."""

    generator: str | None  # None: search_r1 (the agent answers itself)
    dataset: str
    method: str
    opts: EvalOptions
    spec: dict[str, Any]  # the grid entry as written to cell.json

    @property
    def out(self) -> Path:
        return self.opts.out

    @property
    def key(self) -> str:
        return f"{self.generator or AGENT_GENERATOR} / {self.dataset} / {self.method}"


def expand_grid(grid: GridSpec, out: Path, default_index: Path | None = None) -> list[Cell]:
    """Every cell of the grid, in order generator, dataset, method, with its options checked as `s3 eval` checks
    them: a dataset folder that is not one, a method that retrieves without an index (neither the dataset's `index`
    nor `default_index`, i.e. retriever.index): ConfigError naming the cell."""
    cells: list[Cell] = []
    for gen in [*grid.generators, None]:
        for d in grid.datasets:
            for method in grid.methods:
                if (method == "search_r1") != (gen is None):  # search_r1: once per dataset, without a generator
                    continue
                uses = OPTIONS_USED[method]
                index = Path(d.index) if d.index is not None and "index" in uses else None
                contexts = Path(d.contexts) if d.contexts is not None and "contexts" in uses else None
                given = {name for name, v in (("index", index), ("contexts", contexts), ("generator", gen)) if v}
                opts = EvalOptions(
                    dataset=Path(d.dir), method=method,
                    out=out / RUNS_DIR / (slug(gen) if gen else AGENT_GENERATOR) / d.label / method,
                    index=index, contexts=contexts, generator=gen, limit=grid.limit, batch_size=grid.batch_size,
                    progress=False, given=given,
                )
                where = f"grid cell {gen or AGENT_GENERATOR} / {d.label} / {method}"
                try:
                    validate_options(opts)
                except S3Error as e:
                    raise ConfigError(f"{where}: {e}") from None
                needs_index = method != "no_retrieval" and not (method == "searcher" and contexts is not None)
                if needs_index and index is None and default_index is None:
                    raise ConfigError(f"{where}: the method needs a retrieval index: give the dataset an `index` "
                                      "in the grid file, or set retriever.index")
                spec = {"generator": gen, "dataset": d.label, "dataset_dir": d.dir, "method": method,
                        "index": d.index if index else None, "contexts": d.contexts if contexts else None,
                        "limit": grid.limit, "batch_size": grid.batch_size}
                cells.append(Cell(generator=gen, dataset=d.label, method=method, opts=opts, spec=spec))
    return cells


def settings_fingerprint(cfg: EvalSettings) -> str:
    """sha256 of the settings a cell's rows depend on (retriever, searcher, generator, judge, eval; not where the
    caches live, not the backend): a finished cell is skipped only when they are unchanged."""
    parts = {
        "retriever": cfg.retriever.model_dump(mode="json"),
        "searcher": cfg.searcher.model_dump(mode="json"),
        "generator": cfg.generator_resolved.model_dump(mode="json", exclude={"cache_path"}),
        "judge": cfg.judge_resolved.model_dump(mode="json", exclude={"cache_path"}),
        "eval": cfg.eval.model_dump(mode="json", exclude={"backend", "out_dir"}),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def cell_finished(cell: Cell, fingerprint: str) -> bool:
    """The cell's run directory holds a finished run (every question scored) of this grid entry and these settings."""
    try:
        recorded = json.loads((cell.out / CELL_FILE).read_text(encoding="utf-8"))
        summary = json.loads((cell.out / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return (recorded == {"cell": cell.spec, "settings_sha256": fingerprint}
            and summary.get("n_missing") == 0 and summary.get("n_failed") == 0)


def run_cell(cfg: EvalSettings, cell: Cell) -> dict[str, Any]:
    """One cell = one `s3 eval` run (the same build and harness), in this process; returns its summary."""
    from eval.build import build_run
    from eval.harness import run_eval

    dataset, comp, config = build_run(cfg, cell.opts)
    summary = run_eval(cell.opts, dataset, comp, config, n_resamples=cfg.eval.bootstrap_samples, seed=cfg.eval.seed)
    write_json_atomic(cell.out / CELL_FILE, {"cell": cell.spec, "settings_sha256": settings_fingerprint(cfg)})
    return summary


@dataclass
class CellResult:
    cell: Cell
    status: str  # "skipped" (finished before), "ran", "failed"
    summary: dict[str, Any] | None = None
    error: str | None = None


def run_grid(
    cfg: EvalSettings, cells: list[Cell], *, backend: str = "local",
    on_result: Callable[[CellResult], None] | None = None,
) -> list[CellResult]:
    """Run every unfinished cell (locally one after the other, or as Ray tasks); a cell that fails with an S3Error or
    an OSError (bad input of that cell) is reported in its CellResult and the others go on; any other exception is a
    bug and propagates. Results in cell order."""
    fingerprint = settings_fingerprint(cfg)
    results: dict[int, CellResult] = {}
    todo: list[int] = []
    for i, c in enumerate(cells):
        if cell_finished(c, fingerprint):
            results[i] = CellResult(c, "skipped", summary=json.loads((c.out / SUMMARY_FILE).read_text("utf-8")))
            if on_result is not None:
                on_result(results[i])
        else:
            todo.append(i)
    if backend == "ray":
        done = _run_on_ray(cfg, cells, todo, on_result)
    else:
        done = {}
        for i in todo:
            try:
                done[i] = CellResult(cells[i], "ran", summary=run_cell(cfg, cells[i]))
            except (S3Error, OSError) as e:  # this cell's input (a model, a file) is bad: the other cells go on
                done[i] = CellResult(cells[i], "failed", error=_message(e))
            if on_result is not None:
                on_result(done[i])
    results.update(done)
    return [results[i] for i in range(len(cells))]


def _run_on_ray(
    cfg: EvalSettings, cells: list[Cell], todo: list[int], on_result: Callable[[CellResult], None] | None
) -> dict[int, CellResult]:
    from s3runtime.raycluster import connect

    ray = connect(cfg.ray)
    rc = cfg.ray
    # a task whose worker died is retried by Ray (max_retries); an error our code raised is not (retry_exceptions off)
    task = ray.remote(run_cell).options(num_cpus=rc.eval_worker_cpus, max_retries=rc.max_restarts,
                                          retry_exceptions=False, resources=dict(rc.eval_worker_resources))
    cfg_ref = ray.put(cfg)
    refs = {task.remote(cfg_ref, cells[i]): i for i in todo}
    done: dict[int, CellResult] = {}
    try:
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            i = refs[ready[0]]
            try:
                summary = ray.get(ready[0])
                if not (cells[i].out / SUMMARY_FILE).is_file():
                    raise S3Error(f"cell {cells[i].key} ran on a node whose {cells[i].out} this driver cannot see: "
                                  "with several nodes, --out must be on a filesystem every node shares")
                done[i] = CellResult(cells[i], "ran", summary=summary)
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                if not isinstance(cause, (S3Error, OSError)):
                    raise  # a bug in our code: its traceback, as a local run shows it
                done[i] = CellResult(cells[i], "failed", error=_message(cause))
            except ray.exceptions.RayError as e:  # the worker died more often than ray.max_restarts
                done[i] = CellResult(cells[i], "failed", error=f"Ray lost the cell's worker: {_short(e)}")
            except S3Error as e:
                done[i] = CellResult(cells[i], "failed", error=str(e))
            if on_result is not None:
                on_result(done[i])
    finally:
        for ref in refs:
            if refs[ref] not in done:
                ray.cancel(ref)
    return done


def _message(e: BaseException) -> str:
    from s3core.io import describe_os_error

    return describe_os_error(e) if isinstance(e, OSError) else str(e)


def _short(e: BaseException) -> str:
    from s3core.credentials import redact

    return redact(str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)[:500]
