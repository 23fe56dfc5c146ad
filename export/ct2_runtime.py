"""CTranslate2 runner of a CTranslate2 export directory (`export.ctranslate2`); imports no
TensorFlow.

Lines are tokenized as the exported graphs tokenize them (runs of whitespace and NUL as one
space, cut to `DecodingSettings.max_source_pieces`, then EOS; a line without pieces translates
to ""), decoded with the exported beam size and alpha, and detokenized to one line each.

A multilingual model (`keras_transformer.languages`) reads its target language as the first
piece of its SOURCE, as it was trained: each method takes `target_lang` (a code for every line,
or one per line), and a line's source pieces are those of its text after the language's token
(`export.lines.language_line`, the graphs' join), refused with ValueError for a code the model
does not know. CTranslate2's `target_prefix` has no role: it would force pieces at the start
of the translation, where the model never saw a language token (its decoder starts from BOS).
Word alignments leave the token's source word out, as the graphs do.

Example:
    translator = CTranslate2Translator(Path("runs/demo/export/ctranslate2"), "int8")
    translator.translate_lines(["In the beginning."])  # ["Au commencement."]
    translator.translate_lines(["In the beginning."], target_lang="fr")  # multilingual
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import ctranslate2
import sentencepiece as spm

from export import ExportError
from export.lines import (decode_line, language_line, line_languages, normalize_spaces,
                          scored_in_batches, translate_in_batches)
from export.metadata import METADATA_FILE, QUANTIZATIONS, SPM_FILE, ExportMetadata
from export.scores import Pair, PairScore, gnmt_score, score_in_batches
from export.word_alignment import align_words, format_alignment
from keras_transformer.decoding_settings import SamplingSettings, max_target_pieces

VMAP_NAME = "vmap.txt"  # a model's vocabulary mapping (its lexical shortlist), CTranslate2's name
Languages = str | Sequence[str] | None  # `target_lang`: `export.lines.line_languages`
LINE_BREAK_PIECES, SPACE_PIECE = ("<0x0A>", "<0x0D>"), "<0x20>"


class CTranslate2Translator:
    """One quantization of a CTranslate2 export, on the CPU.

    Args:
        directory: a CTranslate2 export directory (holding float32/, int8/, spm.model).
        quantization: which model to run (QUANTIZATIONS).
        threads: intra-op threads (default: one per CPU core).
        shortlist: beam search among the lexical shortlist's candidates where the export has
            one (its vocabulary mapping, `use_vmap`: CTranslate2 projects a batch onto the
            union of its sentences' candidates); false: the whole vocabulary.
    """

    def __init__(self, directory: Path, quantization: str = "float32",
                 threads: int | None = None, shortlist: bool = True) -> None:
        self.directory = Path(directory)
        self.use_vmap = shortlist and (self.directory / quantization / VMAP_NAME).is_file()
        if quantization not in QUANTIZATIONS:
            raise ExportError(f"unknown CTranslate2 quantization {quantization!r}; choose from "
                              f"{', '.join(QUANTIZATIONS)}")
        self.metadata = ExportMetadata.read(self.directory / METADATA_FILE)
        self.processor = spm.SentencePieceProcessor(model_file=str(self.directory / SPM_FILE))
        self.translator = ctranslate2.Translator(
            str(self.directory / quantization), device="cpu", compute_type=quantization,
            intra_threads=threads or os.cpu_count() or 1)
        self.line_breaks = {self.processor.piece_to_id(piece) for piece in LINE_BREAK_PIECES}
        self.space = self.processor.piece_to_id(SPACE_PIECE)

    def translate(self, texts: Sequence[str | bytes], target_lang: Languages = None
                  ) -> list[str]:
        """One batch of lines -> their translations."""
        return [self._detokenize(pieces)
                for pieces in self.translate_pieces(self._source_pieces(texts, target_lang))]

    def _source_pieces(self, texts: Sequence[str | bytes],
                       target_lang: Languages = None) -> list[list[str]]:
        """Lines (and their target languages) -> source pieces as the graphs read them
        (max_source_pieces, no EOS)."""
        limit = self.metadata.settings.max_source_pieces
        languages = line_languages(target_lang, len(texts), self.metadata.target_languages)
        return [self.processor.encode(normalize_spaces(language_line(decode_line(text),
                                                                     language)),
                                      out_type=str)[:limit]
                for text, language in zip(texts, languages)]

    def translate_pieces(self, sources: list[list[str]], **options: Any) -> list[list[str]]:
        """Source pieces (EOS not included) -> the best translation's pieces (EOS not
        included), beam search with the exported settings (or `translate_batch` `options`);
        no pieces -> none."""
        return [result.hypotheses[0] if result else []
                for result in self._translate_batch(sources, **options)]

    def _translate_batch(self, sources: list[list[str]], **options: Any
                         ) -> list[ctranslate2.TranslationResult | None]:
        """`translate_batch` of the sources that have pieces (None for the others), with the
        exported beam size, alpha and output limit unless `options` say otherwise."""
        real = [i for i, pieces in enumerate(sources) if pieces]
        results: list[ctranslate2.TranslationResult | None] = [None] * len(sources)
        if not real:
            return results
        longest = max(len(sources[i]) + 1 for i in real)  # EOS included
        settings = self.metadata.settings
        options = {"beam_size": settings.beam_size, "length_penalty": settings.alpha,
                   "use_vmap": self.use_vmap,
                   "max_decoding_length": settings.output_limit(
                       longest, self.metadata.model.max_length), **options}
        batch = self.translator.translate_batch([sources[i] for i in real], max_input_length=0,
                                                **options)
        for i, result in zip(real, batch):
            results[i] = result
        return results

    def aligned_lines(self, lines: Sequence[str | bytes], batch_size: int = 32,
                      target_lang: str | None = None) -> list[tuple[str, str]]:
        """(translation, `I-J ...` word alignment) of each line, in order: the attention of
        the export's alignment layer (`return_attention`) merged to words as the SavedModel's
        `align` merges it; a line without pieces: ("", "").

        In a batch of several lines CTranslate2 4.8.5 returns another line's attention as the
        first row of a hypothesis (the step that predicts its first piece; later rows are
        right), which moved first words' pairs: that row is taken from a one-step decode of
        each line alone (the same for every hypothesis of a line: its input is BOS)."""
        skip = int(bool(self.metadata.target_languages))  # the language token's word

        def translate(batch: list[str | bytes]) -> list[tuple[str, str]]:
            sources = self._source_pieces(batch, target_lang)
            first_rows = self._translate_batch(  # its EOS kept, so that the row is there
                sources, return_attention=True, beam_size=1, max_batch_size=1,
                max_decoding_length=1, return_end_token=True)
            return [(self._detokenize(result.hypotheses[0]), format_alignment(align_words(
                [first.attention[0][0], *result.attention[0][1:]], source,
                result.hypotheses[0], skip))) if result else ("", "")
                for source, result, first in zip(sources, self._translate_batch(
                    sources, return_attention=True), first_rows)]

        return translate_in_batches(translate, lines, batch_size)

    def scored_lines(self, lines: Sequence[str | bytes], batch_size: int = 32,
                     target_lang: str | None = None) -> list[tuple[str, float]]:
        """(translation, score) of each line, in order: the translation's pieces scored by
        `score_batch` (CTranslate2's own beam score divides by length ** alpha, not by the
        GNMT penalty); a line without pieces: ("", 0), as the TF graph gives it."""
        def translate(batch: list[str | bytes]) -> dict:
            sources = self._source_pieces(batch, target_lang)
            return self._scored(sources, self.translate_pieces(sources))

        return scored_in_batches(translate, lines, batch_size)

    def sampled_lines(self, lines: Sequence[str | bytes], sampling: SamplingSettings,
                      first_index: int = 0, batch_size: int = 32,
                      target_lang: str | None = None) -> list[tuple[str, float]]:
        """(translation drawn at random, score) of each line, in order, drawn from the whole
        vocabulary (as the graphs' translate_sample, without the shortlist). The generators are
        seeded with `sampling.seed` + first_index, yet CTranslate2's draws do not repeat (its
        worker threads' generators ignore the seed: CTranslate2 issue #1757)."""
        ctranslate2.set_random_seed(sampling.seed + first_index)

        def translate(batch: list[str | bytes]) -> dict:
            sources = self._source_pieces(batch, target_lang)
            return self._scored(sources, self.translate_pieces(
                sources, beam_size=1, use_vmap=False, sampling_topk=sampling.top_k,
                sampling_topp=sampling.top_p, sampling_temperature=sampling.temperature))

        return scored_in_batches(translate, lines, batch_size)

    def score_pairs(self, pairs: Sequence[Pair], batch_size: int = 32,
                    target_lang: str | None = None) -> list[PairScore]:
        """The score of each (line, translation) pair, in order: `score_batch`, sources cut
        as `translate` cuts them, targets uncut."""
        def score_batch(batch: list[Pair]) -> list[PairScore]:
            targets = [self.processor.encode(normalize_spaces(target), out_type=str)
                       for _, target in batch]
            return self._score_pieces(
                self._source_pieces([source for source, _ in batch], target_lang), targets)

        return score_in_batches(score_batch, pairs, batch_size)

    def _score_pieces(self, sources: list[list[str]], targets: list[list[str]]
                      ) -> list[PairScore]:
        """`score_batch` of source and target pieces (no EOS) -> a PairScore each."""
        results = self.translator.score_batch(sources, targets, max_input_length=0)
        alpha = self.metadata.settings.alpha
        return [PairScore(gnmt_score(sum(result.log_probs), len(result.log_probs), alpha),
                          sum(result.log_probs),
                          [self.processor.piece_to_id(piece) for piece in result.tokens],
                          list(result.log_probs)) for result in results]

    def _scored(self, sources: list[list[str]], translations: list[list[str]]) -> dict:
        """{"translation", "score"} of translations (pieces) of `sources` (pieces): each
        scored by `score_batch`; a source without pieces scores 0, as the TF graph gives it. A
        translation that reached the model's positions without EOS is scored on its first
        max_length - 1 pieces (score_batch adds the EOS, for which no position is left)."""
        limit = max_target_pieces(self.metadata.model.max_length)
        scores = self._score_pieces(sources, [pieces[:limit] for pieces in translations])
        return {"translation": [self._detokenize(pieces) for pieces in translations],
                "score": [score.score if source else 0.0
                          for score, source in zip(scores, sources)]}

    def translate_lines(self, lines: Sequence[str | bytes], batch_size: int = 32,
                        target_lang: str | None = None) -> list[str]:
        """Translations of `lines` in their order, decoded in batches of similar lengths."""
        return translate_in_batches(lambda batch: self.translate(batch, target_lang), lines,
                                    batch_size)

    def _detokenize(self, pieces: list[str]) -> str:
        """Pieces -> one line: a generated line break or carriage return reads as a space."""
        ids = [self.processor.piece_to_id(piece) for piece in pieces]
        return self.processor.decode([self.space if i in self.line_breaks else i for i in ids])
