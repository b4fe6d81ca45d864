"""One config vocabulary: the shared sections mean the same in every task, every numeric value is range-checked by
one mechanism (field metadata), model.pretrained is a boolean or a file, renamed keys say where they went."""

import dataclasses
import math
import re
import typing

import enginekit
import pytest
import yaml
from enginekit import DATA_FIXTURE, TASKS, script_config, script_main
from trainkit import REPO

from swinlite.engine.cli import show_config
from swinlite.engine.config import check_values, read_yaml, to_dict
from swinlite.engine.run import write_config
from swinlite.engine.sections import RunConfig

SHARED = {s.name: s.type for s in dataclasses.fields(RunConfig)}


def _numeric(annotation) -> bool:
    args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
    return annotation in (int, float) or any(a in (int, float) for a in args)


@pytest.mark.parametrize("task", list(TASKS))
def test_shared_keys_have_the_same_fields_and_every_number_a_range(task: str):
    cfg = TASKS[task].config()
    for section in dataclasses.fields(cfg):
        fields = {f.name: f for f in dataclasses.fields(getattr(cfg, section.name))}
        shared = {f.name: f for f in dataclasses.fields(getattr(RunConfig(), section.name))}
        assert set(shared) <= set(fields), (task, section.name)  # a task adds keys, never drops a shared one
        for name, f in fields.items():
            hints = typing.get_type_hints(type(getattr(cfg, section.name)))
            if name in shared:
                assert hints[name] == typing.get_type_hints(type(getattr(RunConfig(), section.name)))[name], name
            if _numeric(hints[name]):
                assert "bounds" in f.metadata, f"{section.name}.{name} has no allowed range"


@pytest.mark.parametrize(
    ("task", "override", "message"),
    [
        (
            "classification",
            "train.ema_decay=1.5",
            r"train.ema_decay=1.5 is out of range: expected 0 <= train.ema_decay < 1",
        ),
        ("classification", "train.label_smoothing=1.5", r"expected 0 <= train.label_smoothing < 1"),
        ("classification", "train.max_iters=0", r"train.max_iters=0 is out of range: expected 1 <= train.max_iters"),
        ("classification", "data.crop_pct=0", r"expected 0 < data.crop_pct <= 1"),
        (
            "classification",
            "data.scale=[0,1]",
            r"data.scale=\[0.0, 1.0\] is out of range: expected 0 < data.scale <= 1",
        ),
        ("classification", "optim.lr=-1", r"expected 0 <= optim.lr"),
        ("classification", "train.seed=-1", r"expected 0 <= train.seed < 4294967296"),
        ("classification", "data.interpolation=cubic", r"data.interpolation must be one of bilinear, bicubic"),
        ("classification", "data.interpolation=random", r"must be one of bilinear, bicubic, nearest, lanczos, got"),
        ("detection", "data.max_size=0", r"data.max_size=0 is out of range: expected 1 <= data.max_size"),
        ("detection", "train.max_iters=0", r"expected 1 <= train.max_iters"),
        ("detection", "train.ema_decay=1.5", r"expected 0 <= train.ema_decay < 1"),
        ("detection", "data.train_sizes=[0,8]", r"expected 1 <= data.train_sizes"),
        ("detection", "data.train_sizes=[800,480]", r"data.train_sizes must be \[low, high\] with low <= high, got"),
        ("segmentation", "data.ratio_range=[2,0.5]", r"data.ratio_range must be \[low, high\] with low <= high"),
        ("classification", "data.ratio=[2,1]", r"data.ratio must be \[low, high\] with low <= high, got \[2.0, 1.0\]"),
        ("detection", "model.score_thresh=2", r"expected 0 <= model.score_thresh <= 1"),
        ("detection", "schedule.decay_rate=0", r"expected 0 < schedule.decay_rate <= 1"),
        ("detection", "schedule.kind=linear", r"schedule.kind must be one of cosine, step, poly, got 'linear'"),
    ],
)
def test_values_out_of_range_are_errors_naming_the_range(task: str, override: str, message: str):
    with pytest.raises(ValueError, match=message):
        TASKS[task].load_config(None, [override])


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("optim.lr", "true", "expected a finite number"),  # the command line trained at lr 1.0
        ("data.hflip", "yes", "expected a finite number"),
        ("optim.clip_grad", "on", "expected a finite number"),  # float | None
        ("optim.lr", "inf", "expected a finite number"),  # passed the range check
        ("optim.lr", ".inf", "expected a finite number"),
        ("schedule.decay_epochs", "[8, .nan]", "expected a finite number"),
        ("train.epochs", "true", "expected an integer"),
        ("optim.lr", "1:30", "expected a finite number"),  # YAML 1.1's sexagesimal: lr 90.0
        ("train.output_dir", "null", "expected a string"),  # trained into ./None/ from a file, ./null/ from the line
        ("train.output_dir", "~", "expected a string"),
        ("data.re_mode", "null", "expected a string"),  # a word with choices: "must be one of ..., got 'None'"
    ],
)
def test_command_line_and_yaml_refuse_the_same_values(key: str, value: str, message: str, tmp_path):
    section, name = key.split(".")
    (path := tmp_path / "c.yaml").write_text(f"{section}:\n  {name}: {value}\n")
    for config, overrides in ((None, [f"{key}={value}"]), (path, [])):
        with pytest.raises(ValueError, match=rf"config key '{key}': cannot use .*, {message}"):
            TASKS["classification"].load_config(config, overrides)


