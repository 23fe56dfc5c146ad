"""Training throughput: real target tokens per second of a config's model (demo: the `small`
preset, dropout 0.1) in steady state, in float32 and mixed_bfloat16, and how well the update
uses the machine.

    .venv/bin/python bench/train_throughput.py [CONFIG] [--steps N] [--xla]

Batches: the run's train split as the trainer reads it (train.batch_tokens per replica batch,
padded to bucket boundaries) when runs/NAME is prepared, else synthetic batches of demo-like
shapes (the output says which). They are taken once, beforehand (the input pipeline is not
timed), and every variant trains its own model through `pipelines.training.trainer.Trainer`
(the compiled update, under the machine's strategy) on them. Variants: float32 and
mixed_bfloat16 without XLA, mixed_float16 where it is native, and the dtype that
`model.dtype: auto` chooses here if it is none of them; `--xla` adds each with XLA.
mixed_bfloat16 is skipped, with the reason, where `keras_transformer.precision.resolve_dtype`
refuses it (ONEDNN_MAX_CPU_ISA caps oneDNN below the CPU's bfloat16 instructions).

Warm-up: 2 untimed updates (the step traces once: its input signature leaves shapes free), or
with XLA one per distinct batch shape (each compiles; minutes on a slow CPU); then `--steps`
timed updates. Printed per variant: target tokens/s and s/update; the model's FLOP/s (counted
analytically by `training_flops`) as a share of the best GFLOP/s of a 2048x2048 tf.matmul in the
variant's compute dtype; minor page faults and system / user CPU seconds per timed update
(getrusage of this process). Last, the same figures for a plain Keras 3 encoder-decoder of the
same size trained with `train_on_batch` (float32, fixed batches of the config's token budget
in rows of 36), as a reference for the page faults.

The default run on the demo ends within 10 minutes on 2 AVX2-only cores, where a float32
update of 4,096 tokens takes about 6 s and a bfloat16 one about 10 s (the demo's 2,048-token
updates take half that): 22 updates per variant and 22 of the reference loop.
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import time
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.config import ModelConfig
from keras_transformer.precision import detect, resolve_dtype
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from pipelines.config import PipelineConfig, load_config
from pipelines.training.buckets import bucket_boundaries
from pipelines.paths import RunPaths
from pipelines.training.strategy import make_strategy
from pipelines.training.train_data import DatasetFn, train_dataset_fn
from pipelines.training.trainer import Trainer

from flops import MATMUL_SIZE, Update, matmul_peak, update_flops  # bench/flops.py

DTYPES = ("float32", "mixed_bfloat16")
WARMUP_UPDATES = 2  # without XLA; with XLA one per distinct batch shape
REFERENCE_TIME = 36  # the reference's batch: the config's token budget in rows of this length
SYNTHETIC_VOCAB = 8000
SYNTHETIC_MEAN_LENGTH = 36  # demo: 35.3 target pieces per sentence plus BOS / EOS


@dataclasses.dataclass(frozen=True)
class Timing:
    """Figures of the timed updates of one training loop."""

    tokens_per_second: float
    seconds_per_update: float
    page_faults_per_update: float  # minor faults (ru_minflt)
    system_seconds_per_update: float
    user_seconds_per_update: float

    def format(self) -> str:
        """Throughput: target tokens/s and s/update."""
        return (f"{self.tokens_per_second:7,.0f} target tokens/s "
                f"({self.seconds_per_update:.3f} s/update)")

    def format_usage(self) -> str:
        """Page faults and CPU seconds per update."""
        return (f"{self.page_faults_per_update:,.0f} page faults, "
                f"{self.system_seconds_per_update:.2f} s system + "
                f"{self.user_seconds_per_update:.2f} s user CPU time per update")


def synthetic_dataset_fn(config: PipelineConfig, seed: int = 0) -> DatasetFn:
    """Batches of the token budget padded to bucket boundaries, of lengths drawn around the
    demo corpus's, with 90% real tokens (the demo's padding efficiency)."""
    bounds = bucket_boundaries(config.data.max_length)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(500):
        length = int(np.clip(rng.normal(SYNTHETIC_MEAN_LENGTH, 15), 4, config.data.max_length))
        padded = next(bound for bound in bounds if bound >= length)
        rows = config.train.batch_tokens // padded
        ids = rng.integers(4, SYNTHETIC_VOCAB, (rows, padded), dtype=np.int32)  # [rows, len]
        ids[:, 0] = BOS_ID
        real = np.clip(rng.normal(0.9 * padded, 2, rows).astype(int), 3, padded)  # [rows]
        ids[np.arange(rows), real - 1] = EOS_ID
        ids[np.arange(padded)[None, :] >= real[:, None]] = PAD_ID
        batches.append({"source_ids": ids[:, 1:], "target_ids": ids})
    spec = tf.TensorSpec([None, None], tf.int32)

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(
            lambda: iter(batches), output_signature={"source_ids": spec, "target_ids": spec}
        ).repeat().prefetch(tf.data.AUTOTUNE)

    return make


def native_float16() -> bool:
    """Whether this machine runs float16 natively: a GPU of compute capability 7.0 or higher
    (tensor cores), or a CPU with AVX512-FP16 (oneDNN's float16)."""
    hardware = detect()
    return any(capability >= (7, 0) for capability in hardware.gpu_capabilities) or \
        "avx512_fp16" in hardware.cpu_flags


def time_updates(run_update: Callable[[int], float], steps: int) -> Timing:
    """Times `run_update(i)` (it returns the update's real target tokens, once done) for
    i < steps, with this process's page faults and CPU times over those updates."""
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    tokens = sum(run_update(i) for i in range(steps))
    seconds, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_SELF)
    return Timing(tokens / seconds, seconds / steps,
                  (after.ru_minflt - before.ru_minflt) / steps,
                  (after.ru_stime - before.ru_stime) / steps,
                  (after.ru_utime - before.ru_utime) / steps)


