"""s3runtime.local_models: part ordering, atomic join, sha256 refusal, clear errors for missing wheels.

The data wheels are replaced by small temporary part files (the registry and the join logic are ours); the real
wheels are exercised by tests/integration/test_local_llm.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from s3runtime import local_models as lm


def _fake_model(tmp_path: Path, parts: list[bytes], names: list[str] | None = None, sha: str | None = None):
    blob = b"".join(parts)
    names = names or [f"part{i + 1:02d}.bin" for i in range(len(parts))]
    files = []
    for name, data in zip(names, parts, strict=True):
        p = tmp_path / "site" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        files.append(p)
    model = lm.LocalModel(
        name="fake-model",
        filename="fake.gguf",
        packages=tuple(f"fake-part{i + 1}" for i in range(len(parts))),
        size=len(blob),
        sha256=sha or hashlib.sha256(blob).hexdigest(),
        extra="local",
        hf_repo="x/y",
        quantization="Q4",
        description="test",
    )
    return model, files, blob


@pytest.fixture
def registry(monkeypatch, tmp_path):
    monkeypatch.setenv("S3_MODEL_DIR", str(tmp_path / "models"))

    def install(model, files):
        by_pkg = dict(zip(model.packages, files, strict=True))
        monkeypatch.setitem(lm.MODELS, model.name, model)
        monkeypatch.setattr(lm, "_distribution_files", lambda pkg, m: [by_pkg[pkg]])

    return install


def test_registry_names_and_pins() -> None:
    assert set(lm.MODELS) == {"smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"}
    q = lm.MODELS["qwen2.5-coder-0.5b-instruct"]
    assert q.size == 491_400_064 and q.sha256.startswith("1d9614638d18") and len(q.packages) == 6
    assert len(lm.MODELS["qwen2.5-coder-1.5b-instruct"].packages) == 22
    assert all(len(m.sha256) == 64 for m in lm.MODELS.values())
    assert lm.resolve_name("SmolLM2").name == "smollm2-135m-instruct"
    with pytest.raises(lm.S3Error, match="unknown local model"):
        lm.resolve_name("llama-70b")


def test_join_in_numeric_order_not_lexical(registry, tmp_path) -> None:
    # 11 parts: lexical order would put part10/part11 before part2
    parts = [bytes([i]) * (i + 3) for i in range(11)]
    model, files, blob = _fake_model(tmp_path, parts, names=[f"p{i + 1}/part{i + 1}.bin" for i in range(11)])
    registry(model, files[::-1])  # packages list their parts scrambled: the join must sort by number
    path = lm.gguf_path("fake-model")
    assert path.read_bytes() == blob
    assert path.parent == tmp_path / "models"
    assert not list(path.parent.glob("*.part"))  # no temporary left behind
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_second_call_does_not_rehash(registry, tmp_path, monkeypatch) -> None:
    model, files, _ = _fake_model(tmp_path, [b"a" * 10, b"b" * 5])
    registry(model, files)
    first = lm.gguf_path("fake-model")
    monkeypatch.setattr(lm, "file_sha256", lambda p: pytest.fail("re-hashed a verified file"))
    assert lm.gguf_path("fake-model") == first


def test_wrong_sha_is_refused_and_nothing_is_left(registry, tmp_path) -> None:
    model, files, _ = _fake_model(tmp_path, [b"a" * 10, b"b" * 5], sha="0" * 64)
    registry(model, files)
    with pytest.raises(lm.ModelIntegrityError, match="refusing"):
        lm.gguf_path("fake-model")
    assert not (tmp_path / "models" / "fake.gguf").exists()
    assert not list((tmp_path / "models").glob(".fake.gguf.*.part"))


def test_corrupted_cached_file_is_rebuilt(registry, tmp_path) -> None:
    model, files, blob = _fake_model(tmp_path, [b"a" * 10, b"b" * 5])
    registry(model, files)
    path = lm.gguf_path("fake-model")
    path.write_bytes(b"x" * len(blob))  # same size, different bytes: the marker no longer matches (mtime)
    assert lm.gguf_path("fake-model", verify=True).read_bytes() == blob


def test_size_mismatch_is_refused(registry, tmp_path) -> None:
    model, files, _ = _fake_model(tmp_path, [b"a" * 10, b"b" * 5])
    registry(model.__class__(**{**model.__dict__, "size": 99}), files)
    with pytest.raises(lm.ModelIntegrityError, match="15 bytes, expected 99"):
        lm.gguf_path("fake-model")


def test_missing_part_number_is_refused(registry, tmp_path) -> None:
    model, files, _ = _fake_model(tmp_path, [b"a", b"b"], names=["part01.bin", "part03.bin"])
    registry(model, files)
    with pytest.raises(lm.ModelIntegrityError, match=r"expected parts 1..2"):
        lm.gguf_path("fake-model")


def test_missing_wheel_names_the_extra(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("S3_MODEL_DIR", str(tmp_path))
    model = lm.LocalModel(
        name="fake-missing", filename="f.gguf", packages=("s3-no-such-dist-abc",), size=1, sha256="0" * 64,
        extra="qwen15", hf_repo="x", quantization="q", description="d",
    )
    monkeypatch.setitem(lm.MODELS, model.name, model)
    with pytest.raises(lm.ModelNotInstalledError, match=r"pip install -e '\.\[qwen15\]'"):
        lm.gguf_path("fake-missing")
    assert lm.is_installed("fake-missing") is False
    row = next(r for r in lm.list_models() if r["name"] == "fake-missing")
    assert row["installed"] is False and row["litellm_model"] == "local/fake-missing"


def test_model_fingerprint() -> None:
    fp = lm.model_fingerprint("local/qwen2.5-coder-0.5b-instruct")
    assert fp["gguf_sha256"] == lm.MODELS["qwen2.5-coder-0.5b-instruct"].sha256
    served = lm.model_fingerprint("openai/smollm2-135m-instruct", "http://127.0.0.1:8080/v1")
    assert served["gguf_sha256"] == lm.MODELS["smollm2-135m-instruct"].sha256
    assert "gguf_sha256" not in lm.model_fingerprint("openai/smollm2-135m-instruct", "https://api.openai.com/v1")
    assert lm.model_fingerprint("anthropic/claude-3-haiku-20240307") == {
        "model": "anthropic/claude-3-haiku-20240307", "api_base": None}


def test_cli_models_list_and_errors(capsys) -> None:
    import json

    from s3.cli import main

    assert main(["models", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["litellm_model"] for r in rows} == {f"local/{n}" for n in lm.MODELS}
    assert main(["models", "fetch"]) == 2
    assert "needs a model name" in capsys.readouterr().err
    assert main(["models", "fetch", "no-such-model"]) == 2
    assert "unknown local model" in capsys.readouterr().err
