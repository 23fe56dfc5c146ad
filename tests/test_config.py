"""pipelines/config.py: YAML -> validated dataclasses; errors name file, line, key and value."""
import dataclasses
from pathlib import Path
from typing import Literal

import pytest

from pipelines.config import (ConfigError, DataConfig, PipelineConfig, builtin_configs,
                              load_config, load_yaml)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_demo_loads():
    assert "demo" in builtin_configs()
    config = load_config("demo")
    assert config.name == "demo"
    assert config.run_path == Path("runs/demo")
    assert config.data.source == "bible:en-fr"
    assert (config.data.vocab_type, config.data.max_length, config.data.batch_tokens) == \
        ("bpe", 128, 2048)


def test_files_source_paths_resolve_against_the_config_file(tmp_path):
    path = write(tmp_path, """
name: mine
run_dir: out/mine
data:
  source: files
  train: {src: corpus/train.en, tgt: /abs/train.de}
  test: {tsv: corpus/test.tsv}
  vocab_size: 500
  max_length_ratio: 3
""")
    config = load_config(path)
    assert config.run_path == Path("out/mine")
    assert config.data.train.src == tmp_path / "corpus/train.en"
    assert config.data.train.tgt == Path("/abs/train.de")
    assert config.data.test.tsv == tmp_path / "corpus/test.tsv"
    assert config.data.dev is None
    assert config.data.max_length_ratio == 3.0 and isinstance(config.data.max_length_ratio, float)


@pytest.mark.parametrize("body, where, key, value", [
    ("data:\n  source: bible:en-fr\n  vocab_sise: 8000\n", 4, "data.vocab_sise", "unknown key"),
    ("data:\n  source: bible:en-fr\n  vocab_size: lots\n", 4, "data.vocab_size", "'lots'"),
    ("data:\n  source: bible:en-fr\n  vocab_size: true\n", 4, "data.vocab_size", "True"),
    ("data:\n  source: bible:en-fr\n  vocab_type: wordpiece\n", 4, "data.vocab_type",
     "'wordpiece'"),
    ("data:\n  source: bible:en-xx\n", 3, "data.source", "unknown builtin corpus"),
    ("data:\n  source: web:en-fr\n", 3, "data.source", "'web:en-fr'"),
    ("data:\n  source: bible:en-fr\n  max_length: 256\n  batch_tokens: 100\n", 5,
     "data.batch_tokens", "100"),
    ("data:\n  source: files\n", 3, "data.source", "needs a train split"),
    ("data:\n  source: files\n  train: {src: a.txt}\n", 4, "data.train.tgt",
     "src and tgt go together"),
    ("data:\n  source: files\n  train: {src: a, tgt: b, tsv: c}\n", 4, "data.train",
     "either src and tgt, or tsv"),
    ("data:\n  vocab_size: 8000\n", 2, "data.source", "missing required key"),
    ("data: [1, 2]\n", 2, "data", "expected a mapping"),
])
def test_bad_values_name_file_line_key_and_value(tmp_path, body, where, key, value):
    path = write(tmp_path, "name: demo\n" + body)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{where}: {key}: "), message
    assert value in message


def test_invalid_yaml_and_missing_files(tmp_path):
    path = write(tmp_path, "name: demo\ndata: {source: [\n")
    with pytest.raises(ConfigError, match=rf"^{path}:\d+: invalid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="nope.yaml: no such config file.*builtins: demo"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: demo\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:2: not valid UTF-8"):
        load_config(bad)


def test_bad_run_name(tmp_path):
    with pytest.raises(ConfigError, match=r":1: name: .*'\.\./x'"):
        load_config(write(tmp_path, "name: ../x\ndata: {source: bible:en-fr}\n"))


@dataclasses.dataclass(frozen=True)
class ModelSection:
    preset: Literal["tiny", "base"] = "base"
    dropout: float | None = None
    sizes: tuple[int, ...] = ()

    def __post_init__(self):
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")


@dataclasses.dataclass(frozen=True)
class ExtendedConfig(PipelineConfig):
    model: ModelSection = ModelSection()


def test_a_new_section_is_one_dataclass_and_one_field(tmp_path):
    path = write(tmp_path, "name: demo\ndata: {source: bible:en-fr}\nmodel:\n  preset: tiny\n"
                           "  sizes: [1, 2]\n")
    config = load_yaml(path, ExtendedConfig)
    assert config.model == ModelSection(preset="tiny", sizes=(1, 2))
    assert isinstance(config.data, DataConfig)
    with pytest.raises(ConfigError, match=rf"^{path}:5: model.sizes\[1\]: expected int, got 'x'"):
        load_yaml(write(tmp_path, "name: d\ndata: {source: files, train: {tsv: t}}\nmodel:\n"
                                  "  preset: tiny\n  sizes: [1, x]\n"), ExtendedConfig)
    with pytest.raises(ConfigError, match=rf"^{path}:3: model: dropout must be in"):
        load_yaml(write(tmp_path, "name: d\ndata: {source: bible:en-de}\nmodel:\n"
                                  "  dropout: 2\n"), ExtendedConfig)


def test_model_dtype_defaults_to_auto_resolved_for_the_machine(tmp_path, monkeypatch):
    from keras_transformer import precision

    model = load_config(write(tmp_path, "name: d\ndata: {source: bible:en-fr}\n")).model
    assert model.dtype == "auto" and load_config("demo").model.dtype == "auto"
    assert load_config(write(tmp_path, "name: d\ndata: {source: bible:en-fr}\n"
                                       "model: {dtype: auto}\n")).model == model
    bf16_cpu = frozenset({"avx512f", "avx512_bf16"})
    monkeypatch.setattr(precision, "detect", lambda: precision.Hardware(bf16_cpu, None, []))
    assert model.resolved_dtype() == (
        "mixed_bfloat16", "mixed_bfloat16: the CPU has avx512_bf16 and oneDNN may use it")
    monkeypatch.setattr(precision, "detect", lambda: precision.Hardware(bf16_cpu, "AVX2", []))
    assert model.resolved_dtype()[0] == "float32"
    explicit = dataclasses.replace(model, dtype="mixed_bfloat16")
    with pytest.raises(ConfigError, match=r"^model\.dtype: mixed_bfloat16 would abort .*"
                                          r"ONEDNN_MAX_CPU_ISA=AVX2 .*`auto` or float32"):
        explicit.resolved_dtype()
