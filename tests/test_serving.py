"""The SavedModel as TF Serving runs it: loaded by the TF1 session loader with tag "serve" (as
the C++ server does), fed PredictRequests built with tensorflow-serving-api."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2

from export.serving.client import parse_response, predict_request, rest_payload
from export_helpers import SENTENCES


class SessionServer:
    """A PredictRequest -> PredictResponse loop over a TF1 session, like TF Serving's."""

    def __init__(self, path) -> None:
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        with self.graph.as_default():
            meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], str(path))
        self.signatures = meta_graph.signature_def

    def predict(self, request: predict_pb2.PredictRequest) -> predict_pb2.PredictResponse:
        signature = self.signatures[request.model_spec.signature_name or "serving_default"]
        feeds = {signature.inputs[name].name: tf.make_ndarray(tensor)
                 for name, tensor in request.inputs.items()}
        fetches = {name: info.name for name, info in signature.outputs.items()}
        response = predict_pb2.PredictResponse()
        for name, value in self.session.run(fetches, feeds).items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
        return response


@pytest.fixture(scope="module")
def server(saved_model_dir) -> SessionServer:
    return SessionServer(saved_model_dir)


def translate(server: SessionServer, lines) -> tuple[list[str], list[float]]:
    return parse_response(server.predict(predict_request("tiny", {"text": np.array(lines,
                                                                                   object)})))


def test_predict_requests_return_the_translations(server, export_translator, keras_reference):
    translations, scores = translate(server, SENTENCES)
    expected = export_translator.translate_lines(SENTENCES)
    assert translations == expected and all(translations)
    np.testing.assert_allclose(scores, keras_reference["score"], rtol=1e-5)
    ids = server.predict(predict_request("tiny", {"source_ids": keras_reference["source_ids"]},
                                         "translate_ids"))
    np.testing.assert_array_equal(tf.make_ndarray(ids.outputs["target_ids"]),
                                  keras_reference["target_ids"])


def test_bad_input_is_served_without_error(server, export_translator):
    lines = ["", "  \t  ", "fish " * 2000, b"\xc3\x28 \xff bird", "bird"]
    translations, scores = translate(server, lines)
    assert translations[:2] == ["", ""] and scores[:2] == [0.0, 0.0]
    assert len(lines[2]) == 10_000 and translations[2]  # cut to 40 tokens and translated
    assert translations[4] == translate(server, ["bird"])[0][0]
    batch = (SENTENCES * 7)[:64]
    assert translate(server, batch)[0] == export_translator.translate_lines(batch)


def test_rest_payload_is_columnar():
    assert rest_payload(["a", "b"]) == {"signature_name": "serving_default",
                                        "inputs": {"text": ["a", "b"]}}
