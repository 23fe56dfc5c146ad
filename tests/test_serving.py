"""The SavedModel as TF Serving runs it: loaded by the TF1 session loader with tag "serve" (as
the C++ server does), fed PredictRequests built with tensorflow-serving-api.

The export served (conftest.py's shortlist_export) holds a lexical shortlist, its beam search
compiled by XLA for batches up to 4 and run as two graph searches side by side above: its
answers are those of the graph's one beam search with the shortlist (conftest.py's
shortlist_translator, in this process) and of the shortlisted ONNX model.
"""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2

from export.saved_model import switch_session_shortlist
from export.serving.client import parse_response, predict_request, rest_payload
from export.translator.signatures import SIGNATURES
from export.word_alignment import parse_alignment
from export_helpers import SENTENCES, source_ids
from keras_transformer.tokenizer import UNK_ID
from test_scoring import TARGETS
from test_terminology import whole_word


class SessionServer:
    """A PredictRequest -> PredictResponse loop over a TF1 session, like TF Serving's."""

    def __init__(self, path) -> None:
        self.graph = tf.Graph()
        # TF Serving's session options, not this process's (tests/conftest.py turns Grappler
        # off for the process; a session given none would inherit that)
        self.session = tf.compat.v1.Session(graph=self.graph, config=tf.compat.v1.ConfigProto())
        with self.graph.as_default():
            self.meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"],
                                                                   str(path))
        self.signatures = self.meta_graph.signature_def

    def predict(self, request: predict_pb2.PredictRequest) -> predict_pb2.PredictResponse:
        signature = self.signatures[request.model_spec.signature_name or "serving_default"]
        feeds = {signature.inputs[name].name: tf.make_ndarray(tensor)
                 for name, tensor in request.inputs.items()}
        fetches = {name: info.name for name, info in signature.outputs.items()}
        response = predict_pb2.PredictResponse()
        for name, value in self.run(feeds, fetches).items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
        return response

    def run(self, feeds: dict[str, np.ndarray], fetches: dict[str, str]) -> dict[str, np.ndarray]:
        """Session.run through the C API, as the C++ server runs it: without the Python
        client's check of each fed value's shape against its placeholder's."""
        names = list(fetches)
        values = self.session._call_tf_sessionrun(
            None, {self.graph.get_tensor_by_name(name)._as_tf_output(): value
                   for name, value in feeds.items()},
            [self.graph.get_tensor_by_name(fetches[name])._as_tf_output() for name in names],
            [], None)
        return dict(zip(names, values))


@pytest.fixture(scope="module")
def server(shortlist_export) -> SessionServer:
    """The shortlisted SavedModel served, in this file alone (a second session elsewhere would
    pay again for what its first requests cost: 2-15 CPU-s a signature as Grappler optimizes
    its graph, functions inlined, and about 4 more for each batch shape XLA compiles)."""
    return SessionServer(shortlist_export.saved_model)


@pytest.fixture(scope="module")
def onnx_dir(shortlist_export):
    """The served export's ONNX models (the same shortlist)."""
    return shortlist_export.onnx


@pytest.fixture(scope="module")
def reference(shortlist_translator) -> dict[str, np.ndarray]:
    """The test sentences' source ids, and the best target ids and scores of the graph's beam
    search with the export's shortlist (in this process, about 5 CPU-s)."""
    source = source_ids(shortlist_translator.spm_model_proto, SENTENCES)
    output = shortlist_translator.translate_ids(tf.constant(source))
    return {"source_ids": source, "target_ids": output["target_ids"].numpy(),
            "score": output["score"].numpy()}


def translate(server: SessionServer, lines) -> tuple[list[str], list[float]]:
    return parse_response(server.predict(predict_request("tiny", {"text": np.array(lines,
                                                                                   object)})))


