"""`keras-transformer score`: (source, translation) pairs in, one score line per pair out, in
input order, through the SavedModel's `score` signature, the ONNX export's score.onnx or
CTranslate2's `score_batch`.

Pairs come from two files of parallel lines or one TSV file (SOURCE<TAB>TARGET, or stdin);
each output line is `SCORE<TAB>LOG_PROB`, and with --tokens a third column of
`PIECE=LOG_PROB` items, the target's pieces then `</s>`. SCORE is the log-probability divided
by the GNMT length penalty, as `translate` scores its own translations
(docs/scoring-and-sampling.md, "Scoring translations"). A multilingual model scores
translations into `--target-lang` (required for one, refused for a bilingual model:
`pipelines.translate_command.check_target_lang`).
Files are read through once before any work, so that a bad pair (no tab, another line count,
a target longer than the model accepts) stops the command before it writes anything; output
streams a window at a time and `--output FILE` continues an interrupted job.

Example:
    $ keras-transformer score runs/demo/export --source news.en --target news.fr --tokens
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Iterator

from pipelines import InputError
from pipelines.progress import PassProgress
from pipelines.startup import import_tensorflow_quietly
from pipelines.translate_command import check_target_lang
from pipelines.translate_stream import InputLines, resumed_output, translate_windows


def score_command(args: argparse.Namespace) -> int:
    """Scores the pairs of `args.source` (and `args.target`) with the export's runtime."""
    from export.loading import export_files, open_saved_model, resolve_export
    from export.metadata import ExportMetadata

    if args.batch_size < 1 or args.window < 1:
        raise InputError("--batch-size and --window must be positive")
    for name in filter(None, (args.source, args.target)):
        if name != "-" and not Path(name).is_file():
            raise InputError(f"{name}: {'a directory' if Path(name).is_dir() else 'no such file'}")
    runtime, directory = resolve_export(Path(args.model_dir), args.runtime)
    check_target_lang(args.target_lang, runtime, directory)
    metadata_file, spm_model = export_files(runtime, directory)
    metadata = ExportMetadata.read(metadata_file)
    checker = PairChecker(spm_model, metadata.settings.max_source_pieces,
                          metadata.model.max_length, args.target_lang)
    if args.source != "-":  # read through once: nothing is written for a bad input
        for _ in checked_pairs(args, checker):
            pass
    if runtime == "tf":
        import_tensorflow_quietly()
        scorer = open_saved_model(directory)
    elif runtime == "onnx":
        from export.onnx_runtime import OnnxTranslator

        scorer = OnnxTranslator(directory)
    else:
        from export.ct2_runtime import CTranslate2Translator

        scorer = CTranslate2Translator(directory.parent, directory.name)
    output = Path(args.output) if args.output else None
    with resumed_output(output, 1) as (done, out):
        progress = (PassProgress(sys.stderr, unit="pairs", eta=True)
                    if args.progress or sys.stderr.isatty() else None)

        def score_window(pairs: list[tuple[str, str]], first: int) -> list[str]:
            return [format_score(score, checker, args.tokens) for score in
                    scorer.score_pairs(pairs, args.batch_size, target_lang=args.target_lang)]

        def report(count: int) -> None:
            if progress:
                progress.update("scored", done + count, None)

        inputs: dict[str, InputLines] = {}
        count = translate_windows(
            itertools.islice(checked_pairs(args, checker, inputs), done, None), score_window,
            out, args.window, done, report)
        if progress:
            progress.update("scored", done + count, None, force=True)
            progress.close()
    for name, lines in inputs.items():
        summary = lines.invalid.summary(name)
        if summary:
            print(f"keras-transformer score: {summary}", file=sys.stderr)
    return 0


class PairChecker:
    """Refuses a pair the model would score only cut: a source of more pieces than the export
    reads (a multilingual model's language token included), a target of more than the model
    scores."""

    def __init__(self, spm_model: Path, max_source_pieces: int, model_max_length: int,
                 target_lang: str | None = None) -> None:
        import sentencepiece as spm

        from keras_transformer.decoding_settings import max_target_pieces

        self.processor = spm.SentencePieceProcessor(model_file=str(spm_model))
        self.source_limit = max_source_pieces  # then EOS
        self.target_limit = max_target_pieces(model_max_length)
        self.target_lang = target_lang

    def check(self, source: str, target: str, where: tuple[str, str]) -> None:
        from export.lines import language_line, normalize_spaces

        source = language_line(source, self.target_lang)
        for text, limit, side, place in ((source, self.source_limit, "source", where[0]),
                                         (target, self.target_limit, "target", where[1])):
            pieces = len(self.processor.encode(normalize_spaces(text)))
            if pieces > limit:
                raise InputError(f"{place}: the {side} has {pieces} pieces; the export "
                                 f"scores at most {limit}")

    def piece(self, token_id: int) -> str:
        return self.processor.id_to_piece(token_id)


def checked_pairs(args: argparse.Namespace, checker: PairChecker,
                  inputs: dict[str, InputLines] | None = None) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of the input, each checked; InputError names file and line.
    `inputs` receives each file's InputLines by name (their lines of invalid UTF-8)."""
    inputs = {} if inputs is None else inputs
    source_stream = sys.stdin.buffer if args.source == "-" else open(args.source, "rb")
    with source_stream:
        sources = inputs["stdin" if args.source == "-" else args.source] = \
            InputLines(source_stream)
        if args.target is None:
            for number, row in enumerate(sources, 1):
                where = f"{'stdin' if args.source == '-' else args.source}:{number}"
                if "\t" not in row:
                    raise InputError(f"{where}: no tab between source and target")
                source, target = row.split("\t", 1)
                checker.check(source, target, (where, where))
                yield source, target
            return
        with open(args.target, "rb") as target_stream:
            targets = inputs[args.target] = InputLines(target_stream)
            for number, (source, target) in enumerate(
                    itertools.zip_longest(sources, targets), 1):
                if source is None or target is None:
                    shorter, longer = ((args.source, args.target) if source is None
                                       else (args.target, args.source))
                    raise InputError(f"{shorter} has {number - 1} lines and {longer} more: "
                                     f"the files must be parallel")
                checker.check(source, target, (f"{args.source}:{number}",
                                               f"{args.target}:{number}"))
                yield source, target


def format_score(score, checker: PairChecker, tokens: bool) -> str:
    """`SCORE<TAB>LOG_PROB[<TAB>PIECE=LOG_PROB ...]` and a line break."""
    from export.scores import token_column

    line = f"{score.score:.4f}\t{score.log_prob:.4f}"
    return line + (f"\t{token_column(score, checker.piece)}" if tokens else "") + "\n"
