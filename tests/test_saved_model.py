"""export/saved_model.py and export/versions.py: the reloaded SavedModel against eager beam
search, its op set, warm-up requests, and versions that appear whole."""
import json
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import export
from export.metadata import ExportMetadata, saved_model_metadata
from export.saved_model import WARMUP_FILE, export_saved_model
from export.translator import Translator
from export.translator.signatures import (SIGNATURES, TARGET_LANG, checked_inputs,
                                          checked_languages, input_specs, signatures,
                                          unchecked_inputs)
from export.versions import latest_version, publish_version, staging_directory, versions
from export_helpers import SENTENCES, make_model
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.languages import unknown_language_message
from op_audit import compiled_functions, discarded_nodes, op_audit, serving_registry_problems
from tiny_run import ONE_LAYER_A_SIDE

@pytest.fixture(scope="module")
def loaded(saved_model_dir):
    """The exported SavedModel as `tf.saved_model.load` gives it (its signatures only called)."""
    return tf.saved_model.load(str(saved_model_dir))


def test_reloaded_signatures_equal_keras_level_beam_search(loaded, export_translator,
                                                           keras_reference):
    assert set(loaded.signatures) == set(SIGNATURES)
    ids = loaded.signatures["translate_ids"](
        source_ids=tf.constant(keras_reference["source_ids"]))
    np.testing.assert_array_equal(ids["target_ids"].numpy(), keras_reference["target_ids"])
    np.testing.assert_allclose(ids["score"].numpy(), keras_reference["score"], rtol=1e-5)
    text = loaded.signatures["serving_default"](text=tf.constant(SENTENCES))
    expected = export_translator.translate(tf.constant(SENTENCES))
    assert list(text["translation"].numpy()) == list(expected["translation"].numpy())
    np.testing.assert_allclose(text["score"].numpy(), keras_reference["score"], rtol=1e-5)


def test_reloaded_signatures_refuse_an_input_of_another_rank_naming_it(loaded):
    """tf.saved_model.load's signatures run the graph's own check, as TF Serving's session
    does (tests/test_serving.py)."""
    for name, inputs, message in [
            ("serving_default", {"text": tf.constant("bird")},
             "text: expected rank 1 (a [batch] vector of strings), got rank 0"),
            ("translate_prefix", {"text": tf.constant(["bird"]), "prefix": tf.constant([[""]])},
             "prefix: expected rank 1 (a [batch] vector of strings), got rank 2"),
            ("translate_ids", {"source_ids": tf.constant([40, 3])},
             "source_ids: expected rank 2 (a [batch, time] matrix of int32), got rank 1")]:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=re.escape(f"assertion failed: [{message}]")):
            loaded.signatures[name](**inputs)


def test_ranks_are_checked_in_the_graph_except_for_onnx() -> None:
    """The check's ops are traced into a signature's graph, and left out within
    unchecked_inputs() (the ONNX export's trace: ONNX Runtime checks ranks itself)."""
    def op_types() -> set[str]:
        function = tf.function(lambda ids: checked_inputs("translate_ids", ids)[0] + 1,
                               input_signature=input_specs("translate_ids"), autograph=False)
        return {op.type for op in function.get_concrete_function().graph.get_operations()}

    with unchecked_inputs():
        unchecked = op_types()
    assert {"Assert", "ParseTensor"} <= op_types() - unchecked


def test_a_multilingual_table_adds_target_lang_checked_in_the_graph_except_for_onnx():
    """signatures(()) is SIGNATURES (bilingual exports unchanged); a multilingual table adds
    target_lang last to each signature that reads text, warmed up in the first language;
    checked_languages names the first unknown code (TF's Assert escapes its quotes), and is
    left out within unchecked_inputs()."""
    assert signatures(()) is SIGNATURES
    table = signatures(("fr", "de"))
    for name, signature in table.items():
        reads_text = SIGNATURES[name].inputs[0].name == "text"
        assert signature.inputs == SIGNATURES[name].inputs + (TARGET_LANG,) * reads_text, name
    lines = np.array(["a", "b"], object)
    assert list(table["score"].warmup(lines, None)["target_lang"]) == ["fr", "fr"]
    check = tf.function(lambda codes: checked_languages(codes, ("fr", "de")),
                        input_signature=[TARGET_LANG.spec], autograph=False)
    assert list(check(tf.constant(["de", "fr"])).numpy()) == [b"de", b"fr"]
    message = unknown_language_message("es", ("fr", "de")).replace("'", "\\'")
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape(f"assertion failed: [{message}]")):
        check(tf.constant(["fr", "es", "it"]))
    with unchecked_inputs():
        unchecked = tf.function(lambda codes: checked_languages(codes, ("fr",)),
                                input_signature=[TARGET_LANG.spec], autograph=False)
        ops = {op.type for op in unchecked.get_concrete_function().graph.get_operations()}
    assert "Assert" not in ops


def test_signatures_take_and_give_what_the_table_says(loaded):
    for name, signature in SIGNATURES.items():
        function = loaded.signatures[name]
        inputs = {key: (spec.dtype, spec.shape.as_list())
                  for key, spec in function.structured_input_signature[1].items()}
        assert inputs == {spec.name: (spec.dtype, spec.shape.as_list())
                          for spec in input_specs(name)}, name
        outputs = {key: (spec.dtype, spec.shape.rank)
                   for key, spec in function.structured_outputs.items()}
        assert outputs == {output.name: (output.dtype, output.rank)
                           for output in signature.outputs}, name
        assert not set(inputs) & set(outputs), name  # input and output names never coincide


