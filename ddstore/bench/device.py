"""Device benchmark (issue 44): windows on the device, windows from the store through the
pipeline, and an epoch with a model step, each against its reference, in one process.

Run::

    python -m ddstore.bench.device                       # CUDA if available, else CPU
    python -m ddstore.bench.device --device cpu --steps 2000 --nodes 50   # a small run

One rank (``MPI.COMM_SELF``), a width-1 store, a synthetic PeMS-like series
(``--steps`` x ``--nodes`` x ``--features``, float32), horizon ``--horizon``, batches of
``--batch`` windows in ``DistributedSampler`` order (``--seed``, default 0), ``--batches``
batches per measurement, ``--repeat`` runs of each (the median is reported, with the
spread):

- ``resident windows``: ``WindowDataset(resident="device")``'s loader (the epoch's order
  on the device, each batch a slice and a gather), against ``torch gather``: the same
  starts, ``s[st[:, None] + arange(h)]`` and ``+ h`` for ``y``, on the same series tensor
  (each run of both makes the epoch's order once and moves it to the device).
- ``store windows (pipeline)``: ``resident="store"``, ``loader(device=..., prefetch=k)``
  (read into reused pinned staging, side-stream copies), against ``pinned copy``: a
  pinned host buffer of the same bytes per batch copied to the device; and
  ``store windows (plain)``: the old path, the view's pageable ``.to(device)`` per batch;
  ``store windows (direct)``: the pipeline with ``direct=True`` (each window copied from
  the store's memory, page-locked in place on CUDA, with no host copy into staging).
- ``epoch: ...``: a synthetic model step of ``--step-ms`` per batch (on CUDA a GPU
  sleep kernel, on CPU ``time.sleep``: both leave the host's cores to the loader), the
  steps alone, then with the store windows through the pipeline (``prefetch=k``), the
  same with ``direct=True``, and without it (plain path).

Prints a table and the ratios of issue 44's targets; writes ``--out`` (JSON).
"""
import platform
import statistics
import sys
import time

import torch

from . import check_windows, exit_on_every_rank, parser, report_path, write_report
from ..cli import at_least, pause
from ..prefetch import MAX_PREFETCH


def _args(argv, prog=None):
    p = parser("device", prog=prog, out=None,
               description="the pipeline to the device: device-resident windows against "
                           "a torch gather, windows from the store against a pinned copy, "
                           "epochs with a model step with and without reading ahead")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=at_least(1), default=20000, help="time steps of the series")
    p.add_argument("--nodes", type=at_least(1), default=2790)
    p.add_argument("--features", type=at_least(1), default=2)
    p.add_argument("--horizon", type=at_least(1), default=12)
    p.add_argument("--batch", type=at_least(1), default=64)
    p.add_argument("--batches", type=at_least(1), default=200, help="batches per measurement")
    p.add_argument("--prefetch", type=at_least(0, most=MAX_PREFETCH), default=2)
    p.add_argument("--step-ms", type=pause("ms"), default=10.0,
                   help="synthetic model step per batch (ms)")
    p.add_argument("--repeat", type=at_least(1), default=3)
    p.add_argument("--threads", type=at_least(1), default=None,
                   help="torch threads (default: 1 on CPU, where torch's thread pool "
                        "stalls on a loaded machine; torch's own default on CUDA)")
    a = p.parse_args(argv)
    from ..device import check_device
    from ..errors import DDStoreValueError
    try:
        check_device(a.device, "--device")
    except DDStoreValueError as exc:
        p.error(str(exc))
    check_windows(p, a)
    return a


class _Clock:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def __enter__(self):
        self.sync()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.sync()
        self.seconds = time.perf_counter() - self.t0
        return False


def _step_fn(device, step_ms):
    """A model step of about ``step_ms`` that uses the batch and leaves the host idle."""
    if device.type == "cuda":
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(10_000_000)
        torch.cuda.synchronize()
        per_ms = 10_000_000 / ((time.perf_counter() - t0) * 1000)
        cycles = int(per_ms * step_ms)

        def step(batch):
            torch.cuda._sleep(cycles)
            return batch[0].reshape(-1)[:1].sum() if batch is not None else None
        return step

    def step(batch):
        time.sleep(step_ms / 1000.0)
        return batch[0].reshape(-1)[:1].sum() if batch is not None else None
    return step


