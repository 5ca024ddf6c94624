"""Keys: where they come from, where they may go, and the one redaction step for every error text.

Rules (README, "Keys and endpoints"):

- A key comes only from the environment variable its own endpoint names (`generator.api_key_env`,
  `judge.api_key_env`, `searcher.api_key_env`, `retriever.remote.auth_token_env`, `service.auth_token_env`). Nothing
  is picked up implicitly: without a named variable an LLM endpoint gets the placeholder `NO_KEY`, so litellm / the
  OpenAI SDK never fall back to OPENAI_API_KEY (or any other provider variable) and send it to whatever `api_base`
  says. `local/` models get no key at all; providers that sign with a cloud credential chain (AWS, GCP) get none
  from us either.
- A key is sent only with its own endpoint's calls (`api_base` and key travel together in one call; the HTTP clients
  attach a bearer token only to requests whose origin, compared after parsing, is their own base URL).
- Every error text that is stored (results.jsonl), logged or relayed (HTTP error bodies) goes through `redact`:
  known key values, `Bearer ...` / `Basic ...`, `sk-...`-shaped tokens and `api_key=...`-style pairs are replaced.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
from collections.abc import Generator, Iterable
from urllib.parse import urlsplit

import httpx

from s3core.errors import ConfigError

__all__ = [
    "NO_KEY",
    "REDACTED",
    "ScopedBearer",
    "bearer_for",
    "is_loopback_url",
    "llm_api_key",
    "provider_key_names",
    "read_secret_env",
    "redact",
    "register_secret",
    "require_llm_key",
    "same_origin",
]

log = logging.getLogger("s3.credentials")

NO_KEY = "EMPTY"  # what OpenAI-compatible servers without auth accept (vLLM, llama.cpp); never a real key
REDACTED = "[REDACTED]"
# providers that authenticate with a cloud credential chain, not an API key: litellm's own SDK path, no placeholder
CREDENTIAL_CHAIN_PROVIDERS = frozenset({"bedrock", "bedrock_converse", "vertex_ai", "vertex_ai_beta", "sagemaker",
                                        "sagemaker_chat"})

_known: set[str] = set()
_known_lock = threading.Lock()
_warned: set[tuple[str, str]] = set()

# environment variables whose values are secrets wherever they show up in an error text
_SECRET_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
_MIN_SECRET_LEN = 8

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization header values
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]{4,}"), rf"\1\2{REDACTED}"),
    # provider key shapes: OpenAI / Anthropic (sk-...), Hugging Face, GitHub, Google, AWS access key ids
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), f"sk-{REDACTED}"),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), f"hf_{REDACTED}"),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    # name = value pairs (headers, JSON, query strings, kwargs reprs): api_key=..., "x-api-key": "...", token: ...
    (
        re.compile(
            r"(?i)((?:api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|refresh[_-]?token|client[_-]?secret|"
            r"secret[_-]?key|password|passwd|authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?)"
            r"(?!\[REDACTED\])([^\s\"',;&}\]]+)"
        ),
        rf"\1{REDACTED}",
    ),
    (re.compile(r"(?i)([?&](?:key|token|sig|signature|api_key)=)[^&\s\"']+"), rf"\1{REDACTED}"),
    # credentials inside URLs: scheme://user:password@host
    (re.compile(r"(://[^/\s:@]+):[^/\s@]+@"), rf"\1:{REDACTED}@"),
]


def register_secret(value: str | None) -> None:
    """Remember a key value so that `redact` removes it from every later error text (keys we read are registered)."""
    if value and value != NO_KEY and len(value) >= 6:
        with _known_lock:
            _known.add(value)


def _secret_values() -> list[str]:
    with _known_lock:
        values = set(_known)
    for name, value in os.environ.items():
        if len(value) >= _MIN_SECRET_LEN and _SECRET_ENV_NAME.search(name) and not os.path.isabs(value):
            values.add(value)
    return sorted(values, key=len, reverse=True)  # longest first: a key that contains another goes whole


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """`text` with secrets replaced by [REDACTED]: registered key values, the values of secret-named environment
    variables, `extra`, and key-shaped tokens / header values / name=value pairs. Idempotent; cheap enough for every
    error text (never for hot paths).

    >>> redact("401: header was Bearer abc.def-123 and api_key='zzz999'")
    '401: header was Bearer [REDACTED] and api_key=\\'[REDACTED]\\''
    """
    if not text:
        return text
    out = str(text)
    for value in [*sorted((v for v in extra if v and len(v) >= 4), key=len, reverse=True), *_secret_values()]:
        if value in out:
            out = out.replace(value, REDACTED)
    for pattern, repl in _PATTERNS:
        out = pattern.sub(repl, out)
    return out


def read_secret_env(env_name: str | None, *, setting: str) -> str | None:
    """The value of the environment variable a `*_env` setting names (None when the setting names none).

    A named variable that is unset or empty is a ConfigError naming the setting and the variable (never its value).
    The value is registered for redaction."""
    if not env_name:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name):
        raise ConfigError(
            f"{setting} = {redact(env_name)!r} is not an environment variable name: it names the variable that holds "
            "the key (e.g. 'OPENAI_API_KEY'), never the key itself"
        )
    value = os.environ.get(env_name)
    if not value:
        raise ConfigError(f"{setting} names {env_name!r}, but that environment variable is not set")
    register_secret(value)
    return value


def _host(url: str) -> str | None:
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname  # lower-cased, brackets of IPv6 literals removed
    except ValueError:
        return None
    return host


def is_loopback_url(url: str | None) -> bool:
    """True when `url`'s host is this machine (localhost or a loopback address), whatever its spelling:
    `HTTP://LocalHost:8000`, `http://127.0.0.1`, `http://[::1]:80/v1`. Decided by parsing, never by string prefixes."""
    if not url:
        return False
    host = _host(url)
    if host is None:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        host = parts.hostname
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        return None
    if not scheme or not host:
        return None
    return scheme, host, port


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs have the same scheme, host and port (after parsing: case and default ports do not matter)."""
    oa, ob = _origin(a), _origin(b)
    return oa is not None and oa == ob


