"""Decoding speed and BLEU of the exports on a run's test split, beam search as exported:
sentences/s, target tokens/s and BLEU of the SavedModel (TensorFlow, float32; `tf-bfloat16`
one in mixed_bfloat16, by default where `dtype: auto` picks it), model.onnx and
model_int8.onnx (ONNX Runtime) and CTranslate2 float32 and int8 on the same weights, each
with the export's lexical shortlist and without it (`:full`), at batch sizes 1 and 32, then
decode time against output length (batch 1: the cache makes it linear).

    .venv/bin/python bench/decode_speed.py [CONFIG] [--sentences N] [--threads N]
                                           [--batch-sizes 1,32] [--runtimes tf,tf:full,...]
                                           [--runtimes onnx-int8@1,ct2-float32,...]
                                           [--xla-max-batch 8] [--parallel-searches N]
                                           [--synthetic-vocab 32000 [--preset base]]

The model: runs/NAME/export if it is complete, else an export of the run's checkpoint, else (said
in the output) a randomly initialised model of the config's preset, which decodes every
sentence to the length limit (source length + evaluate.extra_length); the CTranslate2 models
are converted from the SavedModel's weights when the export has none, and a SavedModel of
another dtype or search than the export's is built from them (bench/decode_models.py).

The shortlist: a runtime's name as it is (`tf`, `onnx`, `ct2-float32`) searches with the
export's shortlist, `NAME:full` the whole vocabulary: the SavedModel's `shortlist_enabled`
switched off in the worker's session (`tf-xla:full`, `tf-parallel:full`: exports without the
shortlist, whose XLA search stays), ONNX an export made without it, CTranslate2 the same model
without `use_vmap`. Each row's `vs full` is its sentences/s over its `:full` twin's (the same
sentences). A run without a shortlist table has the `:full` rows alone, and the report says so.
`--synthetic-vocab PIECES` times a random model of PIECES pieces instead (the run's spm.model
with unused pieces added, the config's model section or --preset, a synthetic shortlist table
of Zipf draws: `decode_models.synthetic_run`), the shortlist's cost at a vocabulary no trained
run has; its BLEU is a random model's. `NAME@T` runs a runtime with T threads instead of
`--threads` (`onnx-int8@1,onnx-int8,ct2-float32`: ONNX Runtime with one intra-op thread and with
all, CTranslate2 with all, taking turns in one run).

Each runtime runs in a process of its own (its own thread pools; ONNX Runtime never beside
TensorFlow); a SavedModel runs as TF Serving runs it, in a TF1 session (`--threads` inter-op
and intra-op threads; `tf-parallel`, the SavedModel exported with
`saved_model_parallel_searches` N and `saved_model_xla_max_batch`, with one intra-op thread:
--tensorflow_intra_op_parallelism=1). Sources are tokenized beforehand and decoded as ids
(pieces for CTranslate2), in batches of similar lengths as `translate_lines` makes them;
target tokens are counted with their EOS (a CTranslate2 hypothesis with one EOS more: it
returns none). BLEU (sacrebleu, detokenized output against the reference) comes from the
largest batch size's run. One warm-up batch per batch size is not timed (`tf-xla`, the
SavedModel whose beam search XLA compiles for batches of up to `--xla-max-batch` sentences,
`export.saved_model_xla_max_batch`, default 8, and `tf-parallel`: every batch, so that each
shape is compiled before the timing); at batch 1 each sentence runs twice and the length
table takes the faster run (other processes share the CPU). The runtimes take turns of at
least TURN_SENTENCES sentences (one batch of 32, 32 batches of 1): each process decodes its
turn while the others wait, so a machine whose speed drifts during the run (a shared virtual
machine's can change 2x within minutes) slows every runtime alike and the ratios between them,
a runtime's two variants' among them, hold. Turns of one sentence would not: the threads of
ONNX Runtime and CTranslate2 spin a while after their work (their default, the fastest alone),
on the cores of the runtime whose turn comes next.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

# bench/decode_models.py
from decode_models import FULL, FoundModels, find_model, synthetic_run, test_split, variant

RUNTIMES = {"tf": "SavedModel", "tf-bfloat16": "SavedModel", "tf-xla": "SavedModel",
            "tf-parallel": "SavedModel", "onnx": "model.onnx",
            "onnx-int8": "model_int8.onnx", "ct2-float32": "CTranslate2", "ct2-int8": "CTranslate2"}
NAMES = [name + suffix for name in RUNTIMES for suffix in ("", FULL)]  # each in both variants
LENGTH_BUCKET = 10  # output tokens per row of the length table
REPEATS = 2  # batch-1 runs per sentence: the length table takes the fastest (a busy machine)
TURN_SENTENCES = 32  # sentences a runtime decodes before the next one's turn
THREADS_MARK = "@"  # NAME@T: the runtime NAME with T threads


def runtime_threads(runtime: str, threads: int) -> tuple[str, int]:
    """(the runtime's name without THREADS_MARK, its threads: T of NAME@T, else `threads`).

    Raises:
        ValueError: T is not a positive integer.
    """
    name, mark, count = runtime.partition(THREADS_MARK)
    if not mark:
        return name, threads
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"{runtime}: the threads after {THREADS_MARK} must be a positive "
                         f"integer")
    return name, int(count)


def renamed(runtime: str, name: str) -> str:
    """`runtime` with its name replaced by `name`, its THREADS_MARK and threads kept
    (`onnx@1` -> `onnx:full@1`)."""
    _, mark, count = runtime.partition(THREADS_MARK)
    return name + mark + count


def worker(runtime: str, model_dir: Path, sources: list[list[int]], batch_size: int,
           threads: int, repeats: int) -> None:
    """Loads the runtime and warms it up, says "ready", then for each batch index read from
    stdin times that batch `repeats` times and prints {"seconds": [per run], "sentences",
    "tokens", "lengths", "indices", "targets"} as a JSON line (targets: the best ids of
    sources[indices], EOS included)."""
    translate_ids = _translate_ids_function(runtime, model_dir, threads)
    batches = source_batches(sources, batch_size)
    compiles = variant(runtime)[0] in ("tf-xla", "tf-parallel")
    warmup = batches if compiles else batches[len(batches) // 2:][:1]
    for indices in warmup:  # tf-xla: every shape compiled first, as a server's warm-up does
        translate_ids([sources[i] for i in indices])
    print("ready", flush=True)
    for line in sys.stdin:
        indices = batches[int(line)]
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            targets = translate_ids([sources[i] for i in indices])
            seconds.append(time.perf_counter() - start)
        lengths = [len(target) for target in targets]
        print(json.dumps({"seconds": seconds, "sentences": len(indices),
                          "tokens": sum(lengths), "lengths": lengths, "indices": indices,
                          "targets": targets}), flush=True)


def source_batches(sources: list[list[int]], batch_size: int) -> list[list[int]]:
    """Indices of `sources` in batches of similar lengths, as `translate_lines` makes them."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def taking_turns(runtimes: list[str], directories: dict[str, Path], sources: list[list[int]],
                 batch_size: int, threads: int) -> dict[str, list[dict]]:
    """Each runtime's timed batches: a worker process per runtime, loaded and warmed up,
    then turns of the batches of TURN_SENTENCES sentences (at least one batch), decoded by one
    runtime after the other (never two at once)."""
    repeats = REPEATS if batch_size == 1 else 1
    workers = {}
    for runtime in runtimes:  # started one by one: loading and warm-up are not timed
        name, count = runtime_threads(runtime, threads)
        workers[runtime] = subprocess.Popen(
            [sys.executable, __file__, "--worker", name, "--model-dir",
             str(directories[name]), "--batch-size", str(batch_size), "--threads",
             str(count), "--repeats", str(repeats)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        workers[runtime].stdin.write(json.dumps(sources) + "\n")
        workers[runtime].stdin.flush()
        while _answer(runtime, workers[runtime]) != "ready":
            pass  # what a library printed while loading
    results: dict[str, list[dict]] = {runtime: [] for runtime in runtimes}
    count, per_turn = len(source_batches(sources, batch_size)), max(1, TURN_SENTENCES // batch_size)
    for first in range(0, count, per_turn):
        turn = range(first, min(first + per_turn, count))
        for runtime, process in workers.items():
            process.stdin.write("".join(f"{index}\n" for index in turn))
            process.stdin.flush()
            results[runtime] += [json.loads(_answer(runtime, process)) for _ in turn]
    for process in workers.values():
        process.stdin.close()
        process.wait()
    return results


def _answer(runtime: str, process: subprocess.Popen) -> str:
    """The worker's next line of output; an exited worker raises RuntimeError."""
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"{runtime}: the worker exited with {process.wait()}")
    return line.strip()


def _translate_ids_function(runtime: str, model_dir: Path, threads: int
                            ) -> Callable[[list[list[int]]], list[list[int]]]:
    """Source ids (pieces, EOS) -> best target ids (EOS included where the hypothesis ended)
    for a batch, with `runtime` (with its shortlist, or without it: FULL)."""
    name, shortlisted = variant(runtime)
    if name.startswith("ct2-"):
        from export.ct2_runtime import CTranslate2Translator

        ct2 = CTranslate2Translator(model_dir, name.removeprefix("ct2-"), threads,
                                    shortlist=shortlisted)
        to_piece, to_id = ct2.processor.id_to_piece, ct2.processor.piece_to_id

        def translate_ids(batch: list[list[int]]) -> list[list[int]]:
            pieces = ct2.translate_pieces([[to_piece(i) for i in row[:-1]] for row in batch])
            return [[to_id(piece) for piece in row] + [ct2.processor.eos_id()] for row in pieces]

        return translate_ids
    if name.startswith("onnx"):
        from export.metadata import INT8_MODEL_FILE, MODEL_FILE
        from export.onnx_runtime import OnnxTranslator

        model_file = INT8_MODEL_FILE if name == "onnx-int8" else MODEL_FILE
        run = OnnxTranslator(model_dir, threads, model_file,
                             shortlist=shortlisted).translate_ids
    else:
        run = session_signature(model_dir, "translate_ids", threads,
                                1 if name == "tf-parallel" else threads, shortlisted)

    def translate_ids(batch: list[list[int]]) -> list[list[int]]:
        target = run(_pad(batch))["target_ids"]  # [batch, time]: EOS, then PAD
        return [[int(i) for i in row if i != 0] for row in target]

    return translate_ids


def session_signature(model_dir: Path, name: str, inter_threads: int, intra_threads: int,
                      shortlisted: bool) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """A SavedModel signature as TF Serving runs it: TF1's session loader, a session of
    `inter_threads` inter-op and `intra_threads` intra-op threads
    (--tensorflow_inter_op_parallelism, --tensorflow_intra_op_parallelism), the export's
    shortlist switched off unless `shortlisted`."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the SentencePiece ops)

    from export.saved_model import switch_session_shortlist

    tf.get_logger().setLevel("ERROR")  # the TF1 loader's deprecation notice
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=inter_threads, intra_op_parallelism_threads=intra_threads))
    with graph.as_default():
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(model_dir))
    switch_session_shortlist(session, meta_graph, shortlisted)
    signature = meta_graph.signature_def[name]
    inputs = {key: spec.name for key, spec in signature.inputs.items()}
    outputs = {key: spec.name for key, spec in signature.outputs.items()}

    def run(ids: np.ndarray) -> dict[str, np.ndarray]:
        return session.run(outputs, {inputs["source_ids"]: ids})

    return run


def _pad(rows: list[list[int]]) -> np.ndarray:
    ids = np.zeros([len(rows), max(len(r) for r in rows)], np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    return ids


def default_runtimes() -> list[str]:
    """Every runtime with its shortlist and without (FULL), `tf-bfloat16` only where
    `dtype: auto` picks bfloat16 (native bf16)."""
    from keras_transformer.precision import resolve_dtype

    native = resolve_dtype("auto")[0] == "mixed_bfloat16"
    return [name for name in NAMES if variant(name)[0] != "tf-bfloat16" or native]


def bleu(batches: list[dict], references: list[str], spm_model: Path) -> float:
    """sacrebleu BLEU of the batches' translations (ids up to EOS) against `references`."""
    import sacrebleu
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(spm_model))
    hypotheses = [""] * len(references)
    for batch in batches:
        for index, target in zip(batch["indices"], batch["targets"]):
            hypotheses[index] = processor.decode(target[:-1] if target[-1:] == [
                processor.eos_id()] else target)
    return sacrebleu.corpus_bleu(hypotheses, [references]).score


def ct2_backend() -> str:
    """CTranslate2's matrix-multiplication library as its CT2_USE_MKL variable chooses it: a
    figure of CTranslate2 depends on it (docs/decoding-speed.md, the Intel Xeon's section)."""
    setting = os.environ.get("CT2_USE_MKL")
    if setting is None:
        return "CTranslate2: CT2_USE_MKL unset (Intel MKL on an Intel CPU, oneDNN on others)"
    return f"CTranslate2: CT2_USE_MKL={setting}"


def report(results: dict[str, dict[int, list[dict]]], found: FoundModels, about: str,
           threads: int, bleus: dict[str, float]) -> str:
    """Throughput per runtime and batch size (first runs), as a share of its FULL twin's
    (sentences/s; the same sentences) and BLEU, then batch-1 decode time against output
    length (fastest runs) with a linear fit per runtime."""
    lines = [f"model: {about}", f"shortlist: {found.shortlist}", f"search: {found.search}",
             f"{threads} thread(s) per runtime (tf-parallel: {threads} inter-op, 1 intra-op)",
             *([ct2_backend()] if any(name.startswith("ct2-") for name in results) else []),
             "", f"{'runtime':<34}{'batch':>6}{'sentences':>11}{'sent/s':>9}{'tokens/s':>10}"
             f"{'vs full':>9}{'BLEU':>7}"]
    for runtime, by_batch in results.items():
        for batch_size, batches in by_batch.items():
            seconds = _seconds(batches)
            sentences = sum(b["sentences"] for b in batches)
            tokens = sum(b["tokens"] for b in batches)
            full = results.get(renamed(runtime, runtime_threads(runtime, 1)[0] + FULL),
                               {}).get(batch_size)
            ratio = f"{_seconds(full) / seconds:>9.2f}" if full else f"{'-':>9}"
            lines.append(f"{_label(runtime):<34}{batch_size:>6}{sentences:>11}"
                         f"{sentences / seconds:>9.2f}{tokens / seconds:>10.1f}{ratio}"
                         f"{bleus[runtime]:>7.2f}")
    if not all(1 in by_batch for by_batch in results.values()):
        return "\n".join(lines)
    singles = {runtime: (np.array([b["lengths"][0] for b in by_batch[1]], float),
                         np.array([min(b["seconds"]) for b in by_batch[1]]))
               for runtime, by_batch in results.items()}
    lines += ["", f"batch 1, fastest of {REPEATS} runs: mean ms per sentence (ms per output "
              "token) by output length", f"{'tokens':<10}{'sentences':>10}"
              + "".join(f"{runtime:>30}" for runtime in singles)]
    length = next(iter(singles.values()))[0]
    for low in range(0, int(length.max()) + 1, LENGTH_BUCKET):
        chosen = (length >= low) & (length < low + LENGTH_BUCKET)
        if chosen.any():
            cells = "".join(f"{1000 * t[chosen].mean():>21.1f} "
                            f"({1000 * (t / n)[chosen].mean():>5.1f})" for n, t in singles.values())
            lines.append(f"{low:>3}-{low + LENGTH_BUCKET - 1:<6}{int(chosen.sum()):>10}{cells}")
    for runtime, (n, t) in singles.items():
        slope, intercept = np.polyfit(n, t, 1)
        r2 = 1 - np.sum((t - slope * n - intercept) ** 2) / np.sum((t - t.mean()) ** 2)
        lines.append(f"{_label(runtime)}: time = {1000 * intercept:.0f} ms + "
                     f"{1000 * slope:.2f} ms x output tokens (R^2 {r2:.2f})")
    return "\n".join(lines)


def _seconds(batches: list[dict]) -> float:
    """The batches' time, their first runs'."""
    return sum(b["seconds"][0] for b in batches)


def _label(runtime: str) -> str:
    """The report's name of a runtime: what it runs, then its name (`SavedModel (tf:full)`,
    `model_int8.onnx (onnx-int8@1)`)."""
    return f"{RUNTIMES[variant(runtime_threads(runtime, 1)[0])[0]]} ({runtime})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--sentences", type=int, default=200, help="test sentences decoded")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch-sizes", default="1,32", help="comma-separated")
    parser.add_argument("--xla-max-batch", type=int, default=8,
                        help="tf-xla's export.saved_model_xla_max_batch: batches of up to N "
                             "compiled by XLA, larger ones through the graph")
    parser.add_argument("--parallel-searches", type=int,
                        help="tf-parallel's export.saved_model_parallel_searches (default: "
                             "--threads); it also compiles up to --xla-max-batch and runs with "
                             "one intra-op thread")
    parser.add_argument("--runtimes", help=f"comma-separated, of {', '.join(RUNTIMES)}, each "
                        f"with its shortlist, or with {FULL} without it (default: all, both "
                        "ways, tf-bfloat16 where the CPU has native bf16)")
    parser.add_argument("--synthetic-vocab", type=int, metavar="PIECES",
                        help="time a random model of PIECES pieces (the run's spm.model with "
                             "unused pieces added) with a synthetic shortlist table, not the "
                             "run's model")
    parser.add_argument("--preset", choices=("tiny", "small", "base", "big", "student"),
                        help="with --synthetic-vocab: the random model's preset (default: "
                             "the config's model section)")
    parser.add_argument("--worker", choices=NAMES, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.worker:
        worker(args.worker, Path(args.model_dir), json.loads(sys.stdin.readline()),
               args.batch_size, args.threads, args.repeats)
        return 0
    runtimes = args.runtimes.split(",") if args.runtimes else default_runtimes()
    try:
        names = [runtime_threads(runtime, args.threads)[0] for runtime in runtimes]
    except ValueError as error:
        parser.error(str(error))
    if set(names) - set(NAMES):
        parser.error(f"unknown runtimes {', '.join(sorted(set(names) - set(NAMES)))}; "
                     f"choose from {', '.join(NAMES)}")
    if args.preset and not args.synthetic_vocab:
        parser.error("--preset is the random model's of --synthetic-vocab")
    from pipelines.config import load_config

    config = load_config(args.config)
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        about = None
        if args.synthetic_vocab:
            try:
                config, about = synthetic_run(config, Path(scratch) / "synthetic",
                                              args.synthetic_vocab, args.preset)
            except ValueError as error:
                parser.error(str(error))
        found = find_model(config, Path(scratch), list(dict.fromkeys(names)),
                           args.xla_max_batch, args.parallel_searches or args.threads)
        sources, references, spm_model = test_split(config, args.sentences)
        timed_runtimes = list(dict.fromkeys(  # without a shortlist: the FULL variants
            renamed(runtime, name if name in found.directories else variant(name)[0] + FULL)
            for runtime, name in zip(runtimes, names)))
        results: dict[str, dict[int, list[dict]]] = {name: {} for name in timed_runtimes}
        for batch_size in batch_sizes:
            timed = taking_turns(timed_runtimes, found.directories, sources, batch_size,
                                 args.threads)
            for runtime, batches in timed.items():
                results[runtime][batch_size] = batches
        bleus = {name: bleu(by_batch[max(batch_sizes)], references, spm_model)
                 for name, by_batch in results.items()}
        print(report(results, found, about or found.about, args.threads, bleus))
    return 0


if __name__ == "__main__":
    sys.exit(main())
