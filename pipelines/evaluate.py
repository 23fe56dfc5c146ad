"""Evaluate: beam search on a split, then sacrebleu BLEU and chrF of the detokenized output
against the raw references (eval/SPLIT.hyp and eval/SPLIT.json); for a multilingual model, of
the lines into each target language too (told by each source's target-language token).

Example:
    >>> evaluate(load_config("demo"), split="test").format()  # BLEU and chrF of eval/test.hyp
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import sacrebleu

from export.lines import translate_prepared
from keras_transformer.languages import split_language
from pipelines import InputError
from pipelines.config import PipelineConfig
from pipelines.files import atomic_open, check_writable, read_lines, write_lines_atomic
from pipelines.paths import RunPaths

SPLITS = ("dev", "test")


@dataclasses.dataclass(frozen=True)
class EvaluationReport:
    """The scores of one split, as written to eval/SPLIT.json."""

    split: str
    checkpoint: str
    sentences: int
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    beam_size: int
    alpha: float
    stop: str
    seconds: float
    hypotheses: str
    references: str
    # A multilingual model's scores per target language: sentences, bleu, chrf.
    languages: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def format(self) -> str:
        width = max(map(len, self.languages), default=0)
        return "\n".join([
            f"evaluated {self.split} ({self.sentences:,} sentences, beam {self.beam_size}, "
            f"alpha {self.alpha}) in {self.seconds:.0f} s with {self.checkpoint}",
            f"  BLEU  {self.bleu:.2f}  {self.bleu_signature}",
            f"  chrF  {self.chrf:.2f}  {self.chrf_signature}",
            *(f"  into {language:<{width}}  BLEU {scores['bleu']:.2f}  chrF "
              f"{scores['chrf']:.2f}  ({scores['sentences']:,} sentences)"
              for language, scores in self.languages.items()),
            f"  hypotheses {self.hypotheses}",
        ])


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict[str, float | str]:
    """sacrebleu corpus BLEU (13a tokenization) and chrF with their signatures."""
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    return {
        "bleu": bleu.corpus_score(hypotheses, [references]).score,
        "chrf": chrf.corpus_score(hypotheses, [references]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def evaluate(config: PipelineConfig, checkpoint: str | None = None,
             split: str = "test") -> EvaluationReport:
    """Translates data/SPLIT.src with the checkpoint (default: the averaged one, else the
    latest) and scores it against data/SPLIT.tgt; writes eval/SPLIT.hyp and eval/SPLIT.json,
    each whole."""
    from pipelines.models import load_model_for_inference, run_translator

    if split not in SPLITS:
        raise InputError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
    paths = RunPaths(config.run_path)
    source_path, reference_path = paths.split(split)
    sources, references = _split_lines(source_path), _split_lines(reference_path)
    check_writable(paths.hypotheses(split).parent)  # before decoding, not after
    # Decoding runs in the config's dtype policy (`auto` resolved for this machine): bfloat16
    # matmuls are several times faster than float32 on CPUs with AMX and on GPUs.
    model, checkpoint = load_model_for_inference(config, checkpoint,
                                                 config.model.resolved_dtype()[0])
    settings = config.evaluate
    translator = run_translator(config, model)
    start = time.perf_counter()
    hypotheses = translate_prepared(  # a multilingual model's lines into their token's
        lambda texts, language: translator.translate_lines(texts, settings.batch_size,
                                                           language),
        sources, translator.target_languages)
    seconds = time.perf_counter() - start
    hypotheses_path = paths.hypotheses(split)
    write_lines_atomic(hypotheses_path, hypotheses)
    report = EvaluationReport(
        split=split, checkpoint=str(checkpoint), sentences=len(sources),
        **corpus_scores(hypotheses, references), beam_size=settings.beam_size,
        alpha=settings.alpha, stop=settings.stop, seconds=seconds, hypotheses=str(hypotheses_path),
        references=str(reference_path),
        languages=language_scores(sources, hypotheses, references))
    with atomic_open(paths.scores(split), "w") as file:
        json.dump(dataclasses.asdict(report), file, indent=2)
        file.write("\n")
    return report


def language_scores(sources: list[str], hypotheses: list[str], references: list[str]
                    ) -> dict[str, dict[str, float]]:
    """Target language -> the sentences, BLEU and chrF of the lines into it, a line's language
    told by its source's target-language token (`keras_transformer.languages`); {} when no
    source has a token (a bilingual model)."""
    lines: dict[str, list[int]] = {}
    for number, source in enumerate(sources):
        language, _ = split_language(source)
        if language:
            lines.setdefault(language, []).append(number)
    return {language: {
        "sentences": len(numbers),
        **{key: value for key, value in corpus_scores(
            [hypotheses[i] for i in numbers], [references[i] for i in numbers]).items()
           if key in ("bleu", "chrf")}} for language, numbers in lines.items()}


def _split_lines(path: Path) -> list[str]:
    if not path.is_file():
        problem = "a directory, not a file" if path.is_dir() else "missing"
        raise InputError(f"{path}: {problem}; run `keras-transformer prepare` first")
    return read_lines(path)
