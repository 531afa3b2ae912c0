"""Benchmarks: scripts that print numbers and write them as JSON.  Each is a module
``ddstore.bench.<name>`` with a ``main(argv=None, prog=None)``, run as ``python -m
ddstore.bench.<name>`` or ``python -m ddstore bench-<name>`` (the same program; see
docs/benchmarks.md and ``python -m ddstore --help``).  ``ddstore.bench.memory`` is the
memory measurement they share, not a benchmark.

What every benchmark shares lives here: :func:`parser` (the command line, with the
options all of them take), :func:`write_report` (the JSON, stating the command, seed and
versions it came from), :func:`ratio` / :func:`ratio_text` (a ratio printed and written
with its control: the spread of one side measured twice in the same job, so a change can
be told from the noise of a shared machine), :func:`rma_counts` / :func:`traffic` (the
one-sided messages a timed region made, per batch and per remote owner), :func:`log` and
:class:`Items`."""
import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from .. import _lifecycle
from ..cli import plural  # noqa: F401 -- (the benchmarks' import of it)

from ..cli import (ArgumentParser, HelpFormatter, at_least, launch_rank,  # noqa: F401
                   check_widths, foreign_file, program_name, report_dir, report_target, seed,
                   transports_text, widths_text)

__all__ = ["write_report", "launch_rank", "ArgumentParser", "exit_on_every_rank",
           "require_files", "plural", "parser", "report_path", "versions", "command_line", "spread",
           "ratio", "ratio_text", "rma_counts", "traffic", "traffic_text", "log", "Items",
           "check_windows", "run_child", "scratch_dir"]

# the packages whose versions every report states (None: not installed)
PACKAGES = ("numpy", "torch", "torch_geometric", "pyg_lib", "torch_sparse", "mpi4py")


def parser(name, prog=None, description=None, out="bench_results", batch_size=None,
           batch_help=None, widths_help=None):
    """The command line of benchmark ``ddstore.bench.<name>``: rank-0-only messages
    (:class:`ArgumentParser`), defaults shown in ``--help``, and the options every
    benchmark takes: ``--seed`` (default 0) and ``--out`` (default ``out``: the directory
    of the JSON, or with ``out=None`` its path, default :func:`report_path`).  Options
    several take, added when asked: ``--batch-size`` (default ``batch_size``) and, with
    ``widths_help``, the store configurations ``--widths`` (default ``auto``) and
    ``--transports`` (default ``auto,rma``)."""
    p = _Parser(prog=prog or f"python -m ddstore.bench.{name}",
                       description=description,
                       formatter_class=HelpFormatter)
    p.add_argument("--seed", type=seed(), default=0, help="seed of every random draw")
    p.add_argument("--out", default=out, type=report_target if out is None else report_dir,
                   help=(f"JSON path, or a directory to write {name}_n<ranks>.json in "
                         f"(default bench_results/{name}_n<ranks>.json)" if out is None
                         else "directory of the JSON report"))
    if batch_size is not None:
        p.add_argument("--batch-size", type=at_least(1), default=batch_size,
                       help=batch_help)
    if widths_help is not None:
        p.add_argument("--widths", default="auto", type=widths_text, help=widths_help)
        p.add_argument("--transports", default="auto,rma", type=transports_text,
                       help="transports for widths > 1 (width 1 never reads remotely)")
    return p


class _Parser(ArgumentParser):
    """A benchmark's command line: ``--widths`` checked against the job's rank count
    once parsed (argparse's error naming the widths allowed, rather than the store's
    traceback on every rank after the data was made)."""

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        if getattr(ns, "widths", None) is not None:
            check_widths(self, ns.widths)
        # the rank's /dev/shm watcher now, not at its first store: a benchmark that
        # writes its files for minutes first, ended by SIGTERM there, left MPICH's
        # segment behind
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            _lifecycle.watch_shm()
        return ns


