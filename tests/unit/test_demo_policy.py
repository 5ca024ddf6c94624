"""`s3 demo` shows the shipped trained searcher by default (searcher.default_policy); --untrained and --policy choose otherwise, and a missing
--policy is a clear error (s3/commands/demo.py `demo_policy`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from s3.commands.demo import demo_policy
from s3.config import load_config
from s3core.errors import ConfigError
from searcher.policies import shipped_policy

TRAINED_POLICY = shipped_policy()


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"untrained": False, "policy": None, **kw})


def test_the_committed_trained_searcher_is_the_default_and_untrained_or_policy_choose_otherwise(tmp_path: Path) -> None:
    assert (TRAINED_POLICY / "adapter_config.json").is_file() and (TRAINED_POLICY / "searcher.json").is_file()
    cfg = load_config(None, [])
    assert demo_policy(_args(), cfg) == TRAINED_POLICY
    assert demo_policy(_args(), load_config(None, ["searcher.default_policy=none"])) is None
    assert demo_policy(_args(untrained=True), cfg) is None
    assert demo_policy(_args(policy=tmp_path), cfg) == tmp_path
    with pytest.raises(ConfigError, match=r"--policy .*nope: no such directory"):
        demo_policy(_args(policy=tmp_path / "nope"), cfg)


def test_the_cli_refuses_policy_together_with_untrained(capsys: pytest.CaptureFixture[str]) -> None:
    from s3.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--untrained", "--policy", "x"])
    assert "not allowed with argument" in capsys.readouterr().err
