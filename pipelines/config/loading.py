"""Loading a pipeline config: a YAML path or the name of a builtin config (pipelines/configs/
*.yaml) -> a checked PipelineConfig, every error `FILE:LINE: KEY: problem, got VALUE`; and the
check, before any work, that the corpus files it names exist.

A relative `Path` resolves against the directory of the config file; a key of an earlier
version (MOVED_KEYS) fails saying where it lives now.

Example:
    >>> config = load_config("demo")
    >>> config.data.source, config.run_path
    ('bible:en-fr', PosixPath('runs/demo'))
"""
from __future__ import annotations

from pathlib import Path

from pipelines.config.pipeline import PipelineConfig
from pipelines.yaml_dataclasses import ConfigError, key_error, load_yaml

BUILTIN_CONFIGS = Path(__file__).parent.parent / "configs"  # package data: pipelines/configs/
# Keys of earlier versions -> where they live now (a config naming one fails saying so).
MOVED_KEYS = {"data.batch_tokens": "train.batch_tokens",
              "data.shuffle_buffer": "train.shuffle_buffer"}


def builtin_configs() -> list[str]:
    """Names of the configs shipped in pipelines/configs (e.g. `demo`)."""
    return sorted(path.stem for path in BUILTIN_CONFIGS.glob("*.yaml"))


def resolve_config_path(path_or_name: str | Path) -> Path:
    """The YAML file for a path, or for a builtin name such as `demo`."""
    path = Path(path_or_name)
    if path.is_file():
        return path
    if str(path_or_name) in builtin_configs():
        return BUILTIN_CONFIGS / f"{path_or_name}.yaml"
    raise ConfigError(f"{path_or_name}: no such config file, nor a builtin config "
                      f"(builtins: {', '.join(builtin_configs())})")


def load_config(path_or_name: str | Path) -> PipelineConfig:
    """Reads and validates a pipeline config (a YAML path or a builtin name).

    Raises:
        ConfigError: `FILE:LINE: KEY: problem, got VALUE` for the first problem found.
    """
    return load_yaml(resolve_config_path(path_or_name), PipelineConfig, moved=MOVED_KEYS)


def check_corpus_files(path_or_name: str | Path, config: PipelineConfig) -> None:
    """Checks that the corpus files of the `files` sources exist, before any work (`prepare`
    and `run` read them; later stages read the prepared copy).

    Raises:
        ConfigError: `FILE:LINE: data.train.src: PATH: no such file` (or
            `data.corpora[I].train.src`), for the first missing.
    """
    corpora = config.data.corpus_configs()
    prefixes = [f"data.corpora[{index}]." for index in range(len(config.data.corpora))] or ["data."]
    for prefix, corpus in zip(prefixes, corpora):
        for split in ("train", "dev", "test"):
            files = getattr(corpus, split)
            for side in ("src", "tgt", "tsv"):
                path = getattr(files, side) if files else None
                if path is not None and not path.is_file():
                    problem = "a directory, not a file" if path.is_dir() else "no such file"
                    raise key_error(resolve_config_path(path_or_name), f"{prefix}{split}.{side}",
                                    f"{path}: {problem}")
