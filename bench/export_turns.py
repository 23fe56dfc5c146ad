"""Two exports of one model (before and after a change) decoding the same sources in turns in one
process: whether their target ids are the same in every batch, the largest score difference,
and the median target tokens/s of each over the turns. Turns alternate which export goes first,
so that a drift of the machine falls on both; one untimed pass each comes first.

    .venv/bin/python bench/export_turns.py BEFORE_DIR AFTER_DIR SOURCE_FILE
        [--model model.onnx] [--sentences 128] [--batch-sizes 1,32] [--turns 6] [--threads N]

BEFORE_DIR and AFTER_DIR are both ONNX export directories (export/onnx: model.onnx,
model_int8.onnx, spm.model; `--model` names the one to run, in ONNX Runtime sessions as
`export.onnx_runtime` opens them) or both SavedModel versions (export/saved_model/N: its
`translate_ids` signature in a TF1 session as TF Serving runs it, `bench/decode_speed.py`'s,
with the shortlist as exported). SOURCE_FILE holds one source line a line (a run's
data/test.src). Tokens are the best hypotheses' pieces (ids above EOS's), as
`bench/decode_speed.py` counts them less their EOS.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import sentencepiece as spm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from export.metadata import (MODEL_FILE, SAVED_MODEL_EXTRA, SAVED_MODEL_GRAPH,  # noqa: E402
                             SPM_FILE)
from export.onnx_runtime import padded  # noqa: E402

Decode = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # ids -> (scores, target ids)


def export_decoder(directory: Path, model: str, threads: int | None) -> tuple[Decode, Path]:
    """How to decode a batch of source ids with the export in `directory` (an ONNX directory
    or a SavedModel version), and its spm.model."""
    if (directory / SAVED_MODEL_GRAPH).is_file():
        from decode_speed import session_signature  # bench/decode_speed.py

        cores = threads or os.cpu_count() or 1
        signature = session_signature(directory, "translate_ids", cores, cores,
                                      shortlisted=True)

        def decode(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            outputs = signature(ids)
            return outputs["score"], outputs["target_ids"]

        return decode, directory / SAVED_MODEL_EXTRA / SPM_FILE
    import onnxruntime as ort

    from export.onnx_runtime import session_options

    session = ort.InferenceSession(str(directory / model), session_options(threads))
    return (lambda ids: tuple(session.run(["score", "target_ids"], {"source_ids": ids})),
            directory / SPM_FILE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("source", type=Path)
    parser.add_argument("--model", default=MODEL_FILE)
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    decoders = {name: export_decoder(directory, args.model, args.threads)
                for name, directory in (("before", args.before), ("after", args.after))}
    processor = spm.SentencePieceProcessor(model_file=str(decoders["before"][1]))
    lines = args.source.read_text(encoding="utf-8").splitlines()[:args.sentences]
    eos = processor.eos_id()
    rows = [processor.encode(line) + [eos] for line in lines]
    label = "SavedModel" if (args.before / SAVED_MODEL_GRAPH).is_file() else args.model
    for batch_size in (int(size) for size in args.batch_sizes.split(",")):
        batches = [padded(rows[start:start + batch_size]).astype(np.int32)
                   for start in range(0, len(rows), batch_size)]
        outputs = {name: [decode(batch) for batch in batches]
                   for name, (decode, _) in decoders.items()}
        same = sum(np.array_equal(before[1], after[1])
                   for before, after in zip(outputs["before"], outputs["after"]))
        score_difference = max(float(np.max(np.abs(before[0] - after[0])))
                               for before, after in zip(outputs["before"], outputs["after"]))
        tokens = sum(int((ids > eos).sum()) for _, ids in outputs["before"])
        rates: dict[str, list[float]] = {"before": [], "after": []}
        for turn in range(args.turns):
            for name in ("before", "after") if turn % 2 == 0 else ("after", "before"):
                start = time.perf_counter()
                for batch in batches:
                    decoders[name][0](batch)
                rates[name].append(tokens / (time.perf_counter() - start))
        before, after = (statistics.median(rates[name]) for name in ("before", "after"))
        print(f"{label} batch {batch_size}: target ids the same in {same} of "
              f"{len(batches)} batches, largest score difference {score_difference:.2g}; "
              f"target tokens/s before {before:,.0f}, after {after:,.0f} (median of "
              f"{args.turns} turns): after/before {after / before:.3f}")


if __name__ == "__main__":
    main()
