"""swinlite.io: the one weights reader, the one output check every writer makes, escaped file names, strict JSON."""

import datetime
import errno
import fcntl
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import IO

import pytest
import torch
from safetensors.torch import save_file

from swinlite import files
from swinlite.engine.checkpoint import RESUME_FILE, load_resume, pending
from swinlite.engine.trainer import BEST_FILES, WEIGHTS_FILES
from swinlite.io import (
    build_folder_once,
    check_output,
    json_bytes,
    printable_path,
    read_metadata,
    read_state_dict,
    read_weights_bytes,
    save_safetensors,
)
from swinlite.predictions import Prediction, write_csv


@pytest.fixture
def tree(tmp_path: Path, monkeypatch) -> Path:
    """ckpt.pth, images/a.png, a_file, link -> ckpt.pth, hard -> ckpt.pth (hard link), locked/ (read-only);
    cwd = tmp_path."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"png")
    (tmp_path / "ckpt.pth").write_bytes(b"weights")
    (tmp_path / "a_file").write_text("x")
    os.symlink(tmp_path / "ckpt.pth", tmp_path / "link")
    os.link(tmp_path / "ckpt.pth", tmp_path / "hard")
    read_only(tmp_path / "locked", monkeypatch)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def read_only(folder: Path, monkeypatch) -> None:
    """Make ``folder`` (created) read-only, as os.access answers for it."""
    folder.mkdir(mode=0o555, parents=True)
    access = os.access
    if os.geteuid() == 0:  # root may write anywhere: os.access answers for the folder as for any other user
        monkeypatch.setattr(os, "access", lambda p, m: access(p, m) and not (Path(p) == folder and m & os.W_OK))


@pytest.mark.parametrize(
    ("output", "kwargs", "message"),
    [
        ("ckpt.pth", {}, "writing .*ckpt.pth would replace the input ckpt.pth"),
        ("images/../ckpt.pth", {}, "would replace the input"),  # relative parts resolved
        ("link", {}, "would replace the input"),  # a symlink to the input
        ("hard", {}, "would replace the input"),  # a hard link to the input
        ("images", {}, "--output images is a folder; expected a file name"),
        ("a_file/out.csv", {}, "a_file is a file, not a folder"),
        ("a_file", {"folder": True}, "--output a_file is a file; expected a folder"),
        (".", {"folder": True, "names": ["ckpt.pth"]}, "would replace the input ckpt.pth"),
        ("images/plots", {"folder": True}, "lies inside the input folder images"),
        ("images/new.png", {}, "lies inside the input folder images"),
        ("locked/out.csv", {}, "--output locked/out.csv: no permission to write in .*locked$"),
        ("locked/sub", {"folder": True}, "no permission to write in .*locked$"),
    ],
)
def test_an_output_that_would_replace_an_input_or_cannot_be_written_is_refused(tree, output, kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_output(output, ["ckpt.pth", "images", None], **kwargs)


def test_outputs_beside_the_inputs_are_fine(tree):
    check_output("out.csv", ["ckpt.pth", "images/a.png"])
    check_output("new/deeper/out.csv", ["ckpt.pth"])  # folders that do not exist yet
    check_output("images/p.csv", ["images/a.png"])  # inside an image folder whose files are the inputs
    check_output("plots", ["ckpt.pth"], folder=True, names=["bias_stage0.png"])


def test_the_run_files_the_output_check_names_are_the_engines():
    """swinlite.files names them for the output check, which imports no torch; the run engine writes them."""
    assert files.RUN_SAVES == (RESUME_FILE, *WEIGHTS_FILES)
    assert files.RUN_PENDING == tuple(pending(Path(name)).name for name in BEST_FILES)


A_RUN = ("config.yaml", "best.safetensors", "resume.pt", "scan.json.gz")  # a run that saved


@pytest.mark.parametrize(
    ("held", "output", "kwargs"),
    [
        (A_RUN, "preds.csv", {}),  # a script's output beside the run's files
        (A_RUN, "converted.safetensors", {"option": "output"}),  # convert_checkpoint.py's
        (A_RUN, ".", {"folder": True, "names": [*files.RUN_FILES, "scan.json.gz"]}),  # the run's own (--resume)
        (A_RUN, ".", {"folder": True, "names": files.OUTPUT_DIR_FILES["detection"]["detect.py"]}),
        (("config.yaml",), "resume.pt", {}),  # the user's settings, nothing a run saved: no run's folder
        (("best.safetensors",), "best.safetensors", {"option": "output"}),  # a converted checkpoint, converted again
        (("resume.pt", "last.safetensors"), "config.yaml", {}),  # no run's settings
    ],
)
def test_a_runs_names_outside_a_run_and_files_beside_one_are_fine(tmp_path, held, output, kwargs):
    """What stays accepted now that an output file of a training run's is refused: only the run's own files, in a
    folder holding the run's settings beside what it saved, are the run's."""
    for name in held:
        (tmp_path / name).write_bytes(b"x")
    check_output(tmp_path / output, [tmp_path / "elsewhere.pth"], **kwargs)


@pytest.mark.parametrize("task", files.OUTPUT_DIR_FILES)
def test_an_evaluation_writes_its_results_beside_the_runs_files(tmp_path, task):
    """Each evaluate script's default --output-dir is its checkpoint's folder: the run's."""
    for name in A_RUN:
        (tmp_path / name).write_bytes(b"x")
    assert files.check_output_dir(task, tmp_path, [tmp_path / "best.safetensors"], overwrite=False) == []


