"""swinlite.extract: a list of image paths names each image as a folder input does, and a rerun whose names moved says
why; one run per output folder; its output names are those the output checks know; Ctrl-C says whether a rerun
continues; maps float16 stores as inf and the model's own inf or NaN are refused; float16 rounds the maps alone; a
feature file records the SHA-256 of its image's bytes."""

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from pico import PICO
from PIL import Image

import swinlite.extract
from swinlite.extract import (
    EMBEDDINGS_FILE,
    FAILURES_FILE,
    OUTPUT_FILES,
    SOURCE_KEY,
    ExtractionInterrupted,
    output_path,
    read_sources,
    run_extraction,
)
from swinlite.features import load_features
from swinlite.files import FOLDER_FILES
from swinlite.io import read_metadata
from swinlite.lock import OutputLock


def test_a_listed_link_keeps_its_name_as_a_folder_input_does(tmp_path: Path):
    """A listed link was resolved to its target's name (features/real/b.png...) where the folder input wrote
    features/b_link.png...: one image under two names by how it was given. A link listed beside its target is
    skipped by list_images' rule, and each image is named once however it is spelled."""
    imgs, real = tmp_path / "imgs", tmp_path / "real"
    for path in (imgs / "a.png", imgs / "sub" / "c.png", real / "b.png"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    os.symlink(real / "b.png", imgs / "b_link.png")  # its target listed nowhere else: kept under the link's name
    os.symlink("a.png", imgs / "a_link.png")  # beside its target: skipped
    listing = imgs / "list.txt"
    listing.write_text("a.png\nb_link.png\nsub/c.png\n./a.png\nsub/../sub/c.png\n")
    with pytest.warns(UserWarning, match=f"skipping linked file {imgs / 'a_link.png'} -> .*the same file as "):
        from_folder = read_sources(imgs)
    assert from_folder == ([imgs / "a.png", imgs / "b_link.png", imgs / "sub" / "c.png"], imgs)
    assert read_sources(listing) == from_folder
    out = tmp_path / "out"
    assert output_path(imgs / "b_link.png", imgs, out) == out / "features" / "b_link.png.safetensors"
    listing.write_text("a_link.png\nb_link.png\na.png\n")
    with pytest.warns(UserWarning, match=f"skipping linked file {imgs / 'a_link.png'} -> .*the same file as "):
        assert read_sources(listing) == ([imgs / "b_link.png", imgs / "a.png"], imgs)


def test_a_run_into_a_folder_another_run_holds_is_refused_before_writing(tmp_path: Path):
    """Two extractions into one --output at once, with different checkpoints, both passed the settings check (no
    features yet) and wrote: the folder held features of two models under one settings.json, and a rerun skipped them
    as whole. A lock left by a run that died is taken over, with a note."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    imgs.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / "a.png")
    model = timm.create_model(PICO)
    held = OutputLock(out, "feature extraction", "--output")
    held.acquire()  # as a live run holds it
    try:
        refusal = f"output folder {out} is in use by another feature extraction \\(pid {os.getpid()} on .*--output$"
        with pytest.raises(ValueError, match=refusal):
            run_extraction(model, PICO, imgs, out, (32, 32), progress=False)
        assert [p.name for p in out.iterdir()] == [".lock"]  # nothing written
    finally:
        held.release()
    out.mkdir()
    (out / ".lock").write_text("feature extraction (pid 999999 on elsewhere, started 2020-01-01 00:00:00)")  # its file
    with pytest.warns(
        UserWarning, match="left by a run that ended without releasing it \\(feature extraction \\(pid 9"
    ):
        assert run_extraction(model, PICO, imgs, out, (32, 32), progress=False).written == 1
    assert not (out / ".lock").exists()


def test_source_and_output_may_be_str(tmp_path: Path):
    """A str source was "'str' object has no attribute 'is_file'", a str output "... no attribute 'joinpath'"."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    imgs.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / "a.png")
    assert read_sources(str(imgs)) == ([imgs / "a.png"], imgs)
    assert run_extraction(timm.create_model(PICO), PICO, str(imgs), str(out), (32, 32), progress=False).written == 1
    assert load_features(out / "features" / "a.png.safetensors").source == str(imgs / "a.png")


def test_no_progress_bar_into_a_log(tmp_path: Path, capsys: pytest.CaptureFixture):
    """``extract_features.py ... > log.txt 2>&1`` filled the log with the bar's redraws, one long line of them."""
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / "a.png")
    assert run_extraction(timm.create_model(PICO), PICO, imgs, tmp_path / "out", (32, 32)).written == 1
    assert "extract" not in capsys.readouterr().err  # pytest's captured stderr is no terminal


