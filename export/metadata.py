"""What every export records beside its graphs (translator.json) and the file names of the
exports, in one light module: the runtimes and `translate` read it without TensorFlow, ONNX
Runtime or CTranslate2.

    translator.json = DecodingSettings fields + {"model": ModelConfig fields, "dtype": policy,
                                                 "xla_max_batch": int,
                                                 "parallel_searches": int,
                                                 "target_languages": [code, ...],
                                                 "ensemble": [member, ...]}
    member = {"run": run directory, "checkpoint": prefix, "model": ModelConfig fields}

`target_languages` lists a multilingual model's target languages (the codes of the language
tokens of its spm.model, `keras_transformer.languages`; [] for a bilingual model), for users and
for the runtimes that import neither TensorFlow nor the SentencePiece model's proto; an export
made before it was recorded reads as bilingual, which it is.

`ensemble` names the members of an ensemble export (`keras_transformer.ensemble`: one search
over the mean of their log-probabilities), in the order of its variables: the run and
checkpoint each came from and its model config; `model` is then the ensemble's (the first
member's, with the smallest max_length). [] (or absent: older exports) for one model.

Example:
    metadata = ExportMetadata.read(Path("runs/demo/export/onnx") / METADATA_FILE)
    metadata.settings.beam_size, metadata.model.max_length, metadata.dtype
    metadata.target_languages  # ("fr", "de"): a multilingual model's; () for a bilingual one
    [member.run for member in metadata.ensemble]  # ["runs/a", "runs/b"]; [] for one model
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from export import ExportError
from keras_transformer.config import ModelConfig
from keras_transformer.decoding_settings import DecodingSettings, DecodingSettingsError

METADATA_FILE, SPM_FILE = "translator.json", "spm.model"  # beside every export's graphs
SAVED_MODEL_GRAPH = "saved_model.pb"
SAVED_MODEL_EXTRA = "assets.extra"  # a SavedModel version's METADATA_FILE and SPM_FILE
MODEL_FILE, INT8_MODEL_FILE, TRANSLATOR_FILE = "model.onnx", "model_int8.onnx", "translator.onnx"
SCORE_FILE = "score.onnx"  # the ONNX export's scoring graph (ids in, log-probabilities out)
QUANTIZATIONS = ("float32", "int8")  # the CTranslate2 models an export writes, a directory each
EXPORT_AGAIN = "run `keras-transformer export` again"


@dataclasses.dataclass(frozen=True)
class EnsembleMember:
    """A member of an ensemble export: the run and checkpoint its weights came from, and its
    model config."""

    run: str
    checkpoint: str
    model: ModelConfig

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "checkpoint": self.checkpoint, "model": self.model.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnsembleMember:
        """A member of translator.json (KeyError, TypeError: fields missing or invalid)."""
        return cls(str(data["run"]), str(data["checkpoint"]), ModelConfig(**data["model"]))


@dataclasses.dataclass(frozen=True)
class ExportMetadata:
    """The decoding settings an export decodes with, its model config, Keras dtype policy and
    the largest batch its beam search runs compiled by XLA (0: none) and how many beam
    searches its graph runs side by side (`keras_transformer.parallel_search`; a SavedModel's),
    the target languages of a multilingual model (() for a bilingual one), an ensemble's members
    (() for one model) and its lexical shortlist's sizes (`keras_transformer.shortlist`; None:
    it searches the vocabulary)."""

    settings: DecodingSettings
    model: ModelConfig
    dtype: str = "float32"  # exports older than the dtype record computed in float32
    xla_max_batch: int = 0
    parallel_searches: int = 1
    target_languages: tuple[str, ...] = ()
    ensemble: tuple[EnsembleMember, ...] = ()
    shortlist: tuple[int, int] | None = None  # (k, frequent) of its lexical shortlist

    def to_dict(self) -> dict[str, Any]:
        return {**self.settings.to_dict(), "model": self.model.to_dict(), "dtype": self.dtype,
                "xla_max_batch": self.xla_max_batch,
                "parallel_searches": self.parallel_searches,
                "target_languages": list(self.target_languages),
                "ensemble": [member.to_dict() for member in self.ensemble],
                "shortlist": None if self.shortlist is None else {
                    "k": self.shortlist[0], "frequent": self.shortlist[1]}}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> ExportMetadata:
        """The metadata file `path` of an export.

        Raises:
            ExportError: the file missing, unreadable, or a setting in it invalid.
        """
        try:
            data = json.loads(path.read_text())
            return cls(DecodingSettings.from_dict(data), ModelConfig(**data["model"]),
                       data.get("dtype", "float32"), int(data.get("xla_max_batch", 0)),
                       int(data.get("parallel_searches", 1)),
                       _codes(data.get("target_languages", [])),
                       tuple(map(EnsembleMember.from_dict, data.get("ensemble", []))),
                       _shortlist(data.get("shortlist")))
        except FileNotFoundError:
            raise ExportError(f"{path}: no such file; {EXPORT_AGAIN}") from None
        except DecodingSettingsError as error:
            raise ExportError(f"{path}: {error.field}: {error}; {EXPORT_AGAIN}") from None
        except (ValueError, KeyError, TypeError):  # not UTF-8 or JSON, no model, bad fields
            raise unreadable(path) from None


def _codes(values: Any) -> tuple[str, ...]:
    """translator.json's target languages: a list of strings (TypeError otherwise)."""
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise TypeError("target_languages: not a list of language codes")
    return tuple(values)


def _shortlist(value: Any) -> tuple[int, int] | None:
    """translator.json's shortlist: null (none, or an export older than shortlists) or
    {"k": K, "frequent": N} (KeyError, TypeError or ValueError otherwise)."""
    return None if value is None else (int(value["k"]), int(value["frequent"]))


def saved_model_metadata(version_dir: Path) -> ExportMetadata:
    """The metadata of a SavedModel version (its assets.extra/translator.json)."""
    return ExportMetadata.read(version_dir / SAVED_MODEL_EXTRA / METADATA_FILE)


def unreadable(path: Path) -> ExportError:
    """The error of an export's file that is truncated or corrupt."""
    return ExportError(f"{path}: unreadable (truncated or corrupt); {EXPORT_AGAIN}")
