"""A multilingual export (issue 46): its SavedModel signatures, translator.onnx and CTranslate2
model translate each line into the target language asked (`target_lang`, one per line), as
`translate_ids` translates the ids of `<2fr> LINE`; a language the model was not trained for
is refused naming it; `translate --target-lang` and `score --target-lang` on each runtime.

One export of each format (conftest.py's `multilingual_export`: an untrained tiny model whose
vocabulary holds <2fr> and <2de>, greedy) is shared by the tests; the CLI's refusals need no
export (an export directory holding only its translator.json).
"""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from export.ct2_runtime import CTranslate2Translator
from export.metadata import ExportMetadata
from export.onnx_runtime import OnnxTranslator
from export.saved_model import WARMUP_FILE, SavedModelTranslator
from export.serving.client import parse_response, predict_request
from export.translator.signatures import SIGNATURES, signatures
from keras_transformer import ModelConfig
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.languages import (missing_language_message, unknown_language_message,
                                         with_language)
from keras_transformer.tokenizer import EOS_ID, Tokenizer
from op_audit import discarded_nodes, op_audit, serving_registry_problems
from pipelines.cli import main
from test_serving import SessionServer

LANGUAGES = ("fr", "de")  # conftest.py's LANGUAGE_TOKENS
LINES = ["sun moon star", "the river and the stone", "bird", "", "fish fish fish fish"]
# Every line in both languages, in one batch whose neighbouring lines ask for different ones.
TEXT = LINES + LINES
TARGET_LANG = [LANGUAGES[i % 2] for i in range(len(LINES))] + \
    [LANGUAGES[(i + 1) % 2] for i in range(len(LINES))]
UNKNOWN = unknown_language_message("es", LANGUAGES)


@pytest.fixture(scope="module")
def version(multilingual_export) -> Path:
    return multilingual_export.saved_model


@pytest.fixture(scope="module")
def loaded(version):
    return tf.saved_model.load(str(version))


@pytest.fixture(scope="module")
def server(version) -> SessionServer:
    """The export as TF Serving's session loader loads it."""
    return SessionServer(version)


@pytest.fixture(scope="module")
def model_proto(version) -> bytes:
    return (version / "assets.extra" / "spm.model").read_bytes()


def texts(output: dict) -> list[str]:
    return [text.decode() for text in np.asarray(output["translation"]).tolist()]


def reference(loaded, model_proto: bytes) -> dict:
    """`translate_ids` of each line of TEXT after its language's token, SentencePiece's pieces
    in Python (a blank line: its EOS alone), detokenized by the graphs' tokenizer."""
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    rows = [processor.encode(with_language(line, language)) if line else []
            for line, language in zip(TEXT, TARGET_LANG)]
    ids = np.zeros([len(rows), max(map(len, rows)) + 1], np.int32)
    for index, row in enumerate(rows):
        ids[index, :len(row) + 1] = row + [EOS_ID]
    output = loaded.signatures["translate_ids"](source_ids=tf.constant(ids))
    return {"source_ids": ids, "score": output["score"].numpy(),
            "translation": texts({"translation": Tokenizer(model_proto).detokenize(
                output["target_ids"])})}


def test_a_multilingual_export_takes_target_lang_in_every_text_signature(version, loaded,
                                                                        server, plain_ops):
    """tf.saved_model.load's and TF Serving's session loader's signatures: the table of
    `signatures(("fr", "de"))`; `translate_ids` as a bilingual model's; core and TF Serving
    ops only, all in TF Serving's TensorFlow; the export's metadata lists the languages."""
    table = signatures(LANGUAGES)
    assert ExportMetadata.read(version / "assets.extra" / "translator.json"
                               ).target_languages == LANGUAGES
    served = server.signatures
    for name, signature in table.items():
        inputs = {spec.name for spec in signature.inputs}
        assert set(loaded.signatures[name].structured_input_signature[1]) == inputs, name
        assert set(served[name].inputs) == inputs, name
        assert ("target_lang" in inputs) == (name != "translate_ids"), name
    assert table["translate_ids"] == SIGNATURES["translate_ids"]
    ops, not_core, allowed = op_audit(version, plain_ops)
    assert set(not_core) <= allowed, sorted(set(not_core) - allowed)
    assert serving_registry_problems(version) == []  # TF Serving's TensorFlow loads it
    assert discarded_nodes(version) == []


