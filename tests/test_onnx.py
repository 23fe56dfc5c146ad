"""export/onnx.py and export/onnx_runtime.py: the ONNX models in ONNX Runtime against eager
beam search and the TF graphs.

translator.onnx runs in a child process that never imports TensorFlow (`OnnxTranslator`
does so by itself here): onnxruntime-extensions' SentencePiece kernels crash in a process
that imported TensorFlow first.
"""
import json
import logging

import numpy as np
import onnx
import pytest
import tensorflow as tf

from export.onnx import OPSET, convert
from export.onnx_graph import all_graphs
from export.onnx_quantize import quantize_int8
from export.onnx_runtime import OnnxTranslator, session_options
from export.translator import Translator
from export_helpers import SENTENCES, make_model
from keras_transformer.decoding_settings import DecodingSettings
from tiny_run import ONE_LAYER_A_SIDE


def test_threads_spin_between_ops_unless_the_environment_says_passive(monkeypatch):
    """ONNX Runtime's intra-op threads follow OMP_WAIT_POLICY, as CTranslate2's OpenMP ones do:
    spinning by default (a machine of its own), asleep between ops with PASSIVE."""
    spinning = "session.intra_op.allow_spinning"
    for policy, expected in ((None, "1"), ("ACTIVE", "1"), ("passive", "0"), ("PASSIVE", "0")):
        if policy is None:
            monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
        else:
            monkeypatch.setenv("OMP_WAIT_POLICY", policy)
        options = session_options(threads=2)
        assert (options.get_session_config_entry(spinning), options.intra_op_num_threads) == (
            expected, 2), policy


def test_model_onnx_equals_keras_level_beam_search(onnx_dir, keras_reference):
    model = onnx.load(str(onnx_dir / "model.onnx"))
    assert [op.version for op in model.opset_import if op.domain in ("", "ai.onnx")] == [OPSET]
    assert [node.op_type for node in model.graph.node].count("Loop") == 1  # the beam search
    output = OnnxTranslator(onnx_dir).translate_ids(keras_reference["source_ids"])
    np.testing.assert_array_equal(output["target_ids"], keras_reference["target_ids"])
    np.testing.assert_allclose(output["score"], keras_reference["score"], atol=5e-6)


def test_translator_onnx_gives_the_strings_of_the_tf_graph(onnx_dir, export_translator):
    """In this process TensorFlow is imported: OnnxTranslator runs translator.onnx in a child."""
    translator = OnnxTranslator(onnx_dir, threads=1)
    bad = [b"", b" \t ", b"fish " * 2000, b"\xc3\x28 \xff bird"]
    for batch in ([line.encode() for line in SENTENCES], bad, [b"bird"],
                  [line.encode() for line in (SENTENCES * 7)[:64]]):
        output = translator.translate(batch)
        expected = export_translator.translate(tf.constant(batch))
        assert output["translation"] == [t.decode() for t in expected["translation"].numpy()]
        np.testing.assert_allclose(output["score"], expected["score"].numpy(), atol=5e-6)
    lines = SENTENCES + [""]
    assert translator.translate_lines(lines, batch_size=3) == \
        export_translator.translate_lines(lines)
    assert "text_session" not in translator.__dict__  # never made beside TensorFlow


def test_an_untrained_pre_norm_model_with_learned_positions_converts_too(export_translator,
                                                                        keras_reference):
    """Zero biases are folded away, which let tf2onnx's back-to-back optimizer break the
    attention head split; the conversion leaves that optimizer out. The model's other
    structure (pre-norm, learned positions) converts with the optimizers that run (one layer
    each side: a conversion costs about 60% of the tiny preset's)."""
    model = make_model(export_translator.spm_model_proto, norm_first=True,
                       positional_encoding="learned", **ONE_LAYER_A_SIDE)
    translator = Translator(model, export_translator.spm_model_proto,
                            DecodingSettings(extra_length=5))
    model = convert(translator.translate_ids, translator.metadata().to_dict())
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    source = keras_reference["source_ids"]
    target_ids, score = session.run(["target_ids", "score"], {"source_ids": source})
    expected = translator.translate_ids(tf.constant(source))
    np.testing.assert_array_equal(target_ids, expected["target_ids"].numpy())
    np.testing.assert_allclose(score, expected["score"].numpy(), atol=5e-6)


