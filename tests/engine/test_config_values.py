"""What the config does with a value it cannot use as written: text YAML reads as another type where a string is
expected, an empty value; a file and the command line alike."""

import re

import pytest
from enginekit import TASKS


def _file(tmp_path, key: str, value: str):
    section, name = key.split(".")
    (path := tmp_path / "c.yaml").write_text(f"{section}:\n  {name}: {value}\n")
    return path


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("data.classes", "[background, no]", "'data.classes' item 1: YAML read the boolean False"),
        ("data.classes", "[background, On]", "'data.classes' item 1: YAML read the boolean True"),
        ("data.classes", "[a, b, 010]", "'data.classes' item 2: YAML read the integer 10"),
        ("data.classes", "[1.50]", "'data.classes' item 0: YAML read the number 1.5"),
        ("data.classes", "[0x1F]", "'data.classes' item 0: YAML read the integer 31"),
        ("data.classes", "[a, 1e3]", "'data.classes' item 1: YAML read the number 1000.0"),
        ("data.classes", "[2024-01-31]", "'data.classes' item 0: YAML read the date datetime.date(2024, 1, 31)"),
    ],
)
def test_list_items_yaml_reads_as_another_type_than_string_are_refused_from_a_file_and_the_command_line(
    tmp_path, key: str, value: str, message: str
):
    """The list's items became 'False', 'True', '10', '1.5', '31', '1000.0': str() of what YAML read."""
    for config, overrides in ((None, [f"{key}={value}"]), (_file(tmp_path, key, value), [])):
        with pytest.raises(ValueError, match=re.escape(f"config key {message}; quote it to keep the text as a string")):
            TASKS["segmentation"].load_config(config, overrides)


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        ("train.output_dir", "0010", "the integer 10"),
        ("train.output_dir", "1e3", "the number 1000.0"),
        ("train.output_dir", "no", "the boolean False"),
        ("data.data_dir", "2024-01-31", "the date datetime.date(2024, 1, 31)"),
        ("data.train_images", "0010", "the integer 10"),  # str | None
        ("model.pretrained", "5", "the integer 5"),  # bool | str
    ],
)
def test_a_string_key_in_a_file_refuses_an_unquoted_number_and_takes_a_quoted_one(
    tmp_path, key: str, value: str, read: str
):
    """A file's 'output_dir: 0010' trained into ./10; the command line's train.output_dir=0010 is the text as written
    (a string key's value is not read as YAML there)."""
    section, name = key.split(".")
    with pytest.raises(ValueError, match=f"^config key '{key}': YAML read {re.escape(read)}; quote it"):
        TASKS["segmentation"].load_config(_file(tmp_path, key, value))
    quoted = TASKS["segmentation"].load_config(_file(tmp_path, key, f"'{value}'"))
    line = TASKS["segmentation"].load_config(None, [f"{key}={value}"])
    assert getattr(getattr(quoted, section), name) == getattr(getattr(line, section), name) == value


def test_quoted_items_of_a_list_are_the_text_as_written():
    cfg = TASKS["segmentation"].load_config(None, ["data.classes=[background, 'no', '010', '1.50', road]"])
    assert cfg.data.classes == ("background", "no", "010", "1.50", "road")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.output_dir=", "config key 'train.output_dir' is empty, expected a string"),  # trained into ./
        ("data.data_dir= ", "config key 'data.data_dir' is empty, expected a string"),  # trained in ./
        ("data.train_images=", "config key 'data.train_images' is empty, expected a string"),  # str | None
        ("model.pretrained=", "config key 'model.pretrained' is empty, expected true or false or a string"),
        ("data.classes=[a, '']", "config key 'data.classes' item 1 is empty, expected a string"),
        ("optim.lr=", "config key 'optim.lr' is empty, expected a finite number"),
    ],
)
def test_an_empty_value_is_refused_saying_what_the_key_expects(override: str, message: str):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TASKS["segmentation"].load_config(None, [override])


def test_an_empty_string_in_a_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="config key 'train.output_dir' is empty, expected a string"):
        TASKS["classification"].load_config(_file(tmp_path, "train.output_dir", "''"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("optim.lr", "1_000"),  # float() took it: lr 1000.0
        ("optim.lr", "'1_000'"),
        ("optim.clip_grad", "1_0"),  # float | None
        ("schedule.decay_epochs", "[8, 1_1]"),
        ("optim.lr", "infinity"),  # float() took it, the range check refused it as out of range
        ("train.epochs", "1_000"),  # refused before
    ],
)
def test_yaml_1_1_underscored_numbers_are_refused_for_every_number_key(tmp_path, key: str, value: str):
    """docs/training.md: YAML 1.1's 1_000 is a string, an error for a number key; float keys took it through Python's
    float(), integer keys refused it."""
    for config, overrides in ((None, [f"{key}={value}"]), (_file(tmp_path, key, value), [])):
        with pytest.raises(ValueError, match=rf"^config key '{key}': cannot use .*, expected"):
            TASKS["classification"].load_config(config, overrides)


def test_a_quoted_number_is_still_a_number_for_a_float_key(tmp_path):
    for config, overrides in ((None, ["optim.lr='5e-4'"]), (_file(tmp_path, "optim.lr", "'5e-4'"), [])):
        assert TASKS["classification"].load_config(config, overrides).optim.lr == 5e-4


@pytest.mark.parametrize(
    ("key", "value", "advice"),
    [
        # 'quote it' led to a second error ('false' is no choice): at 651f188 the choices were named
        ("train.amp", "true", "YAML read the boolean True; expected one of none, bf16, fp16"),
        ("data.re_mode", "no", "YAML read the boolean False; expected one of pixel, const, rand"),
        ("data.auto_augment", "false", "YAML read the boolean False; null turns it off; quote it"),
    ],
)
def test_a_boolean_where_a_choice_or_an_optional_text_belongs_gets_the_fix_that_works(tmp_path, key, value, advice):
    with pytest.raises(ValueError, match=f"^config key '{key}': {re.escape(advice)}"):
        TASKS["classification"].load_config(_file(tmp_path, key, value))


@pytest.mark.parametrize("task", ["classification", "detection", "segmentation"])
@pytest.mark.parametrize("key", ["data.mean", "data.std"])
def test_one_mean_or_std_value_is_every_channels_and_another_count_is_refused(tmp_path, task: str, key: str):
    """As timm's --mean 0.5 (resolve_data_config spreads one value over in_chans): the loaded config, so config.yaml
    and --resume's comparison, holds the 3 values; 2 values or a word are refused as before."""
    name = key.split(".")[1]
    for value in ("[0.5]", "0.5"):
        for config, overrides in ((None, [f"{key}={value}"]), (_file(tmp_path, key, value), [])):
            assert getattr(TASKS[task].load_config(config, overrides).data, name) == (0.5, 0.5, 0.5)
    for value in ("[0.5, 0.5]", "[abc]"):
        message = f"config key '{key}': cannot use '{value}', expected a list of 3 values"
        with pytest.raises(ValueError, match=re.escape(message)):
            TASKS[task].load_config(None, [f"{key}={value}"])
