"""The SavedModel whose beam search XLA compiles (export.saved_model_xla_max_batch) and whose
graph search runs in two parts side by side (export.saved_model_parallel_searches): the same
translations as the graph's beam search through tf.saved_model.load and TF Serving's TF1
session loader, its ops, its warm-up requests and its metadata."""
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from export.metadata import saved_model_metadata
from export.saved_model import WARMUP_FILE
from export.serving.client import predict_request
from export_helpers import SENTENCES
from keras_transformer.compiled_search import bucket_sources
from op_audit import compiled_functions, op_audit, serving_registry_problems
from test_serving import SessionServer, prefix_request, translate


@pytest.fixture(scope="module")
def xla_saved_model_dir(xla_export) -> Path:
    return xla_export.saved_model


@pytest.fixture(scope="module")
def server(xla_saved_model_dir) -> SessionServer:
    return SessionServer(xla_saved_model_dir)


@pytest.mark.parametrize("rows", [[2], [0, 5, 7], list(range(len(SENTENCES)))])
def test_predict_requests_equal_the_graphs_beam_search(server, export_translator,
                                                      keras_reference, rows):
    """1 and 3 sentences run compiled, 10 (above batch 4) by two graph beam searches."""
    translations, scores = translate(server, [SENTENCES[i] for i in rows])
    assert translations == export_translator.translate_lines([SENTENCES[i] for i in rows])
    np.testing.assert_allclose(scores, keras_reference["score"][rows], rtol=1e-5)
    source = keras_reference["source_ids"][rows]
    ids = server.predict(predict_request("tiny", {"source_ids": source}, "translate_ids"))
    target = tf.make_ndarray(ids.outputs["target_ids"])
    expected = keras_reference["target_ids"][rows]
    width = max(target.shape[1], expected.shape[1])
    np.testing.assert_array_equal(np.pad(target, [[0, 0], [0, width - target.shape[1]]]),
                                  np.pad(expected, [[0, 0], [0, width - expected.shape[1]]]))


def test_nbest_and_prefix_requests_through_two_searches(server):
    """11 lines (above batch 4) in two graph searches: the n-best lists lead with `translate`'s
    answers, best first, and prefixes force their translations' beginnings (that the parts'
    n-best lists are one search's: tests/test_parallel_search.py)."""
    lines = SENTENCES + [""]
    response = server.predict(predict_request("tiny", {"text": np.array(lines, object)},
                                              "translate_nbest"))
    translations = tf.make_ndarray(response.outputs["translations"])  # [batch, beam]
    scores = tf.make_ndarray(response.outputs["scores"])
    best, best_scores = translate(server, lines)
    assert [text.decode() for text in translations[:, 0]] == best
    np.testing.assert_allclose(scores[:, 0], best_scores, rtol=1e-5)
    assert (np.diff(scores[:-1], axis=1) <= 0).all()
    prefixes = ["river", "", "stone stone", "été"] + [""] * (len(lines) - 4)
    forced, forced_scores = prefix_request(server, lines, prefixes)
    assert all(text.startswith(prefix) for text, prefix in zip(forced, prefixes))
    assert forced[4:] == best[4:] and forced[0] != best[0]
    np.testing.assert_allclose(forced_scores[4:], best_scores[4:], rtol=1e-5)


def test_translate_ids_ignores_the_batchers_padding(server, keras_reference):
    """Requests merged by TF Serving's batcher, each padded with its own first id."""
    requests = [row[None, :np.count_nonzero(row)] for row in keras_reference["source_ids"][:3]]
    width = max(request.shape[1] for request in requests)
    merged = np.concatenate([np.pad(request, [[0, 0], [0, width - request.shape[1]]],
                                    constant_values=request.flat[0]) for request in requests])
    answer = server.predict(predict_request("tiny", {"source_ids": merged}, "translate_ids"))
    target = tf.make_ndarray(answer.outputs["target_ids"])
    for row, expected in enumerate(keras_reference["target_ids"][:3]):
        np.testing.assert_array_equal(target[row][target[row] != 0], expected[expected != 0])


def test_ops_are_core_tf_text_ops_and_one_xla_write(xla_saved_model_dir):
    ops, not_core, allowed = op_audit(xla_saved_model_dir)
    assert set(not_core) <= allowed | {"XlaDynamicUpdateSlice"}, \
        sorted(set(not_core) - allowed - {"XlaDynamicUpdateSlice"})
    assert "XlaDynamicUpdateSlice" in ops
    assert compiled_functions(xla_saved_model_dir)  # the search, marked for XLA
    assert serving_registry_problems(xla_saved_model_dir) == []  # TF Serving's TensorFlow


def test_warmup_compiles_each_source_width_and_metadata_says_xla(xla_export,
                                                                 xla_saved_model_dir,
                                                                 export_translator):
    from tensorflow_serving.apis import prediction_log_pb2

    records = tf.data.TFRecordDataset(str(xla_saved_model_dir / "assets.extra" / WARMUP_FILE))
    requests = [prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request
                for r in records]
    widths = [tf.make_ndarray(r.inputs["source_ids"]).shape for r in requests[-3:]]
    assert widths == [ids.shape for ids in bucket_sources(40)] == [(1, 16), (1, 32), (1, 48)]
    assert saved_model_metadata(xla_saved_model_dir).xla_max_batch == 4
    assert saved_model_metadata(xla_saved_model_dir).parallel_searches == 2
    assert saved_model_metadata(xla_saved_model_dir).settings == export_translator.settings
    assert ("; XLA up to batch 4: serve with --xla_cpu_compilation_enabled=true; 2 searches "
            "side by side: serve with --tensorflow_intra_op_parallelism=1)") in xla_export.format()
