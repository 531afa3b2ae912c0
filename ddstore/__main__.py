"""Command line: ``python -m ddstore <command>`` (run under mpiexec).

    mpiexec -n 4 python -m ddstore demo [--rows N] [--row-bytes B] [--width W]
    mpiexec -n 2 python -m ddstore bench-core        # = python -m ddstore.bench.core

Every benchmark module ``ddstore.bench.<name>`` (the names docs/benchmarks.md uses) is
the command ``bench-<name>`` with dashes for underscores (``bench-node-memory``; the
module's spelling is taken too), the same program with the same options: see
``BENCHMARKS`` below, or ``python -m ddstore --help``.

``demo`` fills a store (each rank adds its chunk), reads every row back once (the ranks
share the rows out, in shuffled mini-batches), checks each byte, and prints read latency
and bandwidth (rank 0's lines, on stderr, as the store's log).
"""
import importlib
import logging
import sys
import time

import numpy as np

from ddstore.bench import ArgumentParser, exit_on_every_rank, plural
from ddstore.cli import HelpFormatter, at_least, check_width, set_program

log = logging.getLogger("ddstore")


def _rows(start, stop, row_bytes):
    """Deterministic content of global rows [start, stop): each byte depends on its row."""
    rows = np.arange(start, stop, dtype=np.uint64)[:, None]
    cols = np.arange(row_bytes, dtype=np.uint64)[None, :]
    return ((rows * np.uint64(2654435761) + cols * np.uint64(40503)) % 251).astype(np.uint8)


