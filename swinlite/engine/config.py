"""Run configuration machinery: typed dataclass sections, YAML files of overrides, ``section.key=value`` overrides.

A task's config is a dataclass of section dataclasses (``swinlite.engine.sections.RunConfig`` and its
subclasses). Its defaults are the recipe; a YAML file (``configs/*.yaml``) holds only the keys it changes, and
the command line changes any key again, e.g. ``train.epochs=12``. Every value is converted to the field's
declared type and checked against the field's allowed values (:func:`bounded`, :func:`per_channel`, :func:`choice`,
:func:`checked`); an unknown key is a ValueError that names the closest valid key, or the key's new name when it was
renamed. A mapping field (``model.kwargs``) takes a whole mapping (``model.kwargs={window_size: 12}``), which replaces
the one before (a warning names the entries it drops), or one entry (``model.kwargs.window_size=12``). Files and
command-line values are read by one YAML loader (:func:`load_yaml`) whose numbers are YAML 1.2's core schema, not
PyYAML's YAML 1.1: ``017`` is 17, ``1e-1`` a float, ``1:30`` a string.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import math
import re
import types
import typing
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_NULL = ("none", "null", "~")
_YAML_NULL = re.compile(r"~|null|Null|NULL")  # YAML's null words (an empty value is null in a file only)

_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_CORE_INT = re.compile(r"[-+]?[0-9]+$|0o[0-7]+$|0x[0-9a-fA-F]+$")
_CORE_FLOAT = re.compile(  # YAML 1.2 core schema, less its plain integers (a dot or an exponent makes a float)
    r"""[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$
    |[-+]?[0-9]+[eE][-+]?[0-9]+$
    |[-+]?\.(?:inf|Inf|INF)$
    |\.(?:nan|NaN|NAN)$""",
    re.X,
)


def _core_resolvers() -> dict[str, list[tuple[str, re.Pattern]]]:
    """PyYAML's safe resolvers (booleans with yes/no/on/off, null, timestamps) with YAML 1.2 core-schema numbers
    instead of YAML 1.1's: 1.1 reads ``017`` as octal 15 and ``1:30`` as sexagesimal 90, and ``1e-1`` (no dot) as a
    string."""
    resolvers = {
        first: [(tag, regexp) for tag, regexp in rules if tag not in (_INT, _FLOAT)]
        for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    for tag, regexp, firsts in ((_INT, _CORE_INT, "-+0123456789"), (_FLOAT, _CORE_FLOAT, "-+.0123456789")):
        for first in firsts:
            resolvers.setdefault(first, []).append((tag, regexp))
    return resolvers


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    base = 16 if text.startswith("0x") else 8 if text.startswith("0o") else 10  # "017": decimal 17
    try:
        return int(text, base)
    except ValueError:  # an explicit !!int tag on another word
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not an integer", node.start_mark) from None


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node))
    special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
    try:
        return special[text.lower()] if text.lower() in special else float(text)
    except ValueError:  # an explicit !!float tag on another word
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not a number", node.start_mark) from None


class ConfigLoader(yaml.SafeLoader):
    """The YAML loader of config files and command-line values: safe, with YAML 1.2 core-schema numbers, and a key
    given twice in one mapping an error (PyYAML keeps the last one silently: a second ``train:`` section dropped the
    first)."""

    yaml_implicit_resolvers = _core_resolvers()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping; ConstructorError at a key's second occurrence, naming the line of its first."""
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base": the keys it brings may be given again
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                again = key in first
            except TypeError:  # an unhashable key: the base class refuses it
                break
            if again:
                problem = f"key {key!r} is given twice (first on line {first[key].line + 1})"
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            first[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


ConfigLoader.add_constructor(_INT, _construct_int)
ConfigLoader.add_constructor(_FLOAT, _construct_float)


class ConfigDumper(yaml.SafeDumper):
    """Writes what :class:`ConfigLoader` reads back identically: it quotes a string that loader would read as a
    number (``'1e-1'``), where PyYAML's YAML 1.1 dumper writes it bare."""

    yaml_implicit_resolvers = _core_resolvers()


def load_yaml(text: str) -> Any:
    """``text`` as YAML by :class:`ConfigLoader`."""
    return yaml.load(text, Loader=ConfigLoader)  # a SafeLoader: builds no Python objects


def dump_yaml(tree: dict[str, Any]) -> str:
    """``tree`` (e.g. :func:`to_dict`'s) as YAML that :func:`load_yaml` reads back identically."""
    return yaml.dump(tree, Dumper=ConfigDumper, sort_keys=False)


def flow_yaml(value: Any) -> str:
    """``value`` as one line of YAML that :func:`load_yaml` reads back identically: ``true``, ``{window_size: 12}``."""
    text = yaml.dump(value, Dumper=ConfigDumper, default_flow_style=True, sort_keys=False, width=math.inf)
    return text.removesuffix("\n...\n").strip()  # a scalar's document ends with "..."


@dataclass(frozen=True)
class Bounds:
    """Allowed numeric range of a config value (each element of a tuple value); ``None``: unbounded."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def holds(self, v: float) -> bool:
        return (
            math.isfinite(v)
            and (self.ge is None or v >= self.ge)
            and (self.gt is None or v > self.gt)
            and (self.le is None or v <= self.le)
            and (self.lt is None or v < self.lt)
        )

    def describe(self, key: str) -> str:
        def num(v: float) -> str:
            return str(int(v)) if float(v).is_integer() else f"{v:g}"

        low = f"{num(self.ge)} <= " if self.ge is not None else f"{num(self.gt)} < " if self.gt is not None else ""
        high = f" <= {num(self.le)}" if self.le is not None else f" < {num(self.lt)}" if self.lt is not None else ""
        return f"{low}{key}{high}"


def bounded(default: Any, **bounds: float) -> Any:
    """A dataclass field whose value (or each element of a tuple value) must lie in ``bounds`` (ge, gt, le, lt)."""
    return field(default=default, metadata={"bounds": Bounds(**bounds)})


def span(default: tuple[float, float], **bounds: float) -> Any:
    """A ``[low, high]`` range field: :func:`bounded` elementwise, and ``low <= high``."""
    return field(default=default, metadata={"bounds": Bounds(**bounds), "span": True})


def per_channel(default: tuple[float, ...] | None, **bounds: float) -> Any:
    """A value per image channel (``data.mean``): :func:`bounded` elementwise; a config file or the command line may
    give one value for every channel, as timm's ``--mean 0.5`` (:func:`load_config` spreads it)."""
    return field(default=default, metadata={"bounds": Bounds(**bounds), "per_channel": True})


def choice(default: str | None, *choices: str, off: str | None = None) -> Any:
    """A dataclass field whose value must be one of ``choices`` (or None, when the field is optional); ``off``: the
    choice that YAML's false stands for (``amp: false`` is ``none``), where one turns the setting off."""
    return field(default=default, metadata={"choices": choices, "off": off})


def checked(default: Any, problem: Callable[[Any], str | None]) -> Any:
    """A dataclass field whose value ``problem`` judges: it returns why the value cannot be used, which the error
    gives after the key (``"'adamww' is not a timm optimizer; did you mean 'adamw'?"``), or None. For words whose
    choices are another library's (timm's optimizers), too many to list in an error and known only at run time."""
    return field(default=default, metadata={"problem": problem})


def closest(word: str, options: Iterable[str], cutoff: float = 0.5) -> str | None:
    """The option most like ``word``, for an error's "did you mean": the one option ``word`` begins (a key cut short,
    ``train.ema_d`` for ``train.ema_decay``), else the most like it (:func:`difflib.get_close_matches`) of those it
    begins, else of all; None when none is close enough. A dotted key begins only keys of its own section."""
    options = list(options)
    completions = [o for o in options if o.startswith(word)]
    if len(completions) == 1:
        return completions[0]
    for pool in (completions, options):
        if close := difflib.get_close_matches(word, pool, n=1, cutoff=cutoff):
            return close[0]
    return None


def sections(cfg: Any) -> list[str]:
    return [s.name for s in dataclasses.fields(cfg)]


def valid_keys(cfg: Any) -> list[str]:
    """All dotted keys, e.g. ``["model.name", ..., "train.seed"]``."""
    return [f"{s}.{f.name}" for s in sections(cfg) for f in dataclasses.fields(getattr(cfg, s))]


class UnknownKeyError(ValueError):
    """A key that ``config`` (a config class) does not have, for a caller that knows other configs (a training script
    names another task's key as that task's): ``key`` and ``config`` as attributes."""

    def __init__(self, message: str, key: str, config: type) -> None:
        super().__init__(message)
        self.key, self.config = key, config


# other tools' names of a key, read as swinlite's for "did you mean" (a hyphen, timm's --weight-decay, as "_")
_SYNONYMS = {"learning_rate": "lr", "wd": "weight_decay"}


def _closest_key(key: str, cfg: Any) -> str | None:
    """The valid key most like ``key``, for "did you mean": a key of any section whose name is the part after the
    section (all of a bare key, ``lr``; a synonym of :data:`_SYNONYMS` read as swinlite's name), else the closest of
    its own section's keys, else of every key's name (a bare key), else of every dotted key (:func:`closest`). The
    whole dotted key alone suggested 'optim.clip_grad' for ``optim.learning_rate``, and no key for ``lr``."""
    keys = valid_keys(cfg)
    section, dot, name = key.partition(".") if "." in key else ("", "", key)
    name = name.replace("-", "_")
    name = _SYNONYMS.get(name, name)
    by_name = {k.partition(".")[2]: k for k in reversed(keys)}  # a name in two sections: the first section's
    if name in by_name:
        return by_name[name]
    own = [k for k in keys if k.startswith(f"{section}.")]
    if own and (close := closest(f"{section}.{name}", own)):
        return close
    if not dot and (close := closest(name, by_name)):
        return by_name[close]
    return closest(key, keys)


def _unknown_key(key: str, cfg: Any) -> ValueError:
    renamed = getattr(cfg, "renamed", {})
    old = next((k for k in renamed if key == k or key.startswith(f"{k}.")), None)
    if old is not None:
        return ValueError(f"config key '{key}' is now '{renamed[old]}'")
    close = _closest_key(key, cfg)
    hint = f"; did you mean '{close}'?" if close else f"; valid keys: {', '.join(valid_keys(cfg))}"
    return UnknownKeyError(f"unknown config key '{key}'{hint}", key, type(cfg))


def _describe(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is tuple:
        return "a list of values" if args[-1] is Ellipsis else f"a list of {len(args)} values"
    if origin is dict:
        return "a mapping, e.g. {window_size: 12}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None))
    return {bool: "true or false", float: "a finite number", int: "an integer"}.get(annotation, "a string")


def _parse(value: Any, annotation: Any) -> Any:
    """Command-line strings through YAML (``5e-4``, ``[0.5, 1]``, ``{a: 1}``, ``true``); YAML values as they are."""
    if not isinstance(value, str) or annotation is str:
        return value
    try:
        return load_yaml(value) if value.strip() else value
    except yaml.YAMLError:
        return value


def _number(value: Any) -> float | None:
    """``value`` as a float: a number, or a string the config loader reads as one (a quoted ``"5e-4"``); None for any
    other, a boolean (``true``, ``yes``, ``on``) included, and text Python's float() takes but YAML 1.2 does not
    (``1_000``, ``infinity``)."""
    if isinstance(value, str):
        try:
            value = load_yaml(value)
        except yaml.YAMLError:
            return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class _Unquoted(ValueError):
    """A value YAML read as a boolean, a number or a date where a string is expected: a union key (``str | None``)
    passes the error on as it is, whose fix (quote it) its own would not give. ``read``: what YAML read, named for
    the message (``'train.amp': YAML read the boolean False``)."""

    def __init__(self, read: str, value: Any) -> None:
        super().__init__(f"{read}; quote it to keep the text as a string")
        self.read, self.value = read, value


def _unquoted_advice(error: _Unquoted, field_: dataclasses.Field, annotation: Any) -> ValueError:
    """The fix for a value YAML read as no string, by the key: a key of fixed choices lists them (``amp: false``
    means none, which quoting would not give); an optional key read as false says that null turns it off
    (``auto_augment: false``); otherwise 'quote it'."""
    optional = type(None) in typing.get_args(annotation)
    off = "; null turns it off" if optional and error.value is False else ""
    choices = field_.metadata.get("choices")
    if choices:
        return ValueError(f"{error.read}; expected one of {', '.join(choices)}{off}")
    return ValueError(f"{error.read}{off}; quote it to keep the text as a string") if off else error


_READ_AS = ((bool, "the boolean"), (int, "the integer"), (float, "the number"), (datetime.date, "the date"))


def _where(key: str, item: int | None) -> str:
    """How an error names a key (``item``: the index in a list key's value): ``'data.classes' item 1``."""
    return f"'{key}'" if item is None else f"'{key}' item {item}"


def _string(value: Any, key: str, item: int | None) -> str:
    """``value`` for a string key (``item``: its index in a list key's value); ValueError for null, a list or a
    mapping, and :class:`_Unquoted` for a value that YAML read as a boolean, a number or a date: its str() is not the
    text written (``no``: 'False', ``0010``: '10', ``1e3``: '1000.0'), which must be quoted."""
    where = _where(key, item)
    # null is no string: a YAML file's "output_dir: null" trained into ./None/, the command line's into ./null/
    if value is None or (isinstance(value, str) and _YAML_NULL.fullmatch(value.strip())):
        raise ValueError(f"config key {where}: cannot use null, expected a string")
    if isinstance(value, str):
        return value
    read = next((name for kind, name in _READ_AS if isinstance(value, kind)), None)
    if read is None:  # a list or a mapping
        raise ValueError(f"config key {where}: cannot use {value!r}, expected a string")
    raise _Unquoted(f"config key {where}: YAML read {read} {value!r}", value)


def _coerce(value: Any, annotation: Any, key: str, item: int | None = None) -> Any:
    """Convert ``value`` (from YAML or the command line) to the declared ``annotation`` (``item``: ``value``'s index
    in a list key's value); an empty value is none (``train.output_dir=`` trained into the current folder)."""
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"config key {_where(key, item)} is empty, expected {_describe(annotation)}")
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        parsed = _parse(value, annotation)
        if parsed is None or (isinstance(parsed, str) and parsed.lower() in _NULL):
            if type(None) in args:
                return None
            if bool in args:  # model.pretrained=none: no weights
                return False
        options = [a for a in args if a is not type(None)]
        if bool in options and isinstance(parsed, bool):
            return parsed
        unquoted = None
        for option in (a for a in options if a is not bool):
            try:
                return _coerce(value, option, key, item)
            except _Unquoted as e:
                unquoted = e
            except ValueError:
                continue
        raise unquoted or ValueError(f"config key '{key}': cannot use {value!r}, expected {_describe(annotation)}")
    parsed = _parse(value, annotation)
    ok = True
    if origin is tuple:
        ok = isinstance(parsed, list | tuple) and (args[-1] is Ellipsis or len(parsed) == len(args))
        if ok:
            types_ = [args[0]] * len(parsed) if args[-1] is Ellipsis else args
            return tuple(_coerce(v, a, key, i) for i, (v, a) in enumerate(zip(parsed, types_, strict=True)))
    elif origin is dict:
        ok = isinstance(parsed, dict) and all(isinstance(k, str) for k in parsed)
        parsed = dict(parsed) if ok else parsed
    elif annotation is bool:
        ok = isinstance(parsed, bool)
    elif annotation is int:
        ok = isinstance(parsed, int) and not isinstance(parsed, bool)
    elif annotation is float:
        parsed = _number(parsed)
        ok = parsed is not None and math.isfinite(parsed)
    else:
        return _string(parsed, key, item)
    if not ok:
        raise ValueError(f"config key '{key}': cannot use {value!r}, expected {_describe(annotation)}")
    return parsed


def copy_config(cfg: Any) -> Any:
    """A copy whose sections (and mapping values) can be changed without touching ``cfg``."""
    copied = {}
    for s in sections(cfg):
        section = getattr(cfg, s)
        copied[s] = dataclasses.replace(
            section,
            **{f.name: dict(v) for f in dataclasses.fields(section) if isinstance(v := getattr(section, f.name), dict)},
        )
    return dataclasses.replace(cfg, **copied)


def apply_overrides(cfg: Any, overrides: dict[str, Any]) -> Any:
    """Return a copy of ``cfg`` with dotted-key overrides applied (values converted to the field types)."""
    cfg = copy_config(cfg)
    for key, value in overrides.items():
        section_name, _, rest = key.partition(".")
        name, _, entry = rest.partition(".")
        section = getattr(cfg, section_name) if section_name in sections(cfg) else None
        if section is None or name not in {f.name for f in dataclasses.fields(section)}:
            raise _unknown_key(key, cfg)
        annotation = typing.get_type_hints(type(section))[name]
        if entry:  # one entry of a mapping field
            if typing.get_origin(annotation) is not dict:
                raise _unknown_key(key, cfg)
            getattr(section, name)[entry] = _parse(value, Any)
        else:
            field_ = next(f for f in dataclasses.fields(section) if f.name == name)
            if field_.metadata.get("off") is not None and _parse(value, Any) is False:  # YAML's false, or "false"
                value = field_.metadata["off"]
            try:
                setattr(section, name, _coerce(value, annotation, key))
            except _Unquoted as e:
                raise _unquoted_advice(e, field_, annotation) from None
    return cfg


def check_values(cfg: Any) -> None:
    """ValueError naming the first value outside its field's bounds or choices, or one its field's check refuses (see
    :func:`bounded`, :func:`span`, :func:`choice`, :func:`checked`)."""
    for s in sections(cfg):
        section = getattr(cfg, s)
        for f in dataclasses.fields(section):
            key, value = f"{s}.{f.name}", getattr(section, f.name)
            choices = f.metadata.get("choices")
            if choices is not None and value is not None and value not in choices:
                raise ValueError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
            problem = f.metadata.get("problem")
            if problem is not None and value is not None and (why := problem(value)) is not None:
                raise ValueError(f"{key} {why}")
            bounds = f.metadata.get("bounds")
            values = value if isinstance(value, tuple) else (value,)
            if bounds is not None and not all(v is None or bounds.holds(v) for v in values):
                shown = list(value) if isinstance(value, tuple) else value
                raise ValueError(f"{key}={shown} is out of range: expected {bounds.describe(key)}")
            if f.metadata.get("span") and value[0] > value[1]:
                raise ValueError(f"{key} must be [low, high] with low <= high, got {list(value)}")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}``; a leaf that is not a section stays as is."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and not prefix:
            out.update(flatten(value, f"{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse_cli_overrides(items: list[str]) -> dict[str, str]:
    """``["optim.lr=5e-4", ...]`` -> ``{"optim.lr": "5e-4"}``; ValueError for an item without ``=``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override '{item}' is not of the form section.key=value, e.g. train.epochs=12")
        out[key.strip()] = value.strip()
    return out


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error as one line: what is wrong and where (``found character '\\t' that cannot start any token at line
    2, column 3``), then what the parser was reading, and where it began."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem is None:
        return " ".join(str(error).split())

    def at(mark: yaml.Mark | None) -> str:
        return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""

    context = f" ({error.context}{at(error.context_mark)})" if error.context else ""
    return f"{error.problem}{at(error.problem_mark)}{context}"


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping of sections, a section of no keys (``train:``, its keys commented out: null) an empty
    one, as OmegaConf reads it; ValueError naming the file for a missing one, a folder, text that is not UTF-8,
    invalid YAML (the problem and its line and column; a key given twice), no YAML at all (empty, or comments only:
    the wrong file, one not yet saved; a run began on the code's defaults without a word, where ``{}`` says so) or
    another shape (naming a section that is no mapping)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"config file {path} is a folder; expected a YAML file")
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    try:
        tree = load_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        line = e.object[: e.start].count(b"\n") + 1
        raise ValueError(
            f"config file {path} is not UTF-8 text: byte 0x{e.object[e.start]:02x} on line {line}"
        ) from None
    except yaml.YAMLError as e:
        raise ValueError(f"config file {path} is not valid YAML: {_yaml_problem(e)}") from None
    if tree is None:
        raise ValueError(
            f"config file {path} holds no settings (it is empty or only comments); expected a mapping of sections, "
            "e.g. 'train: {epochs: 10}', or '{}' for the defaults"
        )
    if not isinstance(tree, dict):
        raise ValueError(f"config file {path} must hold a mapping of sections, e.g. 'train: {{epochs: 10}}'")
    tree = {name: {} if keys is None else keys for name, keys in tree.items()}  # "train:", its keys commented out
    for name, keys in tree.items():
        if not isinstance(keys, dict):
            raise ValueError(
                f"config file {path}: section '{name}' holds {keys!r}, expected a mapping of its keys, e.g. "
                "'train: {epochs: 10}'"
            )
    return tree


def _channel_count(annotation: Any) -> int:
    """The length of the fixed-length tuple type in ``annotation``: 3 for ``tuple[float, float, float] | None``."""
    options = (annotation, *typing.get_args(annotation))
    return next(len(typing.get_args(a)) for a in options if typing.get_origin(a) is tuple)


def _spread_channels(cfg: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with a :func:`per_channel` key's one number (``0.5`` or ``[0.5]``) given for every channel
    (``[0.5, 0.5, 0.5]``), as timm's ``resolve_data_config`` spreads ``--mean 0.5`` over ``in_chans``: the count is
    the key's tuple length, 3, the channels of every task's model (``model.kwargs.in_chans`` is the task's: RGB). Any
    other value stays, for :func:`apply_overrides` to convert or refuse as written (``[0.5, 0.5]``)."""
    spread = dict(overrides)
    for key, value in overrides.items():
        section_name, _, name = key.partition(".")
        section = getattr(cfg, section_name) if section_name in sections(cfg) else None
        fields = {f.name: f for f in dataclasses.fields(section)} if section is not None else {}
        if name not in fields or not fields[name].metadata.get("per_channel"):
            continue  # an unknown key is apply_overrides' to name
        parsed = _parse(value, Any)
        one = parsed[0] if isinstance(parsed, list) and len(parsed) == 1 else parsed
        if _number(one) is not None:
            spread[key] = [one] * _channel_count(typing.get_type_hints(type(section))[name])
    return spread


def load_config(defaults: Any, path: str | Path | None = None, overrides: list[str] | None = None) -> Any:
    """``defaults`` (a config dataclass), then the YAML file's overrides, then command-line ``key=value`` ones (a
    per-channel key's one value spread over the channels: :func:`_spread_channels`); every value checked
    (:func:`check_values`)."""
    cfg = defaults
    if path is not None:
        tree = read_yaml(path)
        _check_sections(tree, cfg, path)
        cfg = apply_overrides(cfg, _spread_channels(cfg, flatten(tree)))
    given = _spread_channels(cfg, parse_cli_overrides(overrides or []))
    loaded = apply_overrides(cfg, given)
    check_values(loaded)
    _warn_dropped_entries(cfg, loaded, given)
    return loaded


def _check_sections(tree: dict[str, Any], cfg: Any, path: str | Path) -> None:
    """ValueError naming a section of the config file ``path`` (``tree``) that ``cfg`` does not have and whose keys
    would not name it (an empty one: ``trian:``, its keys commented out, was read as no settings)."""
    unknown = next((name for name, keys in tree.items() if not keys and name not in sections(cfg)), None)
    if unknown is not None:
        close = closest(str(unknown), sections(cfg))
        hint = f"did you mean '{close}'?" if close else f"sections: {', '.join(sections(cfg))}"
        raise ValueError(f"config file {path}: unknown section '{unknown}'; {hint}")


def _warn_dropped_entries(before: Any, after: Any, overrides: dict[str, Any]) -> None:
    """UserWarning naming the entries of a mapping key (``model.kwargs``) that the config file (or the defaults) set and
    a command-line ``key={...}`` dropped: it replaces the whole mapping (a fine-tune's ``drop_path_rate`` was gone
    without a word), where ``key.entry=value`` sets one entry; ``key={}`` clears it, on purpose."""
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        old = getattr(getattr(before, section), name, None)  # None for one entry (name "kwargs.window_size")
        if not isinstance(old, dict) or _parse(value, Any) == {}:
            continue
        new = getattr(getattr(after, section), name)
        if dropped := [f"{entry}={flow_yaml(v)}" for entry, v in old.items() if entry not in new]:
            warnings.warn(
                f"{key}={value} replaces the whole mapping, dropping {', '.join(dropped)} of the config; "
                f"{key}.KEY=VALUE sets one entry and keeps the others",
                stacklevel=3,
            )


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict (tuples as lists), ready for YAML."""

    def plain(v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else v

    return {s: {k: plain(v) for k, v in sec.items()} for s, sec in dataclasses.asdict(cfg).items()}


def config_diff(old: Any, new: Any, compared: Callable[[str, Any], Any] | None = None) -> list[str]:
    """Human-readable list of keys whose values differ, e.g. ``["train.epochs: 10 -> 20"]``; ``compared(key, value)``:
    what of a value is compared (e.g. a path resolved), where not the value itself."""
    a, b = flatten(to_dict(old)), flatten(to_dict(new))
    same = (lambda k: a[k] == b[k]) if compared is None else (lambda k: compared(k, a[k]) == compared(k, b[k]))
    return [f"{k}: {a[k]} -> {b[k]}" for k in a if not same(k)]