@pytest.mark.parametrize(
    ("task", "folder"),
    [("detection", "images"), ("segmentation", "labels"), ("segmentation", "overlays"), ("features", "features")],
)
def test_a_read_only_folder_a_script_writes_into_is_refused_before_any_work(tmp_path, monkeypatch, task, folder):
    """Only the output folder's permission was checked: detect.py --overwrite with a read-only images/ failed after
    the work, "Permission denied: '00007_000008.png'", its detections.json already removed; extract_features.py with a
    read-only features/ named a temporary file."""
    from swinlite.extract import OUTPUT_FILES

    read_only(tmp_path / "out" / folder, monkeypatch)
    message = f"--output-dir {tmp_path / 'out'}: no permission to write in {tmp_path / 'out' / folder}"
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        if task == "features":  # extract_features.py's check
            check_output(tmp_path / "out", [], option="--output-dir", folder=True, names=OUTPUT_FILES)
        else:
            files.check_output_dir(task, tmp_path / "out", [], overwrite=True)


def test_a_removal_that_fails_names_the_file_in_full(tmp_path, monkeypatch):
    """shutil.rmtree's error named the file as in its folder: "Permission denied: '00007_000008.png'"."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "00007_000008.png").write_bytes(b"png")

    def denied(path, *args, **kwargs) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "unlink", denied)
    with pytest.raises(PermissionError, match=re.escape(f"'{tmp_path / 'images' / '00007_000008.png'}'")):
        files.remove_outputs([tmp_path / "images"])


@pytest.mark.parametrize("name", [*files.RUN_FILES, "scan.json.gz", "events.out.tfevents.1700000000.host.1.0"])
def test_an_output_file_of_a_training_run_is_refused(tmp_path, name):
    """Whether the run holds it yet or not: a ``metrics.csv`` written there would be read as the run's."""
    for held in A_RUN:
        (tmp_path / held).write_bytes(b"x")
    message = f"--output {tmp_path / name} is a file of the training run in {tmp_path}: choose another --output"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_output(tmp_path / name)


def test_weights_files_that_are_broken_are_named(tmp_path: Path):
    save_file({"w": torch.ones(3)}, tmp_path / "w.safetensors", {"classes": '["a"]', "note": "plain text"})
    data = (tmp_path / "w.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-5])
    torch.save([torch.ones(1)], tmp_path / "list.pth")
    torch.save({"model": {"w": torch.zeros(2)}, "epoch": 3}, tmp_path / "train.pth")
    assert read_metadata(tmp_path / "w.safetensors") == {"classes": ["a"], "note": "plain text"}
    assert read_metadata(tmp_path / "train.pth") == {}
    assert list(read_state_dict(tmp_path / "train.pth")) == ["w"]  # a training checkpoint's state dict
    with pytest.raises(ValueError, match="cut.safetensors' is a damaged \\(truncated\\?\\) safetensors file"):
        read_state_dict(tmp_path / "cut.safetensors")
    with pytest.raises(ValueError, match="list.pth' is not a weights file .*holds a list, not a state dict"):
        read_state_dict(tmp_path / "list.pth")


def _torchscript(path: Path) -> None:
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path)


def _onnx(path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    x, y = (onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1]) for n in "xy")
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    onnx.save(onnx.helper.make_model(graph), path)


