"""What bench/decode_speed.py decodes: each runtime's model directory, with and without the
lexical shortlist (a run's export, made or completed where needed), the test sentences as the
exports read them, and a synthetic run (a random model of any vocabulary size with a synthetic
shortlist table) for timing the shortlist at a size no trained run has.

A runtime's name with the suffix FULL (`tf:full`, `onnx-int8:full`, `ct2-float32:full`) is the
runtime without its shortlist, searching the whole vocabulary; without it, as exported. Where
each searches:
* SavedModel (`tf`, `tf-bfloat16`): one version for both, the `:full` worker switching its
  `shortlist_enabled` variable off (`export.saved_model.switch_session_shortlist`);
  `tf-xla:full` and `tf-parallel:full` are exports without the shortlist, as switching it off
  would give up XLA's search for the graph's (`keras_transformer.compiled_search`);
* ONNX Runtime: an export made without the shortlist (its graphs hold it as constants);
* CTranslate2: one conversion, its vocabulary mapping used (`use_vmap`) or not.
An export without a shortlist (a run prepared before shortlists, or `export.shortlist: false`)
has the FULL rows only.

The synthetic run (`synthetic_run`) takes the run's spm.model with unused pieces added up to
the vocabulary size (CONTROL pieces, which no text encodes to, so the test sources keep their
ids) and a table of SYNTHETIC_SEED's draws: each source piece's candidates are distinct
target pieces drawn one after the other from a Zipf distribution (exponent 1) over the pieces
not always allowed, the lower the id the likelier (rank 1 the lowest id), and the frequent
pieces are the lowest ids. A random model decodes every sentence to the length limit with or
without it, so the two rows compare the cost of a step.

Example:
    config, about = synthetic_run(load_config("demo"), Path(scratch) / "synthetic", 32_000)
    found = find_model(config, Path(scratch), ["tf", "tf:full", "ct2-float32:full"], 8, 2)
    found.directories["tf:full"]  # the SavedModel version its worker switches to full
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

from keras_transformer.decoding_settings import DecodingSettings
from pipelines.paths import RunPaths

if TYPE_CHECKING:  # imported where used: TensorFlow loads with them
    from export.saved_model import SavedModelTranslator
    from export.translator import Translator
    from keras_transformer.shortlist_table import ShortlistTable
    from pipelines.config import PipelineConfig

FULL = ":full"  # a runtime name's suffix: the runtime searching the whole vocabulary
SAVED_MODELS = ("tf", "tf-bfloat16", "tf-xla", "tf-parallel")
SYNTHETIC_SEED = 0  # the synthetic table's draws
DRAWS_PER_PIECE = 4  # draws per stored candidate of the synthetic table (distinct kept)


class FoundModels(NamedTuple):
    """The runtimes to time in order, each with its model directory; what the model is; the
    shortlist the rows without FULL search with, or why there is none; the export's search."""
    directories: dict[str, Path]
    about: str
    shortlist: str
    search: str


def variant(runtime: str) -> tuple[str, bool]:
    """(the runtime's name without FULL, whether it searches with the shortlist)."""
    return runtime.removesuffix(FULL), not runtime.endswith(FULL)


