"""pipelines/config/: YAML -> validated dataclasses; errors name file, line, key and value."""
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from keras_transformer.config import ModelConfig
from pipelines.config import (ConfigError, DataConfig, ModelSection, PipelineConfig,
                              builtin_configs, load_config)
from pipelines.yaml_dataclasses import load_yaml


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
    assert (config.data.vocab_type, config.data.max_length, config.train.batch_tokens) == \
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


MODEL = "data: {source: bible:en-fr}\nmodel:\n"  # lines 2 and 3 of a config


@pytest.mark.parametrize("body, where, key, value", [
    ("data:\n  source: bible:en-fr\n  vocab_sise: 8000\n", 4, "data.vocab_sise", "unknown key"),
    ("data:\n  source: bible:en-fr\n  vocab_size: lots\n", 4, "data.vocab_size", "'lots'"),
    ("data:\n  source: bible:en-fr\n  vocab_size: true\n", 4, "data.vocab_size", "True"),
    ("data:\n  source: bible:en-fr\n  vocab_type: wordpiece\n", 4, "data.vocab_type",
     "'wordpiece'"),
    ("data:\n  source: bible:en-xx\n", 3, "data.source", "unknown builtin corpus"),
    ("data:\n  source: web:en-fr\n", 3, "data.source", "'web:en-fr'"),
    ("data:\n  source: bible:en-fr\n  max_length: 130\ntrain:\n  batch_tokens: 130\n", 6,
     "train.batch_tokens", "must be at least 136 so that each of 1 replica(s) holds a pair of "
     "data.max_length (130) tokens padded to its length bucket (1 x 136), got 130"),
    ("data:\n  source: bible:en-fr\n  batch_tokens: 2048\n", 4, "data.batch_tokens",
     "moved to train.batch_tokens"),
    ("data:\n  source: bible:en-fr\n  shuffle_buffer: 10\n", 4, "data.shuffle_buffer",
     "moved to train.shuffle_buffer"),
    ("data: {source: bible:en-fr}\nevaluate:\n  beam_size: 0\n", 4, "evaluate.beam_size",
     "must be an integer of at least 1, got 0"),
    ("data: {source: bible:en-fr}\nevaluate:\n  alpha: -1\n", 4, "evaluate.alpha",
     "must be a number of at least 0, got -1"),
    ("data:\n  source: files\n", 3, "data.source", "needs a train split"),
    ("data:\n  source: files\n  train: {src: a.txt}\n", 4, "data.train.tgt",
     "src and tgt go together"),
    ("data:\n  source: files\n  train: {src: a, tgt: b, tsv: c}\n", 4, "data.train",
     "either src and tgt, or tsv"),
    ("data:\n  vocab_size: 8000\n", 2, "data.source", "missing required key"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr, weight: 0}\n", 4,
     "data.corpora[0].weight", "must be a positive number, got 0.0"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr, weight: -2}\n", 4,
     "data.corpora[0].weight", "must be a positive number, got -2.0"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr, tag: bt}\n", 4,
     "data.corpora[0].tag", "a tag is <NAME>"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr, tag: <0x41>}\n", 4,
     "data.corpora[0].tag", "a tag is <NAME>, NAME a letter"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr, tag: <unk>}\n", 4,
     "data.corpora[0].tag", "a tag must not be a SentencePiece control piece"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n"
     "    - {name: a, source: bible:en-de}\n", 5, "data.corpora[1].name",
     "'a' names two corpora (also data.corpora[0])"),
    ("data:\n  corpora:\n    - {name: Europarl, source: bible:en-fr}\n", 4,
     "data.corpora[0].name", "lowercase letters, digits and underscores"),
    ("data:\n  source: bible:en-fr\n  corpora:\n    - {name: a, source: bible:en-de}\n", 4,
     "data.corpora", "give data.source (one corpus) or data.corpora (several), not both"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n  dev_test: b\n", 5,
     "data.dev_test", "must name one of data.corpora (a), got 'b'"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n"
     "    - {name: b, source: files, train: {tsv: t}, dev: {tsv: d}}\n", 5,
     "data.corpora[1].dev", "only the corpus data.dev_test names (a) gives the dev split"),
    ("data:\n  corpora:\n    - {name: a, source: files}\n", 4, "data.corpora[0].source",
     "needs a train split"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr, max_pairs: 0}\n", 4,
     "data.corpora[0].max_pairs", "must be at least 1, got 0"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n"
     "    - {name: b, source: bible:en-de}\n    - {name: c, source: files, train: {tsv: t}}\n",
     6, "data.corpora[2].tgt_lang",
     "the corpora translate into several languages (fr, de): give corpus c's target language"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n"
     "    - {name: b, source: files, train: {tsv: t}, tgt_lang: German}\n", 5,
     "data.corpora[1].tgt_lang", "a language is a code such as fr, de or pt-BR, got 'German'"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n"
     "    - {name: b, source: bible:en-de}\n  dev_test: b\n", 6, "data.dev_test",
     "each one's dev and test come from its first corpus in data.corpora"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n    - {name: b, source: bible:en-de}\n"
     "    - {name: c, source: files, train: {tsv: t}, dev: {tsv: d}, tgt_lang: fr}\n", 6,
     "data.corpora[2].dev", "only the first corpus of each target language (a, b) gives the dev"),
    ("data:\n  src_lang: en\n  corpora:\n    - {name: a, source: bible:en-fr}\n", 3,
     "data.src_lang", "with data.corpora, give it in the corpus it belongs to"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr, noise: {typos: 1.5}}\n", 4,
     "data.corpora[0].noise.typos", "must be a probability from 0 to 1, got 1.5"),
    ("data:\n  source: bible:en-fr\n  noise:\n    uppercase: -0.1\n", 5,
     "data.noise.uppercase", "must be a probability from 0 to 1, got -0.1"),
    ("data:\n  source: bible:en-fr\n  noise:\n    typo: 0.1\n", 5, "data.noise.typo",
     "unknown key; expected one of typos, uppercase, titlecase, remove_end_punctuation, "
     "inline_tags"),
    ("data:\n  noise: {typos: 0.1}\n  corpora:\n    - {name: a, source: bible:en-fr}\n", 3,
     "data.noise", "with data.corpora, give it in the corpus it belongs to"),
    ("data: [1, 2]\n", 2, "data", "expected a mapping"),
    (MODEL + "  preset: huge\n", 4, "model.preset", "'huge'"),
    ("data: {source: bible:en-fr}\nevaluate:\n  stop: never\n", 4, "evaluate.stop",
     "expected one of full, bound, best, got 'never'"),
    ("data: {source: bible:en-fr}\nexport:\n  saved_model_xla_max_batch: -1\n", 4,
     "export.saved_model_xla_max_batch", "at least 0 (0: no XLA), got -1"),
    ("data: {source: bible:en-fr}\nexport:\n  saved_model_parallel_searches: 0\n", 4,
     "export.saved_model_parallel_searches", "from 1 to 64 (1: one search), got 0"),
    (MODEL + "  preset: tiny\n  num_heads: 0\n", 5, "model.num_heads", "must be positive, got 0"),
    (MODEL + "  num_heads: 2.5\n", 4, "model.num_heads", "expected int, got 2.5"),
    (MODEL + "  dropout: 1.5\n", 4, "model.dropout", "[0, 1), got 1.5"),
    (MODEL + "  norm_first: 1\n", 4, "model.norm_first", "expected bool, got 1"),
    (MODEL + "  positional_encoding: rotary\n", 4, "model.positional_encoding", "'rotary'"),
    (MODEL + "  layer_norm_epsilon: 0\n", 4, "model.layer_norm_epsilon", "must be positive"),
    (MODEL + "  vocab_size: 8000\n", 4, "model.vocab_size", "unknown key"),
    (MODEL + "  pad_id: 1\n", 4, "model.pad_id", "unknown key"),
    (MODEL + "  d_model: 100\n", 4, "model.d_model",
     "(100) must be divisible by ModelConfig.num_heads (8)"),
    (MODEL + "  preset: tiny\n  num_heads: 3\n", 5, "model.num_heads", "(64) must be divisible"),
    (MODEL + "  d_model: 30\n  num_heads: 4\n", 4, "model.d_model", "(30) must be divisible"),
    (MODEL + "  max_length: 100\n", 4, "model.max_length",
     "model.max_length (100) must be at least data.max_length (128)"),
    ("data:\n  source: bible:en-fr\n  max_length: 2000\n", 4,
     "data.max_length", "model.max_length (1024) must be at least data.max_length (2000)"),
    ("data:\n  source: bible:en-fr\n  alignments: fast_align\n", 4, "data.alignments",
     "'fast_align'"),
    ("data: {source: bible:en-fr}\ntrain:\n  guided_alignment_weight: -1\n", 4,
     "train.guided_alignment_weight", "must be at least 0 (0: off), got -1"),
    ("data: {source: bible:en-fr}\ntrain:\n  guided_alignment_weight: 0.5\n", 4,
     "train.guided_alignment_weight", "needs the train pairs' word alignments: set "
     "data.alignments (eflomal), or the weight to 0, got 0.5 with data.alignments none"),
    ("data: {source: bible:en-fr, alignments: eflomal}\nmodel:\n  alignment_heads: 0\n"
     "train:\n  guided_alignment_weight: 1\n", 4, "model.alignment_heads",
     "trains head 0 alone, which alignments then read: leave it unset or 1, got 0"),
    (MODEL + "  alignment_heads: 9\n", 4, "model.alignment_heads",
     "must be in [0, num_heads] (0: all heads averaged), got 9"),
    ("data:\n  source: files\n  train: {tsv: t}\n  src_lang: tlh\n", 5, "data.src_lang",
     "'tlh' is not a language fastText lid.176 knows (data.language_id checks it)"),
    ("data:\n  corpora:\n    - {name: a, source: bible:en-fr}\n"
     "    - {name: b, source: files, train: {tsv: t}, tgt_lang: xx}\n", 5,
     "data.corpora[1].tgt_lang", "'xx' is not a language fastText lid.176 knows"),
    ("data:\n  source: files\n  train: {tsv: t}\n  src_lang: en\n  language_id: on\n", 6,
     "data.language_id", "on needs the languages of every corpus: give data.tgt_lang"),
    ("data: {source: bible:en-fr, language_id: maybe}\n", 2, "data.language_id",
     "must be on, off or auto, got 'maybe'"),
    ("data:\n  source: bible:en-fr\n  distill_from: []\n", 4, "data.distill_from",
     "must name a teacher run directory (or a list of them), got an empty list"),
    ("data:\n  source: bible:en-fr\n  distill_from: [runs/a, runs/a]\n", 4,
     "data.distill_from[1]", "runs/a is named twice"),
    ("data:\n  source: bible:en-fr\n  distill_originals: true\n", 4, "data.distill_originals",
     "keeps the original pairs beside a teacher's translations: give data.distill_from too"),
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
class SamplingSection:
    method: Literal["greedy", "top_k"] = "greedy"
    temperature: float | None = None
    sizes: tuple[int, ...] = ()

    def __post_init__(self):
        if self.temperature is not None and not 0 < self.temperature <= 2:
            raise ValueError(f"temperature must be in (0, 2], got {self.temperature!r}")


