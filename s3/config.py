"""The one configuration: `S3Config` maps one to one onto config.toml, one pydantic section per table.

    cfg = load_config("config.toml", ["searcher.max_turns=2", "generator.model=openai/gpt-4o-mini"])

Presets are config files (configs/cpu.toml); files layer in order, later wins, then `--set`:

    cfg = load_config(["configs/cpu.toml", "mine.toml"], ["searcher.max_turns=1"])   # s3 --config cpu --config mine.toml

Relative paths inside a file are resolved against that file's folder (`cfg.resolve(cfg.retriever.index)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import overload

from pydantic import Field, PrivateAttr, model_validator

from eval.config import EvalConfig
from generator_adapters.config import GeneratorConfig, GeneratorServerConfig, JudgeConfig
from s3core.configbase import Section, apply_overrides, build_model, load_toml
from s3core.errors import ConfigError
from s3runtime.config import RayConfig
from searcher.config import RetrieverConfig, SearcherConfig, ServiceConfig
from training.config import TrainingConfig

DEFAULT_CONFIG_NAME = "config.toml"


class S3Config(Section):
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig)
    searcher: SearcherConfig = Field(default_factory=SearcherConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    generator_server: GeneratorServerConfig = Field(default_factory=GeneratorServerConfig)
    ray: RayConfig = Field(default_factory=RayConfig)

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _explicit: frozenset[str] = PrivateAttr(default_factory=frozenset)

    @model_validator(mode="after")
    def _cross_checks(self) -> S3Config:
        s = self.searcher
        if s.max_select > s.k:
            raise ValueError(
                f"searcher.max_select={s.max_select} exceeds the per-turn k={s.k}: lower max_select or raise k"
            )
        if self.training.sft.teacher in ("candidates", "spans") and s.queries_per_turn < 2:
            raise ValueError(f"training.sft.teacher = '{self.training.sft.teacher}' lists several queries in one turn: set "
                             f"searcher.queries_per_turn >= 2 (it is {s.queries_per_turn})")
        self._check_learners()
        return self

    def _check_learners(self) -> None:
        """ray.learners > 1 (a LearnerGroup): what it needs and what it does not support (yet)."""
        n, t = self.ray.learners, self.training
        if n == 1:
            return
        if t.backend != "ray":
            raise ValueError(f"ray.learners={n} runs the learners as Ray actors: set training.backend = 'ray' (or "
                             "ray.learners = 1)")
        if t.sft.steps:
            raise ValueError(f"training.sft.steps={t.sft.steps} runs in the trainer's own learner: set "
                             "ray.learners = 1 for a run with the format warm-up (or training.sft.steps = 0)")
        if t.reward == "confidence_gated" and t.rollout.engine == "vllm":
            raise ValueError("training.reward = 'confidence_gated' with vLLM rollouts recomputes log-probs in the "
                             f"trainer's own learner: set ray.learners = 1 (not {n}), or training.rollout.engine = 'transformers'")
        if t.learner.device == "cuda" and self.ray.learner_gpus == 0:
            raise ValueError(f"training.learner.device = 'cuda' with ray.learners={n}: give each learner a GPU "
                             "(ray.learner_gpus = 1)")
        if t.learner.device == "cpu" and self.ray.learner_gpus > 0:
            raise ValueError(f"ray.learner_gpus={self.ray.learner_gpus} with training.learner.device = 'cpu': set "
                             "training.learner.device = 'cuda' (or 'auto'), or ray.learner_gpus = 0")

    @property
    def base_dir(self) -> Path:
        return self._base_dir

    @property
    def explicit_keys(self) -> frozenset[str]:
        """Dotted keys the user set on purpose: in a --config file or with --set (not the implicit ./config.toml,
        not the defaults). A trained searcher's recorded settings give way to these."""
        return self._explicit

    @overload
    def resolve(self, path: str | Path) -> Path: ...
    @overload
    def resolve(self, path: None) -> None: ...
    def resolve(self, path: str | Path | None) -> Path | None:
        """Resolve a path from the config against the config file's folder (absolute paths pass through)."""
        if path is None:
            return None
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self._base_dir / p)

    @property
    def generator_resolved(self) -> GeneratorConfig:
        """[generator] with its cache_path resolved like every other path in the config (against the config file's
        folder), so that every command opens the same cache file."""
        g = self.generator
        return g.model_copy(update={"cache_path": str(self.resolve(g.cache_path))}) if g.cache_path else g

    @property
    def judge_resolved(self) -> JudgeConfig:
        """[judge] with its cache_path resolved against the config file's folder."""
        j = self.judge
        return j.model_copy(update={"cache_path": str(self.resolve(j.cache_path))}) if j.cache_path else j