def test_ops_are_core_tf_or_tf_serving_text_ops(saved_model_dir, plain_ops):
    ops, not_core, allowed = op_audit(saved_model_dir, plain_ops)
    assert len(allowed) == 35
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp",
            "StatelessWhile"} <= ops  # the searches' loops read no variable
    assert set(not_core) <= allowed, sorted(set(not_core) - allowed)
    assert "XlaDynamicUpdateSlice" not in ops and not compiled_functions(saved_model_dir)
    assert serving_registry_problems(saved_model_dir) == []  # TF Serving's TensorFlow loads it
    assert discarded_nodes(saved_model_dir) == []  # nothing computed for nothing


def test_warmup_requests_cover_every_signature(saved_model_dir, loaded):
    from tensorflow_serving.apis import prediction_log_pb2

    records = tf.data.TFRecordDataset(str(saved_model_dir / "assets.extra" / WARMUP_FILE))
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in records]
    requests = [log.predict_log.request for log in logs]
    assert [r.model_spec.signature_name for r in requests] == \
        [name for name in SIGNATURES for _ in range(2)]  # one line, then all
    assert all(r.model_spec.name == "tiny" for r in requests)
    for request in requests:  # each runs against its signature
        inputs = {name: tf.make_ndarray(tensor) for name, tensor in request.inputs.items()}
        loaded.signatures[request.model_spec.signature_name](**inputs)


def test_metadata_and_a_rebuild_with_another_beam(saved_model_dir, saved_model_translator,
                                                   export_translator, greedy_translator,
                                                   tmp_path):
    metadata = saved_model_metadata(saved_model_dir)
    assert metadata.settings == DecodingSettings(beam_size=4, max_source_length=40, stop="full")
    assert metadata.model == export_translator.model.model_config
    older = json.loads((saved_model_dir / "assets.extra" / "translator.json").read_text())
    del older["stop"]  # an export made before the stop rule was recorded
    (tmp_path / "translator.json").write_text(json.dumps(older))
    assert ExportMetadata.read(tmp_path / "translator.json").settings.stop == "bound"
    greedy = saved_model_translator.rebuild(beam_size=1)
    assert greedy.settings == DecodingSettings(beam_size=1, max_source_length=40)
    source = tf.constant(SENTENCES)
    assert list(greedy.translate(source)["translation"].numpy()) == \
        list(greedy_translator.translate(source)["translation"].numpy())


def test_a_rebuild_in_another_dtype_policy_keeps_the_weights(saved_model_translator):
    rebuilt = saved_model_translator.rebuild("mixed_bfloat16")
    assert rebuilt.model.dtype_policy.name == "mixed_bfloat16"
    assert saved_model_translator.rebuild().model.dtype_policy.name == "float32"
    for variable, saved in zip(rebuilt.model.variables,
                               saved_model_translator.loaded.model_variables, strict=True):
        assert variable.dtype == tf.float32
        np.testing.assert_array_equal(variable.numpy(), saved.numpy())


def test_each_export_is_a_new_version_that_appears_whole(export_translator, tmp_path):
    """A reader polling the newest version while two exports run sees only complete ones.
    The model exported: untrained, one layer each side (an export costs about 60% of the
    tiny preset's)."""
    proto = export_translator.spm_model_proto
    translator = Translator(make_model(proto, **ONE_LAYER_A_SIDE), proto)
    base = tmp_path / "saved_model"
    seen, incomplete, done = set(), [], threading.Event()

    def poll() -> None:
        while not done.wait(0.005):  # a poll every 5 ms, not a spinning core
            newest = latest_version(base)
            if newest is None:
                continue
            seen.add(newest.name)
            if not all((newest / name).exists() for name in (
                    "saved_model.pb", "variables/variables.index",
                    f"assets.extra/{WARMUP_FILE}", "assets.extra/translator.json")):
                incomplete.append(newest.name)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        first = export_saved_model(translator, base)
        second = export_saved_model(translator, base)
    finally:
        done.set()
        reader.join()
    assert (first.name, second.name) == ("1", "2") and versions(base) == [1, 2]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(first.stat().st_mode) == 0o777 & ~umask  # not tempfile's 0700
    assert not incomplete and seen <= {"1", "2"}
    assert [p.name for p in base.iterdir() if not p.name.isdigit()] == []  # no temporaries


def test_racing_publishers_take_distinct_versions(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    ready = []
    for index in range(8):
        directory = base / f".tmp-{index}"
        directory.mkdir()
        (directory / "payload").write_text(str(index))
        ready.append(directory)
    threads = [threading.Thread(target=publish_version, args=(d, base)) for d in ready]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert versions(base) == list(range(1, 9))
    assert sorted((base / str(v) / "payload").read_text() for v in range(1, 9)) == \
        [str(i) for i in range(8)]


def test_no_version_is_none(tmp_path):
    (tmp_path / ".export-abc").mkdir()
    assert latest_version(tmp_path) is None and latest_version(tmp_path / "missing") is None
    with pytest.raises(export.ExportError, match=r"1/assets.extra/translator.json: no such "
                       r"file; run `keras-transformer export` again"):
        saved_model_metadata(tmp_path / "1")


@pytest.mark.slow
def test_staging_directories_follow_the_umask_and_dead_processes_ones_go(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    left = tmp_path / f".export-{dead}-abc"  # a killed export's
    left.mkdir()
    (left / "saved_model.pb").write_bytes(b"partial")
    live = tmp_path / f".export-{os.getpid()}-def"  # a concurrent export's
    live.mkdir()
    umask = os.umask(0o027)
    try:
        staged = staging_directory(tmp_path, ".export")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(staged.stat().st_mode) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, staged.name])
