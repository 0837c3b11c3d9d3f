"""``swarmshake bench kernels``: the CUDA kernels side by side with torch baselines.

For every op and shape it times the kernel and the torch baseline in the same
process on the same data (CUDA events, warm-up first, quantiles over repetitions),
checks the kernel against the torch reference of ``kernels/`` run on the GPU
(bit-exact, or Krum's relative error), prints a table and writes one CSV row per
(op, implementation, k, d, dtype) with the GPU name, torch version, time
quantiles, effective bandwidth (minimum bytes read + written / time) and the
speed-up over torch.

    swarmshake bench kernels [--quick] [--d N] [--ops median,trimmed,...] [--out DIR]
    python -m swarmshake.kernels.bench ...        (the same, without the CLI router)
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import torch

ALL_OPS = ("copy", "median", "trimmed", "krum", "fingerprint", "quant", "dequant")
FIELDS = [
    "gpu",
    "torch",
    "cuda",
    "op",
    "impl",
    "k",
    "d",
    "dtype",
    "param",
    "p20_ms",
    "p50_ms",
    "p80_ms",
    "gbps",
    "speedup_vs_torch",
    "check",
    "timestamp",
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 64 (DESIGN's exit codes; argparse's 2 means "unknown" there)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(64, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    # --quick and --json as every benchmark has them (chaos/commands/_args.bench_flags;
    # kernels may not import the harness, so they are declared here, held equal by a test).
    p = _Parser(
        prog="swarmshake bench kernels",
        description=__doc__.splitlines()[0],
        epilog="--quick: fewer shapes and repetitions (a smoke run)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="the CI size: fewer trials, smaller models, shorter runs (the benchmark's help says which)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout (human progress goes to stderr)",
    )
    p.add_argument(
        "--d", type=int, default=None, help="elements per peer tensor (default 32M, quick 4M)"
    )
    p.add_argument("--ks", default=None, help="comma-separated k values (default 3,4,8,16,32,64)")
    p.add_argument(
        "--dtypes",
        default=None,
        help="comma-separated of fp32,bf16,fp16 (default fp32; bf16/fp16 at k=16)",
    )
    p.add_argument(
        "--ops", default=",".join(ALL_OPS), help=f"comma-separated of {','.join(ALL_OPS)}"
    )
    p.add_argument(
        "--reps",
        type=int,
        default=None,
        help="timed repetitions per measurement (default 20, quick 5)",
    )
    p.add_argument("--no-baseline", action="store_true", help="time the kernels only")
    p.add_argument(
        "--out",
        default="runs/bench-kernels",
        help="directory of the CSV (default runs/bench-kernels)",
    )
    return p


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _time(fn: Callable[[], object], reps: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        na, nb = torch.isnan(a), torch.isnan(b)
        if not torch.equal(na, nb):
            return False
        a, b = a[~na], b[~nb]
        iv = {4: torch.int32, 2: torch.int16, 8: torch.int64}[a.element_size()]
        return torch.equal(a.view(iv), b.view(iv))
    return torch.equal(a, b)


class Job:
    """One (op, k, d, dtype) measurement: ``make()`` builds the data and returns
    ``(kernel, baseline, check)`` callables; the data is rebuilt for each phase."""

    def __init__(self, op, k, d, dtype, param, nbytes, make):
        self.op, self.k, self.d, self.dtype, self.param, self.nbytes, self.make = (
            op,
            k,
            d,
            dtype,
            param,
            nbytes,
            make,
        )
        self.kernel_times: list[float] | None = None
        self.base_times: list[float] | None = None
        self.check = ""


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.reps = args.reps or (5 if args.quick else 20)
        self.rows: list[dict] = []
        self.gpu = torch.cuda.get_device_name(0)
        self.stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def row(
        self, job: Job, impl: str, times: list[float], base_p50: float | None, check: str
    ) -> dict:
        p50 = _q(times, 0.5)
        return {
            "gpu": self.gpu,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "op": job.op,
            "impl": impl,
            "k": job.k,
            "d": job.d,
            "dtype": job.dtype,
            "param": job.param,
            "p20_ms": round(_q(times, 0.2), 4),
            "p50_ms": round(p50, 4),
            "p80_ms": round(_q(times, 0.8), 4),
            "gbps": round(job.nbytes / (p50 * 1e-3) / 1e9, 1),
            "speedup_vs_torch": round(base_p50 / p50, 2) if base_p50 else "",
            "check": check,
            "timestamp": self.stamp,
        }

    def run(self, jobs: list[Job]) -> None:
        """Kernels first (each checked against its reference), then the torch baselines:
        a long torch baseline heats the GPU and would slow the kernel timed right after it."""
        for job in jobs:
            kernel, baseline, check = job.make()
            job.check = check()
            job.kernel_times = _time(kernel, self.reps)
            _log(job, "kernel", job.kernel_times, job.check)
            del kernel, baseline, check
            torch.cuda.empty_cache()
        if not self.args.no_baseline:
            for job in jobs:
                kernel, baseline, check = job.make()
                del kernel, check
                if baseline is None:
                    continue
                try:
                    job.base_times = _time(baseline, max(3, self.reps // 2))
                    _log(job, "torch", job.base_times, "")
                except torch.OutOfMemoryError:
                    print(
                        f"  {job.op} torch baseline k={job.k}: out of memory, skipped",
                        file=sys.stderr,
                    )
                del baseline
                torch.cuda.empty_cache()
        for job in jobs:
            base_p50 = None
            if job.base_times:
                self.rows.append(self.row(job, "torch", job.base_times, None, ""))
                base_p50 = _q(job.base_times, 0.5)
            impl = "torch" if job.op == "copy" else "kernel"  # the copy roofline is torch's copy_
            self.rows.append(self.row(job, impl, job.kernel_times, base_p50, job.check))


def _log(job: Job, impl: str, times: list[float], check: str) -> None:
    p50 = _q(times, 0.5)
    print(
        f"  {job.op:<11} {impl:<6} k={job.k!s:<3} d={job.d} {job.dtype:<5} {job.param:<9} p50={p50:8.3f} ms "
        f"{job.nbytes / (p50 * 1e-3) / 1e9:7.1f} GB/s  {check}",
        file=sys.stderr,
        flush=True,
    )


def _run(args: argparse.Namespace) -> int:
    from swarmshake import kernels as K
    from swarmshake.kernels import _ext
    from swarmshake.kernels.fingerprint import _T_KEYS
    from swarmshake.kernels.krum import reference_krum_distances
    from swarmshake.kernels.median import reference_coordinate_median, reference_trimmed_mean
    from swarmshake.kernels.quant import reference_dequantize_int8, reference_quantize_int8

    if not torch.cuda.is_available():
        print(
            "swarmshake bench kernels: needs a CUDA device (run it on the H100 machine)",
            file=sys.stderr,
        )
        return 2
    if _ext.get() is None:
        print(
            f"swarmshake bench kernels: the CUDA extension did not build: {_ext.build_error()}",
            file=sys.stderr,
        )
        return 2
    b = Bench(args)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if o not in ALL_OPS]
    if bad:
        print(f"unknown op(s) {bad}; choose from {ALL_OPS}", file=sys.stderr)
        return 64
    d = args.d or ((1 << 22) if args.quick else (1 << 25))
    ks = (
        [int(v) for v in args.ks.split(",")]
        if args.ks
        else ([4, 16, 64] if args.quick else [3, 4, 8, 16, 32, 64])
    )
    dts = [v.strip() for v in args.dtypes.split(",")] if args.dtypes else ["fp32"]
    print(
        f"# {b.gpu}, torch {torch.__version__}, CUDA {torch.version.cuda}, d = {d}, reps = {b.reps}",
        file=sys.stderr,
    )

    def data(shape, dtype, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    jobs: list[Job] = []
    if "copy" in ops:

        def make_copy():
            x = data((16, d), torch.float32, 1)
            y = torch.empty_like(x)
            return (lambda: y.copy_(x)), None, (lambda: "")

        jobs.append(Job("copy", 16, d, "fp32", "", 2 * 16 * d * 4, make_copy))

    for dn in dts:
        dtype = DTYPES[dn]
        es = torch.empty(0, dtype=dtype).element_size()
        for k in ks if (dn == "fp32" or args.ks) else [16]:
            io = (k + 1) * d * es
            if "median" in ops:

                def make_median(k=k, dtype=dtype):
                    x = data((k, d), dtype, k)

                    def check():
                        ok = _bit_equal(K.coordinate_median(x), reference_coordinate_median(x))
                        return "exact" if ok else "MISMATCH"

                    return (lambda: K.coordinate_median(x)), (lambda: x.median(dim=0)), check

                jobs.append(Job("median", k, d, dn, "", io, make_median))
            if "trimmed" in ops:
                trim = max(1, k // 4) if k >= 3 else 0

                def make_trimmed(k=k, dtype=dtype, trim=trim):
                    x = data((k, d), dtype, k)

                    def check():
                        ok = _bit_equal(K.trimmed_mean(x, trim), reference_trimmed_mean(x, trim))
                        return "exact" if ok else "MISMATCH"

                    def base():  # sort-based trimmed mean in torch ops
                        return x.sort(dim=0).values[trim : k - trim].float().mean(dim=0).to(x.dtype)

                    return (lambda: K.trimmed_mean(x, trim)), base, check

                jobs.append(Job("trimmed", k, d, dn, f"trim={trim}", io, make_trimmed))
            if "krum" in ops and k >= 2:

                def make_krum(k=k, dtype=dtype):
                    x = data((k, d), dtype, k)

                    def check():
                        got, want = K.krum_distances(x), reference_krum_distances(x)
                        return f"rel_err={float(((got - want).abs() / want.clamp_min(1e-300)).max()):.1e}"

                    def base():
                        xf = x.float()
                        return torch.cdist(xf, xf) ** 2

                    return (lambda: K.krum_distances(x)), base, check

                jobs.append(Job("krum", k, d, dn, "", k * d * es, make_krum))

    n = 16 * d  # the flat-tensor ops: as many bytes as a 16-peer fp32 stack
    if "fingerprint" in ops:

        def make_fp():
            x = data((n,), torch.float32, 99)
            keys = torch.from_numpy(_T_KEYS.view("int64")).cuda()

            def base():  # a torch-op multiply-sum over int64 words
                w = x.view(torch.int32).view(-1, 4096).to(torch.int64)
                return (w * keys).sum()

            return (
                (lambda: K.fingerprint(x)),
                base,
                (lambda: "cpu==gpu" if K.fingerprint(x) == K.fingerprint(x.cpu()) else "MISMATCH"),
            )

        jobs.append(Job("fingerprint", "", n, "fp32", "", n * 4, make_fp))
    for dn in dts:
        dtype = DTYPES[dn]
        es = torch.empty(0, dtype=dtype).element_size()
        qbytes = n * es + n + n // 256 * 4
        if "quant" in ops:

            def make_quant(dtype=dtype):
                x = data((n,), dtype, 7)

                def check():
                    q, s = K.quantize_int8(x, 256)
                    q2, s2 = reference_quantize_int8(x, 256)
                    return "exact" if _bit_equal(q, q2) and _bit_equal(s, s2) else "MISMATCH"

                return (
                    (lambda: K.quantize_int8(x, 256)),
                    (lambda: reference_quantize_int8(x, 256)),
                    check,
                )

            jobs.append(Job("quant", "", n, dn, "block=256", qbytes, make_quant))
        if "dequant" in ops:

            def make_dequant(dtype=dtype):
                q, s = K.quantize_int8(data((n,), dtype, 7), 256)

                def check():
                    ok = _bit_equal(
                        K.dequantize_int8(q, s, n, 256, dtype),
                        reference_dequantize_int8(q, s, n, 256, dtype),
                    )
                    return "exact" if ok else "MISMATCH"

                return (
                    (lambda: K.dequantize_int8(q, s, n, 256, dtype)),
                    (lambda: reference_dequantize_int8(q, s, n, 256, dtype)),
                    check,
                )

            jobs.append(Job("dequant", "", n, dn, "block=256", qbytes, make_dequant))

    b.run(jobs)
    _print_table(b.rows, to_stderr=args.json)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu_tag = "".join(c if c.isalnum() else "_" for c in b.gpu).strip("_")
    path = out / f"kernels_{gpu_tag}_{'quick' if args.quick else 'full'}.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(b.rows)
    print(f"wrote {path} ({len(b.rows)} rows); host {platform.node()}", file=sys.stderr)
    if args.json:
        print(json.dumps({"csv": str(path), "rows": b.rows}))
    return 1 if any(r["check"] == "MISMATCH" for r in b.rows) else 0


def _print_table(rows: list[dict], to_stderr: bool = False) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency, but keep the CSV path alive
        for r in rows:
            print(r, file=sys.stderr if to_stderr else sys.stdout)
        return
    t = Table(
        title=f"swarmshake kernels on {rows[0]['gpu'] if rows else '?'} (torch {torch.__version__})"
    )
    for col in (
        "op",
        "impl",
        "k",
        "d",
        "dtype",
        "param",
        "p20 ms",
        "p50 ms",
        "p80 ms",
        "GB/s",
        "x torch",
        "check",
    ):
        t.add_column(
            col, justify="right" if col not in ("op", "impl", "dtype", "param", "check") else "left"
        )
    for r in rows:
        t.add_row(
            r["op"],
            r["impl"],
            str(r["k"]),
            str(r["d"]),
            r["dtype"],
            r["param"],
            f"{r['p20_ms']:.3f}",
            f"{r['p50_ms']:.3f}",
            f"{r['p80_ms']:.3f}",
            f"{r['gbps']:.0f}",
            str(r["speedup_vs_torch"]),
            r["check"],
        )
    Console(width=160, stderr=to_stderr).print(t)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``swarmshake bench kernels``; returns the exit code."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return _run(args)


if __name__ == "__main__":
    raise SystemExit(main())