def test_each_line_is_translated_into_its_target_language(loaded, server, model_proto):
    """serving_default with target_lang per line = translate_ids of `<2L> LINE`: the token
    reaches the model as one id; through tf.saved_model.load and TF Serving's session."""
    expected = reference(loaded, model_proto)
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    for row, line, language in zip(expected["source_ids"], TEXT, TARGET_LANG):
        tokens = [processor.id_to_piece(int(i)) for i in row if i > EOS_ID and
                  processor.id_to_piece(int(i)).startswith("<2")]
        assert tokens == ([f"<2{language}>"] if line else []), line  # one id, or none
    output = loaded.signatures["serving_default"](text=tf.constant(TEXT),
                                                  target_lang=tf.constant(TARGET_LANG))
    assert texts(output) == expected["translation"]
    np.testing.assert_allclose(output["score"].numpy(), expected["score"], rtol=1e-6)
    half = len(LINES)
    assert expected["translation"][:half] != expected["translation"][half:]  # fr != de
    assert [expected["translation"][i] for i in (3, 3 + half)] == ["", ""]  # the blank line
    served = server.predict(predict_request("tiny", {
        "text": np.array(TEXT, object), "target_lang": np.array(TARGET_LANG, object)}))
    assert parse_response(served)[0] == expected["translation"]


def test_a_corpus_tag_reaches_the_model_as_one_id_in_every_runtime(multilingual_export, loaded,
                                                                     model_proto):
    """A served line `<bt> ...` (a tagged corpus's style asked for): its tag is one id after
    the language token, in the SavedModel's graph, translator.onnx and CTranslate2 alike."""
    line = "<bt> the river and the stone"
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    ids = processor.encode(with_language(line, "de"))
    assert ids.count(processor.piece_to_id("<bt>")) == 1
    assert processor.id_to_piece(ids[ids.index(processor.piece_to_id("<bt>")) - 1]) == "▁"
    expected = loaded.signatures["translate_ids"](source_ids=tf.constant([ids + [EOS_ID]]))
    served = loaded.signatures["serving_default"](text=tf.constant([line]),
                                                  target_lang=tf.constant(["de"]))
    np.testing.assert_allclose(served["score"].numpy(), expected["score"].numpy(), rtol=1e-6)
    translation = texts(served)
    assert translation == texts({"translation": Tokenizer(model_proto).detokenize(
        expected["target_ids"])})
    assert OnnxTranslator(multilingual_export.onnx, threads=1).translate_lines(
        [line], target_lang="de") == translation
    assert CTranslate2Translator(multilingual_export.ctranslate2).translate_lines(
        [line], target_lang="de") == translation


def test_every_text_signature_translates_into_the_language_asked(loaded, model_proto):
    """Each signature that reads text gives what serving_default gives in the same language:
    the n-best list's first, an empty prefix, greedy sampling (top_k 1), no terms; `score`
    scores a pair in each language apart; alignments name the line's words only (not the
    token's). The given targets are the lines themselves: the untrained model's
    translations tokenize again into more pieces than it scores."""
    call = {name: loaded.signatures[name] for name in signatures(LANGUAGES)}
    inputs = {"text": tf.constant(TEXT), "target_lang": tf.constant(TARGET_LANG)}
    best = call["serving_default"](**inputs)
    size = len(TEXT)
    outputs = {
        "translate_nbest": call["translate_nbest"](**inputs),
        "translate_prefix": call["translate_prefix"](**inputs, prefix=tf.fill([size], "")),
        "translate_sample": call["translate_sample"](
            **inputs, top_k=tf.ones([size], tf.int32), top_p=tf.ones([size]),
            temperature=tf.ones([size]), seed=tf.range(size, dtype=tf.int64)),
        "translate_aligned": call["translate_aligned"](**inputs),
        "translate_terms": call["translate_terms"](**inputs, terms=tf.fill([size, 1], ""))}
    outputs["translate_nbest"]["translation"] = outputs["translate_nbest"]["translations"][:, 0]
    for name, output in outputs.items():
        assert texts(output) == texts(best), name
    scored = call["score"](**inputs, target=inputs["text"])["score"].numpy()
    half = len(LINES)
    assert all(scored[i] != scored[i + half] for i, line in enumerate(LINES) if line)
    aligned = call["align"](**inputs, target=inputs["text"])["alignment"].numpy()
    for line, pairs in zip(TEXT, aligned):
        sources = [int(pair.split("-")[0]) for pair in pairs.decode().split()]
        assert all(source < len(line.split()) for source in sources)
        assert bool(sources) == bool(line)


