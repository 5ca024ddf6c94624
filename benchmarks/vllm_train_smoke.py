"""The smoke training run on the vLLM rollout engine, end to end through the command line, as a user runs it.

    .venv/bin/python benchmarks/vllm_train_smoke.py [--out benchmarks/results/rollout_engines/vllm_train_smoke]

1. `s3 train --config configs/smoke.toml --set training.rollout.engine=vllm` (4 steps, a checkpoint every 2), SIGKILLed
   once its first checkpoint exists, then the same command again: it resumes from that checkpoint.
2. metrics.jsonl: a row per step with reward/ and losses/ keys and the weight-sync time; the resumed steps' questions
   are the ones the data order gives (the order is a pure function of seed and step).
3. `s3 serve --policy RUN_DIR --set searcher.policy=vllm` (the checkpoint in a vLLM engine, on loopback) answers
   POST /search.

Writes OUT.json and OUT.md. Several minutes on 2 cores (three vLLM engine starts of ~40 s each).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "rollout_engines" / "vllm_train_smoke")
    args = ap.parse_args()
    import httpx

    from generator_adapters.testing import wait_until_serving
    from s3core.errors import ServiceError
    from training.rundir import read_metrics

    work = Path(tempfile.mkdtemp(prefix="vllm_train_smoke."))
    run = work / "run"
    train = [sys.executable, "-m", "s3.cli", "train", "--config", str(ROOT / "configs" / "smoke.toml"),
             "--set", "training.rollout.engine=vllm", "--set", f"training.output_dir={run}",
             "--set", f"training.data.dir={work / 'data'}", "--set", "training.total_steps=4",
             "--set", "training.checkpoint.every=2", "--set", "training.data.max_questions=8"]
    record: dict[str, Any] = {"command": " ".join(["s3", *train[3:]]), "work": str(work)}

    t0 = time.perf_counter()
    first = subprocess.Popen(train, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    latest = run / "checkpoints" / "latest"
    while first.poll() is None and not latest.is_file():
        time.sleep(1)
    if first.poll() is not None:
        print(first.stdout.read() if first.stdout else "", file=sys.stderr)
        raise SystemExit("the first training process ended before its first checkpoint")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    record["killed_after"] = latest.read_text().strip()
    record["killed_at_s"] = round(time.perf_counter() - t0, 1)
    second = subprocess.run(train, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=3600)
    if second.returncode != 0:
        print(second.stdout[-3000:], second.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the resumed run failed (exit {second.returncode})")
    log = second.stdout + second.stderr
    record["resumed"] = [line for line in log.splitlines() if "resumed from" in line]
    rows = read_metrics(run)
    record["steps"] = [
        {"step": r["step"], "reward/mean": r.get("reward/mean"), "losses/policy": r.get("losses/policy"),
         "charts/weight_sync_s": r.get("charts/weight_sync_s"), "charts/step_seconds": r.get("charts/step_seconds"),
         "rollout/logprob_gap_mean_abs": r.get("rollout/logprob_gap_mean_abs"), "data/question_ids": r.get("data/question_ids")}
        for r in rows
    ]
    ok_rows = all("reward/mean" in r and "losses/policy" in r and r.get("charts/weight_sync_s") for r in rows)
    record["metrics_ok"] = ok_rows and [r["step"] for r in rows] == [1, 2, 3, 4]

    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "s3.cli", "serve", "--policy", str(run), "--set", "searcher.policy=vllm",
         "--port", str(port)],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        try:
            wait_until_serving(f"http://127.0.0.1:{port}/health", serve, 600, interval_s=2)
        except ServiceError as e:
            raise SystemExit(f"s3 serve: {e}: {serve.stdout.read() if serve.stdout else ''}") from None
        question = json.loads((work / "data" / "train.jsonl").read_text().splitlines()[0])["question"]
        resp = httpx.post(f"http://127.0.0.1:{port}/search", json={"question": question}, timeout=600)
        body = resp.json()
        traj = body.get("trajectory") or {}
        record["serve"] = {"status": resp.status_code, "question": question,
                           "documents": [d.get("title") for d in body.get("documents", [])],
                           "turns": traj.get("turns"), "queries": traj.get("queries")}
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
    record["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    md = [f"`{record['command']}` (killed after {record['killed_after']}, then the same command again)", "",
          f"- resumed: {record['resumed']}", f"- metrics rows ok (reward/, losses/, weight sync, steps 1-4): {record['metrics_ok']}",
          "", "| step | reward | policy loss | sync s | step s | vLLM-learner log-prob gap |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in record["steps"]:
        md.append(f"| {r['step']} | {r['reward/mean']:.3f} | {r['losses/policy']:.4f} | {r['charts/weight_sync_s']:.2f} | "
                  f"{r['charts/step_seconds']:.1f} | {r['rollout/logprob_gap_mean_abs']:.2e} |")
    s = record["serve"]
    md += ["", f"`s3 serve --policy RUN_DIR --set searcher.policy=vllm`: POST /search -> {s['status']}, "
               f"{s['turns']} search turns (queries {s['queries']}), documents {s['documents']}"]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if record["metrics_ok"] and s["status"] == 200 else 1


if __name__ == "__main__":
    raise SystemExit(main())
