"""scripts/visualize.py: bias heat maps and feature-level means, as PNG."""

import contextlib
import errno
import io
import re
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torchvision.transforms.functional as TF
from matplotlib.backends.backend_agg import FigureCanvasAgg
from pico import PICO
from PIL import Image
from scriptkit import run_script

from swinlite.visualize import bias_figure, bias_tables, feature_means, write_pngs

V2_PICO = "swinlite_v2_pico_patch2_window4_32"
STAGE_SHAPES = [(1, 1, 7, 7), (1, 2, 7, 7), (2, 4, 7, 7), (1, 8, 7, 7)]  # (blocks, heads, 2*4-1, 2*4-1)


def _undrawn_bias_pngs(model) -> dict[str, bytes]:
    """A stand-in for the bias maps (drawn in test_script_writes_pngs), for the tests of what is around them: each
    stage's file name and a few bytes."""
    return {f"bias_stage{i}.png": f"stage {i}".encode() for i in range(len(model.layers))}


@pytest.mark.parametrize(
    "name, kwargs, shapes",
    [
        (PICO, {}, STAGE_SHAPES),  # Swin's learned table
        (PICO, {"rel_pos": "cpb"}, STAGE_SHAPES),  # V1 blocks with Swin-V2's continuous position bias
        (V2_PICO, {}, [*STAGE_SHAPES[:3], (1, 8, 3, 3)]),  # Swin-V2 (last stage: a 2x2 window, its whole map)
    ],
)
def test_bias_table_images_hold_the_bias_between_offset_tokens(name, kwargs, shapes):
    model = timm.create_model(name, **kwargs)
    tables = bias_tables(model)
    assert [tuple(t.shape) for t in tables] == shapes
    rel_pos = model.layers[2].blocks[1].attn.rel_pos
    bias = rel_pos().detach()  # (heads, N, N) over a 4x4 window, the module's own lookup
    for q, k in [((0, 0), (3, 2)), ((3, 1), (0, 3)), ((2, 2), (2, 2))]:
        dy, dx = q[0] - k[0], q[1] - k[1]
        want = bias[:, q[0] * 4 + q[1], k[0] * 4 + k[1]]
        torch.testing.assert_close(tables[2][1, :, dy + 3, dx + 3], want, rtol=0, atol=0)


@pytest.mark.parametrize(("name", "stage"), [(PICO, 0), (V2_PICO, 0), (V2_PICO, 1)])
def test_a_narrow_grids_title_lies_within_its_figure(name, stage):
    # Before, the title was one line whatever the figure's width: a 1-head stage's read "stage 0: relative position
    # bias (row: dy, colum" and V2's 2-head stage 1 was cut at both ends.
    model = timm.create_model(name)
    tables = bias_tables(model)[stage][:, :2]  # (blocks, heads, ., .): 1 or 2 heads, the narrowest grids
    fig = bias_figure(tables, stage, continuous=name == V2_PICO)
    FigureCanvasAgg(fig)  # the canvas savefig draws on
    fig.draw_without_rendering()  # the layout savefig gives
    renderer = fig.canvas.get_renderer()
    (title,) = [text for text in fig.texts if text.get_text() == fig.get_suptitle()]
    box = title.get_window_extent(renderer)
    assert title.get_text().startswith(f"stage {stage}: ") and title.get_text().endswith("dx)")
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0 and box.y1 <= fig.bbox.height, (box, fig.bbox)
    for ax in fig.axes[:-1]:  # the heat maps' titles stay below it
        assert ax.title.get_window_extent(renderer).y1 <= box.y0


def test_a_signed_tables_colours_are_centred_on_zero():
    tables = bias_tables(timm.create_model(PICO))[0]  # (blocks, heads, 7, 7), not symmetric about 0
    vmax = float(tables.abs().max())
    fig = bias_figure(tables, 0, continuous=False)
    assert {ax.images[0].get_clim() for ax in fig.axes[:-1]} == {(-vmax, vmax)}  # each heat map's; then the bar


def test_feature_means_are_channel_means_of_each_level():
    """The image normalised with the model's own mean and std. A model in training mode came back in eval mode; each
    module is back in its own (a frozen stage in eval)."""
    model = timm.create_model(PICO, frozen_stages=1)  # training mode, its first stage kept in eval mode
    mean, std = (0.2, 0.3, 0.4), (0.1, 0.2, 0.3)
    model.pretrained_cfg = {**model.pretrained_cfg, "mean": mean, "std": std}
    modes, seen = [m.training for m in model.modules()], []
    model.layers[1].register_forward_pre_hook(lambda module, args: seen.append(module.training))
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 50, 3), dtype=np.uint8))
    means = feature_means(model, image)
    assert [tuple(m.shape) for m in means] == [(15, 25), (8, 13), (4, 7), (2, 4)]
    assert seen == [False] and [m.training for m in model.modules()] == modes
    x = (TF.to_tensor(image) - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]  # (3, H, W)
    with torch.no_grad():
        levels = model.eval().forward_intermediates(x[None], intermediates_only=True)
    for got, level in zip(means, levels, strict=True):
        torch.testing.assert_close(got, level[0].mean(dim=0))