def test_the_session_loader_serves_the_tables_signatures(server):
    """The signature_defs TF Serving reads: the table's names, inputs and outputs, dtypes."""
    served = {name for name in server.signatures if not name.startswith("__")}
    assert served == set(SIGNATURES)
    for name, signature in SIGNATURES.items():
        signature_def = server.signatures[name]
        assert {key: info.dtype for key, info in signature_def.inputs.items()} == \
            {spec.name: spec.dtype.as_datatype_enum for spec in signature.inputs}, name
        assert {key: info.dtype for key, info in signature_def.outputs.items()} == \
            {output.name: output.dtype.as_datatype_enum for output in signature.outputs}, name


@pytest.mark.parametrize("rows", [[2], [0, 5, 7], list(range(len(SENTENCES)))])
def test_predict_requests_equal_the_graphs_beam_search(server, shortlist_translator, reference,
                                                      rows):
    """1 and 3 sentences run compiled (XLA), 10 (above batch 4) by two graph beam searches."""
    lines = [SENTENCES[i] for i in rows]
    translations, scores = translate(server, lines)
    assert translations == shortlist_translator.translate_lines(lines) and all(translations)
    np.testing.assert_allclose(scores, reference["score"][rows], rtol=1e-5)
    ids = server.predict(predict_request("tiny", {"source_ids": reference["source_ids"][rows]},
                                         "translate_ids"))
    target = tf.make_ndarray(ids.outputs["target_ids"])
    expected = reference["target_ids"][rows]
    if len(rows) == len(SENTENCES):  # the reference's own batch: its width too
        assert target.shape == expected.shape
    width = max(target.shape[1], expected.shape[1])
    np.testing.assert_array_equal(np.pad(target, [[0, 0], [0, width - target.shape[1]]]),
                                  np.pad(expected, [[0, 0], [0, width - expected.shape[1]]]))


def test_bad_input_is_served_without_error(server, shortlist_translator):
    lines = ["", "  \t  ", "fish " * 2000, b"\xc3\x28 \xff bird", "bird"]
    translations, scores = translate(server, lines)
    assert translations[:2] == ["", ""] and scores[:2] == [0.0, 0.0]
    assert len(lines[2]) == 10_000 and translations[2]  # cut to 40 tokens and translated
    assert translations[4] == translate(server, ["bird"])[0][0]
    batch = (SENTENCES * 7)[:64]
    assert translate(server, batch)[0] == shortlist_translator.translate_lines(batch)


def test_rest_payload_is_columnar():
    assert rest_payload(["a", "b"]) == {"signature_name": "serving_default",
                                        "inputs": {"text": ["a", "b"]}}
    assert rest_payload(["a", "b"], "fr")["inputs"] == {"text": ["a", "b"],
                                                        "target_lang": ["fr", "fr"]}


def ids_request(server: SessionServer, source_ids: np.ndarray) -> dict[str, np.ndarray]:
    response = server.predict(predict_request("tiny", {"source_ids": source_ids},
                                              "translate_ids"))
    return {name: tf.make_ndarray(response.outputs[name]) for name in ("target_ids", "score")}


@pytest.mark.parametrize("lines", [[], ["", " \t "], ["bird\0 fish", "bird fish", "\0"]],
                         ids=["no line", "blank lines only", "NUL"])
def test_odd_text_gets_the_same_answer_from_tf_serving_and_onnx(server, onnx_dir, lines):
    from export.onnx_runtime import OnnxTranslator

    translations, scores = translate(server, lines)
    onnx = OnnxTranslator(onnx_dir).translate(lines)
    assert onnx["translation"] == translations
    np.testing.assert_allclose(onnx["score"], scores, rtol=1e-4, atol=1e-5)
    if lines[:1] == ["bird\0 fish"]:  # NUL reads as a space
        assert translations[0] == translations[1] and (translations[2], scores[2]) == ("", 0)
    else:
        assert translations == [""] * len(lines) and scores == [0.0] * len(lines)


