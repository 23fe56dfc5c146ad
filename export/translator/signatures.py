"""The serving contract, in one table: each signature of the SavedModel by name, the Translator
function it runs, its inputs (name, dtype, axes), its outputs (name, dtype, rank) and the
inputs of its TF Serving warm-up requests.

The Translator's functions take their input signatures from it (`input_specs`) and check
their inputs' ranks against it in the graph (`checked_inputs`: TF Serving feeds a request's
tensors whatever their shape; one of another rank fails the request, naming the input),
`export.saved_model` saves and warms up the signatures it lists, and the tests check the
exported SavedModel (tests/test_saved_model.py, tests/test_serving.py) and the docs' tables
(tests/test_signature_docs.py: README.md and ARCHITECTURE.md, "Serving signatures") against it.
Input and output names never coincide.

A multilingual model (`keras_transformer.languages`: language tokens among its vocabulary's user
symbols) has the table of `signatures(languages)`: each signature that reads `text` takes one
more input, `target_lang` (TARGET_LANG: a language code per line, last), checked against the
model's languages in the graph (`checked_languages`); `translate_ids` reads ids as they are
(the caller's ids hold the language token). A bilingual model's table is SIGNATURES, unchanged.

Example:
    >>> SIGNATURES["serving_default"].method
    'translate'
    >>> [spec.name for spec in SIGNATURES["score"].inputs]
    ['text', 'target']
    >>> [spec.name for spec in signatures(("fr", "de"))["score"].inputs]
    ['text', 'target', 'target_lang']
    >>> SOURCE_IDS.expected()
    'expected rank 2 (a [batch, time] matrix of int32)'
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.languages import target_language_problem, unknown_language_message


class Input(NamedTuple):
    name: str
    dtype: tf.DType
    axes: tuple[str, ...]  # ("batch",) or ("batch", "time" | "terms")

    @property
    def spec(self) -> tf.TensorSpec:
        """The input signature's TensorSpec: any size along each axis."""
        return tf.TensorSpec([None] * len(self.axes), self.dtype, name=self.name)

    def expected(self) -> str:
        """What a request of another rank is told it should have sent."""
        kind = {1: "vector", 2: "matrix"}[len(self.axes)]
        values = "strings" if self.dtype == tf.string else self.dtype.name
        return (f"expected rank {len(self.axes)} (a [{', '.join(self.axes)}] {kind} of "
                f"{values})")


TEXT = Input("text", tf.string, ("batch",))
PREFIX = Input("prefix", tf.string, ("batch",))
TARGET = Input("target", tf.string, ("batch",))
TERMS = Input("terms", tf.string, ("batch", "terms"))  # "" as padding
SAMPLING = (Input("top_k", tf.int32, ("batch",)), Input("top_p", tf.float32, ("batch",)),
            Input("temperature", tf.float32, ("batch",)), Input("seed", tf.int64, ("batch",)))
SOURCE_IDS = Input("source_ids", tf.int32, ("batch", "time"))
TARGET_PIECES = Input("target_pieces", tf.int32, ("batch", "time"))  # score.onnx
TARGET_LANG = Input("target_lang", tf.string, ("batch",))  # a multilingual model's: fr, de, ...


class Output(NamedTuple):
    name: str
    dtype: tf.DType
    rank: int  # [batch] or [batch, beam | time | terms]


TRANSLATION = Output("translation", tf.string, 1)
SCORE = Output("score", tf.float32, 1)
ALIGNMENT = Output("alignment", tf.string, 1)  # `I-J ...` per line
TARGET_IDS = Output("target_ids", tf.int32, 2)

# A warm-up request's inputs from a batch of lines (object [batch]) and their source ids
# (int32 [batch, time], as `translate` encodes them).
WarmupInputs = Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]


class Signature(NamedTuple):
    method: str                        # the Translator's tf.function that serves it
    inputs: tuple[Input, ...]          # in the function's argument order
    outputs: tuple[Output, ...]
    warmup: WarmupInputs


def _text(lines: np.ndarray, source_ids: np.ndarray) -> dict[str, np.ndarray]:
    return {"text": lines}


SIGNATURES: dict[str, Signature] = {
    "serving_default": Signature("translate", (TEXT,), (TRANSLATION, SCORE), _text),
    "translate_ids": Signature(
        "translate_ids", (SOURCE_IDS,), (TARGET_IDS, SCORE),
        lambda lines, source_ids: {"source_ids": source_ids}),
    "translate_nbest": Signature(
        "translate_nbest", (TEXT,),
        (Output("translations", tf.string, 2), Output("scores", tf.float32, 2)), _text),
    "translate_prefix": Signature(
        "translate_prefix", (TEXT, PREFIX), (TRANSLATION, SCORE),
        lambda lines, source_ids: {"text": lines, "prefix": np.full_like(lines, "")}),
    "translate_sample": Signature(
        "translate_sample", (TEXT, *SAMPLING), (TRANSLATION, SCORE),
        lambda lines, source_ids: {
            "text": lines, "top_k": np.zeros(len(lines), np.int32),
            "top_p": np.ones(len(lines), np.float32),
            "temperature": np.ones(len(lines), np.float32),
            "seed": np.arange(len(lines), dtype=np.int64)}),
    "score": Signature(
        "score", (TEXT, TARGET),
        (SCORE, Output("log_prob", tf.float32, 1), TARGET_IDS,
         Output("token_log_probs", tf.float32, 2)),
        lambda lines, source_ids: {"text": lines, "target": lines}),
    "align": Signature("align", (TEXT, TARGET), (ALIGNMENT,),
                       lambda lines, source_ids: {"text": lines, "target": lines}),
    "translate_aligned": Signature("translate_aligned", (TEXT,),
                                   (TRANSLATION, SCORE, ALIGNMENT), _text),
    "translate_terms": Signature(
        "translate_terms", (TEXT, TERMS),
        (TRANSLATION, SCORE, Output("terms_fit", tf.bool, 1), Output("term_found", tf.bool, 2),
         ALIGNMENT),
        lambda lines, source_ids: {"text": lines, "terms": lines[:, None]}),
}


