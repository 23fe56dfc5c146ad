"""The export stage and `keras-transformer export|translate`."""
import dataclasses
import io
import os
import shutil
import sys

import pytest

from export.loading import resolve_export
from export.metadata import saved_model_metadata
from export_helpers import SENTENCES
from pipelines.cli import main


def test_export_writes_a_version_models_config_and_onnx(exported, export_config):
    run = exported.saved_model.parent.parent.parent
    assert exported.saved_model == run / "export" / "saved_model" / "1"
    assert exported.checkpoint.endswith("averaged/ckpt") and exported.beam_size == 4
    config = (run / "export" / "models.config").read_text()
    assert 'name: "tiny"' in config and f'base_path: "{exported.saved_model.parent}"' in config
    assert sorted(p.name for p in exported.onnx.iterdir()) == \
        ["model.onnx", "model_int8.onnx", "score.onnx", "spm.model", "translator.json",
         "translator.onnx"]
    assert "saved_model" in exported.format() and "onnx" in exported.format()
    assert "; float32: as configured)" in exported.format()
    assert saved_model_metadata(exported.saved_model).dtype == "float32"


def test_translate_reads_a_file_or_stdin_with_either_runtime(exported, export_translator,
                                                            tmp_path, capsysbinary,
                                                            monkeypatch):
    """A file through the SavedModel, stdin (its bytes as they come) through ONNX Runtime."""
    lines = SENTENCES + ["", "fish " * 2000]
    source = tmp_path / "source.txt"
    source.write_bytes(("\n".join(lines) + "\n").encode() + b"\xff bird\r\n")
    expected = export_translator.translate_lines(lines + ["\ufffd bird"])
    run_export = exported.saved_model.parent.parent
    assert main(["translate", str(run_export), str(source), "--batch-size", "4"]) == 0
    assert capsysbinary.readouterr().out.decode().splitlines() == expected
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    assert main(["translate", str(exported.onnx), "--runtime", "onnx"]) == 0
    assert capsysbinary.readouterr().out.decode().splitlines() == expected


def test_translate_with_another_beam(exported, greedy_translator, tmp_path, capsysbinary):
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    assert main(["translate", str(exported.saved_model.parent), str(source), "--beam", "1"]) == 0
    assert capsysbinary.readouterr().out.decode().splitlines() == \
        greedy_translator.translate_lines(SENTENCES)
    assert main(["translate", str(exported.onnx), str(source), "--beam", "1"]) == 2
    assert "exported with beam 4" in capsysbinary.readouterr().err.decode()


def test_resolving_export_directories(exported, tmp_path):
    run_export = exported.saved_model.parent.parent
    assert resolve_export(run_export) == ("tf", exported.saved_model)
    assert resolve_export(run_export, "onnx") == ("onnx", exported.onnx)
    assert resolve_export(exported.saved_model) == ("tf", exported.saved_model)
    assert resolve_export(exported.onnx) == ("onnx", exported.onnx)
    with pytest.raises(ValueError, match="no export for runtime 'tf'"):
        resolve_export(exported.onnx, "tf")
    with pytest.raises(ValueError, match="export` first"):
        resolve_export(tmp_path)


