"""Peak memory of one learner update of a real model, all its layers (issue 80): experiments/learner_memory.py.

    .venv/bin/python benchmarks/learner_memory.py --model smollm2-135m-instruct --tokens 1024,2048,4096 \
        [--mode full,lora] [--micro-batch 1,4] [--grad-ckpt on,off,auto] [--attn eager,sdpa,auto] [--budget 4096,none] \
        [--repo /tmp/s3-before --label before] [--append] [--out benchmarks/results/learner_memory]

A flag not given leaves the configuration's default in force (config.toml, as `s3 train` runs). Every row runs in a
fresh process under --lock; DIR/results.json gets a `rows` list ({"tokens", "mode", "peak_gb", ...the settings the
row ran with}), DIR/README.md the table, DIR/peak_gb.png the curves. --append keeps the rows already in results.json
(a row measured again replaces its old one); --report-only re-renders them (estimates recomputed) without measuring.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

from experiments.learner_memory import (
    GB,
    add_estimates,
    expand,
    fit_report,
    plot,
    readme,
    run_row,
)

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="training.base_model of every row")
    ap.add_argument("--tokens", default="1024,2048,4096", help="tokens a sequence (comma-separated)")
    ap.add_argument("--mode", default=None, help="full,lora (default: training.learner.lora)")
    ap.add_argument("--micro-batch", default=None, help="sequences in the update = training.learner.micro_batch_size "
                    "(default: the configuration's)")
    ap.add_argument("--grad-ckpt", default=None, help="on,off,auto (default: training.learner.gradient_checkpointing)")
    ap.add_argument("--attn", default=None, help="eager,sdpa,auto (default: training.learner.attn_implementation)")
    ap.add_argument("--budget", default=None, help="training.learner.max_tokens_per_micro_batch: N,none")
    ap.add_argument("--env", default=None, help="KEY=VALUE set in each row's process (e.g. MALLOC_MMAP_THRESHOLD_=131072)")
    ap.add_argument("--set", dest="extra", default=None, help="one more --set line for every row (KEY=VALUE)")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose code and config.toml run")
    ap.add_argument("--label", default=None, help="the rows' code label (default: 'after', or 'before' with --repo)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "learner_memory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cap-gb", type=float, default=16.0, help="a row above this RSS is killed (its estimate: skipped)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds a row may run")
    ap.add_argument("--lock", type=Path, default=Path("/tmp/s3cpu.lock"), help="flock file ('none': no lock)")
    ap.add_argument("--append", action="store_true", help="keep the rows already in DIR/results.json")
    ap.add_argument("--report-only", action="store_true", help="re-render DIR/results.json, measure nothing")
    ap.add_argument("--skip-done", action="store_true", help="with --append: rows measured (or skipped) already in "
                    "DIR/results.json are not measured again (a killed run resumes)")
    args = ap.parse_args()

    from training.learn.memory import ModelShape

    shape = ModelShape.of_model(args.model)
    path = args.out / "results.json"
    old = json.loads(path.read_text()) if (args.append or args.report_only) and path.is_file() else {"rows": []}
    rows = list(old["rows"])
    label = args.label or ("after" if args.repo.resolve() == ROOT else "before")
    if not args.report_only:
        specs = expand(args.tokens, args.mode, args.micro_batch, args.grad_ckpt, args.attn, args.budget, label,
                       args.env, args.extra)
        lock = None if str(args.lock) == "none" else args.lock
        for i, spec in enumerate(specs, 1):
            if args.skip_done and path.is_file() and spec.done(json.loads(path.read_text())["rows"]):
                print(f"[{i}/{len(specs)}] measured already: {spec}", flush=True)
                continue
            row = run_row(spec, model=args.model, repo=args.repo.resolve(), threads=args.threads,
                          cap_bytes=args.cap_gb * GB, timeout_s=args.timeout, lock=lock, shape=shape)
            print(f"[{i}/{len(specs)}] {json.dumps({k: v for k, v in row.items() if k != 'ran_with'})}", flush=True)
            with _locked(path):  # another invocation may have written rows since: merged, not overwritten
                if args.append and path.is_file():
                    old = json.loads(path.read_text())
                    rows = list(old["rows"])
                rows = [r for r in rows if not (r["label"] == row["label"] and r["tokens"] == row["tokens"]
                                                and r.get("given") == row["given"])] + [row]
                _write(args, old, rows, shape)  # after every row: a killed run keeps what it measured
    with _locked(path):
        if (args.append or args.report_only) and path.is_file():
            old = json.loads(path.read_text())
            rows = list(old["rows"])
        _write(args, old, rows, shape)
    return 0


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on results.json (a file in the temporary folder) while it is read, merged and written."""
    import fcntl
    import hashlib
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"learner_memory-{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _write(args: argparse.Namespace, old: dict, rows: list[dict], shape: object) -> None:
    add_estimates(rows, shape)
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    argv = list(sys.argv[1:])
    if "--repo" in argv[:-1]:  # another checkout's path is this machine's: the results name it BEFORE
        argv[argv.index("--repo") + 1] = "BEFORE"
    command = " ".join([".venv/bin/python benchmarks/learner_memory.py", *argv])
    commands = [*old.get("commands", []), *([] if args.report_only or command in old.get("commands", []) else [command])]
    old["commands"] = commands
    result = {"model": args.model, "commands": commands,
              "machine": f"{os.cpu_count()} CPUs, {mem / GB:.0f} GB RAM, {platform.machine()}",
              "estimate_fit": fit_report(rows), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    notes = args.out / "notes.md"  # the hand-written reading of the table (what grows, and why), kept on top
    (args.out / "README.md").write_text(readme(result, notes.read_text() if notes.is_file() else None))
    if any("peak_gb" in r for r in rows):
        plot(result, args.out / "peak_gb.png")


if __name__ == "__main__":
    raise SystemExit(main())
