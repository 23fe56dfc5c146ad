"""The Translator (`export.translator.module`): beam search over a Transformer as a tf.Module,
whose graph functions are the SavedModel's serving signatures and the sources of the ONNX
models. One module per concern:

    signatures.py  the serving contract: each signature's function, inputs, outputs, warm-up
    module.py      the Translator tf.Module: inputs checked and encoded, the search, one graph
                   function per signature
    translate.py   serving_default, translate_ids, translate_nbest, translate_prefix; the
                   search they share (graph, side by side, XLA)
    score.py       score (and score_ids, score.onnx's source): given translations scored
    align.py       align and translate_aligned: word alignments
    terms.py       translate_terms: terminology constraints
    sample.py      translate_sample: random sampling

Each family module holds its signatures' graph code (plain functions of the model, the
SentencePiece model, the settings and tensors) and the readers of their outputs into Python
values, shared by the in-process Translator and the loaded SavedModel (`export.saved_model`).

Example:
    from export.translator import Translator
    translator = Translator(model, spm_model_proto, DecodingSettings(beam_size=4))
    translator.translate_lines(["Hello."])  # ["Bonjour."]
"""
from export.translator.module import Translator

__all__ = ["Translator"]
