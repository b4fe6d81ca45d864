"""Swin Transformer (Liu et al., ICCV 2021): hierarchical vision transformer with shifted windows.

Layout: ``patch_embed`` -> ``layers[0..3]`` -> ``norm`` -> ``head``. Stage i is "downsample + blocks"
(stage 0 has no downsample), so the output of ``layers[i]`` is feature level i, at stride
patch_size * 2**i. Tokens are channels-last [B, H, W, C] inside the network; the public feature
outputs (``forward_intermediates``, ``features_only``) are NCHW unless asked otherwise.
"""

from collections.abc import Sequence
from typing import Any

import torch
from timm.layers import ClassifierHead, PatchEmbed, register_notrace_function, to_2tuple
from timm.models import checkpoint_seq
from timm.models._features import feature_take_indices
from torch import nn

from ..layers.patch_merging import PatchMerging
from ..layers.swin_block import SwinBlock


@register_notrace_function  # value checks on the input's shape, not traceable
def check_image_input(x: torch.Tensor, in_chans: int, patch_size: tuple[int, int], dtype: torch.dtype) -> None:
    """Raise a ValueError naming the expected input unless ``x`` is a (B, in_chans, H, W) batch of ``dtype``.

    Under autocast the input may be of another floating dtype. TorchScript compiles this check too.
    """
    expected = f"a floating-point tensor of shape (B, {in_chans}, H, W) with H >= {patch_size[0]}, W >= {patch_size[1]}"
    if not torch.jit.is_scripting() and not isinstance(x, torch.Tensor):
        raise ValueError(f"expected {expected}, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"expected {expected}, got a {x.dim()}-D tensor of shape {list(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"expected {expected}, got dtype {x.dtype}")
    if x.shape[1] != in_chans:
        raise ValueError(f"expected {expected}, got {x.shape[1]} channels (shape {list(x.shape)})")
    if x.shape[2] < patch_size[0] or x.shape[3] < patch_size[1]:
        raise ValueError(f"expected {expected}, got an image of {x.shape[2]}x{x.shape[3]}, smaller than one patch")
    if x.dtype == dtype:
        return
    if torch.jit.is_scripting():
        autocast = torch.is_autocast_enabled()  # TorchScript's takes no device type
    else:
        device = x.device.type
        autocast = torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device)
    if not autocast:
        raise ValueError(
            f"input dtype {x.dtype} differs from the model's {dtype}: convert one of them (or use autocast)"
        )


@register_notrace_function  # a branch on the batch size, not traceable
def at_least_one_image(x: torch.Tensor) -> torch.Tensor:
    """``x``, or one blank image for an empty batch: the window kernels cannot reshape a batch of 0.

    The caller keeps the first ``B`` results (``out[:B]``), so an empty batch gives an empty output.
    """
    return x if x.shape[0] > 0 else x.new_zeros([1] + list(x.shape[1:]))


def crop_to_patches(x: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """images [B, C, H, W] -> [B, C, H - H % ph, W - W % pw], the remainder dropped as torchvision's patch conv does."""
    return x[..., : x.shape[-2] - x.shape[-2] % patch_size[0], : x.shape[-1] - x.shape[-1] % patch_size[1]]


def check_build_args(
    dims: Sequence[int],
    depths: Sequence[int],
    num_heads: Sequence[int],
    sizes: dict[str, int],
    rates: dict[str, float],
) -> None:
    """ValueError naming the argument and its allowed values, at build time instead of at the first step.

    Args:
        dims: channels per stage.
        depths: blocks per stage.
        num_heads: attention heads per stage.
        sizes: integer arguments that must be positive (``num_classes`` may be 0), by name.
        rates: probabilities in [0, 1), by name.
    """
    if len(depths) != len(num_heads) or len(depths) == 0:
        raise ValueError(f"depths {tuple(depths)} and num_heads {tuple(num_heads)} must have the same, non-zero length")
    if any(d < 1 for d in depths):
        raise ValueError(f"depths must be at least 1 block per stage, got {tuple(depths)}")
    for i, (dim, heads) in enumerate(zip(dims, num_heads, strict=True)):
        if heads < 1 or dim % heads:
            raise ValueError(f"stage {i}: {dim} channels cannot be split into num_heads={heads} heads")
    for name, value in sizes.items():
        if value < (0 if name == "num_classes" else 1):
            raise ValueError(f"{name} must be {'>= 0' if name == 'num_classes' else 'positive'}, got {value}")
    for name, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {rate}")


def check_feature_indices(indices: int | Sequence[int] | None, num_stages: int) -> None:
    """Raise a ValueError naming the allowed values unless ``indices`` selects feature levels.

    Args:
        indices: None (all levels), an int n (the last n levels) or a sequence of level indices.
        num_stages: number of feature levels.
    """
    if indices is None:
        return
    if isinstance(indices, int):
        if not 1 <= indices <= num_stages:
            raise ValueError(f"an int selects the last n of {num_stages} levels, n in 1..{num_stages}; got {indices}")
        return
    bad = [i for i in indices if not isinstance(i, int) or not 0 <= i < num_stages]
    if bad or len(indices) == 0:
        raise ValueError(
            f"feature indices must be a non-empty sequence of levels in 0..{num_stages - 1}, got {tuple(indices)}"
        )


class SwinStage(nn.Module):
    """Patch merging (except in the first stage) followed by ``depth`` blocks, alternating W-MSA and SW-MSA.

    Args:
        dim: input channels.
        out_dim: channels of the blocks (``dim`` unless downsampling).
        depth: number of blocks.
        num_heads: attention heads of every block.
        window: (Wh, Ww).
        downsample: start with a :class:`PatchMerging` (stride 2).
        drop_path: stochastic depth rate of each block, ``depth`` values.
        mlp_ratio, qkv_bias, proj_drop, attn_drop, rel_pos, mask_padding, fast: see :class:`SwinBlock`.
    """

    def __init__(
        self,
        dim: int,
        out_dim: int,
        depth: int,
        num_heads: int,
        window: tuple[int, int],
        downsample: bool,
        drop_path: Sequence[float],
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        rel_pos: str = "table",
        mask_padding: bool = True,
        fast: bool = True,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        act_layer: type[nn.Module] = nn.GELU,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.grad_checkpointing = False
        if downsample:
            self.downsample: nn.Module = PatchMerging(dim, out_dim, norm_layer, device=device, dtype=dtype)
        elif dim != out_dim:
            raise ValueError(f"a stage without downsampling keeps its width: dim {dim} != out_dim {out_dim}")
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(
            *[
                SwinBlock(
                    out_dim,
                    num_heads,
                    window,
                    shift=i % 2 == 1,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=qkv_bias,
                    drop_path=drop_path[i],
                    proj_drop=proj_drop,
                    attn_drop=attn_drop,
                    rel_pos=rel_pos,
                    mask_padding=mask_padding,
                    fast=fast,
                    norm_layer=norm_layer,
                    act_layer=act_layer,
                    device=device,
                    dtype=dtype,
                )
                for i in range(depth)
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, H, W, C_in] -> [B, H', W', C_out] (H' = ceil(H/2) when downsampling)."""
        x = self.downsample(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint_seq(self.blocks, x)
        return self.blocks(x)


class SwinTransformer(nn.Module):
    """Swin Transformer backbone and classifier, following timm's model interface.

    Args:
        img_size: nominal input size (for the pretrained config; any size at least one patch works).
        patch_size: patch embedding stride and kernel.
        in_chans: input image channels.
        num_classes: classifier outputs; 0 for no classifier.
        global_pool: ``"avg"`` or ``""`` (no pooling), as timm's ClassifierHead.
        embed_dim: channels of stage 0; stage i has ``embed_dim * 2**i``.
        depths: blocks per stage.
        num_heads: attention heads per stage.
        window_size: attention window, int or (Wh, Ww).
        mlp_ratio: MLP hidden size over the block width.
        qkv_bias: learn q, k, v biases.
        drop_rate: dropout before the classifier.
        proj_drop_rate: dropout after attention projections and in MLPs.
        attn_drop_rate: dropout on attention weights.
        drop_path_rate: stochastic depth, rising linearly from 0 over the blocks to this value.
        rel_pos: ``"table"`` (Swin) or ``"cpb"`` (Swin-V2 continuous position bias).
        mask_padding: pad the image to a patch multiple and mask padded tokens in windows; False reproduces
            torchvision at any size (the remainder past the last whole patch is dropped, padded tokens attend).
        fast: run the kernels of ``swinlite.kernels`` (False: the reference math written out in
            ``swinlite/layers/swin_block.py``; same function, slower, more memory).
        out_norm: a LayerNorm on each feature level returned by ``forward_intermediates``
            (``out_norms.i``, as detection backbones use); without, ``out_norms.i`` are identities.
        frozen_stages: -1 trains everything; k >= 0 freezes the patch embedding and the first k stages
            (with their output norms): no gradients, and eval mode kept across ``.train()``.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 4,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "avg",
        embed_dim: int = 96,
        depths: Sequence[int] = (2, 2, 6, 2),
        num_heads: Sequence[int] = (3, 6, 12, 24),
        window_size: int | tuple[int, int] = 7,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        rel_pos: str = "table",
        mask_padding: bool = True,
        fast: bool = True,
        out_norm: bool = False,
        frozen_stages: int = -1,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        act_layer: type[nn.Module] = nn.GELU,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        num_stages = len(depths)
        dims = [int(embed_dim * 2**i) for i in range(num_stages)]
        patch, window = to_2tuple(patch_size), to_2tuple(window_size)
        check_build_args(
            dims,
            depths,
            num_heads,
            sizes=dict(
                embed_dim=embed_dim,
                in_chans=in_chans,
                num_classes=num_classes,
                patch_size=min(patch),
                window_size=min(window),
            ),
            rates=dict(
                drop_rate=drop_rate,
                proj_drop_rate=proj_drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=drop_path_rate,
            ),
        )
        if not mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be positive, got {mlp_ratio}")
        if not -1 <= frozen_stages <= len(depths):
            raise ValueError(
                f"frozen_stages must be in -1..{len(depths)} (-1: none, 0: patch embed, k: patch embed and the first "
                f"k of {len(depths)} stages), got {frozen_stages}"
            )
        dd = {"device": device, "dtype": dtype}
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.mask_padding = mask_padding
        self.global_pool = global_pool
        self.output_fmt = "NHWC"
        self.patch_size: tuple[int, int] = patch
        self.window_size: tuple[int, int] = window
        self.num_features = self.head_hidden_size = dims[-1]

        self.patch_embed = PatchEmbed(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            embed_dim=dims[0],
            norm_layer=norm_layer,
            output_fmt="NHWC",
            strict_img_size=False,
            dynamic_img_pad=True,
            **dd,
        )
        drop_path = torch.linspace(0, drop_path_rate, sum(depths), device="cpu").tolist()  # under any device context
        stages, self.feature_info = [], []
        for i, depth in enumerate(depths):
            first = sum(depths[:i])
            stages.append(
                SwinStage(
                    dims[max(i - 1, 0)],
                    dims[i],
                    depth,
                    num_heads[i],
                    self.window_size,
                    downsample=i > 0,
                    drop_path=drop_path[first : first + depth],
                    norm_layer=norm_layer,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=qkv_bias,
                    proj_drop=proj_drop_rate,
                    attn_drop=attn_drop_rate,
                    rel_pos=rel_pos,
                    mask_padding=mask_padding,
                    fast=fast,
                    act_layer=act_layer,
                    **dd,
                )
            )
            self.feature_info.append(dict(num_chs=dims[i], reduction=self.patch_size[0] * 2**i, module=f"layers.{i}"))
        self.layers = nn.Sequential(*stages)
        self.out_norms = nn.ModuleList([norm_layer(d, **dd) if out_norm else nn.Identity() for d in dims])
        self.norm = norm_layer(self.num_features, **dd)
        self.head = ClassifierHead(
            self.num_features, num_classes, pool_type=global_pool, drop_rate=drop_rate, input_fmt="NHWC", **dd
        )
        self.apply(_init_weights)
        self.frozen_stages = frozen_stages
        self._freeze()

    def _frozen_modules(self) -> list[nn.Module]:
        if self.frozen_stages < 0:
            return []
        k = self.frozen_stages
        return [self.patch_embed, *self.layers[:k], *self.out_norms[:k]]

    def _freeze(self) -> None:
        for module in self._frozen_modules():
            module.eval()
            module.requires_grad_(False)

    def train(self, mode: bool = True) -> "SwinTransformer":
        """Set training mode; frozen stages (``frozen_stages``) stay in eval mode."""
        super().train(mode)
        for module in self._frozen_modules():
            module.eval()
        return self

    # --- timm model interface -------------------------------------------------------------------

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Relative position bias parameters (tables or CPB MLPs) are excluded from weight decay."""
        return {n for n, _ in self.named_parameters() if ".rel_pos." in n}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        return dict(
            stem=r"^patch_embed",
            blocks=r"^(?:layers|out_norms)\.(\d+)"
            if coarse
            else [
                (r"^layers\.(\d+)\.downsample", (0,)),
                (r"^layers\.(\d+)\.blocks\.(\d+)", None),
                (r"^out_norms\.(\d+)", (99998,)),
                (r"^norm", (99999,)),
            ],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        for stage in self.layers:
            stage.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """New classifier of ``num_classes`` outputs (0: none) on the model's device and dtype, in its training mode."""
        self.num_classes = num_classes
        if global_pool is not None:
            self.global_pool = global_pool
        ref = self.patch_embed.proj.weight
        # a new head rather than ClassifierHead.reset, whose in_features/device arguments older timm lacks
        self.head = ClassifierHead(
            self.num_features,
            num_classes,
            pool_type=self.global_pool,
            drop_rate=self.head.drop.p,
            input_fmt="NHWC",
            device=ref.device,
            dtype=ref.dtype,
        ).train(self.training)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Run the network and collect stage outputs.

        Args:
            x: images [B, C, H, W].
            indices: stages to return: the last n if int, all if None, else these indices.
            norm: apply the final norm to the last stage's output when it is returned.
            stop_early: stop after the last requested stage.
            output_fmt: ``"NCHW"`` or ``"NHWC"`` for the returned maps.
            intermediates_only: return only the list of maps.

        Returns:
            List of maps, or (final features [B, H, W, C], list of maps).
        """
        if output_fmt not in ("NCHW", "NHWC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
        check_image_input(x, self.in_chans, self.patch_size, self.patch_embed.proj.weight.dtype)
        if not torch.jit.is_scripting():
            check_feature_indices(indices, len(self.layers))
        take_indices, max_index = feature_take_indices(len(self.layers), indices)
        last = len(self.layers) - 1
        stages = self.layers if torch.jit.is_scripting() or not stop_early else self.layers[: max_index + 1]
        intermediates = []
        batch = x.shape[0]
        x = self.patch_embed(self._patch_input(x))
        for i, (stage, out_norm) in enumerate(zip(stages, self.out_norms)):  # noqa: B905 (TorchScript has no strict=)
            x = stage(x)
            if i in take_indices:
                y = self.norm(x) if norm and i == last else out_norm(x)
                intermediates.append((y.permute(0, 3, 1, 2).contiguous() if output_fmt == "NCHW" else y)[:batch])
        if intermediates_only:
            return intermediates
        if len(stages) == len(self.layers):
            x = self.norm(x)
        return x[:batch], intermediates

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the stages after the last of ``indices`` (and the final norm / head if asked)."""
        check_feature_indices(indices, len(self.layers))
        take_indices, max_index = feature_take_indices(len(self.layers), indices)
        pruned_end = max_index < len(self.layers) - 1
        self.layers = self.layers[: max_index + 1]
        self.out_norms = self.out_norms[: max_index + 1]
        if prune_norm or pruned_end:
            self.norm = nn.Identity()
        if pruned_end:
            self.num_features = self.head_hidden_size = self.feature_info[max_index]["num_chs"]
        if prune_head or pruned_end:
            self.reset_classifier(0, "")
        return take_indices

    def _patch_input(self, x: torch.Tensor) -> torch.Tensor:
        """Images as the patch embedding takes them: at least one (an empty batch runs one blank image), and
        without the remainder past the last whole patch when ``mask_padding=False`` (torchvision's rule)."""
        x = at_least_one_image(x)
        return x if self.mask_padding else crop_to_patches(x, self.patch_size)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """images [B, C, H, W] -> final normalised map [B, H/32, W/32, C] (for patch 4)."""
        check_image_input(x, self.in_chans, self.patch_size, self.patch_embed.proj.weight.dtype)
        batch = x.shape[0]
        x = self.patch_embed(self._patch_input(x))  # (B, H/4, W/4, C)
        x = self.layers(x)
        return self.norm(x)[:batch]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=True) if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _init_weights(module: nn.Module) -> None:
    """Reference initialisation: truncated normal (std .02) linear weights, zero biases."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