def signatures(languages: Sequence[str] = ()) -> dict[str, Signature]:
    """The serving contract of a model that translates into `languages` (its target-language
    tokens' codes; () for a bilingual model: SIGNATURES): each signature that reads TEXT takes
    TARGET_LANG too, last, and its warm-up requests ask for the first language."""
    if not languages:
        return SIGNATURES
    return {name: _with_target_lang(signature, languages[0]) if TEXT in signature.inputs
            else signature for name, signature in SIGNATURES.items()}


def _with_target_lang(signature: Signature, language: str) -> Signature:
    def warmup(lines: np.ndarray, source_ids: np.ndarray) -> dict[str, np.ndarray]:
        return {**signature.warmup(lines, source_ids),
                TARGET_LANG.name: np.full(len(lines), language, object)}

    return signature._replace(inputs=(*signature.inputs, TARGET_LANG), warmup=warmup)


def in_language(function: Callable[..., Any], target_lang: str | None,
                languages: Sequence[str]) -> Callable[..., Any]:
    """`function(text=, ...)`, a Translator function or a loaded signature of a model
    translating into `languages`, called with `target_lang` for every line of `text` (None: as
    it is, a bilingual model's).

    Raises:
        ValueError: `keras_transformer.languages.target_language_problem`'s line (no language
            for a multilingual model, one for a bilingual model, or one it does not know).
    """
    problem = target_language_problem(target_lang, languages)
    if problem:
        raise ValueError(problem)
    if target_lang is None:
        return function
    return lambda text, **inputs: function(
        text=text, **inputs, target_lang=tf.fill(tf.shape(text)[:1], target_lang))


def input_specs(name: str) -> list[tf.TensorSpec]:
    """The input signature of the Translator function that serves signature `name`."""
    return [expected.spec for expected in SIGNATURES[name].inputs]


def checked_inputs(name: str, *inputs: tf.Tensor,
                   languages: Sequence[str] = ()) -> list[tf.Tensor]:
    """Graph code: the inputs of signature `name` (of a model translating into `languages`),
    in the table's order, each passed on once its rank is the table's; one of another rank
    fails the request with InvalidArgumentError "assertion failed: [text: expected rank 1 (a
    [batch] vector of strings), got rank 2]". Within `unchecked_inputs()`, the inputs as they
    are."""
    if _UNCHECKED.get():
        return list(inputs)
    return [_rank_checked(tensor, expected) for tensor, expected in
            zip(inputs, signatures(languages)[name].inputs, strict=True)]


def checked_languages(target_lang: tf.Tensor, languages: Sequence[str]) -> tf.Tensor:
    """Graph code: target_lang string [batch] passed on once each code is one of `languages`;
    otherwise the request fails with InvalidArgumentError "assertion failed: [target language
    \\'es\\': the model translates into fr, de (its target-language tokens)]", naming the
    first unknown code (`keras_transformer.languages.unknown_language_message`; TF's Assert
    escapes its quotes). Within `unchecked_inputs()`, as it is."""
    if _UNCHECKED.get():
        return target_lang
    known = tf.reduce_any(tf.equal(target_lang[:, None], tf.constant(languages)[None]),
                          axis=1)  # [batch]
    first_unknown = tf.strings.reduce_join(tf.boolean_mask(target_lang, ~known)[:1])  # []
    head, tail = unknown_language_message(_CODE, languages).split(_CODE)
    message = tf.strings.join([head, first_unknown, tail])
    check = tf.debugging.Assert(tf.reduce_all(known), [message])
    with tf.control_dependencies([check]):
        return tf.identity(target_lang)


_CODE = "{}"  # where a code goes in the message; no language code or message holds braces
_UNCHECKED = contextvars.ContextVar("unchecked_inputs", default=False)


@contextlib.contextmanager
def unchecked_inputs() -> Iterator[None]:
    """Within it, graphs being traced leave out `checked_inputs`' and `checked_languages`'
    checks: for ONNX, whose runtime refuses an input of another rank itself, naming it (and
    to which tf2onnx would carry the check's SerializeTensor and ParseTensor, warning that it
    cannot infer their shapes), and a graph function whose inputs were checked before it."""
    token = _UNCHECKED.set(True)
    try:
        yield
    finally:
        _UNCHECKED.reset(token)


def _rank_checked(tensor: tf.Tensor, expected: Input) -> tf.Tensor:
    # The rank is the size of the shape's value passed through SerializeTensor and ParseTensor,
    # whose output has no shape for shape inference: grappler folds a Rank (or the Size of a
    # Shape) to the rank it infers for the tensor, the input signature's or one that an op
    # downstream merges into it (tf.ensure_shape among them), and the check with it; the
    # shape's value it cannot fold, the batch size being the request's.
    shape = tf.io.parse_tensor(tf.io.serialize_tensor(tf.shape(tensor)), tf.int32)
    rank = tf.size(shape)
    message = tf.strings.format(f"{expected.name}: {expected.expected()}, got rank {{}}", rank)
    check = tf.debugging.Assert(tf.equal(rank, len(expected.axes)), [message])
    with tf.control_dependencies([check]):
        return tf.identity(tensor)
