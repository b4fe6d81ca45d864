"""What a config file's reader says of a file it cannot use: a key given twice, YAML it cannot parse, bytes that
are not UTF-8, a folder; each error names the file and, where there is one, the line."""

import re

import pytest
from enginekit import TASKS, script_main


def _load(tmp_path, text: str | bytes):
    path = tmp_path / "c.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return TASKS["classification"].load_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "train:\n  epochs: 3\ntrain:\n  seed: 5\n",
            "key 'train' is given twice (first on line 1) at line 3, column 1",
        ),
        ("train:\n  epochs: 3\n  epochs: 4\n", "key 'epochs' is given twice (first on line 2) at line 3, column 3"),
        ("train: {seed: 1, seed: 2}\n", "key 'seed' is given twice (first on line 1) at line 1, column 18"),
        ("model:\n  kwargs: {window_size: 4, window_size: 8}\n", "key 'window_size' is given twice"),
    ],
)
def test_a_key_given_twice_is_an_error_naming_the_file_the_key_and_its_line(tmp_path, text: str, message: str):
    """PyYAML kept the last one silently: a second train: section dropped the first's epochs."""
    with pytest.raises(ValueError, match=r"^config file \S+c.yaml is not valid YAML: " + re.escape(message)):
        _load(tmp_path, text)


def test_a_merge_key_may_be_given_again(tmp_path):
    """YAML's ``<<: *anchor`` brings keys that the mapping may set again: that is no duplicate."""
    cfg = _load(tmp_path, "optim:\n  <<: {lr: 0.5, momentum: 0.5}\n  lr: 0.25\n")
    assert cfg.optim.lr == 0.25 and cfg.optim.momentum == 0.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train:\n\tepochs: 3\n", r"found character '\\t' that cannot start any token at line 2, column 1"),
        ("train:\n  epochs: 3\n  a: b: c\n", "mapping values are not allowed here at line 3, column 7"),
        (
            "train:\n  epochs: 3\n seed: 1\n",
            r"expected <block end>, but found '<block mapping start>' at line 3, column 2 \(while parsing a block "
            r"mapping at line 1, column 1\)",
        ),
    ],
)
def test_yaml_syntax_errors_say_the_problem_and_its_line_and_column(tmp_path, text: str, message: str):
    """Only the first line of PyYAML's message was kept: 'while scanning for the next token', no problem, no line."""
    with pytest.raises(ValueError, match=rf"^config file \S+c.yaml is not valid YAML: {message}"):
        _load(tmp_path, text)


def test_a_file_that_is_not_utf8_is_named_with_the_byte_and_its_line(tmp_path):
    """The error was UnicodeDecodeError's own, naming no file."""
    with pytest.raises(ValueError, match=r"^config file \S+c.yaml is not UTF-8 text: byte 0x80 on line 2$"):
        _load(tmp_path, b"train:\n  output_dir: caf\x80\n")


@pytest.mark.parametrize("text", ["", "\n\n", "# train:\n#   epochs: 3\n", "---\n"])
def test_a_file_holding_no_settings_is_an_error_and_braces_mean_the_defaults(tmp_path, text: str):
    """An empty file, or one of comments only, ran silently on the code's defaults: the wrong file, or one not yet
    saved. ``{}`` says so, and gives the defaults."""
    with pytest.raises(ValueError, match=r"^config file \S+c.yaml holds no settings \(it is empty or only comments\); "
                                         r"expected a mapping of sections, e.g. 'train: \{epochs: 10\}', or '\{\}' "
                                         r"for the defaults$"):  # fmt: skip
        _load(tmp_path, text)
    assert _load(tmp_path, "{}\n") == TASKS["classification"].config()


@pytest.mark.parametrize("text", ["[]\n", "0\n", "''\n"])
def test_an_empty_value_of_another_shape_is_no_mapping_of_sections(tmp_path, text: str):
    """They were read as no settings, as an empty file was."""
    with pytest.raises(ValueError, match=r"^config file \S+c.yaml must hold a mapping of sections"):
        _load(tmp_path, text)


def test_a_section_of_no_keys_is_an_empty_one(tmp_path):
    """A section whose keys are all commented out is null: it was 'must hold a mapping of sections', naming none."""
    cfg = _load(tmp_path, "train:\n#  epochs: 3\noptim:\n  lr: 0.1\n")
    assert cfg.optim.lr == 0.1 and cfg.train == TASKS["classification"].config().train


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trian:\n#  epochs: 3\n", "unknown section 'trian'; did you mean 'train'?"),  # empty: it named no key
        ("trian: {}\n", "unknown section 'trian'; did you mean 'train'?"),
        ("train: 3\n", "section 'train' holds 3, expected a mapping of its keys, e.g. 'train: {epochs: 10}'"),
        ("epochs: 3\n", "section 'epochs' holds 3, expected a mapping of its keys"),
    ],
)
def test_a_section_that_is_unknown_or_no_mapping_is_named(tmp_path, text: str, message: str):
    with pytest.raises(ValueError, match=rf"^config file \S+c.yaml: {re.escape(message)}"):
        _load(tmp_path, text)


def test_a_folder_given_as_the_config_file_is_called_a_folder(tmp_path, capsys):
    """It was 'does not exist'."""
    assert script_main("classification", ["--config", f"{tmp_path}/", "--print-config"]) == 2
    assert capsys.readouterr().err == f"error: config file {tmp_path} is a folder; expected a YAML file\n"


def test_an_empty_config_file_is_one_error_line_of_the_training_script(tmp_path, capsys):
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    assert script_main("classification", ["--config", tmp_path / "empty.yaml", "--print-config"]) == 2
    assert capsys.readouterr().err.startswith(f"error: config file {tmp_path / 'empty.yaml'} holds no settings")
