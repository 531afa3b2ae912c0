"""Temporal graphs at TGL's scale: the bounded T-CSR build of a GDELT-shaped stream.

Run::

    mpiexec -n 2 python -m ddstore.bench.temporal_scale --scale gdelt   # 1 M, 20 M, 191 M
    mpiexec -n 2 python -m ddstore.bench.temporal_scale --quick         # smoke sizes

The stream has GDELT's shape (16,682 nodes; ``--scale gdelt``: 1 M, 20 M and 191,290,882
edges): uniform random endpoints, timestamps non-decreasing with ``--events-per-ts``
events per timestamp, TGL's chronological 70/15/15 split.  Each rank generates only its
own range of it (block by block from a seed per block of 2**20 edges, so the stream does
not depend on the number of ranks) and the graph is built with ``add_reverse=True`` at
``width = size``.  Per size, reported per rank: build time; peak RSS during the build
above the RSS before it (the inputs already allocated: ``VmHWM`` after resetting it
through ``/proc/self/clear_refs``, ``ru_maxrss`` where that is refused) against the
whole T-CSR's bytes with int64 ids (24 B per entry: the T-CSR as TGL keeps it, the fixed
reference of issue 28's target, whatever id width the store chose) and the bytes the
rank stores; sampled edges/s for ``recent [10]``
and ``uniform [10, 10]`` (mini-batches of ``--batch-size`` edges from the rank's own
range, roots src, dst and a negative at the edges' times), three ways: ``cold`` (the
first pass after the build, its chunks not prefaulted: every first touch of a page of
the peer's chunk is a page fault), ``warm`` (the same batches again) and
``prefaulted`` (the graph built again, ``store.prefault`` of its T-CSR timed, then the
first pass; skipped with ``--no-prefault-pass``), each with the page faults taken
while sampling (``ru_minflt``).  The builds measured here run with
``DDSTORE_PREFAULT=off`` (the library's default maps the T-CSR at the end of the build,
which would count the peer's shared pages in this process's peak RSS).  Then the same stream is
written range-wise as TGL's ``edges.csv`` (each rank formats its own lines and writes
them at its byte offset) and built again with ``from_tgl`` (no inputs in memory: the
peak is all above the baseline), with lines parsed per second per rank, and the two
T-CSRs compared.  Printed, and written as JSON under ``--out``.
"""
import os
import platform
import resource
import time

import numpy as np
from mpi4py import MPI

from ddstore.bench import log, parser, scratch_dir, write_report
from ddstore.cli import at_least, output_dir
from ddstore.bench.memory import current_rss, peak_rss, reset_peak

GDELT_NODES = 16_682
GDELT_EDGES = 191_290_882
BLOCK = 1 << 20


def _edge_counts(text):
    """``--sizes``: comma-separated edge counts, whole numbers >= 1 (``2e7`` taken)."""
    import argparse
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a number") from None
        if not (1 <= value < 2 ** 63 and value == int(value)):  # (NaN, inf: no)
            raise argparse.ArgumentTypeError(f"must be whole numbers >= 1, got {part.strip()}")
        out.append(int(value))
    return tuple(out)


_edge_counts.__name__ = "comma-separated edge counts"


def _args(argv, prog=None):
    p = parser("temporal_scale", prog, "ddstore T-CSR build at TGL's scale (GDELT-shaped)",
               batch_size=600)
    p.add_argument("--scale", choices=["gdelt", "small"], default="small",
                   help="gdelt: 1 M, 20 M and 191,290,882 edges; small: 1 M only")
    p.add_argument("--sizes", type=_edge_counts, default=None,
                   help="comma-separated edge counts (overrides "
                                                 "--scale)")
    p.add_argument("--quick", action="store_true", help="smoke sizes (20 k, 60 k edges)")
    p.add_argument("--num-nodes", type=at_least(1), default=GDELT_NODES)
    p.add_argument("--events-per-ts", type=at_least(1), default=7)
    p.add_argument("--batches", type=at_least(1), default=40, help="mini-batches per rank and "
                                                           "configuration")
    p.add_argument("--chunk-edges", type=at_least(1), default=None,
                   help="edges per rank per round of the build (default: the library's)")
    p.add_argument("--no-csv", action="store_true", help="skip the edges.csv path")
    p.add_argument("--no-prefault-pass", action="store_true",
                   help="skip the second build and its prefaulted first pass")
    p.add_argument("--csv-dir", default=None, type=output_dir,
                   help="where edges.csv is written (default: a temporary directory)")
    return p.parse_args(argv)