def read_ahead(make, step_ms, prefetch, store=None, barrier=None):
    """Reading ahead against a synthetic model step (``time.sleep(step_ms)``, which leaves
    the core to the reader, as GPU work does), for the between-nodes benchmarks: ``make()``
    gives a fresh iterable of batches (the same each call).  Returns a dict: ``batches``,
    ``read_s`` (the batches alone), ``steps_s`` (the steps alone), ``plain_s`` (read then
    step, no read-ahead), ``ahead_s`` (``prefetch`` batches read ahead in a thread, each
    step on the batch in hand), ``ahead_over_steps`` (target <= 1.1) and ``overlap``
    (the share of the read time hidden: ``(read + steps - ahead) / min(read, steps)``, 1
    = all of it).  ``barrier()`` is called before each timed part."""
    from ..prefetch import PrefetchLoader, prefetch_depth
    depth = prefetch if store is None else prefetch_depth(store, prefetch, "read_ahead")
    sync = barrier or (lambda: None)

    def timed(fn):
        sync()
        t0 = time.perf_counter()
        n = fn()
        return time.perf_counter() - t0, n

    def reads():
        return sum(1 for _ in make())

    def steps(n):
        for _ in range(n):
            time.sleep(step_ms / 1000.0)
        return n

    def epoch(iterable):
        n = 0
        for _ in iterable:
            time.sleep(step_ms / 1000.0)
            n += 1
        return n

    read_s, n = timed(reads)
    steps_s, _ = timed(lambda: steps(n))
    plain_s, _ = timed(lambda: epoch(make()))
    ahead_s, _ = timed(lambda: epoch(PrefetchLoader(make(), depth)))
    hidden = (read_s + steps_s - ahead_s) / max(min(read_s, steps_s), 1e-12)
    return {"batches": n, "prefetch": depth, "step_ms": step_ms, "read_s": read_s,
            "steps_s": steps_s, "plain_s": plain_s, "ahead_s": ahead_s,
            "ahead_over_steps": ahead_s / steps_s if steps_s else None,
            "overlap": max(0.0, min(1.0, hidden))}


def read_ahead_text(r):
    """One line for :func:`read_ahead`'s dict."""
    n = max(r["batches"], 1)
    return (f"read {1e3 * r['read_s'] / n:.2f} ms/batch, step {r['step_ms']:.1f} ms; "
            f"epoch of {r['batches']} batches: steps alone {r['steps_s']:.3f} s, read then "
            f"step {r['plain_s']:.3f} s, prefetch {r['prefetch']} {r['ahead_s']:.3f} s = "
            f"{r['ahead_over_steps']:.2f}x the steps (target <= 1.1), overlap "
            f"{100 * r['overlap']:.0f} % of the reads hidden")


def _take(iterable, n):
    for i, b in enumerate(iterable):
        if i >= n:
            break
        yield b