def test_bad_arguments_exit_2(export_config, tmp_path, capsys):
    assert main(["export", str(export_config), "--format", "tflite"]) == 2
    assert "unknown export format" in capsys.readouterr().err
    assert main(["export", str(export_config), "--checkpoint", str(tmp_path / "ckpt")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert main(["translate", str(tmp_path), str(tmp_path / "missing.txt")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_export_section_names_formats(export_config, tmp_path):
    from pipelines.config import ConfigError, load_config

    text = export_config.read_text()
    path = tmp_path / "config.yaml"
    path.write_text(text + "export:\n  formats: [onnx]\n")
    assert load_config(path).export.formats == ("onnx",)
    path.write_text(text + "export:\n  formats: [tflite]\n")
    with pytest.raises(ConfigError, match="export.formats: must name saved_model and/or onnx"):
        load_config(path)
    assert load_config(export_config).export.saved_model_dtype == "float32"
    path.write_text(text + "export:\n  saved_model_dtype: bfloat16\n")
    with pytest.raises(ConfigError, match=rf"^{path}:\d+: export.saved_model_dtype: expected "
                                          r"one of .*mixed_bfloat16.*, got 'bfloat16'"):
        load_config(path)


def test_an_explicit_bfloat16_saved_model_is_refused_where_onednn_would_abort(
        export_config, monkeypatch):
    from keras_transformer import precision
    from pipelines.config import ConfigError, load_config
    from pipelines.export import export_run

    config = load_config(export_config)
    bf16_cpu_under_avx2_cap = precision.Hardware(frozenset({"avx512f", "avx512_bf16"}), "AVX2",
                                                 [])
    monkeypatch.setattr(precision, "detect", lambda: bf16_cpu_under_avx2_cap)
    export = dataclasses.replace(config.export, saved_model_dtype="auto")
    assert export.resolved_saved_model_dtype()[0] == "float32"
    export = dataclasses.replace(config.export, saved_model_dtype="mixed_bfloat16")
    with pytest.raises(ConfigError, match=r"^export\.saved_model_dtype: mixed_bfloat16 would "
                                          r"abort .*ONEDNN_MAX_CPU_ISA=AVX2"):
        export_run(dataclasses.replace(config, export=export))


def test_a_bfloat16_saved_model_computes_in_bfloat16_and_rebuilds_so(
        export_translator, tmp_path, monkeypatch, bfloat16_runs):
    """An untrained model of one layer a side (an export costs about 60% of two layers'):
    what it computes in is checked, not what it says."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from export import ExportError
    from export.saved_model import SavedModelTranslator
    from export.translator import Translator
    from export_helpers import make_model, write_run
    from keras_transformer import precision
    from pipelines.config import ExportConfig, load_config
    from pipelines.export import export_run
    from tiny_run import ONE_LAYER_A_SIDE

    proto = export_translator.spm_model_proto
    translator = Translator(make_model(proto, **ONE_LAYER_A_SIDE), proto,
                            export_translator.settings)
    config = load_config(write_run(tmp_path, translator))
    summary = export_run(dataclasses.replace(config, export=ExportConfig(
        formats=("saved_model",), saved_model_dtype="mixed_bfloat16")))
    assert "; mixed_bfloat16: as configured" in summary.format() and summary.onnx is None
    graph = saved_model_pb2.SavedModel.FromString(
        (summary.saved_model / "saved_model.pb").read_bytes()).meta_graphs[0].graph_def
    products = [node for function in graph.library.function for node in function.node_def
                if node.op in ("MatMul", "BatchMatMulV2")
                and "word_alignment" not in node.name]  # alignment's float32 word sums
    assert products and all(node.attr["T"].type == tf.bfloat16.as_datatype_enum
                            for node in products)
    loaded = SavedModelTranslator(summary.saved_model)
    rebuilt = loaded.rebuild()
    assert loaded.dtype == "mixed_bfloat16"
    assert rebuilt.model.dtype_policy.name == "mixed_bfloat16"
    expected = rebuilt.translate(tf.constant(SENTENCES))["translation"].numpy()
    assert loaded.translate(SENTENCES)["translation"] == [t.decode() for t in expected]
    monkeypatch.setattr(precision, "detect", lambda: precision.Hardware(
        frozenset({"avx512f", "avx512_bf16"}), "AVX2", []))
    with pytest.raises(ExportError, match=rf"^{summary.saved_model}: a mixed_bfloat16 export: "
                                          r"mixed_bfloat16 would abort"):
        SavedModelTranslator(summary.saved_model)


def test_a_mixed_precision_model_is_restored_in_float32(export_config, tmp_path,
                                                        bfloat16_runs):
    import dataclasses

    from keras_transformer.tokenizer import Tokenizer
    from pipelines.checkpoints.weights import model_checkpoint
    from pipelines.config import load_config
    from pipelines.models import build_model, load_model_for_inference

    config = load_config(export_config)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                   dtype="mixed_bfloat16"))
    trained = build_model(config, Tokenizer.from_file(config.run_path / "vocab" / "spm.model")
                          .vocab_size)
    prefix = model_checkpoint(trained).write(str(tmp_path / "ckpt"))
    model, checkpoint = load_model_for_inference(config, prefix)
    assert checkpoint == prefix and model.dtype_policy.name == "float32"
    assert trained.dtype_policy.name == "mixed_bfloat16"
    for restored, saved in zip(model.weights, trained.weights, strict=True):
        assert (restored.numpy() == saved.numpy()).all()


def test_a_failed_onnx_export_leaves_the_previous_one_and_no_staging(exported, export_config,
                                                                     monkeypatch, capsys):
    import export.onnx

    def full_disk(translator, directory):
        (directory / "model.onnx").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    before = sorted(p.name for p in exported.onnx.iterdir())
    monkeypatch.setattr(export.onnx, "export_onnx", full_disk)
    assert main(["export", str(export_config), "--format", "onnx"]) == 2
    assert capsys.readouterr().err == "keras-transformer export: error: no space left on device\n"
    assert sorted(p.name for p in exported.onnx.iterdir()) == before
    assert not list(exported.onnx.parent.glob(".onnx-*"))


def test_the_newest_complete_version_is_served(exported, export_translator, tmp_path,
                                               capsysbinary):
    """A version without its graph or metadata (an empty directory, a copy cut short) is
    passed over by translate and visualize; TF Serving would try it (the newest number), and
    our exports never publish one."""
    from pipelines.visualize import visualize

    base = tmp_path / "saved_model"
    base.mkdir()
    (base / "1").symlink_to(exported.saved_model)  # the shared export, loaded once
    (base / "2").mkdir()
    shutil.copytree(exported.saved_model, base / "3",
                    ignore=shutil.ignore_patterns("assets.extra"))  # no metadata
    assert resolve_export(base) == ("tf", base / "1")
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    assert main(["translate", str(base), str(source)]) == 0
    assert capsysbinary.readouterr().out.decode().splitlines() == \
        export_translator.translate_lines(SENTENCES)
    # one map of each kind (encoder, decoder, encoder-decoder) for each of its layers: one a side
    assert len(visualize(base, SENTENCES[0], tmp_path / "maps")) == 3
    (base / "1").unlink()
    with pytest.raises(ValueError, match=r"found \(incomplete versions: 2, 3\)"):
        resolve_export(base)


def test_a_truncated_export_file_is_named(exported, tmp_path, capsys):
    source = tmp_path / "lines.txt"
    source.write_text("Hello.\n")
    cases = [(exported.saved_model, "saved_model.pb", "saved_model.pb", []),
             (exported.saved_model, "variables/variables.data-00000-of-00001", "variables", []),
             (exported.saved_model, "assets.extra/spm.model", "assets.extra/spm.model",
              ["--beam", "1"]),
             (exported.saved_model, "assets.extra/translator.json",
              "assets.extra/translator.json", []),
             (exported.onnx, "translator.onnx", "translator.onnx", []),
             (exported.onnx, "translator.json", "translator.json", [])]
    for number, (export, cut, named, extra) in enumerate(cases):
        directory = tmp_path / str(number) / export.name
        shutil.copytree(export, directory)
        os.truncate(directory / cut, (directory / cut).stat().st_size // 2)
        assert main(["translate", str(directory), str(source), *extra]) == 2
        assert capsys.readouterr().err == (
            f"keras-transformer translate: error: {directory / named}: unreadable (truncated or "
            f"corrupt); run `keras-transformer export` again\n")


def test_a_ctranslate2_export_translates_through_the_cli(exported, export_translator, tmp_path,
                                                         capsysbinary):
    from export_helpers import write_run

    batching = (exported.saved_model.parent.parent / "batching_parameters.txt").read_text()
    assert f"num_batch_threads {{ value: {os.cpu_count()} }}" in batching
    assert "pad_variable_length_inputs: true" in batching and "{" + "threads}" not in batching
    config = write_run(tmp_path, export_translator)  # the shared run's export is only read
    run_export = tmp_path / "run" / "export"
    assert main(["export", str(config), "--format", "ctranslate2"]) == 0
    assert "ctranslate2" in capsysbinary.readouterr().out.decode()
    assert sorted(p.name for p in (run_export / "ctranslate2").iterdir()) == \
        ["float32", "int8", "spm.model", "translator.json"]
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(SENTENCES + [""]) + "\n")
    for model_dir in (run_export, run_export / "ctranslate2" / "int8"):
        assert main(["translate", str(model_dir), str(source), "--runtime", "ct2"]) == 0
        output = capsysbinary.readouterr().out.decode().splitlines()
        assert len(output) == len(SENTENCES) + 1 and output[-1] == "" and all(output[:-1])
