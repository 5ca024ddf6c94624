"""The README's code blocks run as written (issue 46): an example that drifts from the code fails here.

Every ```bash and ```python block of README.md runs, in README order, in one scratch checkout (the repository's
.venv, configs/ and config.toml linked in; ../shared beside it, as in a real checkout), except a block whose first
line is `# not run in CI: <why>` (training for minutes, a GPU, a sketch of options): those are counted, and the
reason must be given. What the test changes, and only this:
  - the fixed ports the README uses (8000 s3 serve, 8765 s3 mcp, 8011 the priced fake API) become free ports, so
    parallel test runs do not collide;
  - a python block that talks to a server it does not start (the MCP client) gets that server started on loopback
    over the README's own index (indexes/mine, the cpu preset), with a bearer token when the block reads
    S3_SERVICE_TOKEN;
  - python blocks may use top-level `await` (compiled with PyCF_ALLOW_TOP_LEVEL_AWAIT), as in a notebook or
    `python -m asyncio`.
A bash block runs with `bash -e -o pipefail` in its own process group (whatever it left running is stopped after
it); a block fails the test on a nonzero exit status, and its output is shown.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARK = "# not run in CI:"
PORTS = ("8000", "8765", "8011")  # s3 serve, s3 mcp, the priced fake API
BLOCK_TIMEOUT_S = 600


@dataclass
class Block:
    lang: str
    code: str
    line: int  # of the opening fence, 1-based
    skip: str | None  # the reason after MARK, when marked


def readme_blocks(text: str) -> list[Block]:
    """The ```bash / ```python blocks at the top level of the document (an indented fence is an example output)."""
    out = []
    for m in re.finditer(r"^```(\w+)[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S):
        lang, code = m.group(1), m.group(2)
        if lang not in ("bash", "python"):
            continue
        first = code.lstrip().splitlines()[0] if code.strip() else ""
        skip = first[len(MARK):].strip() if first.startswith(MARK) else None
        out.append(Block(lang, code, text.count("\n", 0, m.start()) + 1, skip))
    return out


def test_blocks_are_found_and_every_skip_says_why() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 10
    assert all(b.skip for b in blocks if b.skip is not None), [b.line for b in blocks if b.skip == ""]
    assert any(b.skip is None and b.lang == "python" for b in blocks)
    assert any(b.skip is None and "s3 serve" in b.code for b in blocks)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _checkout(root: Path) -> Path:
    """A scratch checkout: what a fresh clone has that the blocks use, with ../shared beside it."""
    co = root / "checkout"
    co.mkdir()
    for name in (".venv", "configs", "config.toml", "scripts", "benchmarks"):
        (co / name).symlink_to(REPO / name)
    if (REPO.parent / "shared").is_dir():
        (root / "shared").symlink_to(REPO.parent / "shared")
    return co


def _wait_port(port: int, proc: subprocess.Popen[str], timeout_s: float = 120.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise AssertionError(f"the server for the block exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"no server on 127.0.0.1:{port} after {timeout_s:.0f} s")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


_PY_RUNNER = """
import ast, asyncio, inspect, sys
src = open(sys.argv[1], encoding="utf-8").read()
code = compile(src, "README block", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if inspect.iscoroutine(result):
    asyncio.run(result)
"""


def run_block(block: Block, co: Path, ports: dict[str, int], env: dict[str, str], logs: Path) -> tuple[int, str]:
    """Run one block in the checkout; (exit status, its output)."""
    code = re.sub(r"\b(" + "|".join(PORTS) + r")\b", lambda m: str(ports[m.group(1)]), block.code)
    server: subprocess.Popen[str] | None = None
    log = logs / f"block_{block.line}.log"
    try:
        if block.lang == "python":
            mcp_port = ports["8765"]
            if f":{mcp_port}/mcp" in code and "s3 mcp" not in code:
                cmd = [str(co / ".venv/bin/s3"), "mcp", "--config", "cpu", "--index", "indexes/mine", "--transport",
                       "http", "--port", str(mcp_port)]
                if "S3_SERVICE_TOKEN" in code:
                    cmd += ["--set", "service.auth_token_env=S3_SERVICE_TOKEN"]
                server = subprocess.Popen(cmd, cwd=co, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          text=True, start_new_session=True)
                _wait_port(mcp_port, server)
            script = logs / f"block_{block.line}.py"
            script.write_text(code, encoding="utf-8")
            runner = logs / "runner.py"
            runner.write_text(_PY_RUNNER, encoding="utf-8")
            cmd = [str(co / ".venv/bin/python"), str(runner), str(script)]
        else:
            cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
        with log.open("w") as fh:
            proc = subprocess.Popen(cmd, cwd=co, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=BLOCK_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                rc = 124
            finally:
                _stop(proc)  # the block's own background servers go with its process group
        return rc, log.read_text(errors="replace")
    finally:
        if server is not None:
            _stop(server)


def test_readme_blocks_run(tmp_path: Path) -> None:
    if not (REPO / ".venv" / "bin" / "s3").is_file():
        pytest.skip("no .venv (bash scripts/setup.sh makes it)")
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    co = _checkout(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    ports = dict(zip(PORTS, _free_ports(len(PORTS)), strict=True))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "S3_SERVICE_TOKEN": "readme-test-" + os.urandom(8).hex(), "PYTHONUNBUFFERED": "1"}
    env.pop("COLUMNS", None)
    ran, skipped, timings = [], [], []
    for b in blocks:
        if b.skip is not None:
            skipped.append(f"README.md:{b.line} ({b.lang}): {b.skip}")
            continue
        t0 = time.monotonic()
        rc, output = run_block(b, co, ports, env, logs)
        timings.append(f"README.md:{b.line} ({b.lang}) {time.monotonic() - t0:.1f}s")
        assert rc == 0, f"README.md:{b.line} ({b.lang} block) exited {rc}:\n{output[-4000:]}"
        ran.append(b.line)
    print(f"\nREADME blocks: {len(ran)} ran, {len(skipped)} not run in CI")
    print("\n".join(timings))
    print("\n".join(skipped))
    assert len(ran) >= 5