@pytest.mark.parametrize(
    ("make", "said"),
    [(_torchscript, "it is a TorchScript archive (torch.jit.save), a program rather than weights"),
     (_onnx, "it is an ONNX model: the scripts take one with --onnx")],
)  # fmt: skip
@pytest.mark.parametrize("read", ["file", "bytes"])
def test_a_torchscript_or_onnx_file_given_as_weights_says_what_it_is(tmp_path: Path, make, said: str, read: str):
    """torch.load printed a warning, then called a TorchScript archive a failed unpickling, advising
    weights_only=False; an ONNX file was 'not a pickle of tensors', without a word of --onnx."""
    path = tmp_path / "model.pt"
    make(path)
    with pytest.raises(ValueError, match=re.escape(said)):
        read_state_dict(path, data=path.read_bytes() if read == "bytes" else None)


@pytest.mark.parametrize(
    "payload, held",
    [
        ({"model": {"w": torch.ones(1)}, "day": datetime.date(2026, 1, 1)}, "it pickles datetime.date"),
        (None, "it is not a pickle of tensors"),  # a text file
    ],
)
def test_a_pickle_weights_only_refuses_is_named_without_torchs_advice(tmp_path: Path, payload, held):
    """torch's refusal advises weights_only=False (running the file's code) and holds escape codes: the error
    says what the file holds instead, for weights and resume files alike."""
    path = tmp_path / "ckpt.pth"
    if payload is None:
        path.write_text("model:\n  name: pico\n")  # a run's config.yaml
    else:
        torch.save(payload, path)
    reads = [(read_state_dict, "is not a weights file"), (load_resume, "is not a readable resume file")]
    if payload is None:  # no pickle at all: the weights reader names the formats it expected, no more (test_weights)
        reads = reads[1:]
    for read, what in reads:
        with pytest.raises(ValueError, match=f"ckpt.pth'? {what} .*{held}, and only tensors") as error:
            read(path)
        assert "weights_only` set to `False" not in str(error.value) and "\x1b" not in str(error.value)


def test_printable_path_escapes_bytes_that_are_not_utf8():
    assert printable_path(os.fsdecode(b"/x/caf\xe9.png")) == "/x/caf\\xe9.png"
    assert printable_path("/x/café.png") == "/x/café.png"


def test_output_names_and_their_temporary_files_fit_the_filesystems_255_bytes(tmp_path: Path):
    """An image named with 78 CJK characters (234 bytes) crashed detect.py and segment.py with [Errno 36] File name
    too long: the temporary file of its drawing, ``.00002_<name>.png.tmpXXXXXXXX``, outgrew the name. A temporary
    file's name is cut to fit, and interrupted_writes still finds it by its file's name; a drawing's name beyond 255
    bytes is cut too, with a hash of the whole, so that two names cut alike stay two."""
    fits = files.numbered_name(2, f"in/{'写' * 78}.png")
    assert fits == f"00002_{'写' * 78}.png"  # 244 bytes: kept
    cut = [files.numbered_name(3, f"in/{'写' * 83}{end}.png") for end in "ab"]  # 260 bytes, alike but for one
    assert cut[0] != cut[1] and all(len(os.fsencode(n)) <= 255 and files.NUMBERED.fullmatch(n) for n in cut)
    for name in (fits, *cut):
        files.atomic_write_bytes(tmp_path / name, b"")
        during: list[Path] = []  # its temporary file, once its writer's lock is gone (as a killed writer's)

        def killed(f: IO[bytes], name: str = name, found: list[Path] = during) -> None:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            found.extend(files.interrupted_writes(tmp_path, name))

        files.atomic_write(tmp_path / name, killed)
        assert len(during) == 1 and during[0].name.startswith(".")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fits, *cut])


def test_the_temporary_file_of_a_write_under_way_is_no_interrupted_one(tmp_path: Path):
    """A second predict.py writing the same CSV removed the first one's temporary file mid-write, which then failed
    with [Errno 2] naming a hidden file: a write holds its temporary file's lock, and a file locked is left alone."""
    seen: list[list[Path]] = []

    def second_run_meanwhile(f: IO[bytes]) -> None:
        seen.append(files.interrupted_writes(tmp_path, "p.csv"))
        write_csv([Prediction(Path("b.png"), [0], [1.0])], ["x"], 1, tmp_path / "p.csv")  # removes abandoned ones
        f.write(b"first")

    files.atomic_write(tmp_path / "p.csv", second_run_meanwhile)
    assert seen == [[]] and (tmp_path / "p.csv").read_bytes() == b"first"
    (abandoned := tmp_path / ".p.csv.tmpabcdefgh").write_bytes(b"")  # no lock: a killed write's
    assert files.interrupted_writes(tmp_path, "p.csv") == [abandoned]


