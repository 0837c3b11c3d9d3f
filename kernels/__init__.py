"""GPU kernels of the node's hot paths (robust aggregation, tensor fingerprints,
int8 gradient compression), each with a plain torch reference kept beside it and
a dispatcher that picks the kernel for CUDA tensors and the reference elsewhere.

Public API (each op dispatches on the input's device; the ``reference_*``
functions in the submodules are the definitions and run anywhere):

- ``coordinate_median(stacked)`` and ``trimmed_mean(stacked, trim)`` -- ``median.py``:
  non-finite values are excluded per coordinate, an even count averages the two
  middles as ``lo * 0.5 + hi * 0.5``, an all-non-finite coordinate gives NaN.
- ``krum_distances``, ``krum_scores``, ``krum_select`` -- ``krum.py``: fp64 ``[k, k]``
  squared distances from direct differences; a non-finite peer is at distance inf.
- ``fingerprint``, ``fingerprint_hex``, ``fingerprint_tensors`` -- ``fingerprint.py``:
  64-bit, the same bits on CPU and GPU, any single-word change always shows.
- ``quantize_int8``, ``dequantize_int8`` -- ``quant.py``: per-block fp32 scales.

CUDA kernels are CUDA C++ (``csrc/``), built on first use by ``_ext.py``;
``SWARMSHAKE_KERNELS=torch`` forces the references. Benchmarks:
``swarmshake bench kernels`` (``bench.py``).
"""

from swarmshake.kernels.fingerprint import fingerprint, fingerprint_hex, fingerprint_tensors
from swarmshake.kernels.krum import krum_distances, krum_scores, krum_select
from swarmshake.kernels.median import coordinate_median, trimmed_mean
from swarmshake.kernels.quant import dequantize_int8, quantize_int8

__all__ = [
    "coordinate_median",
    "trimmed_mean",
    "krum_distances",
    "krum_scores",
    "krum_select",
    "fingerprint",
    "fingerprint_hex",
    "fingerprint_tensors",
    "quantize_int8",
    "dequantize_int8",
]
