"""gpu_profile's kernel matching: each own kernel counted once, variants included."""

from __future__ import annotations

import pytest

from swarmshake.chaos.bench.gpu_profile import OWN_KERNELS, is_own_kernel

KEYS = [
    "void swarmshake::quant_kernel_vec<float>(float const*, signed char*, float*, long, int, long)",
    "void swarmshake::dequant_kernel<float>(signed char const*, float const*, float*, long, int)",
    "void swarmshake::robust_kernel<float, 4, 2, 0>(float const*, float*, int, long, int)",
    "swarmshake::fingerprint_kernel(int const*, long, unsigned long long*)",
    "aten::quantize_per_tensor",
]


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        ("quant_kernel", [KEYS[0]]),
        ("dequant_kernel", [KEYS[1]]),
        ("robust_kernel", [KEYS[2]]),
        ("fingerprint_kernel", [KEYS[3]]),
        ("krum_kernel", []),
    ],
)
def test_each_key_matches_only_its_own_kernel(kernel: str, expected: list[str]) -> None:
    assert [key for key in KEYS if is_own_kernel(kernel, key)] == expected


def test_no_key_is_counted_for_two_own_kernels() -> None:
    for key in KEYS:
        assert sum(is_own_kernel(kernel, key) for kernel in OWN_KERNELS) <= 1, key
