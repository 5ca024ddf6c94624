"""The shared runtime: what evaluation, the searcher, the generator adapters and training all run on, above s3core's
plain shared types and below every layer that uses it.

- `config`: [ray], the Ray cluster's settings (learners, learner GPUs, rollout / reward / evaluation workers)
- `raycluster`: the Ray plumbing both Ray backends share: connect (a local cluster on 127.0.0.1), WorkerPool
  (restartable actors in a placement group)
- `local_models`: offline GGUF models shipped in PyPI data wheels: locate, join, sha256-check
- `llm_local`: the in-process litellm provider `local/<model>` over llama-cpp-python (and llama.cpp's server)

It imports only s3core of ours; Ray and llama.cpp themselves are imported where they are used, never at import time.
"""
