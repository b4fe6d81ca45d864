"""swinlite.images: the one image lister (one set of extensions), the one decoder (16-bit, EXIF, float), the one
image-files dataset."""

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, PngImagePlugin
from torchvision.transforms import functional as TF

from swinlite.files import SkippedLink, read_list, read_names, stored_size
from swinlite.images import IMAGE_EXTENSIONS, ImageFiles, list_files, list_images, load_rgb, upright_size


def _float_tiff(path: Path, pixels: np.ndarray) -> Path:
    Image.fromarray(pixels.astype(np.float32)).save(path)
    with Image.open(path) as img:
        assert img.mode == "F"  # really stored as 32-bit float
    return path


def test_16_bit_png_is_scaled_not_clipped(tmp_path: Path):
    gray = np.linspace(0, 65535, 32 * 32).reshape(32, 32).astype(np.uint16)
    Image.fromarray(gray).save(tmp_path / "g16.png")
    with Image.open(tmp_path / "g16.png") as img:
        assert img.mode.startswith("I")  # really stored as 16 bits
    rgb = np.asarray(load_rgb(tmp_path / "g16.png"))
    assert rgb.shape == (32, 32, 3) and rgb.dtype == np.uint8
    want = np.round(gray / 257.0)  # 65535 -> 255, linear
    assert np.abs(rgb[..., 0] - want).max() <= 1 and (rgb[..., 0] == rgb[..., 2]).all()
    assert (rgb == 255).mean() < 0.01  # the plain conversion made 99.6 % of pixels white


def test_exif_orientation_is_applied(tmp_path: Path):
    stored = np.zeros((20, 40, 3), np.uint8)  # landscape as stored: left half red, right half blue
    stored[:, :20] = (255, 0, 0)
    stored[:, 20:] = (0, 0, 255)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: the camera was turned; show rotated 90 degrees clockwise
    Image.fromarray(stored).save(tmp_path / "photo.jpg", exif=exif, quality=95)
    shown = np.asarray(load_rgb(tmp_path / "photo.jpg")).astype(int)
    want = np.rot90(stored, k=-1).astype(int)  # clockwise: red ends up on top
    assert shown.shape == want.shape == (40, 20, 3)
    assert upright_size(tmp_path / "photo.jpg") == (40, 20)  # the header's size, turned as load_rgb turns it
    error = np.abs(shown - want)
    assert error[:14].max() < 40 and error[26:].max() < 40  # JPEG noise near the colour edge (row 20) left out
    Image.fromarray(stored).save(tmp_path / "photo.png", exif=exif)  # PNG: an eXIf chunk
    assert upright_size(tmp_path / "photo.png") == load_rgb(tmp_path / "photo.png").size[::-1] == (40, 20)