def test_the_warmup_requests_ask_for_a_language_the_model_knows(version, loaded):
    from tensorflow_serving.apis import prediction_log_pb2

    records = tf.data.TFRecordDataset(str(version / "assets.extra" / WARMUP_FILE))
    requests = [prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
                for record in records]
    assert [request.model_spec.signature_name for request in requests] == \
        [name for name in SIGNATURES for _ in range(2)]
    for request in requests:
        inputs = {name: tf.make_ndarray(tensor) for name, tensor in request.inputs.items()}
        assert set(inputs.get("target_lang", [b"fr"])) == {b"fr"}
        loaded.signatures[request.model_spec.signature_name](**inputs)


def test_an_unknown_target_language_is_refused_naming_it(version, loaded):
    """The graph's check (TF's Assert escapes the message's quotes), the batch and rank
    checks of target_lang, and the Python runtime's ValueError before any graph."""
    escaped = UNKNOWN.replace("'", "\\'")
    for name, extra in [("serving_default", {}), ("score", {"target": tf.constant(["", ""])})]:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=re.escape(f"assertion failed: [{escaped}]")):
            loaded.signatures[name](text=tf.constant(["bird", "fish"]),
                                    target_lang=tf.constant(["fr", "es"]), **extra)
    for target_lang, message in [
            (["fr"], "text and target_lang need the same batch size"),
            ([["fr", "de"]], "target_lang: expected rank 1 (a [batch] vector of strings), "
                             "got rank 2")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
            loaded.signatures["serving_default"](text=tf.constant(["bird", "fish"]),
                                                 target_lang=tf.constant(target_lang))
    translator = SavedModelTranslator(version)
    for target_lang, message in [("es", UNKNOWN), (None, missing_language_message(LANGUAGES))]:
        with pytest.raises(ValueError, match=re.escape(message)):
            translator.translate_lines(["bird"], target_lang=target_lang)


def test_onnx_translates_each_line_into_its_target_language(multilingual_export, loaded,
                                                            model_proto):
    """translator.onnx (in a child process without TensorFlow) gives serving_default's
    answers, model.onnx translate_ids'; an unknown code: OnnxTranslator's ValueError, and the
    bare translator.onnx fails the run (ONNX has no assertion to name it)."""
    onnx_dir = multilingual_export.onnx
    translator = OnnxTranslator(onnx_dir, threads=1)
    expected = reference(loaded, model_proto)
    output = translator.translate(TEXT, TARGET_LANG)
    assert output["translation"] == expected["translation"]
    np.testing.assert_allclose(output["score"], expected["score"], atol=5e-6)
    ids = translator.translate_ids(expected["source_ids"])
    np.testing.assert_allclose(ids["score"], expected["score"], atol=5e-6)
    saved = SavedModelTranslator(multilingual_export.saved_model)
    assert translator.translate_lines(LINES, batch_size=2, target_lang="fr") == \
        saved.translate_lines(LINES, target_lang="fr")
    pairs = list(zip(TEXT, TEXT))  # (the untrained model's translations are too long to score)
    np.testing.assert_allclose(
        [score.score for score in translator.score_pairs(pairs, target_lang="de")],
        [score.score for score in saved.score_pairs(pairs, target_lang="de")], atol=1e-5)
    with pytest.raises(ValueError, match=re.escape(UNKNOWN)):
        translator.translate(["bird"], "es")
    bare = subprocess.run([sys.executable, "-c", BARE_ONNX, str(onnx_dir / "translator.onnx")],
                          capture_output=True, text=True, timeout=300)
    assert "indices element out of data bounds" in bare.stdout, bare.stderr[-2000:]


BARE_ONNX = """
import sys
import numpy as np, onnxruntime as ort
from onnxruntime_extensions import get_library_path
options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
try:
    session.run(None, {"text": np.array(["bird"], object), "target_lang": np.array(["es"], object)})
except Exception as error:
    print(error)
"""


def test_ctranslate2_translates_each_line_into_its_target_language(multilingual_export):
    """The language token first among the source pieces: CTranslate2's greedy translations
    are the SavedModel's, per line in a mixed batch and per call; alignments name the line's
    words only; an unknown code is refused."""
    ct2 = CTranslate2Translator(multilingual_export.ctranslate2)
    saved = SavedModelTranslator(multilingual_export.saved_model)
    for language in LANGUAGES:
        assert ct2.translate_lines(LINES, batch_size=1, target_lang=language) == \
            saved.translate_lines(LINES, target_lang=language)
    by_line = [ct2.translate([line], [language])[0] for line, language in zip(TEXT, TARGET_LANG)]
    assert by_line == [saved.translate([line], language)["translation"][0]
                       for line, language in zip(TEXT, TARGET_LANG)]
    for line, (_, pairs) in zip(LINES, ct2.aligned_lines(LINES, target_lang="de")):
        sources = [int(pair.split("-")[0]) for pair in pairs.split()]
        assert all(source < len(line.split()) for source in sources)
        assert bool(sources) == bool(line)
    with pytest.raises(ValueError, match=re.escape(UNKNOWN)):
        ct2.translate_lines(["bird"], target_lang="es")


@pytest.mark.parametrize("runtime", ["tf", "onnx", "ct2"])
def test_translate_and_score_take_target_lang(multilingual_export, runtime, tmp_path,
                                              capsysbinary):
    """`translate --target-lang de` writes the runtime's translations into German (tf: also
    with another beam, the weights rebuilt in-process); `score --target-lang de` scores
    pairs as the SavedModel's `score` signature does (the lines as their own translations:
    the untrained model's are too long to score)."""
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(LINES) + "\n")
    export_dir = multilingual_export.saved_model.parent.parent
    saved = SavedModelTranslator(multilingual_export.saved_model)
    expected = saved.translate_lines(LINES, target_lang="de")
    assert main(["translate", str(export_dir), str(source), "--runtime", runtime,
                 "--target-lang", "de", "--batch-size", "1"]) == 0  # CT2: a limit per batch
    assert capsysbinary.readouterr().out.decode().splitlines() == expected
    assert main(["score", str(export_dir), str(source), str(source), "--runtime", runtime,
                 "--target-lang", "de"]) == 0
    scores = [float(line.split("\t")[0])
              for line in capsysbinary.readouterr().out.decode().splitlines()]
    np.testing.assert_allclose(scores, [score.score for score in saved.score_pairs(
        list(zip(LINES, LINES)), target_lang="de")], atol=1e-3)
    if runtime == "tf":
        assert main(["translate", str(export_dir), str(source), "--beam", "2",
                     "--target-lang", "fr"]) == 0
        beam2 = capsysbinary.readouterr().out.decode().splitlines()
        assert len(beam2) == len(LINES) and beam2[3] == "" and beam2 != expected