@dataclasses.dataclass(frozen=True)
class ExtendedConfig(PipelineConfig):
    sampling: SamplingSection = SamplingSection()


def test_a_new_section_is_one_dataclass_and_one_field(tmp_path):
    path = write(tmp_path, "name: demo\ndata: {source: bible:en-fr}\nsampling:\n"
                           "  method: top_k\n  sizes: [1, 2]\n")
    config = load_yaml(path, ExtendedConfig)
    assert config.sampling == SamplingSection(method="top_k", sizes=(1, 2))
    assert isinstance(config.data, DataConfig) and config.model == ModelSection()
    with pytest.raises(ConfigError,
                       match=rf"^{path}:5: sampling.sizes\[1\]: expected int, got 'x'"):
        load_yaml(write(tmp_path, "name: d\ndata: {source: files, train: {tsv: t}}\nsampling:\n"
                                  "  method: top_k\n  sizes: [1, x]\n"), ExtendedConfig)
    with pytest.raises(ConfigError, match=rf"^{path}:3: sampling: temperature must be in"):
        load_yaml(write(tmp_path, "name: d\ndata: {source: bible:en-de}\nsampling:\n"
                                  "  temperature: 3\n"), ExtendedConfig)


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


def test_the_model_section_overrides_model_config_fields():
    model = load_config("demo").model
    assert model.preset == "auto"
    assert model.overrides() == {"dropout": 0.1, "norm_first": True}
    assert model.model_config(vocab_size=8000) == ModelConfig.from_preset(
        "small", vocab_size=8000, dropout=0.1, norm_first=True)
    section_keys = {field.name for field in dataclasses.fields(ModelSection)}
    config_keys = {field.name for field in dataclasses.fields(ModelConfig)}
    assert section_keys == config_keys - {"vocab_size", "pad_id"} | {"preset", "dtype"}


