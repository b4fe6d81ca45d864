"""scripts/extract_features.py end to end: values, metadata, resume, failures, list input, bad input."""

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from pico import PICO
from PIL import Image
from PIL.PngImagePlugin import PngInfo
from scriptkit import run_script
from torchvision.transforms import functional as TF

from swinlite.features import is_complete_feature_file, load_embeddings, load_features, save_features


@pytest.fixture
def image_folder(tmp_path):
    """ImageFolder layout: two classes, three images of different sizes, one corrupt file."""
    rng = np.random.default_rng(0)
    root = tmp_path / "images"
    for rel, (h, w) in {"cat/a.png": (40, 30), "cat/b.jpg": (25, 50), "dog/c.png": (33, 33)}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(root / rel)
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return root


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A pico (seed 0, eval mode) and its weights file, shared by the module's tests; none changes either."""
    torch.manual_seed(0)
    model = timm.create_model(PICO).eval()
    path = tmp_path_factory.mktemp("checkpoint") / "pico.pth"
    torch.save(model.state_dict(), path)
    return model, path


def _run(load_script, *argv):
    load_script("extract_features").main([*map(str, argv), "--no-progress"])


def test_extracts_resumes_and_lists_failures(load_script, image_folder, checkpoint, tmp_path, capsys):
    model, ckpt = checkpoint
    out = tmp_path / "out"
    args = ("--model", PICO, "--checkpoint", ckpt, "--input", image_folder, "--output", out, "--size", 32, 48)
    _run(load_script, *args, "--batch-size", 2)
    assert "written 3, skipped (already whole) 0, failed 1" in capsys.readouterr().out
    failures = (out / "failures.txt").read_text().splitlines()
    assert len(failures) == 1 and failures[0].startswith(str(image_folder / "dog" / "broken.png"))

    feats = load_features(out / "features" / "cat" / "b.jpg.safetensors")
    assert (feats.source, feats.original_size, feats.input_size, feats.model) == (
        str(image_folder / "cat" / "b.jpg"),
        (25, 50),
        (32, 48),
        PICO,
    )
    assert feats.strides == (2, 4, 8, 16)
    # reference: the same preprocessing by hand and the plain model's stage outputs
    with Image.open(image_folder / "cat" / "b.jpg") as img:
        x = TF.to_tensor(img.convert("RGB").resize((48, 32), Image.Resampling.BICUBIC))
    x = TF.normalize(x, model.pretrained_cfg["mean"], model.pretrained_cfg["std"])[None]
    with torch.no_grad():
        stages, h = [], model.patch_embed(x)
        for stage in model.layers:
            h = stage(h)
            stages.append(h.permute(0, 3, 1, 2)[0])
        logits_input = model.norm(h).mean(dim=(1, 2))[0]
    assert list(feats.maps) == ["stage0", "stage1", "stage2", "stage3"]
    for got, want in zip(feats.maps.values(), stages, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(feats.pooled, logits_input, rtol=1e-5, atol=1e-5)

    vectors, paths = load_embeddings(out / "embeddings.safetensors")
    assert paths == [str(image_folder / p) for p in ("cat/a.png", "cat/b.jpg", "dog/c.png")]
    torch.testing.assert_close(vectors[1], feats.pooled, rtol=0, atol=0)

    # resume: a truncated file (as a kill could leave it without atomic writes) is redone, whole ones skipped
    victim = out / "features" / "dog" / "c.png.safetensors"
    victim.write_bytes(victim.read_bytes()[:100])
    whole = out / "features" / "cat" / "a.png.safetensors"
    mtime = whole.stat().st_mtime_ns
    _run(load_script, *args)
    assert "written 1, skipped (already whole) 2, failed 1" in capsys.readouterr().out
    assert is_complete_feature_file(victim) and whole.stat().st_mtime_ns == mtime
    assert load_embeddings(out / "embeddings.safetensors")[1] == paths


def test_list_input_and_float16(load_script, image_folder, checkpoint, tmp_path, capsys):
    """An image listed twice (spelled otherwise too) is extracted once: it was extracted, counted, embedded twice."""
    listing = tmp_path / "list.txt"
    listing.write_text(
        f"images/cat/a.png\n\n{image_folder / 'dog' / 'c.png'}\nimages/dog/broken.png\n./images/cat/a.png\n"
    )
    out = tmp_path / "out16"
    _run(load_script, "--model", PICO, "--checkpoint", checkpoint[1], "--input", listing, "--output", out, "--dtype",
         "float16")  # fmt: skip
    assert "written 2, skipped (already whole) 0, failed 1" in capsys.readouterr().out
    feats = load_features(out / "features" / "cat" / "a.png.safetensors")  # relative to the common folder
    assert feats.maps["stage0"].dtype == torch.float16 and feats.pooled.dtype == torch.float32
    assert feats.input_size == (32, 32) and feats.maps["stage0"].shape == (32, 16, 16)
    assert "broken.png" in (out / "failures.txt").read_text()
    assert len(load_embeddings(out / "embeddings.safetensors")[1]) == 2


def test_settings_beside_no_features_do_not_block_the_rerun(load_script, image_folder, checkpoint, tmp_path, capsys):
    """A run that failed before its first features (a --size below one patch once did, after writing settings.json)
    left its settings, and the corrected rerun was refused as made with other settings."""
    out = tmp_path / "out"
    out.mkdir()
    failed = {"model": PICO, "checkpoint_sha256": None, "input_size": [1, 1], "dtype": "float32"}
    (out / "settings.json").write_text(json.dumps(failed))
    _run(load_script, "--model", PICO, "--checkpoint", checkpoint[1], "--input", image_folder, "--output", out)
    assert "written 3, skipped (already whole) 0, failed 1" in capsys.readouterr().out
    assert json.loads((out / "settings.json").read_text())["input_size"] == [32, 32]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"settings.json": '{"mine": 1}'}, "holds a settings.json that no feature extraction wrote"),
        ({"settings.json": "not json"}, "holds a settings.json that no feature extraction wrote"),
        ({"failures.txt": "my notes", "notes.txt": "kept"}, "holds failures.txt but no settings.json"),
        ({"embeddings.safetensors": "my vectors"}, "holds embeddings.safetensors but no settings.json"),
    ],
)
def test_files_of_its_names_that_no_extraction_wrote_are_refused(
    load_script, image_folder, checkpoint, tmp_path, files, message
):
    """The user's own settings.json, failures.txt or embeddings.safetensors in --output were replaced without a word
    (a settings file beside no features is replaced only where it is an extraction's)."""
    out = tmp_path / "out"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        _run(load_script, "--model", PICO, "--checkpoint", checkpoint[1], "--input", image_folder, "--output", out)
    assert _snapshot(out) == {out / name: text.encode() for name, text in files.items()}  # nothing written or lost


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", PICO, "--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--model", PICO, "--dtype", "int8"], "invalid choice"),
    ],
)
def test_bad_arguments(load_script, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        load_script("extract_features").main([*argv, "--input", str(tmp_path), "--output", str(tmp_path / "o")])
    assert message in capsys.readouterr().err


def test_bad_input_paths(load_script, image_folder, tmp_path):
    with pytest.raises(ValueError, match=r"unknown model \(expected swinlite_\*\) 'resnet50'"):
        _run(load_script, "--model", "resnet50", "--input", tmp_path, "--output", tmp_path / "o")
    with pytest.raises(ValueError, match="an image folder, an image file or a text file"):
        _run(load_script, "--model", PICO, "--input", tmp_path / "nope", "--output", tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no image files"):
        _run(load_script, "--model", PICO, "--input", tmp_path / "empty", "--output", tmp_path / "o")
    # paths relative to the working folder, not the list's: every image failed, the run exited 0
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "list.txt").write_text("images/cat/a.png\n")
    with pytest.raises(ValueError, match=r"names 1 paths that are not image files, e.g. .*lists/images/cat/a.png' "
                                         r"\(not there; a relative path is read from the list's folder"):  # fmt: skip
        _run(load_script, "--model", PICO, "--input", tmp_path / "lists" / "list.txt", "--output", tmp_path / "o")
    (tmp_path / "lists" / "list.txt").write_text(f"{image_folder}\n")  # a folder, not a file: named as one
    with pytest.raises(ValueError, match=r"names 1 paths that are not image files, e.g. .*images' \(a folder; "):
        _run(load_script, "--model", PICO, "--input", tmp_path / "lists" / "list.txt", "--output", tmp_path / "o")


def _snapshot(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _another_folder_same_names(image_folder, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(image_folder, other)
    Image.new("RGB", (40, 30), (10, 200, 30)).save(other / "cat" / "a.png")  # another image under the same name
    return other, "cat/a.png.safetensors was made from"


def _a_folder_sharing_one_name(image_folder, tmp_path):
    other = tmp_path / "other"
    (other / "cat").mkdir(parents=True)
    Image.new("RGB", (20, 20), (10, 200, 30)).save(other / "cat" / "a.png")
    Image.new("RGB", (20, 20), (90, 20, 30)).save(other / "new.png")
    return other, "cat/a.png.safetensors was made from"


def _a_folder_sharing_no_name(image_folder, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    Image.new("RGB", (20, 20), (90, 20, 30)).save(other / "new.png")
    return other, "which is not among the images of this --input"


def _an_image_replaced_in_place(image_folder, tmp_path):
    Image.new("RGB", (40, 30), (10, 200, 30)).save(image_folder / "cat" / "a.png")
    return image_folder, "which has changed since"


def _an_image_replaced_keeping_its_size_and_time(image_folder, tmp_path):
    """Another image padded to the old file's byte count (a PNG text chunk), its time set back: as ``cp -p`` of
    another BMP of the same size leaves it. Skipped before, with the old image's features."""
    path = image_folder / "cat" / "a.png"
    old, stat = path.read_bytes(), path.stat()
    Image.new("RGB", (40, 30), (10, 200, 30)).save(path)
    info = PngInfo()
    info.add_text("p", "x" * (len(old) - path.stat().st_size - 14))  # a tEXt chunk: 12 bytes + key + NUL + text
    Image.new("RGB", (40, 30), (10, 200, 30)).save(path, pnginfo=info)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.read_bytes() != old and (path.stat().st_size, path.stat().st_mtime_ns) == (len(old), stat.st_mtime_ns)
    return image_folder, "which has changed since (its bytes differ)"


def _an_image_removed(image_folder, tmp_path):
    (image_folder / "dog" / "c.png").unlink()
    return image_folder, f"c.png.safetensors was made from {image_folder / 'dog' / 'c.png'}, which is not among"


OTHER_INPUTS = {
    "another_folder_same_names": _another_folder_same_names,
    "a_folder_sharing_one_name": _a_folder_sharing_one_name,
    "a_folder_sharing_no_name": _a_folder_sharing_no_name,
    "an_image_replaced_in_place": _an_image_replaced_in_place,
    "an_image_replaced_keeping_its_size_and_time": _an_image_replaced_keeping_its_size_and_time,
    "an_image_removed": _an_image_removed,
}


@pytest.mark.parametrize("change", OTHER_INPUTS)
def test_a_folder_holding_features_of_other_images_is_refused_unchanged(
    load_script, image_folder, checkpoint, tmp_path, capsys, change
):
    """A second run into the same --output skipped every name that had a whole feature file, whatever image it was
    made from ("written 0, skipped (already whole) 1", embeddings.safetensors listing B/img.png with A's vector), and
    wrote beside features of images no longer in the input: a folder mixing two inputs."""
    out = tmp_path / "out"
    args = ("--model", PICO, "--checkpoint", checkpoint[1], "--output", out, "--size", 32, 32)
    _run(load_script, *args, "--input", image_folder)
    capsys.readouterr()
    before = _snapshot(out)
    source, message = OTHER_INPUTS[change](image_folder, tmp_path)
    with pytest.raises(ValueError, match="holds features of other images") as refused:
        _run(load_script, *args, "--input", source)
    assert message in str(refused.value) and "pass another --output" in str(refused.value)
    assert _snapshot(out) == before  # nothing written, nothing lost


def test_a_resume_with_another_spelling_of_the_input_skips_the_finished_files(
    load_script, image_folder, checkpoint, tmp_path, capsys, monkeypatch
):
    """The image a feature file was made from is compared by its real path: a relative --input, or one through a
    link, names the same images. Each embeddings row names its image as its feature file does (the spelling of the
    run that wrote it): the rebuilt list named every image as the resume spelled --input, so the rows of the files
    kept matched no file's ``source``."""
    out = tmp_path / "out"
    args = ("--model", PICO, "--checkpoint", checkpoint[1], "--output", out)
    _run(load_script, *args, "--input", image_folder)
    (out / "features" / "dog" / "c.png.safetensors").unlink()  # as a kill before its write leaves it
    (tmp_path / "link").symlink_to(image_folder)
    monkeypatch.chdir(tmp_path)
    _run(load_script, *args, "--input", "link")
    assert "written 1, skipped (already whole) 2, failed 1" in capsys.readouterr().out[-200:]
    assert load_features(out / "features" / "dog" / "c.png.safetensors").source == str(Path("link") / "dog" / "c.png")
    sources = [load_features(path).source for path in sorted((out / "features").rglob("*.safetensors"))]
    assert load_embeddings(out / "embeddings.safetensors")[1] == sources
    assert sources[0] == str(image_folder / "cat" / "a.png")  # the first run's spelling, kept


def test_settings_name_the_weights_loaded_though_the_file_is_replaced_after_the_load(
    load_script, image_folder, checkpoint, tmp_path, monkeypatch
):
    """settings.json hashed the checkpoint file as the extraction began, after the model had loaded it: a file replaced
    between (a training run writing a new best.safetensors) was named there beside features of the weights it replaced,
    and a rerun with the new file skipped every image as already whole."""
    import swinlite.extract

    ckpt = Path(shutil.copy(checkpoint[1], tmp_path / "pico.pth"))  # this test replaces the file
    loaded = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    torch.manual_seed(1)
    newer = timm.create_model(PICO).state_dict()
    check_features = swinlite.extract.check_features

    def replaced_meanwhile(*args):
        torch.save(newer, ckpt)  # after the load, before the point the hash was taken
        return check_features(*args)

    monkeypatch.setattr(swinlite.extract, "check_features", replaced_meanwhile)
    out = tmp_path / "out"
    args = ("--model", PICO, "--checkpoint", ckpt, "--input", image_folder, "--output", out)
    _run(load_script, *args)
    assert json.loads((out / "settings.json").read_text())["checkpoint_sha256"] == loaded
    monkeypatch.undo()
    with pytest.raises(ValueError, match="other settings \\(checkpoint_sha256"):  # the new weights: not these features
        _run(load_script, *args)


def test_a_save_for_hf_folders_weights_name_their_model(load_script, image_folder, checkpoint, tmp_path):
    """Its model comes from its config.json, with no --model: settings.json recorded "model": null."""
    timm.models.save_for_hf(checkpoint[0], tmp_path / "shared", safe_serialization=True)
    out = tmp_path / "out"
    weights = tmp_path / "shared" / "model.safetensors"
    _run(load_script, "--checkpoint", weights, "--input", image_folder, "--output", out)
    assert json.loads((out / "settings.json").read_text())["model"].startswith(PICO)


def test_an_image_touched_but_not_changed_is_skipped(load_script, image_folder, checkpoint, tmp_path, capsys):
    """An image is unchanged by its bytes, not its time: a touched one (a later modification time) was refused as
    changed since."""
    out = tmp_path / "out"
    args = ("--model", PICO, "--checkpoint", checkpoint[1], "--output", out, "--input", image_folder)
    _run(load_script, *args)
    for image in image_folder.rglob("*.*"):
        os.utime(image, ns=(image.stat().st_atime_ns, image.stat().st_mtime_ns + 10**10))
    _run(load_script, *args)
    assert "written 0, skipped (already whole) 3, failed 1" in capsys.readouterr().out.splitlines()[-2]


@pytest.mark.parametrize("record", [None, "size_and_time"])
def test_features_of_an_older_swinlite_are_refused_as_uncheckable(
    load_script, image_folder, checkpoint, tmp_path, record
):
    """Written before feature files recorded their image's content hash (no record; or its size and time, which a
    copy keeping both passes): whether the image is unchanged cannot be told, so they are not skipped as if it were."""
    out = tmp_path / "out"
    args = ("--model", PICO, "--checkpoint", checkpoint[1], "--output", out, "--input", image_folder)
    _run(load_script, *args)
    path = out / "features" / "cat" / "a.png.safetensors"
    features, image = load_features(path), image_folder / "cat" / "a.png"
    old = {"path": str(image), "size": image.stat().st_size, "mtime_ns": image.stat().st_mtime_ns}
    save_features(path, features, None if record is None else {"source_file": old})  # the old writers
    # it said the folder "holds features of other images", of the very images it was made from
    uncheckable = (
        rf"^{re.escape(str(out))} holds features that cannot be checked against these images \({re.escape(str(path))} "
        rf"was made from {re.escape(str(image))} by an "
        r"older swinlite, which did not record the image's content hash\): delete those feature files .*the same "
        r"weights give the same features\), or pass another --output$"
    )
    with pytest.raises(ValueError, match=uncheckable):
        _run(load_script, *args)


def test_help_shows_the_defaults(load_script, capsys):
    with pytest.raises(SystemExit):
        load_script("extract_features").parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert all(f"(default: {value}" in shown for value in ("float32)", "16)", "0: in the main process)"))


def test_names_that_printed_alike_get_feature_files_of_their_own(load_script, checkpoint, tmp_path, capsys):
    """The bytes x, 0xff, .png and the name x\\xff.png (a backslash in it) both became features/x\\xff.png.safetensors:
    "written 2", and one vector under both names. A backslash is escaped too (\\x5c); other names are kept."""
    folder = tmp_path / "images"
    folder.mkdir()
    names = [os.fsdecode(b"x\xff.png"), "x\\xff.png", "plain.png"]
    for value, name in enumerate(names):
        Image.new("RGB", (20, 20), (value * 100, 30, 30)).save(folder / name)
    out = tmp_path / "out"
    _run(load_script, "--model", PICO, "--checkpoint", checkpoint[1], "--input", folder, "--output", out)
    assert "written 3, skipped (already whole) 0, failed 0" in capsys.readouterr().out
    files = sorted(p.name for p in (out / "features").iterdir())
    assert files == ["plain.png.safetensors", "x\\x5cxff.png.safetensors", "x\\xff.png.safetensors"]
    vectors, paths = load_embeddings(out / "embeddings.safetensors")
    assert sorted(paths) == sorted(str(folder / name) for name in names)
    assert len({tuple(v.tolist()) for v in vectors}) == 3  # three images, three vectors


def test_a_list_takes_each_line_as_written(load_script, checkpoint, tmp_path, capsys):
    """Lines starting with '#' were dropped and spaces stripped from names: '#1.png' was never read, and 'b.png '
    (a name with a trailing space, not there) was read as b.png. Only the line ending goes; blank lines are skipped."""
    folder = tmp_path / "images"
    folder.mkdir()
    for value, name in enumerate(["#1.png", " lead.png", "b.png"]):
        Image.new("RGB", (20, 20), (value * 100, 30, 30)).save(folder / name)
    listing = tmp_path / "list.txt"
    listing.write_bytes(b"images/#1.png\r\n\n  \nimages/ lead.png\n")
    args = ["--model", PICO, "--checkpoint", checkpoint[1], "--input", listing]
    _run(load_script, *args, "--output", tmp_path / "out")
    assert "written 2, skipped (already whole) 0, failed 0" in capsys.readouterr().out
    _, paths = load_embeddings(tmp_path / "out" / "embeddings.safetensors")
    assert paths == [str(folder / "#1.png"), str(folder / " lead.png")]
    listing.write_text("images/b.png \n")
    with pytest.raises(ValueError, match=r"names 1 paths that are not image files, e.g. '.*images/b.png ' \(not there"):
        _run(load_script, *args, "--output", tmp_path / "out2")


@pytest.mark.parametrize("name", ["cat/b.jpg", "dog/C.PNG"])
def test_one_image_file_is_an_input_as_predict_reads_it(load_script, image_folder, checkpoint, tmp_path, capsys, name):
    """It was refused ("input must be an image folder or a text file of image paths"); a file with an image extension
    (any case) is an image, its feature file named after it."""
    (image_folder / "dog" / "c.png").rename(image_folder / "dog" / "C.PNG")
    out = tmp_path / "out"
    args = ("--model", PICO, "--checkpoint", checkpoint[1], "--input", image_folder / name, "--output", out)
    _run(load_script, *args)
    assert "written 1, skipped (already whole) 0, failed 0" in capsys.readouterr().out
    feats = load_features(out / "features" / f"{Path(name).name}.safetensors")
    assert feats.source == str(image_folder / name)
    assert load_embeddings(out / "embeddings.safetensors")[1] == [str(image_folder / name)]
    _run(load_script, *args)
    assert "written 0, skipped (already whole) 1, failed 0" in capsys.readouterr().out


@pytest.mark.parametrize(("saves", "kept"), [(1, "the 1 image done is kept"), (2, "the 2 images done are kept")])
def test_ctrl_c_says_a_rerun_continues_and_the_rerun_does(image_folder, checkpoint, tmp_path, capsys, saves, kept):
    """It exited 130 saying "interrupted" alone, though a rerun skips the feature files already whole."""
    import swinlite.extract

    save_features, calls = swinlite.extract.save_features, []

    def interrupted_after(*args, **kwargs):
        if len(calls) == saves:
            raise KeyboardInterrupt
        calls.append(save_features(*args, **kwargs))

    out = tmp_path / "out"
    argv = ["--model", PICO, "--checkpoint", checkpoint[1], "--input", image_folder, "--output", out, "--no-progress"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(swinlite.extract, "save_features", interrupted_after)
        assert run_script("extract_features", [*argv, "--batch-size", 1]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == f"interrupted; rerun the same command to continue ({kept})"
    assert run_script("extract_features", argv) == 0
    assert f"written {3 - saves}, skipped (already whole) {saves}, failed 1" in capsys.readouterr().out