@pytest.mark.parametrize("source_ids, same_as", [
    (np.zeros([2, 0], np.int32), np.zeros([2, 1], np.int32)),
    (np.zeros([0, 5], np.int32), None),
    (np.array([[40, -3, 3], [40, 300, 3], [40, 2**31 - 1, 3]], np.int32),
     np.array([[40, UNK_ID, 3]] * 3, np.int32)),
], ids=["no time step", "no row", "ids outside the vocabulary"])
def test_odd_ids_get_the_same_answer_from_tf_serving_and_onnx(server, onnx_dir, source_ids,
                                                              same_as):
    from export.onnx_runtime import OnnxTranslator

    served = ids_request(server, source_ids)
    onnx = OnnxTranslator(onnx_dir).translate_ids(source_ids)
    np.testing.assert_array_equal(onnx["target_ids"], served["target_ids"])
    np.testing.assert_allclose(onnx["score"], served["score"], rtol=1e-4, atol=1e-5)
    assert len(served["score"]) == len(source_ids)
    if same_as is not None:
        expected = ids_request(server, same_as)
        np.testing.assert_array_equal(served["target_ids"], expected["target_ids"])
        np.testing.assert_array_equal(served["score"], expected["score"])


def refusal(server: SessionServer, name: str, inputs: dict[str, np.ndarray]) -> str:
    """The first line of the InvalidArgumentError that a request to signature `name` fails
    with."""
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        server.predict(predict_request("tiny", inputs, name))
    return str(error.value).splitlines()[0]


def test_inputs_of_the_wrong_rank_are_refused_naming_the_input(server, onnx_dir,
                                                               shortlist_translator):
    """The session runs the graph as TF Serving does, without the Python client's check of a
    fed value's shape against its placeholder's: the graph checks the rank itself."""
    from export.onnx_runtime import OnnxTranslator

    assert refusal(server, "serving_default", {"text": np.array("bird", object)}) == \
        "assertion failed: [text: expected rank 1 (a [batch] vector of strings), got rank 0]"
    assert refusal(server, "serving_default", {"text": np.array([["bird"]], object)}) == \
        "assertion failed: [text: expected rank 1 (a [batch] vector of strings), got rank 2]"
    assert refusal(server, "translate_ids", {"source_ids": np.array([40, 3], np.int32)}) == \
        ("assertion failed: [source_ids: expected rank 2 (a [batch, time] matrix of int32), "
         "got rank 1]")
    for value in (np.array([40, 3], np.int32), np.array([[[40, 3]]], np.int32)):
        with pytest.raises(Exception, match=r"Invalid rank for input: source_ids Got: \d "
                                            r"Expected: 2"):
            OnnxTranslator(onnx_dir).translate_ids(value)
    assert translate(server, SENTENCES)[0] == shortlist_translator.translate_lines(SENTENCES)


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_every_signature_refuses_each_input_of_another_rank_naming_it(server, name):
    """Each input of the signature, the others valid (its warm-up request's), one rank short
    and one rank over the table's."""
    valid = SIGNATURES[name].warmup(np.array(SENTENCES[:2], object),
                                    np.array([[40, 3], [41, 3]], np.int32))
    for expected in SIGNATURES[name].inputs:
        value = valid[expected.name]
        for wrong in (np.asarray(value[0]), value[..., None]):
            assert refusal(server, name, {**valid, expected.name: wrong}) == (
                f"assertion failed: [{expected.name}: {expected.expected()}, got rank "
                f"{wrong.ndim}]"), (name, expected.name)


def test_translate_ids_ignores_the_batchers_padding(server, onnx_dir, reference):
    """TF Serving's batcher (pad_variable_length_inputs) merges requests of different lengths
    by padding each along time with its own first element, not with PAD: 3 requests merged
    (one compiled search) and 10 (two graph searches) translate as each alone."""
    from export.onnx_runtime import OnnxTranslator

    requests = [row[None, :np.count_nonzero(row)] for row in reference["source_ids"]]
    alone = [ids_request(server, request) for request in requests]
    for count in (3, len(requests)):
        width = max(request.shape[1] for request in requests[:count])
        merged = np.concatenate([np.pad(request, [[0, 0], [0, width - request.shape[1]]],
                                        constant_values=request.flat[0])
                                 for request in requests[:count]])
        assert (merged != 0).all()  # no PAD anywhere: the first ids fill the tails
        for answer in (ids_request(server, merged),
                       OnnxTranslator(onnx_dir).translate_ids(merged)):
            for row, single in enumerate(alone[:count]):
                target = answer["target_ids"][row]
                np.testing.assert_array_equal(target[target != 0], single["target_ids"][0][
                    single["target_ids"][0] != 0])
                np.testing.assert_allclose(answer["score"][row], single["score"][0], rtol=1e-4)