def find_model(config: PipelineConfig, scratch: Path, runtimes: list[str], xla_max_batch: int,
               parallel_searches: int) -> FoundModels:
    """The model directory of each of `runtimes` (names of decode_speed.RUNTIMES, with or
    without FULL; without a shortlist, all FULL), exporting into `scratch` what the run's
    export lacks: a SavedModel of another dtype (float32, or mixed_bfloat16 for
    `tf-bfloat16`), tf-xla's with beam search compiled for batches of up to `xla_max_batch`
    sentences, tf-parallel's as tf-xla's with its graph search in `parallel_searches` parts,
    the exports without the shortlist, and an ONNX or CTranslate2 export where the run's is
    missing, of another model or of another shortlist, each from the SavedModel's weights."""
    from export.saved_model import SavedModelTranslator

    version, onnx_dir, about = _run_export(config, scratch)
    saved = SavedModelTranslator(version)
    sizes = saved.metadata.shortlist
    if sizes is None:
        runtimes = list(dict.fromkeys(name + FULL for name, _ in map(variant, runtimes)))
        shortlist = ("none (the run has no vocab/shortlist.npz, or export.shortlist is "
                     "false): every row searches the whole vocabulary")
    else:
        shortlist = (f"{sizes[0]} candidates a source piece and the {sizes[1]} most frequent "
                     f"pieces; {FULL} rows: the same runtime searching the whole vocabulary")
    made: dict[str, Path] = {}

    def once(key: str, make: Callable[[], Path]) -> Path:
        if key not in made:
            made[key] = make()
        return made[key]

    def onnx(shortlisted: bool) -> Path:
        if _has_shortlist(onnx_dir) == (shortlisted and sizes is not None):
            return onnx_dir
        from export.onnx import export_onnx

        directory = scratch / ("onnx-shortlist" if shortlisted else "onnx-full")
        export_onnx(_translator(saved, "float32", shortlisted), directory)
        return directory

    def ctranslate2() -> Path:
        paths = RunPaths(config.run_path)
        if (version.parent == paths.saved_model and (paths.ctranslate2 / "int8").is_dir()
                and _has_shortlist(paths.ctranslate2) == (sizes is not None)):
            return paths.ctranslate2
        from export.ctranslate2 import export_ctranslate2

        export_ctranslate2(_translator(saved, "float32", True), scratch / "ctranslate2")
        return scratch / "ctranslate2"

    def saved_model(name: str, shortlisted: bool) -> Path:
        from export.saved_model import export_saved_model

        dtype = "mixed_bfloat16" if name == "tf-bfloat16" else "float32"
        compiled = xla_max_batch if name in ("tf-xla", "tf-parallel") else 0
        searches = parallel_searches if name == "tf-parallel" else 1
        shortlisted = shortlisted or not compiled  # the graph's: the worker's switch
        metadata = saved.metadata
        if (metadata.dtype, metadata.xla_max_batch, metadata.parallel_searches,
                shortlisted or sizes is None) == (dtype, compiled, searches, True):
            return version
        directory = (f"saved_model-{dtype}-xla{compiled}-searches{searches}-"
                     f"{'shortlist' if shortlisted else 'full'}")
        return once(directory, lambda: export_saved_model(
            _translator(saved, dtype, shortlisted, compiled, searches), scratch / directory))

    directories = {}
    for runtime in runtimes:
        name, shortlisted = variant(runtime)
        if name in SAVED_MODELS:
            directories[runtime] = saved_model(name, shortlisted)
        elif name.startswith("onnx"):
            directories[runtime] = once(f"onnx-{shortlisted}", lambda: onnx(shortlisted))
        else:
            directories[runtime] = once("ctranslate2", ctranslate2)
    settings = saved.metadata.settings
    search = (f"beam {settings.beam_size}, alpha {settings.alpha}, stop {settings.stop}; "
              "CTranslate2 ends a sentence at the step its best extension ends (as stop best)")
    return FoundModels(directories, about, shortlist, search)


def _run_export(config: PipelineConfig, scratch: Path) -> tuple[Path, Path, str]:
    """(SavedModel version, ONNX directory, what the model is): the run's export if it is
    complete, else an export of its checkpoint, else of a random model into `scratch`."""
    from export.versions import latest_version

    paths = RunPaths(config.run_path)
    version = latest_version(paths.saved_model)
    if version and (paths.onnx / "model_int8.onnx").is_file():
        return version, paths.onnx, f"the export of {config.run_path}"
    from pipelines.checkpoints.weights import weights_checkpoint

    try:
        weights_checkpoint(paths)
    except ValueError:
        version, onnx_dir = _export_random(config, scratch)
        return version, onnx_dir, (
            f"UNTRAINED: a random {config.model.preset} model (no checkpoint in "
            f"{config.run_path}); it decodes every sentence to the length limit")
    from pipelines.export import export_run

    summary = export_run(config)
    return summary.saved_model, summary.onnx, f"{summary.checkpoint}, just exported"


def _translator(saved: SavedModelTranslator, dtype: str, shortlisted: bool,
                xla_max_batch: int = 0, parallel_searches: int = 1) -> Translator:
    """A Translator of the SavedModel's weights and settings in `dtype`, with its shortlist
    or without, searching as `xla_max_batch` and `parallel_searches` say."""
    from export.translator import Translator

    rebuilt = saved.rebuild(dtype)
    return Translator(rebuilt.model, rebuilt.spm_model_proto, rebuilt.settings,
                      xla_max_batch=xla_max_batch, parallel_searches=parallel_searches,
                      ensemble=rebuilt.metadata().ensemble,
                      shortlist=rebuilt.shortlist if shortlisted else None)


def _has_shortlist(directory: Path) -> bool:
    """Whether the ONNX or CTranslate2 export in `directory` searches with a shortlist."""
    from export.metadata import METADATA_FILE, ExportMetadata

    return ExportMetadata.read(directory / METADATA_FILE).shortlist is not None


def _export_random(config: PipelineConfig, directory: Path) -> tuple[Path, Path]:
    """(SavedModel version, ONNX directory) of a random model of the config's, with the run's
    shortlist, exported into `directory`."""
    import keras

    from export.onnx import export_onnx
    from export.saved_model import export_saved_model
    from keras_transformer.tokenizer import Tokenizer
    from pipelines.models import build_model, run_shortlist, run_translator

    keras.utils.set_random_seed(0)
    model_proto = RunPaths(config.run_path).spm_model.read_bytes()
    model = build_model(config, Tokenizer(model_proto).vocab_size, "float32")
    translator = run_translator(config, model, shortlist=run_shortlist(config))
    export_onnx(translator, directory / "onnx")
    return export_saved_model(translator, directory / "saved_model"), directory / "onnx"