def _entry(cfg, key: str):
    section, name, *entry = key.split(".")
    value = getattr(getattr(cfg, section), name)
    return value[entry[0]] if entry else value


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [  # before, PyYAML's YAML 1.1 resolvers read some of these silently otherwise:
        ("train.epochs", "017", 17),  # octal: 15 epochs
        ("train.epochs", "0o17", 15),
        ("train.epochs", "0x1F", 31),
        ("optim.lr", "1e-1", 0.1),
        ("optim.lr", "1.0e-05", 1e-5),  # PyYAML's safe_dump writes floats so (config.yaml)
        ("optim.lr", ".5", 0.5),
        ("model.kwargs.drop_path_rate", "1e-1", 0.1),  # the string '1e-1': timm failed on "'<=' not supported"
        ("model.kwargs.drop_path_rate", "5E-2", 0.05),
        ("model.kwargs.window_size", "012", 12),  # octal: 10
        ("model.kwargs.window_size", "0o14", 12),
        ("model.kwargs.img_size", "1:30", "1:30"),  # sexagesimal: 90
        ("model.kwargs.qkv_bias", "no", False),  # booleans as YAML 1.1 reads them, as before
        ("model.pretrained", "yes", True),
        ("model.kwargs.rel_pos", "null", None),
    ],
)
def test_numbers_read_as_yaml_1_2_from_a_file_and_the_command_line_alike(key: str, value: str, expected, tmp_path):
    *parents, leaf = key.split(".")
    text = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parents)) + f"{'  ' * len(parents)}{leaf}: {value}\n"
    (path := tmp_path / "c.yaml").write_text(text)
    for config, overrides in ((None, [f"{key}={value}"]), (path, [])):
        got = _entry(TASKS["classification"].load_config(config, overrides), key)
        assert got == expected and type(got) is type(expected), (config, got)


ROUND_TRIP = [  # strings YAML 1.2 reads as numbers (quoted when written), numbers PyYAML writes in its own way
    "train.output_dir=1e-1",
    "data.data_dir=017",
    "model.kwargs={drop_path_rate: 1e-1, tag: '2e3', size: 0x10, name: '0o17', big: 1.0e+30, tiny: 1e-300}",
    "optim.lr=1e-5",
    "optim.weight_decay=0",
    "schedule.min_lr=5e-7",
    "model.pretrained=false",
]


@pytest.mark.parametrize("task", list(TASKS))
def test_the_printed_config_reads_back_identically(task: str, tmp_path, capsys):
    """--print-config's YAML (itself a valid --config file) reads back as the config it was written from: PyYAML's own
    writer (YAML 1.1) puts the string '1e-1' bare, which the config reader (YAML 1.2 numbers) takes for 0.1. The floats
    PyYAML writes (1.0e-05) read back as floats."""
    config = script_config(task, tmp_path)
    cfg = TASKS[task].load_config(config, ROUND_TRIP)
    assert cfg.train.output_dir == "1e-1" and cfg.model.kwargs["tag"] == "2e3" and cfg.model.kwargs["size"] == 16
    assert script_main(task, ["--config", config, "--print-config", *ROUND_TRIP]) == 0
    (path := tmp_path / "printed.yaml").write_text(capsys.readouterr().out)
    assert TASKS[task].load_config(path) == cfg
    assert read_yaml(path) == to_dict(cfg)
    write_config(path := tmp_path / "config.yaml", cfg)  # a run's config.yaml, which --resume compares with
    assert TASKS[task].load_config(path) == cfg
    numbers = {s: {k: v for k, v in sec.items() if isinstance(v, int | float)} for s, sec in to_dict(cfg).items()}
    (path := tmp_path / "safe_dump.yaml").write_text(yaml.safe_dump(numbers))  # PyYAML's writer: 1.0e-05, 5.0e-07
    assert read_yaml(path) == numbers


