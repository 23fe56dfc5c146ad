"""The CTranslate2 export: the same translations as the TF graph, float32 and int8."""
import json

import keras
import pytest

from export import ExportError
from export.ct2_runtime import CTranslate2Translator
from export.ctranslate2 import export_ctranslate2
from export.translator import Translator
from export_helpers import MAX_LENGTH, SENTENCES
from keras_transformer import ModelConfig, Transformer
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.tokenizer import Tokenizer

LINES = SENTENCES + ["", "  \t ", "fish " * 100]


@pytest.fixture(scope="module")
def ct2_dir(export_translator, tmp_path_factory):
    greedy = Translator(export_translator.model, export_translator.spm_model_proto,
                        DecodingSettings(beam_size=1, max_source_length=40))
    return export_ctranslate2(greedy, tmp_path_factory.mktemp("ct2"))["float32"].parent


def test_greedy_translations_equal_the_tf_graphs(ct2_dir, export_translator):
    greedy = Translator(export_translator.model, export_translator.spm_model_proto,
                        DecodingSettings(beam_size=1, max_source_length=40))
    expected = greedy.translate_lines(LINES, batch_size=1)
    assert CTranslate2Translator(ct2_dir).translate_lines(LINES, batch_size=1) == expected
    assert expected[len(SENTENCES):len(SENTENCES) + 2] == ["", ""]


def test_the_int8_model_is_quantized_and_translates_every_line(ct2_dir):
    config = json.loads((ct2_dir / "int8" / "config.json").read_text())
    assert (ct2_dir / "int8" / "model.bin").stat().st_size < \
        (ct2_dir / "float32" / "model.bin").stat().st_size / 2
    translations = CTranslate2Translator(ct2_dir, "int8").translate_lines(LINES)
    assert len(translations) == len(LINES) and translations[len(SENTENCES)] == ""
    assert config["add_source_eos"] is True
    with pytest.raises(ExportError, match="unknown CTranslate2 quantization 'int4'"):
        CTranslate2Translator(ct2_dir, "int4")


def test_a_pre_norm_model_with_learned_positions_converts_exactly(export_translator, tmp_path):
    """Its three decoder layers: the word alignments are the middle one's
    (`keras_transformer.alignment.alignment_layer`, neither the first nor the last) in both
    runtimes, which the shared model's one layer cannot tell apart."""
    keras.utils.set_random_seed(1)
    proto = export_translator.spm_model_proto
    config = ModelConfig.from_preset("tiny", vocab_size=Tokenizer(proto).vocab_size,
                                     dropout=0.0, max_length=MAX_LENGTH, norm_first=True,
                                     positional_encoding="learned", num_decoder_layers=3)
    model = Transformer(config)
    translator = Translator(model, proto, DecodingSettings(beam_size=1, max_source_length=40))
    export_ctranslate2(translator, tmp_path, ("float32",))
    ct2 = CTranslate2Translator(tmp_path)
    assert ct2.translate_lines(SENTENCES, batch_size=1) == \
        translator.translate_lines(SENTENCES, batch_size=1)
    # untrained, it translates some lines to BOS pieces alone (text "", which the runtimes'
    # word rules do not expect); the others to one word each, aligned alike
    aligned = [pair for pair in translator.aligned_lines(SENTENCES) if pair[0]]
    assert [pair for pair in ct2.aligned_lines(SENTENCES, batch_size=1) if pair[0]] == aligned
    assert len(aligned) >= 4 and all(pairs for _, pairs in aligned)


def test_a_model_with_other_head_sizes_is_refused(export_translator, tmp_path):
    proto = export_translator.spm_model_proto
    config = ModelConfig.from_preset("tiny", vocab_size=Tokenizer(proto).vocab_size,
                                     key_dim=8, value_dim=8)
    with pytest.raises(ExportError, match="CTranslate2 needs key_dim = value_dim = d_model / "
                                          "num_heads"):
        export_ctranslate2(Translator(Transformer(config), proto), tmp_path)