def test_images_of_long_names_get_feature_files_of_their_own(tmp_path: Path):
    """An image named with 78 CJK characters (234 bytes) stopped the run with [Errno 36] File name too long, and every
    rerun at the same image: the temporary file of its features, ``.<name>.safetensors.tmpXXXXXXXX``, outgrew the
    filesystem's 255 bytes. A feature file's name that would outgrow them is cut with a hash of the whole, so that two
    cut alike stay two; each records its image."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    imgs.mkdir()
    names = [f"{'写' * 78}.png", f"{'写' * 83}a.png", f"{'写' * 83}b.png"]  # 238 and 254 bytes
    for name in names:
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / name)
    assert run_extraction(timm.create_model(PICO), PICO, imgs, out, (32, 32), progress=False).written == 3
    made = {load_features(p).source: p.name for p in (out / "features").iterdir()}
    assert sorted(made) == sorted(str(imgs / name) for name in names)
    assert made[str(imgs / names[0])] == f"{names[0]}.safetensors"  # 250 bytes: kept
    assert all(len(os.fsencode(name)) <= 255 for name in made.values())


def test_an_image_file_of_another_extension_is_an_image_and_a_binary_file_no_list(tmp_path: Path):
    """--input anim.gif was read as a list of paths: "the list 'anim.gif' names 1 paths that are not image files, e.g.
    'GIF87a(...'". A file Pillow opens is an image, as predict.py takes it; one it cannot open (a .heic) is no list
    either, as it holds NUL bytes, which no path holds."""
    gif, heic = tmp_path / "anim.gif", tmp_path / "photo.heic"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(gif)
    heic.write_bytes(b"\x00\x00\x00\x18ftypheic")  # how a HEIC file begins
    assert read_sources(gif) == ([gif], tmp_path)
    with pytest.raises(ValueError, match=f"^'{heic}' is not a text list of paths \\(it holds NUL bytes, which no path"):
        read_sources(heic)


def test_the_output_checks_know_the_names_an_extraction_writes():
    assert FOLDER_FILES["extract_features.py"] == OUTPUT_FILES


@pytest.mark.parametrize(
    ("sha256", "raised", "done"), [("ab" * 32, ExtractionInterrupted, 1), (None, KeyboardInterrupt, None)]
)
def test_ctrl_c_is_resumable_where_a_rerun_loads_the_same_weights(tmp_path: Path, monkeypatch, sha256, raised, done):
    """Features of random initial weights (no weights file to hash) are refused by a rerun: no "rerun" hint then."""
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for name in ("a.png", "b.png"):
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / name)
    save_features = swinlite.extract.save_features

    def interrupted_at_b(path: Path, *rest) -> None:
        if path.name.startswith("b"):
            raise KeyboardInterrupt
        save_features(path, *rest)

    monkeypatch.setattr(swinlite.extract, "save_features", interrupted_at_b)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_extraction(timm.create_model(PICO), PICO, imgs, tmp_path / "out", (32, 32), batch_size=1,
                       progress=False, checkpoint_sha256=sha256)  # fmt: skip
    assert type(caught.value) is raised and getattr(caught.value, "done", None) == done


def test_a_rerun_killed_midway_leaves_no_stale_list_of_vectors(tmp_path: Path, monkeypatch):
    """The first run's embeddings.safetensors (one image) stayed beside the features of the images added since when
    the rerun was killed: load_embeddings read one row of two without a word."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    imgs.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / "a.png")
    model, sha256 = timm.create_model(PICO), "ab" * 32
    run_extraction(model, PICO, imgs, out, (32, 32), progress=False, checkpoint_sha256=sha256)
    assert (out / EMBEDDINGS_FILE).is_file() and (out / FAILURES_FILE).is_file()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / "b.png")

    def killed(*args) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(swinlite.extract, "save_features", killed)
    with pytest.raises(ExtractionInterrupted):
        run_extraction(model, PICO, imgs, out, (32, 32), progress=False, checkpoint_sha256=sha256)
    assert not (out / EMBEDDINGS_FILE).exists() and not (out / FAILURES_FILE).exists()


