"""RelPosSeqEncoder learns a task that only relative positions solve: copy the token K steps back."""

from functools import partial

import numpy as np
import pytest
import timm.optim
import torch
from torch import nn

from swinlite.seq import RelPosSeqEncoder

VOCAB, LENGTH, K, DIM = 8, 12, 2, 32


@pytest.fixture
def one_thread():
    """Tiny matrices: one thread is faster than two and does not fight other processes on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_copy_task(use_positions: bool, steps: int = 150) -> float:
    """Train embedding -> encoder -> linear to output the token K steps back; return held-out accuracy."""
    torch.manual_seed(0)
    embed, head = nn.Embedding(VOCAB, DIM), nn.Linear(DIM, VOCAB)
    encoder = RelPosSeqEncoder(DIM, depth=1, num_heads=2, max_len=LENGTH, max_distance=4)
    if not use_positions:  # control: with rel_k fixed at zero, attention sees a bag of tokens
        for block in encoder.blocks:
            nn.init.zeros_(block.attn.rel_k.weight)
            block.attn.rel_k.weight.requires_grad_(False)
    params = [p for m in (embed, encoder, head) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=3e-3)
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (64, LENGTH))
        logits = head(encoder(embed(tokens)))[:, K:]  # (B, L-K, V): position i predicts tokens[i - K]
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, :-K].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    tokens = torch.randint(0, VOCAB, (256, LENGTH))
    with torch.no_grad():
        predicted = head(encoder(embed(tokens)))[:, K:].argmax(-1)
    return (predicted == tokens[:, :-K]).float().mean().item()


def test_learns_copy_k_back_only_with_relative_positions(one_thread):
    assert train_copy_task(use_positions=True) > 0.95
    assert train_copy_task(use_positions=False) < 0.5  # chance is 1/8; a bag of tokens cannot place them


def test_padding_and_shapes():
    torch.manual_seed(0)
    encoder = RelPosSeqEncoder(16, depth=2, num_heads=2, max_len=10, value_rel=True).eval()
    x = torch.randn(2, 6, 16)
    padded = torch.cat([x, torch.randn(2, 4, 16)], dim=1)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[:, 6:] = True
    torch.testing.assert_close(encoder(padded, mask, causal=True)[:, :6], encoder(x, causal=True))
    with pytest.raises(ValueError, match="max_len"):
        encoder(torch.randn(1, 11, 16))


def test_wrong_input_dtype_names_both():
    """A float64 input met the float32 LayerNorm's dtype error; under autocast a bf16 input runs."""
    encoder = RelPosSeqEncoder(8, depth=1, num_heads=2, max_len=16)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="input dtype torch.float64 differs from the encoder's torch.float32"):
        encoder(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert encoder(x.bfloat16()).shape == (2, 5, 8)


def test_numpy_integer_sizes_are_taken_as_ints():
    """np.int64 sizes were refused as if not integers (dim, depth here; the others by the attention layer)."""
    encoder = RelPosSeqEncoder(np.int64(8), np.int64(2), np.int64(2), np.int64(16), max_distance=np.int64(3))
    assert len(encoder.blocks) == 2 and type(encoder.blocks[0].attn.max_len) is int
    assert encoder(torch.randn(1, 5, 8)).shape == (1, 5, 8)
    with pytest.raises(ValueError, match=r"depth must be an int >= 1, got 2\.0"):
        RelPosSeqEncoder(8, 2.0, 2, 16)


def test_timm_optimizer_leaves_every_blocks_position_tables_undecayed():
    """timm's optimizer factory reads ``no_weight_decay()``; the encoder had none and decayed every block's tables."""
    encoder = RelPosSeqEncoder(8, depth=2, num_heads=2, max_len=16, value_rel=True)
    tables = {f"blocks.{i}.attn.{t}.weight" for i in range(2) for t in ("rel_k", "rel_v")}
    assert encoder.no_weight_decay() == tables
    optimizer = timm.optim.create_optimizer_v2(encoder, "adamw", weight_decay=0.05)
    undecayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    assert {n for n, p in encoder.named_parameters() if id(p) in undecayed and p.ndim > 1} == tables


def test_fp16_left_padding_keeps_real_positions_finite():
    """Causal, left-padded: the padded queries see no key. In fp16 their output was NaN, the next layer's keys and
    values at the padding NaN, and 0 * NaN reached the real positions."""
    torch.manual_seed(0)
    encoder = RelPosSeqEncoder(8, depth=2, num_heads=2, max_len=16, value_rel=True, method="gather").eval()
    attn = encoder.blocks[0].attn
    with torch.no_grad():  # content logits q.k/sqrt(d) = -32: fp16's min plus them overflowed to -inf
        attn.q.weight.zero_()
        attn.k.weight.zero_()
        attn.q.bias.fill_(4.0)
        attn.k.bias.fill_(-4.0)
    x, mask = torch.randn(2, 10, 8), torch.zeros(2, 10, dtype=torch.bool)
    mask[0, :3] = True
    with torch.no_grad():
        expected = encoder(x, mask, causal=True)
        out = encoder.half()(x.half(), mask, causal=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, 3:].float(), expected[0, 3:], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(out[1].float(), expected[1], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("attn_kwargs", [{"mode": "bias"}, {"value_rel": True}])
def test_meta_build_then_reset_parameters_initialises_as_construction(attn_kwargs):
    """Built on the meta device, then ``to_empty`` and ``apply(reset_parameters)``: every parameter as a build on the
    CPU gives (the same draws in the same order). Bias mode's table had no reset and kept uninitialised memory."""
    build = partial(RelPosSeqEncoder, 8, 2, 2, 16, 3, **attn_kwargs)
    torch.manual_seed(0)
    expected = build()
    torch.manual_seed(0)
    encoder = build(device="meta").to_empty(device="cpu")
    encoder.apply(lambda m: m.reset_parameters() if hasattr(m, "reset_parameters") else None)
    for (name, p), e in zip(encoder.named_parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(p, e, rtol=0, atol=0, msg=name)


def test_builds_under_the_meta_default_device():
    """The drop-path schedule came from torch.linspace(...).tolist(), which fails on the meta device."""
    with torch.device("meta"):
        encoder = RelPosSeqEncoder(8, 3, 2, 16, drop_path_rate=0.2)
    assert all(p.is_meta for p in encoder.parameters())
    assert [block.drop_path.drop_prob for block in encoder.blocks[1:]] == pytest.approx([0.1, 0.2])


def test_passes_the_attention_options_to_every_block():
    encoder = RelPosSeqEncoder(8, 2, 2, 16, method="skew", qkv_bias=False, attn_drop=0.1, proj_drop=0.2)
    for block in encoder.blocks:
        attn = block.attn
        assert attn.method == "skew" and attn.q.bias is None
        assert attn.attn_drop.p == 0.1 and attn.proj_drop.p == 0.2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"depth": 0}, "depth must be an int >= 1"),
        ({"depth": 1.5}, "depth must be an int >= 1"),
        ({"mlp_ratio": 0}, "mlp_ratio must be > 0"),
        ({"mlp_ratio": 0.1}, "at least one hidden unit"),  # int(8 * 0.1) = 0
        ({"mlp_ratio": "4"}, "mlp_ratio must be a real number"),
        ({"mlp_ratio": float("inf")}, "mlp_ratio must be finite"),  # was an OverflowError from the check itself
        ({"mlp_ratio": float("nan")}, "mlp_ratio must be finite"),
        ({"mlp_ratio": 1e300}, r"dim \* mlp_ratio < 2\*\*63"),  # was a TypeError inside torch
        ({"drop_path_rate": -1}, r"drop_path_rate must be in \[0, 1\)"),
        ({"drop_path_rate": 1.0}, r"drop_path_rate must be in \[0, 1\)"),
    ],
)
def test_bad_config_names_the_argument(kwargs, message):
    """A negative drop_path_rate turned stochastic depth off and mlp_ratio=0 built a zero-width MLP, silently;
    depth=1.5 raised an unclear TypeError, mlp_ratio=inf an OverflowError and 1e300 a TypeError from torch."""
    with pytest.raises(ValueError, match=message):
        RelPosSeqEncoder(**{"dim": 8, "depth": 2, "num_heads": 2, "max_len": 16, **kwargs})
