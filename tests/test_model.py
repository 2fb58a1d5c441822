"""lib/train/model.py: the two levers that change the model (attention kind, padded vocabulary) must
leave the function it computes unchanged."""

from __future__ import annotations

import pytest
import torch

from lib.train.model import GPT, GPTConfig, flops_per_token

SEED = 1337
TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=16)


def tiny_gpt(vocab_size=1000, real_vocab_size=1000, attention="naive", seed=SEED) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**TINY, vocab_size=vocab_size, real_vocab_size=real_vocab_size, attention=attention))


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 1000, (2, TINY["block_size"]), generator=g)
    y = torch.randint(0, 1000, (2, TINY["block_size"]), generator=g)
    return x, y


def test_padding_rows_of_the_tied_embedding_start_at_zero():
    model = tiny_gpt(vocab_size=1024)
    assert model.lm_head.weight.shape == (1024, TINY["n_embd"])
    assert torch.count_nonzero(model.lm_head.weight[1000:]) == 0
    assert torch.count_nonzero(model.lm_head.weight[:1000]) > 0
    assert model.transformer.wte.weight is model.lm_head.weight


def test_padded_model_computes_the_loss_as_nanogpt_writes_it_over_every_column(batch):
    """The canonical loss: one cross_entropy over the logits as they come, with no slice or
    copy of the B*T*V tensor (the padded columns take part in the softmax, as in nanoGPT)."""
    x, y = batch
    model = tiny_gpt(vocab_size=1024)
    logits, loss = model(x, y)
    assert logits.shape == (2, TINY["block_size"], 1024)
    assert torch.equal(loss, torch.nn.functional.cross_entropy(logits.view(-1, 1024), y.view(-1)))


def test_zero_padding_rows_raise_the_initial_loss_only_by_their_share_of_the_softmax(batch):
    """Same seed, same real weights: the padded model's loss differs from the unpadded one's
    exactly by the 24 zero logits added to every softmax's denominator."""
    x, y = batch
    plain, padded = tiny_gpt(vocab_size=1000), tiny_gpt(vocab_size=1024)
    logits, plain_loss = plain(x, y)
    with_padding = torch.cat([logits, torch.zeros(*logits.shape[:-1], 24)], dim=-1)
    extra = (torch.logsumexp(with_padding, -1) - torch.logsumexp(logits, -1)).mean()
    assert torch.allclose(padded(x, y)[1], plain_loss + extra, atol=1e-5)
    assert 0 < float(extra) < 0.05


def test_same_seed_gives_the_same_weights():
    a, b = tiny_gpt(), tiny_gpt()
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka


def test_naive_and_sdpa_attention_compute_the_same_logits(batch):
    x, _ = batch
    naive = tiny_gpt(attention="naive")
    sdpa = tiny_gpt(attention="sdpa")
    sdpa.load_state_dict(naive.state_dict())
    with torch.no_grad():
        a, b = naive(x)[0], sdpa(x)[0]
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_attention_is_causal(batch):
    """Changing a later token must not change an earlier position's logits."""
    x, _ = batch
    for attention in ("naive", "sdpa"):
        model = tiny_gpt(attention=attention)
        x2 = x.clone()
        x2[:, -1] = (x2[:, -1] + 1) % 1000
        with torch.no_grad():
            a, b = model(x)[0], model(x2)[0]
        assert torch.allclose(a[:, :-1], b[:, :-1], atol=1e-6), attention
        assert not torch.allclose(a[:, -1], b[:, -1]), attention


def test_sequence_longer_than_block_size_is_refused():
    model = tiny_gpt()
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, TINY["block_size"] + 1, dtype=torch.long))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_embd=30, n_head=4), "divisible"),
        (dict(attention="flash"), "attention"),
        (dict(vocab_size=900, real_vocab_size=1000), "pad"),
    ],
)
def test_invalid_config_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


def test_num_params_counts_tied_weights_once_and_excludes_position_embeddings():
    model = tiny_gpt()
    unique = {id(p): p.numel() for p in model.parameters()}
    assert model.num_params(non_embedding=False) == sum(unique.values())
    assert model.num_params() == sum(unique.values()) - model.transformer.wpe.weight.numel()


@pytest.mark.parametrize("n_layer, n_embd, seq_len, n_params", [(12, 768, 1024, 124_000_000), (2, 64, 64, 1000)])
def test_flops_per_token_is_6n_plus_12_l_d_t(n_layer, n_embd, seq_len, n_params):
    cfg = GPTConfig(n_layer=n_layer, n_head=2, n_embd=n_embd)
    assert flops_per_token(cfg, n_params, seq_len) == 6 * n_params + 12 * n_layer * n_embd * seq_len
