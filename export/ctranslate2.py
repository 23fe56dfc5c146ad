"""CTranslate2 export: a Translator's weights as CTranslate2 Transformer models, float32 and
int8, for `keras-transformer translate --runtime ct2` (`export.ct2_runtime`).

    ctranslate2/float32/  model.bin, config.json, shared_vocabulary.json (and vmap.txt, the
                          lexical shortlist as CTranslate2's vocabulary mapping)
    ctranslate2/int8/     the same weights quantized to int8 (CTranslate2's own quantization)
    ctranslate2/spm.model, translator.json   the tokenizer and the decoding settings

The spec mirrors the model exactly: post-norm (or pre-norm with final norms), ReLU, embeddings
scaled by sqrt(d_model), one table shared by source, target and the pre-softmax projection
(without bias), fused query/key/value projections, our interleaved sinusoid table (or the
learned positions) written out for `max_length` positions, and the model's layer-norm epsilon.
Decoding differs only where CTranslate2 has no equivalent: its length penalty divides by
length ** alpha where ours divides by ((5 + length) / 6) ** alpha, and its output limit is one
per batch (the longest source + extra_length) where ours is per sentence (docs/serving.md,
"CTranslate2"). The spec declares the decoder layer whose cross-attention, averaged over its
heads (head 0 alone after guided-alignment training), gives word alignments
(`keras_transformer.alignment`), so that `translate_batch(return_attention=True)` returns the
attention the SavedModel's `align` reads. A Translator's lexical shortlist ships as each model's
vocabulary mapping (`vocabulary_mapping`), which `export.ct2_runtime` uses (`use_vmap`).

Example:
    translator = Translator(model, spm_model_proto, DecodingSettings(beam_size=4))
    directory = Path("runs/demo/export/ctranslate2")
    paths = export_ctranslate2(translator, directory)  # float32/, int8/, spm.model, ...
    CTranslate2Translator(directory, "int8").translate_lines(["Hello."])  # export.ct2_runtime
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec

from export import ExportError
from export.metadata import METADATA_FILE, QUANTIZATIONS, SPM_FILE
from export.translator import Translator
from keras_transformer.alignment import alignment_layer
from keras_transformer.layers.positional_encoding import sinusoidal_table
from keras_transformer.model import Transformer
from keras_transformer.shortlist_table import Shortlist
from keras_transformer.tokenizer import PAD_ID, vocabulary

VMAP_FILE = "vocab_mapping.txt"  # written beside the models while they convert, then removed


class TransformerConverter(Converter):
    """Builds the CTranslate2 TransformerSpec of a built float32 Transformer.

    Args:
        model: the Transformer.
        pieces: the vocabulary, piece i for id i (BOS `<s>`, EOS `</s>`, UNK `<unk>`).
    """

    def __init__(self, model: Transformer, pieces: list[str]) -> None:
        self.model, self.pieces = model, pieces

    def _load(self) -> transformer_spec.TransformerSpec:
        c = self.model.model_config
        if c.head_key_dim * c.num_heads != c.d_model or c.head_value_dim != c.head_key_dim:
            raise ExportError(f"CTranslate2 needs key_dim = value_dim = d_model / num_heads "
                              f"({c.d_model // c.num_heads}); the model has key_dim "
                              f"{c.head_key_dim}, value_dim {c.head_value_dim}")
        spec = transformer_spec.TransformerSpec.from_config(
            (c.num_encoder_layers, c.num_decoder_layers), c.num_heads, pre_norm=c.norm_first,
            activation=common_spec.Activation.RELU, alignment_layer=alignment_layer(c),
            # CTranslate2 averages heads 0 .. alignment_heads - 1 of that layer (0: all of them,
            # its transformer.cc), as the SavedModel's `align` does; 1 after guided alignment.
            alignment_heads=c.alignment_heads)
        spec.config.layer_norm_epsilon = c.layer_norm_epsilon
        spec.config.add_source_eos = True  # sources are pieces, then EOS
        spec.register_source_vocabulary(self.pieces)
        spec.register_target_vocabulary(self.pieces)
        table = _numpy(self.model.embedding.embeddings)  # [vocab, d_model]
        encoder, decoder = spec.encoder, spec.decoder
        encoder.embeddings[0].weight = decoder.embeddings.weight = table
        decoder.projection.weight = table
        encoder.position_encodings.encodings = self._positions(self.model.source_positions)
        decoder.position_encodings.encodings = self._positions(self.model.target_positions)
        for layer_spec, layer in zip(encoder.layer, self.model.encoder_layers, strict=True):
            _set_self_attention(layer_spec.self_attention, layer.self_attention,
                                layer.self_attention_block)
            _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_block)
        for layer_spec, layer in zip(decoder.layer, self.model.decoder_layers, strict=True):
            _set_self_attention(layer_spec.self_attention, layer.self_attention,
                                layer.self_attention_block)
            attention = layer_spec.attention
            _set_linear(attention.linear[0], layer.cross_attention.query_dense)
            _set_linear(attention.linear[1], layer.cross_attention.key_dense,
                        layer.cross_attention.value_dense)
            _set_linear(attention.linear[2], layer.cross_attention.output_dense)
            _set_layer_norm(attention.layer_norm, layer.cross_attention_block.layer_norm)
            _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_block)
        if c.norm_first:
            _set_layer_norm(encoder.layer_norm, self.model.encoder_norm)
            _set_layer_norm(decoder.layer_norm, self.model.decoder_norm)
        return spec

    def _positions(self, layer) -> np.ndarray:
        """The positional table added to positions 0 .. max_length - 1: [max_length, d_model]."""
        c = self.model.model_config
        if c.positional_encoding == "learned":
            return _numpy(layer.position_embeddings)
        return sinusoidal_table(np.arange(c.max_length), c.d_model).numpy()


def export_ctranslate2(translator: Translator, directory: Path,
                       quantizations: tuple[str, ...] = QUANTIZATIONS) -> dict[str, Path]:
    """Writes one CTranslate2 model per quantization, spm.model and translator.json into
    `directory`; returns their paths by name."""
    directory.mkdir(parents=True, exist_ok=True)
    pieces = [piece for piece, _ in vocabulary(translator.spm_model_proto)]
    converter = TransformerConverter(translator.model, pieces)
    paths = {name: directory / name for name in quantizations}
    vmap = None
    if translator.shortlist is not None:
        vmap = directory / VMAP_FILE  # a staging file: each model directory gets its copy
        vmap.write_text("".join(vocabulary_mapping(translator.shortlist, pieces)),
                        encoding="utf-8")
    for name in quantizations:
        converter.convert(str(paths[name]), vmap=vmap and str(vmap), quantization=name,
                          force=True)
    if vmap is not None:
        vmap.unlink()
    paths[SPM_FILE] = directory / SPM_FILE
    paths[SPM_FILE].write_bytes(translator.spm_model_proto)
    paths[METADATA_FILE] = directory / METADATA_FILE
    translator.metadata().write(paths[METADATA_FILE])
    return paths


def vocabulary_mapping(shortlist: Shortlist, pieces: list[str]) -> Iterator[str]:
    """The lines of CTranslate2's vocabulary mapping file (`SOURCE\tTARGET ...`) of a
    lexical shortlist: the empty key's line holds the pieces always allowed (CTranslate2 adds
    PAD, UNK, BOS and EOS itself), each source piece's line its candidates and itself, as
    `keras_transformer.shortlist.batch_candidates` takes them; CTranslate2 projects a batch
    onto the union of its sentences' candidates (not each row onto its own)."""
    table = np.asarray(shortlist.table)  # [vocab, k]
    yield "\t" + " ".join(pieces[i] for i in np.asarray(shortlist.always)) + "\n"
    for source, row in enumerate(table):
        targets = dict.fromkeys([*(int(i) for i in row if i != PAD_ID), source])
        yield pieces[source] + "\t" + " ".join(pieces[i] for i in targets) + "\n"


def _numpy(variable) -> np.ndarray:
    return np.asarray(variable.numpy(), np.float32)


def _set_linear(spec: common_spec.LinearSpec, *dense_layers) -> None:
    """CTranslate2's [out, in] weight and bias of Keras Dense layers ([in, out] kernels),
    concatenated along the output when several (a fused projection)."""
    spec.weight = np.concatenate([_numpy(dense.kernel).T for dense in dense_layers])
    spec.bias = np.concatenate([_numpy(dense.bias) for dense in dense_layers])


def _set_layer_norm(spec: common_spec.LayerNormSpec, norm) -> None:
    spec.gamma, spec.beta = _numpy(norm.gamma), _numpy(norm.beta)


def _set_self_attention(spec, attention, block) -> None:
    _set_linear(spec.linear[0], attention.query_dense, attention.key_dense,
                attention.value_dense)
    _set_linear(spec.linear[1], attention.output_dense)
    _set_layer_norm(spec.layer_norm, block.layer_norm)


def _set_feed_forward(spec, feed_forward, block) -> None:
    _set_linear(spec.linear_0, feed_forward.inner_dense)
    _set_linear(spec.linear_1, feed_forward.outer_dense)
    _set_layer_norm(spec.layer_norm, block.layer_norm)