def take_updates(strategy: tf.distribute.Strategy, dataset_fn: DatasetFn, accumulate: int,
                 steps: int) -> tuple[object, list[Update]]:
    """(the distributed dataset's element_spec, `steps` updates of its batches); the input
    pipeline stops when this returns."""
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    iterator = iter(dataset)
    updates = [tuple(next(iterator) for _ in range(accumulate)) for _ in range(steps)]
    return dataset.element_spec, updates


def measure(config: PipelineConfig, vocab_size: int, strategy: tf.distribute.Strategy,
            element_spec: object, updates: list[Update]) -> tuple[Timing, float, int, float]:
    """Trains a fresh model through Trainer: the warm-up updates (see the module docstring),
    then one timed update per element of `updates`. Returns (timing, model FLOP/s, warm-up
    updates, warm-up seconds)."""
    keras.utils.set_random_seed(config.train.seed)
    trainer = Trainer(config, vocab_size, strategy)
    trainer.compile(element_spec)
    if config.train.jit_compile:
        warmup = list({_shapes(strategy, update): update for update in updates}.values())
    else:
        warmup = updates[:WARMUP_UPDATES]
    started = time.monotonic()
    for update in warmup:
        float(trainer.train_step(update)[1])  # waits for the update
    warmup_seconds = time.monotonic() - started
    timing = time_updates(lambda i: float(trainer.train_step(updates[i])[1]), len(updates))
    flops = sum(update_flops(trainer.model.model_config, strategy, u) for u in updates)
    flops_per_second = flops / (timing.seconds_per_update * len(updates))
    return timing, flops_per_second, len(warmup), warmup_seconds


def _shapes(strategy: tf.distribute.Strategy, update: Update) -> tuple:
    """The batch shapes of the first replica's share of an update."""
    return tuple(tuple(strategy.experimental_local_results(batch[key])[0].shape)
                 for batch in update for key in ("source_ids", "target_ids"))


def keras_reference_model(config: ModelConfig) -> keras.Model:
    """A plain Keras 3 encoder-decoder of `config`'s sizes (post-norm, shared embedding, no
    positions, dropout or padding masks; an untied output layer): [source, target] ids ->
    logits."""
    d, heads = config.d_model, config.num_heads
    source = keras.Input((None,), dtype="int32", name="source_ids")
    target = keras.Input((None,), dtype="int32", name="target_ids")
    embedding = keras.layers.Embedding(config.vocab_size, d)

    def add_norm(x: keras.KerasTensor, y: keras.KerasTensor) -> keras.KerasTensor:
        return keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon)(x + y)

    def attend(x: keras.KerasTensor, memory: keras.KerasTensor, causal: bool
               ) -> keras.KerasTensor:
        attention = keras.layers.MultiHeadAttention(heads, config.head_key_dim,
                                                    config.head_value_dim)
        return add_norm(x, attention(x, memory, use_causal_mask=causal))

    def feed_forward(x: keras.KerasTensor) -> keras.KerasTensor:
        inner = keras.layers.Dense(config.d_ff, activation="relu")(x)
        return add_norm(x, keras.layers.Dense(d)(inner))

    memory = embedding(source)  # [b, s, d]
    for _ in range(config.num_encoder_layers):
        memory = feed_forward(attend(memory, memory, causal=False))
    x = embedding(target)  # [b, t, d]
    for _ in range(config.num_decoder_layers):
        x = feed_forward(attend(attend(x, x, causal=True), memory, causal=False))
    logits = keras.layers.Dense(config.vocab_size)(x)  # [b, t, vocab]
    return keras.Model([source, target], logits)