def main(argv=None, prog=None):
    a = _args(argv, prog)
    from mpi4py import MPI
    import ddstore
    from ddstore import spatiotemporal as st
    from ddstore.spatiotemporal.dataset import batch_collate, distributed_order
    from ddstore.spatiotemporal.synthetic import synthetic_block
    from ddstore._lifecycle import alone_by_design

    if MPI.COMM_WORLD.Get_size() != 1:  # (each rank ran it all, one report for both)
        exit_on_every_rank(f"runs as one process on one device (python -m "
                           f"ddstore.bench.device), not {MPI.COMM_WORLD.Get_size()} ranks")
    device = torch.device(a.device)
    threads = a.threads if a.threads is not None else (1 if device.type == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    clock = _Clock(device)
    T, n, f, h, B = a.steps, a.nodes, a.features, a.horizon, a.batch
    series = synthetic_block(0, T, n, f)
    bytes_pair = 2 * h * n * f * 4
    rows, runs = [], {}
    alone_by_design()  # (one process by design: no launched-without-mpiexec warning)
    store = ddstore.DDStore(MPI.COMM_SELF, width=1)
    try:
        dev = st.WindowDataset(store, "dev", series, h, device=device, resident="device",
                               standardize=False)
        host = st.WindowDataset(store, "host", series, h, device=device, resident="store",
                                standardize=False)
        nb = min(a.batches, -(-len(dev) // B))
        s = dev.device_series
        ar, ar2 = torch.arange(h, device=device), torch.arange(h, 2 * h, device=device)
        pinned = torch.empty(2 * B * h * n * f, dtype=torch.float32,
                             pin_memory=device.type == "cuda")
        pinned.copy_(torch.from_numpy(series[:2 * B * h].reshape(-1)) if T >= 2 * B * h
                     else pinned.new_ones(pinned.shape))
        step = _step_fn(device, a.step_ms)
        copy_threads = store.copy_threads
        from ..device import copy_function
        direct_by = ("dds_copy_pieces + cudaMemcpyAsync" if copy_function(device)
                     else "torch copy_ per piece")

        def resident():
            for x, y in _take(dev.loader(B, seed=a.seed), nb):
                pass

        def gather():  # the epoch's order made here too, as the loader makes it
            order = distributed_order(len(dev), 1, 0, True, 0, 0, False).to(device)
            for i in range(nb):
                st_ = order[i * B:(i + 1) * B]
                x = s[st_[:, None] + ar]
                y = s[st_[:, None] + ar2]
            del x, y

        def pipeline(k=a.prefetch, work=None, direct=False):
            for b in _take(host.loader(B, seed=a.seed, prefetch=k, device=device,
                                       direct=direct), nb):
                if work is not None:
                    work(b)

        plain_loader = torch.utils.data.DataLoader(
            host, batch_size=B, sampler=torch.utils.data.DistributedSampler(
                host, 1, 0, shuffle=True, seed=a.seed), collate_fn=batch_collate)

        def plain(work=None):
            for b in _take(plain_loader, nb):  # the view's own per-batch .to(device)
                if work is not None:
                    work(b)

        def copies():
            for _ in range(nb):
                d = torch.empty(pinned.shape, dtype=pinned.dtype, device=device)
                d.copy_(pinned, non_blocking=device.type == "cuda")

        def steps_alone():
            for _ in range(nb):
                step(None)

        cases = [("resident windows", resident, True), ("torch gather", gather, True),
                 ("store windows (pipeline)", pipeline, True),
                 ("store windows (direct)", lambda: pipeline(direct=True), True),
                 ("store windows (plain)", plain, True), ("pinned copy", copies, True),
                 ("epoch: steps alone", steps_alone, False),
                 (f"epoch: pipeline k={a.prefetch}", lambda: pipeline(work=step), False),
                 (f"epoch: direct k={a.prefetch}",
                  lambda: pipeline(work=step, direct=True), False),
                 ("epoch: no pipeline", lambda: plain(work=step), False)]
        for name, fn, _ in cases:  # warm-up (allocations, the first copies)
            if not name.startswith("epoch"):
                fn()
        for r in range(a.repeat):
            for name, fn, _ in cases:
                with clock as c:
                    fn()
                runs.setdefault(name, []).append(c.seconds)
        for name, fn, data in cases:
            sec = statistics.median(runs[name])
            rows.append({"name": name, "seconds": sec, "runs": runs[name],
                         "per_s": nb * B / sec, "gb_per_s": nb * B * bytes_pair / sec / 1e9,
                         "batches": nb})
    finally:
        store.free()
    by = {r["name"]: r for r in rows}
    ratios = {
        "resident / gather": by["resident windows"]["per_s"] / by["torch gather"]["per_s"],
        "store pipeline / pinned copy":
            by["store windows (pipeline)"]["per_s"] / by["pinned copy"]["per_s"],
        "store direct / pinned copy":
            by["store windows (direct)"]["per_s"] / by["pinned copy"]["per_s"],
        "store plain / pinned copy":
            by["store windows (plain)"]["per_s"] / by["pinned copy"]["per_s"],
        "epoch pipeline / steps alone":
            by[f"epoch: pipeline k={a.prefetch}"]["seconds"] /
            by["epoch: steps alone"]["seconds"],
        "epoch direct / steps alone":
            by[f"epoch: direct k={a.prefetch}"]["seconds"] /
            by["epoch: steps alone"]["seconds"],
        "epoch no pipeline / steps alone":
            by["epoch: no pipeline"]["seconds"] / by["epoch: steps alone"]["seconds"]}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        platform.processor() or platform.machine()
    print(f"device {device} ({name}); series {T} x {n} x {f} float32, horizon {h}, batch "
          f"{B}, {nb} batches, window pair {bytes_pair / 1e3:.0f} KB, step {a.step_ms} ms, "
          f"prefetch {a.prefetch}, median of {a.repeat}, torch threads "
          f"{torch.get_num_threads()}, store copy threads {copy_threads}, direct copies "
          f"by {direct_by}")
    print(f"{'measurement':<28}{'windows/s':>14}{'GB/s':>9}{'s':>9}  spread (s)")
    for r in rows:
        print(f"{r['name']:<28}{r['per_s']:>14,.0f}{r['gb_per_s']:>9.2f}{r['seconds']:>9.3f}"
              f"  {min(r['runs']):.3f}-{max(r['runs']):.3f}")
    for k, v in ratios.items():
        print(f"ratio {k}: {v:.2f}")
    out = {"device": str(device.type), "device_name": name, "args": vars(a), "rows": rows,
           "ratios": ratios, "copy_threads": copy_threads, "direct_by": direct_by}
    write_report(out, report_path(a.out, "device", 1), a.seed)
    return 0


if __name__ == "__main__":
    from ddstore.cli import run_program
    sys.exit(run_program(main))
