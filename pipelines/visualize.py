"""Attention heat maps of a translated sentence, per layer and head, like the paper's figures
3 to 5: encoder self-attention, decoder self-attention and encoder-decoder attention.

Example:
    >>> visualize(Path("runs/demo/export"), "In the beginning God created the heaven.",
    ...           Path("maps"))  # the PNG paths, one per layer and attention kind
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.model import Transformer
from keras_transformer.tokenizer import BOS_ID, PAD_ID, Tokenizer, vocabulary
from keras_transformer.translate import GREEDY, decode_sources
from pipelines import InputError
from pipelines.files import atomic_open, check_writable

KINDS = ("encoder_self_attention", "decoder_self_attention", "encoder_decoder_attention")


@dataclasses.dataclass
class AttentionMaps:
    """The attention weights of one sentence pair.

    `weights[kind][layer]` is float32 [heads, queries, keys]. Encoder maps are source x source;
    decoder self-attention maps are rows labelled by the token each position predicts
    (`target_pieces`) over keys labelled by the decoder inputs (`decoder_input_pieces`);
    encoder-decoder maps are target x source.
    """

    source_pieces: list[str]
    target_pieces: list[str]
    decoder_input_pieces: list[str]
    weights: dict[str, list[np.ndarray]]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of the maps of `kind`."""
        return {
            "encoder_self_attention": (self.source_pieces, self.source_pieces),
            "decoder_self_attention": (self.target_pieces, self.decoder_input_pieces),
            "encoder_decoder_attention": (self.target_pieces, self.source_pieces),
        }[kind]


def attention_maps(model: Transformer, tokenizer: Tokenizer, sentence: str,
                   max_source_length: int | None = None) -> AttentionMaps:
    """Translates `sentence` greedily, cut to `max_source_length` tokens as `translate` cuts
    it (default and at most the model's max_length), then reads the attention weights of the
    pair. A sentence with no piece (translated to nothing) is refused."""
    pieces = [piece for piece, _ in vocabulary(tokenizer.model_proto)]
    settings = dataclasses.replace(GREEDY, max_source_length=max_source_length).for_model(
        model.model_config.max_length)
    source_ids = tokenizer.tokenize(tf.constant([sentence]), add_eos=True,
                                    max_length=settings.max_source_length).to_tensor()  # [1, s]
    if source_ids.shape[1] == 1:  # EOS alone
        raise InputError(f"nothing to translate in {sentence!r}")
    target_ids, _ = decode_sources(model, source_ids, settings)  # [1, time]
    target = [int(i) for i in target_ids[0].numpy() if i != PAD_ID]  # ends with EOS if any
    decoder_input = tf.constant([[BOS_ID] + target[:-1]])  # [1, t]
    weights = model.attention_weights(source_ids, decoder_input)
    return AttentionMaps(
        source_pieces=[pieces[i] for i in source_ids[0].numpy()],
        target_pieces=[pieces[i] for i in target],
        decoder_input_pieces=[pieces[i] for i in decoder_input[0].numpy()],
        weights={kind: [layer[0].numpy() for layer in layers] for kind, layers in weights.items()})


def plot_attention(maps: AttentionMaps, output_dir: Path) -> list[Path]:
    """One PNG per kind and layer, a panel per head: output_dir/KIND_layerN.png."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in KINDS:
        rows, columns = maps.axes(kind)
        for layer, weights in enumerate(maps.weights[kind]):
            heads = weights.shape[0]
            size = 0.25 * max(len(rows), len(columns)) + 2
            figure, axes = pyplot.subplots(1, heads, figsize=(size * heads, size), squeeze=False)
            for head, axis in enumerate(axes[0]):
                axis.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0)
                axis.set_title(f"head {head + 1}")
                axis.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
                axis.set_yticks(range(len(rows)), rows, fontsize=7)
            layers = len(maps.weights[kind])
            figure.suptitle(f"{kind.replace('_', ' ')}, layer {layer + 1} of {layers}")
            figure.tight_layout()
            path = output_dir / f"{kind}_layer{layer + 1}.png"
            with atomic_open(path, "wb") as file:
                figure.savefig(file, format="png", dpi=80)
            pyplot.close(figure)
            written.append(path)
    return written


def visualize(model_dir: Path, sentence: str, output_dir: Path) -> list[Path]:
    """Heat maps for `sentence` from an export (runs/NAME/export, its saved_model/ or one
    version: the newest complete one), written to output_dir; returns the PNG paths.

    Raises:
        InputError: output_dir (or a parent) is a file.
        OSError: output_dir cannot be written.
        ExportError: no SavedModel there, or one with a file truncated or corrupt.
    """
    from export.loading import rebuild_translator, resolve_export

    check_writable(output_dir)
    _, version_dir = resolve_export(model_dir, "tf")
    translator = rebuild_translator(version_dir)
    maps = attention_maps(translator.model, Tokenizer(translator.spm_model_proto), sentence,
                          translator.settings.max_source_length)
    return plot_attention(maps, output_dir)
