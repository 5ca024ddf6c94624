"""Shared ground below every package: the record types, the error hierarchy, config plumbing and file helpers. It
imports nothing of ours; everything else may import it (the runtime the layers share, Ray and the offline llama.cpp
models, lives one floor up in `s3runtime`).

- `types`: Document, QAExample, SearchStep, SearchResult, Trajectory (the stable data contracts)
- `errors`: S3Error and its subclasses (third-party errors are mapped onto them where they enter)
- `configbase`: strict pydantic sections, TOML loading, `--set` overrides, presets layered in order
- `io`: jsonl with line numbers, append-and-resume, sha256, atomic writes, an exclusive file lock
- `corpus`: corpus and question files in the DPR / FlashRAG shapes, streamed
"""
