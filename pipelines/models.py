"""A run's tokenizer and Transformer: built from the `model` section (with the vocabulary size
and a Keras dtype policy) for training, or restored from its best checkpoint for decoding, and
its Translator with the `evaluate` section's decoding settings; several runs' models restored as
one `keras_transformer.ensemble.Ensemble` (`load_ensemble_for_inference`).

Training may use a mixed dtype policy; its variables are float32 all the same, so the model
can be rebuilt with any policy and restored from the same checkpoint: exports use float32
(the SavedModel export.saved_model_dtype), evaluation the training policy.

Train, average, evaluate and export build their model here; it reads the checkpoints through
pipelines.checkpoints and imports nothing of pipelines.training (tests/test_layering.py).

Example:
    >>> model, checkpoint = load_model_for_inference(config)  # evaluate.weights' checkpoint
    >>> run_translator(config, model).translate_lines(["Hello."])
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

from export.metadata import EnsembleMember
from export.translator import Translator
from keras_transformer.ensemble import Ensemble
from keras_transformer.model import Transformer
from keras_transformer.shortlist_table import Shortlist, ShortlistTable
from keras_transformer.tokenizer import PAD_ID, Tokenizer
from pipelines import InputError
from pipelines.checkpoints.records import check_vocabulary
from pipelines.checkpoints.size_record import SIZE_RECORD, recorded_size
from pipelines.checkpoints.weights import restore_model, weights_checkpoint
from pipelines.config import PipelineConfig
from pipelines.config.model import ModelSection
from pipelines.paths import RunPaths


def build_model(config: PipelineConfig, vocab_size: int, dtype: str | None = None) -> Transformer:
    """The Transformer of the `model` section in the Keras dtype policy `dtype` (default: the
    section's, `auto` resolved), its weights created under the current strategy scope, if any.
    The config was validated when it loaded (`pipelines.config.model.ModelSection`). A run trained
    with guided alignment reads its trained head for word alignments (alignment_heads 1)."""
    section = sized_model(config)
    if config.train.guided_alignment_weight:
        section = dataclasses.replace(section, alignment_heads=1)
    model_config = section.model_config(vocab_size=vocab_size, pad_id=PAD_ID)
    return Transformer(model_config, dtype=dtype or config.model.resolved_dtype()[0])


def sized_model(config: PipelineConfig) -> ModelSection:
    """The `model` section with `preset: auto` replaced by the run's size
    (`pipelines.checkpoints.size_record.recorded_size`); any other preset as it is.

    Raises:
        InputError: `auto` and train has not chosen yet.
    """
    if config.model.preset != "auto":
        return config.model
    directory = RunPaths(config.run_path).checkpoints
    size = recorded_size(directory)
    if size is None:
        raise InputError(f"{directory}: model.preset auto and no size chosen yet "
                         f"({SIZE_RECORD} is written by `keras-transformer train`): train first")
    return config.model.sized(size)


def run_tokenizer(paths: RunPaths) -> Tokenizer:
    """The run's SentencePiece tokenizer, vocab/spm.model.

    Raises:
        InputError: the file is missing, or not a SentencePiece model (truncated, corrupt).
    """
    if not paths.spm_model.is_file():
        raise InputError(f"{paths.spm_model}: no such file; run `keras-transformer prepare` "
                         f"first")
    try:
        return Tokenizer.from_file(paths.spm_model)
    except RuntimeError:  # SentencePiece's parse error
        problem = "not a SentencePiece model (truncated or corrupt)"
    except ValueError as error:  # a model without byte-fallback pieces
        problem = str(error)
    raise InputError(f"{paths.spm_model}: {problem}; restore it (an export holds a copy: "
                     f"assets.extra/spm.model) or prepare the run again")


def load_model_for_inference(config: PipelineConfig, checkpoint: str | None = None,
                             dtype: str = "float32") -> tuple[Transformer, str]:
    """(the restored model, its checkpoint prefix). `checkpoint` defaults to the one of
    `evaluate.weights` (the averaged one, else the latest training checkpoint, by default);
    `dtype` is the model's Keras dtype policy.

    Raises:
        InputError: the run has no vocabulary or no checkpoint, or one that cannot be restored
            (incomplete, of another vocabulary or architecture).
    """
    paths = RunPaths(config.run_path)
    vocab_size = run_tokenizer(paths).vocab_size
    checkpoint = checkpoint or weights_checkpoint(paths, config.evaluate.weights)
    check_vocabulary(paths)
    if not Path(f"{checkpoint}.index").is_file():
        raise InputError(f"{checkpoint}: no such checkpoint (expected {checkpoint}.index)")
    model = build_model(config, vocab_size, dtype)
    restore_model(model, checkpoint)
    return model, checkpoint


def load_ensemble_for_inference(configs: Sequence[PipelineConfig], checkpoint: str | None = None,
                                dtype: str = "float32"
                                ) -> tuple[Ensemble, tuple[EnsembleMember, ...]]:
    """The runs' models restored (`load_model_for_inference`: the first run's `checkpoint`,
    the others' evaluate.weights) as one Ensemble in `dtype`, and each member's record (its
    run directory, checkpoint and model config) for the export's metadata.

    Raises:
        InputError: as `load_model_for_inference`, for any run.
    """
    loaded = [load_model_for_inference(member, checkpoint if index == 0 else None, dtype)
              for index, member in enumerate(configs)]
    records = tuple(EnsembleMember(str(member.run_path), prefix, model.model_config)
                    for member, (model, prefix) in zip(configs, loaded))
    return Ensemble([model for model, _ in loaded]), records


def run_translator(config: PipelineConfig, model: Transformer | Ensemble, xla_max_batch: int = 0,
                   parallel_searches: int = 1,
                   ensemble: Sequence[EnsembleMember] = (),
                   shortlist: Shortlist | None = None) -> Translator:
    """The run's beam-search Translator of `model`: the `evaluate` section's decoding settings,
    sources cut to data.max_length tokens (`xla_max_batch`, `parallel_searches`, `ensemble`,
    `shortlist`: `Translator`'s)."""
    return Translator(model, RunPaths(config.run_path).spm_model.read_bytes(),
                      config.evaluate.decoding(max_source_length=config.data.max_length),
                      xla_max_batch=xla_max_batch, parallel_searches=parallel_searches,
                      ensemble=ensemble, shortlist=shortlist)


def run_shortlist(config: PipelineConfig) -> Shortlist | None:
    """The lexical shortlist an export searches with: the run's vocab/shortlist.npz cut to
    export.shortlist_k and shortlist_frequent; None with export.shortlist off or no table (a
    run prepared before shortlists).

    Raises:
        InputError: the table is unreadable or of another vocabulary size.
    """
    path = RunPaths(config.run_path).shortlist
    if not config.export.shortlist or not path.is_file():
        return None
    try:
        table = ShortlistTable.load(path)
    except ValueError as error:
        raise InputError(f"{error}; prepare the run again to rewrite it") from None
    vocab_size = run_tokenizer(RunPaths(config.run_path)).vocab_size
    if table.vocab_size != vocab_size:
        raise InputError(f"{path}: a table of {table.vocab_size} pieces, but the vocabulary "
                         f"has {vocab_size}; prepare the run again to rewrite it")
    return table.select(config.export.shortlist_k, config.export.shortlist_frequent)
