"""keras_transformer/decoding_settings.py: defaults, checks and the output-length rule, once."""
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_transformer.decoding_settings import DecodingSettings, DecodingSettingsError


def test_the_papers_defaults_and_the_model_limit() -> None:
    settings = DecodingSettings()
    assert (settings.beam_size, settings.alpha, settings.stop, settings.extra_length,
            settings.max_source_length) == (4, 0.6, "full", 50, None)
    assert settings.for_model(128).max_source_length == 128
    assert DecodingSettings(max_source_length=300).for_model(128).max_source_length == 128
    assert DecodingSettings(max_source_length=40).for_model(128).max_source_length == 40


def test_the_output_limit_on_ints_and_tensors() -> None:
    settings = DecodingSettings(extra_length=7)
    assert settings.output_limit(10, max_length=64) == 17
    assert settings.output_limit(60, max_length=64) == 64
    lengths = settings.output_limit(tf.constant([10, 60]), max_length=64)
    assert lengths.numpy().tolist() == [17, 64]


@pytest.mark.parametrize("field, value, problem", [
    ("beam_size", 0, "must be an integer of at least 1, got 0"),
    ("beam_size", 2.0, "must be an integer of at least 1, got 2.0"),
    ("extra_length", -1, "must be an integer of at least 0, got -1"),
    ("max_source_length", 0, "must be an integer of at least 1, got 0"),
    ("alpha", -0.1, "must be a number of at least 0, got -0.1"),
    ("alpha", True, "must be a number of at least 0, got True"),
    ("stop", "never", "must be one of full, bound, best, got 'never'"),
])
def test_each_bad_setting_is_named(field: str, value: object, problem: str) -> None:
    with pytest.raises(DecodingSettingsError, match=problem) as error:
        DecodingSettings(**{field: value})
    assert error.value.field == field


def test_what_exports_record_reads_back() -> None:
    settings = DecodingSettings(beam_size=5, alpha=1.0, stop="bound", max_source_length=40)
    assert DecodingSettings.from_dict({**settings.to_dict(), "model": {}}) == settings
    older = {key: value for key, value in settings.to_dict().items() if key != "stop"}
    assert DecodingSettings.from_dict(older).stop == "bound"  # before the rule was recorded
    with pytest.raises(DecodingSettingsError, match="missing") as error:
        DecodingSettings.from_dict({"beam_size": 4})
    assert error.value.field == "alpha"


@pytest.mark.slow
def test_finding_an_export_and_its_settings_imports_no_runtime() -> None:
    """`translate` finds an export and reads its settings before it imports the one runtime
    it runs (TensorFlow, ONNX Runtime or CTranslate2)."""
    code = ("import sys, export.loading, export.metadata; "
            "print(sorted({'tensorflow', 'onnxruntime', 'ctranslate2'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