def synthetic_run(config: PipelineConfig, directory: Path, vocab_size: int,
                  preset: str | None = None) -> tuple[PipelineConfig, str]:
    """(the config of a run in `directory` for a random model of `vocab_size` pieces, what
    the model is): the run's spm.model with unused pieces up to `vocab_size`, a synthetic
    shortlist table (`synthetic_table`), the run's data (linked), and the config's model
    section (`preset: auto` as the run chose it) or `preset`'s.

    Raises:
        ValueError: `vocab_size` below the run's vocabulary.
        InputError: the run has no spm.model, or `auto` and no size chosen yet.
    """
    from pipelines.config.model import ModelSection
    from pipelines.models import run_tokenizer, sized_model

    paths = RunPaths(config.run_path)
    pieces = run_tokenizer(paths).vocab_size
    if vocab_size < pieces:
        raise ValueError(f"a synthetic vocabulary of {vocab_size:,} pieces: the run's has "
                         f"{pieces:,}")
    model = ModelSection(preset=preset) if preset else sized_model(config)
    synthetic = dataclasses.replace(config, run_dir=str(directory), model=model)
    target = RunPaths(directory)
    target.vocab.mkdir(parents=True)
    target.spm_model.write_bytes(padded_spm_model(paths.spm_model.read_bytes(), vocab_size))
    synthetic_table(target.spm_model.read_bytes()).save(target.shortlist)
    target.data.symlink_to(paths.data.resolve())
    return synthetic, (
        f"UNTRAINED: a random {model.preset} model of {vocab_size:,} pieces (the "
        f"{pieces:,} of {paths.spm_model} and {vocab_size - pieces:,} unused ones), its "
        f"shortlist a synthetic table (Zipf draws, bench/decode_models.py); it decodes every "
        f"sentence to the length limit")


def padded_spm_model(model_proto: bytes, vocab_size: int) -> bytes:
    """The SentencePiece model with CONTROL pieces `<unused-ID>` appended up to `vocab_size`
    pieces: no text encodes to them and they decode to nothing, so that every text keeps its
    ids."""
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    model = model_pb2.ModelProto.FromString(model_proto)
    for piece_id in range(len(model.pieces), vocab_size):
        model.pieces.add(piece=f"<unused-{piece_id}>", score=0.0,
                         type=model_pb2.ModelProto.SentencePiece.CONTROL)
    return model.SerializeToString()


def synthetic_table(model_proto: bytes) -> ShortlistTable:
    """A `ShortlistTable` for timing, not translating, over the SentencePiece model's pieces:
    each piece's STORED_PER_PIECE candidates the first distinct ones of DRAWS_PER_PIECE times
    as many draws (PAD after, where fewer) from a Zipf distribution of exponent 1 over the
    pieces not always allowed (p ~ 1 / rank, rank 1 the lowest id), i.e. a draw without
    replacement; the frequent pieces are the ids in order; always: `always_allowed`'s."""
    import sentencepiece as spm

    from keras_transformer.shortlist_table import STORED_PER_PIECE, ShortlistTable
    from keras_transformer.tokenizer import PAD_ID
    from pipelines.corpus.shortlist import always_allowed

    vocab = spm.SentencePieceProcessor(model_proto=model_proto).get_piece_size()
    always = always_allowed(model_proto)
    targets = np.setdiff1d(np.arange(vocab), always)  # ascending: rank 1 first
    zipf = 1 / np.arange(1, len(targets) + 1)
    draws = np.random.default_rng(SYNTHETIC_SEED).choice(
        targets, size=[vocab, DRAWS_PER_PIECE * STORED_PER_PIECE], p=zipf / zipf.sum())
    order = np.argsort(draws, axis=1, kind="stable")  # [vocab, draws]
    ranked = np.take_along_axis(draws, order, axis=1)
    first_ranked = np.ones_like(ranked, bool)
    first_ranked[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    first = np.zeros_like(first_ranked)  # [vocab, draws]: a draw's first occurrence
    np.put_along_axis(first, order, first_ranked, axis=1)
    rank = np.cumsum(first, axis=1) - 1  # [vocab, draws]: its rank among the distinct
    kept = first & (rank < STORED_PER_PIECE)
    candidates = np.full([vocab, STORED_PER_PIECE], PAD_ID, np.int32)
    candidates[np.nonzero(kept)[0], rank[kept]] = draws[kept]
    return ShortlistTable(candidates, np.arange(vocab, dtype=np.int32), always, "synthetic", 0)


def test_split(config: PipelineConfig, count: int) -> tuple[list[list[int]], list[str], Path]:
    """The first `count` test sources as the exports read them (pieces, EOS), their
    references, and the SentencePiece model."""
    import sentencepiece as spm

    paths = RunPaths(config.run_path)
    limit = DecodingSettings(max_source_length=config.data.max_length).max_source_pieces
    processor = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    src, tgt = paths.split("test")
    with open(src, encoding="utf-8") as sources, open(tgt, encoding="utf-8") as targets:
        pairs = [(s.rstrip("\n"), t.rstrip("\n"))
                 for (s, t), _ in zip(zip(sources, targets), range(count))]
    sources = [processor.encode(s)[:limit] + [processor.eos_id()] for s, _ in pairs]
    return sources, [t for _, t in pairs], paths.spm_model
