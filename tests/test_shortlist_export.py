"""Exports that carry a lexical shortlist (conftest's shortlist_export: every format, the
SavedModel with XLA up to batch 4 beside its graph search, two graph searches side by side
above): its op audit, warm-up requests and metadata, batch invariance in TensorFlow and ONNX
Runtime, CTranslate2's vocabulary mapping (the union of a batch), forced prefixes and terms
outside the shortlist, and --no-shortlist. TF Serving serves it in tests/test_serving.py."""
import numpy as np
import onnx
import pytest
import sentencepiece as spm
import tensorflow as tf

from export.ct2_runtime import VMAP_NAME, CTranslate2Translator
from export.metadata import saved_model_metadata
from export.onnx_graph import all_graphs
from export.onnx_runtime import OnnxTranslator
from export.saved_model import WARMUP_FILE, SavedModelTranslator
from export_helpers import SENTENCES, source_ids
from keras_transformer.compiled_search import bucket_sources
from keras_transformer.shortlist_table import ShortlistTable
from op_audit import compiled_functions, discarded_nodes, op_audit, serving_registry_problems
from pipelines.paths import RunPaths
from test_batch_invariance import batches

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def version(shortlist_export):
    return shortlist_export.saved_model


@pytest.fixture(scope="module")
def shortlisted(version) -> SavedModelTranslator:
    return SavedModelTranslator(version)


@pytest.fixture(scope="module")
def table(shortlist_export) -> ShortlistTable:
    return ShortlistTable.load(RunPaths(shortlist_export.saved_model.parents[2]).shortlist)


def candidates(table: ShortlistTable, proto: bytes, line: str) -> set[int]:
    """A line's candidates as the export's shortlist (k 3, 20 frequent) takes them."""
    shortlist = table.select(3, 20)
    pieces = spm.SentencePieceProcessor(model_proto=proto).encode(line)
    return {*shortlist.table[pieces].ravel().tolist(), *pieces, *shortlist.always.tolist()}


def test_the_summary_and_metadata_name_the_shortlist(shortlist_export, shortlisted):
    assert "shortlist    3 candidates a source piece and the 20 most frequent pieces" in \
        shortlist_export.format()
    assert shortlisted.metadata.shortlist == (3, 20)


def test_the_shortlisted_saved_model_passes_the_op_audit(version, plain_ops):
    """Core TF ops, TF Serving's TF Text ops and XLA's one write (the compiled search, marked
    for XLA); the shortlist's ops."""
    ops, not_core, allowed = op_audit(version, plain_ops)
    assert set(not_core) <= allowed | {"XlaDynamicUpdateSlice"}, \
        sorted(set(not_core) - allowed - {"XlaDynamicUpdateSlice"})
    assert {"XlaDynamicUpdateSlice", "ScatterNd", "Where"} <= ops
    assert compiled_functions(version)
    assert serving_registry_problems(version) == []  # TF Serving's TensorFlow loads it
    assert discarded_nodes(version) == []


def test_warmup_compiles_each_source_width_and_metadata_says_xla(shortlist_export, version,
                                                                 export_translator):
    from tensorflow_serving.apis import prediction_log_pb2

    records = tf.data.TFRecordDataset(str(version / "assets.extra" / WARMUP_FILE))
    requests = [prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request
                for r in records]
    widths = [tf.make_ndarray(r.inputs["source_ids"]).shape for r in requests[-3:]]
    assert widths == [ids.shape for ids in bucket_sources(40)] == [(1, 16), (1, 32), (1, 48)]
    assert saved_model_metadata(version).xla_max_batch == 4
    assert saved_model_metadata(version).parallel_searches == 2
    assert saved_model_metadata(version).settings == export_translator.settings
    assert ("; XLA up to batch 4: serve with --xla_cpu_compilation_enabled=true; 2 searches "
            "side by side: serve with --tensorflow_intra_op_parallelism=1)") in \
        shortlist_export.format()