def test_the_range_check_refuses_non_finite_numbers_set_in_code():
    cfg = TASKS["classification"].config()
    cfg.optim.lr = math.inf
    with pytest.raises(ValueError, match=r"optim.lr=inf is out of range: expected 0 <= optim.lr"):
        check_values(cfg)


@pytest.mark.parametrize("task", list(TASKS))
def test_pretrained_is_a_boolean_or_a_file_and_stays_one_in_config_yaml(task: str):
    load = TASKS[task].load_config
    for value, expected in (("true", True), ("True", True), ("false", False), ("none", False), ("w.pth", "w.pth")):
        cfg = load(None, [f"model.pretrained={value}"])
        assert cfg.model.pretrained == expected and type(cfg.model.pretrained) is type(expected)
        text = yaml.safe_dump(to_dict(cfg), sort_keys=False)  # what config.yaml holds
        assert yaml.safe_load(text)["model"]["pretrained"] == expected
        assert load(None, [f"model.pretrained={yaml.safe_load(text)['model']['pretrained']}"]) == cfg


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.drop_path_rate=0.1", "config key 'model.drop_path_rate' is now 'model.kwargs.drop_path_rate'"),
        ("schedule.warmup_iters=10", "config key 'schedule.warmup_iters' is now 'schedule.warmup_epochs"),
        ("model.out_norm=false", "config key 'model.out_norm' is now 'model.kwargs.out_norm'"),
        ("model.pretrained=timm", "model.pretrained 'timm' is now true"),  # at the run's start alone (--print-config)
        ("optim.lrr=1", "unknown config key 'optim.lrr'; did you mean 'optim.lr'?"),
        # a key cut short names a key it begins (difflib alone: train.amp, train.seed)
        ("train.ema=0.9", "unknown config key 'train.ema'; did you mean 'train.ema_decay'?"),
        ("train.ema_w=true", "unknown config key 'train.ema_w'; did you mean 'train.ema_warmup'?"),
        ("train.save=1", "unknown config key 'train.save'; did you mean 'train.save_every_steps'?"),
        ("model.name.x=1", "unknown config key 'model.name.x'"),
        # the key's name in its section, or in any (a bare key); another tool's name as swinlite's (was clip_grad)
        ("optim.learning_rate=1", "unknown config key 'optim.learning_rate'; did you mean 'optim.lr'?"),
        ("lr=1", "unknown config key 'lr'; did you mean 'optim.lr'?$"),  # listed every valid key
        ("train.lr=1", "unknown config key 'train.lr'; did you mean 'optim.lr'?"),
        ("optim.weight-decay=0", "unknown config key 'optim.weight-decay'; did you mean 'optim.weight_decay'?"),
    ],
)
@pytest.mark.parametrize("task", list(TASKS))
def test_renamed_and_unknown_keys(task: str, override: str, message: str):
    with pytest.raises(ValueError, match=message.replace("?", r"\?")):
        TASKS[task].load_config(None, [override])


@pytest.mark.parametrize("task", list(TASKS))
def test_model_kwargs_whole_or_one_entry(task: str):
    cfg = TASKS[task].load_config(None, ["model.kwargs={window_size: 12, img_size: 384}", "model.kwargs.rel_pos=cpb"])
    assert cfg.model.kwargs == {"window_size": 12, "img_size": 384, "rel_pos": "cpb"}
    assert TASKS[task].config().model.kwargs == {}  # the defaults were not mutated
    with pytest.raises(ValueError, match="model.kwargs': cannot use '12', expected a mapping"):
        TASKS[task].load_config(None, ["model.kwargs=12"])


def test_a_whole_model_kwargs_names_the_entries_it_drops_and_one_entry_keeps_them(tmp_path, recwarn):
    """``model.kwargs={window_size: 12, img_size: 384}``, as train.py's help suggested, dropped the fine-tune recipe's
    drop_path_rate without a word; ``model.kwargs.KEY=VALUE`` keeps it, ``{}`` clears it on purpose."""
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  kwargs: {drop_path_rate: 0.1}\n")
    load = TASKS["classification"].load_config
    one_by_one = load(path, ["model.kwargs.window_size=12", "model.kwargs.img_size=384"]).model.kwargs
    assert one_by_one == {"drop_path_rate": 0.1, "window_size": 12, "img_size": 384}
    assert load(path, ["model.kwargs={}"]).model.kwargs == {} and len(recwarn) == 0
    with pytest.warns(
        UserWarning,
        match=r"^model.kwargs=\{window_size: 12\} replaces the whole mapping, dropping "
        r"drop_path_rate=0.1 of the config; model.kwargs.KEY=VALUE sets one entry",
    ):
        assert load(path, ["model.kwargs={window_size: 12}"]).model.kwargs == {"window_size": 12}


