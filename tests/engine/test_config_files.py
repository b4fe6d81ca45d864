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


def test_a_folder_given_as_the_config_file_is_called_a_folder(tmp_path, capsys):
    """It was 'does not exist'."""
    assert script_main("classification", ["--config", f"{tmp_path}/", "--print-config"]) == 2
    assert capsys.readouterr().err == f"error: config file {tmp_path} is a folder; expected a YAML file\n"
