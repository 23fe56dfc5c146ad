"""`keras-transformer`: the command line, one subcommand per pipeline stage, and `doctor`.

Each subcommand loads the config and calls its stage's function; bad input (a config or a
corpus) prints one line to stderr and exits with status 2.

Example:
    >>> main(["run", "demo"])  # keras-transformer run demo; returns the exit status
"""
from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from pathlib import Path
from typing import Sequence

from export import ExportError
from pipelines import InputError
from pipelines.config import PipelineConfig, check_corpus_files, load_config
from pipelines.run import STAGE_NAMES, STAGES, stale_reason
from pipelines.gpu import warn_unused_gpu_driver
from pipelines.startup import default_log_level, import_tensorflow_quietly
from pipelines.score_command import score_command
from pipelines.translate_command import translate_command
from pipelines.translate_stream import WINDOW

# Errors of the machine, not of the program: reported in one line, exit status 2.
SYSTEM_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one subcommand; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="The Transformer of 'Attention Is All You Need' as an NMT pipeline.")
    parser.add_argument("--verbose", action="store_true",
                        help="show third-party log lines and warnings (TensorFlow's, ONNX "
                        "Runtime's quantizer) that are left out of normal output")
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
    export.add_argument("--checkpoint", help="a checkpoint prefix (default: the one of "
                        "evaluate.weights: the averaged one, else the latest)")
    export.add_argument("--ensemble", action="append", metavar="CONFIG",
                        help="another run's config (repeat for more): export its model "
                        "(evaluate.weights) with this run's as one ensemble, one beam search "
                        "over their mean log-probabilities, into this run's export/ (one "
                        "spm.model; no ctranslate2)")
    export.set_defaults(handler=_export)
    translate = commands.add_parser(
        "translate", help="lines (INPUT or stdin) -> translations (stdout), in order")
    translate.add_argument("model_dir", help="an export: runs/NAME/export, its saved_model/ "
                           "(newest version), one version, or its onnx/")
    translate.add_argument("input", nargs="?", default="-", help="a UTF-8 file (default: stdin)")
    translate.add_argument("--runtime", choices=("tf", "onnx", "ct2"),
                           help="TensorFlow (SavedModel), ONNX Runtime or CTranslate2 (default: "
                           "tf if found)")
    translate.add_argument("--target-lang", metavar="LANG",
                           help="the language to translate into (a multilingual model's, e.g. "
                           "fr; required for one, refused for a bilingual model)")
    translate.add_argument("--ensemble", action="append", metavar="MODEL_DIR",
                           help="another export or run (repeat for more) translating with "
                           "model_dir as one ensemble: one beam search over their mean "
                           "log-probabilities, with model_dir's settings (SavedModels of one "
                           "spm.model; --runtime tf)")
    translate.add_argument("--beam", type=int, help="beam size (default: the exported one)")
    translate.add_argument("--no-shortlist", dest="shortlist", action="store_false",
                           help="search every target piece, not the export's lexical shortlist "
                           "(SavedModel and CTranslate2; an ONNX export holds its own)")
    translate.add_argument("--batch-size", type=int, default=32)
    translate.add_argument("--n-best", type=int, metavar="N",
                           help="print the N best translations of each line (N <= the beam "
                           "size; SavedModel only) as `LINE ||| TRANSLATION ||| SCORE`, LINE "
                           "counting input lines from 0, best first")
    translate.add_argument("--sampling-topk", type=int, metavar="K",
                           help="sample each translation at random among the K most likely "
                           "tokens per step (0: all) instead of beam search (back-translation)")
    translate.add_argument("--sampling-topp", type=float, metavar="P",
                           help="sample among the fewest most likely tokens whose "
                           "probabilities reach P (default 1: all)")
    translate.add_argument("--sampling-temperature", type=float, metavar="T",
                           help="divide log-probabilities by T before sampling (default 1)")
    translate.add_argument("--seed", type=int, help="sampling: line i is drawn with seed + i, "
                           "the same in any batch and run (default 0)")
    translate.add_argument("--scores", action="store_true",
                           help="print `SCORE<TAB>TRANSLATION`: the score beam search gave (the "
                           "log-probability over the GNMT length penalty)")
    translate.add_argument("--tokens", action="store_true",
                           help="--scores and a third column: each piece and </s> as "
                           "PIECE=LOG_PROB")
    translate.add_argument("--prefix-file", metavar="FILE",
                           help="a target prefix per input line (empty: none) that each "
                           "translation must begin with (SavedModel only)")
    translate.add_argument("--alignments", action="store_true",
                           help="print `TRANSLATION ||| I-J ...`: source word I aligned to "
                           "target word J (SavedModel and CTranslate2)")
    translate.add_argument("--markup", action="store_true",
                           help="lines with inline tags (<b>..</b>, <x id=\"1\"/>): translate "
                           "the text, put each tag back around the aligned words")
    translate.add_argument("--glossary", metavar="FILE",
                           help="a TSV of SOURCE TERM<TAB>TARGET TERM: each source term found "
                           "in a line (whole words, case-sensitive) puts its target term in the "
                           "translation (SavedModel only)")
    translate.add_argument("--output", metavar="FILE",
                           help="write to FILE instead of stdout; a FILE that an interrupted "
                           "job left is continued after the lines it holds whole")
    translate.add_argument("--window", type=int, default=WINDOW, metavar="LINES",
                           help=f"lines read, sorted by length and translated at once, bounding "
                           f"memory (default {WINDOW})")
    translate.add_argument("--progress", action="store_true",
                           help="a progress line on stderr even when it is not a terminal")
    translate.set_defaults(handler=translate_command)
    score = commands.add_parser(
        "score", help="(source, translation) pairs -> `SCORE<TAB>LOG_PROB` per pair, in order")
    score.add_argument("model_dir", help="an export or a run directory (runs/NAME)")
    score.add_argument("source", help="source lines, or a TSV file of SOURCE<TAB>TARGET rows "
                       "without TARGET (- : stdin)")
    score.add_argument("target", nargs="?", help="the translations, line by line")
    score.add_argument("--runtime", choices=("tf", "onnx", "ct2"),
                       help="the SavedModel's score signature, ONNX Runtime (score.onnx) or "
                       "CTranslate2 (default: tf if found)")
    score.add_argument("--target-lang", metavar="LANG",
                       help="the translations' language (a multilingual model's, e.g. fr; "
                       "required for one, refused for a bilingual model)")
    score.add_argument("--tokens", action="store_true",
                       help="a third column: each target piece and </s> as PIECE=LOG_PROB")
    score.add_argument("--batch-size", type=int, default=32)
    score.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout; a "
                       "FILE that an interrupted job left is continued")
    score.add_argument("--window", type=int, default=WINDOW, metavar="PAIRS",
                       help=f"pairs read and scored at once (default {WINDOW})")
    score.add_argument("--progress", action="store_true",
                       help="a progress line on stderr even when it is not a terminal")
    score.set_defaults(handler=score_command)
    evaluate = commands.add_parser(
        "evaluate", help="beam search on a split -> eval/SPLIT.hyp, eval/SPLIT.json "
        "(sacrebleu BLEU and chrF)")
    evaluate.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    evaluate.add_argument("--checkpoint", help="a checkpoint prefix (default: the one of "
                        "evaluate.weights: the averaged one, else the latest)")
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
    if args.verbose:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
        logging.basicConfig(level=logging.INFO)
    default_log_level(args.command)
    try:
        if getattr(args, "config", None):  # config errors come before TensorFlow's start-up
            config = load_config(args.config)
            if _reads_corpus(args, config):
                check_corpus_files(args.config, config)
        # translate and score may run without TensorFlow; doctor reports a failed import
        if args.command not in ("translate", "score", "doctor"):
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
    from pipelines.corpus.prepare import prepare

    print(prepare(load_config(args.config)).format())
    return 0