def test_the_nbest_signature_lists_the_beam_best_first(server):
    """11 lines (above batch 4: two graph searches, whose parts' n-best lists are one
    search's: tests/test_parallel_search.py)."""
    lines = SENTENCES + [""]
    response = server.predict(predict_request("tiny", {"text": np.array(lines, object)},
                                              "translate_nbest"))
    translations = tf.make_ndarray(response.outputs["translations"])  # [batch, beam]
    scores = tf.make_ndarray(response.outputs["scores"])
    assert translations.shape == scores.shape == (len(lines), 4)
    best, best_scores = translate(server, lines)
    assert [t.decode() for t in translations[:, 0]] == best
    np.testing.assert_allclose(scores[:, 0], best_scores, rtol=1e-5)
    assert (np.diff(scores[:-1], axis=1) <= 0).all()  # best first
    assert len({t for t in translations[0]}) > 1  # the beam's other hypotheses


def prefix_request(server: SessionServer, lines, prefixes) -> tuple[list[str], list[float]]:
    return parse_response(server.predict(predict_request(
        "tiny", {"text": np.array(lines, object), "prefix": np.array(prefixes, object)},
        "translate_prefix")))


def test_the_prefix_signature_forces_each_translation_to_begin_with_its_prefix(server):
    """11 lines (two graph searches), and one."""
    lines = SENTENCES + [""]
    assert prefix_request(server, lines, [""] * len(lines)) == translate(server, lines)
    prefixes = ["river", "", "stone stone", "été"] + [""] * (len(lines) - 4)
    forced, scores = prefix_request(server, lines, prefixes)
    best, best_scores = translate(server, lines)
    assert all(text.startswith(prefix) for text, prefix in zip(forced, prefixes))
    assert forced[0] != best[0] and (forced[1], scores[1]) == (best[1], best_scores[1])
    assert forced[4:] == best[4:]
    np.testing.assert_allclose(scores[4:], best_scores[4:], rtol=1e-5)
    long_prefix = " ".join(["stone"] * 60)  # more pieces than "bird" may have (length + 50)
    (cut,), _ = prefix_request(server, ["bird"], [long_prefix])
    assert cut and long_prefix.startswith(cut) and len(cut) < len(long_prefix)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="text and prefix need the same batch size"):
        prefix_request(server, lines, prefixes[:2])


def test_the_align_signatures_give_each_translations_word_alignment(server, shortlist_export):
    """translate_aligned: `translate`'s outputs and the alignment in one request; `align` gives
    the same alignment for a line and its translation."""
    from export.saved_model import SavedModelTranslator

    lines = SENTENCES + [""]
    expected = SavedModelTranslator(shortlist_export.saved_model).aligned_lines(
        lines)  # tf.saved_model.load's signature
    response = server.predict(predict_request("tiny", {"text": np.array(lines, object)},
                                              "translate_aligned"))
    assert parse_response(response) == translate(server, lines)
    alignments = [a.decode() for a in tf.make_ndarray(response.outputs["alignment"])]
    assert list(zip(parse_response(response)[0], alignments)) == expected
    response = server.predict(predict_request("tiny", {
        "text": np.array(lines, object),
        "target": np.array([text for text, _ in expected], object)}, "align"))
    assert [a.decode() for a in tf.make_ndarray(response.outputs["alignment"])] == alignments
    assert alignments[-1] == "" and all(alignments[:-1])


def test_the_score_signature_scores_as_the_model(server, export_translator):
    """`score` keeps every target piece (the shortlist is the search's): the scores of the
    model in this process (tests/test_scoring.py: ONNX and CTranslate2 against it too)."""
    pairs = list(zip(SENTENCES[:len(TARGETS)], TARGETS))
    texts, targets = (np.array(side, object) for side in zip(*pairs))
    response = server.predict(predict_request("tiny", {"text": texts, "target": targets},
                                              "score"))
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["score"]),
                               [s.score for s in export_translator.score_pairs(pairs)],
                               rtol=1e-5)


