"""The one place that decides which window attention kernel runs.

A Swin block has three steps with a fast kernel: shift + window partition (and back), attention, and
the MLP. ``fast`` is fixed when the block is built; only the attention kernel depends on the call
(gradient to the bias, device, dtype, dropout), and :func:`select_attention_kernel` picks it:

| situation                            | shift + partition        | attention                       | MLP            |
|--------------------------------------|--------------------------|---------------------------------|----------------|
| ``fast=False`` (in every row below)  | roll + ``rearrange``     | explicit                        | plain          |
| eval, ``no_grad``, or a frozen bias  | gather                   | sdpa (flash, CPU and CUDA)      | plain          |
| CPU fp32 train                       | gather, inverse backward | recomputed                      | GELU recompute |
| CPU fp32 train, attention dropout    | gather, inverse backward | explicit                        | GELU recompute |
| CPU bf16 (autocast) train            | gather, inverse backward | explicit                        | GELU recompute |
| CUDA train, fp32 or bf16             | gather, inverse backward | sdpa, bias + mask as attn_mask  | GELU recompute |
| TorchScript (``torch.jit.script``)   | gather, plain backward   | sdpa; CPU train: explicit       | plain          |
| ``torch.compile``                    | as in eager mode         | as in eager mode                | as in eager    |
| CPU eval without autograd, eager     | gather                   | sdpa, one row block at a time   | row blocks     |

"train" means a gradient flows to the relative position bias. ``torch.compile`` traces every kernel into
one graph, without graph breaks (``tests/layers/test_compile_graph.py``). Kernels:

- explicit: softmax(QKᵀ/√d + bias + mask)·V written out, ``WindowAttention._explicit`` in
  ``swinlite/layers/swin_block.py``; the reference path runs it, and the fast path where no fused kernel
  fits (SDPA's CPU math fallback, which a trainable bias needs, runs slower than it in bf16).
- sdpa: :func:`~swinlite.kernels.window_sdpa.sdpa_window_attention`.
- recomputed: :func:`~swinlite.kernels.window_sdpa.recomputed_window_attention` (needs the private CPU
  flash op, :data:`~swinlite.kernels.window_sdpa.CPU_FLASH_WITH_LSE`; without it: explicit).
- row blocks: :mod:`swinlite.kernels.row_blocks`, CPU inference in blocks of a few thousand tokens through
  reused buffers, when :func:`use_row_blocks` says so (eval, no autograd, no autocast, eager, exact GELU);
  it overrides the "eval" row above.
- gather: :mod:`swinlite.kernels.gather`. GELU recompute: :mod:`swinlite.kernels.gelu_linear`, for an exact
  GELU without dropout between fc1 and fc2 (``Mlp.recompute_act``; otherwise plain). Both need autograd
  only for their backward: without gradients they run their plain forward.
  TorchScript cannot script autograd Functions, so it runs their plain forward with autograd's backward.
  A scripted ``fast=False`` block runs the fast path (einops does not script): the same function.
"""

import torch

from . import window_sdpa


def select_attention_kernel(fast: bool, device_type: str, dtype: torch.dtype, bias_grad: bool, dropout: bool) -> str:
    """Name of the window attention kernel for one call (module docstring: the table).

    Args:
        fast: the block's ``fast`` flag; False always gives the explicit reference.
        device_type: device of the projections, e.g. ``"cpu"``, ``"cuda"``.
        dtype: dtype of the projections (autocast already applied).
        bias_grad: a gradient flows to the relative position bias.
        dropout: attention dropout is active (training with ``attn_drop > 0``).

    Returns:
        ``"explicit"``, ``"sdpa"`` or ``"recomputed"``.
    """
    if not fast:
        return "explicit"
    if not bias_grad or device_type != "cpu":
        return "sdpa"
    if torch.jit.is_scripting():
        return "explicit"
    if dtype == torch.float32 and not dropout and window_sdpa.CPU_FLASH_WITH_LSE:
        return "recomputed"
    return "explicit"


def use_row_blocks(training: bool, x: torch.Tensor) -> bool:
    """Whether a block runs :mod:`.row_blocks`: CPU eval without autograd or autocast, not traced (eager).

    Args:
        training: the block's ``training`` flag (dropout and stochastic depth must be off).
        x: the block's input.
    """
    return (
        not training
        and x.device.type == "cpu"
        and not torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )
