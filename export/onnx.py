"""ONNX export with tf2onnx: the Translator's graph functions as ONNX models, beam search inside.

    model.onnx       source_ids int32 [batch, time] -> target_ids int32 [batch, time],
                     score float32 [batch]; runs with plain onnxruntime
    model_int8.onnx  the same with int8 weights (onnxruntime's dynamic quantization)
    score.onnx       source_ids int32 [batch, time], target_pieces int32 [batch, time] (then
                     PAD) -> score, log_prob float32 [batch], target_ids (pieces, EOS, PAD),
                     token_log_probs float32 [batch, time]: the `score` signature on ids
    translator.onnx  text string [batch] (and a multilingual model's target_lang string
                     [batch]) -> translation string [batch], score float32 [batch]; needs
                     onnxruntime-extensions (SentencePiece), whose string kernels read a line
                     up to its first NUL (`OnnxTranslator` first replaces NUL by a space, as
                     the TF graph reads it)
    spm.model, translator.json   the tokenizer and the decoding settings

A multilingual model's translator.onnx joins each line to its language's token as the
SavedModel's signatures do (`export.text.language_text`); ONNX has no assertion, so an unknown
code fails the run at a Gather out of range ("indices element out of data bounds"), and
`OnnxTranslator` refuses one first, naming it (`keras_transformer.languages`).

The beam search's nested tf.while_loops become nested ONNX Loops, whose loop invariants are
then read from outer scopes and whose weights are moved into the body that reads them
(`export.onnx_graph`); its step's attention is traced within `onnx_step_form()`, in the
pattern that `export.onnx_attention` fuses. The beam search is converted once:
translator.onnx joins the tokenizer's graph, model.onnx and the detokenizer's graph
(`onnx.compose`). Opset 17 (tf2onnx 1.17 supports up to 18). Deviations from tf2onnx's
defaults, all pinned to tf2onnx 1.17.0:
* a handler for SentencepieceDetokenizeOp (tf2onnx has none), to onnxruntime-extensions'
  SentencepieceDecoder, which decodes one sequence (`Tokenizer.detokenize` decodes the batch as
  one);
* only the optimizers that can change these graphs run (`OPTIMIZERS`), and an optimizer that
  fails fails the export: tf2onnx's default copies the whole graph before each optimizer to
  skip one that fails, a cost that grows with the nested Loops (docs/decoding-speed.md,
  "ONNX Runtime: the graph rewrites and the session options"); and the graph's protobufs are
  written once, when the model is made, not after each optimizer of each pass as tf2onnx's
  `optimize_graph` does (each time every Loop body again: a third of the ONNX export's time,
  the same nodes and weights out: `_optimized`);
* the graph is frozen as tf2onnx's large-model path freezes it (TensorFlow's
  `_replace_variables_by_constants`), not by `convert_variables_to_constants_v2`, which then
  rebuilds a ConcreteFunction op by op in Python only for tf2onnx to read its GraphDef back:
  a quarter of a conversion, the same ONNX nodes and weights out (`frozen_graph_def`, which
  also frees the freeze's copy of a model's weights at once, lowering the export's peak
  memory);
* its back-to-back optimizer is left out: it merges two Reshapes even when its reshape
  optimizer has written a 0 ("copy the input's dimension") into the second shape, which breaks
  attention's split into heads once a zero bias has been folded away (an untrained model).

Run the models with `export.onnx_runtime.OnnxTranslator`.

Example:
    paths = export_onnx(translator, Path("runs/demo/export/onnx"))  # a Translator
    sorted(paths)  # model.onnx, model_int8.onnx, score.onnx, spm.model, translator.json,
                   # translator.onnx
    OnnxTranslator(paths["model.onnx"].parent).translate_lines(["Hello."])
"""
from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import onnx
import tensorflow as tf
import tf2onnx
from onnx import TensorProto, compose
from tf2onnx import constants, optimizer, tf_loader, tfonnx, utils
from tf2onnx.handler import tf_op
from tensorflow.python.framework.convert_to_constants import (
    _FunctionConverterDataInEager, _replace_variables_by_constants)

from export.onnx_attention import fuse_step_attention
from export.onnx_graph import (fuse_layer_norms, hoist_loop_invariants,
                               log_softmax_without_underflow, selects_as_where, sink_initializers)
