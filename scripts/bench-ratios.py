#!/usr/bin/env python3
"""Turn criterion's results (target/criterion) into the ratio tables of
BENCHMARKS.md. Every ratio compares two measurements of the same run:
slowdown = offload time / native time (so 1.0 means as fast as native)."""
import json, math, os, sys

root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"

def median(group, bench):
    p = os.path.join(root, group, bench, "new", "estimates.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)["median"]["point_estimate"]

compute = ["saxpy", "mandelbrot", "nbody", "blackscholes", "matmul", "histogram", "shape_areas"]
# Kernels the CPU JIT does not compile yet (they fall back to the interpreter).
fallback = {"blackscholes": "calls", "shape_areas": "allocation, virtual calls"}
print("| kernel | native seq | native rayon | interp 1 worker | interp all | interp 1 / native seq | interp all / native seq | interp all / native rayon |")
print("|---|---|---|---|---|---|---|---|")
g1, gall, gr = [], [], []
def ms(x):
    return f"{x/1e6:.2f} ms" if x is not None else "-"
for k in compute:
    s, r, i1, ia = (median(k, b) for b in ("native_seq", "native_rayon", "interp_1", "interp_all"))
    if None in (s, r, i1, ia):
        continue
    g1.append(i1 / s); gall.append(ia / s); gr.append(ia / r)
    print(f"| {k} | {ms(s)} | {ms(r)} | {ms(i1)} | {ms(ia)} | {i1/s:.1f}x | {ia/s:.1f}x | {ia/r:.1f}x |")
geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
print(f"| **geomean** | | | | | **{geo(g1):.1f}x** | **{geo(gall):.1f}x** | **{geo(gr):.1f}x** |")
print()
print("| kernel | native rayon | cpu JIT, all cores | cpu / native rayon (slowdown) | cpu 1 worker / native seq (slowdown) |")
print("|---|---|---|---|---|")
gc = []
for k in compute:
    s_, r, c1, ca = (median(k, b) for b in ("native_seq", "native_rayon", "cpu_1", "cpu_all"))
    if None in (s_, r, c1, ca):
        continue
    note = f" (interpreter: {fallback[k]})" if k in fallback else ""
    if k not in fallback:
        gc.append(ca / r)
    print(f"| {k}{note} | {ms(r)} | {ms(ca)} | {ca/r:.2f}x | {c1/s_:.1f}x |")
print(f"| **geomean of compiled kernels** | | | **{geo(gc):.2f}x** | |")
print()
print("| kernel | native seq Box | native rayon Box | native rayon bump | interp 1 worker | interp all | interp all / rayon Box | interp all / rayon bump |")
print("|---|---|---|---|---|---|---|---|")
for k in ["alloc_vectors", "linked_list"]:
    sb, rb, bump, i1, ia = (median(k, b) for b in ("native_seq_box", "native_rayon_box", "native_rayon_bump", "interp_1", "interp_all"))
    if None in (sb, rb, i1, ia):
        continue
    bump_s = ms(bump)
    print(f"| {k} | {ms(sb)} | {ms(rb)} | {bump_s} | {ms(i1)} | {ms(ia)} | {ia/rb:.1f}x | {(f'{ia/bump:.1f}x' if bump else '-')} |")
print()
print("| protocol bench | offload | baseline | slowdown (offload / baseline) | target |")
print("|---|---|---|---|---|")
none = median("deopt_rate", "none")
for rate in ["0.1%", "1%", "10%"]:
    t = median("deopt_rate", rate)
    if None not in (t, none):
        print(f"| deopt {rate} | {ms(t)} | {ms(none)} (no deopts) | {t/none:.2f}x | |")
on, off = median("polls", "on"), median("polls", "off")
if None not in (on, off):
    print(f"| mandelbrot, polls on | {ms(on)} | {ms(off)} (polls off) | {on/off:.2f}x | ≤ 1.03x{'' if on/off <= 1.03 else ' MISSED'} |")
for k in ["saxpy", "mandelbrot", "nbody", "matmul"]:
    for tier in ["quick", "optimized"]:
        t = median("compile", f"{k}_{tier}")
        if t is not None:
            print(f"| compile {k} ({tier}) | {ms(t)} | - | - | ≤ 1 ms{'' if t <= 1e6 else ' MISSED'} |")
