"""Axes that count turns or steps label whole numbers only (issue 61 item 8: "plots label turns 0.5, 1.5"): the
per-turn panels of `s3 analyze` / `s3 report`, the Search-R1 search-steps plot, `s3 plot`'s step axes and the
timeline. Each plot is drawn as the command draws it and its figure read back before it is closed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tests" / "fixtures" / "committed_runs" / "musique_dev200" / "untrained"  # a real eval run


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The figures the plot functions close, kept open for the test to read (ticks are final once saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kept: list[Any] = []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        fig.clf()


def _whole(ticks: Any) -> bool:
    return len(ticks) > 1 and all(float(t).is_integer() for t in ticks)


def test_the_per_turn_panels_of_analyze_and_report_tick_whole_turns(tmp_path: Path, figures: list[Any]) -> None:
    from eval.analysis import analyze_s3, load_run, plot_s3

    a = analyze_s3(load_run(RUN), n_resamples=20)
    assert plot_s3([a], tmp_path / "behavior.png") is not None
    (fig,) = figures
    for ax in fig.axes[:2]:
        assert ax.get_xlabel() == "turn"
        assert _whole(ax.get_xticks()), ax.get_xticks()


def test_the_search_r1_steps_plot_ticks_whole_steps(tmp_path: Path, figures: list[Any]) -> None:
    from eval.oversearch import R1Analysis

    rate = {"mean": 0.25}
    a = R1Analysis(run=SimpleNamespace(name="r1"), steps=[], hops=None,  # type: ignore[arg-type]
                   summary={"by_searches": [{"searches": n, "over_search": rate, "under_search": rate}
                                            for n in (1, 2, 3)]})
    assert a.plot(tmp_path) is not None
    (fig,) = figures
    assert _whole(fig.axes[0].get_xticks()), fig.axes[0].get_xticks()


def test_training_curves_and_the_timeline_tick_whole_steps(tmp_path: Path, figures: list[Any]) -> None:
    from training.report.plots import plot_run, plot_timeline

    rows = [{"step": s, "reward/mean": 0.1 * s, "losses/policy": 1.0 / s, "search/turns": 1.0 + s % 2,
             "charts/step_seconds": 2.0} for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "timeline.jsonl").write_text("".join(
        json.dumps({"step": s, "staleness": 0, "rollout": [10.0 * s, 10.0 * s + 4], "reward": [10.0 * s + 4,
                    10.0 * s + 6], "update": [10.0 * s + 6, 10.0 * s + 9]}) + "\n" for s in (1, 2, 3)))
    plot_run(tmp_path)
    plot_timeline(tmp_path)
    curves, timeline = figures
    for ax in curves.axes:
        assert _whole(ax.get_xticks()), (ax.get_title(), ax.get_xticks())
    assert _whole(timeline.axes[0].get_yticks()), timeline.axes[0].get_yticks()
