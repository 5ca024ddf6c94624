"""Trained searchers that ship with s3, as package data: one folder per policy (a LoRA adapter, its searcher.json and
a README saying how it was trained and what it gains).

    from searcher.policies import DEFAULT, shipped_policy

    shipped_policy()            # the folder of the default trained searcher (searcher.default_policy)

`smollm2-135m-hotpotqa`: the third transfer attempt's searcher (docs/transfer.md, "Attempt 3"), a 9.8 MB LoRA adapter
on the offline SmolLM2-135M; +0.040 [+0.018, +0.064] GenAcc over naive RAG top-3 on hotpotqa_dev500.

Beside the policies, the title-following script's rankers (searcher.ranker; searcher/links.py): `links-hotpotqa.json`
(no model) and `links-reader-hotpotqa.json`, which reads with the pointwise reader in `reader-smollm2-135m-hotpotqa/`
(a LoRA adapter without a searcher.json: a reader, not a policy; searcher/reader.py).
"""

from __future__ import annotations

from pathlib import Path

from s3core.errors import ConfigError

__all__ = ["DEFAULT", "HOME", "names", "shipped_policy"]

HOME = Path(__file__).resolve().parent
DEFAULT = "smollm2-135m-hotpotqa"


def names() -> list[str]:
    """The shipped policies (folders with an adapter or a model and a searcher.json)."""
    return sorted(p.name for p in HOME.iterdir() if p.is_dir() and (p / "searcher.json").is_file())


def shipped_policy(name: str = DEFAULT) -> Path:
    """The folder of the shipped policy `name`, or a clear error listing those that ship."""
    folder = HOME / name
    if name in names():
        return folder
    raise ConfigError(f"searcher.default_policy = {name!r}: no such shipped policy (shipped: {', '.join(names()) or 'none'}; "
                      "none = the untrained searcher)")
