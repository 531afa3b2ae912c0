"""Checkpoint and restart (issue 37): save and restore speed per rank against the disk's
own copy rate, and restore against building from the source.

Run::

    mpiexec -n 2 python -m ddstore.bench.checkpoint                  # 1 GB of rows
    mpiexec -n 2 python -m ddstore.bench.checkpoint --gb 0.05 --what rows   # smoke
    mpiexec -n 2 python -m ddstore.bench.checkpoint --what series --scale 1  # full PeMS
    mpiexec -n 2 python -m ddstore.bench.checkpoint --what temporal --edges 191290882

``rows`` (default): one float32 variable of ``--gb`` GB (rows of 1 KiB) and a record set
of 1/8 of that, at width ``size``.  Per rank it times ``store.save`` (every rank writes
its file, fsync, the manifest's rename) and ``DDStore.restore`` at the same width and at
width 1 (every rank reads its rows, checks every block's XXH64), and, as the disk's own
rate in the same job, ``dd`` writing (``conv=fsync``) then reading a file of this rank's
part size on every rank at once, 32 MiB blocks, and the first touch of that many bytes
of fresh shared memory (the window a restore fills: shared mappings fault every 4 KiB
page in, which ``dd``'s reused buffer never pays).  Both reads follow their writes, so both
come from the page cache where it holds them (the machine's memory, not the disk, is then
what is measured, for ``dd`` and for the store alike).  Every restored byte is compared.

``series``: the PeMS-shaped series of :mod:`ddstore.bench.scale` (``--scale`` of its
105,120 steps; the ``.npy`` is written once, cached at ``--path``) built into a
``WindowDataset`` from the file, saved, and restored + reopened by name
(``WindowDataset.open``); ``temporal``: the GDELT-shaped stream of
:mod:`ddstore.bench.temporal_scale` (``--edges``) built with
``TemporalGraph.from_tgl(add_reverse=True)`` from TGL's ``edges.csv`` (the source file,
written range-wise first) and with ``from_arrays`` from each rank's arrays, saved,
restored + reopened (``TemporalGraph.open``).  For both: build, save and restore seconds, the
restore's speed-up over the build, and each phase's peak RSS above the RSS before it
(the store's share included), per rank; windows / sampled neighbours compared.

Results are printed by rank 0 and written to ``<out>/checkpoint_<what>_n<ranks>.json``
with the command, seed and versions.
"""
import os
import subprocess
import time

import numpy as np
from mpi4py import MPI

from ddstore.bench import log, parser, scratch_dir, write_report
from ddstore.cli import at_least, output_dir
from ddstore.bench.memory import peak_rss, reset_peak

GB = 1e9