def _train(args: argparse.Namespace) -> int:
    from pipelines.training.interruption import TrainingStopped
    from pipelines.training.strategy import cluster_spec, exit_worker
    from pipelines.training.train import NothingToTrain, TrainingDiverged, train

    warn_unused_gpu_driver("train", "training")
    status = 0
    try:
        print(train(load_config(args.config)).format())
    except NothingToTrain as notice:
        print(f"keras-transformer train: {notice}", file=sys.stderr)
    except TrainingDiverged as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        status = 1
    except TrainingStopped as error:  # preempted (75), a worker lost (69)
        print(f"keras-transformer train: {error}", file=sys.stderr)
        status = error.status
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
    ensemble = [load_config(member) for member in args.ensemble or ()]
    print(export_run(load_config(args.config), formats, args.checkpoint, ensemble).format())
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from pipelines.evaluate import evaluate

    print(evaluate(load_config(args.config), args.checkpoint, args.split).format())
    return 0


def _run(args: argparse.Namespace) -> int:
    from pipelines.run import report, run
    from pipelines.training.interruption import TrainingStopped

    warn_unused_gpu_driver("run", "running")
    config = load_config(args.config)
    try:
        run(config, start=args.start, only=args.only)
    except TrainingStopped as error:  # the train stage preempted: the later stages wait
        print(f"keras-transformer run: {error}", file=sys.stderr)
        return error.status
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


if __name__ == "__main__":
    sys.exit(main())
