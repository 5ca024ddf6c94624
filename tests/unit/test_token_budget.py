"""training.learner.max_tokens_per_micro_batch (issue 80): an update's rows cut into micro-batches by a token budget
(training/learn/api.py `token_chunks`), and the update is the same whatever the cut: the global token mean weights each
micro-batch by its share of the policy tokens, so the loss and every gradient of a split update equal the unsplit
one's (a tiny random Llama through the real Learner, update_rows and pad_rollouts; with gradient checkpointing on, off
and 'auto' per micro-batch). A right-padded batch runs without its attention mask: each row's log-probs are its own."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from s3core.types import SearchResult, Trajectory  # noqa: E402
from training.config import TrainingConfig  # noqa: E402
from training.learn.api import pad_rollouts, token_chunks  # noqa: E402
from training.learn.learner_group import split_for_ranks  # noqa: E402
from training.run.step import update_rows  # noqa: E402


def test_token_chunks_keep_the_order_the_row_count_and_the_budget() -> None:
    lengths = [30, 30, 30, 80, 10, 10, 10, 10, 10]
    chunks = token_chunks(list(range(9)), lengths, 4, 64)
    assert [i for c in chunks for i in c] == list(range(9))  # every row once, in order
    assert chunks == [[0, 1], [2], [3], [4, 5, 6, 7], [8]]  # [3] is longer than the budget: alone
    assert all(len(c) * max(lengths[i] for i in c) <= 64 or len(c) == 1 for c in chunks)
    assert token_chunks(list(range(9)), lengths, 4, None) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]  # no budget: by count
    assert token_chunks([5, 9], [10, 10], 1, 1000) == [[5], [9]]  # micro_batch_size still caps the rows


def test_split_for_ranks_cuts_each_ranks_rows_by_the_budget() -> None:
    shards = split_for_ranks([0, 1, 2, 3], [1.0, 1.0, 1.0, 1.0], 2, 4, lengths=[40, 40, 10, 10], max_tokens=64)
    assert [s.micro_batches for s in shards] == [[[0], [1]], [[2, 3]]]
    assert sum(w for s in shards for w in s.weights) == pytest.approx(2.0)  # world_size x the token shares


def _tiny_llama(out: Path) -> Path:
    """A 2-layer random Llama over training/testing.py's vocabulary, with its word-level tokenizer."""
    import transformers

    from training.testing import tiny_lm

    tiny_lm(out)  # the tokenizer (and a 1-layer model, replaced)
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(vocab_size=10, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   tie_word_embeddings=False, initializer_range=0.2, bos_token_id=1, eos_token_id=1,
                                   pad_token_id=0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(out))
    return out


def _rollouts(n: int, seed: int = 0) -> list[SearchResult]:
    """n trajectories in groups of 3 sharing a prompt: policy replies (mask 1) between environment spans (mask 0),
    of different lengths (so micro-batches pad)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = [1, 6, 7, 6, 7, 6][: 4 + (i // 3) % 3]
        tr = Trajectory(prompt_ids=prompt)
        for turn in range(1 + i % 3):
            k = 3 + (i + turn) % 4
            tr.append(torch.randint(2, 10, (k,), generator=g).tolist(), True, [-1.5] * k)
            tr.append(torch.randint(2, 10, (5 + 2 * turn,), generator=g).tolist(), False)
        out.append(SearchResult(question=str(i), trajectory=tr))
    return out


def _learner(base: Path, run_dir: Path, **learner: object) -> object:
    from training.learn.learner import Learner

    tc = TrainingConfig(base_model=str(base), rollout={"group_size": 3, "temperature": 1.0},
                        update={"learning_rate": 1e-3, "kl_coef": 0.01, "max_grad_norm": 1e9},
                        learner={"device": "cpu", **learner})
    torch.manual_seed(0)
    return Learner(tc, "cpu", run_dir)


@pytest.mark.parametrize("ckpt", [False, True, "auto"])
def test_a_split_update_has_the_loss_and_gradients_of_the_unsplit_one(tmp_path: Path, ckpt: object) -> None:
    base = _tiny_llama(tmp_path / "lm")
    results = _rollouts(9)
    rewards = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.2, 0.9, 0.4]
    lengths = [len(r.trajectory.prompt_ids) + len(r.trajectory.response_ids) for r in results]  # type: ignore[union-attr]
    budget = 36
    assert max(lengths) > budget  # a row goes alone

    def run(run_dir: Path, **settings: object) -> tuple[object, dict[str, object]]:
        learner = _learner(base, run_dir, **settings)
        tc = learner.tc  # type: ignore[attr-defined]
        share = tc.learner.share_prefix and tc.learner.gradient_checkpointing is not True
        rows, _ = update_rows(tc, results, rewards, lambda res, b: pad_rollouts(res, b, 0, share_prefix=share))
        assert rows is not None
        report = learner.update(rows)  # type: ignore[attr-defined]
        grads = {n: p.grad.detach().clone() for n, p in learner.model.named_parameters()  # type: ignore[attr-defined]
                 if p.grad is not None}
        return report, grads

    whole, g_whole = run(tmp_path / "whole", micro_batch_size=9, max_tokens_per_micro_batch=None,
                         gradient_checkpointing=False)
    split, g_split = run(tmp_path / "split", micro_batch_size=4, max_tokens_per_micro_batch=budget,
                         gradient_checkpointing=ckpt)
    assert len(whole.batches) == 1 and len(split.batches) >= 4  # type: ignore[attr-defined]
    assert all(b.ids.numel() <= budget or b.ids.shape[0] == 1 for b in split.batches)  # type: ignore[attr-defined]
    assert split.tokens == whole.tokens  # type: ignore[attr-defined]
    for key in ("losses/total", "losses/policy", "losses/kl", "losses/grad_norm"):
        assert split.stats[key] == pytest.approx(whole.stats[key], rel=1e-4, abs=1e-7), key  # type: ignore[attr-defined]
    assert g_whole.keys() == g_split.keys() and len(g_whole) > 0
    for name, g in g_whole.items():
        torch.testing.assert_close(g_split[name], g, rtol=1e-4, atol=1e-7, msg=name)
    assert max(float(g.abs().max()) for g in g_whole.values()) > 1e-4  # the gradients compared are not all zero


def test_a_right_padded_batch_gives_each_row_its_own_logprobs(tmp_path: Path) -> None:
    """The learner drops the padding mask of a right-padded batch (SDPA's fused causal kernel, no (B, 1, L, L) mask
    kept per layer): the pads come after every real token, so the causal mask alone hides them."""
    from training.learn.learner import forward_logprobs, right_padded

    learner = _learner(_tiny_llama(tmp_path / "lm"), tmp_path / "run", attn_implementation="eager")
    model, tc = learner.model, learner.tc  # type: ignore[attr-defined]
    model.eval()
    results = _rollouts(3)
    batch = pad_rollouts(results, [0, 1, 2], 0, share_prefix=False)
    assert right_padded(batch.attention) and not bool(batch.attention.all())  # padded on the right
    with torch.no_grad():
        lp = forward_logprobs(tc, model, batch)[0]
        for j in range(3):
            alone = pad_rollouts(results, [j], 0, share_prefix=False)
            own = forward_logprobs(tc, model, alone)[0][0]
            off = alone.start - batch.start
            m = alone.loss_mask[0] > 0
            torch.testing.assert_close(lp[j, off : off + own.shape[0]][m], own[m], rtol=1e-5, atol=1e-6)
    left = torch.tensor([[0, 1, 1], [1, 1, 1]])
    assert not right_padded(left)  # left padding keeps its mask
