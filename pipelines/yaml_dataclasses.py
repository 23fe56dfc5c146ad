"""YAML mapping -> validated frozen dataclasses, with errors naming file, line and key.

Validation is generic over dataclass fields (str, int, float, bool, Path, Literal, Optional,
tuple[X, ...], nested dataclasses); a `Path` field that is relative resolves against the
directory of the YAML file. Semantic checks live in each dataclass's `__post_init__`: a
`FieldError` names its key, any other `ValueError` is reported against the dataclass's key.

Example: with `Point` a frozen dataclass of fields `x: int` and `y: int = 0`, a file point.yaml
holding `x: 1` loads as `load_yaml(Path("point.yaml"), Point) == Point(x=1, y=0)`; holding
`x: one`, it raises `ConfigError("point.yaml:1: x: expected int, got 'one'")`.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from pipelines import InputError

T = TypeVar("T")
MAX_VALUES = 10_000  # keys and list items of a config, aliases expanded


class ConfigError(InputError):
    """An invalid YAML config; the message starts with `FILE:LINE: KEY:`."""


class FieldError(ValueError):
    """Raised by a dataclass `__post_init__` to blame one of its fields, or a key below one
    (`model.max_length`)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def load_yaml(path: Path, cls: type[T], moved: dict[str, str] | None = None) -> T:
    """Reads a YAML mapping into the dataclass `cls`, validating every key against its type;
    a key of `moved` (an old key -> its new place) is refused naming where it went."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ConfigError(f"{path}:{line}: not valid UTF-8") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(error, 'problem', error)}") from None
    lines: dict[str, int] = {}
    if node is not None:
        _key_lines(path, node, "", lines)
    return _Builder(path, lines, moved or {}).build(cls, data, "")


def key_error(path: Path, key: str, message: str) -> ConfigError:
    """`FILE:LINE: KEY: message` for a key of a valid YAML file `path` (a check made after
    loading, e.g. that a file it names exists); the line of the nearest key present."""
    lines: dict[str, int] = {}
    _key_lines(path, yaml.compose(path.read_text("utf-8"), Loader=yaml.SafeLoader), "", lines)
    return ConfigError(f"{_where(path, lines, key)}: {key}: {message}")


def _where(path: Path, lines: dict[str, int], key: str) -> str:
    """`FILE:LINE` of `key`, or of the nearest enclosing key present (line 1 if none)."""
    probe = key
    while probe and probe not in lines:
        probe = probe.rpartition(".")[0]
    return f"{path}:{lines[probe]}" if probe else f"{path}:1"


def _key_lines(path: Path, node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    """Records the 1-based line of every key path (`data.vocab_size`, `a.b[2]`) under a node.

    Raises:
        ConfigError: a key given twice in one mapping, or more than MAX_VALUES values once
            aliases are expanded (an alias bomb).
    """
    if len(lines) > MAX_VALUES:
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: more than {MAX_VALUES:,} values "
                          f"once YAML aliases are expanded; a config needs far fewer")
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            if key in seen:
                raise ConfigError(f"{path}:{key_node.start_mark.line + 1}: {key}: given twice "
                                  f"(first on line {lines[key]})")
            seen.add(key)
            lines[key] = key_node.start_mark.line + 1
            _key_lines(path, value_node, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[f"{prefix}[{index}]"] = item.start_mark.line + 1
            _key_lines(path, item, f"{prefix}[{index}]", lines)


@dataclasses.dataclass
class _Builder:
    """Converts plain YAML data into dataclasses, checking every value against its type."""

    path: Path
    lines: dict[str, int]
    moved: dict[str, str]

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{_where(self.path, self.lines, key)}: {key or '(top level)'}: "
                           f"{message}")

    def build(self, cls: type, data: Any, key: str) -> Any:
        if not isinstance(data, dict):
            raise self.error(key, f"expected a mapping of {cls.__name__} keys, got {data!r}")
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        hints = typing.get_type_hints(cls)
        join = (lambda name: f"{key}.{name}") if key else (lambda name: str(name))
        for name in data:
            if join(name) in self.moved:
                raise self.error(join(name), f"moved to {self.moved[join(name)]}")
            if name not in fields:
                raise self.error(join(name), f"unknown key; expected one of {', '.join(fields)}")
        for name, field in fields.items():
            required = (field.default is dataclasses.MISSING
                        and field.default_factory is dataclasses.MISSING)
            if required and name not in data:
                raise self.error(join(name), "missing required key")
        values = {name: self.convert(hints[name], value, join(name))
                  for name, value in data.items()}
        try:
            return cls(**values)
        except FieldError as error:
            raise self.error(join(error.key), str(error)) from None
        except ValueError as error:
            raise self.error(key, str(error)) from None

    def convert(self, hint: Any, value: Any, key: str) -> Any:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            return self.build(hint, value, key)
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            options = [arg for arg in args if arg is not type(None)]
            if len(options) == 1:
                return self.convert(options[0], value, key)
            for option in options:
                try:
                    return self.convert(option, value, key)
                except ConfigError:
                    continue
            raise self.error(key, f"expected one of {options}, got {value!r}")
        if origin is Literal:
            if value not in args:
                raise self.error(key, f"expected one of {', '.join(map(str, args))}, got {value!r}")
            return value
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            if not isinstance(value, list):
                raise self.error(key, f"expected a list, got {value!r}")
            return tuple(self.convert(args[0], item, f"{key}[{i}]") for i, item in enumerate(value))
        if hint is Any:
            return value
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if hint is Path and isinstance(value, str):
            return Path(value) if Path(value).is_absolute() else self.path.parent / value
        if hint in (str, int, float, bool) and type(value) is hint:
            return value
        if hint in (str, int, float, bool, Path):
            expected = "a path" if hint is Path else hint.__name__
            raise self.error(key, f"expected {expected}, got {value!r}")
        raise TypeError(f"{key}: unsupported config field type {hint!r}")
