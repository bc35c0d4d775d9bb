"""offload's CPU device against its peers: Numba (`@njit(parallel=True)` with
`prange`) and native Rust with rayon, on the kernels and sizes of `offload
bench`, plus saxpy at sizes that are bound by memory bandwidth, beside the
machine's streaming-copy bandwidth (12 bytes per element: the source read,
the destination read for ownership and written; saxpy's 12 are x and y read
and y written). Run it through `scripts/bench-peers`,
which installs Numba and builds `offload` first.

Timed by turns: per round, a few runs of Numba, of offload, of rayon (offload
and rayon through `offload bench --serve`, which times them in-process), and
for the bandwidth-bound sizes of the streaming copy, each
turn after a pause (Numba's OpenMP threads spin on after a parallel region)
and a few untimed runs (on this 2-core VM a contender's first runs after a
pause ran up to 6x slower); the figure is the median of all timed runs. Ratios follow the bench's convention, the
slowdown: offload's time / the peer's (1.00x as fast, above 1 slower).

The Numba kernels are written as a performance-minded user would: float32
data and float32 constants (so that no value is widened to float64),
`parallel=True` with `prange`, `error_model="numpy"` (no division checks), and
IEEE arithmetic (no `fastmath`, which would let LLVM reassociate: offload's
results are bit-exact against Rust's).
"""

import argparse
import json
import math
import subprocess
import sys
import time

import numba as nb
import numpy as np

f32 = np.float32
# Seconds between one contender's turn and the next, and untimed runs at
# the start of each turn (see `main`).
SETTLE = 0.05
WARM = 5
JIT = dict(parallel=True, error_model="numpy", cache=False)


@nb.njit(**JIT)
def saxpy(a, x, y):
    for i in nb.prange(x.shape[0]):
        y[i] = a * x[i] + y[i]