def _provider(model: str) -> str:
    return model.partition("/")[0].lower() if "/" in model else ""


def llm_api_key(model: str, api_key_env: str | None, api_base: str | None, *, setting: str) -> str | None:
    """The `api_key` to pass litellm for one endpoint: its configured key, else the placeholder NO_KEY, so that no
    provider variable (OPENAI_API_KEY, ...) is ever picked up implicitly and sent to `api_base`. None (pass nothing)
    for `local/` models and for providers that authenticate with a cloud credential chain.

    setting: the config key that names the variable (e.g. 'generator.api_key_env'), for messages."""
    key = read_secret_env(api_key_env, setting=setting)
    provider = _provider(model)
    if key is None:
        if provider == "local" or provider in CREDENTIAL_CHAIN_PROVIDERS:
            return None
        return NO_KEY
    if api_base and urlsplit(api_base.strip()).scheme.lower() == "http" and not is_loopback_url(api_base):
        host = _host(api_base) or api_base
        if (setting, host) not in _warned:
            _warned.add((setting, host))
            log.warning(f"{setting}: the key is sent over plain http to {host}; use https for a remote api_base")
    return key


class _NoEnviron:
    """`os` as a function sees it with an empty environment: what litellm's provider table asks for in general."""

    environ: dict[str, str] = {}

    def getenv(self, name: str, default: str | None = None) -> str | None:
        return default

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)


def provider_key_names(model: str) -> list[str]:
    """The environment variables litellm reads a key for `model`'s provider from ('openai/x': ['OPENAI_API_KEY']),
    [] for a provider that needs none (`hosted_vllm/`, `lm_studio/`) or that litellm does not know. litellm's own
    knowledge (`validate_environment`), asked as if no variable were set, so that the answer names the key a provider
    needs whether or not this shell happens to hold one (s3 never reads it from there: `llm_api_key`)."""
    import types

    import litellm

    ask = litellm.validate_environment
    blank = types.FunctionType(ask.__code__, {**ask.__globals__, "os": _NoEnviron()}, ask.__name__, ask.__defaults__,
                               ask.__closure__)
    blank.__kwdefaults__ = ask.__kwdefaults__
    try:
        missing = blank(model=model)["missing_keys"]
    except Exception:  # litellm changed the function's shape: ask it plainly (names what this shell lacks)
        missing = ask(model=model)["missing_keys"]
    return [name for name in missing if re.search(r"KEY|TOKEN", name)]  # not a base URL, a project or a version


def require_llm_key(model: str, api_key_env: str | None, api_base: str | None, *, setting: str) -> None:
    """Refuse, before the first call, an endpoint whose provider needs a key when `setting` (e.g.
    'generator.api_key_env') names no variable: its calls would go out with the placeholder NO_KEY and fail one by one
    (401s, or retried connection errors), never finding the key that `provider_key_names` says it needs. A named
    variable that is unset is `read_secret_env`'s error. `local/` models, providers that sign with a cloud credential
    chain and an endpoint of the user's own (`api_base`: a vLLM or llama.cpp server needs no key) pass."""
    provider = _provider(model)
    if api_key_env or api_base or not provider or provider == "local" or provider in CREDENTIAL_CHAIN_PROVIDERS:
        return
    names = provider_key_names(model)
    if not names:
        return
    section = setting.rpartition(".")[0] or setting
    var = names[0]
    raise ConfigError(
        f"{section}.model = {model!r} needs an API key (litellm's {provider} provider: {' or '.join(names)}), and "
        f"{setting} names no environment variable to read it from (s3 never picks a key up by itself): export "
        f"{var}=<your key> and --set {setting}={var} (config: [{section}] api_key_env = \"{var}\"); a server of "
        f"your own that needs no key: set {section}.api_base"
    )


class ScopedBearer(httpx.Auth):
    """httpx auth: `Authorization: Bearer <token>` on requests to `base_url`'s origin only (scheme, host and port
    compared after parsing), so a redirect or a mistaken absolute URL never carries the token elsewhere."""

    def __init__(self, token: str, base_url: str) -> None:
        register_secret(token)
        self._token = token
        self._base_url = base_url

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if same_origin(str(request.url), self._base_url):
            request.headers["Authorization"] = f"Bearer {self._token}"
        yield request

    def __repr__(self) -> str:
        return f"ScopedBearer(base_url={self._base_url!r}, token=[REDACTED])"


def bearer_for(auth_token_env: str | None, base_url: str, *, setting: str) -> ScopedBearer | None:
    """The client auth for a service of ours behind `service.auth_token_env`: the token from the variable the client's
    own setting names, scoped to `base_url`; None when the setting names no variable."""
    token = read_secret_env(auth_token_env, setting=setting)
    return ScopedBearer(token, base_url) if token else None


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the formatted message (and a traceback) of every record passing a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave the record as it is
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info:
            import traceback

            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip())
            record.exc_info = None
        return True


def install_log_redaction(loggers: Iterable[str] = ("", "s3", "uvicorn", "uvicorn.error", "LiteLLM")) -> None:
    """Redact every record that reaches the handlers of these loggers (idempotent)."""
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter())