# ------------------------------------------------------------------ the stream
def stream_range(num_edges, num_nodes, lo, hi, seed=0, per_ts=7):
    """Edges ``[lo, hi)`` of the stream: ``(src, dst, t)`` (int64; the times are
    integers, as the edges.csv path writes them, so both paths keep int64 times)."""
    n = hi - lo
    src = np.empty(n, dtype=np.int64)
    dst = np.empty(n, dtype=np.int64)
    for b in range(lo // BLOCK, -(-hi // BLOCK)):
        a, z = b * BLOCK, min((b + 1) * BLOCK, num_edges)
        pair = np.random.default_rng([seed, b]).integers(0, num_nodes, (2, z - a))
        s, e = max(a, lo), min(z, hi)
        src[s - lo:e - lo] = pair[0, s - a:e - a]
        dst[s - lo:e - lo] = pair[1, s - a:e - a]
    t = np.arange(lo, hi, dtype=np.int64) // per_ts
    return src, dst, t


def tgl_roll(num_edges, lo, hi):
    """TGL's ext_roll of edges [lo, hi): 0 for the first 70 %, 1 to 85 %, then 2."""
    i = np.arange(lo, hi, dtype=np.int64)
    return ((i >= int(0.70 * num_edges)).astype(np.int64) +
            (i >= int(0.85 * num_edges)).astype(np.int64))


def _digits(x):
    d = np.ones(x.shape, dtype=np.int64)
    p = 10
    for _ in range(18):
        big = x >= p
        if not big.any():
            break
        d += big
        p *= 10
    return d


def csv_lines(columns):
    """Lines ``"a,b,c\\n"`` of non-negative int64 columns, formatted with whole-array
    operations (bytes)."""
    digits = [_digits(c) for c in columns]
    length = sum(digits) + len(columns)
    ends = np.cumsum(length)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    at = ends - length  # start of each line
    for j, (c, d) in enumerate(zip(columns, digits)):
        for k in range(int(d.max()) if len(d) else 0):
            has = d > k
            pos = at[has] + k
            power = 10 ** (d[has] - 1 - k)
            out[pos] = (c[has] // power) % 10 + 48
        at = at + d
        out[at] = ord("\n") if j == len(columns) - 1 else ord(",")
        at = at + 1
    return out.tobytes()


def _csv_piece(num_edges, num_nodes, a, b, seed, per_ts):
    s, d, t = stream_range(num_edges, num_nodes, a, b, seed, per_ts)
    return [np.arange(a, b, dtype=np.int64), s, d, t.astype(np.int64),
            tgl_roll(num_edges, a, b)]


def write_tgl_range(comm, path, num_edges, num_nodes, seed, per_ts):
    """Collective: each rank writes its range of the stream's lines of ``edges.csv``
    (TGL's layout ``,src,dst,time,ext_roll``) at its byte offset: one pass computes the
    byte length of its lines, an exclusive scan gives the offsets, a second pass formats
    and writes them.  Returns (seconds, bytes of the file)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    from ddstore import partition
    lo, hi = partition(num_edges, size, rank)
    header = b",src,dst,time,ext_roll\n"
    t0 = time.perf_counter()
    nbytes = 0
    for a in range(lo, hi, BLOCK):
        cols = _csv_piece(num_edges, num_nodes, a, min(a + BLOCK, hi), seed, per_ts)
        nbytes += int(sum(int(_digits(c).sum()) for c in cols)) + len(cols) * (
            min(a + BLOCK, hi) - a)
    before = comm.exscan(nbytes) if size > 1 else 0
    offset = len(header) + (before or 0)
    total = comm.allreduce(nbytes) + len(header)
    if rank == 0:
        with open(path, "wb") as f:
            f.write(header)
            f.truncate(total)
    comm.Barrier()
    fd = os.open(path, os.O_WRONLY)
    try:
        for a in range(lo, hi, BLOCK):
            data = csv_lines(_csv_piece(num_edges, num_nodes, a, min(a + BLOCK, hi), seed,
                                        per_ts))
            os.pwrite(fd, data, offset)
            offset += len(data)
    finally:
        os.close(fd)
    comm.Barrier()
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX), total


# ------------------------------------------------------------------ memory
def _peak(reset_ok):
    """The peak RSS since :func:`~ddstore.bench.memory.reset_peak` (``ru_maxrss``, the
    process's whole-life peak, where the reset was refused)."""
    if reset_ok:
        return peak_rss()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _checksum(store, name):
    """Order-sensitive checksum of this rank's T-CSR chunk (ids as int64, whatever
    their stored width)."""
    acc = 0
    for k in ("nbr", "ts", "eid"):
        v = store.local_view(f"{name}/{k}")
        for a in range(0, v.shape[0], BLOCK):  # in blocks: no full-size temporary
            w = np.arange(a + 1, min(a + BLOCK, v.shape[0]) + 1, dtype=np.uint64)
            b = v[a:a + BLOCK]
            b = (b if b.dtype == np.float64 else b.astype(np.int64)).view(np.uint64)
            acc ^= int(np.bitwise_xor.reduce(b * w))
    return acc


# ------------------------------------------------------------------ one size
def _measure_build(comm, build):
    base = current_rss()
    ok = reset_peak()
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    g = build()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _peak(ok)
    return g, dict(build_s=comm.allreduce(wall, op=MPI.MAX), cpu_s=cpu,
                   rss_before=base, peak_rss=peak, peak_above=peak - base, hwm_reset=ok)


def _sample(comm, g, src, dst, t, args, lo):
    from ddstore import temporal as tg
    rng = np.random.default_rng(args.seed + comm.Get_rank())
    m = len(src)
    out = {}
    for strategy, fanouts in (("recent", (10,)), ("uniform", (10, 10))):
        sm = tg.TemporalSampler(g, fanouts, strategy, seed=args.seed)
        edges_n, elapsed, faults = 0, 0.0, 0
        nb = min(args.batches, max(1, m // args.batch_size))
        for b in np.linspace(0, max(0, m - args.batch_size), nb).astype(np.int64):
            a, z = int(b), int(b) + min(args.batch_size, m)
            roots = np.concatenate([src[a:z], dst[a:z], rng.integers(0, g.num_nodes, z - a)])
            ts = np.tile(t[a:z], 3)
            f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t1 = time.perf_counter()
            blocks = sm.sample(roots, ts)
            elapsed += time.perf_counter() - t1
            faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f1
            edges_n += sum(bl.num_edges for bl in blocks)
        per = comm.allgather(edges_n / elapsed if elapsed else 0.0)
        out[f"{strategy}_{'_'.join(map(str, fanouts))}"] = dict(
            edges_per_s_per_rank=float(np.mean(per)), slowest=float(min(per)),
            batches_per_rank=int(nb), page_faults_per_rank=comm.allgather(faults))
    return out


def _build_arrays(store, src, dst, t, split, args):
    from ddstore import temporal as tg
    return tg.TemporalGraph.from_arrays(store, "g", src, dst, t, split=split,
                                        num_nodes=args.num_nodes, add_reverse=True,
                                        chunk_edges=args.chunk_edges)


def run_size(comm, store_factory, num_edges, args, csv_dir):
    import ddstore
    from ddstore import temporal as tg
    rank, size = comm.Get_rank(), comm.Get_size()
    lo, hi = ddstore.partition(num_edges, size, rank)
    res = dict(num_edges=num_edges, num_nodes=args.num_nodes, ranks=size)
    t0 = time.perf_counter()
    src, dst, t = stream_range(num_edges, args.num_nodes, lo, hi, args.seed,
                               args.events_per_ts)
    split = tgl_roll(num_edges, lo, hi).astype(np.int8)
    res["generate_s"] = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    inputs = src.nbytes + dst.nbytes + t.nbytes + split.nbytes
    with store_factory() as store:
        g, m = _measure_build(comm, lambda: _build_arrays(store, src, dst, t, split, args))
        whole = 24 * int(g.indptr[-1])  # int64 ids (TGL's T-CSR), the fixed reference
        per_rank = comm.allgather(dict(m, inputs=inputs, store_bytes=store.nbytes()))
        res["arrays"] = dict(
            build_s=m["build_s"], tcsr_bytes_whole=whole,
            per_rank=per_rank,
            peak_above_over_tcsr=[p["peak_above"] / whole for p in per_rank],
            store_over_tcsr=[p["store_bytes"] / whole for p in per_rank],
            transient_over_tcsr=[(p["peak_above"] - p["store_bytes"]) / whole
                                 for p in per_rank])
        log(comm, f"{num_edges:>11,} edges from arrays: build {m['build_s']:.1f} s; "
                  f"peak RSS above inputs / whole T-CSR {whole / 1e9:.3g} GB: "
                  f"{', '.join(f'{x:.3f}' for x in res['arrays']['peak_above_over_tcsr'])}"
                  f" (store alone "
                  f"{', '.join(f'{x:.3f}' for x in res['arrays']['store_over_tcsr'])})")
        # cold: the first pass after the build; warm: the same batches again
        res["sampling"] = _sample(comm, g, src, dst, t, args, lo)
        res["sampling_warm"] = _sample(comm, g, src, dst, t, args, lo)
        if not args.no_prefault_pass:  # a fresh build, its T-CSR mapped before sampling
            g.remove()
            g = _build_arrays(store, src, dst, t, split, args)
            comm.Barrier()
            t0 = time.perf_counter()
            mapped = store.prefault(*(f"g/{k}" for k in ("nbr", "ts", "eid")))
            res["prefault_s"] = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            res["prefault_bytes_per_rank"] = comm.allgather(mapped)
            res["sampling_prefaulted"] = _sample(comm, g, src, dst, t, args, lo)
            log(comm, f"    prefault of the T-CSR: {res['prefault_s']:.2f} s for "
                      f"{max(res['prefault_bytes_per_rank']) / 1e9:.3g} GB per rank")
        for k, v in res["sampling"].items():
            rates = [("cold", v)] + [(w, res[f"sampling_{w}"][k]) for w in
                                     ("prefaulted", "warm") if f"sampling_{w}" in res]
            log(comm, f"    {k:14s} M sampled edges/s per rank: " + ", ".join(
                f"{w} {x['edges_per_s_per_rank'] / 1e6:.2f} (slowest "
                f"{x['slowest'] / 1e6:.2f}; {max(x['page_faults_per_rank']):,} minor "
                f"faults)" for w, x in rates))
        ref = comm.allgather(_checksum(store, "g"))
        g.remove()
        src = dst = t = split = None  # the inputs are freed before the edges.csv path
        if not args.no_csv:
            path = os.path.join(csv_dir, "edges.csv")
            w_s, fbytes = write_tgl_range(comm, path, num_edges, args.num_nodes, args.seed,
                                          args.events_per_ts)
            log(comm, f"    edges.csv written range-wise: {fbytes / 1e9:.3g} GB in "
                      f"{w_s:.1f} s")
            g, m = _measure_build(comm, lambda: tg.TemporalGraph.from_tgl(
                store, "g", csv_dir, add_reverse=True, chunk_edges=args.chunk_edges))
            per_rank = comm.allgather(dict(m, store_bytes=store.nbytes(), **g.read_stats))
            same = comm.allgather(_checksum(store, "g")) == ref
            res["tgl"] = dict(
                write_s=w_s, file_bytes=fbytes, build_s=m["build_s"], per_rank=per_rank,
                lines_per_s_per_rank=[p["lines"] / p["build_s"] for p in per_rank],
                lines_per_cpu_s_per_rank=[p["lines"] / p["cpu_s"] for p in per_rank],
                parse_lines_per_s_per_rank=[p["lines"] / p["parse_s"] for p in per_rank],
                parse_lines_per_cpu_s_per_rank=[p["lines"] / p["parse_cpu_s"]
                                                for p in per_rank],
                peak_above_over_tcsr=[p["peak_above"] / whole for p in per_rank],
                transient_over_tcsr=[(p["peak_above"] - p["store_bytes"]) / whole
                                     for p in per_rank],
                same_tcsr_as_arrays=bool(same))
            log(comm, f"    from_tgl: build {m['build_s']:.1f} s "
                      f"({min(res['tgl']['lines_per_s_per_rank']) / 1e6:.2f} M lines/s "
                      f"per rank, {min(res['tgl']['lines_per_cpu_s_per_rank']) / 1e6:.2f} "
                      f"M per CPU-second; parsing alone "
                      f"{min(res['tgl']['parse_lines_per_s_per_rank']) / 1e6:.2f} M/s, "
                      f"{min(res['tgl']['parse_lines_per_cpu_s_per_rank']) / 1e6:.2f} M per "
                      f"CPU-second); peak RSS / whole T-CSR: "
                      f"{', '.join(f'{x:.3f}' for x in res['tgl']['peak_above_over_tcsr'])}"
                      f"; same T-CSR as from arrays: {same}")
            g.remove()
            comm.Barrier()
            if rank == 0:
                os.remove(path)
    return res


def main(argv=None, prog=None):
    import pandas  # noqa: F401 (imported before any peak is measured: from_tgl uses it)

    import ddstore
    args = _args(argv, prog)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.sizes:
        sizes = list(args.sizes)
    elif args.quick:
        sizes = [20_000, 60_000]
    else:
        sizes = [1_000_000, 20_000_000, GDELT_EDGES] if args.scale == "gdelt" else \
            [1_000_000]
    results = []
    from ddstore.settings import PREFAULT_ENV
    before = os.environ.get(PREFAULT_ENV)
    os.environ[PREFAULT_ENV] = "off"  # cold, prefaulted and warm are measured apart
    # (--no-csv: no files, and no directory)
    given = args.csv_dir if args.csv_dir is not None or not args.no_csv else ""
    try:
        with scratch_dir(comm, "ddstore-tgl-", given) as csv_dir:
            for n in sizes:
                results.append(run_size(comm, lambda: ddstore.DDStore(comm, width=size), n,
                                        args, csv_dir or None))
    finally:
        if before is None:
            os.environ.pop(PREFAULT_ENV, None)
        else:
            os.environ[PREFAULT_ENV] = before
    if rank == 0:
        out = dict(benchmark="temporal_scale", ranks=size, width=size,
                   host=platform.node(), num_nodes=args.num_nodes,
                   events_per_ts=args.events_per_ts, chunk_edges=args.chunk_edges,
                   results=results)
        write_report(out, os.path.join(args.out, f"temporal_scale_n{size}.json"),
                     args.seed)
    return 0


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