def measure_keras_reference(config: ModelConfig, batch: tuple[int, int], steps: int,
                            seed: int) -> Timing:
    """float32 `train_on_batch` of keras_reference_model on fixed `batch` (rows, time) batches
    of random ids: WARMUP_UPDATES untimed updates, then `steps` timed ones."""
    keras.utils.set_random_seed(seed)
    keras.mixed_precision.set_global_policy("float32")
    model = keras_reference_model(config)
    # jit_compile=False: the default "auto" would use XLA on a GPU; this compares with our
    # update without XLA.
    model.compile(optimizer="adam", jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(seed)
    source, target, labels = (tf.constant(rng.integers(4, config.vocab_size, batch),
                                          tf.int32) for _ in range(3))
    for _ in range(WARMUP_UPDATES):
        model.train_on_batch([source, target], labels)
    tokens = float(np.prod(batch))

    def update(_: int) -> float:
        model.train_on_batch([source, target], labels)  # returns the loss: waits
        return tokens

    return time_updates(update, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--steps", type=int, default=20, help="timed updates per variant")
    parser.add_argument("--xla", action="store_true",
                        help="also the XLA variants (one compilation per batch shape)")
    args = parser.parse_args()
    config = load_config(args.config)
    paths = RunPaths(config.run_path)
    if paths.spm_model.is_file():
        source = f"{paths.data}/train (prepared run)"
        vocab_size = Tokenizer.from_file(paths.spm_model).vocab_size
        dataset_fn = train_dataset_fn(config, seed=config.data.seed)
    else:
        source = f"synthetic batches of demo-like shapes ({config.run_path} is not prepared)"
        vocab_size, dataset_fn = SYNTHETIC_VOCAB, synthetic_dataset_fn(config)
    print(f"model {config.model.preset}, batches of {config.train.batch_tokens} tokens from "
          f"{source}; {args.steps} timed updates per variant after {WARMUP_UPDATES} warm-up "
          f"updates (with XLA, one per batch shape)", flush=True)
    auto_dtype, auto_reason = resolve_dtype("auto")
    print(f"model.dtype auto on this machine -> {auto_reason}; its figures are the "
          f"{auto_dtype} line(s) below", flush=True)

    strategy = make_strategy()
    element_spec, updates = take_updates(strategy, dataset_fn, config.train.accumulate_steps,
                                         args.steps)
    peaks: dict[str, float] = {}  # compute dtype -> matmul GFLOP/s
    faults: dict[str, float] = {}  # variant -> page faults per update
    for dtype in dict.fromkeys((*DTYPES, "mixed_float16", auto_dtype)):
        try:
            resolve_dtype(dtype)
        except ValueError as error:
            print(f"{dtype:20s} skipped: {error}", flush=True)
            continue
        if dtype == "mixed_float16" and not native_float16():
            print(f"{dtype:20s} skipped: no GPU of compute capability 7.0+ nor a CPU with "
                  f"avx512_fp16 (float16 would run emulated)", flush=True)
            continue
        compute_dtype = keras.mixed_precision.Policy(dtype).compute_dtype
        if compute_dtype not in peaks:
            peaks[compute_dtype] = matmul_peak(tf.as_dtype(compute_dtype))
        for xla in (False, True) if args.xla else (False,):
            name = dtype + (" + XLA" if xla else "")
            variant = dataclasses.replace(
                config, model=dataclasses.replace(config.model, dtype=dtype),
                train=dataclasses.replace(config.train, jit_compile=xla))
            timing, flops_per_second, warmup, warmup_seconds = measure(
                variant, vocab_size, strategy, element_spec, updates)
            faults[name] = timing.page_faults_per_update
            gflops, peak = flops_per_second / 1e9, peaks[compute_dtype]
            print(f"{name:20s} {timing.format()} | {gflops:,.0f} GFLOP/s = "
                  f"{gflops / peak:.0%} of a {MATMUL_SIZE}^2 {compute_dtype} matmul's "
                  f"{peak:,.0f} | {timing.format_usage()} | warm-up {warmup} updates "
                  f"{warmup_seconds:.0f} s", flush=True)
    model_config = config.model.model_config(vocab_size=vocab_size, pad_id=PAD_ID)
    batch = (config.train.batch_tokens // REFERENCE_TIME, REFERENCE_TIME)
    reference = measure_keras_reference(model_config, batch, args.steps, config.train.seed)
    reference_faults = max(reference.page_faults_per_update, 1.0)
    ratios = ", ".join(f"{name} {count / reference_faults:.1f}x"
                       for name, count in faults.items())
    print(f"{'plain Keras 3 loop':20s} {reference.format()} | float32, "
          f"{batch[0]}x{batch[1]} random ids, train_on_batch | "
          f"{reference.format_usage()}\n"
          f"page faults per update relative to the plain Keras loop: {ratios}", flush=True)


if __name__ == "__main__":
    main()
