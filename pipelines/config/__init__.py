"""The pipeline config: YAML -> validated frozen dataclasses (see pipelines.yaml_dataclasses),
with errors naming file, line and key.

A config is a YAML mapping: `name` (the run name), optional `run_dir` (default `runs/NAME`,
relative to the working directory) and one section per stage. Each section is a frozen
dataclass, one module of this package, and one field of `PipelineConfig`: adding a section is
one dataclass plus one field. A relative `Path` resolves against the directory of the config
file. The whole config is checked when it loads, the model's hyperparameters by
keras_transformer.config.ModelConfig, the decoding settings by
keras_transformer.decoding_settings.DecodingSettings.

    data.py      `data` (prepare's): the corpus, its cleaning, the vocabulary, max_length
    model.py     `model`: a preset or auto (and the ladder of sizes), overrides, the dtype
    train.py     `train`: the recipe, the budget, checkpoints, validations, early stopping
    evaluate.py  `evaluate`: DecodingSettings' keys, the splits, the weights read
    export.py    `export`: the formats, the SavedModel's options
    pipeline.py  PipelineConfig: the sections together, the checks reading two of them
    loading.py   load_config (a path or a builtin name), check_corpus_files

Example:
    >>> config = load_config("demo")
    >>> config.data.source, config.run_path
    ('bible:en-fr', PosixPath('runs/demo'))
"""
from pipelines.config.data import CorpusConfig, DataConfig, NoiseConfig, SplitFiles
from pipelines.config.evaluate import EvaluateConfig
from pipelines.config.export import EXPORT_FORMATS, ExportConfig
from pipelines.config.loading import (BUILTIN_CONFIGS, builtin_configs, check_corpus_files,
                                      load_config)
from pipelines.config.model import ModelSection
from pipelines.config.pipeline import PipelineConfig
from pipelines.config.train import EarlyStopping, TrainConfig
from pipelines.yaml_dataclasses import ConfigError

__all__ = ["BUILTIN_CONFIGS", "EXPORT_FORMATS", "ConfigError", "CorpusConfig", "DataConfig",
           "EarlyStopping", "EvaluateConfig", "ExportConfig", "ModelSection", "NoiseConfig",
           "PipelineConfig", "SplitFiles", "TrainConfig", "builtin_configs", "check_corpus_files",
           "load_config"]
