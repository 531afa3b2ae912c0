"""Scale benchmarks: a full-PeMS-sized series and a million graphs over a few ranks.

Run by hand (not in CI; the full sizes need about 10 GB of disk and 15 GB of memory)::

    mpiexec -n 2 python -m ddstore.bench.scale series --path /tmp/ddstore_scale/pems.npy
    mpiexec -n 2 python -m ddstore.bench.scale series --scale 0.1 ...   # 10 % of the steps
    mpiexec -n 2 python -m ddstore.bench.scale graphs --path /tmp/ddstore_scale/ising.bp

``series``: writes (once, cached) a synthetic PeMS-shaped series, 105,120 five-minute
steps x 11,160 sensors x 2 features float32 (9.4 GB), as a raw ``.npy`` file: speeds and
flows with daily and weekly periodicity, per-sensor levels, noise and a few missing
values (NaN).  Then loads it into a :class:`~ddstore.spatiotemporal.WindowDataset` at
``--width`` (default 2) with ``fill=0``: each rank reads only its own steps plus the halo
(:func:`~ddstore.spatiotemporal.load_npy`, block by block), the as-if-SWA statistics are
merged across ranks, and nobody holds the whole series.  It iterates one epoch of the
training windows (h = 12, batch 64) with the global sampler and one with the batch
sampler.  It reports per rank: peak RSS of the load and of each epoch and its parts
(store share, interpreter, transient), PSS (which sums to the node's use), load and epoch
times, windows/s and bytes read from the file, and what the store's memory check says
about ``width=1`` at this size and at full size (it asks, it never allocates it).
``--check`` (small sizes only) compares the statistics and every window of both epochs
with the materialised brute force of :mod:`ddstore.testing.windows`.

``graphs``: writes (once, cached, in a separate process) ``--graphs`` Ising graphs (about
14.6 KB each: 14.6 GB for a million) to an ADIOS2 file (CFF) with ``graphs.write_adios``,
which streams 64 MB blocks; loads them over the ranks through ``GraphDataset.from_adios``
(each rank reads its range block by block straight into the store) and runs one
shuffled epoch of batched loading; reports bytes per rank, peak RSS per rank, load time
and graphs/s.

Results are printed by rank 0 and written to ``<out>/scale_<series|graphs>.json``.
"""
import argparse
import os
import platform
import shutil
import sys
import time

import numpy as np

from ddstore import _lifecycle
from ddstore.bench import ArgumentParser, plural, write_report
from ddstore.errors import DDStoreValueError
from ddstore.memory import gb_bytes
from ddstore.cli import (TRANSPORTS, HelpFormatter, at_least, check_width, report_dir,
                         seed, width_text)

from .memory import MemoryWatch, node_available

GB = 1e9
PEMS_STEPS, PEMS_NODES, PEMS_FEATURES = 105120, 11160, 2
STEPS_PER_DAY = 288


# ------------------------------------------------------------------------- data
def _hash_noise(t, nodes, salt):
    """Deterministic noise in [-0.5, 0.5) for steps ``t`` ([k, 1] float64) x nodes."""
    v = np.sin(t * (12.9898 + salt) + np.arange(nodes)[None, :] * (78.233 + salt))
    v *= 43758.5453
    return v - np.floor(v) - 0.5


