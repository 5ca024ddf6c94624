"""Every `s3` command with wrong paths, wrong types and garbage arguments: one clear line and a non-zero exit, never
a Python traceback (issue 18 defects 6 and 7). Commands run in process (s3.cli.main), except the servers, which run
as bounded subprocesses so that a case that wrongly started serving could not hang the test.

Every leaf command of the parser gets the generic cases (unknown flag, non-integer for each int option, a missing
--config, garbage --set), so a command added later is covered without editing this file; the table below adds the
handler-level cases (missing files, a file where a directory belongs, a directory under a file, a broken index, ...).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3.cli import build_parser, main

pytestmark = pytest.mark.integration

TRACEBACK = "Traceback (most recent call last)"
REPO = Path(__file__).resolve().parents[2]
CHEAP_POLICY = ["--set", "searcher.model=openai/fake", "--set", "searcher.api_base=http://127.0.0.1:9/v1",
                "--set", "searcher.max_retries=0"]
CHEAP_GENERATOR = ["--set", "generator.model=openai/fake", "--set", "generator.api_base=http://127.0.0.1:9/v1",
                   "--set", "generator.max_retries=0", "--set", "generator.cache_path=none", "--set",
                   "eval.use_judge=false"]


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for action in subs:
        for name, sub in action.choices.items():
            yield from leaf_commands(sub, (*prefix, name))


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A workspace of wrong things: a file, an empty dir, garbage jsonl, an index, a broken index, a dataset."""
    from searcher.retrieval import build_index

    d = tmp_path_factory.mktemp("cli")
    (d / "afile").write_text("not a directory\n")
    (d / "emptydir").mkdir()
    (d / "garbage.jsonl").write_text("{not json\n[1, 2\n")
    (d / "garbage.toml").write_text("[searcher\nk = = 3\n")
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"c{i}", "contents": f'"Title {i}"\nsome text about {i}'}) + "\n"
                              for i in range(20)))
    index = build_index(corpus, "bm25", d / "idx")
    broken = d / "broken_idx"
    shutil.copytree(index, broken)
    for f in (broken / "bm25").iterdir():
        f.unlink()  # an index whose bm25 files were deleted
    ds = d / "ds"
    ds.mkdir()
    qs = [{"id": f"q{i}", "question": f"question {i}?", "golden_answers": ["x"],
           "metadata": {"supporting_ids": [f"other-corpus-{i}"]}} for i in range(3)]
    (ds / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    (ds / "corpus.jsonl").write_text("".join(json.dumps({"id": f"other-corpus-{i}", "contents": f'"T"\nx {i}'}) + "\n"
                                             for i in range(3)))
    (d / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    return {k: str(v) for k, v in {"d": d, "afile": d / "afile", "emptydir": d / "emptydir",
                                   "garbage": d / "garbage.jsonl", "garbage_toml": d / "garbage.toml",
                                   "corpus": corpus, "index": index, "broken": broken, "ds": ds,
                                   "questions": d / "questions.jsonl", "missing": d / "no" / "such" / "thing"}.items()}


def handler_cases(w: dict[str, str]) -> list[list[str]]:
    a, e, g, m, idx, broken, ds = w["afile"], w["emptydir"], w["garbage"], w["missing"], w["index"], w["broken"], w["ds"]
    under = f"{a}/sub"  # a directory under a file
    return [
        ["config", "show", "--set", "searcher.k=-1"],
        ["config", "no-such-action"],
        ["data", "prepare", "hotpotqa", "--input", m, "--out", f"{w['d']}/p1"],
        ["data", "prepare", "hotpotqa", "--input", g, "--out", f"{w['d']}/p2"],
        ["data", "prepare", "hotpotqa", "--input", w["corpus"], "--out", f"{w['d']}/p3"],  # not HotpotQA (defect 7)
        ["data", "prepare", "hotpotqa", "--input", w["questions"], "--out", under],
        ["data", "prepare", "no-such-format", "--input", w["corpus"], "--out", f"{w['d']}/p4"],
        ["data", "show", m], ["data", "show", a], ["data", "show", e],
        ["index", "build", "--corpus", m, "--out", f"{w['d']}/i1"],
        ["index", "build", "--corpus", g, "--out", f"{w['d']}/i2"],
        ["index", "build", "--corpus", w["corpus"], "--out", under],  # defect 6
        ["index", "build", "--corpus", w["corpus"], "--out", f"{w['d']}/i3", "--backend", "no-such-backend"],
        ["index", "info", "--index", m], ["index", "info", "--index", a], ["index", "info", "--index", e],
        ["retrieve", "--index", broken, "some query"],  # defect 6
        ["retrieve", "--index", e, "some query"], ["retrieve", "--index", a, "some query"],
        ["retrieve", "--index", idx, "--questions", m], ["retrieve", "--index", idx, "--questions", g],
        ["retrieve", "--index", idx, "--k", "-3", "some query"], ["retrieve", "--index", idx, "--k", "0", "q"],
        ["retrieve", "--index", idx, "--questions", w["questions"], "--out", f"{under}/r.jsonl"],
        ["search", "--index", broken, "a question", *CHEAP_POLICY],
        ["search", "--index", idx, "--questions", m, *CHEAP_POLICY],
        ["search", "--index", idx, "--questions", g, *CHEAP_POLICY],
        ["search", "--index", idx, "--limit", "-2", "--questions", w["questions"], *CHEAP_POLICY],
        ["search", "--index", idx, "--questions", w["questions"], "--out", f"{under}/c.jsonl", *CHEAP_POLICY],
        ["search", "--index", idx, "--policy", m, "q", *CHEAP_POLICY],
        ["eval", "--dataset", m, "--method", "no_retrieval", "--out", f"{w['d']}/e1"],
        ["eval", "--dataset", a, "--method", "no_retrieval", "--out", f"{w['d']}/e2"],
        ["eval", "--dataset", ds, "--method", "no_retrieval", "--out", a, *CHEAP_GENERATOR],  # defect 6
        ["eval", "--dataset", ds, "--method", "no_retrieval", "--out", under, *CHEAP_GENERATOR],
        ["eval", "--dataset", ds, "--method", "no-such-method", "--out", f"{w['d']}/e3"],
        ["eval", "--dataset", ds, "--method", "naive_rag", "--index", broken, "--out", f"{w['d']}/e4",
         *CHEAP_GENERATOR],
        ["eval", "--dataset", ds, "--method", "searcher", "--contexts", g, "--out", f"{w['d']}/e5", *CHEAP_GENERATOR],
        ["eval", "--dataset", ds, "--method", "no_retrieval", "--limit", "0", "--out", f"{w['d']}/e6"],
        ["leaderboard", m, "--out", f"{w['d']}/l1"], ["leaderboard", a, "--out", f"{w['d']}/l2"],
        ["leaderboard", e, "--out", under],
        ["prepare-training", "--out", under],
        ["train", "--max-steps", "x"],
        ["plot", m], ["plot", a], ["plot", e],
        ["export-policy", m, "--out", f"{w['d']}/x1"], ["export-policy", a, "--out", f"{w['d']}/x2"],
        ["train-eval", "--policy", m, "--limit", "x"],
        ["demo", "--limit", "-1"], ["demo", "--min-turns", "x"], ["demo", "--out", under, "--cache", under],
        ["models", "no-such-action"], ["models", "fetch", "no-such-model"], ["models", "list", "--port", "x"],
        ["--set", "searcher.k=abc", "config", "show"],
    ]


def generic_cases(leaves: list[tuple[tuple[str, ...], argparse.ArgumentParser]], w: dict[str, str]) -> list[list[str]]:
    """Cases that fail before any handler runs, for every leaf command (new commands included)."""
    out: list[list[str]] = []
    for path, parser in leaves:
        cmd = list(path)
        out.append([*cmd, "--no-such-flag"])
        out.append([*cmd, "--config", w["missing"]])
        out.append([*cmd, "--config", w["garbage_toml"]])
        out.append([*cmd, "--set", "garbage-without-equals"])
        out.append([*cmd, "--set", "searcher.max_turns=lots"])
        out.append([*cmd, "--set", "no_such_section.key=1"])
        for action in parser._actions:
            if action.type is int and action.option_strings:
                out.append([*cmd, action.option_strings[0], "not-an-int"])
    return out


SERVERS = ("serve", "serve-retriever", "serve-generator")


def run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse: usage line and exit 2
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException:
        captured = capsys.readouterr()
        return -1, captured.out + captured.err + traceback.format_exc()
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def run_subprocess(argv: list[str], cwd: str) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "s3.cli", *argv], cwd=cwd, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    return r.returncode, r.stdout + r.stderr


def test_every_command_fails_cleanly_on_wrong_input(w: dict[str, str], capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(w["d"])  # no ./config.toml here: the defaults, and nothing written into the repo
    leaves = list(leaf_commands(build_parser()))
    assert len(leaves) >= 19
    cases = handler_cases(w) + generic_cases(leaves, w)
    failures: list[str] = []
    for argv in cases:
        if argv[0] in SERVERS:
            continue  # below, as bounded subprocesses
        rc, output = run_in_process(argv, capsys)
        if rc == -1 or TRACEBACK in output:
            failures.append(f"s3 {' '.join(argv)}\n{output[-1500:]}")
        elif rc == 0 and argv[:2] != ["config", "show"]:
            failures.append(f"s3 {' '.join(argv)}: exit 0 on wrong input\n{output[-500:]}")
        elif rc not in (0, 1, 2):
            failures.append(f"s3 {' '.join(argv)}: exit {rc}")
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n\n" + "\n\n".join(failures)


def test_the_servers_fail_cleanly_before_serving(w: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        cases = [
            ["serve-retriever", "--index", w["index"], "--port", "99999"],  # defect 6
            ["serve-retriever", "--index", w["index"], "--port", port],  # in use (defect 6: was "serving" then 3)
            ["serve-retriever", "--index", w["broken"], "--port", "0"],
            ["serve-retriever", "--index", w["missing"], "--port", "0"],
            ["serve-retriever", "--index", w["index"], "--host", "256.1.1.1", "--port", "0"],
            ["serve", "--index", w["index"], "--port", "-1", *CHEAP_POLICY],
            ["serve", "--index", w["index"], "--port", port, *CHEAP_POLICY],
            ["serve", "--index", w["broken"], "--port", "0", *CHEAP_POLICY],
            ["serve", "--index", w["index"], "--policy", w["missing"], "--port", "0", *CHEAP_POLICY],
            ["serve", "--index", w["index"], "--port", "0", "--set", "service.auth_token_env=S3_NOT_SET_ANYWHERE",
             *CHEAP_POLICY],
        ]
        failures = []
        for argv in cases:
            rc, output = run_subprocess(argv, w["d"])
            if rc == 0 or TRACEBACK in output or "serving" in output.lower() or "http://" in output:
                failures.append(f"s3 {' '.join(argv)} -> {rc}\n{output[-1500:]}")
            elif not output.strip().splitlines()[-1].startswith("error:"):
                failures.append(f"s3 {' '.join(argv)} -> {rc}: no one-line error\n{output[-500:]}")
    assert not failures, "\n\n".join(failures)
