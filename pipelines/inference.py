"""A run's model for decoding: its best checkpoint restored into a Transformer built with a
chosen dtype policy.

Training may use a mixed dtype policy; its variables are float32 all the same, so the model
can be rebuilt with any policy and restored from the same checkpoint: exports use float32
(ONNX Runtime's CPU kernels and TF Serving's are float32), evaluation the training policy.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from keras_transformer.model import Transformer
from keras_transformer.tokenizer import Tokenizer
from pipelines import InputError
from pipelines.checkpoints import default_checkpoint, restore_model
from pipelines.config import PipelineConfig
from pipelines.train import build_model


def load_model_for_inference(config: PipelineConfig, checkpoint: str | None = None,
                             dtype: str = "float32") -> tuple[Transformer, str]:
    """(the restored model, its checkpoint prefix). `checkpoint` defaults to the averaged one,
    else the latest training checkpoint; `dtype` is the model's Keras dtype policy.

    Raises:
        InputError: the run has no vocabulary or no checkpoint.
    """
    spm_path = config.run_path / "vocab" / "spm.model"
    if not spm_path.is_file():
        raise InputError(f"{spm_path}: missing; run `keras-transformer prepare` first")
    checkpoint = checkpoint or default_checkpoint(config.run_path)
    if not Path(f"{checkpoint}.index").is_file():
        raise InputError(f"{checkpoint}: no such checkpoint (expected {checkpoint}.index)")
    model = build_model_with_dtype(config, Tokenizer.from_file(spm_path).vocab_size, dtype)
    restore_model(model, checkpoint)
    return model, checkpoint


def build_model_with_dtype(config: PipelineConfig, vocab_size: int,
                           dtype: str = "float32") -> Transformer:
    """The `model` section's Transformer with the dtype policy `dtype`, whatever its own."""
    section = dataclasses.replace(config.model, dtype=dtype)
    return build_model(dataclasses.replace(config, model=section), vocab_size)
