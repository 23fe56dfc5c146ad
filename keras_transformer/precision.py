"""The Keras dtype policy for `auto`: bfloat16 where the hardware runs it natively.

`auto` resolves to mixed_bfloat16 on GPUs of compute capability 8.0 or higher and on CPUs whose
bfloat16 instructions (AMX-BF16 `amx_bf16`, AVX512-BF16 `avx512_bf16`) oneDNN may use,
mixed_float16 on GPUs of compute capability 7.x, float32 otherwise. With several GPUs the
weakest decides. oneDNN uses the instructions its cap ONEDNN_MAX_CPU_ISA (older name
DNNL_MAX_CPU_ISA) allows: bfloat16 is native under a cap of at least AVX512_CORE_BF16 for
avx512_bf16, AVX512_CORE_AMX for amx_bf16; an unknown cap counts as none of them.

An explicit policy passes through, but a mixed one is refused where it would abort the
process: TensorFlow hands bfloat16 ops to oneDNN on a CPU with avx512f or avx_ne_convert, and
float16 ops on one with avx512_fp16 or avx_ne_convert, and oneDNN fails to create their
primitives ("could not create a primitive descriptor") when its cap is below AVX512_CORE for
bfloat16, AVX512_CORE_FP16 for float16 (AVX2_VNNI_2 with avx_ne_convert alone).

No TensorFlow at import: `resolve` is pure, `detect` imports TensorFlow to list the GPUs.

Example:
    >>> resolve("auto", frozenset({"avx512_bf16"}), None, [])
    ('mixed_bfloat16', 'mixed_bfloat16: the CPU has avx512_bf16 and oneDNN may use it')
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple, Sequence

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
# oneDNN's cap values in order, each allowing the instructions of those before it (but for
# AVX2_VNNI_2's, which the AVX512 ones lack: oneDNN's cpu_isa_t masks).
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
               "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
               "AVX512_CORE_AMX_FP16", "DEFAULT")
ONEDNN_ISA_ALIASES = {"AVX10_1_512": "AVX512_CORE_FP16", "AVX10_1_512_AMX": "AVX512_CORE_AMX",
                      "AVX10_1_512_AMX_FP16": "AVX512_CORE_AMX_FP16", "ALL": "DEFAULT"}
# CPU flag of native bfloat16 -> the lowest cap under which oneDNN uses it, best first.
NATIVE_BF16 = (("amx_bf16", "AVX512_CORE_AMX"), ("avx512_bf16", "AVX512_CORE_BF16"))
# A mixed policy's 16-bit type, and each CPU flag that makes TensorFlow run that type in
# oneDNN -> the lowest cap oneDNN then needs (TensorFlow's IsDataTypeSupportedByOneDNNOnThisCPU).
ONEDNN_16_BIT = {
    "mixed_bfloat16": ("bfloat16", (("avx_ne_convert", "AVX2_VNNI_2"),
                                    ("avx512f", "AVX512_CORE"))),
    "mixed_float16": ("float16", (("avx_ne_convert", "AVX2_VNNI_2"),
                                  ("avx512_fp16", "AVX512_CORE_FP16"))),
}


class Hardware(NamedTuple):
    """What `auto` depends on: CPU flags, oneDNN's cap, GPU compute capabilities."""

    cpu_flags: frozenset[str]
    onednn_max_isa: str | None
    gpu_capabilities: list[tuple[int, int]]


