"""`keras-transformer translate`: lines in, translations out in input order, through the
runtime of an export (TensorFlow, ONNX Runtime or CTranslate2), with n-best lists and forced
target prefixes where the SavedModel gives them, word alignments and markup carried through
(`pipelines.translate_markup`); bad options are refused before any work.
Input of any size streams through a window at a time (`pipelines.translate_stream`), with a
progress line on stderr on a terminal (or with --progress).
A multilingual model (`keras_transformer.languages`) translates every line into
`--target-lang`, which it requires and a bilingual model refuses (`check_target_lang`).
With `--ensemble`, model_dir and the other exports (or runs) translate as one ensemble in
process (`export.loading.open_ensemble`), checked first (`export.loading.ensemble_exports`):
SavedModels of one spm.model and dtype, with model_dir's decoding settings.

Example:
    $ keras-transformer translate runs/demo/export --runtime onnx < news.en > news.fr
    $ keras-transformer translate runs/multi/export --target-lang de < news.en > news.de
    $ keras-transformer translate runs/a --ensemble runs/b --ensemble runs/c < news.en > news.fr
"""
from __future__ import annotations

import argparse
import itertools
import sys
from functools import partial
from pathlib import Path
from typing import Callable

from export.scores import token_column
from keras_transformer.decoding_settings import DecodingSettingsError, SamplingSettings
from keras_transformer.languages import target_language_problem
from pipelines import InputError
from pipelines.gpu import warn_unused_gpu_driver
from pipelines.progress import PassProgress
from pipelines.startup import import_tensorflow_quietly
from pipelines.translate_glossary import GlossaryTranslator, check_glossary
from pipelines.translate_markup import aligned_rows, check_markup
from pipelines.translate_stream import (InputLines, LineNotes, TranslateWindow,
                                        resumed_output, translate_windows)


def translate_command(args: argparse.Namespace) -> int:
    """`keras-transformer translate`: lines of a file or stdin -> translations on stdout or in
    `--output FILE` (continued if an earlier job was interrupted), a window at a time."""
    from export.loading import ensemble_exports, open_ensemble, open_translator, resolve_export

    values = (args.beam, args.batch_size, args.n_best, args.window)
    if any(value is not None and value < 1 for value in values):
        raise InputError("--beam, --batch-size, --n-best and --window must be positive")
    if args.input != "-" and not Path(args.input).is_file():
        problem = "a directory, not a file" if Path(args.input).is_dir() else "no such file"
        raise InputError(f"{args.input}: {problem}")
    output = Path(args.output) if args.output else None
    if output is not None and output.is_dir():
        raise InputError(f"--output {output}: a directory, not a file")
    if args.ensemble and args.runtime not in (None, "tf"):
        raise InputError(f"--ensemble: SavedModels only (one search over the members' "
                         f"log-probabilities, in process); not with --runtime {args.runtime}")
    runtime, directory = resolve_export(Path(args.model_dir), "tf" if args.ensemble
                                        else args.runtime)
    members = ensemble_exports([Path(args.model_dir), *map(Path, args.ensemble)]
                               ) if args.ensemble else None
    check_target_lang(args.target_lang, runtime, directory)
    if args.n_best is not None:
        _check_n_best(args.n_best, runtime, directory, args.beam)
    pieces = _check_scores(args, runtime, directory)
    sampling = _sampling(args, runtime, directory)
    _check_alignments(args, runtime, directory, sampling is not None)
    glossary = check_glossary(args, runtime, directory, sampling is not None)
    stream = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    with stream:
        size = None if args.input == "-" else Path(args.input).stat().st_size
        source = InputLines(stream, size)
        lines: InputLines | list[str] = source
        prefixes = None
        if args.prefix_file:  # checked against every line before any work: held in memory
            lines = list(lines)
            prefixes = _read_prefixes(Path(args.prefix_file), lines, runtime, directory, args)
        if args.markup and args.input == "-":  # parsed before any work: held in memory
            lines = list(lines)
            check_markup("stdin", lines)
        elif args.markup:  # parsed in a first pass over the file
            with open(args.input, "rb") as file:
                check_markup(args.input, InputLines(file))
        if runtime == "tf":
            import_tensorflow_quietly()
            warn_unused_gpu_driver("translate", "translating")
        translator = (open_ensemble(members, args.beam, args.shortlist) if members else
                      open_translator(Path(args.model_dir), args.runtime, args.beam,
                                      args.shortlist))
        if runtime == "tf" and (args.alignments or args.markup):  # before any output
            translator.check_output("translate_terms" if glossary else "translate_aligned",
                                    "alignment")
        termed = None if glossary is None else GlossaryTranslator(
            translator, glossary, "stdin" if args.input == "-" else args.input, args.batch_size,
            args.target_lang)
        cut, translate = _noting_cut_lines(
            _window_translator(translator, args, prefixes, pieces, sampling, termed), runtime,
            directory, args.target_lang)
        with resumed_output(output, args.n_best or 1) as (done, out):
            if done:
                print(f"keras-transformer translate: {output} holds {done:,} translated "
                      f"lines; going on from line {done + 1:,}", file=sys.stderr)
            progress = (PassProgress(sys.stderr, unit="lines", eta=True)
                        if args.progress or sys.stderr.isatty() else None)

            def report(count: int) -> None:
                if progress:
                    progress.update("translated", done + count, getattr(lines, "fraction", None))

            count = translate_windows(itertools.islice(lines, done, None), translate, out,
                                      args.window, done, report)
            if progress:
                progress.update("translated", done + count, None, force=True)
                progress.close()
    for notes in (source.invalid, cut):
        summary = notes.summary("stdin" if args.input == "-" else args.input)
        if summary:
            print(f"keras-transformer translate: {summary}", file=sys.stderr)
    return 0


