"""`s3 searchers`: the searchers that ship with s3, best measured first: name, kind, where it applies (titled
corpora or any), what it measured, and which one runs by default for a titled and an untitled index.

    s3 searchers                 # the table
    s3 searchers --json          # the same, as JSON
    s3 search --searcher reading-hotpotqa "who ...?"     # run one by name (or --policy NAME; s3 serve / mcp / eval too)
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("searchers", parents=[common], help="the shipped searchers, their measured scores and where each "
                       "applies; the default for a titled and an untitled index", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_searchers)


def _searchers(args: argparse.Namespace, cfg: S3Config) -> int:
    from searcher.policies import best_for, catalog

    cards = catalog()
    defaults = {"titled": best_for(True)[0].name, "untitled": best_for(False)[0].name}
    if args.json:
        print(json.dumps({"searchers": [{"name": c.name, "kind": c.kind, "applies": c.applies, "about": c.about,
                                          "measured": c.measured} for c in cards], "default": defaults}, indent=2))
        return 0
    print(f"{'name':<24} {'kind':<16} {'applies':<8} {'GenAcc':>6} {'vs top-3':>8} {'docs':>5}  measured on")
    for c in cards:
        row = c.measured[0] if c.measured else {}
        gain = row.get("genacc", 0) - row["naive_rag_top3"] if "naive_rag_top3" in row else None
        print(f"{c.name:<24} {c.kind:<16} {c.applies:<8} {row.get('genacc', float('nan')):>6.3f} "
              f"{'' if gain is None else f'{gain:+.3f}':>8} {row.get('documents', float('nan')):>5.2f}  "
              f"{row.get('dataset', '-')}, generator {row.get('generator', '-')}")
    print(f"\ndefault (searcher.default_policy = auto): {defaults['titled']} on a titled index, {defaults['untitled']} "
          "on one without titles.\nRun one by name: s3 search --searcher NAME (or --policy NAME); s3 serve, s3 mcp and "
          "s3 eval --method searcher take it too.")
    for c in cards:
        print(f"\n{c.name}: {c.about}" + (f" [{c.measured[0].get('source')}]" if c.measured else ""))
    return 0
