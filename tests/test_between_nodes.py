"""Between nodes (issue 36): MPICH routed through its network module on the loopback
(``MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp FI_TCP_IFACE=lo``: every
rank on its own "node", one-sided reads over libfabric's TCP provider, which needs the
target's progress).  The core round trip, PyG sampling and temporal sampling on 2 ranks
in that mode; the progress agent answering reads of a computing rank (and, without it,
the read waiting: the check can fail); the thread-level refusal."""
import re

import pytest

from conftest import passed_on, summary_of, summary_problem

BETWEEN_NODES = {"MPIR_CVAR_CH4_NETMOD": "ofi", "MPIR_CVAR_NOLOCAL": "1",
                 "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"}


@pytest.mark.mpi
def test_round_trip_and_sampling_between_nodes(mpirun, tmp_path):
    out = mpirun("checks.py", 2, "core_roundtrip.py", "auto", "+", "pyg_check.py", "2:rma",
                 "+", "temporal_check.py", str(tmp_path), env=BETWEEN_NODES, timeout=400)
    for name in ("core_roundtrip", "pyg_check", "temporal_check"):
        assert summary_problem(summary_of(out, name), name, 2) is None, out


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,mode,min_pieces", [(3, "on", "1")])
def test_reads_by_message(mpirun, ranks, mode, min_pieces):
    """The message path (csrc/serve.c): every byte read equals the byte written, with
    every remote read by message (min_pieces 1; the default threshold is taken by the
    sampling checks above, one-sided reads by the core round trip there)."""
    env = dict(BETWEEN_NODES)
    if min_pieces is not None:
        env["DDSTORE_SERVE_MIN_PIECES"] = min_pieces
    out = mpirun("serve_check.py", ranks, mode, env=env, timeout=300)
    passed_on(out, ranks)


@pytest.mark.mpi
def test_serve_benchmark_smoke(tmp_path):
    """bench.serve runs between nodes at small sizes: both paths, every pattern, rows
    compared, the JSON written with both paths' figures."""
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, **BETWEEN_NODES)
    out = subprocess.run(
        ["timeout", "300", "mpiexec", "-n", "2", sys.executable, "-m", "ddstore.bench.serve",
         "--rows", "2000", "--sizes", "500", "--reads", "3", "--repeat", "1",
         "--compute-s", "0.2",
         "--out", str(tmp_path)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((tmp_path / "serve_n2.json").read_text())
    for pattern in ("one", "both", "computing"):
        for path in ("message", "one-sided"):
            assert len(report["results"][pattern][path]["500"]["p50_s"]) == 1, report
    assert report["network"]["between_nodes"] is True, report["network"]


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["on", "off", "serialized"])
def test_progress_agent(mpirun, mode):
    out = mpirun("progress_check.py", 2, mode, "between", env=BETWEEN_NODES, timeout=120)
    passed_on(out, 2)
    if mode != "serialized":
        assert f"mode {mode}: " in out, out


def test_progress_settings(monkeypatch):
    """DDSTORE_PROGRESS: auto leaves the agent off when every member is on this node;
    on starts it (and free stops it); a bad value or period is refused, naming it."""
    from mpi4py import MPI
    import ddstore
    from ddstore import _core
    monkeypatch.delenv("DDSTORE_PROGRESS_US", raising=False)
    for mode, running in (("auto", False), ("off", False), ("on", True)):
        monkeypatch.setenv("DDSTORE_PROGRESS", mode)
        with ddstore.DDStore(MPI.COMM_SELF, transport="rma") as s:
            assert s.progress is running, mode
            assert _core.progress_stats()["running"] == int(running), mode
        assert _core.progress_stats()["running"] == 0
    monkeypatch.setenv("DDSTORE_PROGRESS", "sometimes")
    with pytest.raises(ddstore.DDStoreValueError, match="DDSTORE_PROGRESS='sometimes'"):
        ddstore.DDStore(MPI.COMM_SELF)
    monkeypatch.setenv("DDSTORE_PROGRESS", "on")
    monkeypatch.setenv("DDSTORE_PROGRESS_US", "0")
    with pytest.raises(ddstore.DDStoreValueError, match=r"in \[1, 1000000\]"):
        ddstore.DDStore(MPI.COMM_SELF)


def test_serve_settings(monkeypatch):
    """DDSTORE_SERVE / DDSTORE_SERVE_MIN_PIECES: a bad value is refused, naming it and
    the allowed ones; a store with no member on another node never reads by message."""
    from mpi4py import MPI
    import ddstore
    monkeypatch.setenv("DDSTORE_PROGRESS", "on")
    with ddstore.DDStore(MPI.COMM_SELF, transport="rma") as s:
        assert s.progress and not s.serving
    monkeypatch.setenv("DDSTORE_SERVE", "sometimes")
    with pytest.raises(ddstore.DDStoreValueError, match="DDSTORE_SERVE='sometimes' is not "
                                                        "one of auto, off"):
        ddstore.DDStore(MPI.COMM_SELF)
    # named as set (spaces and case included), not as cleaned up for the comparison
    for var, bad in (("DDSTORE_SERVE", " On "), ("DDSTORE_PROGRESS", "\t5\n"),
                     ("DDSTORE_TRANSPORT", " Fast")):
        monkeypatch.setenv(var, bad)
        with pytest.raises(ddstore.DDStoreValueError, match=re.escape(f"{var}={bad!r} is not "
                                                                      f"one of")):
            ddstore.DDStore(MPI.COMM_SELF)
        monkeypatch.delenv(var)
    monkeypatch.setenv("DDSTORE_PROGRESS", "on")
    monkeypatch.setenv("DDSTORE_SERVE_MIN_PIECES", " 1_000")
    with pytest.raises(ddstore.DDStoreValueError, match=re.escape(
            "DDSTORE_SERVE_MIN_PIECES=' 1_000' must be an integer in [1, ")):
        ddstore.DDStore(MPI.COMM_SELF)
    monkeypatch.setenv("DDSTORE_SERVE", "auto")
    for bad in ("0", "x", "-3"):
        monkeypatch.setenv("DDSTORE_SERVE_MIN_PIECES", bad)
        with pytest.raises(ddstore.DDStoreValueError, match=r"DDSTORE_SERVE_MIN_PIECES="
                                                            r".* in \[1, 4611686018427387904\]"):
            ddstore.DDStore(MPI.COMM_SELF)