def test_a_lines_translation_and_score_do_not_depend_on_its_batch(shortlisted, shortlist_export,
                                                                  export_translator, table):
    """TensorFlow (batches up to 4 through XLA, larger ones through the graph's two searches) and
    ONNX Runtime: a line alone and among companions with other shortlists; its translation
    holds only its own candidates, and the shortlist changed some translation."""
    proto = export_translator.spm_model_proto
    onnx = OnnxTranslator(shortlist_export.onnx)
    processor = spm.SentencePieceProcessor(model_proto=proto)
    changed = False
    for index, line in enumerate(SENTENCES):
        tf_answers, onnx_answers = [], []
        for batch in batches(line, index):
            row = batch.index(line)
            output = shortlisted.translate(batch)
            tf_answers.append((output["translation"][row], float(output["score"][row])))
            ids = onnx.translate_ids(source_ids(proto, batch))
            onnx_answers.append((tuple(int(i) for i in ids["target_ids"][row] if i),
                                 float(ids["score"][row])))
        for answers in (tf_answers, onnx_answers):
            assert [text for text, _ in answers] == [answers[0][0]] * len(answers), line
            np.testing.assert_allclose([score for _, score in answers], answers[0][1],
                                       atol=1e-4)
        assert set(onnx_answers[0][0]) <= candidates(table, proto, line) | {3}, line
        assert processor.decode(list(onnx_answers[0][0])) == tf_answers[0][0]
        changed |= tf_answers[0][0] != export_translator.translate_lines([line])[0]
    assert changed


def test_the_onnx_projection_gathers_rows_and_holds_no_transposed_table(shortlist_export):
    """model.onnx's shortlist gathers its candidates' rows (axis 0) of the [vocab, d_model]
    embedding matrix, and no graph holds that matrix transposed: ONNX Runtime gathers along
    axis 1 one element at a time (docs/decoding-speed.md, "The shortlist's rows, not its
    columns"), and a transposed copy would double the table's bytes."""
    from export.metadata import MODEL_FILE
    from keras_transformer.shortlist import KERNEL_OP

    model = onnx.load(shortlist_export.onnx / MODEL_FILE)
    graphs = list(all_graphs(model.graph))
    initializers = {tensor.name: tensor for graph in graphs for tensor in graph.initializer}
    (gather,) = [node for graph in graphs for node in graph.node
                 if node.op_type == "Gather" and KERNEL_OP in node.name]
    assert [attribute.i for attribute in gather.attribute if attribute.name == "axis"] in ([], [0])
    vocab, d_model = initializers[gather.input[0]].dims
    assert vocab > d_model
    assert not [name for name, tensor in initializers.items()
                if list(tensor.dims) == [d_model, vocab]]


def test_the_int8_onnx_projects_onto_int8_candidates_and_keeps_to_them(shortlist_export,
                                                                      export_translator, table):
    """model_int8.onnx gathers the candidates' rows of an int8 table (no float32 one left to
    quantize) and translates a batch within each line's own candidates, as model.onnx does
    (int8 may choose other words)."""
    from export.metadata import INT8_MODEL_FILE
    from export.onnx_quantize import quantize_shortlist_kernel

    model = onnx.load(shortlist_export.onnx / INT8_MODEL_FILE)
    assert quantize_shortlist_kernel(model) == 0
    assert "DynamicQuantizeMatMul" in {node.op_type for graph in all_graphs(model.graph)
                                       for node in graph.node}
    proto = export_translator.spm_model_proto
    lines = SENTENCES[:6]
    output = OnnxTranslator(shortlist_export.onnx, ids_model=INT8_MODEL_FILE).translate_ids(
        source_ids(proto, lines))
    for line, row in zip(lines, output["target_ids"]):
        assert {int(i) for i in row if i} <= candidates(table, proto, line) | {3}, line


def test_ctranslate2_ships_the_table_and_searches_a_batchs_union(shortlist_export, table,
                                                                 export_translator):
    """CTranslate2 projects a batch onto the union of its lines' candidates (its vocabulary
    mapping): a line alone keeps to its own, in a batch to the batch's."""
    proto = export_translator.spm_model_proto
    directory = shortlist_export.ctranslate2
    processor = spm.SentencePieceProcessor(model_proto=proto)
    vmap = (directory / "float32" / VMAP_NAME).read_text(encoding="utf-8").splitlines()
    shortlist = table.select(3, 20)
    assert vmap[0] == "\t" + " ".join(processor.id_to_piece(int(i)) for i in shortlist.always)
    assert len(vmap) == 1 + table.vocab_size and (directory / "int8" / VMAP_NAME).is_file()
    ct2 = CTranslate2Translator(directory)
    full = CTranslate2Translator(directory, shortlist=False)
    lines = SENTENCES[:6]
    union = set().union(*(candidates(table, proto, line) for line in lines))
    in_batch = ct2.translate_pieces(ct2._source_pieces(lines))
    for line, pieces in zip(lines, in_batch):
        assert {processor.piece_to_id(piece) for piece in pieces} <= union
        (alone,) = ct2.translate_pieces(ct2._source_pieces([line]))
        assert {processor.piece_to_id(piece) for piece in alone} <= candidates(table, proto,
                                                                                line)
    assert full.translate_lines(SENTENCES) != ct2.translate_lines(SENTENCES, batch_size=1)