@contextlib.contextmanager
def scratch_dir(comm, prefix, given=None):
    """A directory for a benchmark's files: ``given`` as it is, or a new one under
    ``$TMPDIR`` made by rank 0 (its path broadcast) and removed at the end, however the
    job ends: after every rank is done (a barrier) when the block ends normally, at once
    by rank 0 when it ends by an exception (a Ctrl-C included: a barrier there waited
    for ranks inside another collective call, and hung the job), and by a watcher when
    the process is ended by a signal (SIGTERM from ``timeout`` or a batch system)."""
    if given is not None:
        yield given
        return
    made = tempfile.mkdtemp(prefix=prefix) if comm.rank == 0 else None
    remove = _lifecycle.remove_when_ended(made) if made is not None else None
    path = comm.bcast(made, root=0)
    try:
        yield path
    except BaseException:
        if remove is not None:
            remove()
        raise
    comm.Barrier()
    if remove is not None:
        remove()


def check_windows(parser, args, split=(0.7, 0.1, 0.2)):
    """After ``parser.parse_args``: a series of ``args.steps`` time steps must hold a
    window of ``args.horizon`` steps and its target (``2 x horizon + 1`` steps at
    least), and so must each part of ``split`` (the train / val / test ratios the
    program's datasets use), else argparse's error naming the options (exit code 2)."""
    if args.steps < 2 * args.horizon + 1:
        parser.error(f"--steps {args.steps}: must be more than 2 x --horizon = "
                     f"{2 * args.horizon} (a window and its target)")
    from ..errors import DDStoreValueError
    from ..spatiotemporal.windows import split_ranges
    try:
        split_ranges(args.steps, args.horizon, split)
    except DDStoreValueError as exc:
        parser.error(f"--steps {args.steps} with --horizon {args.horizon}: {exc}")


def report_path(out, name, ranks):
    """Where a benchmark whose ``--out`` is a file path writes: ``out`` when it ends in
    ``.json``, else ``<name>_n<ranks>.json`` in the directory ``out`` (what the other
    benchmarks' ``--out`` names: one ``--out DIR`` serves a series of them), by default
    ``bench_results``."""
    base = f"{name}_n{ranks}.json"
    if not out:
        return os.path.join("bench_results", base)
    return out if out.endswith(".json") else os.path.join(out, base)


