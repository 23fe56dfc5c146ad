"""What bench/decode_speed.py decodes: each runtime's model directory (a run's export, made
or completed where needed) and the test sentences as the exports read them."""
from __future__ import annotations

from pathlib import Path

from keras_transformer.decoding_settings import DecodingSettings
from pipelines.paths import RunPaths

SAVED_MODEL_DTYPES = {"tf": "float32", "tf-bfloat16": "mixed_bfloat16"}


def find_model(config_name: str, scratch: Path, runtimes: list[str], xla_max_batch: int,
               parallel_searches: int) -> tuple[dict[str, Path], str]:
    """(the model directory of each runtime, what the model is), exporting if needed; a
    SavedModel of a dtype the export's is not (float32, or mixed_bfloat16 when `runtimes`
    asks for it) is built from the run's checkpoint, tf-xla's with beam search compiled
    for batches of up to `xla_max_batch` sentences, and tf-parallel's as tf-xla's with its
    graph search in `parallel_searches` parts."""
    from export.metadata import saved_model_metadata
    from export.saved_model import SavedModelTranslator, export_saved_model
    from export.versions import latest_version
    from pipelines.config import load_config
    from pipelines.models import load_model_for_inference, run_translator

    config = load_config(config_name)
    paths = RunPaths(config.run_path)
    version = latest_version(paths.saved_model)
    if version and (paths.onnx / "model_int8.onnx").is_file():
        about = f"the export of {config.run_path}"
        version, onnx_dir = version, paths.onnx
    else:
        from pipelines.checkpoints.weights import weights_checkpoint

        try:
            weights_checkpoint(paths)
        except ValueError:
            version, onnx_dir = _export_random(config, scratch)
            about = (f"UNTRAINED: a random {config.model.preset} model (no checkpoint in "
                     f"{config.run_path}); it decodes every sentence to the length limit")
        else:
            from pipelines.export import export_run

            summary = export_run(config)
            version, onnx_dir = summary.saved_model, summary.onnx
            about = f"{summary.checkpoint}, just exported"
    ct2_dir = paths.export / "ctranslate2"
    if not (ct2_dir / "int8").is_dir():
        from export.ctranslate2 import export_ctranslate2
        ct2_dir = scratch / "ctranslate2"
        export_ctranslate2(SavedModelTranslator(version).rebuild(), ct2_dir)
    directories = {"onnx": onnx_dir, "onnx-int8": onnx_dir, "ct2-float32": ct2_dir,
                   "ct2-int8": ct2_dir}
    exported = saved_model_metadata(version).dtype
    for runtime, dtype in SAVED_MODEL_DTYPES.items():
        if dtype == exported:
            directories[runtime] = version
        elif runtime in runtimes:
            model, _ = load_model_for_inference(config, dtype=dtype)
            directories[runtime] = export_saved_model(run_translator(config, model),
                                                      scratch / f"saved_model_{dtype}")
    variants = {"tf-xla": 1, "tf-parallel": parallel_searches}  # runtime: searches
    for runtime in set(variants) & set(runtimes):  # the float32 export's weights and settings
        from export.translator import Translator

        rebuilt = SavedModelTranslator(directories.get("tf", version)).rebuild()
        directories[runtime] = export_saved_model(
            Translator(rebuilt.model, rebuilt.spm_model_proto, rebuilt.settings,
                       xla_max_batch=xla_max_batch, parallel_searches=variants[runtime]),
            scratch / f"saved_model_{runtime}")
    return directories, about


def _export_random(config, directory: Path) -> tuple[Path, Path]:
    import keras

    from export.onnx import export_onnx
    from export.saved_model import export_saved_model
    from keras_transformer.tokenizer import Tokenizer
    from pipelines.models import build_model, run_translator

    keras.utils.set_random_seed(0)
    model_proto = RunPaths(config.run_path).spm_model.read_bytes()
    model = build_model(config, Tokenizer(model_proto).vocab_size, "float32")
    translator = run_translator(config, model)
    export_onnx(translator, directory / "onnx")
    return export_saved_model(translator, directory / "saved_model"), directory / "onnx"


def test_split(config_name: str, count: int) -> tuple[list[list[int]], list[str], Path]:
    """The first `count` test sources as the exports read them (pieces, EOS), their
    references, and the SentencePiece model."""
    import sentencepiece as spm

    from pipelines.config import load_config

    config = load_config(config_name)
    paths = RunPaths(config.run_path)
    limit = DecodingSettings(max_source_length=config.data.max_length).max_source_pieces
    processor = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    src, tgt = paths.split("test")
    with open(src, encoding="utf-8") as sources, open(tgt, encoding="utf-8") as targets:
        pairs = [(s.rstrip("\n"), t.rstrip("\n"))
                 for (s, t), _ in zip(zip(sources, targets), range(count))]
    sources = [processor.encode(s)[:limit] + [processor.eos_id()] for s, _ in pairs]
    return sources, [t for _, t in pairs], paths.spm_model
