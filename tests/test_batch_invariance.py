"""Batch invariance (issue 29): a line's translation and score do not depend on the other
lines of its batch or on its padding, in TensorFlow (the SavedModel), ONNX Runtime and
CTranslate2 each: every test line is translated alone and inside batches of other companions
and lengths."""
import random

import numpy as np
import pytest

from export.ct2_runtime import CTranslate2Translator
from export.onnx_runtime import OnnxTranslator
from export_helpers import SENTENCES, corpus, source_ids

COMPANIONS = corpus(12, seed=5) + ["fish " * 30, "x", ""]


def batches(line: str, seed: int) -> list[list[str]]:
    """`line` alone, then inside three batches of shuffled companions of other lengths."""
    rng = random.Random(seed)
    mixes = [[line]]
    for size in (2, 5, 9):
        batch = rng.sample(COMPANIONS, size - 1) + [line]
        rng.shuffle(batch)
        mixes.append(batch)
    return mixes


def translator(runtime: str, exported, saved_model_translator, model_proto: bytes):
    """A function: a batch of lines -> (translation, score) per line, with `runtime`. ONNX
    Runtime decodes ids here (its text graph would run in a child process beside TensorFlow),
    so its answers are target ids."""
    if runtime == "ct2":
        ct2 = CTranslate2Translator(exported.ctranslate2)
        return lambda batch: ct2.scored_lines(batch, batch_size=len(batch))
    if runtime == "tf":
        return lambda batch: list(zip(*saved_model_translator.translate(batch).values()))
    onnx = OnnxTranslator(exported.onnx)

    def translate_ids(batch: list[str]) -> list[tuple[tuple[int, ...], float]]:
        output = onnx.translate_ids(source_ids(model_proto, batch))
        return [(tuple(int(i) for i in row if i), float(score))
                for row, score in zip(output["target_ids"], output["score"])]

    return translate_ids


@pytest.mark.parametrize("runtime", ["tf", "onnx", "ct2"])
def test_a_lines_translation_and_score_do_not_depend_on_its_batch(runtime, exported,
                                                                  saved_model_translator,
                                                                  export_translator):
    translate = translator(runtime, exported, saved_model_translator,
                           export_translator.spm_model_proto)
    for index, line in enumerate(SENTENCES):
        answers = [dict(zip(batch, translate(batch)))[line] for batch in batches(line, index)]
        alone_text, alone_score = answers[0]
        assert [text for text, _ in answers] == [alone_text] * len(answers), line
        np.testing.assert_allclose([float(score) for _, score in answers], float(alone_score),
                                   atol=1e-4)
