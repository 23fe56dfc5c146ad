import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import ModelConfig, Transformer
from keras_transformer.losses import label_smoothed_cross_entropy
from keras_transformer.schedules import FusedAdam

VOCAB = 40
SOURCE = np.array([[5, 9, 12, 7, 3, 0, 0], [8, 4, 3, 0, 0, 0, 0], [6, 6, 7, 8, 9, 10, 3]])
TARGET = np.array([[2, 11, 13, 17, 3], [2, 21, 3, 0, 0], [2, 30, 31, 32, 33]])

VARIANTS = {
    "paper": {},
    "pre_norm": {"norm_first": True},
    "learned_positions": {"positional_encoding": "learned", "max_length": 64},
}


def make_model(**overrides) -> Transformer:
    keras.utils.set_random_seed(1)
    config = ModelConfig.from_preset("tiny", vocab_size=VOCAB, dropout=0.0, **overrides)
    return Transformer(config)


def logits_of(model, source, target):
    return model({"source_ids": tf.constant(source), "target_ids": tf.constant(target)}).numpy()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_information_from_future_target_positions(variant):
    model = make_model(**VARIANTS[variant])
    base = logits_of(model, SOURCE, TARGET)
    for t in range(TARGET.shape[1] - 1):
        changed = TARGET.copy()
        changed[:, t + 1] = 1 + (changed[:, t + 1] + 7) % (VOCAB - 1)
        out = logits_of(model, SOURCE, changed)
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        assert np.abs(out[:, t + 1:] - base[:, t + 1:]).max() > 1e-4  # later ones do change


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_padding_leaves_real_positions_unchanged(variant):
    model = make_model(**VARIANTS[variant])
    base = logits_of(model, SOURCE, TARGET)
    padded_source = np.pad(SOURCE, [(0, 0), (0, 4)])
    padded_target = np.pad(TARGET, [(0, 0), (0, 3)])
    out = logits_of(model, padded_source, padded_target)
    np.testing.assert_allclose(out[:, : TARGET.shape[1]], base, atol=1e-5)
    # A single sentence gives the same logits alone as inside the padded batch.
    alone = logits_of(model, SOURCE[1:2, :3], TARGET[1:2, :3])
    np.testing.assert_allclose(alone, base[1:2, :3], atol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_step_decoding_matches_teacher_forcing(variant):
    model = make_model(**VARIANTS[variant])
    teacher_forced = logits_of(model, SOURCE, TARGET)
    memory, memory_mask = model.encode(tf.constant(SOURCE))
    cache = model.init_cache(memory, memory_mask)
    # the growing cache: 2 traces
    step = tf.function(model.decode_step, reduce_retracing=True, autograph=False)
    steps = []
    for t in range(TARGET.shape[1]):
        logits, cache = step(tf.constant(TARGET[:, t]), tf.constant(t), cache)
        steps.append(logits.numpy())
    assert cache["layer_0"]["self_key"].shape[2] == TARGET.shape[1]
    assert step.experimental_get_tracing_count() == 2
    assert np.abs(np.stack(steps, axis=1) - teacher_forced).max() < 1e-4


@pytest.mark.parametrize("norm_first", [False, True])
def test_one_layers_cross_attention_is_computed_alone(norm_first):
    """`cross_attention_weights` gives `attention_weights`' entry of each decoder layer, and
    its graph discards nothing computed from the weights (a discarded node costs Grappler's
    constant folding a pass over the graph in TF Serving's first run)."""
    model = make_model(norm_first=norm_first, num_decoder_layers=3)
    source, target = tf.constant(SOURCE), tf.constant(TARGET)
    every = model.attention_weights(source, target)["encoder_decoder_attention"]
    for layer in range(3):
        np.testing.assert_array_equal(model.cross_attention_weights(source, target, layer),
                                      every[layer])
    graph = tf.function(model.cross_attention_weights, autograph=False).get_concrete_function(
        source, target, 1).graph
    needed, stack = set(), [tensor.op for tensor in graph.outputs]
    while stack:
        op = stack.pop()
        if op not in needed:
            needed.add(op)
            stack.extend(tensor.op for tensor in op.inputs)
    weights = [op for op in graph.get_operations() if op.type == "ReadVariableOp"]
    assert weights and all(op in needed for op in weights)


def test_save_and_load_round_trip(tmp_path):
    model = make_model(norm_first=True)
    expected = logits_of(model, SOURCE, TARGET)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, Transformer)
    assert restored.model_config == model.model_config
    np.testing.assert_allclose(logits_of(restored, SOURCE, TARGET), expected, atol=1e-6)


def test_mixed_precision_policy_is_restored_on_load(tmp_path, bfloat16_runs):
    model = Transformer(ModelConfig.from_preset("tiny", vocab_size=VOCAB),
                        dtype="mixed_bfloat16")
    out = model({"source_ids": tf.constant(SOURCE), "target_ids": tf.constant(TARGET)})
    assert out.dtype == tf.float32  # logits are float32 for a stable softmax
    assert model.encoder_layers[0].feed_forward.inner_dense.compute_dtype == "bfloat16"
    assert model.embedding.embeddings.dtype == "float32"
    model.save(tmp_path / "bf16.keras")
    restored = keras.models.load_model(tmp_path / "bf16.keras")  # global policy is float32
    assert restored.decoder_layers[-1].cross_attention.query_dense.compute_dtype == "bfloat16"


@pytest.mark.slow
def test_tiny_model_overfits_a_small_batch():
    model = make_model()
    optimizer = FusedAdam(3e-3)  # training's Adam: its update traces in half the time of Keras's
    optimizer.build(model.trainable_variables)  # its slots made now: the step traces once
    source, target = tf.constant(SOURCE), tf.constant(TARGET)

    @tf.function(autograph=False)
    def train_step():
        with tf.GradientTape() as tape:
            logits = model({"source_ids": source, "target_ids": target[:, :-1]}, training=True)
            loss_sum, tokens = label_smoothed_cross_entropy(target[:, 1:], logits, 0.1)
            loss = loss_sum / tokens
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(train_step()) for _ in range(150)]
    assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])