def _args(argv=None, prog=None):
    p = parser("checkpoint", prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--what", choices=["rows", "series", "temporal"], default="rows")
    p.add_argument("--gb", type=at_least(0, float, above=True), default=1.0,
                   help="rows: GB of rows in all")
    p.add_argument("--dir", default=None, type=output_dir,
                   help="where checkpoints are written (default: a temporary directory "
                   "under $TMPDIR, removed at the end)")
    p.add_argument("--repeat", type=at_least(1), default=2, help="timed runs of each phase")
    p.add_argument("--scale", type=at_least(0, float, above=True, most=1000), default=0.05,
                   help="series: fraction of PeMS's 105,120 steps")
    p.add_argument("--path", default="/tmp/ddstore_scale/pems.npy", help="series: the "
                   "cached .npy (written if missing, reused if of the same shape; one of "
                   "another shape is replaced only if a benchmark wrote it)")
    p.add_argument("--edges", type=at_least(1), default=2_000_000, help="temporal: edges")
    return p.parse_args(argv)


def _timed(comm, fn):
    """Seconds of ``fn()`` on every rank, from a barrier to a barrier (the slowest)."""
    comm.Barrier()
    t0 = time.perf_counter()
    out = fn()
    comm.Barrier()
    return time.perf_counter() - t0, out


def _phase(comm, fn):
    """``(seconds, peak RSS above the RSS at the start on this rank, result)``."""
    reset_peak()
    base = peak_rss()
    secs, out = _timed(comm, fn)
    return secs, peak_rss() - base, out


def _dd(comm, directory, nbytes):
    """Seconds for ``dd`` to write (fsync) and then read ``nbytes`` on every rank at
    once, one file per rank (the disk's own copy rate, same block size as a save)."""
    name = os.path.join(directory, f"dd-{comm.rank}.bin")
    count = max(1, -(-nbytes // (32 << 20)))

    def write():
        subprocess.run(["dd", "if=/dev/zero", f"of={name}", "bs=32M", f"count={count}",
                        "conv=fsync", "status=none"], check=True)

    def read():
        subprocess.run(["dd", f"if={name}", "of=/dev/null", "bs=32M", "status=none"],
                       check=True)
    w, _ = _timed(comm, write)
    r, _ = _timed(comm, read)
    os.remove(name)
    return w, r, count * (32 << 20)


def _first_touch(comm, nbytes):
    """Seconds to touch ``nbytes`` of fresh shared memory on every rank at once (what
    any store pays to hold that many bytes: MPI's shared windows are shared mappings,
    whose first write faults each page in; no transparent huge pages for shmem here)."""
    import mmap

    def touch():
        m = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_SHARED)
        np.frombuffer(m, np.uint8)[::4096] = 1
        return m
    secs, m = _timed(comm, touch)
    m.close()
    return secs


def _rates(comm, secs, nbytes):
    per_rank = comm.allreduce(nbytes, op=MPI.MAX)
    return {"seconds": secs, "bytes_per_rank": per_rank,
            "gb_per_s_per_rank": per_rank / secs / GB if secs else float("inf")}


def run_rows(args, comm, ckdir):
    import ddstore
    rank, size = comm.rank, comm.size
    row = 256  # float32 values: 1 KiB rows
    nrows = max(size, int(args.gb * GB / (row * 4)))
    nrec = max(size, nrows // 64)
    lo, hi = ddstore.partition(nrows, size, rank)
    rlo, rhi = ddstore.partition(nrec, size, rank)
    rng = np.random.default_rng([args.seed, rank])
    rows = rng.standard_normal((hi - lo, row), dtype=np.float32)
    recs = [{"x": np.full((8 + i % 16, 32), i, np.float32)} for i in range(rlo, rhi)]
    path = os.path.join(ckdir, "rows")
    report = {"what": "rows", "nrows": nrows, "row_bytes": row * 4, "records": nrec,
              "size": size, "save": [], "restore_same_width": [], "restore_width_1": [],
              "dd_write": [], "dd_read": [], "first_touch": []}
    with ddstore.DDStore(comm, width=size) as store:
        store.add("rows", rows)
        store.add_records("recs", recs)
        mine = store.nbytes()
        for _ in range(args.repeat):
            secs, _ = _timed(comm, lambda: store.save(path))
            report["save"].append(_rates(comm, secs, mine))
            w, r, nb = _dd(comm, ckdir, mine)
            report["dd_write"].append(_rates(comm, w, nb))
            report["dd_read"].append(_rates(comm, r, nb))
            report["first_touch"].append(_rates(comm, _first_touch(comm, mine), mine))
    checked = 0
    for key, width in (("restore_same_width", size), ("restore_width_1", 1)):
        for i in range(args.repeat):
            secs, store = _timed(comm, lambda: ddstore.DDStore.restore(path, comm,
                                                                       width=width))
            report[key].append(_rates(comm, secs, store.nbytes()))
            if i == 0:  # every byte of this rank's rows and records, read back
                got = store.get_range("rows", lo, hi - lo)
                assert got.tobytes() == rows.tobytes(), "restored rows differ"
                for j, rec in zip(range(rlo, rhi), recs):
                    assert store.get_record("recs", j)["x"].tobytes() == \
                        rec["x"].tobytes(), f"record {j} differs"
                checked += 1
            store.free()
    report["checked_every_byte"] = comm.allreduce(checked) == 2 * size

    def best(key):
        return max(e["gb_per_s_per_rank"] for e in report[key])
    report["save_over_dd_write"] = best("save") / best("dd_write")
    report["restore_over_dd_read"] = best("restore_same_width") / best("dd_read")
    # the floor of a restore into fresh store memory: dd's read plus the first touch
    floor = 1 / (1 / best("dd_read") + 1 / best("first_touch"))
    report["restore_over_dd_read_plus_first_touch"] = best("restore_same_width") / floor
    log(comm, f"rows: {nrows} x {row * 4} B + {nrec} records on {size} rank{'s' * (size != 1)}; "
              f"per rank: "
              f"save {best('save'):.2f} GB/s (dd write {best('dd_write'):.2f}: "
              f"{report['save_over_dd_write']:.2f}x), restore {best('restore_same_width'):.2f}"
              f" GB/s, at width 1 {best('restore_width_1'):.2f} GB/s (dd read "
              f"{best('dd_read'):.2f}: {report['restore_over_dd_read']:.2f}x; dd read + "
              f"first touch of fresh shared memory {floor:.2f}: "
              f"{report['restore_over_dd_read_plus_first_touch']:.2f}x)")
    return report


def run_series(args, comm, ckdir):
    import ddstore
    from ddstore import spatiotemporal as st
    from ddstore.bench.scale import (PEMS_FEATURES, PEMS_NODES, PEMS_STEPS, pems_timestamps,
                                     write_pems_npy)
    steps = max(64, int(round(PEMS_STEPS * args.scale)))
    shape = (steps, PEMS_NODES, PEMS_FEATURES)
    error = None
    if comm.rank == 0:
        try:
            write_pems_npy(args.path, *shape, seed=args.seed)
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            error = f"{type(exc).__name__}: {exc}"
    error = comm.bcast(error, root=0)
    if error:
        raise SystemExit(f"writing {args.path} failed: {error}")
    path = os.path.join(ckdir, "series")
    report = {"what": "series", "shape": list(shape), "size": comm.size}

    def build():
        store = ddstore.DDStore(comm)
        series = st.load_npy(args.path, shape=shape, dtype=np.float32,
                             timestamps=pems_timestamps(steps))
        ds = st.WindowDataset(store, "pems", series, horizon=12, fill=0.0)
        series.close()
        return store, ds
    secs, peak, (store, ds) = _phase(comm, build)
    report["build"] = {"seconds": secs, "peak_rss_above_start": peak}
    picks = np.random.default_rng(args.seed).integers(0, len(ds), 64)
    before = [ds[int(i)] for i in picks]
    secs, _ = _timed(comm, lambda: store.save(path))
    report["save"] = _rates(comm, secs, store.nbytes())
    store.free()

    def restore():
        r = ddstore.DDStore.restore(path, comm)
        return r, st.WindowDataset.open(r, "pems")
    secs, peak, (store, ds2) = _phase(comm, restore)
    report["restore"] = {"seconds": secs, "peak_rss_above_start": peak}
    after = [ds2[int(i)] for i in picks]
    report["windows_equal"] = all(
        all(np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(x, y))
        for x, y in zip(before, after))
    store.free()
    _summary(comm, report)
    return report


def run_temporal(args, comm, ckdir):
    import ddstore
    from ddstore import temporal as tg
    from ddstore.bench.temporal_scale import (GDELT_NODES, stream_range, tgl_roll,
                                              write_tgl_range)
    lo, hi = ddstore.partition(args.edges, comm.size, comm.rank)
    path = os.path.join(ckdir, "temporal")
    csv_dir = os.path.join(ckdir, "tgl")
    if comm.rank == 0:
        os.makedirs(csv_dir, exist_ok=True)
    comm.Barrier()
    _, csv_bytes = write_tgl_range(comm, os.path.join(csv_dir, "edges.csv"), args.edges,
                                   GDELT_NODES, args.seed, 7)
    report = {"what": "temporal", "edges": args.edges, "nodes": GDELT_NODES,
              "size": comm.size, "edges_csv_bytes": csv_bytes}
    roots = np.random.default_rng(args.seed).integers(0, GDELT_NODES, 256)

    def sample(g):
        times = np.full(256, (args.edges - 1) // 7)
        return tg.TemporalSampler(g, [10], strategy="recent").sample(roots, times)

    def from_csv():  # the source file: TGL's edges.csv, each rank its byte range
        store = ddstore.DDStore(comm)
        return store, tg.TemporalGraph.from_tgl(store, "gdelt", csv_dir, add_reverse=True)
    secs, peak, (store, g) = _phase(comm, from_csv)
    report["build_from_csv"] = {"seconds": secs, "peak_rss_above_start": peak}
    store.free()

    src, dst, t = stream_range(args.edges, GDELT_NODES, lo, hi, seed=args.seed)
    split = tgl_roll(args.edges, lo, hi)

    def build():  # from arrays already in memory (not counted in the peak)
        store = ddstore.DDStore(comm)
        g = tg.TemporalGraph.from_arrays(store, "gdelt", src, dst, t, split=split,
                                         num_nodes=GDELT_NODES, add_reverse=True)
        return store, g
    secs, peak, (store, g) = _phase(comm, build)
    report["build"] = {"seconds": secs, "peak_rss_above_start": peak}
    before = sample(g)
    secs, _ = _timed(comm, lambda: store.save(path))
    report["save"] = _rates(comm, secs, store.nbytes())
    store.free()
    del src, dst, t, split

    def restore():
        r = ddstore.DDStore.restore(path, comm)
        return r, tg.TemporalGraph.open(r, "gdelt")
    secs, peak, (store, g2) = _phase(comm, restore)
    report["restore"] = {"seconds": secs, "peak_rss_above_start": peak}
    after = sample(g2)
    report["samples_equal"] = all(
        np.asarray(getattr(a, f)).tobytes() == np.asarray(getattr(b, f)).tobytes()
        for a, b in zip(before, after) for f in ("nodes", "ts", "row", "col", "eid"))
    store.free()
    _summary(comm, report)
    report["restore_speedup_over_csv"] = (report["build_from_csv"]["seconds"] /
                                          report["restore"]["seconds"])
    log(comm, f"temporal: from edges.csv ({csv_bytes / 1e9:.2f} GB) "
              f"{report['build_from_csv']['seconds']:.2f} s: restore "
              f"{report['restore_speedup_over_csv']:.1f}x faster")
    return report


def _summary(comm, report):
    peaks = {k: comm.allgather(report[k]["peak_rss_above_start"]) for k in
             ("build", "restore")}
    report["peak_rss_by_rank"] = peaks
    report["restore_speedup"] = report["build"]["seconds"] / report["restore"]["seconds"]
    report["restore_peak_over_build_peak"] = max(peaks["restore"]) / max(
        1, max(peaks["build"]))
    log(comm, f"{report['what']}: build {report['build']['seconds']:.2f} s, save "
              f"{report['save']['seconds']:.2f} s ({report['save']['gb_per_s_per_rank']:.2f}"
              f" GB/s per rank), restore + open {report['restore']['seconds']:.2f} s: "
              f"{report['restore_speedup']:.1f}x faster than the build, peak RSS "
              f"{report['restore_peak_over_build_peak']:.2f}x the build's")


def main(argv=None, prog=None):
    args = _args(argv, prog)
    comm = MPI.COMM_WORLD
    with scratch_dir(comm, "ddstore-ck-bench-", args.dir) as ckdir:
        run = {"rows": run_rows, "series": run_series, "temporal": run_temporal}[args.what]
        report = run(args, comm, ckdir)
    if comm.rank == 0:
        out = os.path.join(args.out, f"checkpoint_{args.what}_n{comm.size}.json")
        write_report(report, out, args.seed)


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
