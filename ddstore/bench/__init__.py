"""Benchmarks: scripts that print numbers and write them as JSON.  Each is a module
``ddstore.bench.<name>`` with a ``main(argv=None, prog=None)``, run as ``python -m
ddstore.bench.<name>`` or ``python -m ddstore bench-<name>`` (the same program; see README
"Benchmarks" and ``python -m ddstore --help``).  ``ddstore.bench.memory`` is the memory
measurement they share, not a benchmark."""
import argparse
import json
import os
import sys

__all__ = ["write_report", "launch_rank", "ArgumentParser", "exit_on_every_rank",
           "require_files", "plural"]


def write_report(report, path):
    """The one JSON writer of the benchmarks: ``report`` as indented JSON to ``path``
    (directories created; numpy scalars written as numbers); prints where."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=_number)
    print(f"wrote {path}", flush=True)


def _number(value):
    """numpy scalars (and anything else with ``item()``) as plain numbers."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def plural(n, word, words=None):
    """``"1 replica"``, ``"2 replicas"`` (``words``: the plural when it is not word + s)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


_RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")


def launch_rank():
    """This process's rank in the job, without initialising MPI: from MPI if mpi4py has
    already initialised it, else from the launcher's environment (MPICH/Hydra, PMIx,
    Open MPI, MVAPICH), else 0 (not under a launcher)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank()
    for var in _RANK_VARIABLES:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` for programs run on every rank: ``--help``, usage and
    errors are printed by rank 0 only (every rank parses the same command line, so every
    rank reaches the same result and exits with the same code)."""

    def _print_message(self, message, file=None):
        if launch_rank() == 0:
            super()._print_message(message, file)


def exit_on_every_rank(message, code=2):
    """End this program for an error that every rank detects alike (a bad option, a
    missing input): rank 0 prints ``message``, every rank exits with ``code``.  Needs no
    collective call, so nobody waits for anybody."""
    if launch_rank() == 0:
        sys.stdout.flush()
        print(f"error: {message}", file=sys.stderr, flush=True)
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