def test_a_forced_prefix_or_term_outside_the_shortlist_is_produced(shortlisted, table,
                                                                   export_translator):
    proto = export_translator.spm_model_proto
    processor = spm.SentencePieceProcessor(model_proto=proto)
    line = SENTENCES[0]
    outside = next(word for word in ("door", "road", "lake", "hill", "snow", "leaf")
                   if not set(processor.encode(word)) & candidates(table, proto, line))
    prefixed = shortlisted.loaded.signatures["translate_prefix"](
        text=tf.constant([line]), prefix=tf.constant([outside]))
    assert prefixed["translation"].numpy()[0].decode().startswith(outside)
    termed = shortlisted.loaded.signatures["translate_terms"](
        text=tf.constant([line, SENTENCES[1]]), terms=tf.constant([[outside], [""]]))
    assert termed["term_found"].numpy().all()
    assert outside in termed["translation"].numpy()[0].decode().split()


def test_no_shortlist_searches_every_piece(version, shortlist_export, saved_model_translator):
    """--no-shortlist: the SavedModel's switch off (as the export without a table translates;
    XLA's fixed candidates give way to the graph's search), CTranslate2 without its mapping,
    ONNX refused."""
    from export import ExportError

    expected = saved_model_translator.translate(SENTENCES)
    loaded_once = SavedModelTranslator(version, shortlist=False)  # conftest: the same object
    try:
        for batch in (SENTENCES[:2], SENTENCES):
            output = loaded_once.translate(batch)
            assert output["translation"] == expected["translation"][:len(batch)]
        rebuilt = loaded_once.rebuild(beam_size=2)
        assert rebuilt.shortlist is None
    finally:
        loaded_once.loaded.shortlist_enabled.assign(True)
    with pytest.raises(ExportError, match="holds|hold"):
        OnnxTranslator(shortlist_export.onnx, shortlist=False)


def test_translate_no_shortlist_through_the_cli(shortlist_export, tmp_path, capsys):
    from pipelines.cli import main

    lines = SENTENCES[:4]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    directory = str(shortlist_export.ctranslate2 / "float32")
    for flags, expected in (([], CTranslate2Translator(shortlist_export.ctranslate2)),
                            (["--no-shortlist"], CTranslate2Translator(
                                shortlist_export.ctranslate2, shortlist=False))):
        assert main(["translate", directory, str(tmp_path / "in.txt"), *flags]) == 0
        assert capsys.readouterr().out.splitlines() == expected.translate_lines(lines)
    assert main(["translate", str(shortlist_export.onnx), str(tmp_path / "in.txt"),
                 "--runtime", "onnx", "--no-shortlist"]) != 0
    assert "export again with export.shortlist: false" in capsys.readouterr().err


def test_an_in_process_ensemble_keeps_the_first_exports_shortlist(version, shortlisted,
                                                                  saved_model_translator):
    """`translate V --ensemble V` (export.loading.open_ensemble): two copies of the model search
    its shortlist as the model does; `--no-shortlist`: every piece, as the model without a
    table."""
    from export.loading import open_ensemble

    expected = shortlisted.translate(SENTENCES)["translation"]
    full = saved_model_translator.translate(SENTENCES)["translation"]
    assert expected != full  # k 3: the shortlist changes translations
    def translations(translator) -> list[str]:
        output = translator.translate(tf.constant(SENTENCES))["translation"]
        return [text.decode() for text in output.numpy()]

    assert translations(open_ensemble([version, version])) == expected
    unlisted = open_ensemble([version, version], shortlist=False)
    try:
        assert unlisted.shortlist is None
        assert translations(unlisted) == full
    finally:
        shortlisted.loaded.shortlist_enabled.assign(True)  # the loads share one graph's variables