def test_the_input_panel_shows_the_image_the_model_saw(load_script, tmp_path, monkeypatch, initial_weights):
    """It showed the original, titled "input 37x53", beside the feature maps of its 97x131 resize."""
    import swinlite.visualize

    image = tmp_path / "img.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 255, (37, 53, 4), dtype=np.uint8)).save(image)  # RGBA
    figures, png_bytes = [], swinlite.visualize.png_bytes
    monkeypatch.setattr(swinlite.visualize, "png_bytes", lambda fig: figures.append(fig) or png_bytes(fig))
    monkeypatch.setattr(swinlite.visualize, "bias_pngs", _undrawn_bias_pngs)
    argv = ["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--image", str(image), "--size", "97", "131"]
    load_script("visualize").main([*argv, "--output", str(tmp_path / "p")])
    (shown,) = [fig.axes[0] for fig in figures]  # features.png's first panel
    assert shown.get_title() == "input 97x131 (from 37x53)"
    assert shown.images[0].get_array().shape == (97, 131, 3)


def test_script_writes_pngs(load_script, tmp_path):
    image_path = tmp_path / "img.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (40, 60, 3), dtype=np.uint8)).save(image_path)
    ckpt = tmp_path / "pico.pth"
    torch.save(timm.create_model(PICO).state_dict(), ckpt)
    argv = ["--model", PICO, "--checkpoint", str(ckpt), "--image", str(image_path), "--output", str(tmp_path / "p")]
    paths = load_script("visualize").main(argv)
    assert [p.name for p in paths] == [f"bias_stage{i}.png" for i in range(4)] + ["features.png"]
    for p in paths:
        with Image.open(p) as png:
            assert png.format == "PNG" and png.width > 100 and png.height > 100
            assert np.asarray(png.convert("L")).std() > 0  # not a blank canvas


def test_the_temporary_file_of_a_write_a_kill_broke_off_goes_with_the_next(tmp_path):
    """It stayed beside bias_stage0.png, one more per kill; another name's is not this run's to remove."""
    (tmp_path / ".bias_stage0.png.tmpab12cd34").write_bytes(b"half a PNG")
    (tmp_path / ".notes.txt.tmpab12cd34").write_bytes(b"the user's")
    assert write_pngs({"bias_stage0.png": b"stage 0"}, tmp_path, made=False) == [tmp_path / "bias_stage0.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.txt.tmpab12cd34", "bias_stage0.png"]