def test_ctrl_c_in_the_last_writes_leaves_no_failures_txt_and_says_a_rerun_continues(tmp_path: Path, monkeypatch):
    """failures.txt was written before the embeddings: a kill between the two left it alone, which the docs said no
    killed run leaves, and Ctrl-C there said a plain "interrupted". failures.txt, last, marks a completed run."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    imgs.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / "a.png")
    model, sha256 = timm.create_model(PICO), "ab" * 32
    write = swinlite.extract.atomic_write_bytes

    def killed_at_failures(path: Path, data: bytes) -> None:
        if path.name == FAILURES_FILE:
            raise KeyboardInterrupt
        write(path, data)

    monkeypatch.setattr(swinlite.extract, "atomic_write_bytes", killed_at_failures)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_extraction(model, PICO, imgs, out, (32, 32), progress=False, checkpoint_sha256=sha256)
    assert str(caught.value) == "interrupted; rerun the same command to continue (the 1 image done is kept)"
    assert (out / EMBEDDINGS_FILE).is_file() and not (out / FAILURES_FILE).exists()
    monkeypatch.undo()
    summary = run_extraction(model, PICO, imgs, out, (32, 32), progress=False, checkpoint_sha256=sha256)
    assert summary.skipped == 1 and (out / EMBEDDINGS_FILE).is_file() and (out / FAILURES_FILE).is_file()


BEYOND_FLOAT16 = "stage0 map reaches .*, beyond float16's range \\(±65504\\), and --dtype float16 would store it as inf"
MODELS_OWN = "{} holds {} values, which the model itself gave, at any --dtype: its weights \\({} abab"
CHECKPOINT = "the checkpoint w.safetensors"  # as extract_features.py names the weights it was given
PRETRAINED = f"timm's pretrained weights of {PICO}"  # and those of --model alone (the SHA-256: timm's cached file)


@pytest.mark.parametrize(
    ("dtype", "weight", "value", "weights", "refusal", "way_out"),
    [
        (torch.float16, "patch_embed.norm.weight", 1e5, CHECKPOINT, BEYOND_FLOAT16, "--dtype float32"),
        (torch.float16, "patch_embed.norm.weight", float("nan"), CHECKPOINT,
         MODELS_OWN.format("stage0 map", "8192 NaN", f"{CHECKPOINT}, SHA-256"), "weights that give "),
        (torch.float32, "patch_embed.norm.weight", float("nan"), PRETRAINED,
         MODELS_OWN.format("stage0 map", "8192 NaN", f"{PRETRAINED}, SHA-256"), "weights that give "),
        (torch.float32, "layers.0.blocks.0.mlp.fc2.bias", float("inf"), None,
         MODELS_OWN.format("stage0 map", "8192 inf", "the weights of SHA-256"), "weights that "),
        (torch.float16, "norm.weight", float("nan"), CHECKPOINT,
         MODELS_OWN.format("pooled vector \\(its embedding\\)", "256 NaN", f"{CHECKPOINT}, SHA-256"), "weights that "),
    ],
    ids=["float16-overflow", "float16-nan", "float32-nan", "float32-inf", "pooled-nan"],
)  # fmt: skip
def test_maps_beyond_the_dtype_or_not_finite_are_refused_before_writing_them(
    tmp_path: Path, dtype: torch.dtype, weight: str, value: float, weights: str | None, refusal: str, way_out: str
):
    """A map beyond float16's range (65504; here a pico's patch norm scaled by 1e5) was stored as inf, and the model's
    own NaN or inf (broken weights) was stored as it was, at any dtype, the pooled vector's too (through the final norm,
    which no stage map passes); exit 0 both: an index built on them broken without a word. Refused naming the image,
    its level (all 32 x 16 x 16 values of a pico's stage0) or its pooled vector (all 256), the weights as the script
    names them (a "checkpoint" of --model's pretrained weights before) and the way out, which follows the settings
    rule: a rerun with another dtype or other weights into a folder of features is refused."""
    imgs, out, fresh = tmp_path / "imgs", tmp_path / "out", tmp_path / "fresh"
    imgs.mkdir()
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(imgs / "a.png")
    plain, broken = timm.create_model(PICO), timm.create_model(PICO)
    broken.load_state_dict(plain.state_dict())
    torch.nn.init.constant_(broken.get_parameter(weight), value)
    overflow = refusal == BEYOND_FLOAT16  # its way out: float32, with the same weights; else other weights
    fixed, fixed_dtype, fixed_sha256 = (broken, torch.float32, "ab" * 32) if overflow else (plain, dtype, "cd" * 32)

    def extract(model, output: Path, dtype: torch.dtype, sha256: str = "ab" * 32) -> int:
        return run_extraction(
            model, PICO, imgs, output, (32, 32), dtype, progress=False, checkpoint_sha256=sha256, weights=weights
        ).written

    assert extract(plain, out, dtype) == 1
    Image.fromarray(np.full((8, 8, 3), 30, np.uint8)).save(imgs / "b.png")
    before = {p: p.read_bytes() for p in (out / "features").rglob("*")}
    with pytest.raises(ValueError, match=f"{imgs / 'b.png'}: its {refusal}.*; rerun with {way_out}.*another "):
        extract(broken, out, dtype)
    assert {p: p.read_bytes() for p in (out / "features").rglob("*")} == before  # a's kept, b's not written
    with pytest.raises(ValueError, match="holds features made with other settings"):  # as the refusal says
        extract(fixed, out, fixed_dtype, fixed_sha256)
    with pytest.raises(ValueError, match=f"{imgs / 'a.png'}: .*{way_out}.* \\(into {fresh} too: it holds no features"):
        extract(broken, fresh, dtype)
    assert extract(fixed, fresh, fixed_dtype, fixed_sha256) == 2
    stage0 = load_features(fresh / "features" / "b.png.safetensors").maps["stage0"]
    assert stage0.isfinite().all() and (stage0.abs().max() > 65504) == overflow


def test_a_grown_list_into_the_same_folder_says_its_names_moved(tmp_path: Path):
    """A list's names are relative to its images' common folder: listing imgs/b/x.png beside imgs/a/x.png moved it
    from imgs/a to imgs, and a.x.png's features from features/x.png... to features/a/x.png...; the refusal said
    imgs/a/x.png was "not among the images of this --input" (its line 1)."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    for name in ("a", "b"):
        (imgs / name).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(imgs / name / "x.png")
    (tmp_path / "l1.txt").write_text("imgs/a/x.png\n")
    (tmp_path / "l2.txt").write_text("imgs/a/x.png\nimgs/b/x.png\n")
    model = timm.create_model(PICO)
    run_extraction(model, PICO, tmp_path / "l1.txt", out, (32, 32), progress=False, checkpoint_sha256="ab" * 32)
    moved = (
        f"({out / 'features' / 'x.png.safetensors'} was made from {imgs / 'a' / 'x.png'}, which this run names "
        f"{out / 'features' / 'a' / 'x.png.safetensors'}): the names of a list's images are relative to the listed "
        f"images' common folder, which is now {imgs} (the folder was made with {imgs / 'a'}); pass another --output, "
        "or list the images so that their common folder stays"
    )
    with pytest.raises(ValueError, match="holds features of this --input's images under other names") as refused:
        run_extraction(model, PICO, tmp_path / "l2.txt", out, (32, 32), progress=False, checkpoint_sha256="ab" * 32)
    assert moved in str(refused.value)


def test_float16_rounds_the_stored_maps_and_not_the_pooled_vector(tmp_path: Path):
    """``dtype`` is the stored maps' alone: the pooled vector stays fp32, as the float32 run gives it (a vector rounded
    through float16 and back, off by up to 5e-4 at values near 1, passed: only its dtype was checked)."""
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), np.uint8)).save(imgs / "a.png")
    torch.manual_seed(0)
    model = timm.create_model(PICO)
    made = {}
    for dtype in (torch.float32, torch.float16):
        run_extraction(model, PICO, imgs, tmp_path / str(dtype), (32, 32), dtype, progress=False)
        made[dtype] = load_features(tmp_path / str(dtype) / "features" / "a.png.safetensors")
    full, half = made[torch.float32], made[torch.float16]
    torch.testing.assert_close(half.pooled, full.pooled, rtol=1e-6, atol=1e-6)  # dtype float32 checked too
    assert not torch.equal(full.pooled, full.pooled.half().float())  # more than float16's 11 significant bits
    assert half.maps.keys() == full.maps.keys()
    assert all(torch.equal(half.maps[name], m.half()) for name, m in full.maps.items())


def test_a_feature_file_records_the_sha256_of_its_images_bytes(tmp_path: Path):
    """The record a rerun checks an image against (its real path, size and the SHA-256 of its bytes): a hash cut short,
    or of the path instead of the bytes, was written and compared alike, so no rerun test saw it."""
    imgs, out = tmp_path / "imgs", tmp_path / "out"
    (imgs / "sub").mkdir(parents=True)
    image = imgs / "sub" / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), np.uint8)).save(image)
    run_extraction(timm.create_model(PICO), PICO, imgs, out, (32, 32), progress=False)
    recorded = read_metadata(out / "features" / "sub" / "a.png.safetensors")[SOURCE_KEY]
    sha256 = hashlib.sha256(image.read_bytes()).hexdigest()
    assert recorded == {"path": str(image.resolve()), "size": image.stat().st_size, "sha256": sha256}
