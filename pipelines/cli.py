"""`keras-transformer`: the command line, one subcommand per pipeline stage, and `doctor`.

Each subcommand loads the config and calls its stage's function; bad input (a config or a
corpus) prints one line to stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path
from typing import BinaryIO, Sequence

from export import ExportError
from pipelines import InputError
from pipelines.config import PipelineConfig, check_corpus_files, load_config
from pipelines.run import STAGE_NAMES, STAGES, stale_reason
from pipelines.startup import import_tensorflow_quietly

# Errors of the machine, not of the program: reported in one line, exit status 2.
SYSTEM_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one subcommand; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="The Transformer of 'Attention Is All You Need' as an NMT pipeline.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    prepare = commands.add_parser(
        "prepare", help="corpus -> runs/NAME/data/ (train shards, dev, test) + vocab/spm.model")
    prepare.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    prepare.set_defaults(handler=_prepare)
    train = commands.add_parser(
        "train", help="runs/NAME/{data,vocab} -> checkpoints/ckpt-STEP + logs/ (TensorBoard)")
    train.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    train.set_defaults(handler=_train)
    average = commands.add_parser(
        "average", help="the last train.average_last checkpoints -> checkpoints/averaged")
    average.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    average.set_defaults(handler=_average)
    export = commands.add_parser(
        "export", help="the averaged (else latest) checkpoint -> export/saved_model/VERSION "
        "(TF Serving) + export/onnx/{model,translator}.onnx")
    export.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    export.add_argument("--format", help="comma-separated formats: saved_model,onnx,"
                        "ctranslate2 (default: the config's export.formats)")
    export.add_argument("--checkpoint", help="a checkpoint prefix (default: the averaged one)")
    export.set_defaults(handler=_export)
    translate = commands.add_parser(
        "translate", help="lines (INPUT or stdin) -> translations (stdout), in order")
    translate.add_argument("model_dir", help="an export: runs/NAME/export, its saved_model/ "
                           "(newest version), one version, or its onnx/")
    translate.add_argument("input", nargs="?", default="-", help="a UTF-8 file (default: stdin)")
    translate.add_argument("--runtime", choices=("tf", "onnx", "ct2"),
                           help="TensorFlow (SavedModel), ONNX Runtime or CTranslate2 (default: "
                           "tf if found)")
    translate.add_argument("--beam", type=int, help="beam size (default: the exported one)")
    translate.add_argument("--batch-size", type=int, default=32)
    translate.add_argument("--n-best", type=int, metavar="N",
                           help="print the N best translations of each line (N <= the beam "
                           "size; SavedModel only) as `LINE ||| TRANSLATION ||| SCORE`, LINE "
                           "counting input lines from 0, best first")
    translate.add_argument("--prefix-file", metavar="FILE",
                           help="a target prefix per input line (empty: none) that each "
                           "translation must begin with (SavedModel only)")
    translate.set_defaults(handler=_translate)
    evaluate = commands.add_parser(
        "evaluate", help="beam search on a split -> eval/SPLIT.hyp, eval/SPLIT.json "
        "(sacrebleu BLEU and chrF)")
    evaluate.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    evaluate.add_argument("--checkpoint", help="a checkpoint prefix (default: the averaged one)")
    evaluate.add_argument("--split", choices=("dev", "test"), default="test")
    evaluate.set_defaults(handler=_evaluate)
    run = commands.add_parser(
        "run", help="prepare -> train -> average -> evaluate -> export, skipping stages "
        "that are up to date")
    run.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    stage = run.add_mutually_exclusive_group()
    stage.add_argument("--from", dest="start", choices=STAGE_NAMES,
                       help="rerun this stage and every later one")
    stage.add_argument("--only", choices=STAGE_NAMES, help="run this stage alone")
    run.set_defaults(handler=_run)
    visualize = commands.add_parser(
        "visualize", help="attention heat maps (PNG) per layer and head for a sentence")
    visualize.add_argument("model_dir", help="an export: runs/NAME/export or a SavedModel")
    visualize.add_argument("sentence", help="the source sentence to translate and plot")
    visualize.add_argument("--output", default="attention", help="directory of the PNG files")
    visualize.set_defaults(handler=_visualize)
    doctor = commands.add_parser(
        "doctor", help="versions, GPUs, CPU flags, dtype and strategy, for a bug report; "
        "status 1 when this install cannot compute")
    doctor.set_defaults(handler=_doctor)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        if getattr(args, "config", None):  # config errors come before TensorFlow's start-up
            config = load_config(args.config)
            if _reads_corpus(args, config):
                check_corpus_files(args.config, config)
        # translate may run on ONNX Runtime, without TensorFlow; doctor reports a failed import
        if args.command not in ("translate", "doctor"):
            import_tensorflow_quietly()
        return args.handler(args)
    except (InputError, ExportError) as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"keras-transformer {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout left (`translate ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141
    except OSError as error:  # a full disk, a read-only or unreadable directory
        if error.errno not in SYSTEM_ERRORS:
            raise
        where = f"{error.filename}: " if error.filename else ""
        reason = (error.strerror or os.strerror(error.errno)).lower()
        print(f"keras-transformer {args.command}: error: {where}{reason}",
              file=sys.stderr)
        return 2


def _reads_corpus(args: argparse.Namespace, config: PipelineConfig) -> bool:
    """Whether the command will run the prepare stage (which reads the corpus files)."""
    if args.command != "run":
        return args.command == "prepare"
    requested = args.only or args.start
    if requested:
        return requested == "prepare"
    return stale_reason(config, STAGES[STAGE_NAMES.index("prepare")]) is not None


def _prepare(args: argparse.Namespace) -> int:
    from pipelines.prepare import prepare

    print(prepare(load_config(args.config)).format())
    return 0


def _train(args: argparse.Namespace) -> int:
    from pipelines.strategy import cluster_spec, exit_worker
    from pipelines.train import TrainingDiverged, train

    _warn_unused_gpu_driver("train", "training")
    status = 0
    try:
        print(train(load_config(args.config)).format())
    except TrainingDiverged as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        status = 1
    if cluster_spec():  # a multi-worker process: end it before interpreter exit can hang
        exit_worker(status)
    return status


def _average(args: argparse.Namespace) -> int:
    from pipelines.average import average

    print(average(load_config(args.config)).format())
    return 0


def _export(args: argparse.Namespace) -> int:
    from pipelines.export import export_run

    formats = args.format.split(",") if args.format else None
    print(export_run(load_config(args.config), formats, args.checkpoint).format())
    return 0


def _translate(args: argparse.Namespace) -> int:
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
        _warn_unused_gpu_driver("translate", "translating")
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
    from export.saved_model import SPM_FILE, read_metadata

    if not path.is_file():
        raise InputError(f"--prefix-file {path}: no such file")
    if runtime != "tf" or args.n_best is not None:
        raise InputError("--prefix-file: the SavedModel's translate_prefix signature forces "
                         "prefixes; not with --runtime onnx or --n-best")
    with open(path, "rb") as file:
        prefixes = _read_lines(file)
    problem = prefix_problem(lines, prefixes, directory / "assets.extra" / SPM_FILE,
                             read_metadata(directory))
    if problem:
        raise InputError(f"--prefix-file {path}: {problem}")
    return prefixes


def _check_n_best(n_best: int, runtime: str, directory: Path, beam: int | None) -> None:
    """Raises InputError, before any work, for an n-best list the export cannot give."""
    if runtime != "tf":
        raise InputError(f"--n-best: {directory} is not a SavedModel, whose translate_nbest "
                         f"signature gives n-best lists; use --runtime tf")
    from export.saved_model import read_metadata

    beam = beam or read_metadata(directory)["beam_size"]
    if n_best > beam:
        raise InputError(f"--n-best {n_best}: at most the beam size ({beam}); raise --beam")


def _evaluate(args: argparse.Namespace) -> int:
    from pipelines.evaluate import evaluate

    print(evaluate(load_config(args.config), args.checkpoint, args.split).format())
    return 0


def _run(args: argparse.Namespace) -> int:
    from pipelines.run import report, run

    _warn_unused_gpu_driver("run", "running")
    config = load_config(args.config)
    run(config, start=args.start, only=args.only)
    print(report(config))
    return 0


def _visualize(args: argparse.Namespace) -> int:
    from pipelines.visualize import visualize

    for path in visualize(Path(args.model_dir), args.sentence, Path(args.output)):
        print(path)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from pipelines.doctor import diagnose

    report = diagnose()
    print(report.format())
    return report.status


def _warn_unused_gpu_driver(command: str, doing: str) -> None:
    """One stderr line when an NVIDIA driver is present but TensorFlow lists no GPU."""
    from pipelines.gpu import unused_driver_warning

    warning = unused_driver_warning()
    if warning:
        print(f"keras-transformer {command}: warning: {warning}; {doing} on the CPU",
              file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