def test_metadata_and_an_empty_batch(onnx_dir):
    translator = OnnxTranslator(onnx_dir)
    assert translator.metadata.settings == DecodingSettings(beam_size=4, max_source_length=40)
    assert json.loads(onnx.load(str(onnx_dir / "model.onnx")).metadata_props[0].value) == 4
    assert translator.translate([])["translation"] == []


def test_loop_invariants_hoisted_weights_sunk_and_int8_weights_decode(onnx_dir, keras_reference,
                                                                      export_translator):
    from export.metadata import INT8_MODEL_FILE

    def loop_bodies(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
        """The bodies of the Loops in `graph` and in those bodies."""
        bodies = [attribute.g for node in graph.node if node.op_type == "Loop"
                  for attribute in node.attribute if attribute.name == "body"]
        return bodies + [inner for body in bodies for inner in loop_bodies(body)]

    bodies = loop_bodies(onnx.load(str(onnx_dir / "model.onnx")).graph)
    assert len(bodies) == 2  # the sentences' loop and, inside it, the steps' loop
    for body in bodies:  # no value passes through a loop unchanged
        assert all(i.name != o.name for i, o in zip(body.input[2:], body.output[1:]))
    own_weights = {initializer.name for initializer in bodies[1].initializer
                   if len(initializer.dims) == 2}  # the steps' loop holds the decoder's weights
    # a decoder layer's 8 (self-attention's query, key, value and output; the encoder-decoder
    # attention's query and output; the feed-forward's 2), then the output projection
    matmuls = 8 * export_translator.model.model_config.num_decoder_layers + 1
    assert sum(node.op_type == "MatMul" and node.input[1] in own_weights
               for node in bodies[1].node) == matmuls
    int8_bodies = loop_bodies(onnx.load(str(onnx_dir / INT8_MODEL_FILE)).graph)
    assert sum(node.op_type == "MatMulInteger" for node in int8_bodies[1].node) == matmuls
    int8 = OnnxTranslator(onnx_dir, ids_model=INT8_MODEL_FILE).translate_ids(
        keras_reference["source_ids"])["target_ids"]
    reference = keras_reference["target_ids"]
    same = [np.array_equal(a[a != 0], b[b != 0]) for a, b in zip(int8, reference)]
    assert sum(same) >= len(same) // 2, same


def test_layer_norms_are_fused_where_they_normalise_the_last_axis(onnx_dir, export_translator):
    import keras
    import onnxruntime as ort

    model = onnx.load(str(onnx_dir / "model.onnx"))
    norms = [layer for layer in export_translator.model._flatten_layers()
             if isinstance(layer, keras.layers.LayerNormalization)]

    def count(graph: onnx.GraphProto, op_type: str) -> int:
        return sum(node.op_type == op_type for body in all_graphs(graph) for node in body.node)

    assert count(model.graph, "LayerNormalization") == len(norms) == 5  # 2 + 3: a layer a side
    assert count(model.graph, "ReduceMean") == count(model.graph, "Reciprocal") == 0
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(2, 5, 8)).astype(np.float32)
    # gamma != beta; gamma == beta (one initializer for both); across time: left as it is
    for axis, beta_offset, fused in ((-1, 1.0, 1), (-1, 0.0, 1), (1, 1.0, 0)):
        layer = keras.layers.LayerNormalization(axis=axis, epsilon=1e-6)
        layer.build(x.shape)
        gamma = np.linspace(0.5, 2.0, layer.gamma.shape[0], dtype=np.float32)
        layer.set_weights([gamma, gamma + beta_offset])
        function = tf.function(lambda x: {"y": layer(x)},
                               input_signature=[tf.TensorSpec([None, 5, 8], tf.float32)],
                               autograph=False)
        graph = convert(function, {})
        assert count(graph.graph, "LayerNormalization") == fused
        session = ort.InferenceSession(graph.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(["y"], {"x": x})[0], layer(x).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_each_attention_of_the_step_is_one_fused_node_and_the_rest_are_left(onnx_dir,
                                                                          export_translator):
    """In the steps' loop of model.onnx and model_int8.onnx, each decoder layer's two attentions
    are ONNX Runtime's MultiHeadAttention (no Softmax is left there), and the memory's mask
    becomes its bias once, in the sentences' loop; the encoder's attention over whole sources
    and score.onnx's over whole targets keep their nodes. (That they compute what the graph
    does: test_model_onnx_equals_keras_level_beam_search and the ONNX parity tests.)"""
    from export.metadata import INT8_MODEL_FILE, SCORE_FILE

    config = export_translator.model.model_config

    def counts(graph: onnx.GraphProto) -> dict[str, int]:
        types = [node.op_type for node in graph.node]
        return {op_type: types.count(op_type)
                for op_type in ("MultiHeadAttention", "Softmax", "Where")}

    def loops(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
        return [attribute.g for node in graph.node if node.op_type == "Loop"
                for attribute in node.attribute if attribute.name == "body"]

    for name in ("model.onnx", INT8_MODEL_FILE):
        model = onnx.load(str(onnx_dir / name))
        [sentences] = loops(model.graph)
        [steps] = loops(sentences)
        assert counts(steps)["MultiHeadAttention"] == 2 * config.num_decoder_layers, name
        assert counts(steps)["Softmax"] == 0, name
        assert sum(node.output[0].endswith("/attention_bias") for node in sentences.node) == 1
        assert counts(model.graph)["MultiHeadAttention"] == 0, name
        assert counts(model.graph)["Softmax"] == config.num_encoder_layers, name
        assert {"com.microsoft"} <= {opset.domain for opset in model.opset_import}
    score = onnx.load(str(onnx_dir / SCORE_FILE))
    assert sum(counts(graph)["MultiHeadAttention"] for graph in all_graphs(score.graph)) == 0
    assert sum(counts(graph)["Softmax"] for graph in all_graphs(score.graph)) == \
        config.num_encoder_layers + 2 * config.num_decoder_layers


@pytest.mark.slow  # an ONNX conversion
def test_a_select_is_one_where_that_keeps_tensorflows_choice_beside_infinities():
    """tf.where converts to one Where node (tf2onnx writes Cast, Not, two Muls and an Add, whose
    0 * inf is NaN where the value not chosen is infinite): ONNX Runtime gives TensorFlow's
    values."""
    import onnxruntime as ort

    function = tf.function(lambda x, keep: {"y": tf.where(keep, x, tf.math.log(x))},
                           input_signature=[tf.TensorSpec([None, 3], tf.float32),
                                            tf.TensorSpec([None, 3], tf.bool)],
                           autograph=False)
    graph = convert(function, {})
    ops = [node.op_type for node in graph.graph.node]
    assert ops.count("Where") == 1 and not {"Cast", "Not", "Mul", "Add"} & set(ops), ops
    x = np.array([[0.0, 1.0, 2.0], [0.5, 0.0, 3.0]], np.float32)  # log(0) = -inf
    keep = np.array([[True, False, True], [False, True, False]])
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(["y"], {"x": x, "keep": keep})[0],
                                  function(x, keep)["y"].numpy())


@pytest.mark.slow  # a freeze, as an ONNX conversion starts
def test_the_freeze_gives_the_graph_of_tf2onnxs_from_function():
    """`frozen_graph_def` (no ConcreteFunction rebuilt) against tf2onnx's `from_function`, on a
    function reading variables (one through a gather) inside a while loop: the same nodes,
    inputs and frozen values, and loop bodies of the same ops."""
    from tf2onnx import tf_loader

    from export.onnx import frozen_graph_def

    table, scale = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3)), tf.Variable(2.0)

    def body(step, total):
        return step + 1, total + tf.reduce_sum(tf.gather(table, step % 4)) * scale

    function = tf.function(lambda limit: {"total": tf.while_loop(
        lambda step, _: step < limit, body, (tf.constant(0), tf.constant(0.0)))[1]},
        input_signature=[tf.TensorSpec([], tf.int32)], autograph=False)
    concrete = function.get_concrete_function()
    inputs = [t.name for t in concrete.inputs if t.dtype != tf.resource]
    outputs = [t.name for t in concrete.outputs]
    ours, theirs = (freeze(concrete, inputs, outputs)
                    for freeze in (frozen_graph_def, tf_loader.from_function))

    def nodes(graph_def):
        return {node.name: (node.op, list(node.input), tf.make_ndarray(node.attr["value"].tensor)
                            .tolist() if node.op == "Const" else None) for node in graph_def.node}

    def bodies(graph_def):
        return sorted(sorted(node.op for node in body.node_def)
                      for body in graph_def.library.function)

    assert nodes(ours) == nodes(theirs) and bodies(ours) == bodies(theirs)
    assert "VarHandleOp" not in {node.op for node in ours.node}
    assert [node.op for node in ours.node].count("While") == 1