def pems_block(start, stop, nodes, features=2, seed=0):
    """Steps ``[start, stop)`` of the synthetic PeMS-like series, float32
    ``[stop - start, nodes, features]``; deterministic per (step, node).

    Feature 0 is a speed (per-sensor level, morning and evening dips on weekdays, weaker
    at weekends, noise), feature 1 a flow (daily cycle scaled by the day of week), any
    further feature a scaled copy.  About 1 in 50,000 speeds is missing (NaN), and sensor
    3 has an outage (NaN) for the steps ``[500, 520)``.
    """
    t = np.arange(start, stop, dtype=np.float64)[:, None]
    rng = np.random.default_rng([seed, 7])
    level = rng.uniform(45, 70, nodes)[None, :]
    depth = rng.uniform(5, 30, nodes)[None, :]
    shift = rng.uniform(-0.02, 0.02, nodes)[None, :]
    base = rng.uniform(100, 400, nodes)[None, :]
    tod = (t % STEPS_PER_DAY) / STEPS_PER_DAY
    dow = (t // STEPS_PER_DAY) % 7
    week = np.where(dow < 5, 1.0, 0.35)
    rush = (np.exp(-((tod - 0.33 - shift) / 0.04) ** 2)
            + np.exp(-((tod - 0.72 - shift) / 0.05) ** 2))
    noise = _hash_noise(t, nodes, 0.0)
    out = np.empty((stop - start, nodes, features), dtype=np.float32)
    speed = level - depth * rush * week + 4.0 * noise
    speed[np.abs(noise) > 0.49999] = np.nan
    if nodes > 3 and start < 520 and stop > 500:
        speed[max(500, start) - start:min(520, stop) - start, 3] = np.nan
    out[:, :, 0] = speed
    if features > 1:
        day_cycle = 0.5 - 0.5 * np.cos(2 * np.pi * tod)
        out[:, :, 1] = base * day_cycle * (0.6 + 0.4 * week) + 10.0 * _hash_noise(
            t, nodes, 1.0)
    for k in range(2, features):
        out[:, :, k] = out[:, :, 0] * (0.01 * k)
    return out


def pems_timestamps(steps):
    return (np.datetime64("2017-01-01T00:00") +
            np.arange(steps) * np.timedelta64(5, "m")).astype("datetime64[ns]")


def _npy_matches(path, shape, dtype):
    """Whether ``path`` is a complete .npy file of ``shape`` and ``dtype``."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            fshape, fortran, fdtype = read(fh)
            offset = fh.tell()
        want = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return (tuple(fshape) == tuple(shape) and np.dtype(fdtype) == np.dtype(dtype)
                and not fortran and os.path.getsize(path) == offset + want)
    except (OSError, ValueError):
        return False


def _mark(path):
    """The file beside ``path`` that says a benchmark wrote it (so it may be replaced
    or removed: what the user put there never is)."""
    return f"{path}.written-by-ddstore-bench"


def _check_ours(path):
    """Refuse ``path`` when it exists and a benchmark did not write it."""
    if os.path.lexists(path) and not os.path.exists(_mark(path)):
        raise ValueError(f"{path} exists and was not written by this benchmark (no "
                         f"{os.path.basename(_mark(path))} beside it): give another "
                         f"--path, or remove it yourself")


def remove_written(path):
    """Remove ``path`` (a file or a directory) if a benchmark wrote it, with its mark;
    anything else is left where it is."""
    if not os.path.exists(_mark(path)):
        return
    if os.path.isdir(path) and not os.path.islink(path):
        import shutil
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)
    os.remove(_mark(path))


def write_pems_npy(path, steps, nodes, features, seed=0, progress=True):
    """Write the synthetic series to ``path`` (.npy, C order) one day at a time, through a
    temporary file renamed at the end.  Returns seconds spent (0 if already there: a
    file of that shape is reused).  A file of another shape is replaced only when a
    benchmark wrote it (:func:`remove_written`); anything else there is refused."""
    shape = (steps, nodes, features)
    if _npy_matches(path, shape, np.float32):
        return 0.0
    _check_ours(path)
    from tqdm import tqdm
    t0 = time.perf_counter()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.writing-{os.getpid()}"
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
              "fortran_order": False, "shape": shape}
    need, free = steps * nodes * features * 4, shutil.disk_usage(os.path.dirname(
        os.path.abspath(path))).free
    if need > free:
        raise DDStoreValueError(f"writing {path}: the series ({steps} x {nodes} x "
                                f"{features} float32) needs {gb_bytes(need)}, more than the "
                                f"{gb_bytes(free)} free there; give a smaller --scale or "
                                f"another --path")
    # (removed however the process ends: a SIGTERM left the partial file)
    remove = _lifecycle.remove_when_ended(tmp)
    try:
        with open(tmp, "wb") as fh, tqdm(total=steps * nodes * features * 4, unit="B",
                                         unit_scale=True, desc=f"writing {path}",
                                         disable=not progress) as bar:
            np.lib.format.write_array_header_2_0(fh, header)
            for a in range(0, steps, STEPS_PER_DAY):
                block = pems_block(a, min(steps, a + STEPS_PER_DAY), nodes, features, seed)
                fh.write(block.tobytes())
                bar.update(block.nbytes)
        open(_mark(path), "w").close()
        os.replace(tmp, path)
    finally:
        remove()  # (nothing there once renamed)
    return time.perf_counter() - t0


# ------------------------------------------------------------------------- helpers
def _args(argv, prog=None):
    p = ArgumentParser(prog=prog or "python -m ddstore.bench.scale",
                       description="ddstore scale benchmarks",
                                formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("series", help="a PeMS-sized series in a WindowDataset",
                       formatter_class=HelpFormatter)
    s.add_argument("--path", default="/tmp/ddstore_scale/pems.npy",
                   help="the .npy file (written if missing, reused if of the same shape; "
                        "removed at the end unless --keep, but only if a benchmark "
                        "wrote it)")
    s.add_argument("--steps", type=at_least(1), default=PEMS_STEPS)
    s.add_argument("--nodes", type=at_least(1), default=PEMS_NODES)
    s.add_argument("--features", type=at_least(1), default=PEMS_FEATURES)
    s.add_argument("--scale", type=at_least(0, float, above=True, most=1000), default=1.0,
                   help="fraction of --steps to use (e.g. 0.1 for a reduced run)")
    s.add_argument("--horizon", type=at_least(1), default=12)
    s.add_argument("--batch-size", type=at_least(1), default=64)
    s.add_argument("--width", default="2", type=width_text, help="store width, or 'auto'")
    s.add_argument("--transport", default="auto", choices=TRANSPORTS)
    s.add_argument("--max-batches", type=at_least(0), default=0,
                   help="cap batches per epoch and sampler (0: the whole epoch)")
    s.add_argument("--chunk-mb", type=at_least(0, float, above=True), default=32.0,
                   help="load block size (float64 MB)")
    s.add_argument("--check", action="store_true",
                   help="compare statistics and every window with brute force (small "
                        "sizes only: every rank materialises the windows)")
    s.add_argument("--keep", action="store_true", help="keep the file afterwards")
    s.add_argument("--seed", type=seed(), default=0)
    s.add_argument("--out", default="bench_results", type=report_dir)
    g = sub.add_parser("graphs", help="Ising graphs from ADIOS2 in a GraphDataset",
                       formatter_class=HelpFormatter)
    g.add_argument("--path", default="/tmp/ddstore_scale/ising.bp",
                   help="the ADIOS2 file (written if missing, else reused; removed at "
                        "the end unless --keep, but only if a benchmark wrote it)")
    g.add_argument("--graphs", type=at_least(1), default=1000000)
    g.add_argument("--batch-size", type=at_least(1), default=64)
    g.add_argument("--width", default="2", type=width_text)
    g.add_argument("--max-batches", type=at_least(0), default=0)
    g.add_argument("--check", action="store_true",
                   help="compare every graph of the epoch with the generator")
    g.add_argument("--keep", action="store_true")
    g.add_argument("--seed", type=seed(), default=0)
    g.add_argument("--out", default="bench_results", type=report_dir)
    args = p.parse_args(argv)
    check_width(p, _width(args.width))
    if args.what == "series":  # the series must hold a window of every split
        from ddstore.spatiotemporal.windows import split_ranges
        try:
            split_ranges(_steps(args), args.horizon)
        except ValueError as exc:
            p.error(f"--steps {args.steps} (x --scale {args.scale}) with --horizon "
                    f"{args.horizon}: {exc}")
    return args


def _steps(args):
    """The series' time steps: --steps times --scale."""
    return max(1, int(round(args.steps * args.scale)))


def _width(text):
    return "auto" if text == "auto" else int(text)


def _gb(x):
    return f"{x / GB:.3f} GB"


def _write_json(comm, args, doc):
    if comm.rank == 0:
        write_report(doc, os.path.join(args.out, f"scale_{args.what}.json"), args.seed)


def _machine():
    return {"host": platform.node(), "cpus": os.cpu_count(),
            "python": sys.version.split()[0]}


def _width1_verdict(ddstore, comm, nbytes):
    """What the store's memory check says about width=1 for ``nbytes`` (no allocation:
    a store with data_nbytes allocates nothing until data is added)."""
    try:
        store = ddstore.DDStore(comm, width=1, data_nbytes=int(nbytes))
    except ddstore.DDStoreMemoryError as exc:
        return {"accepted": False, "message": str(exc)}
    budget = store.memory_budget
    store.free()
    return {"accepted": True, "budget_per_rank": budget}


# ------------------------------------------------------------------------- series
def run_series(args):
    import torch
    from mpi4py import MPI

    import ddstore
    from ddstore import spatiotemporal as st
    from ddstore.spatiotemporal.windows import series_layout, split_ranges
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.rank
    steps = _steps(args)
    shape = (steps, args.nodes, args.features)
    h = args.horizon
    series_bytes = steps * args.nodes * args.features * 4
    full_bytes = PEMS_STEPS * PEMS_NODES * PEMS_FEATURES * 4

    # the file, written once by rank 0
    error, write_s = None, 0.0
    if rank == 0:
        try:
            write_s = write_pems_npy(args.path, *shape, seed=args.seed)
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            error = exc
    write_s = comm.bcast(write_s, root=0)
    error = comm.bcast(None if error is None else f"{type(error).__name__}: {error}")
    if error:
        raise SystemExit(f"writing {args.path} failed: {error}")

    watch = MemoryWatch(node=(rank == 0))
    base = watch.phase()  # interpreter + torch + MPI, before the store
    avail_before = node_available()

    # what the memory check says about width=1, here and at full size (asks only)
    width1_here = _width1_verdict(ddstore, comm, series_bytes)
    width1_full = _width1_verdict(ddstore, comm, full_bytes)
    plan_full = None
    try:
        plan_full = ddstore.DDStore.plan(full_bytes, comm=comm)
    except ddstore.DDStoreMemoryError as exc:
        plan_full = str(exc)

    width = _width(args.width)
    w_guess = comm.size if width == "auto" else width
    stored_total = int(series_layout(steps, h, w_guess, True,
                                     split_ranges(steps, h))["member_offset"][-1])
    data_nbytes = stored_total * args.nodes * args.features * 4
    store = ddstore.DDStore(comm, width=width, transport=args.transport,
                            data_nbytes=data_nbytes)
    series = st.load_npy(args.path, shape=shape, dtype=np.float32,
                         timestamps=pems_timestamps(steps))
    comm.Barrier()
    t0 = time.perf_counter()
    ds = st.WindowDataset(store, "pems", series, horizon=h, fill=0.0,
                          chunk_bytes=int(args.chunk_mb * 2 ** 20))
    load_s = time.perf_counter() - t0
    comm.Barrier()
    load_s_all = time.perf_counter() - t0
    series.close()
    load = watch.phase()
    train = ds.splits()[0]

    ref = None
    if args.check:
        from ddstore.testing.windows import brute_force_stats, materialize_windows
        raw = np.load(args.path)
        raw = np.where(np.isfinite(raw), raw, 0.0).astype(np.float32)
        xs, _ = materialize_windows(raw, h, starts=np.arange(train.start, train.stop))
        mean, std = brute_force_stats(xs)
        del xs
        stats_ok = bool(np.allclose(ds.mean, mean, rtol=1e-9, atol=1e-9)
                        and np.allclose(ds.std, std, rtol=1e-9, atol=1e-9))
        ref = {"series": ((raw.astype(np.float64) - ds.mean) / ds.std).astype(np.float32),
               "stats_ok": stats_ok, "windows_checked": 0, "windows_bad": 0}

    epochs = {}
    for sampler in ("global", "batch"):
        loader = train.loader(args.batch_size, sampler=sampler, seed=args.seed)
        st.set_epoch(loader, 0)
        order = None
        if ref is not None:
            order = ([list(b) for b in loader.batch_sampler] if sampler == "batch" else
                     None)
            if sampler == "global":
                idx = list(loader.sampler)
                order = [idx[i:i + args.batch_size]
                         for i in range(0, len(idx), args.batch_size)]
        comm.Barrier()
        t0 = time.perf_counter()
        windows = batches = 0
        for k, (x, y) in enumerate(loader):
            if args.max_batches and k >= args.max_batches:
                break
            if ref is not None:
                starts = np.asarray(order[k], dtype=np.int64) + train.start
                steps_x = starts[:, None] + np.arange(h)
                ok = (np.array_equal(x.numpy(), ref["series"][steps_x]) and
                      np.array_equal(y.numpy(), ref["series"][steps_x + h]))
                ref["windows_checked"] += len(starts)
                ref["windows_bad"] += 0 if ok else len(starts)
            windows += x.shape[0]
            batches += 1
        epoch_s = time.perf_counter() - t0
        comm.Barrier()
        epoch_all = time.perf_counter() - t0
        mem = watch.phase()
        epochs[sampler] = {"seconds": epoch_s, "seconds_all_ranks": epoch_all,
                           "windows": windows, "batches": batches,
                           "windows_per_s": windows / epoch_s if epoch_s else 0.0,
                           "memory": mem}
    watch.stop()
    mine = {
        "rank": rank, "group_rank": store.group_rank,
        "stored_steps": int(ds.layout["member_stored"][store.group_rank]),
        "owned_steps": int((ds.layout["hi"] - ds.layout["lo"])[
            ds.layout["member"] == store.group_rank].sum()),
        "store_bytes": ds.local_bytes(), "bytes_read_from_file": series.stats["bytes_read"],
        "baseline": base, "load": load, "load_s": load_s,
        "transient_load_bytes": load["peak_rss"] - base["rss"] - ds.local_bytes(),
        "epochs": epochs,
    }
    if ref is not None:
        mine["check"] = {k: v for k, v in ref.items() if k != "series"}
    per_rank = comm.gather(mine, root=0)
    doc = None
    if rank == 0:
        node_pss_load = sum(r["load"]["peak_pss"] for r in per_rank)
        node_pss_epoch = max(sum(r["epochs"][s]["memory"]["peak_pss"] for r in per_rank)
                             for s in epochs)
        # the sum of per-rank PSS peaks over-counts: PSS moves between ranks as they map
        # each other's pages, so the peaks are not simultaneous.  The PSS at the end of
        # each phase (after a barrier) is a simultaneous snapshot of the node's use.
        node_pss_ends = max([sum(r["load"]["pss"] for r in per_rank)] +
                            [sum(r["epochs"][s]["memory"]["pss"] for r in per_rank)
                             for s in epochs])
        peak_rss_load = max(r["load"]["peak_rss"] for r in per_rank)
        peak_rss_any = max([peak_rss_load] + [r["epochs"][s]["memory"]["peak_rss"]
                                               for r in per_rank for s in epochs])
        doc = {
            "benchmark": "scale series", "machine": _machine(), "ranks": comm.size,
            "shape": list(shape), "scale": args.scale, "series_bytes": series_bytes,
            "full_size_bytes": full_bytes, "horizon": h, "batch_size": args.batch_size,
            "width": store.width, "transport": store.transport,
            "memory_budget_per_rank": store.memory_budget, "file": args.path,
            "write_s": write_s, "load_s": load_s_all,
            "node_available_before": avail_before,
            "width1_at_this_size": width1_here, "width1_at_full_size": width1_full,
            "plan_full_size": plan_full,
            "per_rank": per_rank,
            "summary": {
                "peak_rss_load_max_rank": peak_rss_load,
                "peak_rss_load_over_series": peak_rss_load / series_bytes,
                "peak_rss_any_phase_max_rank": peak_rss_any,
                "peak_rss_any_over_series": peak_rss_any / series_bytes,
                "node_peak_pss_load": node_pss_load,
                "node_peak_pss_load_over_series": node_pss_load / series_bytes,
                "node_peak_pss_epoch": node_pss_epoch,
                "node_peak_pss_epoch_over_series": node_pss_epoch / series_bytes,
                "node_pss_at_phase_ends": node_pss_ends,
                "node_pss_at_phase_ends_over_series": node_pss_ends / series_bytes,
                "targets": {"peak_rss_per_rank_le_0.6_series": peak_rss_load <=
                            0.6 * series_bytes,
                            "node_total_le_1.2_series": node_pss_ends <=
                            1.2 * series_bytes},
            },
        }
        if ref is not None:
            doc["check"] = {"stats_ok": all(r["check"]["stats_ok"] for r in per_rank),
                            "windows_checked": sum(r["check"]["windows_checked"]
                                                   for r in per_rank),
                            "windows_bad": sum(r["check"]["windows_bad"]
                                               for r in per_rank)}
        _print_series(doc)
    _write_json(comm, args, doc)
    store.free()
    if rank == 0 and not args.keep:
        remove_written(args.path)
    return doc


def _print_series(doc):
    s = doc["summary"]
    print(f"[scale series] {plural(doc['ranks'], 'rank')}, width {doc['width']} "
          f"({doc['transport']}), shape {doc['shape']} float32 = "
          f"{_gb(doc['series_bytes'])} "
          f"(scale {doc['scale']}); file written in {doc['write_s']:.1f} s; "
          f"loaded in {doc['load_s']:.1f} s", flush=True)
    for r in doc["per_rank"]:
        ep = "; ".join(f"{k}: {v['windows']} windows in {v['seconds']:.1f} s "
                       f"({v['windows_per_s']:.0f}/s), peak RSS {_gb(v['memory']['peak_rss'])}"
                       f", peak PSS {_gb(v['memory']['peak_pss'])}"
                       for k, v in r["epochs"].items())
        print(f"  rank {r['rank']}: store {_gb(r['store_bytes'])} ({r['stored_steps']} "
              f"steps), interpreter {_gb(r['baseline']['rss'])}, load peak RSS "
              f"{_gb(r['load']['peak_rss'])} (transient {_gb(r['transient_load_bytes'])}),"
              f" PSS after load {_gb(r['load']['pss'])}, read from file "
              f"{_gb(r['bytes_read_from_file'])}, load {r['load_s']:.1f} s; {ep}",
              flush=True)
    print(f"  peak RSS per rank during load {_gb(s['peak_rss_load_max_rank'])} = "
          f"{s['peak_rss_load_over_series']:.3f} x series (target <= 0.6); any phase "
          f"{_gb(s['peak_rss_any_phase_max_rank'])} = {s['peak_rss_any_over_series']:.3f} x"
          f" (RSS counts peer pages read through shared memory); node total (sum of peak "
          f"PSS) load {s['node_peak_pss_load_over_series']:.3f} x, epoch "
          f"{s['node_peak_pss_epoch_over_series']:.3f} x (an upper bound: the peaks are not"
          f" simultaneous); PSS summed at phase ends "
          f"{s['node_pss_at_phase_ends_over_series']:.3f} x (target <= 1.2)", flush=True)
    for key in ("width1_at_this_size", "width1_at_full_size"):
        v = doc[key]
        print(f"  {key}: " + ("accepted (fits the budget "
                              f"{_gb(v['budget_per_rank'])} per rank)" if v["accepted"]
                              else f"refused: {v['message']}"), flush=True)
    print(f"  DDStore.plan(full size {_gb(doc['full_size_bytes'])}) -> "
          f"{doc['plan_full_size']}", flush=True)
    if "check" in doc:
        c = doc["check"]
        print(f"  check: statistics {'OK' if c['stats_ok'] else 'WRONG'}; "
              f"{c['windows_checked']} windows compared, {c['windows_bad']} wrong",
              flush=True)


# ------------------------------------------------------------------------- graphs
def run_graphs(args):
    import torch
    from mpi4py import MPI

    import torch_geometric.data  # noqa: F401 - its import (seconds) is not loading time

    import ddstore
    from ddstore import graphs
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.rank
    error, write_s = None, 0.0
    if rank == 0:
        try:
            t0 = time.perf_counter()
            _check_ours(args.path)  # (reused when it is: the graphs are the same)
            if not os.path.exists(args.path):
                # in a separate process, so that the writer's memory does not count in
                # this rank's
                import subprocess
                code = ("import sys; from ddstore.bench.scale import _write_ising; "
                        "_write_ising(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))")
                env = {k: v for k, v in os.environ.items()  # not an MPI process
                       if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPI_"))}
                proc = subprocess.run([sys.executable, "-c", code, args.path,
                                       str(args.graphs), str(args.seed)],
                                      stdout=subprocess.PIPE, text=True, env=env)
                if proc.returncode:
                    raise RuntimeError(f"the writer exited with code {proc.returncode} "
                                       f"(its traceback is above)")
                write_s = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {exc}"
    # the other ranks wait without spinning (an MPI barrier would keep a core busy
    # while the writer needs it)
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.05)
    write_s = comm.bcast(write_s, root=0)
    error = comm.bcast(error, root=0)
    if error:
        raise SystemExit(f"writing {args.path} failed: {error}")
    file_bytes = _du(args.path) if rank == 0 else 0

    watch = MemoryWatch(node=(rank == 0))
    base = watch.phase()
    store = ddstore.DDStore(comm, width=_width(args.width),
                            **({"data_nbytes": int(file_bytes)} if args.width == "auto"
                               else {}))
    comm.Barrier()
    t0 = time.perf_counter()
    ds = graphs.GraphDataset.from_adios(store, "ising", args.path)
    load_s = time.perf_counter() - t0
    comm.Barrier()
    load_all = time.perf_counter() - t0
    load = watch.phase()
    held = store.nbytes()

    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=comm.size, rank=rank,
                                                  shuffle=True, seed=args.seed)
    loader = ds.loader(args.batch_size, sampler=sampler)
    gen = graphs.ising_dataset(len(ds), seed=args.seed) if args.check else None
    order = list(sampler) if args.check else None
    bad = checked = 0
    comm.Barrier()
    t0 = time.perf_counter()
    n = nb = 0
    for k, batch in enumerate(loader):
        if args.max_batches and k >= args.max_batches:
            break
        if gen is not None:
            idx = order[k * args.batch_size:(k + 1) * args.batch_size]
            for j, i in enumerate(idx):
                want, got = gen[int(i)], batch.get_example(j)
                checked += 1
                if not all(torch.equal(getattr(want, key), getattr(got, key))
                           for key in ("x", "pos", "edge_index", "edge_attr", "y")):
                    bad += 1
        n += batch.num_graphs
        nb += 1
    epoch_s = time.perf_counter() - t0
    comm.Barrier()
    epoch_all = time.perf_counter() - t0
    epoch = watch.phase()
    watch.stop()
    mine = {"rank": rank, "store_bytes": held, "baseline": base, "load": load,
            "load_s": load_s, "epoch": epoch, "epoch_s": epoch_s, "graphs": n,
            "batches": nb, "graphs_per_s": n / epoch_s if epoch_s else 0.0,
            "checked": checked, "bad": bad}
    per_rank = comm.gather(mine, root=0)
    doc = None
    if rank == 0:
        data = sum(r["store_bytes"] for r in per_rank) / store.replicas
        doc = {"benchmark": "scale graphs", "machine": _machine(), "ranks": comm.size,
               "graphs": len(ds), "file": args.path, "file_bytes": file_bytes,
               "data_bytes": data, "width": store.width, "write_s": write_s,
               "load_s": load_all, "epoch_s": epoch_all,
               "graphs_per_s_all_ranks": sum(r["graphs"] for r in per_rank) / epoch_all,
               "per_rank": per_rank}
        print(f"[scale graphs] {plural(comm.size, 'rank')}, width {store.width}: "
              f"{len(ds)} Ising graphs, {_gb(data)} in the store (file {_gb(file_bytes)}, "
              f"written in "
              f"{write_s:.1f} s); loaded in {load_all:.1f} s; one shuffled epoch in "
              f"{epoch_all:.1f} s = {doc['graphs_per_s_all_ranks']:.0f} graphs/s", flush=True)
        for r in per_rank:
            target = 0.6 * data + r["baseline"]["rss"]
            print(f"  rank {r['rank']}: store {_gb(r['store_bytes'])}, interpreter "
                  f"{_gb(r['baseline']['rss'])}, load peak RSS {_gb(r['load']['peak_rss'])}"
                  f" (target 0.6 x data + interpreter = {_gb(target)}), epoch peak RSS "
                  f"{_gb(r['epoch']['peak_rss'])}, {r['graphs_per_s']:.0f} graphs/s"
                  + (f", checked {r['checked']} graphs, {r['bad']} wrong" if args.check
                     else ""), flush=True)
    _write_json(comm, args, doc)
    store.free()
    if rank == 0 and not args.keep:
        remove_written(args.path)
    return doc


def _du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path)
               for f in fs)


def _write_ising(path, n, seed):
    """Write ``n`` Ising graphs with ``graphs.write_adios`` (streaming: one 64 MB block
    in memory at a time; all or nothing, so an interrupted write is never taken for the
    cached file), marked as written by a benchmark."""
    from ddstore import graphs
    samples = graphs.ising_dataset(n, seed=seed)
    graphs.write_adios(samples, path, progress=True)
    open(_mark(path), "w").close()
    return n


def main(argv=None, prog=None):
    args = _args(argv, prog)
    if args.what == "series":
        run_series(args)
    else:
        run_graphs(args)


if __name__ == "__main__":
    from ddstore.cli import run_program
    sys.exit(run_program(main))