def check_demo_memory(comm, rows, row_bytes):
    """Collective: end the demo on every rank, naming ``--rows`` and ``--row-bytes``, when
    what its ranks would hold on some node (each rank: its chunk twice, while it is
    copied into the store, and the shuffled order of every row, 8 bytes a row) is more
    than that node's available memory -- instead of a MemoryError on some rank that
    aborts the job.  Assumes width = all ranks, the least a rank can hold."""
    from mpi4py import MPI

    from ddstore.memory import available_memory
    size = comm.Get_size()
    need = 2 * -(-rows // size) * row_bytes + 8 * rows + (64 << 20)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        node_need = node.allreduce(need)
    finally:
        node.Free()
    avail = available_memory()
    short = comm.allreduce((node_need - avail) if node_need > avail else 0, op=MPI.MAX)
    if short:
        exit_on_every_rank(f"--rows {rows} --row-bytes {row_bytes}: the demo's ranks "
                           f"would need about {node_need / 2**30:.3g} GiB on a node (their "
                           f"chunks twice while filling, 8 bytes a row for the read "
                           f"order), {short / 2**30:.3g} GiB more than it has available; "
                           f"use fewer rows or bytes per row")


def demo(argv=None, prog=None):
    from mpi4py import MPI

    import ddstore
    parser = ArgumentParser(prog=prog or "python -m ddstore demo",
                            description=COMMANDS["demo"][1], formatter_class=HelpFormatter)
    parser.add_argument("--rows", type=at_least(1), default=200_000, help="global rows")
    parser.add_argument("--row-bytes", type=at_least(1), default=1024, help="bytes per row")
    parser.add_argument("--width", type=at_least(1), default=None,
                        help="ranks per replica (default: all the ranks, one replica)")
    parser.add_argument("--batch", type=at_least(1), default=128,
                        help="rows per get_batch call of the timed random reads")
    parser.add_argument("--transport", default="auto", choices=["auto", "rma", "shm"],
                        help="how remote rows are read (auto: shared memory within a "
                             "node, one-sided MPI between nodes)")
    args = parser.parse_args(argv)
    check_width(parser, args.width)  # argparse's error, once, naming the widths allowed
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    check_demo_memory(comm, args.rows, args.row_bytes)
    try:  # a width the job cannot have is refused alike on every rank: say it once
        store = ddstore.DDStore(comm, width=args.width, transport=args.transport)
    except ddstore.DDStoreValueError as exc:
        exit_on_every_rank(str(exc))
    with store:
        lo, hi = ddstore.partition(args.rows, store.group_size, store.group_rank)
        chunk = np.empty((hi - lo, args.row_bytes), dtype=np.uint8)
        step = max(1, (16 << 20) // args.row_bytes)  # made in blocks of about 16 MB
        for a in range(lo, hi, step):
            chunk[a - lo:min(a + step, hi) - lo] = _rows(a, min(a + step, hi),
                                                         args.row_bytes)
        t0 = time.perf_counter()
        store.add("demo", chunk)
        del chunk
        fill_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        held = comm.gather(store.nbytes(), root=0)
        if rank == 0:
            log.info("store: %s, width %d (%s), transport %s; %s of "
                     "%d B = %.1f MB; filled in %.2f s; held per rank: %s MB",
                     plural(store.size, "rank"), store.width,
                     plural(store.replicas, "replica"), store.transport,
                     plural(args.rows, "row"),
                     args.row_bytes, args.rows * args.row_bytes / 1e6, fill_s,
                     [round(h / 1e6, 1) for h in held])
        # the ranks read every row once between them, each a shuffled share (one
        # permutation, dealt out), in mini-batches, and check them
        order = np.random.default_rng(0).permutation(args.rows)
        mine = order[rank::store.size]
        lat = []
        bad = 0
        elapsed = 0.0  # time spent reading, not checking
        for b in range(0, len(mine), args.batch):
            idx = np.sort(mine[b:b + args.batch])[::-1]  # any order works; check it
            s = time.perf_counter()
            got = store.get_batch("demo", idx)
            dt = time.perf_counter() - s
            elapsed += dt
            lat.append(dt / len(idx))
            want = np.concatenate([_rows(i, i + 1, args.row_bytes) for i in idx])
            bad += int((got != want).any(axis=1).sum())
        stats = comm.gather((len(mine), elapsed, np.asarray(lat), bad), root=0)
        if rank == 0:
            rows_read = sum(s[0] for s in stats)
            lat_all = np.concatenate([s[2] for s in stats]) * 1e6
            p50, p95, p99 = np.percentile(lat_all, [50, 95, 99])
            slowest = max(s[1] for s in stats)
            bad_total = sum(s[3] for s in stats)
            log.info("read %s in batches of %d: %.0f rows/s, %.1f MB/s over all "
                     "ranks (read time only); per-row latency p50 %.2f us, p95 %.2f us, "
                     "p99 %.2f us",
                     plural(rows_read, "row"), args.batch, rows_read / slowest,
                     rows_read * args.row_bytes / slowest / 1e6, p50, p95, p99)
            log.info("verified every byte: %s", "OK" if bad_total == 0 else
                     f"{bad_total} rows WRONG")
        if comm.allreduce(bad):
            return 1
    return 0


# every module of ddstore.bench that has a main(), as "bench-<name>" with dashes for
# underscores (tests/test_cli.py checks that none is missing); ddstore.bench.memory is
# a helper, not a benchmark
BENCHMARKS = {
    "core": "core read paths: per-row lock vs batched RMA vs shared memory vs memcpy "
            "(mpiexec -n 2)",
    "gather": "random-row batches (get_batch) vs numpy's take, by row size and store "
              "size (mpiexec -n 2)",
    "compat": "pyddstore (the original DDStore API) on the original's workloads "
              "(mpiexec -n 2)",
    "graphs": "graph loading: store vs PFF vs CFF vs an in-memory list (mpiexec -n 2)",
    "spatiotemporal": "index-batching vs materialised windows (one process; starts its "
                      "own mpiexec -n 2)",
    "temporal": "temporal neighbour sampling (mpiexec -n 2, or one process)",
    "temporal_scale": "the bounded T-CSR build at TGL's scale (GDELT-shaped, 191 M edges "
                      "with --scale gdelt) from arrays and edges.csv (mpiexec -n 2)",
    "dynamic": "dynamic graphs: checkpoints + deltas vs full snapshots (mpiexec -n 2)",
    "scale": "full-PeMS-sized series and a million graphs (mpiexec -n 2; by hand)",
    "prefetch": "epoch time with and without prefetch (mpiexec -n 2)",
    "node_memory": "NodeMemory read + commit per batch vs TGL's MailBox in torch "
                   "(mpiexec -n 2, or one process)",
    "progress": "reads of a computing rank: the progress agent on and off, its cost "
                "(mpiexec -n 2; between nodes with MPICH's ofi/tcp)",
    "serve": "between nodes: reads by message vs one-sided gets (mpiexec -n 2 with "
             "MPICH's ofi/tcp)",
    "checkpoint": "save / restore per rank vs dd, and restore vs building from the "
                  "source (mpiexec -n 2)",
    "pyg": "PyG NeighborLoader over the store vs over an in-memory Data: sampled "
           "edges/s, peak RSS (mpiexec -n 2, or one process)",
    "device": "the pipeline to the device: resident windows vs a torch gather, windows "
              "from the store vs a pinned copy, epochs with a step (one process; "
              "scripts/gpu_check.sh on a GPU)",
}

COMMANDS = {"demo": (demo, "fill a store, read every row back (each once, the ranks "
                           "sharing them out), check each byte")}
COMMANDS.update({"bench-" + name.replace("_", "-"): (
    f"ddstore.bench.{name}", f"{text} -- module ddstore.bench.{name}")
    for name, text in BENCHMARKS.items()})
# a module's own spelling is taken too (bench-node_memory for bench-node-memory)
ALIASES = {f"bench-{name}": "bench-" + name.replace("_", "-")
           for name in BENCHMARKS if "_" in name}


def build_parser():
    parser = ArgumentParser(
        prog="python -m ddstore", description="ddstore command line (run under mpiexec; "
        "each command takes its own options, see: python -m ddstore COMMAND --help)",
        epilog="Each bench-NAME command is the benchmark module ddstore.bench.NAME (as "
        "docs/benchmarks.md names them): 'python -m ddstore bench-core --quick' runs "
        "'python -m ddstore.bench.core --quick'.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, text) in COMMANDS.items():
        # the command parses its own options (and its own --help)
        sub.add_parser(name, help=text, description=text, add_help=False,
                       aliases=[a for a, c in ALIASES.items() if c == name])
    return parser


class _Prefixed(logging.Formatter):
    """``[ddstore] message``, once: the package's own warnings carry the prefix already
    (they are written for a plain Python without this formatting)."""

    def format(self, record):
        text = super().format(record)
        return text if text.startswith("[ddstore]") else f"[ddstore] {text}"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # exits 0 on --help, 2 with a message on a missing or unknown command
    args, rest = build_parser().parse_known_args(argv)
    from mpi4py import MPI
    logging.basicConfig(level=logging.INFO if MPI.COMM_WORLD.Get_rank() == 0 else
                        logging.WARNING, format="%(message)s")
    for handler in logging.getLogger().handlers:
        handler.setFormatter(_Prefixed())
    command = ALIASES.get(args.command, args.command)
    set_program(f"python -m ddstore {command}")
    target = COMMANDS[command][0]
    if isinstance(target, str):
        target = importlib.import_module(target).main
    return target(rest, prog=f"python -m ddstore {command}") or 0


def run(argv=None):
    """The ``ddstore`` command: :func:`main` through :func:`ddstore.cli.run_program`
    (a refused size or input ends with one line, not a traceback per rank)."""
    from .cli import run_program
    return run_program(main, argv)


if __name__ == "__main__":
    sys.exit(run())
