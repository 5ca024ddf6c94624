"""The one stop-string rule shared by every policy backend.

A reply ends right after the EARLIEST occurrence of any stop string; the stop string itself is kept (it is what the
model wrote, and the agent's parser and the trajectory both need it). Token backends cut the sampled ids at the
shortest prefix whose decoding contains the stop string, and at the first end-of-sequence token (kept).
API backends strip the stop string (OpenAI semantics); `restore_stop` puts a closing tag back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

__all__ = ["find_stop", "restore_stop", "truncate_text", "truncate_token_ids"]


def find_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """(end index just after the earliest stop string, that stop) or None.

    >>> find_stop('<query>{"query": "x"}</query> junk', ["</query>", "<information>"])
    (22, '</query>')
    """
    best: tuple[int, str] | None = None
    for s in stops:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best[0] or (i + len(s) == best[0] and len(s) > len(best[1]))):
            best = (i + len(s), s)
    return best


def truncate_text(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """Cut `text` right after the earliest stop string (kept).

    >>> truncate_text("<search> a </search><information>", ["</search>", "</answer>"])
    ('<search> a </search>', '</search>')
    """
    hit = find_stop(text, stops)
    if hit is None:
        return text, None
    return text[: hit[0]], hit[1]


def truncate_token_ids(
    ids: Sequence[int],
    decode: Callable[[Sequence[int]], str],
    stops: Sequence[str],
    eos_ids: Collection[int] = (),
    pad_id: int | None = None,
) -> tuple[list[int], str | None, str]:
    """Cut sampled token ids after the first end-of-sequence token (kept) or the shortest prefix whose decoding
    contains a stop string. Returns (ids, stop string or None, finish reason: "stop" | "eos" | "length").

    Trailing pad ids (batched generation) are removed first.
    """
    out = list(ids)
    if pad_id is not None:
        while out and out[-1] == pad_id and pad_id not in eos_ids:
            out.pop()
    finish = "length"
    for j, t in enumerate(out):
        if t in eos_ids:
            out = out[: j + 1]
            finish = "eos"
            break
    if not stops:
        return out, None, finish
    hit = find_stop(decode(out), stops)
    if hit is None:
        return out, None, finish
    stop = hit[1]
    # shortest prefix whose decoding contains a stop string (monotone in the prefix length)
    lo, hi = 1, len(out)
    while lo < hi:
        mid = (lo + hi) // 2
        if find_stop(decode(out[:mid]), stops) is not None:
            hi = mid
        else:
            lo = mid + 1
    found = find_stop(decode(out[:lo]), stops)
    return out[:lo], (found[1] if found else stop), "stop"


def restore_stop(text: str, stops: Sequence[str], finish_reason: str | None) -> tuple[str, str | None]:
    """APIs drop the stop string from the text. When the call finished on a stop and the text leaves a tag opened by
    a closing-tag stop (`</query>` after `<query>`), append that stop so every backend returns the same text.
    A stop that is an opening tag (e.g. `<information>`) is not restored: the reply simply ended before it.

    >>> restore_stop('<query>{"query": "x"}', ["</query>", "<information>"], "stop")
    ('<query>{"query": "x"}</query>', '</query>')
    >>> restore_stop("<search_complete>True</search_complete>", ["</query>"], "stop")
    ('<search_complete>True</search_complete>', None)
    """
    text, stop = truncate_text(text, stops)
    if stop is not None or finish_reason != "stop":
        return text, stop
    best: tuple[int, str] | None = None
    for s in stops:
        if not s.startswith("</") or not s.endswith(">"):
            continue
        opener = "<" + s[2:]
        pos = text.rfind(opener)
        if pos >= 0 and text.find(s, pos) < 0 and (best is None or pos > best[0]):
            best = (pos, s)
    if best is None:
        return text, None
    return text + best[1], best[1]