from export.onnx_quantize import quantize_int8
from export.metadata import (INT8_MODEL_FILE, METADATA_FILE, MODEL_FILE, SCORE_FILE,
                             SPM_FILE, TRANSLATOR_FILE)
from export.translator.signatures import TARGET_LANG, TEXT, unchecked_inputs
from export.translator import Translator
from keras_transformer.layers.attention import onnx_step_form
from keras_transformer.tokenizer import Tokenizer
from keras_transformer.top_k import plain_top_k

OPSET = 17
# tf2onnx's optimizers in its order, without back-to-back (see above), those for ops these
# graphs never hold (Upsample/Resize, DequantizeLinear, Q/DQ pairs, Einsum), and the global
# pool one, whose GlobalAveragePool for a mean over the last axis hides layer norms from
# `fuse_layer_norms`.
OPTIMIZERS = {name: optimizer._get_optimizers()[name] for name in (
    "optimize_transpose", "fold_constants", "loop_optimizer", "merge_duplication",
    "reshape_optimizer", "remove_identity")}
# The weights (bytes) above which the freeze's reference cycles are collected at once, lowering
# the export's peak memory; below it they free little, less than a full collection costs in a
# process that holds many traced graphs (a test's). Measured: docs/figures.md.
COLLECT_FREEZE_ABOVE_BYTES = 4 * 2**20


@tf_op("SentencepieceDetokenizeOp", domain=constants.CONTRIB_OPS_DOMAIN)
class SentencepieceDetokenize:
    """SentencepieceDetokenizeOp(model, ids, splits) -> SentencepieceDecoder(ids): valid for a
    single row (splits [0, n]), as `keras_transformer.tokenizer.Tokenizer.detokenize` calls it."""

    @classmethod
    def version_1(cls, ctx, node, **kwargs) -> None:
        resource = node.inputs[0]
        utils.make_sure(resource.type == "SentencepieceOp",
                        "input 0 of %s is not a SentencepieceOp", node.name)
        ids = ctx.make_node("Cast", [node.input[1]], attr={"to": TensorProto.INT64}).output[0]
        ctx.replace_inputs(node, [ids])
        node.type, node.domain = "SentencepieceDecoder", constants.CONTRIB_OPS_DOMAIN
        for name in list(node.attr):
            del node.attr[name]
        node.set_attr("model", resource.attr["model"].s)
        if ctx.is_safe_to_remove_nodes([resource]):
            ctx.remove_node(resource.name)


