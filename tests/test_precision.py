"""keras_transformer/precision.py: `auto` and explicit dtype policies on faked hardware."""
import sys

import pytest

from keras_transformer.precision import choose_dtype, cpu_flags, resolve

AMX = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"})
AVX512_BF16 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AVX512 = frozenset({"avx2", "avx512f"})
AVX2 = frozenset({"sse4_1", "avx", "avx2"})


@pytest.mark.parametrize("flags, cap, policy, reason", [
    (AMX, None, "mixed_bfloat16", "the CPU has amx_bf16 and oneDNN may use it"),
    (AVX512_BF16, None, "mixed_bfloat16", "the CPU has avx512_bf16 and oneDNN may use it"),
    (AVX2, None, "float32", "no amx_bf16 or avx512_bf16 flag"),
    (AVX512, None, "float32", "no amx_bf16 or avx512_bf16 flag"),
    (AVX512_BF16, "AVX2", "float32", "ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below AVX512_CORE_BF16"),
    (AVX512_BF16, "avx512_core_bf16", "mixed_bfloat16", "avx512_bf16"),
    (AVX512_BF16, "AVX512_CORE_AMX", "mixed_bfloat16", "avx512_bf16"),
    (AMX, "AVX512_CORE_BF16", "mixed_bfloat16", "avx512_bf16"),  # AMX capped, AVX512-BF16 not
    (AMX, "avx10_1_512_amx", "mixed_bfloat16", "amx_bf16"),
    (AMX, "all", "mixed_bfloat16", "amx_bf16"),
    (frozenset({"amx_bf16"}), "AVX512_CORE_BF16", "float32", "below AVX512_CORE_AMX"),
    (AVX512_BF16, "AVX512_FAST", "float32", "not a oneDNN ISA name"),
])
def test_auto_on_a_cpu(flags, cap, policy, reason):
    chosen, why = choose_dtype(flags, cap, [])
    assert chosen == policy and why.startswith(f"{policy}: ") and reason in why
    assert resolve("auto", flags, cap, []) == (chosen, why)


@pytest.mark.parametrize("gpus, policy", [
    ([(8, 0)], "mixed_bfloat16"), ([(9, 0), (8, 6)], "mixed_bfloat16"),
    ([(7, 5)], "mixed_float16"), ([(7, 0)], "mixed_float16"),
    ([(6, 1)], "float32"), ([(0, 0)], "float32"),
    ([(8, 0), (7, 5)], "mixed_float16"), ([(8, 6), (6, 1)], "float32"),  # the weakest decides
])
def test_auto_on_gpus_ignores_the_cpu(gpus, policy):
    chosen, why = choose_dtype(AMX, None, gpus)
    major, minor = min(gpus)
    assert chosen == policy and f"compute capability {major}.{minor}" in why


@pytest.mark.parametrize("requested", ["float32", "mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("flags, cap, gpus", [
    (AMX, None, []), (AVX512_BF16, "AVX512_CORE", []), (AVX2, "AVX2", []),
    (AVX512_BF16, "AVX2", [(8, 0)]), (AVX2, None, [(6, 1)]),
])
def test_explicit_policies_pass_through(requested, flags, cap, gpus):
    policy, why = resolve(requested, flags, cap, gpus)
    assert policy == requested and why.startswith(f"{requested}: as configured")


def test_explicit_bfloat16_without_native_support_says_it_is_slow():
    assert "slow" in resolve("mixed_bfloat16", AVX2, None, [])[1]
    assert "slow" in resolve("mixed_bfloat16", AVX512_BF16, "AVX512_CORE", [])[1]
    assert "slow" not in resolve("mixed_bfloat16", AVX512_BF16, None, [])[1]


@pytest.mark.parametrize("flags, cap, floor", [
    (AVX512_BF16, "AVX2", "AVX512_CORE"), (AMX, "avx2_vnni_2", "AVX512_CORE"),
    (AVX512, "SSE41", "AVX512_CORE"), (frozenset({"avx2", "avx_ne_convert"}), "AVX2_VNNI",
                                       "AVX2_VNNI_2"),
])
def test_explicit_bfloat16_under_a_cap_oneDNN_aborts_on_is_refused(flags, cap, floor):
    with pytest.raises(ValueError, match=f"ONEDNN_MAX_CPU_ISA={cap} is below {floor}.*auto"):
        resolve("mixed_bfloat16", flags, cap, [])
    assert resolve("mixed_bfloat16", flags, cap, [(8, 0)])[0] == "mixed_bfloat16"  # on a GPU
    assert resolve("float32", flags, cap, []) == ("float32", "float32: as configured")


AMX_FP16 = AMX | {"avx512bw", "avx512_fp16"}  # Sapphire Rapids and later


@pytest.mark.parametrize("flags, cap, floor", [
    (AMX_FP16, "AVX2", "AVX512_CORE_FP16"), (AMX_FP16, "AVX512_CORE_BF16", "AVX512_CORE_FP16"),
    (frozenset({"avx2", "avx_ne_convert"}), "AVX2_VNNI", "AVX2_VNNI_2"),
])
def test_explicit_float16_under_a_cap_oneDNN_aborts_on_is_refused(flags, cap, floor):
    """TensorFlow hands float16 to oneDNN on these CPUs; below `floor` oneDNN aborts the
    process (a float16 MatMul under ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on the AMX Xeon of
    docs/figures.md)."""
    with pytest.raises(ValueError, match=f"^mixed_float16 would abort inside oneDNN: "
                                         f"ONEDNN_MAX_CPU_ISA={cap} is below {floor}, which "
                                         f"oneDNN needs for float16"):
        resolve("mixed_float16", flags, cap, [])
    assert resolve("mixed_float16", flags, floor, []) == ("mixed_float16",
                                                          "mixed_float16: as configured")
    assert resolve("mixed_float16", AVX2, "AVX2", [])[0] == "mixed_float16"  # Eigen's float16


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown dtype policy 'bfloat16'"):
        resolve("bfloat16", AVX2, None, [])


def test_cpu_flags_reads_the_first_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.slow
def test_importing_it_needs_no_tensorflow():
    import subprocess

    code = "import sys, keras_transformer.precision; print('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
