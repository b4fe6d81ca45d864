"""swinlite.fpn: swinlite + FPN as the backbone of torchvision's detectors, on synthetic images and boxes."""

import numpy as np
import pytest
import timm
import torch
from pico import PICO
from timm.models._features import FeatureHookNet
from torchvision.models.detection import FCOS, FasterRCNN, MaskRCNN, RetinaNet
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor

from swinlite.fpn import SwinFPNBackbone, build_fpn_backbone

SIZES = dict(min_size=64, max_size=96)
# few proposals and sampled RoIs keep a CPU step short; the mask head is narrowed to the FPN width below
FAST = dict(
    rpn_pre_nms_top_n_train=64,
    rpn_post_nms_top_n_train=32,
    rpn_pre_nms_top_n_test=64,
    rpn_post_nms_top_n_test=32,
    box_batch_size_per_image=16,
    **SIZES,
)


def _targets(masks: bool) -> list[dict[str, torch.Tensor]]:
    """Two images' worth of boxes of different sizes (x1, y1, x2, y2 in pixels of 80x72 / 64x96 images)."""
    boxes = [torch.tensor([[4.0, 6.0, 60.0, 50.0], [30.0, 30.0, 38.0, 41.0]]), torch.tensor([[10.0, 2.0, 30.0, 90.0]])]
    out = []
    for b, (h, w) in zip(boxes, [(80, 72), (64, 96)], strict=True):
        t = {"boxes": b, "labels": torch.randint(1, 3, (len(b),))}
        if masks:
            m = torch.zeros(len(b), h, w, dtype=torch.uint8)
            for k, (x1, y1, x2, y2) in enumerate(b.int().tolist()):
                m[k, y1:y2, x1:x2] = 1
            t["masks"] = m
        out.append(t)
    return out


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_backbone_outputs_fpn_levels(name):
    backbone = build_fpn_backbone(name, fpn_channels=16).eval()
    out = backbone(torch.randn(1, 3, 50, 70))
    assert backbone.out_channels == 16
    assert list(out) == ["0", "1", "2", "3", "pool"]
    # pico: patch 2, so strides 2, 4, 8, 16, and the pool level halves the last
    assert [tuple(v.shape[-2:]) for v in out.values()] == [(25, 35), (13, 18), (7, 9), (4, 5), (2, 3)]
    assert all(v.shape[:2] == (1, 16) for v in out.values())


