"""export/translator/: the in-graph Translator against eager (Keras-level) beam search, and
its limits on bad input."""
import numpy as np
import sentencepiece as spm
import tensorflow as tf

from export.translator import Translator
from keras_transformer.decoding_settings import DecodingSettings
from export_helpers import (EOS_ID, PAD_ID, SENTENCES, keras_beam_search, make_model,
                            output_lengths, source_ids)


def test_graph_beam_search_equals_keras_level_beam_search(export_translator, keras_reference):
    output = export_translator.translate_ids(tf.constant(keras_reference["source_ids"]))
    expected_ids = keras_reference["target_ids"]
    np.testing.assert_array_equal(output["target_ids"].numpy(), expected_ids)
    np.testing.assert_allclose(output["score"].numpy(), keras_reference["score"], rtol=1e-5)
    lengths = output_lengths(expected_ids)
    assert len(set(lengths)) > 3 and all(row[n - 1] == EOS_ID
                                         for row, n in zip(expected_ids, lengths))


def test_text_signature_translates_the_sentences_of_the_ids_signature(export_translator):
    source = source_ids(export_translator.spm_model_proto, SENTENCES)
    ids = export_translator.translate_ids(tf.constant(source))
    text = export_translator.translate(tf.constant(SENTENCES))
    np.testing.assert_array_equal(text["score"].numpy(), ids["score"].numpy())
    processor = spm.SentencePieceProcessor(model_proto=export_translator.spm_model_proto)
    expected = [processor.decode([int(i) for i in row if i != PAD_ID][:n])
                for row, n in zip(ids["target_ids"].numpy(),
                                  output_lengths(ids["target_ids"].numpy()))]
    assert [t.decode("utf-8") for t in text["translation"].numpy()] == expected
    assert all(expected) and len(set(expected)) > len(SENTENCES) // 2


def test_beam_one_is_greedy(export_translator):
    greedy = Translator(export_translator.model, export_translator.spm_model_proto,
                        DecodingSettings(beam_size=1))
    source = source_ids(export_translator.spm_model_proto, SENTENCES)
    expected_ids, _ = keras_beam_search(export_translator.model, source, 1)
    np.testing.assert_array_equal(greedy.translate_ids(tf.constant(source))["target_ids"],
                                  expected_ids)


def test_an_untrained_model_stops_at_source_length_plus_extra(export_translator):
    translator = Translator(make_model(export_translator.spm_model_proto),
                            export_translator.spm_model_proto, DecodingSettings(extra_length=7))
    source = source_ids(export_translator.spm_model_proto, SENTENCES[:3])
    target = translator.translate_ids(tf.constant(source))["target_ids"].numpy()
    assert output_lengths(target) == list(np.sum(source != PAD_ID, axis=1) + 7)
    assert not (target == EOS_ID).any()


def test_bad_input_gives_defined_output(export_translator):
    lines = tf.constant([b"", b"   \t ", b"bird " * 2000, b"\xff\xfe\xc3(bird", b"fish"])
    output = export_translator.translate(lines)
    translations, scores = output["translation"].numpy(), output["score"].numpy()
    assert list(translations[:2]) == [b"", b""] and list(scores[:2]) == [0.0, 0.0]
    # A long line is cut to max_source_length tokens (39 pieces + EOS) and translated so.
    cut = export_translator.translate(tf.constant([" ".join(["bird"] * 39)]))
    assert translations[2] == cut["translation"].numpy()[0]
    for text in translations:
        text.decode("utf-8")  # always valid UTF-8
    assert translations[4] == export_translator.translate(tf.constant(["fish"]))[
        "translation"].numpy()[0]


def test_all_pad_rows_and_an_empty_batch(export_translator):
    output = export_translator.translate_ids(tf.zeros([2, 3], tf.int32))
    assert not output["target_ids"].numpy().any() and not output["score"].numpy().any()
    empty = export_translator.translate(tf.zeros([0], tf.string))
    assert empty["translation"].shape == (0,)


def test_batches_of_1_and_64_and_translate_lines_keep_order(export_translator):
    lines = (SENTENCES * 7)[:64]
    alone = [export_translator.translate(tf.constant([line]))["translation"].numpy()[0]
             .decode("utf-8") for line in SENTENCES]
    batched = export_translator.translate(tf.constant(lines))["translation"].numpy()
    assert [t.decode("utf-8") for t in batched] == (alone * 7)[:64]
    assert export_translator.translate_lines(lines, batch_size=5) == (alone * 7)[:64]
