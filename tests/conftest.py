"""Shared fixtures: the demo corpus prepared once per session (about 10 s); a trained tiny
translator and its exports (about 40 s, tests/export_helpers.py).

The suite runs on CPU-only and GPU hosts alike: on a GPU, TensorFlow computes float32 matmuls
in true float32 (not TF32, whose 10-bit mantissa would break the exact parity of TensorFlow
with ONNX Runtime and CTranslate2 on the CPU), and this process and every subprocess take GPU
memory as they need it (not all of it at start, which would starve the next process).
"""
import dataclasses
import os
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.corpus.prepare import PrepareSummary, prepare


def pytest_configure(config: pytest.Config) -> None:
    os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"  # inherited by subprocesses
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(False)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> PrepareSummary:
    """`prepare demo` (bible:en-fr, 8000 BPE pieces) written under a temporary run_dir."""
    config = load_config("demo")
    run_dir = tmp_path_factory.mktemp("runs") / "demo"
    return prepare(dataclasses.replace(config, run_dir=str(run_dir)))


@pytest.fixture(scope="session")
def export_translator(tmp_path_factory: pytest.TempPathFactory):
    """A Translator (beam 4, sources cut to 40 tokens) of a tiny model trained 100 steps."""
    from export.translator import Translator
    from export_helpers import make_model, train_spm

    model_proto = train_spm(tmp_path_factory.mktemp("spm"))
    from keras_transformer.decoding_settings import DecodingSettings

    return Translator(make_model(model_proto, steps=100), model_proto,
                      DecodingSettings(beam_size=4, max_source_length=40))


@pytest.fixture(scope="session")
def keras_reference(export_translator) -> dict:
    """The test sentences' source ids, and best target ids and scores of eager (Keras-level)
    beam search with beam 4: what every export must reproduce."""
    from export_helpers import SENTENCES, keras_beam_search, source_ids

    source = source_ids(export_translator.spm_model_proto, SENTENCES)
    target_ids, score = keras_beam_search(export_translator.model, source, beam_size=4)
    return {"source_ids": source, "target_ids": target_ids, "score": score}


@pytest.fixture(scope="session")
def export_config(export_translator, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run holding the translator's vocabulary and model (as checkpoints/averaged), and its
    config (data.max_length 40: the translator's max_source_length)."""
    from export_helpers import write_run

    return write_run(tmp_path_factory.mktemp("export_run"), export_translator)


@pytest.fixture(scope="session")
def exported(export_config):
    """`export_run` of that run: a SavedModel version and the ONNX models (about 30 s)."""
    from pipelines.export import export_run

    return export_run(load_config(export_config))


@pytest.fixture(scope="session")
def saved_model_dir(exported) -> Path:
    return exported.saved_model


@pytest.fixture(scope="session")
def onnx_dir(exported) -> Path:
    return exported.onnx


@pytest.fixture
def bfloat16_runs() -> None:
    """Skips a test that computes in bfloat16 where oneDNN would abort the process on it (a
    ONEDNN_MAX_CPU_ISA cap below what this CPU's bf16 needs, as ../shared/tools/slow-cpu
    sets); `resolve_dtype` refuses mixed_bfloat16 there with this reason."""
    from keras_transformer.precision import resolve_dtype

    try:
        resolve_dtype("mixed_bfloat16")
    except ValueError as error:
        pytest.skip(str(error))