@pytest.mark.parametrize(
    ("name", "out_indices", "extra_levels", "strides"),
    [
        (PICO, (0, 1, 2, 3), "pool", [2, 4, 8, 16, 32]),  # patch 2: 4 * 2**i was [4, 8, 16, 32, 64]
        ("swinlite_tiny_patch4_window7_224", (1, 2, 3), "p6p7", [8, 16, 32, 64, 128]),  # was [4, 8, 16, 32, 64]
    ],
)
def test_a_bodys_own_strides_are_the_default(name, out_indices, extra_levels, strides):
    tiny = dict(embed_dim=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1)) if "tiny" in name else {}
    body = timm.create_model(name, features_only=True, out_indices=out_indices, **tiny)
    backbone = SwinFPNBackbone(body, body.feature_info.channels(), 16, extra_levels=extra_levels).eval()
    assert backbone.strides == strides
    with torch.no_grad():
        maps = backbone(torch.randn(1, 3, 256, 256))
    assert [256 // m.shape[-1] for m in maps.values()] == strides  # measured
    with pytest.raises(ValueError, match="strides must be given for a body without feature_info"):
        SwinFPNBackbone(torch.nn.Identity(), [16, 32])


@pytest.mark.parametrize("detector", [FasterRCNN, MaskRCNN])
def test_detector_train_step_and_eval(detector):
    torch.manual_seed(0)
    backbone = build_fpn_backbone(PICO, fpn_channels=32, frozen_stages=1)
    kwargs = dict(FAST, num_classes=3)
    if detector is MaskRCNN:
        kwargs.update(box_predictor=FastRCNNPredictor(1024, 3), num_classes=None)
        kwargs.update(mask_head=MaskRCNNHeads(32, [32, 32], 1), mask_predictor=MaskRCNNPredictor(32, 16, 3))
    model = detector(backbone, **kwargs)
    images = [torch.rand(3, 80, 72), torch.rand(3, 64, 96)]
    model.train()
    losses = model(images, _targets(masks=detector is MaskRCNN))
    loss = sum(losses.values())
    assert torch.isfinite(loss)
    loss.backward()
    swin = backbone.body.model
    assert all(p.grad is None for p in swin.layers[0].parameters()), "stage 0 is frozen"
    assert not swin.layers[0].training and swin.layers[1].training
    for stage in swin.layers[1:]:
        grads = [p.grad for p in stage.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert sum(g.abs().sum() for g in grads) > 0
    model.eval()
    with torch.no_grad():
        detections = model([torch.rand(3, 70, 90)])
    assert set(detections[0]) >= {"boxes", "scores", "labels"}
    assert detections[0]["boxes"].shape[1] == 4


def test_backbone_and_a_faster_rcnn_on_it_script():
    """torch.jit.script as torchvision's BackboneWithFPN (the forward's OrderedDict[...] annotation failed)."""
    torch.manual_seed(0)
    backbone = build_fpn_backbone(PICO, fpn_channels=16).eval()
    x = torch.randn(2, 3, 50, 70)
    with torch.no_grad():
        maps, eager = torch.jit.script(backbone)(x), backbone(x)
    assert list(maps) == list(eager) == ["0", "1", "2", "3", "pool"]
    for m, e in zip(maps.values(), eager.values(), strict=True):
        torch.testing.assert_close(m, e, rtol=0, atol=1e-5)
    model = FasterRCNN(backbone, num_classes=3, **SIZES).eval()
    images = [torch.rand(3, 64, 80)]
    with torch.no_grad():
        _, (scripted,) = torch.jit.script(model)(images)
        (eager,) = model(images)
    assert len(eager["boxes"]) > 0
    for key in ("boxes", "scores", "labels"):
        torch.testing.assert_close(scripted[key], eager[key], rtol=0, atol=1e-4)


@pytest.mark.parametrize("detector", [RetinaNet, FCOS])
def test_retinanet_and_fcos_eval_forward_on_p3_to_p7(detector):
    """docs/detection.md's backbone for them: levels 1-3 and P6, P7 (four levels gave six maps, an assertion)."""
    backbone = build_fpn_backbone(PICO, out_indices=(1, 2, 3), extra_levels="p6p7", fpn_channels=64)
    model = detector(backbone, num_classes=3, **SIZES).eval()
    with torch.no_grad():
        out = model([torch.rand(3, 64, 80)])
    assert out[0]["boxes"].shape[1] == 4


@pytest.mark.parametrize(("out_indices", "channels"), [((1, 3), [64, 256]), ((0, 2), [32, 128])])
def test_checkpoint_is_loaded_and_checked(tmp_path, out_indices, channels):
    """Levels that end before the last stage (0, 2) take a whole model's file, as timm's features_only does: the body
    is pruned of stage 3, whose weights the file holds (they were refused as keys that did not map)."""
    source = timm.create_model(PICO)
    path = tmp_path / "pico.pth"
    torch.save({"model": source.state_dict()}, path)
    backbone = build_fpn_backbone(PICO, out_indices=out_indices, fpn_channels=8, checkpoint=path)
    swin = backbone.body.model
    assert len(swin.layers) == out_indices[-1] + 1 and backbone.body.feature_info.channels() == channels
    for got, want in zip(swin.layers, source.layers, strict=False):
        torch.testing.assert_close(got.blocks[0].attn.qkv.weight, want.blocks[0].attn.qkv.weight, rtol=0, atol=0)
    nano = tmp_path / "nano.pth"
    torch.save(timm.create_model("swinlite_nano_patch2_window4_64").state_dict(), nano)
    with pytest.raises(ValueError, match="did not map onto SwinTransformer"):
        build_fpn_backbone(PICO, checkpoint=nano)


@pytest.mark.parametrize(("saved", "fpn_prefix"), [("detector", r"backbone\.fpn\."), ("backbone", r"fpn\.")])
def test_a_detectors_fpn_weights_load_where_they_fit(tmp_path, saved, fpn_prefix):
    """A torchvision detector's file (backbone.body.model.*, backbone.fpn.*, heads) gave its Swin and, silently, a
    fresh FPN: other maps; the backbone's own state dict (body.model.*, fpn.*) was refused ("94 checkpoint keys did not
    map onto SwinTransformer"). An FPN of another width does not fit: the Swin loads, the FPN starts fresh, warned."""
    torch.manual_seed(0)
    backbone = build_fpn_backbone(PICO, fpn_channels=8).eval()
    path = tmp_path / f"{saved}.pth"
    model = FasterRCNN(backbone, num_classes=3, **SIZES) if saved == "detector" else backbone
    torch.save(model.state_dict(), path)
    rebuilt, x = build_fpn_backbone(PICO, fpn_channels=8, checkpoint=path).eval(), torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        for got, want in zip(rebuilt(x).values(), backbone(x).values(), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    fits = rf"its FPN weights \({fpn_prefix}\*\) do not fit .*; the FPN starts fresh: shape \(file vs model\): "
    with pytest.warns(UserWarning, match=fits + r"inner_blocks\.0\.0\.weight \(8, 32, 1, 1\) vs \(16, 32, 1, 1\)"):
        wider = build_fpn_backbone(PICO, fpn_channels=16, checkpoint=path)
    torch.testing.assert_close(wider.body.model.state_dict(), backbone.body.model.state_dict(), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(out_indices=(0, 4)), r"out_indices must be levels in 0\.\.3"),
        (dict(out_indices=(True, 2)), r"out_indices must be levels in 0\.\.3, .*got \(True, 2\)$"),
        (dict(out_indices=()), r"out_indices must be levels in 0\.\.3"),
        # (2, 1) failed only in forward (a channel RuntimeError in the FPN); (1, 1, 2) returned 3 maps, strides said 4
        (dict(out_indices=(2, 1)), r"out_indices must be levels in 0\.\.3, strictly increasing .*got \(2, 1\)$"),
        (dict(out_indices=(1, 1, 2)), r"strictly increasing \(each level once, finest first\), got \(1, 1, 2\)$"),
        (dict(frozen_stages=5), r"frozen_stages must be in -1\.\.4"),
        # each failed in forward deep in torchvision, or at the build with an unrelated message
        *[
            (dict(fpn_channels=bad), rf"fpn_channels must be a whole number of at least 1, got {shown}$")
            for bad, shown in [(0, "0"), (-5, "-5"), (2.5, r"2\.5"), ("8", "'8'"), (True, "True")]
        ],
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_fpn_backbone(PICO, **kwargs)


@pytest.mark.parametrize(("bad", "shown"), [(0, "0"), (-5, "-5"), (2.5, r"2\.5"), (True, "True")])
def test_the_class_checks_its_fpn_channels(bad, shown):
    """SwinFPNBackbone built directly took them: 0 built, -5 failed in torchvision's conv, 2.5 with a TypeError."""
    body = timm.create_model(PICO, features_only=True)
    with pytest.raises(ValueError, match=rf"fpn_channels must be a whole number of at least 1, got {shown}$"):
        SwinFPNBackbone(body, body.feature_info.channels(), bad)


def test_numpy_out_indices_are_levels():
    """np.arange(1, 4) was refused as not levels in 0..3, where timm's features_only takes it."""
    backbone = build_fpn_backbone(PICO, out_indices=np.arange(1, 4), fpn_channels=8)
    assert backbone.strides == [4, 8, 16, 32] and backbone.body.feature_info.channels() == [64, 128, 256]


@pytest.mark.parametrize(
    ("make_body", "message"),
    [
        (
            lambda: timm.create_model(PICO, features_only=True, output_fmt="NHWC"),
            r"the body records output_fmt='NHWC': ",
        ),
        # timm's hook wrapper given output_fmt='NCHW' records it but returns the stages' NHWC maps (swinlite's builder
        # refuses the pair; timm's class takes it): a conv's channel error in the FPN
        (
            lambda: FeatureHookNet(timm.create_model(PICO), out_indices=(0, 1, 2, 3), output_fmt="NCHW"),
            r"the body's map 0 has shape \[1, 16, 16, 32\], not \[B, 32, H, W\]: ",
        ),
    ],
    ids=["records-nhwc", "hook-records-nchw"],
)
def test_an_nhwc_body_is_refused(make_body, message):
    body = make_body()
    advice = r"NCHW maps expected \(timm features_only with output_fmt='NCHW', feature_cls='getter'\)$"
    with pytest.raises(ValueError, match=message + advice):
        SwinFPNBackbone(body, body.feature_info.channels(), 16)(torch.randn(1, 3, 32, 32))


def test_not_a_swinlite_model():
    with pytest.raises(ValueError, match="registered swinlite model"):
        build_fpn_backbone("resnet18")