@pytest.mark.parametrize("rank", [0, 1])
def test_a_warning_of_the_settings_is_shown_by_rank_0_alone(rank: int, tmp_path, monkeypatch, capsys, recwarn):
    """Every process of a torchrun launch loads the same settings: each showed the same warning."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", str(rank))
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  kwargs: {drop_path_rate: 0.1}\n")
    assert show_config(TASKS["classification"].config, path, ["model.kwargs={window_size: 12}"]) == 0
    assert [str(w.message).split(",")[0] for w in recwarn] == ["model.kwargs={window_size: 12} replaces the whole "
                                                               "mapping"] * (rank == 0)  # fmt: skip
    assert capsys.readouterr().err == ""


REAL_DATA = {  # the config each script takes with --data-dir and without --config, and the dataset it sets
    "classification": ("finetune_imagefolder.yaml", "folder"),
    "detection": ("det_coco_fasterrcnn_swin_tiny_1x.yaml", "coco"),
    "segmentation": ("seg_ade20k_upernet_swin_tiny.yaml", "ade20k"),
}
DEMO = {"classification": "demo.yaml", "detection": "det_demo.yaml", "segmentation": "seg_demo.yaml"}


@pytest.mark.parametrize("task", list(TASKS))
def test_data_dir_without_config_takes_the_real_data_recipe(task: str, tmp_path, capsys):
    """train_detection.py --data-dir /data/coco trained the digits demo's pico detector at 64 px on the CPU."""
    name, dataset = REAL_DATA[task]
    printed = {}
    for args, config in ((["--data-dir", tmp_path], name), ([], DEMO[task])):
        assert script_main(task, ["--print-config", *args]) == 0
        printed[config] = yaml.safe_load(capsys.readouterr().out)
    real = TASKS[task].load_config(REPO / "configs" / name, [f"data.data_dir={tmp_path}", f"data.dataset={dataset}"])
    assert printed[name] == to_dict(real)
    assert printed[DEMO[task]] == to_dict(TASKS[task].load_config(REPO / "configs" / DEMO[task]))
    assert printed[name]["model"]["name"] != printed[DEMO[task]]["model"]["name"]


@pytest.mark.parametrize(
    ("opt", "message"),
    [
        ("adamww", "optim.opt 'adamww' is not a timm optimizer; did you mean 'adamw'?"),
        ("lookahead_adamww", "optim.opt 'lookahead_adamww' is not a timm optimizer; did you mean 'lookahead_adamw'?"),
        ("fused_adamw", "optim.opt 'fused_adamw' is not a timm optimizer; did you mean 'fusedadamw'?"),  # timm: adamw
        ("xyzzy", "optim.opt 'xyzzy' is not a timm optimizer; timm.optim.list_optimizers() names them"),
    ],
)
@pytest.mark.parametrize("task", list(TASKS))
def test_an_unknown_optimizer_is_refused_with_the_config_naming_the_key(task: str, opt: str, message: str):
    """optim.opt=adamww passed the config check: timm refused it only when the optimizer was built, after the data
    scan, as "Optimizer adamww not found in registry" (no key, no suggestion); fused_adamw trained plain AdamW."""
    with pytest.raises(ValueError, match=re.escape(message)):
        TASKS[task].load_config(None, [f"optim.opt={opt}"])
    for name in ("adamw", "AdamW", "sgd", "lookahead_adamw", "LookAhead_Lamb"):  # timm's names, any case
        assert TASKS[task].load_config(None, [f"optim.opt={name}"]).optim.opt == name


@pytest.mark.parametrize("task", list(TASKS))
def test_the_training_script_names_an_unknown_optimizer_before_it_reads_the_data(task: str, tmp_path, request, capsys):
    """The script scanned the data (writing scan.json.gz into the output folder) before the optimizer name failed."""
    data, out = request.getfixturevalue(DATA_FIXTURE[task]), tmp_path / "out"
    argv = ["--config", str(script_config(task, tmp_path)), *enginekit.overrides(task, data, out), "optim.opt=adamww"]
    assert script_main(task, argv) == 2
    assert "error: optim.opt 'adamww' is not a timm optimizer; did you mean 'adamw'?" in capsys.readouterr().err
    assert not out.exists()  # nothing scanned, nothing written