def check_target_lang(target_lang: str | None, runtime: str, directory: Path) -> None:
    """Refuses, before any work, a --target-lang the export cannot translate into (a code it
    does not know; any code for a bilingual model) and none for a multilingual model.

    Raises:
        InputError: `keras_transformer.languages.target_language_problem`'s line.
    """
    from export.loading import export_files
    from export.metadata import ExportMetadata

    known = ExportMetadata.read(export_files(runtime, directory)[0]).target_languages
    problem = target_language_problem(target_lang, known)
    if problem:
        raise InputError(f"--target-lang: {problem}")


def _noting_cut_lines(translate: TranslateWindow, runtime: str, directory: Path,
                      target_lang: str | None) -> tuple[LineNotes, TranslateWindow]:
    """`translate`, noting each line longer than the export reads (the graphs translate its
    first `DecodingSettings.max_source_pieces`, a multilingual model's language token
    included) for the summary at the end."""
    import sentencepiece as spm

    from export.lines import language_line, normalize_spaces
    from export.loading import export_files
    from export.metadata import ExportMetadata

    metadata_file, spm_model = export_files(runtime, directory)
    limit = ExportMetadata.read(metadata_file).settings.max_source_pieces
    processor = spm.SentencePieceProcessor(model_file=str(spm_model))
    cut = LineNotes(f"over the export's source limit (only the first {limit} pieces "
                    f"translated)")

    def noting(lines: list[str], first: int) -> list[str]:
        for index, line in enumerate(lines):
            if len(processor.encode(normalize_spaces(language_line(line, target_lang)))) > limit:
                cut.add(first + index + 1)
        return translate(lines, first)

    return cut, noting


def _window_translator(translator, args: argparse.Namespace, prefixes: list[str] | None,
                       pieces: Callable[[int], str] | None,
                       sampling: SamplingSettings | None,
                       termed: GlossaryTranslator | None = None) -> TranslateWindow:
    """The output of a window of lines: translations (drawn at random with `sampling`, holding
    their glossary terms with `termed`),
    `SCORE<TAB>TRANSLATION` rows with --scores (and `<TAB>PIECE=LOG_PROB ...` with `pieces`:
    id -> piece), n-best rows `LINE ||| TEXT ||| SCORE` (LINE counting input lines from 0), or
    translations that begin with their prefixes; all into --target-lang."""
    batch = {"batch_size": args.batch_size, "target_lang": args.target_lang}

    def translate(lines: list[str], first: int) -> list[str]:
        if args.alignments or args.markup:
            return aligned_rows(
                partial(termed.aligned_lines, first=first) if termed else
                partial(translator.aligned_lines, **batch),
                lines, args.markup, args.alignments)
        if sampling is not None and not (args.scores or pieces):
            return [text + "\n" for text, _ in translator.sampled_lines(
                lines, sampling, first, **batch)]
        if args.scores or pieces or termed:
            scored = (termed.scored_lines(lines, first) if termed else
                      translator.sampled_lines(lines, sampling, first, **batch)
                      if sampling else translator.scored_lines(lines, **batch))
            if not (args.scores or pieces):
                return [text + "\n" for text, _ in scored]
            rows = [f"{score:.4f}\t{text}" for text, score in scored]
            if pieces:
                pairs = [(line, text) for line, (text, _) in zip(lines, scored)]
                rows = [f"{row}\t{token_column(score, pieces)}" for row, score in
                        zip(rows, translator.score_pairs(pairs, **batch))]
            return [row + "\n" for row in rows]
        if prefixes is not None:
            return [text + "\n" for text in translator.prefixed_lines(
                lines, prefixes[first:first + len(lines)], **batch)]
        if args.n_best is None:
            return [text + "\n" for text in translator.translate_lines(lines, **batch)]
        return ["".join(f"{first + index} ||| {text} ||| {score:.4f}\n"
                        for text, score in hypotheses[:args.n_best])
                for index, hypotheses in enumerate(translator.nbest_lines(lines, **batch))]

    return translate


