"""The prepare stage: corpora -> runs/NAME/data/{train shards, dev, test} + vocab/spm.model.

The split files hold raw (untokenized) UTF-8 text, one sentence a line; the train split is in
shard files listed by data/train.json (pipelines/corpus/shards.py), each corpus of
`data.corpora` in its own shards. The corpora stream through `pipelines.corpus.splitting` in two
passes with bounded memory; the shared SentencePiece vocabulary is learned from a uniform
sample of at most `data.vocab_max_sentences` train sentences per side, the target-language
tokens of a multilingual run and the corpus tags its user symbols (a fine-tuning run, `train.init_from`, copies its parent's instead, which must
hold the tags), and the summary's token statistics are estimated from a sample of 100,000
train pairs (`pipelines.corpus.splitting.STATS_SAMPLE`). A distilled run (`data.distill_from`)
copies its teacher's vocabulary and trains on the teacher's translations of the train sources
(`pipelines.corpus.distill`). With `data.alignments` the train pairs' word alignments are
written beside their shards (`pipelines.corpus.alignments`). The lexical shortlist's table
(vocab/shortlist.npz: `pipelines.corpus.shortlist`) is counted from the train shards, by their
word alignments when there are any, else by co-occurrence.

Everything is written under data/.prepare-PID first and moved into place at the end, the train
manifest last: a bad corpus raises before anything is written, and an interrupted prepare
leaves no half-written file (its staging directory is removed by the next prepare).

Example:
    >>> prepare(load_config("demo")).format()  # data/, vocab/spm.model and the statistics
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

from keras_transformer.languages import language_token, target_languages
from keras_transformer.tokenizer import (Tokenizer, model_type, train_sentencepiece,
                                         user_symbols, vocabulary)
from pipelines import InputError
from pipelines.config import DataConfig, PipelineConfig
from pipelines.files import atomic_open, write_lines_atomic
from pipelines.training.parent import find_parent
from pipelines.paths import RunPaths
from pipelines.progress import PassProgress
from pipelines.corpus.alignments import write_alignments
from pipelines.corpus.distill import (DISTILL_DIR, FIELD, check_languages, distill_shards,
                                      find_teacher, with_originals)
from pipelines.corpus.language_id import MODEL_NAME, Languages
from pipelines.corpus.shortlist import write_shortlist
from pipelines.corpus.shards import CorpusShards, is_shard_file, shard_stems, write_manifest
from pipelines.corpus.sources import open_sources
from pipelines.corpus.splitting import Splits, write_splits

STAGING_PREFIX = ".prepare-"


@dataclasses.dataclass(frozen=True)
class PrepareSummary:
    """What prepare wrote and measured (tokens: SentencePiece pieces of train sentences).

    Pair counts are exact; token statistics come from `sampled_pairs` train pairs (all of them
    when `sampled_pairs` equals the train count), `too_long` scaled to the whole split."""

    run_dir: Path
    source: str
    pairs: dict[str, int]  # split -> pairs written
    dropped: dict[str, int]  # reason -> pairs
    shards: int  # train shard files
    sampled_pairs: int  # train pairs the token statistics come from
    too_long: int  # train pairs over max_length, skipped by the data pipeline
    max_length: int
    vocab_size: int
    vocab_type: str
    vocab_parent: Path | None  # the parent's or teacher's spm.model, copied
    avg_tokens: tuple[float, float]  # (source, target) pieces per sentence, BOS/EOS excluded
    padding_efficiency: tuple[float, float]  # (source, target) real / padded batch tokens
    seconds: float
    aligner: str = "none"  # data.alignments
    align_seconds: float = 0.0  # of `seconds`, aligning the train pairs
    corpora: tuple[CorpusShards, ...] = ()  # each corpus's train shards, weight and tag
    duplicates: tuple[int, ...] = ()  # each corpus's pairs dropped as duplicates
    languages: tuple[Languages, ...] = ()  # each corpus's languages checked (data.language_id)
    teacher: str | None = None  # data.distill_from: the teacher run and export that translated
    distilled: tuple[int, int] = (0, 0)  # its lines translated now, found translated before
    distill_seconds: float = 0.0  # of `seconds`, translating with the teacher
    shortlist: str = ""  # what the shortlist's table counted

    def format(self) -> str:
        """The summary as the CLI prints it."""
        pairs = "  ".join(f"{split} {n:,}" for split, n in self.pairs.items())
        dropped = ", ".join(f"{reason} {n:,}" for reason, n in self.dropped.items()) or "none"
        train = self.pairs["train"]
        sample = (f"measured on all {train:,} train pairs" if self.sampled_pairs == train else
                  f"estimated from {self.sampled_pairs:,} sampled pairs of the {train:,} in train")
        return "\n".join([
            f"prepared {self.source} -> {self.run_dir} in {self.seconds:.1f} s",
            f"  pairs     {pairs}  ({self.shards} train shard{'s' * (self.shards > 1)})",
            *self._corpus_lines(),
            f"  dropped   {dropped}",
            *self._language_lines(),
            f"  vocab     {self.vocab_size:,} shared {self.vocab_type} pieces "
            f"({RunPaths(self.run_dir).spm_model}" + (
                f", copied from the {'teacher' if self.teacher else 'parent'}'s "
                f"{self.vocab_parent})" if self.vocab_parent else ")"),
            *self._distill_lines(),
            f"  {sample}:",
            f"  too long  {self.too_long:,} train pair(s) over {self.max_length} tokens "
            f"(skipped when batching)",
            f"  tokens    source {self.avg_tokens[0]:.1f}, target {self.avg_tokens[1]:.1f} "
            f"per train sentence",
            f"  padding   source {self.padding_efficiency[0]:.3f}, target "
            f"{self.padding_efficiency[1]:.3f} real tokens per batch token",
            f"  shortlist {RunPaths(self.run_dir).shortlist.name} from the {self.shortlist}",
        ] + ([f"  aligned   {train:,} train pairs with {self.aligner} in "
              f"{self.align_seconds:.1f} s (data/*.align)"] if self.aligner != "none" else []))

    def _distill_lines(self) -> list[str]:
        if not self.teacher:
            return []
        translated, reused = self.distilled
        return [f"  distilled {translated + reused:,} train sources translated by {self.teacher}"
                + (f" ({reused:,} by an interrupted prepare)" if reused else "")
                + f" in {self.distill_seconds:.1f} s (data/{DISTILL_DIR})"]

    def _language_lines(self) -> list[str]:
        """Unless data.language_id is off, a line naming the languages checked, corpus by
        corpus, and the corpora (or sides) not checked."""
        if not self.languages:
            return []
        names = [corpus.name for corpus in self.corpora]
        checks = [", ".join(f"{side} {code}" for side, code in zip(("source", "target"), sides)
                            if code) or "not checked (languages unknown)"
                  for sides in self.languages]
        if len(checks) > 1:
            checks = [f"{name}: {check}" for name, check in zip(names, checks)]
        return [f"  language  {'; '.join(checks)} ({MODEL_NAME}, data.language_id)"]

    def _corpus_lines(self) -> list[str]:
        """With several corpora, a line for each: its train pairs and weight, and their shares
        of the train split and of the weights, its tag, its duplicates dropped."""
        if len(self.corpora) < 2:
            return []
        width = max(len(corpus.name) for corpus in self.corpora)
        weights = sum(corpus.weight for corpus in self.corpora)
        return [f"  corpus    {corpus.name:<{width}}  {sum(corpus.pairs):,} train pairs "
                f"({sum(corpus.pairs) / self.pairs['train']:.1%}), weight {corpus.weight:g} "
                f"({corpus.weight / weights:.1%})" + (f", tag {corpus.tag}" if corpus.tag else "")
                + f", {duplicates:,} duplicate(s) dropped"
                for corpus, duplicates in zip(self.corpora, self.duplicates)]


def prepare(config: PipelineConfig) -> PrepareSummary:
    """Streams the corpus into split files, learns the vocabulary and measures a sample.

    Raises:
        CorpusError: the corpus is missing, malformed or empty after filtering.
        InputError: `train.init_from` names no usable parent
            (`pipelines.training.parent.find_parent`), or one whose vocabulary lacks a corpus
            tag.
    """
    start = time.monotonic()
    data = config.data
    paths = RunPaths(config.run_path)
    parent = find_parent(config)
    teacher = find_teacher(config)
    if teacher:
        check_languages(data, teacher)
        check_parent_symbols(data, teacher.spm_model, FIELD, "teacher")
        if parent and parent.spm_model.read_bytes() != teacher.spm_model.read_bytes():
            raise InputError(f"{FIELD}: {teacher.runs[0]}: its vocabulary {teacher.spm_model} is "
                             f"not the fine-tuning parent's ({parent.spm_model}); a distilled "
                             f"run shares its teacher's")
    elif parent:
        check_parent_symbols(data, parent.spm_model)
    _remove_staging(paths.data)
    sources = open_sources(data)
    staging = paths.data / f"{STAGING_PREFIX}{os.getpid()}"
    progress = PassProgress()
    try:
        splits = write_splits(sources, data, staging, progress.update)
        copied = teacher.spm_model if teacher else parent.spm_model if parent else None
        model_proto = (copied.read_bytes() if copied else
                       _learn_vocabulary(splits, data, progress))
        staged_model = staging / paths.spm_model.name
        with atomic_open(staged_model, "wb") as file:
            file.write(model_proto)
        distill_start, distilled = time.monotonic(), (0, 0)
        if teacher:
            progress.message(f"distilling: {teacher.describe()} translates the train sources")
            distilled = distill_shards(teacher, staging, _shard_stems(splits),
                                       paths.data / DISTILL_DIR, data.distill_originals)
            if data.distill_originals:
                splits = with_originals(splits)
        distill_seconds = time.monotonic() - distill_start
        too_long, avg_tokens, efficiency = _measure(splits, staged_model, config)
        align_start = time.monotonic()
        if data.alignments != "none":
            write_alignments(staging, _shard_stems(splits), model_proto, progress.message)
        align_seconds = time.monotonic() - align_start
        shortlist = write_shortlist(staging, _shard_stems(splits), model_proto,
                                    data.alignments != "none", staging / paths.shortlist.name,
                                    splits.pairs["train"], progress.message)
        _publish(staging, paths, splits, model_proto, data.alignments)
    finally:
        progress.close()
        shutil.rmtree(staging, ignore_errors=True)
    names = [corpus.name for corpus in splits.corpora]
    return PrepareSummary(
        run_dir=config.run_path, source=data.source or f"corpora {', '.join(names)}",
        pairs=splits.pairs, dropped=splits.dropped,
        shards=sum(len(corpus.pairs) for corpus in splits.corpora),
        sampled_pairs=splits.stats_pairs, too_long=too_long,
        max_length=data.max_length, vocab_size=Tokenizer(model_proto).vocab_size,
        vocab_type=model_type(model_proto), vocab_parent=copied,
        avg_tokens=avg_tokens, padding_efficiency=efficiency, seconds=time.monotonic() - start,
        aligner=data.alignments, align_seconds=align_seconds, corpora=tuple(splits.corpora),
        duplicates=tuple(splits.duplicates), languages=splits.languages,
        teacher=teacher.describe() if teacher else None, distilled=distilled,
        distill_seconds=distill_seconds,
        shortlist=f"{shortlist.statistic} of {shortlist.pairs:,} train pairs")


def _user_symbols(data: DataConfig) -> list[str]:
    """The pieces the vocabulary keeps whole: the target-language tokens of a multilingual run,
    then the corpus tags, each once, in corpus order."""
    languages = ([language_token(language) for language in data.target_languages()]
                 if data.multilingual() else [])
    return languages + list(dict.fromkeys(corpus.tag for corpus in data.corpus_configs()
                                          if corpus.tag))


def check_parent_symbols(data: DataConfig, spm_model: Path, field: str = "train.init_from",
                         whose: str = "parent") -> None:
    """Refuses a corpus tag or a target-language token that the vocabulary a run copies (a
    fine-tuning parent's, or a distilled run's teacher's: `field` names it) would split (not
    one of its user symbols).

    Raises:
        InputError: `data.corpora[I].tag: ...` or `data.corpora[I].tgt_lang: ...`, before any
            work.
    """
    known = user_symbols(spm_model.read_bytes())
    for index, corpus in enumerate(data.corpus_configs()):
        if corpus.tag and corpus.tag not in known:
            raise InputError(
                f"data.corpora[{index}].tag: {corpus.tag} is not a piece of the {whose}'s "
                f"vocabulary {spm_model} ({field}), which would split it; tag the corpus "
                f"with one of the {whose}'s tags ({', '.join(known) or 'it has none'})")
        language = data.target_language(corpus)
        if language and language_token(language) not in known:
            languages = ", ".join(target_languages(known)) or "it is bilingual"
            raise InputError(
                f"data.corpora[{index}].tgt_lang: {language} is not a target language of the "
                f"{whose} {spm_model} ({field}: {languages}), whose vocabulary has no "
                f"{language_token(language)} token")


def _learn_vocabulary(splits: Splits, data: DataConfig, progress: PassProgress) -> bytes:
    """The serialized SentencePiece model learned from the vocabulary sample of `splits`."""
    progress.message(f"learning {data.vocab_size:,} {data.vocab_type} pieces from "
                     f"{min(splits.pairs['train'], data.vocab_max_sentences):,} sampled "
                     f"train sentences per side")
    return train_sentencepiece(list(splits.vocab_sample), vocab_size=data.vocab_size,
                               model_type=data.vocab_type,
                               character_coverage=data.character_coverage,
                               max_sentences=2 * data.vocab_max_sentences, seed=data.seed,
                               user_symbols=_user_symbols(data))


def _measure(splits: Splits, model: Path, config: PipelineConfig
             ) -> tuple[int, tuple[float, float], tuple[float, float]]:
    """On the statistics sample: train pairs over max_length (scaled to the split), pieces per
    sentence and the batches' padding efficiency, tokenized and bucketed as in training."""
    from pipelines.training.data import length_stats

    stats = length_stats(*splits.stats_sample, model, max_length=config.data.max_length)
    too_long = round(stats.too_long * splits.pairs["train"] / stats.pairs)
    avg_tokens = ((stats.src_tokens - stats.pairs) / stats.pairs,  # minus EOS
                  (stats.tgt_tokens - 2 * stats.pairs) / stats.pairs)  # minus BOS, EOS
    return too_long, avg_tokens, stats.padding_efficiency