def test_the_quantizers_warnings_are_left_out_unless_verbose(onnx_dir, tmp_path, caplog):
    """ONNX Runtime's quantizer logs a warning with a protobuf dump for each tensor it keeps in
    float32; they show only with a root logger below WARNING (`--verbose`)."""
    for level in (logging.WARNING, logging.INFO):
        caplog.clear()
        with caplog.at_level(level):
            quantize_int8(onnx_dir / "model.onnx", tmp_path / f"int8_{level}.onnx")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert bool(warnings) == (level == logging.INFO), level
    assert logging.getLogger().level != logging.ERROR  # restored


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of `model` in ONNX Runtime."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_a_log_softmax_in_any_graph_is_rewritten_to_the_same_values():
    """LogSoftmax (here in an If's branch) becomes the clamped form: the same log-probabilities
    on ordinary rows, rows whose entries are all equal, and rows mostly masked with NEG_INF as
    a batch's shortlist masks them (their masked entries stay about NEG_INF)."""
    from onnx import TensorProto, helper

    from export.onnx_graph import log_softmax_without_underflow

    def branch(op: str) -> onnx.GraphProto:
        node = helper.make_node(op, ["x"], ["y"], **({"axis": -1} if op == "LogSoftmax" else {}))
        return helper.make_graph([node], op, [], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])

    graph = helper.make_graph(
        [helper.make_node("If", ["log"], ["y"], then_branch=branch("LogSoftmax"),
                          else_branch=branch("Identity"))], "g",
        [helper.make_tensor_value_info("log", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=8)
    x = np.random.default_rng(3).normal(scale=8.0, size=(4, 6)).astype(np.float32)
    x[1] = 2.5
    x[2, 1:] = x[3, [0, 2, 3, 5]] = -1e9
    expected = _run(model, {"log": np.array(True), "x": x})
    assert log_softmax_without_underflow(model) == 1
    then_branch = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")
    ops = [node.op_type for node in then_branch.node]
    assert "LogSoftmax" not in ops and "Exp" in ops
    np.testing.assert_allclose(_run(model, {"log": np.array(True), "x": x}), expected,
                               rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(_run(model, {"log": np.array(False), "x": x}), x)


def _shortlist_projection(table: np.ndarray, transposed: bool = True, searches: int = 1
                          ) -> "onnx.ModelProto":
    """x [rows, d] times the rows `ids` of `table` [vocab, d] gathered (named for the
    shortlist's KERNEL_OP) and transposed, as a shortlisted search projects (`searches`
    such projections of the one table: logits, logits_1, ...); without `transposed`, the
    gathered rows go straight into the MatMul."""
    from onnx import TensorProto, helper, numpy_helper

    from keras_transformer.shortlist import KERNEL_OP

    nodes, outputs = [], []
    for search in range(searches):
        tail = f"_{search}" if search else ""
        nodes.append(helper.make_node("Gather", ["table", "ids"], [f"rows{tail}"],
                                      name=f"search{tail}/{KERNEL_OP}"))
        if transposed:
            nodes.append(helper.make_node("Transpose", [f"rows{tail}"], [f"columns{tail}"],
                                          perm=[1, 0], name=f"search{tail}/{KERNEL_OP}_columns"))
        nodes.append(helper.make_node(
            "MatMul", ["x", f"columns{tail}" if transposed else f"rows{tail}"],
            [f"logits{tail}"]))
        outputs.append(helper.make_tensor_value_info(f"logits{tail}", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, table.shape[1]]),
         helper.make_tensor_value_info("ids", TensorProto.INT32, [None])],
        outputs, [numpy_helper.from_array(table, "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=8)


def test_a_shortlists_projection_is_quantized_per_piece():
    """The gathered rows of a shortlist's embedding matrix become int8 with a scale per piece:
    the projection onto them, small and large rows alike, within int8's error, and the float32
    matrix no longer in the model."""
    from onnx import TensorProto

    from export.onnx_quantize import quantize_shortlist_kernel

    rng = np.random.default_rng(5)
    table = rng.normal(size=(40, 16)).astype(np.float32)  # [vocab, d_model]
    table[::4] *= 1e-3  # rows three orders of magnitude apart
    model = _shortlist_projection(table)
    x, ids = rng.normal(size=(3, 16)).astype(np.float32), np.array([0, 5, 8, 39], np.int32)
    assert quantize_shortlist_kernel(model) == 1
    assert [t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT] == [
        "table_piece_scales"]
    logits = _run(model, {"x": x, "ids": ids})
    expected = x @ table[ids].T  # [3, 4]
    piece_size = np.abs(table[ids]).max(axis=1) * np.abs(x).sum(axis=1, keepdims=True)
    assert (np.abs(logits - expected) <= 0.02 * piece_size).all()
    assert np.abs(logits[:, [0, 2]]).max() < 0.1  # the small rows keep their own scale


def test_two_projections_of_one_table_share_its_int8_copy():
    """Two searches gathering from one table (a converter that merges identical weights, as
    tf2onnx's constant deduplication does for an ensemble of copies, may leave two gathers)
    read one int8 copy and project as each other."""
    import onnxruntime as ort
    from onnx import TensorProto

    from export.onnx_quantize import quantize_shortlist_kernel

    rng = np.random.default_rng(6)
    model = _shortlist_projection(rng.normal(size=(40, 16)).astype(np.float32), searches=2)
    assert quantize_shortlist_kernel(model) == 2
    assert sorted((t.name, t.data_type) for t in model.graph.initializer) == [
        ("table_int8", TensorProto.INT8), ("table_piece_scales", TensorProto.FLOAT)]
    x, ids = rng.normal(size=(3, 16)).astype(np.float32), np.array([1, 7, 30], np.int32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    first, second = session.run(["logits", "logits_1"], {"x": x, "ids": ids})
    np.testing.assert_array_equal(first, second)


def test_a_shortlist_projection_of_another_shape_is_refused():
    """Gathered rows that reach the MatMul untransposed are no graph the rewrite knows: an
    error naming the node, the model left as it was."""
    from export.onnx_quantize import quantize_shortlist_kernel

    model = _shortlist_projection(np.ones((40, 16), np.float32), transposed=False)
    before = model.SerializeToString()
    with pytest.raises(ValueError, match="search/shortlist_kernel: .* one Transpose"):
        quantize_shortlist_kernel(model)
    assert model.SerializeToString() == before


def test_model_int8_keeps_the_sinusoid_table_in_float32(onnx_dir):
    """The quantizer leaves the gather of the positions' rows alone (a constant of sines and
    cosines, no weight): a step adds the exact encoding, as model.onnx does."""
    from keras_transformer.layers.positional_encoding import POSITIONS_OP

    model = onnx.load(str(onnx_dir / "model_int8.onnx"))
    constants = {t.name: t for graph in all_graphs(model.graph) for t in graph.initializer}
    gathers = [node for graph in all_graphs(model.graph) for node in graph.node
               if POSITIONS_OP in node.name and node.op_type == "Gather"]
    assert gathers and all(constants[node.input[0]].data_type == onnx.TensorProto.FLOAT
                           for node in gathers)
