import pytest
import tensorflow as tf

from keras_transformer import PRESETS, ModelConfig, Transformer
from keras_transformer.config import ModelConfigError

# Table 3 of the paper: N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls.
TABLE_3 = {
    "base": (6, 512, 2048, 8, 64, 64, 0.1, 0.1),
    "big": (6, 1024, 4096, 16, 64, 64, 0.3, 0.1),
}


@pytest.mark.parametrize("preset", sorted(TABLE_3))
def test_paper_presets_match_table_3(preset):
    c = ModelConfig.from_preset(preset)
    row = (c.num_encoder_layers, c.d_model, c.d_ff, c.num_heads, c.head_key_dim,
           c.head_value_dim, c.dropout, c.label_smoothing)
    assert row == TABLE_3[preset]
    assert c.num_decoder_layers == c.num_encoder_layers
    assert not c.norm_first and c.positional_encoding == "sinusoidal"


def test_small_preset():
    c = ModelConfig.from_preset("small")
    assert (c.d_model, c.num_encoder_layers, c.num_decoder_layers, c.num_heads, c.d_ff) == (
        256, 3, 3, 4, 1024)


@pytest.mark.parametrize("preset, low, high", [("base", 63e6, 65.5e6), ("big", 210e6, 216e6)])
def test_parameter_count_matches_paper(preset, low, high):
    with tf.Graph().as_default():  # the variables' shapes, without computing their values
        model = Transformer(ModelConfig.from_preset(preset, vocab_size=37000))
        model.build()
        assert low <= model.count_params() <= high


@pytest.mark.parametrize("overrides, field, fields", [
    (dict(d_model=100, num_heads=8), "num_heads", ("d_model", "num_heads")),
    (dict(dropout=-0.1), "dropout", ("dropout",)),
    (dict(label_smoothing=1.5), "label_smoothing", ("label_smoothing",)),
    (dict(vocab_size=0), "vocab_size", ("vocab_size",)),
    (dict(num_heads=2.5), "num_heads", ("num_heads",)),
    (dict(positional_encoding="rotary"), "positional_encoding", ("positional_encoding",)),
    (dict(pad_id=9, vocab_size=9), "pad_id", ("pad_id", "vocab_size")),
])
def test_bad_config_names_the_field(overrides, field, fields):
    with pytest.raises(ModelConfigError, match=f"ModelConfig.{field}") as error:
        ModelConfig.from_preset("tiny", **overrides)
    assert error.value.fields == fields


def test_unknown_preset_and_field():
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        ModelConfig.from_preset("huge")
    with pytest.raises(ValueError, match="d_modle"):
        ModelConfig.from_preset("tiny", d_modle=64)


def test_explicit_head_dims_allow_indivisible_width():
    c = ModelConfig.from_preset("tiny", d_model=100, num_heads=8, key_dim=16, value_dim=16)
    assert (c.head_key_dim, c.head_value_dim) == (16, 16)
    assert set(PRESETS) == {"tiny", "small", "base", "big", "student"}