@nb.njit(**JIT)
def mandelbrot(w, h, max_iter, out):
    for p in nb.prange(w * h):
        cx = f32(p % w) * f32(3.0) / f32(w) - f32(2.0)
        cy = f32(p // w) * f32(3.0) / f32(h) - f32(1.5)
        zx = f32(0.0)
        zy = f32(0.0)
        n = 0
        while n < max_iter:
            if zx * zx + zy * zy > f32(4.0):
                break
            t = zx * zx - zy * zy + cx
            zy = f32(2.0) * zx * zy + cy
            zx = t
            n += 1
        out[p] = n


@nb.njit(**JIT)
def nbody(dt, eps2, px, py, pz, m, vx, vy, vz):
    n = px.shape[0]
    for b in nb.prange(n):
        ax = f32(0.0)
        ay = f32(0.0)
        az = f32(0.0)
        for j in range(n):
            dx = px[j] - px[b]
            dy = py[j] - py[b]
            dz = pz[j] - pz[b]
            s = dx * dx + dy * dy + dz * dz + eps2
            s = m[j] / (s * np.sqrt(s))
            ax += dx * s
            ay += dy * s
            az += dz * s
        vx[b] += dt * ax
        vy[b] += dt * ay
        vz[b] += dt * az


@nb.njit(**JIT)
def matmul(n, a, b, c):
    for i in nb.prange(n * n):
        row = i // n
        col = i % n
        acc = f32(0.0)
        for k in range(n):
            acc += a[row * n + k] * b[k * n + col]
        c[i] = acc


@nb.njit(error_model="numpy")
def cnd(d):
    k = f32(1.0) / (f32(1.0) + f32(0.2316419) * abs(d))
    poly = ((((k * f32(1.330274429) - f32(1.821255978)) * k + f32(1.781477937)) * k
             - f32(0.356563782)) * k + f32(0.31938153)) * k
    w = f32(1.0) - poly * f32(0.3989422804) * np.exp(d * d * f32(-0.5))
    return f32(1.0) - w if d < f32(0.0) else w


@nb.njit(**JIT)
def blackscholes(r, v, s, x, t, call, put):
    for j in nb.prange(s.shape[0]):
        sqt = np.sqrt(t[j])
        d1 = (np.log(s[j] / x[j]) + (v * v * f32(0.5) + r) * t[j]) / (v * sqt)
        d2 = d1 - v * sqt
        disc = x[j] * np.exp(-r * t[j])
        call[j] = s[j] * cnd(d1) - disc * cnd(d2)
        put[j] = disc * (f32(1.0) - cnd(d2)) - s[j] * (f32(1.0) - cnd(d1))


@nb.njit(**JIT)
def dot(x, y):
    s = f32(0.0)
    for i in nb.prange(x.shape[0]):
        s += x[i] * y[i]
    return s


def numba_case(kernel, n, rng):
    """A no-argument function running kernel `kernel` at size `n` in Numba,
    after checking its result against NumPy where the arithmetic is exact."""
    if kernel == "saxpy":
        x = (np.arange(n) % 1000).astype(f32)
        y = np.ones(n, dtype=f32)
        saxpy(f32(2.0), x, y)
        assert np.array_equal(y, f32(2.0) * x + f32(1.0)), "Numba's saxpy is wrong"
        return lambda: saxpy(f32(2.0), x, y)
    if kernel == "dot":
        # A reduction (`prange` with `+=`); its order of additions is
        # Numba's, so the check allows rounding.
        i = np.arange(n)
        x = ((i * 7) % 1000).astype(f32) * f32(1e-3)
        y = ((i * 13) % 777).astype(f32) * f32(1e-3)
        want = float(np.dot(x.astype(np.float64), y.astype(np.float64)))
        assert abs(float(dot(x, y)) - want) <= 1e-3 * abs(want), "Numba's dot is wrong"
        return lambda: dot(x, y)
    if kernel == "mandelbrot":
        w = int(math.isqrt(n))
        out = np.zeros(w * w, dtype=np.int32)
        return lambda: mandelbrot(w, w, 256, out)
    if kernel == "nbody":
        cols = [rng.uniform(lo, hi, n).astype(f32)
                for lo, hi in [(-1, 1)] * 3 + [(0.5, 1.5)] + [(-0.1, 0.1)] * 3]
        return lambda: nbody(f32(0.01), f32(0.01), *cols)
    if kernel == "matmul":
        a = (np.arange(n * n) % 17).astype(f32)
        b = (np.arange(n * n) % 13).astype(f32)
        c = np.zeros(n * n, dtype=f32)
        matmul(n, a, b, c)
        want = (a.reshape(n, n).astype(np.float64) @ b.reshape(n, n).astype(np.float64)).ravel()
        assert np.array_equal(c.astype(np.float64), want), "Numba's matmul is wrong"
        return lambda: matmul(n, a, b, c)
    if kernel == "blackscholes":
        s = rng.uniform(10, 100, n).astype(f32)
        x = rng.uniform(10, 100, n).astype(f32)
        t = rng.uniform(0.2, 2.0, n).astype(f32)
        call = np.zeros(n, dtype=f32)
        put = np.zeros(n, dtype=f32)
        return lambda: blackscholes(f32(0.02), f32(0.3), s, x, t, call, put)
    raise ValueError(kernel)


class Server:
    """`offload bench --serve`, one request and reply per line."""

    def __init__(self, offload, workers):
        self.p = subprocess.Popen(
            [offload, "bench", "--serve", "--workers", str(workers)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, **req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        reply = json.loads(self.p.stdout.readline())
        if not reply.get("ok"):
            sys.exit(f"offload bench --serve: {reply.get('error')}")
        return reply

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def median(ts):
    ts = sorted(ts)
    return ts[len(ts) // 2]


def timed(f, reps):
    out = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        f()
        out.append(time.perf_counter_ns() - t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--offload", default="target/release/offload")
    ap.add_argument("--workers", type=int, default=None,
                    help="threads for Numba, offload and rayon (default: every core)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of turns")
    ap.add_argument("--per-turn", type=int, default=5, help="timed runs per turn")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and one round (a smoke test, not a measurement)")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    ap.add_argument("--only", action="append", default=[],
                    help="only this kernel (repeatable); no geomean unless all five run")
    args = ap.parse_args()
    import os
    workers = args.workers or os.cpu_count()
    nb.set_num_threads(workers)
    rng = np.random.default_rng(4)
    # (kernel, size, one of the five the verdict's geomean counts)
    cases = [("saxpy", 1 << 20, True), ("mandelbrot", 256 * 256, True),
             ("nbody", 512, True), ("matmul", 128, True),
             ("blackscholes", 100_000, True),
             ("saxpy", 1 << 24, False), ("saxpy", 1 << 26, False),
             ("dot", 1 << 24, False)]
    rounds, per = args.rounds, args.per_turn
    if args.quick:
        cases = [(k, max(n // 64, 16) if k != "matmul" else 16, g) for k, n, g in cases]
        rounds, per = 1, 2
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    srv = Server(args.offload, workers)
    rows = []
    for kernel, n, counted in cases:
        setup = srv.ask(op="setup", kernel=kernel, n=n)
        f = numba_case(kernel, n, rng)
        f()  # compiled, warm
        t = {"numba": [], "offload": [], "rayon": [], "copy": []}
        for _ in range(rounds):
            # Each turn runs WARM times untimed first: the others' turns left
            # this contender's threads asleep and its cores idle (after a
            # pause, Numba's saxpy took 0.37, 0.14, 0.10, 0.06 ms; offload's
            # 0.49, 0.60, 0.51, 0.45, 0.33, then 0.10 ms).
            for _ in range(WARM):
                f()
            t["numba"] += timed(f, per)
            for what in ("offload", "rayon"):
                # Numba's OpenMP threads spin for a while after a parallel
                # region (and rayon's briefly): without a pause, the next
                # contender's turn shares the cores with them.
                time.sleep(SETTLE)
                t[what] += srv.ask(op="time", kernel=kernel, n=n, what=what, reps=per,
                                   warm=WARM)["ns"]
            if setup["bytes"]:
                # The streaming copy takes its turn too: the limit is
                # measured under the same load as the kernels.
                time.sleep(SETTLE)
                t["copy"] += srv.ask(op="copy", n=n, reps=per, warm=WARM)["ns"]
            time.sleep(SETTLE)
        m = {k: median(v) for k, v in t.items() if v}
        row = {"kernel": kernel, "n": n, "workers": workers, "counted": counted,
               "numba_ns": m["numba"], "rayon_ns": m["rayon"], "offload_ns": m["offload"],
               "vs_numba": m["offload"] / m["numba"], "vs_rayon": m["offload"] / m["rayon"],
               "check": setup["check"], "bytes": setup["bytes"]}
        if setup["bytes"]:
            copy = m["copy"]
            # Bytes the memory system moves for the copy: source read,
            # destination read for ownership (write-allocate) and written.
            row["copy_gbs"] = 12 * n / copy
            for k in ("numba", "rayon", "offload"):
                row[f"{k}_gbs"] = setup["bytes"] / m[k]
        rows.append(row)
    srv.close()
    counted = [r for r in rows if r["counted"]]
    geo = None
    if len(counted) == 5:
        geo = {k: math.exp(sum(math.log(r[k]) for r in counted) / len(counted))
               for k in ("vs_numba", "vs_rayon")}
    if args.json:
        for r in rows:
            print(json.dumps(r))
        if geo:
            print(json.dumps({"geomean_vs_numba": geo["vs_numba"], "geomean_vs_rayon": geo["vs_rayon"]}))
        return
    ms = lambda ns: f"{ns / 1e6:8.3f}"
    print(f"offload bench-peers: {workers} threads each; medians of {rounds * per} runs by turns; "
          "slowdown = offload time / peer time (1.00x as fast, above slower)")
    print(f"{'kernel':<12} {'size':>9} {'Numba ms':>9} {'rayon ms':>9} {'offload ms':>10} "
          f"{'vs Numba':>9} {'vs rayon':>9}  GB/s (Numba / rayon / offload; streaming copy)")
    for r in rows:
        gbs = ""
        if "copy_gbs" in r:
            gbs = (f"  {r['numba_gbs']:.1f} / {r['rayon_gbs']:.1f} / {r['offload_gbs']:.1f}; "
                   f"copy {r['copy_gbs']:.1f} (offload at {100 * r['offload_gbs'] / r['copy_gbs']:.0f}%)")
        print(f"{r['kernel']:<12} {r['n']:>9} {ms(r['numba_ns']):>9} {ms(r['rayon_ns']):>9} "
              f"{ms(r['offload_ns']):>10} {r['vs_numba']:>8.2f}x {r['vs_rayon']:>8.2f}x{gbs}")
    if geo:
        print(f"geomean of the five bench kernels: {geo['vs_numba']:.2f}x against Numba, "
              f"{geo['vs_rayon']:.2f}x against rayon")


if __name__ == "__main__":
    main()
