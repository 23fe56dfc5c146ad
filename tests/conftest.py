"""Shared fixtures: the demo corpus prepared (about 10 s); a trained tiny translator, its
eager beam search's reference and its exports (about 50 s, tests/export_helpers.py); a tiny
run trained 20 steps.

Each is built once per test run, not once per process: the first xdist worker to need one
builds it under a lock in the run's shared temporary directory while the others wait, then all
read it (`shared_directory`). Tests only read them, or copy what they change.

Files run slowest first (`SLOWEST_FILES`), so that the two workers end together.

`make test-fast` (`-m "not slow"`) leaves out every test that trains, exports or starts a
subprocess: those marked `slow`, and those using a fixture that builds a run (`RUN_FIXTURES`,
marked here). In that tier such work fails the test that starts it (`no_slow_work`), so a
test that needs a mark cannot hide in the quick tier.

The suite runs on CPU-only and GPU hosts alike: on a GPU, TensorFlow computes float32 matmuls
in true float32 (not TF32, whose 10-bit mantissa would break the exact parity of TensorFlow
with ONNX Runtime and CTranslate2 on the CPU), and this process and every subprocess take GPU
memory as they need it (not all of it at start, which would starve the next process).
"""
import dataclasses
import fcntl
import os
import pickle
import typing
from pathlib import Path
from typing import Callable

import pytest

# The CLI's default (pipelines/cli.py), which TensorFlow reads once, on importing (below): the CLI
# run in this process logs as it does for a user, however pytest was started.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# CTranslate2's OpenMP threads (libgomp, which reads this once it loads) and ONNX Runtime's
# (export.onnx_runtime.session_options) sleep between ops instead of spinning, in this process
# and its subprocesses: the suite's workers share the cores, where spinning took most of
# CTranslate2's CPU time (docs/decoding-speed.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pipelines.config import load_config  # noqa: E402 (after the environment is set)
from pipelines.startup import import_tensorflow_quietly  # noqa: E402

if typing.TYPE_CHECKING:  # the fixtures' types, not imported at run time (they import TensorFlow)
    from export.saved_model import SavedModelTranslator
    from export.translator import Translator
    from pipelines.corpus.prepare import PrepareSummary
    from pipelines.export import ExportSummary


# The files that take a worker longest, slowest first (seconds of one worker in a full run on
# a 2-core AMD EPYC Zen 4, from `pytest --junitxml`'s test times summed per file, about 85 s
# down to 10 s); every other file after them, in collection order. xdist's loadfile hands files
# out in this order (the Makefile's --no-loadscope-reorder: xdist's own order is by the number
# of tests in a file), so long files start early and short ones fill the end. test_export
# comes first: it builds the shared export fixtures that 18 other files use; test_multilingual
# builds its own export (multilingual_export), about 150 s of one worker with its tests;
# test_ensemble the one ensemble export (ensemble_export).
SLOWEST_FILES = (  # tests/test_suite_order.py checks the names
    "test_export.py", "test_multilingual.py", "test_ensemble.py", "test_distributed.py",
    "test_train.py",
    "test_serving.py", "test_run.py", "test_faults.py", "test_terminology.py",
    "test_saved_model.py", "test_model.py", "test_translate.py",
    "test_data.py", "test_noise.py", "test_fine_tune.py", "test_budget.py", "test_onnx.py",
    "test_static_search.py",
    "test_model_size.py", "test_guided_alignment.py", "test_best_checkpoints.py",
    "test_prepare.py", "test_translator.py", "test_sources.py")