def _sampling(args: argparse.Namespace, runtime: str,
              directory: Path) -> SamplingSettings | None:
    """The sampling settings of the --sampling-* options and --seed (None without a
    --sampling-* option), refused before any work where they cannot apply.

    Raises:
        InputError: a value out of range, --seed alone, sampling with --beam, --n-best or
            --prefix-file, or from ONNX Runtime.
    """
    given = {"top_k": args.sampling_topk, "top_p": args.sampling_topp,
             "temperature": args.sampling_temperature}
    if all(value is None for value in given.values()):
        if args.seed is not None:
            raise InputError("--seed: sampling only; add --sampling-topk, --sampling-topp or "
                             "--sampling-temperature")
        return None
    if args.beam is not None or args.n_best is not None or args.prefix_file:
        raise InputError("--sampling-*: not with --beam, --n-best or --prefix-file (beam "
                         "search)")
    if args.tokens:  # a drawn translation's pieces need not be those its text reads as
        raise InputError("--sampling-*: not with --tokens (use --scores, or score the "
                         "translations)")
    if runtime == "onnx":
        raise InputError(f"--sampling-*: {directory} is an ONNX export, which decodes by beam "
                         f"search only; use --runtime tf (reproducible) or --runtime ct2")
    try:
        sampling = SamplingSettings(**{key: value for key, value in given.items()
                                       if value is not None}, seed=args.seed or 0)
    except DecodingSettingsError as error:
        option = "--seed" if error.field == "seed" else f"--sampling-{error.field.replace('_', '')}"
        raise InputError(f"{option}: {error}") from None
    if runtime == "ct2":
        print("keras-transformer translate: CTranslate2 cannot repeat a draw (its random "
              "generators ignore the seed, CTranslate2 issue #1757); --runtime tf can",
              file=sys.stderr)
    return sampling


def _check_alignments(args: argparse.Namespace, runtime: str, directory: Path,
                      sampling: bool) -> None:
    """Refuses, before any work, --alignments or --markup where they cannot apply (`sampling`:
    a --sampling-* option was given).

    Raises:
        InputError: with --n-best, --prefix-file, --scores, --tokens or sampling, or from
            ONNX Runtime.
    """
    if not (args.alignments or args.markup):
        return
    option = "--markup" if args.markup else "--alignments"
    if args.n_best is not None or args.prefix_file or args.scores or args.tokens or sampling:
        raise InputError(f"{option}: not with --n-best, --prefix-file, --scores, --tokens or "
                         f"--sampling-*")
    if runtime == "onnx":
        raise InputError(f"{option}: {directory} is an ONNX export, which gives no word "
                         f"alignments; use --runtime tf (the SavedModel's align signature) "
                         f"or --runtime ct2")


def _check_scores(args: argparse.Namespace, runtime: str,
                  directory: Path) -> Callable[[int], str] | None:
    """Refuses, before any work, scores with --n-best or --prefix-file; for --tokens, the
    export's id -> piece function.

    Raises:
        InputError: one of those.
    """
    if not (args.scores or args.tokens):
        return None
    if args.n_best is not None or args.prefix_file:
        raise InputError("--scores and --tokens: not with --n-best (whose rows carry scores) "
                         "or --prefix-file")
    if not args.tokens:
        return None
    import sentencepiece as spm

    from export.loading import export_files

    return spm.SentencePieceProcessor(model_file=str(export_files(runtime, directory)[1])
                                      ).id_to_piece


def _read_prefixes(path: Path, lines: list[str], runtime: str, directory: Path,
                   args: argparse.Namespace) -> list[str]:
    """The prefixes of --prefix-file, checked against the lines before any work.

    Raises:
        InputError: no such file, an ONNX export, --n-best too, or `prefix_problem`'s.
    """
    from export.lines import language_line, prefix_problem
    from export.metadata import SAVED_MODEL_EXTRA, SPM_FILE, saved_model_metadata

    if not path.is_file():
        raise InputError(f"--prefix-file {path}: no such file")
    if runtime != "tf" or args.n_best is not None:
        raise InputError("--prefix-file: the SavedModel's translate_prefix signature forces "
                         "prefixes; not with --runtime onnx or --n-best")
    with open(path, "rb") as file:
        prefixes = list(InputLines(file))
    problem = prefix_problem([language_line(line, args.target_lang) for line in lines],
                             prefixes, directory / SAVED_MODEL_EXTRA / SPM_FILE,
                             saved_model_metadata(directory))
    if problem:
        raise InputError(f"--prefix-file {path}: {problem}")
    return prefixes


def _check_n_best(n_best: int, runtime: str, directory: Path, beam: int | None) -> None:
    """Raises InputError, before any work, for an n-best list the export cannot give."""
    if runtime != "tf":
        raise InputError(f"--n-best: {directory} is not a SavedModel, whose translate_nbest "
                         f"signature gives n-best lists; use --runtime tf")
    from export.metadata import saved_model_metadata

    beam = beam or saved_model_metadata(directory).settings.beam_size
    if n_best > beam:
        raise InputError(f"--n-best {n_best}: at most the beam size ({beam}); raise --beam")