def versions():
    """``{python, numpy, torch, torch_geometric, pyg_lib, torch_sparse, mpi4py, mpi}``:
    the versions this process runs (None for a package not installed; ``mpi``: the MPI
    library's version line, where mpi4py.MPI is loaded)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        version = getattr(sys.modules.get(name), "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(name.replace("_", "-"))
            except importlib.metadata.PackageNotFoundError:
                version = None
        out[name] = str(version) if version is not None else None
    mpi = sys.modules.get("mpi4py.MPI")
    out["mpi"] = mpi.Get_library_version().splitlines()[0].strip() if mpi else None
    return out


# what routes MPI's messages: read from the environment by network()
NETWORK_VARIABLES = ("MPIR_CVAR_CH4_NETMOD", "MPIR_CVAR_NOLOCAL", "FI_PROVIDER",
                     "FI_TCP_IFACE", "UCX_TLS", "DDSTORE_TRANSPORT", "DDSTORE_PROGRESS",
                     "DDSTORE_PROGRESS_US")


def network():
    """How this job's messages travel, from the environment: ``between_nodes`` (True
    when ``MPIR_CVAR_NOLOCAL`` is set: MPICH treats every rank as on a node of its own,
    so the store has no shared-memory peer and reads go through the network module;
    with ``MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=lo``, over TCP on the
    loopback: docs/cluster.md, "Between nodes: reads of a computing rank") and the
    settings that decide it."""
    env = {k: os.environ[k] for k in NETWORK_VARIABLES if k in os.environ}
    nolocal = env.get("MPIR_CVAR_NOLOCAL", "0").strip().lower() not in ("", "0", "false",
                                                                        "no")
    return {"between_nodes": nolocal, "environment": env}


def command_line():
    """The command that started this job, as one would type it again: ``mpiexec -n
    <ranks>`` (when more than one), ``python -m <module>`` (or the script) and the
    arguments."""
    main = sys.modules.get("__main__")
    module = getattr(getattr(main, "__spec__", None), "name", None)
    if module:
        head = ["python", "-m", module[:-len(".__main__")] if
                module.endswith(".__main__") else module]
    else:
        head = ["python", sys.argv[0]]
    mpi = sys.modules.get("mpi4py.MPI")
    size = mpi.COMM_WORLD.Get_size() if mpi and mpi.Is_initialized() else 1
    return shlex.join((["mpiexec", "-n", str(size)] if size > 1 else []) + head +
                      sys.argv[1:])


def write_report(report, path, seed):
    """The one JSON writer of the benchmarks: ``report`` as indented JSON to ``path``
    (directories created; numpy scalars written as numbers), with ``command``
    (:func:`command_line`), ``seed``, ``versions`` (:func:`versions`) and ``network``
    (:func:`network`: between nodes or not) added, so that
    every number states where it came from; prints where.  A file at ``path`` that is
    not an earlier report (the user's) is kept: the report goes to ``<path>.<n>.json``,
    and the message says so.  Returns the path written (a plot goes beside it, under
    its stem: a user's ``<path>.png`` is kept as the JSON is)."""
    report = dict(report, command=command_line(), seed=seed, versions=versions(),
                  network=network())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    kept, stem, n = foreign_file(path), os.path.splitext(path)[0], 1
    while foreign_file(path):
        path, n = f"{stem}.{n}.json", n + 1
    if kept:
        print(f"{kept}; the report goes to {path}", flush=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=_number)
    print(f"wrote {path}", flush=True)
    return path


def _number(value):
    """numpy scalars (and anything else with ``item()``) as plain numbers."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def rma_counts():
    """This process's network traffic so far: one-sided ``{gets, bytes, flushes}``
    (``ddstore._core.rma_stats``: MPI_Get calls, the bytes they asked for, MPI_Win_flush
    calls -- one round trip per remote owner per read call) and by message
    ``{messages, message_bytes}`` (``ddstore._core.serve_stats``: requests sent to
    members on other nodes, each a round trip, and the bytes of rows they asked for).
    Shared-memory reads are loads and count nothing.  Read it outside a timed region and
    take differences (:func:`traffic`)."""
    from ddstore import _core
    served = _core.serve_stats()
    return dict(_core.rma_stats(), messages=served["sent"], message_bytes=served["asked"])


def traffic(comm, before, after, batches, store):
    """Collective over ``comm``: the network traffic of ``batches`` batches, from
    :func:`rma_counts` taken before and after them on each rank, per batch:
    ``gets_per_batch`` (MPI_Get calls), ``messages_per_batch`` (read requests by
    message), ``round_trips_per_batch`` (flushes + messages: what reads waited for),
    ``bytes_per_batch`` (by either path), the same per remote owner
    (``*_per_owner_per_batch``: divided by ``remote_owners``, the other members of this
    rank's group it does not read through shared memory: ``store.group_size - 1 -
    store.shm_peers``; absent where there are none), each the mean over ranks, and
    ``by_rank`` (each rank's per-batch numbers)."""
    import numpy as np
    remote = int(store.group_size) - 1 - int(store.shm_peers)
    d = {k: (after[k] - before[k]) / max(batches, 1) for k in after}
    mine = {"gets": d["gets"], "messages": d["messages"],
            "round_trips": d["flushes"] + d["messages"],
            "bytes": d["bytes"] + d["message_bytes"]}
    per = comm.allgather(dict(mine, remote_owners=remote))
    names = ("gets", "messages", "round_trips", "bytes")
    out = {"remote_owners": max(p["remote_owners"] for p in per)}
    for k in names:
        out[f"{k}_per_batch"] = float(np.mean([p[k] for p in per]))
    if out["remote_owners"] > 0:
        for k in names:
            out[f"{k}_per_owner_per_batch"] = float(np.mean(
                [p[k] / p["remote_owners"] for p in per if p["remote_owners"] > 0]))
    out["by_rank"] = [dict({f"{k}_per_batch": p[k] for k in names},
                           remote_owners=p["remote_owners"]) for p in per]
    return out


def traffic_text(t):
    """``"network per batch: 12 gets, 2 requests, 8 round trips, 1.2 MB (1 remote
    owner)"``."""
    return (f"network per batch: {t['gets_per_batch']:.1f} gets, "
            f"{t['messages_per_batch']:.1f} requests, "
            f"{t['round_trips_per_batch']:.1f} round trips, "
            f"{t['bytes_per_batch'] / 1e6:.3f} MB "
            f"({plural(t['remote_owners'], 'remote owner')})")


def exit_on_every_rank(message, code=2):
    """End this program for an error that every rank detects alike (a bad option, a
    missing input): rank 0 prints ``message``, every rank exits with ``code``.  Needs no
    collective call, so nobody waits for anybody."""
    if launch_rank() == 0:
        sys.stdout.flush()
        print(f"{program_name()}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def require_files(comm, paths):
    """Collective: every one of ``paths`` (``{what: path}``) must exist on every rank of
    ``comm``.  If one does not, rank 0 names it (once, with the ranks that lack it) and
    every rank exits with code 2 (:func:`exit_on_every_rank`)."""
    missing = {what: path for what, path in paths.items() if not os.path.exists(path)}
    everyone = comm.allgather(missing)
    if any(everyone):
        lines = []
        for what, path in paths.items():
            ranks = [r for r, m in enumerate(everyone) if what in m]
            if ranks:
                where = "" if len(ranks) == comm.size else \
                    f" (on {plural(len(ranks), 'rank')}: {ranks})"
                lines.append(f"{what}: no such file or directory: {path}{where}")
        exit_on_every_rank("; ".join(lines))


def spread(runs):
    """The spread of measurements of the same code in one job: ``max / min - 1`` (0.05:
    the runs differ by 5 %; 0 for fewer than two)."""
    runs = [float(r) for r in runs]
    return max(runs) / min(runs) - 1 if len(runs) > 1 and min(runs) > 0 else 0.0


def ratio(ours, theirs, control):
    """A ratio with its control: ``{ratio: ours / theirs, control: runs, spread}``, where
    ``control`` is one side measured at least twice in the same job (the same code,
    e.g. the reference run again) and ``spread`` (:func:`spread`) is how far those runs
    differ: a ratio that moves by less than its spread is noise."""
    return {"ratio": float(ours) / float(theirs) if float(theirs) else float("inf"),
            "control": [float(r) for r in control], "spread": spread(control)}


def ratio_text(entry, digits=2):
    """``"1.26x (control spread 4 %)"``: a :func:`ratio` as printed."""
    return f"{entry['ratio']:.{digits}f}x (control spread {100 * entry['spread']:.0f} %)"


def log(comm, *args):
    """Print on rank 0 of ``comm`` only (flushed)."""
    if comm.Get_rank() == 0:
        print(*args, flush=True)


class Items:
    """A sequence of ``length`` items made on demand by ``get(i)``: what a
    ``torch.utils.data.DataLoader`` needs of a dataset (``len`` and ``[i]``)."""

    def __init__(self, length, get):
        self.length, self.get = length, get

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return self.get(i)



def run_child(cmd, env=None, grace_s=10):
    """Run ``cmd`` (a benchmark's child program) in a process group of its own and
    return ``(exit code, its stdout and stderr)``.  A SIGTERM, SIGHUP or SIGINT that
    reaches this process meanwhile (``timeout``, ``scancel``, Ctrl-C) says so on stderr
    and ends the child's whole group first (``timeout``, ``mpiexec`` and the ranks under
    it: SIGINT, so that a rank ends as after Ctrl-C, its MPI finalized and its
    shared-memory files removed even before it made a store; then, 3 s later, SIGTERM,
    and SIGKILL ``grace_s`` after that), then ends this program with exit code 128 + the
    signal's number through :class:`SystemExit`, so that its ``finally`` blocks (a
    temporary directory's removal) run: nothing is left running or on disk.  Call from
    the main thread."""
    def stop(signum, frame):
        print(f"[ddstore] {signal.Signals(signum).name} received: ending the "
              f"benchmark's run", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    watched = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    before = {s: signal.signal(s, stop) for s in watched}
    proc = None
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)
        out, _ = proc.communicate()
        return proc.returncode, out
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if proc is not None:  # (its leader may be gone, another of the group not)
            _end_group(proc, grace_s)


def _end_group(proc, grace_s):
    """End every process of ``proc``'s group (``proc`` leads it): SIGINT, SIGTERM 3 s
    later, SIGKILL ``grace_s`` after that, each sent while any of the group is left (a
    process that ignores SIGINT, as a shell's background job does, outlives its leader)."""
    for sig, wait_s in ((signal.SIGINT, min(3, grace_s)), (signal.SIGTERM, grace_s),
                        (signal.SIGKILL, grace_s)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                try:
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    return  # the whole group is gone
            time.sleep(0.05)
