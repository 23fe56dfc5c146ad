"""Example clients of a TF Serving model server running the exported SavedModel.

    # gRPC (port 8500) and REST (port 8501), lines from stdin:
    python -m export.serving.client --grpc localhost:8500 --model demo < test.src
    python -m export.serving.client --rest http://localhost:8501 --model demo < test.src

Both call the `serving_default` signature: `text` string [batch] -> `translation` string
[batch], `score` float32 [batch]; a multilingual model's takes `target_lang` string [batch] too
(`--target-lang fr` sends it for every line). `predict_request` builds the gRPC request (the
export's warm-up requests are built with it too); `rest_payload` the REST body.
"""
from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from typing import Any, Sequence

import numpy as np

SIGNATURE = "serving_default"


def predict_request(model_name: str, inputs: dict[str, Any], signature: str = SIGNATURE):
    """A tensorflow_serving PredictRequest: `inputs` maps input names to arrays, e.g.
    {"text": np.array(lines, object)}."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def parse_response(response) -> tuple[list[str], list[float]]:
    """(translations, scores) of a PredictResponse of `serving_default`."""
    import tensorflow as tf

    translations = [t.decode("utf-8") for t in tf.make_ndarray(response.outputs["translation"])]
    return translations, [float(s) for s in tf.make_ndarray(response.outputs["score"])]


def text_inputs(texts: Sequence[str], target_lang: str | None = None) -> dict[str, list[str]]:
    """`serving_default`'s inputs: the lines, and a multilingual model's target language for
    each line (None: a bilingual model, which has no such input)."""
    inputs = {"text": list(texts)}
    if target_lang is not None:
        inputs["target_lang"] = [target_lang] * len(texts)
    return inputs


def grpc_translate(target: str, model_name: str, texts: Sequence[str],
                   timeout: float = 60.0, target_lang: str | None = None
                   ) -> tuple[list[str], list[float]]:
    """Translations and scores from the gRPC endpoint `target` (host:port)."""
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_request(model_name, {
            name: np.array(values, object)
            for name, values in text_inputs(texts, target_lang).items()})
        return parse_response(stub.Predict(request, timeout=timeout))


def rest_payload(texts: Sequence[str], target_lang: str | None = None) -> dict:
    """The body of a REST predict call (columnar "inputs", so the batch is one tensor)."""
    return {"signature_name": SIGNATURE, "inputs": text_inputs(texts, target_lang)}


def rest_translate(url: str, model_name: str, texts: Sequence[str],
                   timeout: float = 60.0, target_lang: str | None = None
                   ) -> tuple[list[str], list[float]]:
    """Translations and scores from the REST endpoint at `url` (http://host:port)."""
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/models/{model_name}:predict",
        data=json.dumps(rest_payload(texts, target_lang)).encode("utf-8"),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        outputs = json.load(response)["outputs"]
    return outputs["translation"], outputs["score"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Translate stdin lines with TF Serving.")
    endpoint = parser.add_mutually_exclusive_group(required=True)
    endpoint.add_argument("--grpc", help="host:port of the gRPC endpoint (8500)")
    endpoint.add_argument("--rest", help="http://host:port of the REST endpoint (8501)")
    parser.add_argument("--model", required=True, help="the model name in models.config")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--target-lang", help="the target language of every line (a "
                        "multilingual model's, e.g. fr)")
    args = parser.parse_args(argv)
    lines = [line.rstrip("\n") for line in sys.stdin]
    for start in range(0, len(lines), args.batch_size):
        batch = lines[start:start + args.batch_size]
        if args.grpc:
            translations, _ = grpc_translate(args.grpc, args.model, batch,
                                             target_lang=args.target_lang)
        else:
            translations, _ = rest_translate(args.rest, args.model, batch,
                                             target_lang=args.target_lang)
        sys.stdout.writelines(text + "\n" for text in translations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
