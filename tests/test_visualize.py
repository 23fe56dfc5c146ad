import keras
import numpy as np
import pytest
from PIL import Image

from keras_transformer import ModelConfig, Transformer
from keras_transformer.tokenizer import Tokenizer
from pipelines import InputError
from pipelines.visualize import KINDS, attention_maps, plot_attention


@pytest.fixture(scope="module")
def tiny_translator(demo_run):
    tokenizer = Tokenizer.from_file(demo_run.run_dir / "vocab" / "spm.model")
    keras.utils.set_random_seed(3)
    config = ModelConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=12)
    return Transformer(config), tokenizer


def test_attention_maps_have_one_row_per_query_and_sum_to_one(tiny_translator):
    model, tokenizer = tiny_translator
    maps = attention_maps(model, tokenizer, "In the beginning God created the heavens.")
    heads = model.model_config.num_heads
    for kind in KINDS:
        assert len(maps.weights[kind]) == 2  # tiny: 2 layers
        rows, columns = maps.axes(kind)
        for weights in maps.weights[kind]:
            assert weights.shape == (heads, len(rows), len(columns))
            np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-5)
    assert maps.source_pieces[-1] == "</s>" and maps.decoder_input_pieces[0] == "<s>"
    decoder_self = maps.weights["decoder_self_attention"][0]
    assert np.all(np.triu(decoder_self[0], k=1) == 0)  # causal: nothing from the future
    assert 1 <= len(maps.target_pieces) <= 12  # stopped at EOS or the model's max length


def test_a_long_sentence_is_cut_as_translate_cuts_it_and_an_empty_one_is_refused(
        tiny_translator):
    model, tokenizer = tiny_translator
    sentence = "In the beginning God created the heavens. " * 100
    for max_source_length, kept in [(None, 12), (5, 5)]:  # tiny_translator: max_length 12
        maps = attention_maps(model, tokenizer, sentence, max_source_length)
        assert len(maps.source_pieces) == kept and maps.source_pieces[-1] == "</s>"
        assert maps.weights["encoder_self_attention"][0].shape[1:] == (kept, kept)
    with pytest.raises(InputError, match="nothing to translate"):
        attention_maps(model, tokenizer, " \t ")


def test_plot_writes_a_png_per_kind_and_layer(tiny_translator, tmp_path):
    model, tokenizer = tiny_translator
    maps = attention_maps(model, tokenizer, "Jesus wept.")
    paths = plot_attention(maps, tmp_path / "attention")
    assert sorted(p.name for p in paths) == sorted(
        f"{kind}_layer{i}.png" for kind in KINDS for i in (1, 2))
    for path in paths:
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 100
    assert not [p for p in (tmp_path / "attention").iterdir() if p not in paths]


def test_an_output_path_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    from pipelines.cli import main

    output = tmp_path / "maps.png"
    output.write_bytes(b"")
    for path in (output, output / "maps"):
        assert main(["visualize", str(tmp_path), "Jesus wept.", "--output", str(path)]) == 2
        assert capsys.readouterr().err == \
            f"keras-transformer visualize: error: {output}: a file, not a directory\n"