def test_a_long_data_max_length_needs_a_long_model_max_length(tmp_path):
    text = "name: demo\ndata: {source: bible:en-fr, max_length: 2000}\n"
    model = load_config(write(tmp_path, text + "model: {max_length: 2000}\n")).model
    assert model.model_config().max_length == 2000


MISSING_CORPUS = ("name: demo\nrun_dir: run\ndata:\n  source: files\n"
                  "  train: {tsv: train.tsv}\n  dev:\n    src: dev.en\n    tgt: dev.fr\n")


@pytest.mark.parametrize("command, text, error", [
    ("prepare", f"name: demo\n{MODEL}  preset: tiny\n  num_heads: 3\n",
     "{path}:5: model.num_heads: ModelConfig.d_model (64) must be divisible by "
     "ModelConfig.num_heads (3) unless key_dim and value_dim are set"),
    ("prepare", MISSING_CORPUS, "{path}:7: data.dev.src: {dir}/dev.en: no such file"),
    ("run", MISSING_CORPUS, "{path}:7: data.dev.src: {dir}/dev.en: no such file"),
])
@pytest.mark.slow
def test_the_cli_rejects_a_bad_config_in_one_line_without_tensorflow(tmp_path, command, text,
                                                                      error):
    path = write(tmp_path, text)
    (tmp_path / "train.tsv").write_text("a\tb\n")
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipelines.cli", command,
                           str(path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    imported = [line.rpartition("|")[2].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")]
    errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert done.returncode == 2 and done.stdout == ""
    assert errors == [f"keras-transformer {command}: error: "
                      + error.format(path=path, dir=tmp_path)]
    assert "pipelines.config" in imported
    assert not [name for name in imported if name.split(".")[0] == "tensorflow"]