# The fixtures that prepare, train or export a run (every fixture built on them is too).
RUN_FIXTURES = {"demo_run", "export_config", "trained_tiny_run", "multilingual_export",
                "shortlist_export", "shortlist_run"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept
    for item in items:
        if RUN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def _refuse(what: str) -> Callable[..., None]:
    def refused(*args: object, **kwargs: object) -> None:
        pytest.fail(f"{what} in the quick tier (make test-fast): mark the test slow")
    return refused


@pytest.fixture(autouse=True)
def no_slow_work(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In `make test-fast` (a mark expression leaving out `slow`), a subprocess, a training
    run, an update of the trainer or an export fails the test that starts it."""
    if "not slow" not in (request.config.getoption("markexpr") or ""):
        return
    import subprocess

    import tensorflow as tf

    import export.onnx
    from pipelines.training.trainer import Trainer

    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("a subprocess"))
    monkeypatch.setattr(Trainer, "__init__", _refuse("training"))
    monkeypatch.setattr(tf.saved_model, "save", _refuse("a SavedModel export"))
    monkeypatch.setattr(export.onnx, "frozen_graph_def", _refuse("an ONNX export"))


def pytest_configure(config: pytest.Config) -> None:
    os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"  # inherited by subprocesses
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # the cores shared out to the workers' kernels (inter-op threads kept:
        # a collective between replicas waits on one while another runs)
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        for name in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
            os.environ.setdefault(name, threads)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # xdist's controller: its workers run the tests (and import TensorFlow)
    import_tensorflow_quietly()  # as the CLI: without matplotlib, the collector tuned
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(False)
    # Grappler (TensorFlow's graph optimizer) off for this process's functions, whose graphs
    # the tests run a few times each (docs/figures.md). Its rewrites are TensorFlow's, and the
    # product meets them where users do: in every CLI subprocess and in tests/test_serving.py's
    # TF1 session, configured as TF Serving's (Grappler on).
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


@pytest.fixture(autouse=True, scope="session")
def saved_models_loaded_once() -> typing.Iterator[None]:
    """`tf.saved_model.load` of a directory whose files are unchanged (names, sizes, times)
    returns the object loaded before in this process: the CLI and fixtures load the shared
    exports dozens of times, 2-5 s each with the first calls' graph set-up. A changed, cut
    or removed file loads again (and fails as it would)."""
    import tensorflow as tf

    load, loaded = tf.saved_model.load, {}

    def load_once(export_dir: str, *args: typing.Any, **kwargs: typing.Any) -> typing.Any:
        if args or kwargs:  # tags or options: as asked
            return load(export_dir, *args, **kwargs)
        directory = Path(export_dir).resolve()
        key = (directory, tuple(sorted(
            (str(path.relative_to(directory)), path.stat().st_size, path.stat().st_mtime_ns)
            for path in directory.rglob("*") if path.is_file())))
        if key not in loaded:
            loaded[key] = load(export_dir)
        return loaded[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.saved_model, "load", load_once)
        yield


def shared_directory(tmp_path_factory: pytest.TempPathFactory, name: str,
                     build: Callable[[Path], None]) -> Path:
    """The directory `name`, built once per test run by `build(directory)`: the first process
    (xdist worker) to ask builds it holding a file lock, the others wait for the lock and find
    it complete. The run's own temporary root, so nothing outlives the run."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' common parent
    directory, complete = root / name, root / f"{name}.complete"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not complete.exists():
            directory.mkdir(exist_ok=True)
            build(directory)
            complete.touch()
    return directory


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> "PrepareSummary":
    """`prepare demo` (bible:en-fr, 8000 BPE pieces) written under a temporary run_dir: its
    PrepareSummary."""
    from pipelines.corpus.prepare import prepare

    def build(directory: Path) -> None:
        config = dataclasses.replace(load_config("demo"), run_dir=str(directory / "demo"))
        (directory / "summary.pickle").write_bytes(pickle.dumps(prepare(config)))

    directory = shared_directory(tmp_path_factory, "demo_run", build)
    return pickle.loads((directory / "summary.pickle").read_bytes())


TRANSLATOR_SETTINGS = {"beam_size": 4, "max_source_length": 40}  # export_translator's


@pytest.fixture(scope="session")
def export_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run holding a vocabulary and a tiny model, one layer a side, trained 100 steps (as
    checkpoints/averaged), and its config (data.max_length 40: export_translator's
    max_source_length). One decoder layer: each trace of a search (every export, every
    translator in a test process) takes about 0.7x the CPU of the preset's two; the layer
    that aligns among several is tests/test_ctranslate2.py's."""

    def build(directory: Path) -> None:
        from export.translator import Translator
        from export_helpers import make_model, train_spm, write_run
        from keras_transformer.decoding_settings import DecodingSettings
        from tiny_run import ONE_LAYER_A_SIDE

        model_proto = train_spm(directory)
        model = make_model(model_proto, steps=100, **ONE_LAYER_A_SIDE)
        write_run(directory, Translator(model, model_proto,
                                        DecodingSettings(**TRANSLATOR_SETTINGS)))

    return shared_directory(tmp_path_factory, "export_run", build) / "config.yaml"


@pytest.fixture(scope="session")
def export_translator(export_config: Path) -> "Translator":
    """A Translator (beam 4, sources cut to 40 tokens) of the run's model, restored."""
    from export.translator import Translator
    from export_helpers import make_model
    from keras_transformer.decoding_settings import DecodingSettings
    from pipelines.paths import RunPaths
    from pipelines.checkpoints.weights import restore_model
    from tiny_run import ONE_LAYER_A_SIDE

    paths = RunPaths(load_config(export_config).run_path)
    model_proto = paths.spm_model.read_bytes()
    model = make_model(model_proto, **ONE_LAYER_A_SIDE)
    restore_model(model, paths.averaged)
    return Translator(model, model_proto, DecodingSettings(**TRANSLATOR_SETTINGS))


@pytest.fixture(scope="session")
def greedy_translator(export_translator: "Translator") -> "Translator":
    """export_translator's model decoding greedily (beam 1, sources cut to 40 tokens), in this
    process: each of its functions traced once per process (about 3 CPU-s a function)."""
    from export.translator import Translator
    from keras_transformer.decoding_settings import DecodingSettings

    return Translator(export_translator.model, export_translator.spm_model_proto,
                      DecodingSettings(beam_size=1, max_source_length=40))


@pytest.fixture(scope="session")
def keras_reference(export_translator: "Translator",
                    tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The test sentences' source ids, and best target ids and scores of eager (Keras-level)
    beam search with beam 4: what every export must reproduce. Searched once per test run
    (about 4 CPU-seconds), the arrays shared."""
    from export_helpers import SENTENCES, keras_beam_search, source_ids

    def build(directory: Path) -> None:
        source = source_ids(export_translator.spm_model_proto, SENTENCES)
        target_ids, score = keras_beam_search(export_translator.model, source, beam_size=4)
        (directory / "reference.pickle").write_bytes(pickle.dumps(
            {"source_ids": source, "target_ids": target_ids, "score": score}))

    directory = shared_directory(tmp_path_factory, "keras_reference", build)
    return pickle.loads((directory / "reference.pickle").read_bytes())


@pytest.fixture(scope="session")
def exported(export_config: Path,
             tmp_path_factory: pytest.TempPathFactory) -> "ExportSummary":
    """`export_run` of that run: a SavedModel version, the ONNX and CTranslate2 models (about
    35 s). Tests that export again do it in a run of their own."""
    from pipelines.export import export_run

    def build(directory: Path) -> None:
        (directory / "summary.pickle").write_bytes(pickle.dumps(export_run(
            load_config(export_config))))

    directory = shared_directory(tmp_path_factory, "exported", build)
    return pickle.loads((directory / "summary.pickle").read_bytes())


LANGUAGE_TOKENS = ("<2fr>", "<2de>")  # multilingual_export's target languages, fr and de
CORPUS_TAG = "<bt>"  # and a corpus tag, also a user symbol of its vocabulary


@pytest.fixture(scope="session")
def multilingual_export(tmp_path_factory: pytest.TempPathFactory) -> "ExportSummary":
    """`export_run` of a multilingual run: an untrained tiny model whose vocabulary holds the
    language tokens <2fr> and <2de> and the corpus tag <bt> (user symbols), decoding greedily
    (evaluate.beam_size 1, so that CTranslate2's search is the graphs'): a SavedModel version,
    the ONNX and CTranslate2 models (about 35 CPU-s). Two layers a side: untrained, one layer
    a side translates these lines to nothing (seeds 0, 2, 3) or some of them (seed 1)."""
    import yaml

    from export.translator import Translator
    from export_helpers import make_model, train_spm, write_run
    from pipelines.export import export_run

    def build(directory: Path) -> None:
        model_proto = train_spm(directory, LANGUAGE_TOKENS + (CORPUS_TAG,))
        config = write_run(directory, Translator(make_model(model_proto), model_proto))
        values = yaml.safe_load(config.read_text())
        config.write_text(yaml.safe_dump({**values, "evaluate": {"beam_size": 1}}))
        (directory / "summary.pickle").write_bytes(pickle.dumps(export_run(
            load_config(config))))

    directory = shared_directory(tmp_path_factory, "multilingual_export", build)
    return pickle.loads((directory / "summary.pickle").read_bytes())


@pytest.fixture(scope="session")
def saved_model_dir(exported: "ExportSummary") -> Path:
    return exported.saved_model


SHORTLIST = {"shortlist_k": 3, "shortlist_frequent": 20}  # small: it changes translations


@pytest.fixture(scope="session")
def shortlist_run(export_translator: "Translator",
                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The config of a run of export_translator's model whose vocab/shortlist.npz prepare's
    counting wrote from its train pairs (co-occurrence), its export section SHORTLIST's (about
    1 s)."""
    import yaml

    from export_helpers import write_run
    from pipelines.corpus.shortlist import write_shortlist
    from pipelines.paths import RunPaths

    def build(directory: Path) -> None:
        config = write_run(directory, export_translator)
        paths = RunPaths(load_config(config).run_path)
        pairs = len((paths.data / "train.src").read_text().splitlines())
        write_shortlist(paths.data, ["train"], export_translator.spm_model_proto, False,
                        paths.shortlist, pairs)
        config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()),
                                          "export": SHORTLIST}))

    return shared_directory(tmp_path_factory, "shortlist_run", build) / "config.yaml"


