"""Sampling (issue 29): keras_transformer/sampling.py's filters, the SavedModel's
translate_sample signature (reproducible, batch-independent draws), CTranslate2's sampling and
the translate command's options."""
import numpy as np
import pytest
import tensorflow as tf

from export.ct2_runtime import CTranslate2Translator
from export_helpers import SENTENCES
from keras_transformer.decoding_settings import DecodingSettingsError, SamplingSettings
from keras_transformer.sampling import Sampling, filtered_logits
from pipelines.cli import main
from test_faults import cli_error

LINES = SENTENCES[:6] + [""]


def sampling(batch: int, top_k: int = 0, top_p: float = 1.0, temperature: float = 1.0):
    return Sampling(tf.fill([batch], top_k), tf.fill([batch], top_p),
                    tf.fill([batch], temperature), tf.zeros([batch], tf.int64))


def test_top_k_top_p_and_temperature_keep_the_tokens_they_should():
    probs = tf.constant([[0.5, 0.05, 0.2, 0.25], [0.1, 0.1, 0.1, 0.7]])
    log_probs = tf.math.log(probs)
    kept = lambda logits: (logits.numpy() > -np.inf).tolist()  # noqa: E731
    assert kept(filtered_logits(log_probs, sampling(2))) == [[True] * 4] * 2
    assert kept(filtered_logits(log_probs, sampling(2, top_k=2))) == \
        [[True, False, False, True], [True, True, True, True]]  # ties at the threshold stay
    assert kept(filtered_logits(log_probs, sampling(2, top_p=0.7))) == \
        [[True, False, False, True], [False, False, False, True]]
    assert kept(filtered_logits(log_probs, sampling(2, top_k=3, top_p=0.01))) == \
        [[True, False, False, False], [False, False, False, True]]
    np.testing.assert_allclose(filtered_logits(log_probs, sampling(2, temperature=0.5)),
                               log_probs * 2, rtol=1e-6)
    for field, value in (("top_k", -1), ("top_p", 0.0), ("temperature", 0), ("seed", -1)):
        with pytest.raises(DecodingSettingsError) as raised:
            SamplingSettings(**{field: value})
        assert raised.value.field == field


def test_draws_repeat_for_a_seed_in_any_batch_and_top_k_1_is_greedy(saved_model_translator,
                                                                     greedy_translator):
    translator = saved_model_translator
    settings = SamplingSettings(top_k=0, temperature=1.5, seed=11)
    drawn = translator.sampled_lines(LINES, settings, batch_size=4)
    assert translator.sampled_lines(LINES, settings, batch_size=4) == drawn
    alone = translator.sampled_lines(LINES[2:], settings, first_index=2, batch_size=1)
    assert [text for text, _ in alone] == [text for text, _ in drawn[2:]]  # seeded seed + i
    np.testing.assert_allclose([s for _, s in alone], [s for _, s in drawn[2:]], atol=1e-5)
    other = translator.sampled_lines(LINES, SamplingSettings(temperature=1.5, seed=12))
    assert [text for text, _ in other] != [text for text, _ in drawn]
    assert drawn[-1] == ("", 0.0)
    assert all(score < 0 for _, score in drawn[:-1])
    top_1 = translator.sampled_lines(LINES, SamplingSettings(top_k=1))
    expected = greedy_translator.scored_lines(LINES)
    assert [text for text, _ in top_1] == [text for text, _ in expected]
    np.testing.assert_allclose([s for _, s in top_1], [s for _, s in expected], atol=1e-5)


def test_ctranslate2_samples_within_top_k(exported, greedy_translator):
    translator = CTranslate2Translator(exported.ctranslate2)
    drawn = translator.sampled_lines(LINES, SamplingSettings(top_k=1, seed=3))
    assert [text for text, _ in drawn] == greedy_translator.translate_lines(LINES)
    varied = translator.sampled_lines(LINES * 4, SamplingSettings(temperature=3.0))
    assert len({text for text, _ in varied}) > len(set(LINES))
    # a draw that ran to the model's 64 positions without EOS is scored, not an error
    fish = translator.processor.encode("fish", out_type=str)
    long_draw = translator._scored([fish], [(fish * 64)[:64]])
    assert "fish" in long_draw["translation"][0] and long_draw["score"][0] < 0


def test_translate_samples_from_the_command_line_and_refuses_what_cannot(
        saved_model_dir, saved_model_translator, onnx_dir, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    argv = ["translate", str(saved_model_dir), str(lines), "--sampling-temperature", "1.5",
            "--seed", "11", "--batch-size", "4"]
    assert main(argv) == 0
    expected = saved_model_translator.sampled_lines(
        LINES, SamplingSettings(temperature=1.5, seed=11))
    # Lines end at \n only: a draw may hold a control character such as \x1e (a byte piece),
    # which str.splitlines would also split at.
    assert capsys.readouterr().out.split("\n") == [text for text, _ in expected] + [""]
    assert cli_error(capsys, *argv[:3], "--sampling-topp", "0") == \
        "--sampling-topp: must be in (0, 1], got 0.0"
    assert "not with --beam" in cli_error(capsys, *argv, "--beam", "2")
    assert "sampling only" in cli_error(capsys, *argv[:3], "--seed", "1")
    assert "ONNX export, which decodes by beam search only" in cli_error(
        capsys, "translate", onnx_dir, lines, "--sampling-topk", "5")
