"""`keras-transformer translate`: lines in, translations out in input order, through the
runtime of an export (TensorFlow, ONNX Runtime or CTranslate2), with n-best lists and forced
target prefixes where the SavedModel gives them; bad options are refused before any work."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import BinaryIO

from pipelines import InputError
from pipelines.gpu import warn_unused_gpu_driver
from pipelines.startup import import_tensorflow_quietly


def translate_command(args: argparse.Namespace) -> int:
    """`keras-transformer translate`: lines of a file or stdin -> translations on stdout."""
    from export.loading import open_translator, resolve_export

    if any(value is not None and value < 1 for value in (args.beam, args.batch_size, args.n_best)):
        raise InputError("--beam, --batch-size and --n-best must be positive")
    if args.input != "-" and not Path(args.input).is_file():
        problem = "a directory, not a file" if Path(args.input).is_dir() else "no such file"
        raise InputError(f"{args.input}: {problem}")
    runtime, directory = resolve_export(Path(args.model_dir), args.runtime)
    if args.n_best is not None:
        _check_n_best(args.n_best, runtime, directory, args.beam)
    stream = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    with stream:
        lines = _read_lines(stream)
    prefixes = None
    if args.prefix_file:
        prefixes = _read_prefixes(Path(args.prefix_file), lines, runtime, directory, args)
    if runtime == "tf":
        import_tensorflow_quietly()
        warn_unused_gpu_driver("translate", "translating")
    translator = open_translator(Path(args.model_dir), args.runtime, args.beam)
    if prefixes is not None:
        translations = translator.prefixed_lines(lines, prefixes, args.batch_size)
        output = [text + "\n" for text in translations]
    elif args.n_best is None:
        output = [text + "\n" for text in translator.translate_lines(lines, args.batch_size)]
    else:
        output = [f"{index} ||| {text} ||| {score:.4f}\n"
                  for index, hypotheses in enumerate(translator.nbest_lines(lines,
                                                                            args.batch_size))
                  for text, score in hypotheses[:args.n_best]]
    sys.stdout.buffer.write("".join(output).encode("utf-8"))
    return 0


def _read_lines(stream: BinaryIO) -> list[str]:
    """The lines of a byte stream, without line ends; invalid UTF-8 read as SentencePiece
    reads it."""
    from export.lines import decode_line

    return [decode_line(line).rstrip("\r\n") for line in stream]


def _read_prefixes(path: Path, lines: list[str], runtime: str, directory: Path,
                   args: argparse.Namespace) -> list[str]:
    """The prefixes of --prefix-file, checked against the lines before any work.

    Raises:
        InputError: no such file, an ONNX export, --n-best too, or `prefix_problem`'s.
    """
    from export.lines import prefix_problem
    from export.metadata import SAVED_MODEL_EXTRA, SPM_FILE, saved_model_metadata

    if not path.is_file():
        raise InputError(f"--prefix-file {path}: no such file")
    if runtime != "tf" or args.n_best is not None:
        raise InputError("--prefix-file: the SavedModel's translate_prefix signature forces "
                         "prefixes; not with --runtime onnx or --n-best")
    with open(path, "rb") as file:
        prefixes = _read_lines(file)
    problem = prefix_problem(lines, prefixes, directory / SAVED_MODEL_EXTRA / SPM_FILE,
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