# Keys that hold paths. A config file's relative paths resolve against that file's folder: when several files are
# layered, those of every file but the last are made absolute as the file is read (the last file's folder is the
# config's base_dir, which also resolves --set values).
PATH_KEYS = {
    "retriever": ("index",),
    "searcher": ("policy_path",),
    "generator": ("cache_path",),
    "judge": ("cache_path",),
    "training": ("output_dir",),
    "training.data": ("dir",),
    "eval": ("out_dir",),
}
# The project's presets: `--config cpu` is configs/cpu.toml (a source checkout, which is how s3 is installed).
PRESET_DIR = Path(__file__).resolve().parents[1] / "configs"


def preset_path(name: str) -> Path:
    """configs/NAME.toml, or a clear error listing the presets there."""
    path = PRESET_DIR / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESET_DIR.glob("*.toml")) if PRESET_DIR.is_dir() else []
        raise ConfigError(f"no preset {name!r} in {PRESET_DIR}" + (f"; presets: {', '.join(known)}" if known else ""))
    return path


def preset_section(name: str, section: str) -> dict[str, object]:
    """One section of a preset file as a dict (e.g. the demo applies the cpu preset's [searcher])."""
    table = load_toml(preset_path(name)).get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{preset_path(name)}: [{section}] is not a table")
    return table


def _config_file(item: str | Path) -> Path:
    """A --config value: a file path, or the bare name of a preset in configs/ (`--config cpu`)."""
    p = Path(item).expanduser()
    if p.is_file() or p.suffix or "/" in str(item):
        return p
    return preset_path(str(item))


def _table(data: dict[str, object], dotted: str) -> dict[str, object] | None:
    """The (sub-)table at a dotted section path ('training.data'), or None."""
    node: object = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _absolutize_paths(data: dict[str, object], base: Path) -> None:
    for section, keys in PATH_KEYS.items():
        table = _table(data, section)
        if table is None:
            continue
        for key in keys:
            value = table.get(key)
            if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
                table[key] = str((base / value).resolve())
    sources = _table(data, "training.data")
    if sources is None:
        return
    for key in ("sources", "exclude_sources"):  # 'format:path' lists
        items = sources.get(key)
        if isinstance(items, list):
            fixed = []
            for item in items:
                fmt, sep, raw = str(item).partition(":")
                fixed.append(f"{fmt}:{(base / raw).resolve()}" if sep and raw and not Path(raw).is_absolute() else item)
            sources[key] = fixed


def merge_tables(into: dict[str, object], layer: dict[str, object]) -> dict[str, object]:
    """Deep-merge `layer` into `into` (tables merge key by key; any other value of the later layer wins)."""
    for key, value in layer.items():
        below = into.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            merge_tables(below, value)
        else:
            into[key] = value
    return into


def load_config(
    path: str | Path | Sequence[str | Path] | None = None, overrides: list[str] | None = None
) -> S3Config:
    """Load config.toml (or the files in `path`, layered in order: later wins), apply `--set` overrides, validate.

        load_config(["configs/cpu.toml", "mine.toml"], ["searcher.max_turns=1"])

    With no path, ./config.toml is used when it exists, else the built-in defaults (which equal config.toml). A bare
    name (`cpu`) is a preset in configs/.
    """
    if path is None:
        paths: list[str | Path] = [DEFAULT_CONFIG_NAME] if Path(DEFAULT_CONFIG_NAME).is_file() else []
    elif isinstance(path, (str, Path)):
        paths = [path]
    else:
        paths = list(path)
    data: dict[str, object] = {}
    explicit: set[str] = set()
    base = Path.cwd()
    files = [_config_file(p) for p in paths]
    for i, file in enumerate(files):
        layer = load_toml(file)
        base = file.resolve().parent
        if path is not None:
            explicit.update(_dotted_keys(layer))
        if i < len(files) - 1:
            _absolutize_paths(layer, base)
        merge_tables(data, layer)
    sets = apply_overrides({}, overrides or [])
    explicit.update(_dotted_keys(sets))
    where = f" in {', '.join(str(f) for f in files)}" if files else ""
    if sets:  # the files alone first, so a bad --set is blamed on the command line, not on the last file
        build_model(S3Config, data, where=where)
        where = " in --set " + ", ".join(overrides or []) + (f" (over {', '.join(str(f) for f in files)})" if files else "")
    merge_tables(data, sets)
    cfg = build_model(S3Config, data, where=where)
    cfg._base_dir = base
    cfg._explicit = frozenset(explicit)
    return cfg


def _dotted_keys(table: dict[str, object], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in table.items():
        if isinstance(value, dict):
            out |= _dotted_keys(value, f"{prefix}{key}.")
        else:
            out.add(f"{prefix}{key}")
    return out
