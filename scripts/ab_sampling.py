"""A/B of the C samplers of two trees: the same draws, and the time per call.

    python scripts/ab_sampling.py TREE_A TREE_B [--rounds 2] [--ranks 2] [--batches 30]
                                  [--nodes 200000] [--between-nodes] [--out FILE.json]

Each TREE is a checkout whose ``ddstore/`` holds a built extension (e.g. a ``git
worktree`` built with ``python python_bindings/build_ddstore.py``).  For each round, and
each tree in turn (A, B, A, B, ...), one MPI job (``--ranks`` ranks) builds a graph of
``--nodes`` nodes (degrees 0-40, and 3,000 for every 100th node: picks scattered over
a long list are read one row each; 200,000 nodes: about 10 million edges; a time per
entry, float32 weights with 30 % of them 0, int32 source ids, int64 edge ids) at width 1 (every list
read by load) and at width ``--ranks`` through one-sided reads (``rma``: every list of
the other member fetched), and times ``--batches`` batches of 1,024 random seeds
(``seed`` 0) of each of the samplers: uniform without replacement (Floyd), with
replacement, the latest (``LAST``), every neighbour, each with and without times;
weighted with and without replacement; ``dds_neighbor_hop`` (sample and relabel);
``dds_induced_edges``; the temporal sampler (recent and uniform; with its defaults,
and with every list of another member over 64 entries searched where it lies).  Per sampler it prints
the median ms per call on rank 0 of each tree and B over A (the median over rounds of
each round's ratio), and whether both trees drew the same bytes on every rank (a SHA-256
over every output of every call).  ``--between-nodes`` runs the jobs through MPICH's
network module on the loopback (as docs/cluster.md).  Timings are this machine's; the
digests are the check.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROGRAM = r'''
import hashlib, json, sys, time
import numpy as np
from mpi4py import MPI
from ddstore import _core

comm = MPI.COMM_WORLD
batches, n_nodes = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
deg = rng.integers(0, 41, n_nodes)
deg[::100] = 3000  # long lists: scattered picks read one row each
indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
total = int(indptr[-1])
src = rng.integers(0, n_nodes, total).astype(np.int32)
ts = np.concatenate([np.sort(rng.random(d)) for d in deg]).astype(np.float64) * 100
weight = rng.random(total, dtype=np.float32)
weight[rng.random(total) < 0.3] = 0
seeds = [rng.integers(0, n_nodes, 1024).astype(np.int64) for _ in range(batches)]
times = [rng.random(1024) * 100 for _ in range(batches)]
K = 10
report = {}


def run(name, call):
    h = hashlib.sha256()
    took = []
    for b in range(batches):
        t0 = time.perf_counter()
        out = call(b)
        took.append(time.perf_counter() - t0)
        for a in out:
            if a is not None:
                h.update(np.ascontiguousarray(a).tobytes())
    report[name] = [1e3 * float(np.median(took)), h.hexdigest()]


for width, transport in ((1, "auto"), (comm.size, "rma")):
    node_off = np.linspace(0, n_nodes, width + 1).astype(np.int64)
    core = _core.Core(comm, width, transport)
    try:
        g = core.group_rank
        lo, hi = int(indptr[node_off[g]]), int(indptr[node_off[g + 1]])
        v = {}
        for name, arr in (("nbr", src), ("eid", np.arange(total, dtype=np.int64)),
                          ("ts", ts), ("w", weight)):
            v[name] = core.add(name, hi - lo, arr.itemsize)
            core.write_local(v[name], 0, np.ascontiguousarray(arr[lo:hi]))
        core.sync()
        tag = f"w{width}"
        csc = _core.CSC(core, v["nbr"], v["eid"], None, indptr, node_off)
        tcsc = _core.CSC(core, v["nbr"], v["eid"], v["ts"], indptr, node_off)
        tcsr = _core.TCSR(core, v["nbr"], v["ts"], v["eid"], indptr, node_off)  # defaults
        searched = _core.TCSR(core, v["nbr"], v["ts"], v["eid"], indptr, node_off, 64, 64)
        for flags, fname in ((0, "uniform"), (_core.NEIGHBOR_REPLACE, "replace"),
                             (_core.NEIGHBOR_LAST, "last")):
            run(f"{tag} {fname}", lambda b: csc.sample(seeds[b], None, K, flags, b,
                                                      K * 1024))
            run(f"{tag} {fname} timed", lambda b: tcsc.sample(seeds[b], times[b], K,
                                                             flags, b, K * 1024))
        run(f"{tag} all", lambda b: csc.sample(seeds[b], None, -1, 0, b, int(
            (indptr[seeds[b] + 1] - indptr[seeds[b]]).sum())))
        run(f"{tag} weighted", lambda b: csc.sample_weighted(v["w"], seeds[b], None, K, 0,
                                                            b, K * 1024))
        run(f"{tag} weighted replace", lambda b: csc.sample_weighted(
            v["w"], seeds[b], None, K, _core.NEIGHBOR_REPLACE, b, K * 1024))
        rmap = _core.RelabelMap()

        def hop(b):
            rmap.begin(n_nodes, expected=1024 * (K + 1))
            rmap.seed(seeds[b])
            pos = np.arange(1024, dtype=np.int64)
            return csc.hop(rmap, seeds[b], pos, None, None, K, 0, b, K * 1024)[:4]

        run(f"{tag} hop", hop)

        def induced(b):
            nodes = np.unique(np.concatenate([seeds[b], csc.sample(seeds[b], None, K, 0,
                                                                   b, K * 1024)[1]]))
            return csc.induced(nodes, nodes, n_nodes, 32768)

        run(f"{tag} induced", induced)
        for strategy in ("recent", "uniform"):
            run(f"{tag} temporal {strategy}", lambda b: tcsr.sample(
                seeds[b], times[b], K, _core.SAMPLE_STRATEGIES[strategy], b, 0, 0))
        for strategy in ("recent", "uniform"):  # lists over 64 entries searched
            run(f"{tag} temporal {strategy} searched", lambda b: searched.sample(
                seeds[b], times[b], K, _core.SAMPLE_STRATEGIES[strategy], b, 0, 0))
    finally:
        core.free()
every = comm.gather(report)
if comm.rank == 0:
    print("REPORT " + json.dumps(every))
'''


def job(tree, ranks, batches, between, nodes):
    env = dict(os.environ, PYTHONPATH=tree, DDSTORE_SHM_WATCH="0")
    if between:
        env.update(MPIR_CVAR_CH4_NETMOD="ofi", MPIR_CVAR_NOLOCAL="1", FI_PROVIDER="tcp",
                   FI_TCP_IFACE="lo")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PROGRAM)
    try:
        out = subprocess.run(["timeout", "900", "mpiexec", "-n", str(ranks), sys.executable,
                              f.name, str(batches), str(nodes)], env=env, capture_output=True,
                             text=True, check=False)
    finally:
        os.unlink(f.name)
    for line in out.stdout.splitlines():
        if line.startswith("REPORT "):
            return json.loads(line[7:])
    raise SystemExit(f"{tree}: the job failed (rc {out.returncode}):\n{out.stderr[-3000:]}")


def summarize(got, ranks):
    """``(rows, same_all)`` from ``got[t]``, tree t's reports (one per round, each a list
    of every rank's ``{sampler: [ms, digest]}``): per sampler the ms of rank 0 in each
    round, B over A (the median of the rounds' ratios), and whether every report of
    both trees holds the first one's digest on every rank."""
    rows, same_all = [], True
    for n in got[0][0][0]:
        a_ms = [run[0][n][0] for run in got[0]]
        b_ms = [run[0][n][0] for run in got[1]]
        ratio = statistics.median(b / x for b, x in zip(b_ms, a_ms))
        same = all(run[rank][n][1] == got[0][0][rank][n][1]
                   for t in (0, 1) for run in got[t] for rank in range(ranks))
        same_all &= same
        rows.append({"sampler": n, "a_ms": a_ms, "b_ms": b_ms, "ratio": ratio,
                     "same": same})
    return rows, same_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trees", nargs=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=200_000,
                    help="nodes of the graph (every 100th with 3,000 entries)")
    ap.add_argument("--between-nodes", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    for name in ("rounds", "ranks", "batches", "nodes"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    for tree in a.trees:  # (a bogus path fell back to the installed package: A against A)
        if not os.path.isfile(os.path.join(tree, "ddstore", "__init__.py")):
            ap.error(f"{tree}: not a checkout of ddstore (no ddstore/__init__.py in it)")
    got = {0: [], 1: []}
    for r in range(a.rounds):
        for t in (0, 1):
            got[t].append(job(os.path.abspath(a.trees[t]), a.ranks, a.batches,
                              a.between_nodes, a.nodes))
            print(f"round {r + 1}: {a.trees[t]} done", flush=True)
    rows, same_all = summarize(got, a.ranks)
    print(f"{'sampler':<28} {'A ms':>16} {'B ms':>16} {'B/A':>6}  same draws")
    for row in rows:
        print(f"{row['sampler']:<28} {' '.join(f'{x:7.2f}' for x in row['a_ms']):>16} "
              f"{' '.join(f'{x:7.2f}' for x in row['b_ms']):>16} {row['ratio']:6.2f}  "
              f"{row['same']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"trees": a.trees, "ranks": a.ranks, "batches": a.batches,
                       "nodes": a.nodes, "between_nodes": a.between_nodes, "rows": rows},
                      f, indent=1)
    sys.exit(0 if same_all else 1)


if __name__ == "__main__":
    main()