@pytest.fixture(scope="session")
def shortlist_export(shortlist_run: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> "ExportSummary":
    """`export_run` of shortlist_run: every format, the SavedModel's beam search compiled by
    XLA up to batch 4 and larger batches in two graph searches side by side
    (export.saved_model_xla_max_batch 4, saved_model_parallel_searches 2), so that it holds
    every search; the export tests/test_serving.py serves. About 45 CPU-s."""
    from pipelines.export import export_run

    def build(directory: Path) -> None:
        config = load_config(shortlist_run)
        summary = export_run(dataclasses.replace(config, export=dataclasses.replace(
            config.export, saved_model_xla_max_batch=4, saved_model_parallel_searches=2)))
        (directory / "summary.pickle").write_bytes(pickle.dumps(summary))

    directory = shared_directory(tmp_path_factory, "shortlist_export", build)
    return pickle.loads((directory / "summary.pickle").read_bytes())


@pytest.fixture(scope="session")
def shortlist_translator(shortlist_run: Path,
                         export_translator: "Translator") -> "Translator":
    """export_translator's model and settings searching shortlist_run's shortlist in the graph,
    in this process (no XLA, one search): the reference of the shortlisted exports."""
    from export.translator import Translator
    from pipelines.models import run_shortlist

    return Translator(export_translator.model, export_translator.spm_model_proto,
                      export_translator.settings,
                      shortlist=run_shortlist(load_config(shortlist_run)))


@pytest.fixture(scope="session")
def onnx_dir(exported: "ExportSummary") -> Path:
    return exported.onnx


@pytest.fixture(scope="session")
def plain_ops(tmp_path_factory: pytest.TempPathFactory) -> frozenset[str]:
    """The ops plain TensorFlow registers (tests/op_audit.py's `op_audit` reads them), listed
    by a child process once per test run, not once per xdist worker (about 3.5 CPU-s)."""
    from op_audit import plain_tensorflow_ops

    def build(directory: Path) -> None:
        (directory / "ops.pickle").write_bytes(pickle.dumps(plain_tensorflow_ops()))

    directory = shared_directory(tmp_path_factory, "plain_ops", build)
    return pickle.loads((directory / "ops.pickle").read_bytes())


@pytest.fixture(scope="session")
def saved_model_translator(saved_model_dir: Path) -> "SavedModelTranslator":
    """The exported SavedModel loaded (about 4 s a load), once per process: tests only call it."""
    from export.saved_model import SavedModelTranslator

    return SavedModelTranslator(saved_model_dir)


def _skip_where_onednn_aborts_on(policy: str) -> None:
    from keras_transformer.precision import resolve_dtype

    try:
        resolve_dtype(policy)
    except ValueError as error:
        pytest.skip(str(error))


@pytest.fixture
def bfloat16_runs() -> None:
    """Skips a test that computes in bfloat16 where oneDNN would abort the process on it (a
    ONEDNN_MAX_CPU_ISA cap below what this CPU's bf16 needs, as the AVX2 emulation
    (docs/figures.md) sets); `resolve_dtype` refuses mixed_bfloat16 there with this reason."""
    _skip_where_onednn_aborts_on("mixed_bfloat16")


@pytest.fixture
def float16_runs() -> None:
    """As bfloat16_runs, for a test that computes in float16 (mixed_float16)."""
    _skip_where_onednn_aborts_on("mixed_float16")


@pytest.fixture(scope="session")
def trained_tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of config.yaml and run/: a tiny run (tests/tiny_run.py's defaults) trained
    20 steps by `keras-transformer train` (checkpoints 10 and 20, none averaged)."""
    from pipelines.cli import main
    from tiny_run import make_tiny_run

    def build(directory: Path) -> None:
        assert main(["train", str(make_tiny_run(directory))]) == 0

    return shared_directory(tmp_path_factory, "trained_tiny_run", build)
