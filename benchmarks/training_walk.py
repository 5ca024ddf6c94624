"""How far the training setup and one training step travel through the code: the project files a call passes
through, in order (docs/architecture.md, "Training, call by call").

    .venv/bin/python benchmarks/training_walk.py [--repo DIR] [--out benchmarks/results/training_walk/after.json]

It runs the start of configs/smoke.toml's training (a 1-step run in a temporary directory) under `sys.setprofile`
and records every call and return that crosses from one project file into another: a *stop* is a call into another
file, a *return* a return into another file, and a *call up* is a call from a lower layer into a higher one (s3core <
s3runtime < searcher | dataprep < generator_adapters < eval < training < s3: a callback or a layer reaching back).
Three walks:

    start   make_trainer(cfg) on a run whose training data is missing: the preparation and the building together
    setup   building from data prepared first and outside the walk: build_training(cfg, prepare_run(cfg)) where the
            checkout has the preparation stage (training/run/build.py's prepare_run), else make_trainer(cfg)
    step    one RL step (`train_step`) of the trainer the setup built

`--repo` runs another checkout (the parent commit, to compare; its config keys as it had them) the same way. The
static walk of the same code (no run: every branch, `farm-studio walk training/run/build.py:build_training:cfg`) is in
benchmarks/results/training_walk/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"s3core": 0, "s3runtime": 1, "searcher": 2, "dataprep": 2, "generator_adapters": 3, "eval": 4, "training": 5,
          "s3": 6}

CHILD = r'''
import json, os, sys, time
from pathlib import Path
repo = Path(sys.argv[1]); out = Path(sys.argv[2]); work = Path(sys.argv[3]); flat = sys.argv[4] == "flat"
from s3.config import load_config
import training.run.build as tb
from training.run.trainer import S3Trainer, make_trainer
# the checkout asked for, not the installed one: `python -c` imports from its working directory first (main runs
# this in --repo)
assert tb.__file__.startswith(str(repo)), (tb.__file__, repo)
keys = ["training.max_questions=8", "training.batch_size=1", "training.group_size=2"] if flat else [
    "training.data.max_questions=8", "training.rollout.batch_size=1", "training.rollout.group_size=2"]
def config(name):
    data = f"training.train_data={work / name / 'data'}" if flat else f"training.data.dir={work / name / 'data'}"
    return load_config(repo / "configs" / "smoke.toml", [*keys, data, f"training.output_dir={work / name / 'run'}",
                       "training.total_steps=1", "searcher.max_new_tokens=16", "searcher.doc_token_budget=24",
                       "training.reward=r1_searcher_stage1"])
quiet = lambda s: None
root = str(repo) + os.sep
LAY = {"s3core": 0, "s3runtime": 1, "searcher": 2, "dataprep": 2, "generator_adapters": 3, "eval": 4, "training": 5, "s3": 6}
def rel(f):
    if not f.startswith(root):
        return None
    r = f[len(root):]
    return r if r.split(os.sep)[0] in LAY and r.endswith(".py") else None
def walk(fn):
    # the project file each frame on the stack is "in": a library frame keeps the project file below it, so a
    # callback a library makes into project code counts as a call from the file that called the library
    stack, events = [], []
    def prof(frame, event, arg):
        if event not in ("call", "return"):
            return
        f = rel(frame.f_code.co_filename)
        if event == "call":
            where = stack[-1] if stack else None
            stack.append(f if f is not None else where)
            if f is not None and where is not None and f != where:
                events.append(("call", where, f, frame.f_code.co_name))
        elif stack:
            me = stack.pop()
            back = stack[-1] if stack else None
            if f is not None and back is not None and me != back:
                events.append(("return", me, back, frame.f_code.co_name))
    sys.setprofile(prof)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, events
def summarize(events):
    calls = [e for e in events if e[0] == "call"]
    rets = [e for e in events if e[0] == "return"]
    up = [e for e in calls if LAY[e[1].split(os.sep)[0]] < LAY[e[2].split(os.sep)[0]]]
    order, seen = [], set()
    for e in calls:
        if e[2] not in seen:
            seen.add(e[2]); order.append(e[2])
    entered = {}
    for e in calls:
        entered[e[2]] = entered.get(e[2], 0) + 1
    return {"stops": len(calls), "files": len(seen), "returns": len(rets), "calls_up": len(up), "order": order,
            "entered": dict(sorted(entered.items(), key=lambda kv: -kv[1])),
            "up": sorted({f"{e[1]} -> {e[2]} ({e[3]})" for e in up})}
t, start = walk(lambda: make_trainer(config("unprepared"), log=quiet))
t.close()
cfg = config("prepared")
if hasattr(tb, "prepare_run"):  # the preparation stage, outside the walk; building from what it left
    prepared = tb.prepare_run(cfg, log=quiet)
    parts, setup = walk(lambda: tb.build_training(cfg, prepared, log=quiet))
    t = S3Trainer(parts, log=quiet)
else:  # before it: the training data prepared outside the walk, make_trainer still checks and loads it
    from training.prep.data import prepare_training, training_dir
    prepare_training(cfg, training_dir(cfg), log=quiet)
    t, setup = walk(lambda: make_trainer(cfg, log=quiet))
_, step = walk(t.train_step)
t.close()
out.write_text(json.dumps({"repo": str(repo), "start": summarize(start), "setup": summarize(setup),
                           "step": summarize(step)}, indent=1))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=ROOT)
    ap.add_argument("--flat", action="store_true", help="the repo's config has the flat [training] keys (before issue 30)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="training_walk.") as work:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", "")] if p)}
        repo = args.repo.resolve()  # the child's working directory: `-c` puts it first on its import path
        subprocess.run([sys.executable, "-c", CHILD, str(repo), str(args.out.resolve()), work,
                        "flat" if args.flat else "nested"], check=True, env=env, cwd=repo)
    res = json.loads(args.out.read_text())
    for part in ("start", "setup", "step"):
        s = res[part]
        print(f"{part}: {s['stops']} stops in {s['files']} files, {s['returns']} returns, {s['calls_up']} calls up; "
              f"entered most: {list(s['entered'].items())[:3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
