"""pipelines/yaml_dataclasses.py: a YAML mapping -> dataclasses; errors name file, line and key."""
import dataclasses
from pathlib import Path

import pytest

from pipelines.yaml_dataclasses import ConfigError, FieldError, load_yaml


@dataclasses.dataclass(frozen=True)
class Range:
    low: int = 0
    high: int | None = None


@dataclasses.dataclass(frozen=True)
class Plot:
    title: str
    x: Range = Range()
    y: Range = Range()

    def __post_init__(self) -> None:
        if self.y.low < self.x.low:
            raise FieldError("y.low", f"must be at least x.low ({self.x.low})")


def load(tmp_path: Path, text: str) -> Plot:
    path = tmp_path / "plot.yaml"
    path.write_text(text, encoding="utf-8")
    return load_yaml(path, Plot)


def test_nested_dataclasses_and_defaults(tmp_path):
    assert load(tmp_path, "title: t\nx: {high: 3}\n") == Plot("t", Range(0, 3))


@pytest.mark.parametrize("text, where", [
    ("title: t\nx: {low: 2}\ny:\n  high: 9\n  low: 1\n", 5),  # the key's own line
    ("title: t\nx: {low: 2}\ny: {high: 9}\n", 3),  # an absent key: its nearest parent's line
    ("title: t\nx: {low: 2}\n", 1),  # nor any parent: the first line
])
def test_a_field_error_blames_a_key_below_a_field(tmp_path, text, where):
    message = rf"plot.yaml:{where}: y.low: must be at least x.low \(2\)$"
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, text)


def test_a_missing_required_key_blames_the_first_line(tmp_path):
    with pytest.raises(ConfigError, match=r"plot.yaml:1: title: missing required key"):
        load(tmp_path, "x: {low: 1}\n")


@pytest.mark.parametrize("text, message", [
    ("title: t\nx:\n  low: 1\n  high: 3\n  low: 2\n",
     "plot.yaml:5: x.low: given twice (first on line 3)"),
    ("title: t\ntitle: u\n", "plot.yaml:2: title: given twice (first on line 1)"),
])
def test_a_key_given_twice_is_refused(tmp_path, text, message):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, text)
    assert str(error.value) == f"{tmp_path / message}"


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]"
               for i in range(8)]  # 9 ** 9 (387M) values once expanded, in 400 bytes
    text = "title: t\nbomb:\n" + "".join(f"  {level}\n" for level in levels)
    assert len(text) < 500
    with pytest.raises(ConfigError, match=r"plot.yaml:\d+: more than 10,000 values once YAML "
                                          r"aliases are expanded"):
        load(tmp_path, text)