def _shard_stems(splits: Splits) -> list[str]:
    """The train shards' names without their side's suffix, corpus by corpus."""
    return [stem for stems in shard_stems([(corpus.name, len(corpus.pairs))
                                           for corpus in splits.corpora]) for stem in stems]


def _publish(staging: Path, paths: RunPaths, splits: Splits, model_proto: bytes,
             aligner: str) -> None:
    """Moves the split files (and word alignments) into data/, writes the vocabulary, then the
    train manifest, then removes shards of an earlier prepare that the manifest no longer
    lists."""
    sides = ("src", "tgt") + (("align",) if aligner != "none" else ())
    names = [f"{stem}.{side}" for stem in _shard_stems(splits) for side in sides]
    names += [path.name for split in ("dev", "test") for path in paths.split(split)]
    for name in names:
        os.replace(staging / name, paths.data / name)
    paths.vocab.mkdir(parents=True, exist_ok=True)
    os.replace(staging / paths.spm_model.name, paths.spm_model)
    os.replace(staging / paths.shortlist.name, paths.shortlist)
    write_lines_atomic(paths.spm_vocab,
                       (f"{piece}\t{score:g}" for piece, score in vocabulary(model_proto)))
    write_manifest(paths.data, splits.corpora, aligner if aligner != "none" else None)
    for path in paths.data.iterdir():
        if is_shard_file(path) and path.name not in names:
            path.unlink()


def _remove_staging(data_dir: Path) -> None:
    """Removes what interrupted prepares left."""
    if data_dir.is_dir():
        for path in data_dir.glob(f"{STAGING_PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)
