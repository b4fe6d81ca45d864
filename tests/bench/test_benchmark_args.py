"""scripts/benchmark.py's arguments: bad ones are one ``error:`` line and exit 2 before anything is built, whatever the
run; an option the chosen run does not take is refused (it was ignored and recorded as if it ran); every command
quoted in the README, docs/, benchmarks/*.md, benchmarks/*.sh and the script's --help is accepted. No benchmark runs
here: every runner is replaced by one that fails the test."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch
from scriptkit import REPO, load_script, run_script
from swinbench import compiled, contended, deploy, rel_pos_1d, sizes, swin
from swinbench.choices import EVERY_RUN, RUN_OPTIONS, SIZES, option
from test_readme import DOCUMENTS, _code_blocks, prose_units

SCRIPT = "scripts/benchmark.py"
RUNNERS = {swin: "run_benchmark", compiled: "run_compile_benchmark", contended: "run_contended", sizes: "run_sizes",
           rel_pos_1d: "run_rel_pos_1d", deploy: "run_deploy_benchmark"}  # fmt: skip
RUNNERS_AT = {compiled: "run_compiled_train_benchmark"}


@pytest.fixture
def no_run(monkeypatch) -> list:
    """Every runner of the script replaced: it records its first argument and fails the test if reached."""
    started = []

    def started_run(*args, **kwargs):
        started.append(args[0] if args else kwargs)
        raise RuntimeError("the benchmark started: the arguments were not refused before it")

    for module, name in [*RUNNERS.items(), *RUNNERS_AT.items()]:
        monkeypatch.setattr(module, name, started_run)
    return started


BAD = [
    # the deploy run took --repeats 0 and --warmup -1, built every ONNX export (minutes) and then failed on the median
    (["--deploy", "--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--deploy", "--warmup", "-1"], "--warmup must be at least 0, got -1"),
    (["--rel-pos-1d", "--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--contended", "--warmup", "-1"], "--warmup must be at least 0"),
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
    # BenchConfig's "expected batch >= 1, img_size >= 32, ..." named no option
    (["--img-size", "16"], "--img-size must be at least 32, got 16"),
    (["--contended", "--img-size", "31"], "--img-size must be at least 32, got 31"),
    # an empty --sizes list was falsy: the full default benchmark ran instead; the refusal named no option
    (["--sizes="], "--sizes must be a non-empty list of N or HxW with N, H, W >= 32, got ''"),
    (["--sizes", ","], "--sizes must be a non-empty list"),
    (["--sizes", "0"], "--sizes must be a non-empty list of N or HxW with N, H, W >= 32, got '0x0'"),
    (["--sizes", "224,16x224"], "--sizes must be a non-empty list"),
    (["--sizes=", "--compile"], "--compile and --sizes are separate runs"),
    # timm's Swin V2 takes no padding patch embedding: a TypeError at 34 px, after the sizes before it (minutes with
    # the default list, which ends at 800x1333), and no JSON
    (["--sizes", "32,34", "--size", "v2_tiny"], "every --sizes side must be a multiple of 4; got 34x34 (e.g. 36x36"),
    (["--sizes", "--size", "v2_tiny"], "got 800x1333 (e.g. 800x1336 instead)"),
    # a device torch does not know was a RuntimeError traceback from the first tensor made
    (["--device", "tpu"], "--device: expected cpu, cuda or cuda:N"),
    (["--sizes", "--device", "gpu0"], "--device: expected cpu, cuda or cuda:N"),
    pytest.param(
        ["--device", "cuda"],
        "device 'cuda' is not available here (torch.cuda.is_available() is False); valid here: cpu",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA"),
    ),
    # options a run does not take were ignored, and the JSON config recorded them as if they had run
    (["--compile", "--tasks", "inference,train"], "--tasks does not apply to --compile, which takes --size,"),
    (["--compile", "--precisions", "fp32,bf16"], "--precisions does not apply to --compile"),
    (["--compile", "--no-memory"], "--no-memory does not apply to --compile"),
    (["--compile-train", "--tasks", "inference"], "--tasks does not apply to --compile-train"),
    (["--compile-train", "--profile"], "--profile does not apply to --compile-train"),
    (["--contended", "--no-memory"], "--no-memory does not apply to --contended"),
    (["--contended", "--profile"], "--profile does not apply to --contended"),
    (["--seed", "1"], "--seed does not apply to the side-by-side run (no run option)"),
    (["--compile", "--seed", "1"], "--seed does not apply to --compile"),
    (["--sizes", "--models", "swinlite,timm"], "--models does not apply to --sizes"),
    (["--sizes", "--precisions", "fp32"], "--precisions does not apply to --sizes"),
    (["--sizes", "--img-size", "64"], "--img-size does not apply to --sizes"),
    (["--deploy", "--size", "tiny"], "--size does not apply to --deploy, which takes --threads, --warmup, --repeats"),
    (["--deploy", "--batch", "8"], "--batch does not apply to --deploy"),
    (["--deploy", "--models", "timm"], "--models does not apply to --deploy"),
    (["--deploy", "--device", "cpu"], "--device does not apply to --deploy"),
    (["--rel-pos-1d", "--size", "small"], "--size does not apply to --rel-pos-1d"),
    (["--rel-pos-1d", "--batch", "2"], "--batch does not apply to --rel-pos-1d"),
    (["--no-warm-start"], "--no-warm-start does not apply to the side-by-side run (no run option)"),
    # ran and recorded "threads": 99 on a 2-core machine
    (["--threads", "100000"], "--threads 100000 is more than the "),
    (["--rel-pos-1d", "--threads", "100000"], "--threads 100000 is more than the "),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_arguments_are_one_error_line_before_anything_runs(argv, message, no_run, tmp_path, capsys):
    code = run_script("benchmark", [*argv, "--json", tmp_path / "out.json"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err and not no_run


def test_deploy_refuses_repeats_before_the_exports(monkeypatch):
    """The check of the runner itself, for callers other than the script."""

    def exported(*args):
        raise RuntimeError("the exports started")

    monkeypatch.setattr(deploy, "build_files", exported)
    for kwargs in (dict(repeats=0), dict(warmup=-1)):
        with pytest.raises(ValueError, match="expected warmup >= 0 and repeats >= 1"):
            deploy.run_deploy_benchmark(**kwargs)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # each run gets the defaults of what it takes; --compile's fixed fp32 inference is the runner's to record
        (
            ["--compile", "--batch", "1", "--img-size", "32", "--models", "swinlite,timm"],
            dict(batch=1, img_size=32, models=("swinlite", "timm"), tasks=("inference", "train")),
        ),
        (["--contended"], dict(repeats=15, warmup=2, batch=8, memory=True, profile=False)),
        # a list value given twice ran its block twice (rows that could not be told apart, ratios across blocks);
        # each of the three lists counts it once, where it first appears
        (
            ["--models", "timm,swinlite,timm", "--tasks", "inference,train,inference", "--precisions", "fp32,fp32"],
            dict(models=("timm", "swinlite"), tasks=("inference", "train"), precisions=("fp32",)),
        ),
        (["--size", "v2_tiny", "--no-memory", "--tasks", "train"], dict(img_size=256, memory=False, tasks=("train",))),
        (
            ["--sizes", "224", "--tasks", "inference"],
            dict(sizes=((224, 224),), batch=2, warmup=1, repeats=3, tasks=("inference",), profile=True),
        ),
    ],
)
def test_each_run_gets_what_it_takes(argv, expected, no_run, tmp_path):
    with pytest.raises(RuntimeError, match="the benchmark started"):
        load_script("benchmark").main([*argv, "--json", str(tmp_path / "out.json")])
    (cfg,) = no_run
    assert {name: getattr(cfg, name) for name in expected} == expected


@pytest.mark.parametrize(
    ("argv", "cores", "message"),
    [
        # a second process kept the only core busy, the one the benchmark ran on (taskset -c 0), without a word
        (
            ["--contended"],
            {0},
            "--contended needs at least 2 cores (one kept busy, one for the benchmark); this process",
        ),
        (["--threads", "3"], {0, 1}, "--threads 3 is more than the 2 cores this process may use"),
    ],
    ids=["contended on one core", "threads above the cores"],
)
def test_runs_the_cores_cannot_hold_are_refused(argv, cores, message, monkeypatch, no_run, tmp_path, capsys):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cores, raising=False)
    code = run_script("benchmark", [*argv, "--json", tmp_path / "out.json"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not no_run


@pytest.mark.parametrize(
    ("argv", "units", "precisions", "said"),
    [
        # on an AVX2 CPU the default timed emulated bf16 too: 9 minutes at batch 1, 32², "204 % of matmul ceiling"
        ([], False, ("fp32",), "note: bf16 left out: this CPU has no bf16 units"),
        (["--compile-train"], False, ("fp32",), "note: bf16 left out"),
        (["--precisions", "fp32,bf16"], False, ("fp32", "bf16"), "warning: bf16 on a CPU without bf16 units"),
        (["--precisions", "bf16"], True, ("bf16",), ""),
        ([], True, ("fp32", "bf16"), ""),
    ],
    ids=["default, emulated", "compile-train default, emulated", "asked, emulated", "asked, units", "default, units"],
)
def test_cpu_precisions_follow_its_bf16_units(argv, units, precisions, said, monkeypatch, no_run, tmp_path, capsys):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: units)
    with pytest.raises(RuntimeError, match="the benchmark started"):
        load_script("benchmark").main([*argv, "--json", str(tmp_path / "out.json")])
    (cfg,) = no_run
    err = capsys.readouterr().err
    assert cfg.precisions == precisions and err.startswith(said) and err.count("\n") == bool(said), err


@pytest.mark.parametrize(("argv", "seed"), [([], None), (["--seed", "7"], 7)])
def test_contended_gets_the_seed_of_its_orders(argv, seed, monkeypatch, tmp_path):
    """None: the run draws one (and records it)."""
    given = []

    def started_run(cfg, **kwargs):
        given.append(kwargs["order_seed"])
        raise RuntimeError("the benchmark started")

    monkeypatch.setattr(contended, "run_contended", started_run)
    with pytest.raises(RuntimeError, match="the benchmark started"):
        load_script("benchmark").main(["--contended", *argv, "--json", str(tmp_path / "out.json")])
    assert given == [seed]


def _arguments(command: str) -> list[str]:
    """The arguments after the script in a quoted command (a synopsis' ``[...]`` taken as given, W and R as 1)."""
    command = re.sub(r"\[([^\]]*)\]", r"\1", command)
    tokens = shlex.split(command, comments=True)
    start = next(i for i, token in enumerate(tokens) if token.endswith(SCRIPT)) + 1
    return [{"W": "1", "R": "1"}.get(token, token) for token in tokens[start:]]


def quoted_commands(text: str) -> list[list[str]]:
    """The arguments of every ``scripts/benchmark.py`` command in markdown ``text``: in fenced code blocks (lines
    continued by a backslash joined) and in inline code spans (a span may wrap across lines)."""
    lines = [line for block in _code_blocks(text) for line in block.replace("\\\n", " ").splitlines()]
    spans = [span for unit in prose_units(text) for span in re.findall(r"`([^`]*scripts/benchmark\.py[^`]*)`", unit)]
    return [_arguments(" ".join(command.split())) for command in lines + spans if SCRIPT in command]


def shell_commands(script: Path, tmp_path: Path) -> list[list[str]]:
    """The arguments a benchmarks/*.sh script passes to scripts/benchmark.py (:func:`python_calls`)."""
    return [call[call.index(SCRIPT) + 1 :] for call in python_calls(script, tmp_path) if SCRIPT in call]


def python_calls(script: Path, tmp_path: Path) -> list[list[str]]:
    """The arguments of every ``python`` a benchmarks/*.sh script runs, in order, recorded by running it with a
    stand-in ``python`` that only writes down its arguments (and answers a ``-c`` query: True for CUDA, else
    fp32,bf16)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "python"
    stub.write_text(
        '#!/bin/sh\nfor a in "$@"; do printf "%s\\t" "$a"; done >> "$CALLS"; echo >> "$CALLS"\n'
        'case "$1 $2" in "-c "*cuda.is_available*) echo True;; "-c "*) echo fp32,bf16;; esac\nexit 0\n'
    )
    stub.chmod(0o755)
    env = os.environ | dict(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHON=str(stub), CALLS=str(log),
                            OUT=str(tmp_path / "out"), TMPDIR=str(tmp_path), MAX_LOAD="1000")  # fmt: skip
    subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=60, check=True)
    return [line.rstrip("\t").split("\t") for line in log.read_text().splitlines()]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="runs gpu_run.sh")
def test_gpu_run_packs_no_json_of_an_earlier_run_for_a_part_that_fails(tmp_path) -> None:
    """A part that failed in an $OUT used before left that run's <name>.json, which PACK packed as this run's."""
    bin_dir, out, pack = tmp_path / "bin", tmp_path / "out", tmp_path / "gpu.tgz"
    bin_dir.mkdir()
    out.mkdir()
    stub = bin_dir / "python"  # CUDA there, every -c query answered; every benchmark fails
    stub.write_text('#!/bin/sh\ncase "$1 $2" in "-c "*cuda.is_available*) echo True;; "-c "*) ;; *) exit 1;; esac\n')
    stub.chmod(0o755)
    (out / "cuda_tiny_b1.json").write_text("{}")  # the earlier run's
    env = os.environ | dict(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OUT=str(out), PACK=str(pack))
    done = subprocess.run(["bash", "benchmarks/gpu_run.sh", "cuda_tiny_b1"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1 and "cuda_tiny_b1: exit 1" in done.stdout, done.stderr
    with tarfile.open(pack) as packed:
        assert "./cuda_tiny_b1.json" not in packed.getnames() and not (out / "cuda_tiny_b1.json").exists()


GPU_TABLE_PARTS = ["cuda_tiny_b64", "cuda_tiny_b1", "cuda_sizes", "cuda_tiny_b64_compile"]  # performance.md's table


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="runs gpu_run.sh")
def test_gpu_run_runs_the_cuda_table_s_parts_first_within_the_budget(tmp_path) -> None:
    """The kernel checks and the variants ran first, and their limits with the table's first ones (630 s) passed the
    default budget of 540 s: sizes and compiled were skipped unless the earlier parts ended well under their limits."""
    script = REPO / "benchmarks" / "gpu_run.sh"

    def part(call: list[str]) -> str | None:
        if "--json" in call:
            return Path(call[call.index("--json") + 1]).stem
        if call[:2] == ["-m", "pytest"]:
            return "cuda_checks"
        return "cuda_variants" if "benchmarks/cuda_variants_check.py" in call else None

    parts = [name for name in map(part, python_calls(script, tmp_path)) if name]
    assert parts[:6] == [*GPU_TABLE_PARTS, "cuda_checks", "cuda_variants"], parts
    text = script.read_text()
    limits = dict(re.findall(r"^run (\w+) (\d+) ", text, re.MULTILINE))
    budget = int(re.search(r"BUDGET_S=\$\{BUDGET_S:-(\d+)\}", text).group(1))
    assert sum(int(limits[name]) for name in GPU_TABLE_PARTS) <= budget - 30  # 30 s for the setup before them


def _quoting_files() -> list[Path]:
    return [*DOCUMENTS, *sorted((REPO / "benchmarks").glob("*.md")), *sorted((REPO / "benchmarks").glob("*.sh"))]


@pytest.mark.parametrize("source", [*_quoting_files(), REPO / SCRIPT], ids=lambda p: p.name)
def test_every_quoted_command_is_accepted(source: Path, tmp_path, monkeypatch) -> None:
    # the commands' --threads 2 and --contended need 2 cores, which the machines they name have
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    if source.suffix == ".sh":
        if shutil.which("bash") is None or not Path("/proc/loadavg").is_file():
            pytest.skip("runs the script under bash, which reads /proc/loadavg")
        commands = shell_commands(source, tmp_path)
        assert commands, f"{source.name} ran no benchmark command"
    elif source.suffix == ".py":  # the examples of --help
        commands = [_arguments(line) for line in load_script("benchmark").__doc__.splitlines() if SCRIPT in line]
        assert len(commands) >= len(RUN_OPTIONS)
    else:
        commands = quoted_commands(source.read_text())
    parse_args = load_script("benchmark").parse_args
    refused = []
    for argv in commands:
        try:
            parse_args(argv)
        except SystemExit:
            refused.append(" ".join(argv))
    assert not refused, f"{source.name} quotes commands scripts/benchmark.py refuses: {refused}"


def test_quoted_commands_are_found() -> None:
    """The extraction finds what the documents hold (a pattern that matched nothing would pass the test above)."""
    text = "Run\n```bash\npython scripts/benchmark.py --compile \\\n    --json a.json   # note\n```\n"
    text += "and `PYTHONPATH=$PWD python scripts/benchmark.py --size\ntiny --batch 8`, or `scripts/benchmark.py`."
    assert quoted_commands(text) == [["--compile", "--json", "a.json"], ["--size", "tiny", "--batch", "8"], []]
    performance = quoted_commands((REPO / "docs" / "performance.md").read_text())
    assert ["--rel-pos-1d", "--repeats", "11", "--json", "benchmarks/cpu_rel_pos_1d.json"] in performance


def test_performance_doc_lists_the_options_each_run_takes() -> None:
    """docs/performance.md listed --size {tiny,small,base} (v2_tiny exists), left --deploy and --compile-train out, and
    said only --warmup, --repeats and --json apply to --rel-pos-1d (--threads does too)."""
    text = (REPO / "docs" / "performance.md").read_text()
    flat = " ".join(text.split())
    assert f"`--size {{{','.join(SIZES)}}}`" in flat
    assert f"besides {', '.join(f'`{option(name)}`' for name in EVERY_RUN[:-1])} and `--json`" in flat
    lines = text.splitlines()
    start = lines.index("| run | options it takes |") + 2
    table = {}
    for line in lines[start : next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))]:
        run, options = line.strip("| ").split(" | ")
        table[run] = tuple(name.replace("-", "_") for name in re.findall(r"`--([\w-]+)`", options))
    assert table == {f"`{option(run)}`" if run else "side by side (no run option)": v for run, v in RUN_OPTIONS.items()}
