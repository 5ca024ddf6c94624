"""`s3 doctor`: run every GPU path of s3 on this machine, each step PASS / FAIL / SKIP, with its memory (s3/doctor.py).

    s3 doctor --device cuda --out gpu-check     # what scripts/gpu_check.sh runs on a new GPU machine (~5 minutes)
    s3 doctor --device cpu --quick              # the same steps on the CPU, smaller
    s3 doctor --only '^shape_' --shape 3b,7b    # the 3B recipe's rollout tokens/s and update at Qwen2.5-3B / 7B shape
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="check every GPU path here (training, engines, retriever)",
                       description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where the steps run (auto: cuda if seen)")
    p.add_argument("--quick", action="store_true", help="smaller model and rollouts (CI's form on the CPU)")
    p.add_argument("--only", default=None, metavar="REGEX", help="run only the steps whose name matches")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per-step limit (seconds)")
    p.add_argument("--out", default="s3-doctor", help="folder for summary.json / summary.md, logs/ and work/")
    p.add_argument("--keep-work", action="store_true",
                   help="keep OUT/work (the steps' models, runs and indexes, a few hundred MB; removed by default)")
    p.add_argument("--shape", default=None, metavar="SHAPES",
                   help="model shapes of the shape step, comma-separated: 3b, 7b (GPU), small (the same architecture, "
                        "2 layers: the CPU form), or none; default 3b on a GPU, small on the CPU")
    p.add_argument("--force-shape", action="store_true", help="run a 3b / 7b shape on the CPU anyway (refused otherwise)")
    p.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3.doctor import run_doctor

    out = Path(args.out)
    results = run_doctor(out, device=args.device, quick=args.quick, only=args.only, timeout_s=args.timeout_s,
                         keep_work=args.keep_work, shapes=args.shape, force_shape=args.force_shape)
    print((out / "summary.md").read_text())
    kept = f"; the steps' files kept in {out / 'work'}" if args.keep_work else ""
    print(f"summary: {out / 'summary.md'} (and summary.json); step logs in {out / 'logs'}{kept}")
    return 1 if any(r.status == "FAIL" for r in results) else 0