def resolve(requested: str, cpu_flags: frozenset[str], onednn_max_isa: str | None,
            gpu_capabilities: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """(Keras dtype policy, a one-line reason) for `requested` (`auto` or one of POLICIES).

    Raises:
        ValueError: an unknown policy, or a mixed one on a CPU-only machine whose oneDNN cap
            makes oneDNN abort on its 16-bit ops.
    """
    if requested == "auto":
        return choose_dtype(cpu_flags, onednn_max_isa, gpu_capabilities)
    if requested not in POLICIES:
        raise ValueError(f"unknown dtype policy {requested!r}; expected auto or one of "
                         f"{', '.join(POLICIES)}")
    cap = _isa_rank(onednn_max_isa)  # None: a cap oneDNN does not know, and ignores
    if requested not in ONEDNN_16_BIT or gpu_capabilities or cap is None:
        return requested, f"{requested}: as configured"
    type_name, needs = ONEDNN_16_BIT[requested]
    floors = [ONEDNN_ISAS.index(floor) for flag, floor in needs if flag in cpu_flags]
    if floors and cap < min(floors):
        raise ValueError(
            f"{requested} would abort inside oneDNN: ONEDNN_MAX_CPU_ISA={onednn_max_isa} "
            f"is below {ONEDNN_ISAS[min(floors)]}, which oneDNN needs for {type_name} on this "
            f"CPU; use `auto` or float32, or unset ONEDNN_MAX_CPU_ISA (DNNL_MAX_CPU_ISA)")
    if requested == "mixed_bfloat16" and _native_bf16(cpu_flags, cap) is None:
        return requested, ("mixed_bfloat16: as configured, but slow: no native bfloat16 on "
                           "this CPU (no amx_bf16 or avx512_bf16 that oneDNN may use)")
    return requested, f"{requested}: as configured"


def choose_dtype(cpu_flags: frozenset[str], onednn_max_isa: str | None,
                 gpu_capabilities: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """(policy, reason) that `auto` resolves to on this hardware (see the module docstring)."""
    if gpu_capabilities:
        major, minor = min(gpu_capabilities)
        gpus = (f"the weakest of {len(gpu_capabilities)} GPUs has" if len(gpu_capabilities) > 1
                else "the GPU has")
        where = f"{gpus} compute capability {major}.{minor}"
        if (major, minor) >= (8, 0):
            return "mixed_bfloat16", f"mixed_bfloat16: {where} (native bfloat16)"
        if (major, minor) >= (7, 0):
            return "mixed_float16", f"mixed_float16: {where} (float16, no native bfloat16)"
        return "float32", f"float32: {where} (below 7.0: no fast float16)"
    present = [(flag, floor) for flag, floor in NATIVE_BF16 if flag in cpu_flags]
    if not present:
        return "float32", "float32: no native bf16 on this CPU (no amx_bf16 or avx512_bf16 flag)"
    cap = _isa_rank(onednn_max_isa)
    if cap is None:
        return "float32", (f"float32: ONEDNN_MAX_CPU_ISA={onednn_max_isa} is not a oneDNN ISA "
                           f"name, so bf16 is not assumed")
    flag = _native_bf16(cpu_flags, cap)
    if flag is None:
        return "float32", (f"float32: ONEDNN_MAX_CPU_ISA={onednn_max_isa} caps oneDNN below "
                           f"{present[-1][1]}")
    return "mixed_bfloat16", f"mixed_bfloat16: the CPU has {flag} and oneDNN may use it"


def resolve_dtype(requested: str) -> tuple[str, str]:
    """`resolve` on this machine's hardware (`detect`)."""
    return resolve(requested, *detect())


def detect() -> Hardware:
    """This machine's CPU flags, oneDNN cap and GPU compute capabilities."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or None
    return Hardware(cpu_flags(), cap, gpu_capabilities())


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The `flags` of /proc/cpuinfo (Linux); empty where there is none."""
    try:
        with open(cpuinfo, encoding="utf-8") as file:
            for line in file:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def gpu_capabilities() -> list[tuple[int, int]]:
    """(major, minor) compute capability of each GPU TensorFlow sees; (0, 0) for a GPU without
    one (e.g. ROCm), which counts as too old for float16."""
    import tensorflow as tf

    return [tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability",
                                                                      (0, 0)))
            for gpu in tf.config.list_physical_devices("GPU")]


def _isa_rank(onednn_max_isa: str | None) -> int | None:
    """The cap's position in ONEDNN_ISAS (no cap: DEFAULT); None for an unknown value."""
    name = (onednn_max_isa or "DEFAULT").upper()
    name = ONEDNN_ISA_ALIASES.get(name, name)
    return ONEDNN_ISAS.index(name) if name in ONEDNN_ISAS else None


def _native_bf16(cpu_flags: frozenset[str], cap: int) -> str | None:
    """The best native bfloat16 flag of the CPU that oneDNN may use under the cap, if any."""
    for flag, floor in NATIVE_BF16:
        if flag in cpu_flags and cap >= ONEDNN_ISAS.index(floor):
            return flag
    return None
