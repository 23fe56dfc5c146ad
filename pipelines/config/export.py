"""The `export` section: the formats `export` writes and the SavedModel's serving options;
the decoding settings come from the `evaluate` section.

Example:
    >>> ExportConfig(formats=("onnx",)).saved_model_dtype
    'float32'
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from keras_transformer.shortlist_table import STORED_PER_PIECE
from pipelines.config.model import resolved_dtype_for
from pipelines.yaml_dataclasses import FieldError

EXPORT_FORMATS = ("saved_model", "onnx", "ctranslate2")


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """The `export` section: the formats written (decoding settings come from `evaluate`) and
    the SavedModel's Keras dtype policy. `float32` (the default) runs on every CPU and GPU;
    `auto` is bfloat16 where the exporting machine runs it natively (`model.dtype`'s rule), for
    a SavedModel served on that kind of machine: on a CPU without native bfloat16 it runs
    emulated, slower than float32. The ONNX and CTranslate2 exports are float32 (and int8).
    `saved_model_xla_max_batch` > 0: the SavedModel beam-searches batches of up to that many
    sources in one XLA-compiled program (`keras_transformer.compiled_search`), which TF
    Serving runs with --xla_cpu_compilation_enabled=true on CPUs (README.md, "Serving"); 0 (the
    default) serves on a stock tensorflow_model_server. `saved_model_parallel_searches` > 1:
    the SavedModel's graph beam search runs that many searches side by side over a batch's
    rows (`keras_transformer.parallel_search`), for CPU servers run with
    --tensorflow_intra_op_parallelism=1; 1 (the default) is one search, as GPUs want it.
    `shortlist` (on by default): every export searches each sentence among its lexical
    shortlist's candidates (`keras_transformer.shortlist`: the `shortlist_k` best target pieces
    of each of its source pieces in the run's vocab/shortlist.npz, which prepare writes, and
    the `shortlist_frequent` most frequent target pieces; docs/decoding-speed.md, "Lexical
    shortlist", measures them); a run prepared without the table exports without it.
    """

    formats: tuple[str, ...] = EXPORT_FORMATS
    saved_model_dtype: Literal["float32", "auto", "mixed_bfloat16", "mixed_float16"] = "float32"
    saved_model_xla_max_batch: int = 0
    saved_model_parallel_searches: int = 1
    shortlist: bool = True
    shortlist_k: int = 50
    shortlist_frequent: int = 200

    def __post_init__(self) -> None:
        unknown = sorted(set(self.formats) - set(EXPORT_FORMATS))
        if unknown or not self.formats:
            raise FieldError("formats", f"must name {' and/or '.join(EXPORT_FORMATS)}, "
                             f"got {list(self.formats)!r}")
        limit = self.saved_model_xla_max_batch
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise FieldError("saved_model_xla_max_batch", f"must be an integer of at least 0 "
                             f"(0: no XLA), got {limit!r}")
        parts = self.saved_model_parallel_searches
        if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= 64:
            raise FieldError("saved_model_parallel_searches", f"must be an integer from 1 to "
                             f"64 (1: one search), got {parts!r}")

        for key, low, high in (("shortlist_k", 1, STORED_PER_PIECE),
                               ("shortlist_frequent", 0, None)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low or (
                    high is not None and value > high):
                bounds = f"from {low} to {high}" if high else f"of at least {low}"
                raise FieldError(key, f"must be an integer {bounds}, got {value!r}")

    def resolved_saved_model_dtype(self) -> tuple[str, str]:
        """(the SavedModel's Keras dtype policy on this machine, why), as `model.dtype`'s.

        Raises:
            ConfigError: mixed_bfloat16 where ONEDNN_MAX_CPU_ISA would make oneDNN abort.
        """
        return resolved_dtype_for("export.saved_model_dtype", self.saved_model_dtype)
