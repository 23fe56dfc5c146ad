"""keras_transformer/ensemble.py and ensembles through the stack: two copies of one model decode
as the model in every searching family (Keras level here, untrained; the Translator's
signatures with the trained tiny model); members of other sizes; the one-vocabulary rule; an
ensemble exported (one SavedModel and ONNX holding both, translator.json naming them) and
translated (`translate --ensemble`); bad ensembles refused in one line, status 2, nothing
written."""
from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml

from export.metadata import METADATA_FILE, SAVED_MODEL_EXTRA, SPM_FILE, ExportMetadata
from export_helpers import SENTENCES, make_model, source_ids, train_spm
from keras_transformer import ModelConfig
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.ensemble import Ensemble
from keras_transformer.model import Transformer
from keras_transformer.translate import decode_hypotheses
from pipelines.cli import main

# Short outputs: an untrained model writes up to its limit.
SETTINGS = DecodingSettings(beam_size=3, extra_length=6)


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return train_spm(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module")
def untrained(spm_model: bytes):
    """An untrained tiny model and the test sentences' source ids for it."""
    return make_model(spm_model), tf.constant(source_ids(spm_model, SENTENCES[:6]))


def test_two_copies_of_a_model_search_as_the_model(untrained):
    """The n-best lists, the first sentence's forced to begin with a prefix (Keras level;
    every family, trained: test_an_ensemble_export_of_two_copies_translates_as_the_model)."""
    model, source = untrained
    prefix = tf.constant([[9, 10]] + [[0, 0]] * (source.shape[0] - 1), tf.int32)
    search = tf.function(lambda model: decode_hypotheses(model, source, SETTINGS, prefix),
                         autograph=False)
    ids, scores = search(model)  # [batch, beam, time], [batch, beam]
    ensemble_ids, ensemble_scores = search(Ensemble([model, model]))
    np.testing.assert_array_equal(ensemble_ids.numpy(), ids.numpy())
    np.testing.assert_allclose(ensemble_scores.numpy(), scores.numpy(), rtol=1e-5)
    assert (ids.numpy()[0, :, :2] == [9, 10]).all()


def test_members_of_other_sizes_decode_within_the_strictest_limit(spm_model, untrained):
    model, source = untrained
    small = Transformer(dataclasses.replace(model.model_config, num_decoder_layers=1,
                                            d_model=32, d_ff=64, max_length=8))
    ensemble = Ensemble([model, small])
    assert ensemble.model_config == dataclasses.replace(model.model_config, max_length=8)
    assert len(ensemble.variables) == len(model.variables) + len(small.variables)
    ids, scores = decode_hypotheses(ensemble, source, DecodingSettings(beam_size=2))
    assert ids.shape[2] <= 8 and np.isfinite(scores.numpy()).all()


def test_members_of_another_vocabulary_are_refused(untrained):
    model, _ = untrained
    config = dataclasses.replace(model.model_config, vocab_size=model.model_config.vocab_size + 1)
    with pytest.raises(ValueError, match="member 1 has vocab_size 301, member 0 300"):
        Ensemble([model, Transformer(config)])
    with pytest.raises(ValueError, match="at least two members"):
        Ensemble([model])