def test_the_session_loader_switches_the_shortlist(server, saved_model_dir,
                                                   saved_model_translator):
    """Switched off in the served session: the translations of the same model exported
    without a table; on again: the shortlisted ones. An export without a shortlist has
    nothing to switch: its MetaGraphDef (what the loader returns, read from saved_model.pb
    without loading it: about 2.7 CPU-s) names no switch, and a session of nothing is left
    untouched."""
    from tensorflow.core.protobuf import saved_model_pb2

    shortlisted = translate(server, SENTENCES)[0]
    assert switch_session_shortlist(server.session, server.meta_graph, False)
    try:
        full = translate(server, SENTENCES)[0]
    finally:  # the server is the process's
        assert switch_session_shortlist(server.session, server.meta_graph, True)
    assert full == saved_model_translator.translate(SENTENCES)["translation"] != shortlisted
    assert translate(server, SENTENCES)[0] == shortlisted
    plain, = saved_model_pb2.SavedModel.FromString(
        (saved_model_dir / "saved_model.pb").read_bytes()).meta_graphs  # tags: serve
    assert list(plain.meta_info_def.tags) == ["serve"]
    with tf.compat.v1.Session(graph=tf.Graph()) as empty:
        assert not switch_session_shortlist(empty, plain, False)


def terms_request(server: SessionServer, lines, terms) -> dict[str, np.ndarray]:
    response = server.predict(predict_request("tiny", {
        "text": np.array(lines, object), "terms": np.array(terms, object).reshape(
            len(terms), -1)}, "translate_terms"))
    return {name: tf.make_ndarray(value) for name, value in response.outputs.items()}


def test_the_terms_signature_puts_every_term_in_its_translation(server):
    """translate_terms (tests/test_terminology.py: glossaries, `translate --glossary`)."""
    lines = SENTENCES[:4] + ["bird", ""]
    terms = [["river", "stone stone"], ["", ""], ["river", ""], ["cloud", ""],
             [" ".join(["stone"] * 60), ""], ["", ""]]
    served = terms_request(server, lines, terms)
    translations = [text.decode() for text in served["translation"]]
    plain = server.predict(predict_request("tiny", {"text": np.array(lines, object)}))
    plain_text = [text.decode() for text in tf.make_ndarray(plain.outputs["translation"])]
    for translation, line_terms in zip(translations[:4], terms):
        assert all(whole_word(term, translation) for term in line_terms if term)
    assert translations[0] != plain_text[0] and "river" not in plain_text[0]
    assert translations[1] == plain_text[1]  # no term: as serving_default
    np.testing.assert_allclose(served["score"][1], tf.make_ndarray(plain.outputs["score"])[1],
                               rtol=1e-5)
    assert served["terms_fit"].tolist() == [True] * 4 + [False, True]  # 60 pieces > 1 + 50
    assert served["term_found"][:4].all() and not served["term_found"][4, 0]
    assert translations[4] == plain_text[4] and (translations[5], served["score"][5]) == ("", 0)
    aligned = server.predict(predict_request("tiny", {"text": np.array(lines, object)},
                                             "translate_aligned"))
    alignments = [pairs.decode() for pairs in served["alignment"]]
    assert [alignments[i] for i in (1, 4, 5)] == [  # no term used: translate_aligned's
        tf.make_ndarray(aligned.outputs["alignment"])[i].decode() for i in (1, 4, 5)]
    assert [[t for _, t in parse_alignment(pairs)] for pairs in alignments[:4]] == [
        list(range(len(text.split()))) for text in translations[:4]]  # every target word
    no_terms = terms_request(server, lines[:2], np.zeros([2, 0], object))
    assert [t.decode() for t in no_terms["translation"]] == plain_text[:2]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="text and terms need the same batch size"):
        terms_request(server, lines[:2], [["river"]] * 3)
