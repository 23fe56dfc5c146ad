"""The prepare stage: corpus -> runs/NAME/data/{train,dev,test}.{src,tgt} + vocab/spm.model.

The split files hold raw (untokenized) UTF-8 text, one sentence a line. The shared
SentencePiece vocabulary is learned from train.src + train.tgt. Every file is written whole
or not at all; a bad corpus raises before anything is written.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from keras_transformer.tokenizer import Tokenizer, train_sentencepiece, vocabulary
from pipelines.config import PipelineConfig
from pipelines.files import atomic_open, write_lines_atomic
from pipelines.data import length_stats, make_dataset, padding_efficiency
from pipelines.sources import SPLITS, load_corpus


@dataclasses.dataclass(frozen=True)
class PrepareSummary:
    """What prepare wrote and measured (tokens: SentencePiece pieces of train sentences)."""

    run_dir: Path
    source: str
    pairs: dict[str, int]  # split -> pairs written
    dropped: dict[str, int]  # reason -> pairs
    too_long: int  # train pairs over max_length, skipped by the data pipeline
    max_length: int
    vocab_size: int
    vocab_type: str
    avg_tokens: tuple[float, float]  # (source, target) pieces per sentence, BOS/EOS excluded
    padding_efficiency: tuple[float, float]  # (source, target) real / padded batch tokens
    batch_tokens: int
    seconds: float

    def format(self) -> str:
        """The summary as the CLI prints it."""
        pairs = "  ".join(f"{split} {n:,}" for split, n in self.pairs.items())
        dropped = ", ".join(f"{reason} {n:,}" for reason, n in self.dropped.items()) or "none"
        return "\n".join([
            f"prepared {self.source} -> {self.run_dir} in {self.seconds:.1f} s",
            f"  pairs     {pairs}",
            f"  dropped   {dropped}",
            f"  too long  {self.too_long:,} train pair(s) over {self.max_length} tokens "
            f"(skipped when batching)",
            f"  vocab     {self.vocab_size:,} shared {self.vocab_type} pieces "
            f"({self.run_dir / 'vocab' / 'spm.model'})",
            f"  tokens    source {self.avg_tokens[0]:.1f}, target {self.avg_tokens[1]:.1f} "
            f"per train sentence",
            f"  padding   source {self.padding_efficiency[0]:.3f}, target "
            f"{self.padding_efficiency[1]:.3f} real tokens per batch token "
            f"({self.batch_tokens} token budget)",
        ])


def prepare(config: PipelineConfig) -> PrepareSummary:
    """Reads the corpus, writes the split files, learns the vocabulary and measures them.

    Raises:
        CorpusError: the corpus is missing, malformed or empty after filtering.
    """
    start = time.monotonic()
    data = config.data
    corpus = load_corpus(data)
    data_dir, vocab_dir = config.run_path / "data", config.run_path / "vocab"
    for split in SPLITS:
        pairs = corpus.splits[split]
        write_lines_atomic(data_dir / f"{split}.src", (src for src, _ in pairs))
        write_lines_atomic(data_dir / f"{split}.tgt", (tgt for _, tgt in pairs))
    train_src, train_tgt = data_dir / "train.src", data_dir / "train.tgt"
    model_proto = train_sentencepiece([train_src, train_tgt], vocab_size=data.vocab_size,
                                      model_type=data.vocab_type,
                                      character_coverage=data.character_coverage,
                                      max_sentences=data.vocab_max_sentences, seed=data.seed)
    model = vocab_dir / "spm.model"
    with atomic_open(model, "wb") as file:
        file.write(model_proto)
    write_lines_atomic(vocab_dir / "spm.vocab",
                       (f"{piece}\t{score:g}" for piece, score in vocabulary(model_proto)))
    stats = length_stats(train_src, train_tgt, model, max_length=data.max_length)
    batches = make_dataset(train_src, train_tgt, model, batch_tokens=data.batch_tokens,
                           max_length=data.max_length, shuffle_buffer=data.shuffle_buffer,
                           seed=data.seed)
    return PrepareSummary(
        run_dir=config.run_path, source=data.source,
        pairs={split: len(pairs) for split, pairs in corpus.splits.items()},
        dropped=corpus.dropped, too_long=stats.too_long, max_length=data.max_length,
        vocab_size=Tokenizer(model_proto).vocab_size, vocab_type=data.vocab_type,
        avg_tokens=((stats.src_tokens - stats.pairs) / stats.pairs,  # minus EOS
                    (stats.tgt_tokens - 2 * stats.pairs) / stats.pairs),  # minus BOS, EOS
        padding_efficiency=padding_efficiency(batches), batch_tokens=data.batch_tokens,
        seconds=time.monotonic() - start)