def test_a_symlinked_output_stays_a_link_and_its_target_gets_the_new_bytes(tmp_path: Path):
    """predict.py --output run/p.csv, a link to real/p.csv, replaced the link by a regular file and left its target's
    old content; the write now goes where check_output looks, the resolved path (the temporary file beside the target,
    on its filesystem)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "run").mkdir()
    (target := tmp_path / "real" / "p.csv").write_text("old")
    (link := tmp_path / "run" / "p.csv").symlink_to(target)
    check_output(link, [])
    files.atomic_write_bytes(link, b"new")
    assert link.is_symlink() and link.resolve() == target and target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["p.csv", "p.csv", "real", "run"]  # no temporary file


def test_atomic_write_syncs_the_data_before_the_rename_and_the_folder_after(tmp_path: Path, monkeypatch):
    """A rename can reach the disk before the data it names: a power cut would leave an empty file under the name
    (an empty best.safetensors). The filled temporary file is synced, then renamed, then its folder synced."""
    calls: list[str] = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(fd: int) -> None:
        st = os.fstat(fd)
        calls.append("fsync folder" if stat.S_ISDIR(st.st_mode) else f"fsync {st.st_size} bytes")
        fsync(fd)

    def recorded_replace(src: str, dst: str) -> None:
        calls.append(f"replace -> {Path(dst).name}")
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    files.atomic_write_bytes(tmp_path / "a.bin", b"abc")
    assert calls == ["fsync 3 bytes", "replace -> a.bin", "fsync folder"]
    assert (tmp_path / "a.bin").read_bytes() == b"abc"


def test_json_bytes_is_strict_json_with_non_finite_numbers_as_null():
    value = {"ap": {"small": math.nan, "large": 41.5}, "loss": math.inf, "rows": [(-math.inf, 1), "NaN"], "n": 3}

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    parsed = json.loads(json_bytes(value, indent=1), parse_constant=refuse)
    assert parsed == {"ap": {"small": None, "large": 41.5}, "loss": None, "rows": [[None, 1], "NaN"], "n": 3}
    assert json_bytes([0.5]) == b"[0.5]"


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o755), (0o077, 0o700)])
def test_a_built_folder_gets_the_mode_of_a_plain_mkdir(tmp_path: Path, umask: int, mode: int):
    # Before, the folder kept tempfile.mkdtemp's 0700 through the rename, whatever the umask: the demo data
    # folders were drwx------ while the files inside were 0644.
    def build(folder: Path) -> str:
        (folder / "a.txt").write_text("a")
        return "done"

    old = os.umask(umask)
    try:
        root = build_folder_once(tmp_path / "data" / "demo", "MARKER", build, "demo")
    finally:
        os.umask(old)
    assert root.stat().st_mode & 0o777 == mode
    assert (root / "MARKER").read_text() == "done"


def test_the_readers_given_a_files_bytes_read_those_not_the_file(tmp_path: Path):
    """What extract_features.py hashes is what it loads: the bytes read once, whatever the file holds by then."""
    path = tmp_path / "w.safetensors"
    save_safetensors(path, {"a": torch.zeros(2)}, {"epoch": 1})
    data = read_weights_bytes(path)
    save_safetensors(path, {"b": torch.ones(3)}, {"epoch": 2})  # replaced after the read
    assert read_metadata(path, data) == {"epoch": 1} and list(read_state_dict(path, data=data)) == ["a"]
    with pytest.raises(ValueError, match=f"'{path}' is a damaged \\(truncated\\?\\) safetensors file"):
        read_metadata(path, data[:20])
    torch.save({"state_dict": {"c": torch.zeros(1)}}, path)
    data = read_weights_bytes(path)
    path.write_bytes(b"")
    assert read_metadata(path, data) == {} and list(read_state_dict(path, data=data)) == ["c"]
    with pytest.raises(ValueError, match="is empty"):
        read_weights_bytes(path)


def test_a_filesystem_without_locks_writes_and_finds_temporary_files_by_name(tmp_path: Path, monkeypatch):
    """flock fails with ENOLCK on some network filesystems: every write failed there; it writes as before locks, and a
    temporary file is taken by its name alone."""

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(files.fcntl, "flock", no_locks)
    files.atomic_write_bytes(tmp_path / "p.csv", b"x")
    (left := tmp_path / ".p.csv.tmpabcdefgh").write_bytes(b"")
    assert (tmp_path / "p.csv").read_bytes() == b"x" and files.interrupted_writes(tmp_path, "p.csv") == [left]