def test_upright_size_reads_the_header_and_with_decode_the_whole_file(tmp_path: Path):
    """A file whose pixel data is cut off: its header's size, or with ``decode`` load_rgb's error (a PNG's EXIF is
    looked for in the header: PIL's getexif would decode the pixels)."""
    Image.fromarray(np.zeros((30, 50, 3), np.uint8) + 90).save(tmp_path / "full.png")
    data = (tmp_path / "full.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    assert upright_size(tmp_path / "cut.png") == (30, 50) == upright_size(tmp_path / "full.png", decode=True)
    with pytest.raises(OSError, match="truncated"):
        upright_size(tmp_path / "cut.png", decode=True)


_XMP_6 = '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'


def _exif(orientation: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif


def _after_pixels(png: bytes, kind: bytes) -> bytes:
    """``png`` with its ``kind`` chunk moved after the pixel data, before IEND (Pillow writes it before)."""
    start = png.index(kind) - 4  # the chunk's length
    end = start + 12 + int.from_bytes(png[start : start + 4], "big")  # length, type, data, CRC
    chunk, rest = png[start:end], png[:start] + png[end:]
    iend = rest.index(b"IEND") - 4
    return rest[:iend] + chunk + rest[iend:]


def _xmp_png(path: Path, image: Image.Image) -> None:
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", _XMP_6)
    image.save(path, pnginfo=info)


def _moved(write: Callable[[Path, Image.Image], None], kind: bytes) -> Callable[[Path, Image.Image], None]:
    def moved(path: Path, image: Image.Image) -> None:
        write(path, image)
        path.write_bytes(_after_pixels(path.read_bytes(), kind))

    return moved


_ORIENTED: dict[str, Callable[[Path, Image.Image], None]] = {  # file name: writer, orientation 6 but o3.jpg's
    "o3.jpg": lambda p, i: i.save(p, exif=_exif(3)),
    "o6.jpg": lambda p, i: i.save(p, exif=_exif(6)),
    "exif.png": lambda p, i: i.save(p, exif=_exif(6)),
    "xmp.png": _xmp_png,  # tiff:Orientation in an iTXt chunk, no EXIF
    "exif_after.png": _moved(lambda p, i: i.save(p, exif=_exif(6)), b"eXIf"),
    "xmp_after.png": _moved(_xmp_png, b"iTXt"),
    "o6.tif": lambda p, i: i.save(p, exif=_exif(6)),  # Pillow gives a TIFF its upright size at open
    "lzw.tif": lambda p, i: i.save(p, exif=_exif(6), compression="tiff_lzw"),  # decoded by libtiff
    "o6.webp": lambda p, i: i.save(p, exif=_exif(6), lossless=True),
}


@pytest.mark.parametrize("name", list(_ORIENTED))
def test_upright_size_is_the_size_load_rgb_gives(tmp_path: Path, name: str):
    """The header's size turned by the orientation load_rgb applies, wherever a format keeps it: a TIFF's was
    turned twice, a PNG's in XMP or after the pixels not at all."""
    path = tmp_path / name
    _ORIENTED[name](path, Image.fromarray(np.zeros((40, 24, 3), np.uint8)))  # stored 40x24 (HxW)
    upright = (40, 24) if name == "o3.jpg" else (24, 40)  # orientation 3 turns it by 180 degrees
    assert stored_size(path) == (40, 24)
    assert upright_size(path) == upright_size(path, decode=True) == load_rgb(path).size[::-1] == upright


def test_float_image_in_0_1_is_scaled_not_read_as_black(tmp_path: Path):
    pixels = np.linspace(0, 1, 12 * 10).reshape(12, 10)
    rgb = np.asarray(load_rgb(_float_tiff(tmp_path / "f.tif", pixels)))
    assert rgb.shape == (12, 10, 3) and rgb.dtype == np.uint8 and (rgb[..., 0] == rgb[..., 2]).all()
    np.testing.assert_array_equal(rgb[..., 0], np.round(pixels.astype(np.float32) * 255))  # Pillow's RGB: all 0 or 1


def test_float_image_in_0_255_is_kept_and_other_ranges_are_named(tmp_path: Path):
    pixels = np.linspace(0, 255, 8 * 8).reshape(8, 8)
    rgb = np.asarray(load_rgb(_float_tiff(tmp_path / "g.tif", pixels)))
    np.testing.assert_array_equal(rgb[..., 1], np.round(pixels.astype(np.float32)))
    for name, bad in [("neg.tif", pixels - 1), ("big.tif", pixels * 2), ("nan.tif", np.full((4, 4), np.nan))]:
        with pytest.raises(ValueError, match=f"{name}: float image"):
            load_rgb(_float_tiff(tmp_path / name, bad))


def test_one_lister_one_set_of_extensions(tmp_path: Path):
    for rel in ["a.JPG", "b.png", "notes.txt", ".hidden.png", "sub/c.webp", "sub/d.TIFF", ".cache/e.png"]:
        (tmp_path / "f" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "f" / rel).write_bytes(b"")
    os.symlink(tmp_path / "f", tmp_path / "f" / "sub" / "loop")  # a link back up: listed once, never in a loop
    os.symlink(tmp_path, tmp_path / "f" / "up")  # a link above the folder: its siblings are not listed
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling" / "s.png").write_bytes(b"")
    (tmp_path / "explicit.txt").write_text("named on purpose")
    with pytest.warns(UserWarning) as record:
        found = list_images([tmp_path / "f", tmp_path / "explicit.txt"])
    assert sorted(str(w.message).split(" -> ")[0] for w in record) == [
        f"skipping linked folder {tmp_path / 'f' / 'sub' / 'loop'}",
        f"skipping linked folder {tmp_path / 'f' / 'up'}",
    ]  # each link named, as a loop
    assert all(str(w.message).endswith(": a loop back to an enclosing folder") for w in record)
    root = tmp_path / "f"
    assert found == [root / "a.JPG", root / "b.png", root / "sub" / "c.webp", root / "sub" / "d.TIFF",
                     tmp_path / "explicit.txt"]  # fmt: skip
    assert {".jpg", ".png", ".tif", ".tiff", ".webp", ".bmp"} <= set(IMAGE_EXTENSIONS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no image files .* under '.*empty'"):
        list_images([tmp_path / "empty"])
    with pytest.raises(ValueError, match="'.*nope.png' does not exist"):
        list_images([tmp_path / "nope.png"])


def test_image_files_give_the_image_or_why_not(tmp_path: Path):
    pixels = np.random.default_rng(0).integers(0, 255, (6, 9, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "ok.png")
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    dataset = ImageFiles([tmp_path / "ok.png", tmp_path / "bad.png"], TF.to_tensor)
    ok, bad = dataset[0], dataset[1]
    assert ok.index == 0 and ok.size == (6, 9) and ok.error is None
    torch.testing.assert_close(ok.image, torch.from_numpy(pixels).permute(2, 0, 1).float() / 255)
    assert bad.index == 1 and bad.image is None and bad.size is None
    assert bad.error.startswith("unreadable (UnidentifiedImageError: ")


def test_a_link_into_another_folder_the_caller_lists_is_skipped_and_named(tmp_path: Path):
    """A link from one listed folder into another counted the other's files twice (once under the link)."""
    for rel in ["a/1.png", "b/2.png", "b/deep/3.png", "outside/4.png"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    os.symlink(tmp_path / "b" / "deep", tmp_path / "a" / "to_b")  # into b: b's files
    os.symlink(tmp_path / "outside", tmp_path / "a" / "more")  # elsewhere: followed once
    os.symlink(tmp_path / "outside", tmp_path / "a" / "again")  # the same folder again: listed once
    with pytest.warns(UserWarning, match=f"skipping linked folder {tmp_path / 'a' / 'to_b'} -> .*listed apart"):
        found = list_images([tmp_path / "a", tmp_path / "b"])
    assert found == [tmp_path / "a" / "1.png", tmp_path / "a" / "again" / "4.png", tmp_path / "b" / "2.png",
                     tmp_path / "b" / "deep" / "3.png"]  # fmt: skip
    assert list_files(tmp_path / "a") == [
        tmp_path / "a" / "1.png",
        tmp_path / "a" / "again" / "4.png",
        tmp_path / "a" / "to_b" / "3.png",
    ]  # fmt: skip  (nothing listed apart)


def test_overlapping_inputs_list_each_image_once_by_the_path_that_reached_it_first(tmp_path: Path):
    """A folder and its subfolder, a folder and a file in it, a folder with a trailing slash or through a link: the
    files they share were listed once per path, so the scripts wrote 9 drawings of 4 images."""
    for rel in ["nest/a.png", "nest/sub/b.png", "nest/sub/c.png", "nest/z.png"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    nest, sub = tmp_path / "nest", tmp_path / "nest" / "sub"
    os.symlink(nest, tmp_path / "alias")  # the whole folder again, under another name
    os.link(nest / "z.png", tmp_path / "hard.png")  # a hard link: a file of its own
    whole = [nest / "a.png", sub / "b.png", sub / "c.png", nest / "z.png"]
    assert list_images([nest, sub]) == whole
    assert list_images([nest, nest / "a.png", f"{nest}/", tmp_path / "alias"]) == whole
    assert list_images([sub, nest]) == [sub / "b.png", sub / "c.png", nest / "a.png", nest / "z.png"]  # given order
    assert list_images([tmp_path / "alias", nest])[0] == tmp_path / "alias" / "a.png"  # no file link: the first path
    assert list_images([nest, tmp_path / "hard.png"]) == [*whole, tmp_path / "hard.png"]
    assert list_images([sub / "c.png", sub / "c.png"]) == [sub / "c.png"]
    # one path, not in a list: a string was read as its characters ("/..."'s first, "/", listed the whole disk)
    assert list_images(str(nest)) == list_images(nest) == list_images(os.fsencode(nest)) == whole


def _linked_file_warnings(record: pytest.WarningsRecorder) -> list[str]:
    return [str(w.message) for w in record if str(w.message).startswith("skipping linked file")]


def test_a_file_keeps_its_own_name_over_a_link_to_it_listed_too(tmp_path: Path):
    """A link that sorted (or was given) before its target hid the file's own name: no output under it, no warning.
    The link is skipped with a warning instead, as a link into another folder given is; a link to a file listed by
    no other path is kept under its name (datasets are built of links)."""
    for rel in ["imgs/rgb.png", "A/a.png", "B/real.png", "outside/kept.png"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    imgs, a, b = tmp_path / "imgs", tmp_path / "A", tmp_path / "B"
    os.symlink("rgb.png", imgs / "link_to_rgb.png")  # sorts before its target
    os.symlink(tmp_path / "outside" / "kept.png", imgs / "elsewhere.png")  # its target listed nowhere else
    os.symlink("../B/real.png", a / "alias.png")  # into another folder given
    real, kept = imgs / "rgb.png", tmp_path / "outside" / "kept.png"
    with pytest.warns(UserWarning) as record:
        assert list_images([imgs]) == [imgs / "elsewhere.png", real]
    assert _linked_file_warnings(record) == [
        f"skipping linked file {imgs / 'link_to_rgb.png'} -> {os.path.realpath(real)}: the same file as {real}, "
        "listed under its own name"
    ]
    with pytest.warns(UserWarning, match=f"skipping linked file {a / 'alias.png'} -> .*real.png: the folder .*B, "):
        assert list_images([a, b]) == [a / "a.png", b / "real.png"]
    with pytest.warns(UserWarning, match=f"skipping linked file {a / 'alias.png'} -> .*: the same file as {b}"):
        assert list_images([a / "alias.png", b / "real.png"]) == [b / "real.png"]  # named one by one
    with pytest.warns(UserWarning, match="skipping linked file .*elsewhere.png -> .*kept.png: the same file as "):
        assert list_images([imgs / "elsewhere.png", kept]) == [kept]
    assert list_images([a / "alias.png", a]) == [a / "alias.png", a / "a.png"]  # one link twice: once, kept


def test_a_file_linked_from_a_class_folder_is_counted_in_its_own_class_only(tmp_path: Path):
    """``others`` given (a split's class folders): a file link into another class folder put one image under two
    labels, a link to a file of the same folder counted it twice; both are skipped with a warning, and given to the
    caller as records (``skipped``) that say it word for word. Without ``others`` every name is listed (segmentation
    pairs images and masks by name: one mask may serve many)."""
    for rel in ["red/000.png", "red/001.png", "green/000.png", "outside/x.png"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    red, green, outside = tmp_path / "red", tmp_path / "green", tmp_path / "outside"
    os.symlink(red / "001.png", green / "from_red.png")
    os.symlink(red / "000.png", red / "000_alias.png")
    os.symlink(outside / "x.png", red / "x.png")  # outside the class folders: kept
    os.symlink(outside / "x.png", red / "y.png")  # the same outside file again: listed once, by the first link
    links: list[SkippedLink] = []
    with pytest.warns(UserWarning) as record:
        assert list_files(green, [red], skipped=links) == [green / "000.png"]
        assert list_files(red, [green], skipped=links) == [red / "000.png", red / "001.png", red / "x.png"]
    why = f"the folder {os.path.realpath(red)}, listed apart"
    assert links[0] == SkippedLink(str(green / "from_red.png"), "file", os.path.realpath(red / "001.png"), why)
    assert [link.message for link in links] == _linked_file_warnings(record)
    assert _linked_file_warnings(record) == [
        f"skipping linked file {green / 'from_red.png'} -> {os.path.realpath(red / '001.png')}: the folder "
        f"{os.path.realpath(red)}, listed apart",
        f"skipping linked file {red / '000_alias.png'} -> {os.path.realpath(red / '000.png')}: the same file as "
        f"{red / '000.png'}, listed under its own name",
    ]
    assert list_files(red) == [red / "000.png", red / "000_alias.png", red / "001.png", red / "x.png", red / "y.png"]
    assert list_files(green) == [green / "000.png", green / "from_red.png"]


def test_32_bit_integer_image_outside_0_65535_is_an_error_not_clipped(tmp_path: Path):
    """Pixels above 65535 became white and negative ones black, silently."""
    gray = np.linspace(0, 255, 16 * 16).reshape(16, 16).astype(np.int32)
    Image.fromarray(gray * 257, "I").save(tmp_path / "ok.tif")
    np.testing.assert_array_equal(np.asarray(load_rgb(tmp_path / "ok.tif"))[..., 0], gray)
    for name, pixels, found in [("big.tif", gray * 4096, f"[0, {255 * 4096}]"), ("neg.tif", -gray, "[-255, 0]")]:
        Image.fromarray(pixels, "I").save(tmp_path / name)
        with Image.open(tmp_path / name) as img:
            assert img.mode == "I"  # really stored as 32-bit integers
        with pytest.raises(
            ValueError, match=rf"{name}: 32-bit integer image with pixels in \{found}; expected 0..65535"
        ):
            load_rgb(tmp_path / name)


def test_float_pixels_within_half_a_level_of_the_range_are_rounding(tmp_path: Path):
    """One pixel of a 0..1 image at 1.0001 made it read as a 0..255 image (nearly black), where -1e-6 was an error:
    within half an 8-bit level of either end of either range is rounding, clipped; further out is an error."""
    pixels = np.linspace(0, 1, 10 * 10).reshape(10, 10)
    want = np.round(pixels.astype(np.float32) * 255)
    for low, high in [(0, 1.0001), (-1e-6, 1), (-0.49 / 255, 1 + 0.49 / 255)]:
        pixels[0, 0], pixels[9, 9] = low, high
        rgb = np.asarray(load_rgb(_float_tiff(tmp_path / "f.tif", pixels)))
        assert rgb[0, 0, 0] == 0 and rgb[9, 9, 0] == 255
        np.testing.assert_array_equal(rgb[1:9, ..., 0], want[1:9])
    pixels[0, 0] = -0.51 / 255
    with pytest.raises(ValueError, match=r"low.tif: float image with pixels in \[-0.002, 1.00192\]; expected 0..1 "):
        load_rgb(_float_tiff(tmp_path / "low.tif", pixels))
    pixels[9, 9] = 1 + 0.51 / 255  # more than rounding above 1: a 0..255 image (the two cannot be told apart)
    assert np.asarray(load_rgb(_float_tiff(tmp_path / "dark.tif", pixels))).max() == 1
    wide = np.linspace(0, 255, 8 * 8).reshape(8, 8)
    wide[0, 0], wide[7, 7] = -0.49, 255.49
    rgb = np.asarray(load_rgb(_float_tiff(tmp_path / "w.tif", wide)))
    assert rgb[0, 0, 0] == 0 and rgb[7, 7, 0] == 255
    for name, end in [("w_low.tif", (0, 0, -0.51)), ("w_high.tif", (7, 7, 255.51))]:
        bad = wide.copy()
        bad[end[:2]] = end[2]
        with pytest.raises(ValueError, match=f"{name}: float image"):
            load_rgb(_float_tiff(tmp_path / name, bad))


def test_lists_of_paths_and_of_names_drop_a_byte_order_mark(tmp_path: Path):
    """A list saved by Windows Notepad starts with a UTF-8 byte order mark, which was read as part of the first line:
    the first image listed was "not there", the first class name carried it into predict.py's CSV."""
    for name in ("a.png", "b c.png"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "list.txt").write_text("a.png\r\nb c.png\r\n", encoding="utf-8-sig")
    assert read_list(tmp_path / "list.txt") == [tmp_path / "a.png", tmp_path / "b c.png"]
    (tmp_path / "names.txt").write_text("éclair\r\ndog \r\n\r\n", encoding="utf-8-sig")
    assert read_names(tmp_path / "names.txt") == ["éclair", "dog "]  # each as written, the blank line skipped
    (tmp_path / "names.txt").write_bytes(b"cat\n\xffdog\n")
    with pytest.raises(ValueError, match=r"names.txt is not UTF-8 text"):
        read_names(tmp_path / "names.txt")