def export_onnx(translator: Translator, directory: Path) -> dict[str, Path]:
    """Writes model.onnx, model_int8.onnx, translator.onnx, score.onnx, spm.model and
    translator.json into `directory`; returns their paths by name."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / name for name in (MODEL_FILE, INT8_MODEL_FILE, TRANSLATOR_FILE,
                                                 SCORE_FILE, SPM_FILE, METADATA_FILE)}
    metadata = translator.metadata().to_dict()
    search = translator.translate_ids  # traced anew: the translator may hold a trace of it
    with plain_top_k(), onnx_step_form(), unchecked_inputs():
        ids_model = convert(tf.function(search.python_function, autograph=False,
                                        input_signature=search.input_signature), metadata)
    onnx.save(ids_model, paths[MODEL_FILE])
    quantize_int8(paths[MODEL_FILE], paths[INT8_MODEL_FILE])
    onnx.save(text_model(translator, ids_model, metadata), paths[TRANSLATOR_FILE])
    onnx.save(convert(translator.score_ids, metadata), paths[SCORE_FILE])
    paths[SPM_FILE].write_bytes(translator.spm_model_proto)
    translator.metadata().write(paths[METADATA_FILE])
    return paths


def text_model(translator: Translator, ids_model: onnx.ModelProto,
               metadata: dict[str, Any]) -> onnx.ModelProto:
    """translator.onnx: text [batch] (and a multilingual model's target_lang [batch]) ->
    translation [batch], score [batch]; the graphs of `translator.encode` and of
    `Tokenizer.detokenize` joined to `ids_model` (model.onnx), whose `translate_ids` reads the
    encoded ids as `translate` does."""
    tokenizer = Tokenizer(translator.spm_model_proto)
    inputs = [TEXT, TARGET_LANG] if translator.target_languages else [TEXT]

    @tf.function(input_signature=[spec.spec for spec in inputs], autograph=False)
    def encode(text: tf.Tensor, target_lang: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        return {"source_ids": translator.encode(text, target_lang)}  # [batch, time]

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="target_ids")],
                 autograph=False)
    def detokenize(target_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"translation": tokenizer.detokenize(target_ids)}  # [batch]

    encoder, decoder = (compose.add_prefix(convert(function, metadata, text=True), prefix,
                                           rename_inputs=False, rename_outputs=False)
                        for function, prefix in ((encode, "encode/"),
                                                 (detokenize, "detokenize/")))
    model = compose.merge_models(encoder, ids_model, io_map=[("source_ids", "source_ids")])
    model = compose.merge_models(model, decoder, io_map=[("target_ids", "target_ids")])
    onnx.helper.set_model_props(model, {key: json.dumps(value) for key, value in metadata.items()})
    return model


def convert(function: tf.types.experimental.PolymorphicFunction, metadata: dict[str, Any],
            text: bool = False) -> onnx.ModelProto:
    """The ONNX model of a tf.function with an input signature (as tf2onnx's from_function,
    with `OPTIMIZERS`, failing on any op it cannot convert or optimize)."""
    concrete = function.get_concrete_function()
    inputs = [t.name for t in concrete.inputs if t.dtype != tf.resource]
    outputs = [t.name for t in concrete.outputs if t.dtype != tf.resource]
    extra_opset = [utils.make_opsetid(constants.CONTRIB_OPS_DOMAIN, 1)] if text else None
    with tf.device("/cpu:0"):
        graph_def = frozen_graph_def(concrete, inputs, outputs)
        with tf.Graph().as_default() as tf_graph:
            tf.import_graph_def(graph_def, name="")
            graph = tfonnx.process_tf_graph(
                tf_graph, opset=OPSET, extra_opset=extra_opset, input_names=inputs,
                output_names=outputs, continue_on_error=False,
                tensors_to_rename=tf2onnx.convert.tensor_names_from_structed(concrete, inputs,
                                                                            outputs))
    graph = _optimized(graph)
    model = graph.make_model(f"converted from {concrete.name}")  # writes the protobufs
    hoist_loop_invariants(model)
    sink_initializers(model)
    fuse_layer_norms(model)
    selects_as_where(model)
    fuse_step_attention(model)
    log_softmax_without_underflow(model)
    onnx.helper.set_model_props(model, {key: json.dumps(value) for key, value in metadata.items()})
    return model


def frozen_graph_def(concrete: tf.types.experimental.ConcreteFunction, inputs: list[str],
                     outputs: list[str]) -> tf.compat.v1.GraphDef:
    """tf2onnx's `tf_loader.from_function(concrete, inputs, outputs)` (the function's graph,
    variables frozen to constants, then optimized by Grappler for tf2onnx) without rebuilding
    a ConcreteFunction from the frozen GraphDef (see the module docstring). `inputs`: the
    function's inputs that are not resources (what from_function keeps of its names)."""
    graph_def, _ = _replace_variables_by_constants(converter_data=_FunctionConverterDataInEager(
        func=concrete, lower_control_flow=False, aggressive_inlining=True))
    weights = sum(v.shape.num_elements() * v.dtype.size for v in concrete.variables)
    if weights > COLLECT_FREEZE_ABOVE_BYTES:
        gc.collect()  # the converter's data holds the weights in reference cycles: freed now
    with tf.Graph().as_default() as graph:
        tf.import_graph_def(graph_def, name="")
        graph_def = tf_loader.fix_freezing_errors_part2(graph.as_graph_def(add_shapes=True))
        return tf_loader.tf_optimize(inputs, outputs, graph_def)


def _optimized(graph: tf2onnx.graph.Graph) -> tf2onnx.graph.Graph:
    """tf2onnx's `optimize_graph(graph, catch_errors=False, optimizers=OPTIMIZERS)`: passes of
    every optimizer in turn, unused nodes deleted after each, until a pass changes nothing;
    without its protobuf update after each optimizer (`make_model` writes them)."""
    changed, iteration = True, 0
    while changed:
        changed = False
        for factory in OPTIMIZERS.values():
            pass_ = factory()
            pass_.opt_iteration = iteration
            graph = pass_._optimize(graph)
            graph.delete_unused_nodes(graph.outputs)
            changed = changed or pass_.graph_been_opt
        iteration += 1
    graph.topological_sort(graph.get_nodes())
    return graph