@pytest.mark.parametrize("languages, target_lang, problem", [
    (LANGUAGES, "es", UNKNOWN),
    (LANGUAGES, None, missing_language_message(LANGUAGES)),
    ((), "fr", unknown_language_message("fr", ()))])
@pytest.mark.parametrize("command", ["translate", "score"])
def test_a_target_language_the_model_cannot_take_is_one_line_and_nothing_written(
        tmp_path, capsys, languages, target_lang, problem, command):
    """Refused before any work: only the export's translator.json is read."""
    export_dir = tmp_path / "onnx"
    export_dir.mkdir()
    (export_dir / "translator.onnx").touch()  # never opened
    ExportMetadata(DecodingSettings(), ModelConfig.from_preset("tiny", vocab_size=300),
                   target_languages=languages).write(export_dir / "translator.json")
    source, output = tmp_path / "lines.txt", tmp_path / "out.txt"
    source.write_text("bird\toiseau\n")
    args = [command, str(export_dir), str(source), "--output", str(output)]
    assert main(args + (["--target-lang", target_lang] if target_lang else [])) == 2
    assert capsys.readouterr().err == \
        f"keras-transformer {command}: error: --target-lang: {problem}\n"
    assert not output.exists()


def test_evaluate_translates_each_test_line_into_its_tokens_language(multilingual_export,
                                                                     tmp_path):
    """`evaluate` on a multilingual run's test split as prepare writes it (`<2fr> LINE`): each
    line translated into its token's language (the in-process Translator's target_lang), as
    the export translates it, and scored per language."""
    from pipelines.config import load_config
    from pipelines.evaluate import evaluate
    from tiny_run import copy_run

    config, paths = copy_run(multilingual_export.saved_model.parents[3], tmp_path)
    sources, references = paths.split("test")
    sources.write_text("".join(with_language(line, language) + "\n"
                               for line, language in zip(TEXT, TARGET_LANG) if line))
    references.write_text("".join(line + "\n" for line in TEXT if line))
    report = evaluate(load_config(config), split="test")
    saved = SavedModelTranslator(multilingual_export.saved_model)
    assert Path(report.hypotheses).read_text().splitlines() == \
        [saved.translate([line], language)["translation"][0]
         for line, language in zip(TEXT, TARGET_LANG) if line]
    assert sorted(report.languages) == sorted(LANGUAGES)