def test_script_bad_input(load_script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_script("visualize").main(["--model", PICO, "--image", str(tmp_path / "no.png"), "--output", "x"])
    assert "is not a file" in capsys.readouterr().err


def test_a_size_without_an_image_is_refused(tmp_path, capsys):
    """It was accepted and did nothing: the bias maps do not depend on the input size."""
    code = run_script("visualize", ["--model", PICO, "--output", tmp_path / "p", "--size", 64, 64])
    assert code == 2 and "--size is the input size of --image's feature plot" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_size_below_one_patch_is_one_error_line_before_any_work(tmp_path, capsys, monkeypatch, initial_weights):
    # Before, --size 1 1 reached the forward pass after the bias maps were drawn and failed there with "expected a
    # floating-point tensor of shape (B, 3, H, W)...", naming no option.
    import swinlite.visualize

    image = tmp_path / "img.png"
    Image.new("RGB", (24, 16), (200, 30, 30)).save(image)
    monkeypatch.setattr(swinlite.visualize, "bias_pngs", lambda model: pytest.fail("drew before checking --size"))
    argv = ["--model", PICO, "--checkpoint", initial_weights(PICO), "--image", image, "--output", tmp_path / "p"]
    code = run_script("visualize", [*argv, "--size", 1, 1])
    err = capsys.readouterr().err
    assert code == 2 and err == f"error: --size 1 1 is smaller than one patch of {PICO}: expected H >= 2, W >= 2\n"
    assert not (tmp_path / "p").exists()


def _killed_in_the_second_picture(monkeypatch):
    """Figure.savefig writes half of its second PNG and is killed there."""
    from matplotlib.figure import Figure

    calls, savefig = [], Figure.savefig

    def half_then_killed(fig, target, **kwargs):
        calls.append(target)
        if len(calls) < 2:
            return savefig(fig, target, **kwargs)
        whole = io.BytesIO()
        savefig(fig, whole, **kwargs)
        with open(target, "wb") if isinstance(target, (str, Path)) else contextlib.nullcontext(target) as f:
            f.write(whole.getvalue()[:500])
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", half_then_killed)
    return KeyboardInterrupt


def _disk_full_at_the_second_file(monkeypatch):
    import swinlite.visualize

    calls, write = [], swinlite.visualize.atomic_write_bytes

    def full(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write(path, data)

    monkeypatch.setattr(swinlite.visualize, "atomic_write_bytes", full)
    monkeypatch.setattr(swinlite.visualize, "bias_pngs", _undrawn_bias_pngs)  # what is written does not matter
    monkeypatch.setattr(swinlite.visualize, "features_png", lambda model, image, size, levels: b"features")
    return OSError


FAILURES = {
    "image_below_one_patch": lambda monkeypatch: ValueError,  # with --size 1 1: refused before any drawing
    "killed_mid_drawing": _killed_in_the_second_picture,
    "disk_full": _disk_full_at_the_second_file,
}


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_run_leaves_no_folder_and_no_partial_png(load_script, tmp_path, monkeypatch, failure, initial_weights):
    """Once it left the folders it made, with the PNGs drawn so far and a truncated one under its name."""
    image = tmp_path / "img.png"
    Image.new("RGB", (24, 16), (200, 30, 30)).save(image)
    size = ["--size", "1", "1"] if failure == "image_below_one_patch" else []
    error = FAILURES[failure](monkeypatch)
    with pytest.raises(error):
        load_script("visualize").main(["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--image",
                                       str(image), "--output", str(tmp_path / "o" / "p"), *size])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img.png"]


def test_a_failed_write_into_a_folder_that_was_there_keeps_the_pngs_written(
    load_script, tmp_path, monkeypatch, initial_weights
):
    """The whole PNGs written before the disk filled stay (they may have replaced an earlier run's, which removing
    them would not bring back); the one it failed on is not there in part."""
    out = tmp_path / "p"
    out.mkdir()
    with pytest.raises(_disk_full_at_the_second_file(monkeypatch)):
        load_script("visualize").main(["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--output",
                                       str(out)])  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {"bias_stage0.png": b"stage 0"}


def test_a_second_run_into_the_folder_is_refused_or_replaces_every_earlier_png(
    load_script, tmp_path, initial_weights, monkeypatch
):
    """A second run without --image replaced bias_stage*.png and left the first run's features.png beside them: one
    folder, two checkpoints. The run that replaces them draws Swin-V2's continuous position bias as V1's table
    (refused once: "bias tables need rel_pos='table'")."""
    import swinlite.visualize

    image = tmp_path / "img.png"
    Image.new("RGB", (24, 16), (200, 30, 30)).save(image)
    out = tmp_path / "p"
    pico = ("--model", PICO, "--checkpoint", initial_weights(PICO))
    v2 = ("--model", V2_PICO, "--checkpoint", initial_weights(V2_PICO))
    with monkeypatch.context() as undrawn:  # the first run's pictures: their names, not their drawing
        undrawn.setattr(swinlite.visualize, "bias_pngs", _undrawn_bias_pngs)
        undrawn.setattr(swinlite.visualize, "features_png", lambda model, image, size, levels: b"features")
        load_script("visualize").main([*map(str, pico), "--image", str(image), "--output", str(out)])
    before = {p: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ValueError, match=r"--output .*p holds an earlier run's bias_stage0.png, .*features.png: pass "
                                         r"--overwrite"):  # fmt: skip
        load_script("visualize").main([*map(str, v2), "--output", str(out)])
    assert {p: p.read_bytes() for p in out.iterdir()} == before
    paths = load_script("visualize").main([*map(str, v2), "--output", str(out), "--overwrite"])
    assert sorted(out.iterdir()) == sorted(paths) == [out / f"bias_stage{i}.png" for i in range(4)]
    with Image.open(paths[0]) as png:
        assert png.format == "PNG" and np.asarray(png.convert("L")).std() > 0


def test_an_image_that_does_not_decode_is_named(load_script, tmp_path, initial_weights):
    """A truncated JPEG gave 'error: image file is truncated (7 bytes not processed)', naming no file."""
    image = tmp_path / "cut.jpg"
    Image.fromarray(np.random.default_rng(2).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(image)
    image.write_bytes(image.read_bytes()[:-200])
    with pytest.raises(
        ValueError, match=f"--image {re.escape(str(image))}: unreadable \\(OSError: image file is trunc"
    ):
        load_script("visualize").main(["--model", PICO, "--checkpoint", str(initial_weights(PICO)), "--image",
                                       str(image), "--output", str(tmp_path / "p")])  # fmt: skip
    assert not (tmp_path / "p").exists()
