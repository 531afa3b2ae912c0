"""Checkpoint and restart of the temporal layers (issue 37): ``TemporalGraph.open`` and
``NodeMemory.open`` on a store from ``DDStore.restore``, without the source data.

Every builder (from_arrays with float64 times, add_reverse, edge and node features,
edge labels, a split and isolated nodes; from_arrays with int64 times beyond 2**53 and
nothing else; from_tgl; from_jodie; from_pyg with float32 times) and two node memories (mailbox 3 with float64
times, mailbox 1 with int64 times), with commits applied, are saved from this job's
ranks at width ``W`` (the second argument) and, when the job has 2 ranks or more, from
its first ``size - 1`` ranks at width 1.  The first is restored on every rank count from
1 to the job's (sub-communicators) at every width dividing it, the second on the whole
job at width ``size``; after each restore, for every object:

- the variables hold every byte they held (each compared with the saved store's), the
  annotation lists them, the T-CSR's chunks start at node boundaries and the graph's
  ``node_offsets`` match them; a memory's five variables hold its node ranges;
- every read equals the saved one: ``neighbors`` of every node, ``edges``, features,
  labels, split, ``to_pyg``, ``num_users`` / ``t_dtype``; ``TemporalSampler`` (uniform
  2 layers, recent) with the same seed gives the same blocks, byte for byte; the memory's
  ``read`` of every node;
- further work: one more commit on the opened memory gives what it must, snapshot /
  restore after it, ``remove`` of every object leaves the store empty (annotations
  too); a second save of the opened objects restores again;
- refusals: ``open`` of an unknown name names the known ones, of another layer's
  object names the kind (agreed on every rank for the collective ``NodeMemory.open``).

    timeout 300 mpiexec -n 2 python tests/mpi/temporal_checkpoint.py [auto|rma] [W]
"""
import os
import sys

import numpy as np
from mpi4py import MPI

from _harness import Cases, check, expect_error, first_ranks, run_main, shared_tmpdir

import ddstore
from ddstore import DDStore, DDStoreValueError, partition
from ddstore import temporal as tg

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TRANSPORT = sys.argv[1] if len(sys.argv) > 1 else "auto"
WIDTH = int(sys.argv[2]) if len(sys.argv) > 2 else size
cases = Cases()

N, E = 37, 240  # nodes 30..36 of graph "a" are isolated (no edges): trailing empty lists
BLOCK_FIELDS = ("nodes", "ts", "row", "col", "eid", "edge_ts", "dts")
GRAPHS = ("a", "b", "jodie", "pyg", "tgl")
MEMORIES = {"m3": dict(mailbox_size=3, ts_dtype=np.float64, dtype=np.float32),
            "m1": dict(mailbox_size=1, ts_dtype=np.int64, dtype=np.float64)}


def data():
    rng = np.random.default_rng(37)
    src = rng.integers(0, 30, E)
    dst = rng.integers(0, 30, E)
    dst[dst == 7] = 8  # node 7: only a source (an empty list without add_reverse)
    src[src == 12] = 13  # node 12: isolated in the middle
    dst[dst == 12] = 13
    t = np.round(rng.random(E) * 100, 3)
    big = (2 ** 60 + rng.integers(0, 50, E) * 3).astype(np.int64)  # int64, > 2**53
    ef = rng.standard_normal((E, 3)).astype(np.float32)
    nf = rng.standard_normal((N, 2)).astype(np.float32)
    lab = rng.integers(0, 5, E).astype(np.int64)
    split = rng.integers(0, 3, E).astype(np.int8)
    return src, dst, t, big, ef, nf, lab, split


def write_files(tmp):
    src, dst, t, big, ef, nf, lab, split = data()
    order = np.argsort(t, kind="stable")
    if rank == 0:
        tg.write_tgl(os.path.join(tmp, "tgl"), src[order], dst[order], t[order],
                     split[order], edge_feat=ef[order], node_feat=nf[:30])
        tg.write_jodie(os.path.join(tmp, "j.csv"), src[order] % 11, dst[order] % 13,
                       np.floor(t[order] * 10).astype(np.int64), lab[order], ef[order])
    comm.Barrier()


def updates(mem_name, r):
    """Round ``r``'s updates of a memory (global, unique times): nodes, memory rows,
    mail rows, ts."""
    spec = MEMORIES[mem_name]
    rng = np.random.default_rng([r, len(mem_name), spec["mailbox_size"]])
    nodes = rng.integers(0, N, 50)
    ts = (1000 * r + np.arange(50) * 7 + 1).astype(spec["ts_dtype"])
    return (nodes, rng.standard_normal((50, 4)).astype(spec["dtype"]),
            rng.standard_normal((50, 5)).astype(spec["dtype"]), ts)


def build(store, tmp):
    """Collective: every object, built from this store's ranks' shares of the same
    global data, with 3 rounds of commits on each memory."""
    src, dst, t, big, ef, nf, lab, split = data()
    c = store.comm
    lo, hi = partition(E, c.size, c.rank)
    nlo, nhi = partition(N, c.size, c.rank)
    tg.TemporalGraph.from_arrays(store, "a", src[lo:hi], dst[lo:hi], t[lo:hi],
                                 edge_feat=ef[lo:hi], node_feat=nf[nlo:nhi],
                                 add_reverse=True, split=split[lo:hi],
                                 edge_label=lab[lo:hi], chunk_edges=17)
    tg.TemporalGraph.from_arrays(store, "b", src[lo:hi], dst[lo:hi], big[lo:hi],
                                 num_nodes=N)
    tg.TemporalGraph.from_tgl(store, "tgl", os.path.join(tmp, "tgl"), add_reverse=True,
                              chunk_edges=31)
    tg.TemporalGraph.from_jodie(store, "jodie", os.path.join(tmp, "j.csv"))
    import torch
    from torch_geometric.data import TemporalData
    o = np.argsort(np.round(t), kind="stable")  # (PyG's split needs events in time order)
    tg.TemporalGraph.from_pyg(store, "pyg", TemporalData(  # t float32: its t_dtype
        src=torch.from_numpy(src[o]), dst=torch.from_numpy(dst[o]),
        t=torch.from_numpy(np.round(t[o]).astype(np.float32)),
        y=torch.from_numpy(lab[o])))
    for name, spec in MEMORIES.items():
        mem = tg.NodeMemory(store, name, N, 4, 5, **spec)
        for r in range(3):
            apply_round(mem, name, r, c)


def apply_round(mem, name, r, c):
    nodes, m, mail, ts = updates(name, r)
    a, b = partition(len(nodes), c.size, c.rank)
    mem.write(nodes[a:b], m[a:b], ts[a:b])
    mem.post(nodes[a:b], mail[a:b], ts[a:b])
    mem.commit()


def graph_reads(g):
    """Everything a graph reads, as ``{label: bytes or value}`` (local)."""
    out = {}
    for k in ("num_nodes", "num_edges", "add_reverse", "split_counts", "edge_feat_dim",
              "node_feat_dim", "has_edge_label", "num_users", "num_items"):
        out[k] = getattr(g, k)
    out["time_dtype"], out["t_dtype"] = str(g.time_dtype), str(np.dtype(g.t_dtype))
    out["indptr"] = g.indptr.tobytes()
    out["neighbors"] = b"".join(x.tobytes() + str(x.dtype).encode()
                                for v in range(g.num_nodes) for x in g.neighbors(v))
    every = np.arange(g.num_edges)[::-1]
    out["edges"] = b"".join(x.tobytes() + str(x.dtype).encode() for x in g.edges(every))
    out["split"] = g.split.tobytes() + g.edge_split(every).tobytes()
    if g.edge_feat_dim is not None:
        out["edge_features"] = g.edge_features(every).tobytes()
    if g.has_edge_label:
        out["edge_labels"] = g.edge_labels(every).tobytes()
    if g.node_feat_dim is not None:
        out["node_features"] = g.node_features(np.arange(g.num_nodes)[::-1]).tobytes()
    d = g.to_pyg()
    out["to_pyg"] = {k: (str(v.dtype), v.numpy().tobytes()) for k, v in d.to_dict().items()}
    out["degree"] = g.degree().tobytes()
    roots = np.arange(g.num_nodes).repeat(2)
    hi = g.edges([g.num_edges - 1])[2][0]
    ts = np.where(np.arange(roots.shape[0]) % 2, hi, (hi + g.edges([0])[2][0]) // 2
                  if g.time_dtype.kind == "i" else hi / 2).astype(g.time_dtype)
    for label, fan, strat in (("uniform", (4, 3), "uniform"), ("recent", (2,), "recent")):
        s = tg.TemporalSampler(g, fan, strat, seed=11)
        for epoch in (0, 3):
            s.set_epoch(epoch)
            out[f"sampler {label} epoch {epoch}"] = [
                b"".join(getattr(b, f).tobytes() for f in BLOCK_FIELDS)
                for b in s.sample(roots, ts)]
    return out


def memory_reads(mem):
    got = mem.read(np.arange(mem.num_nodes)[::-1])
    return {k: getattr(got, k).numpy().tobytes() for k in
            ("memory", "memory_ts", "mail", "mail_ts")}


def variable_bytes(store):
    return {v: (str(store.dtype(v)), store.row_shape(v),
                store.get_range(v, 0, store.nrows(v)).tobytes())
            for v in store.variables()}


def without_counts(var_bytes):
    return {v: b for v, b in var_bytes.items() if not v.endswith("/commits")}


def reference(store):
    """What every check compares with (local arrays, on every rank)."""
    return {"vars": variable_bytes(store),
            "graphs": {n: graph_reads(tg.TemporalGraph.open(store, n)) for n in GRAPHS},
            "memories": {n: memory_reads(tg.NodeMemory.open(store, n)) for n in MEMORIES},
            "annotations": store.annotations()}


def compare(got, want, what):
    for k in want:
        check(k in got and got[k] == want[k], f"{what}: {k} differs")


def verify(r, ref, tag, further=True):
    """Every check of one restored store ``r`` (collective over ``r.comm``)."""
    check(r.annotations() == ref["annotations"], f"{tag}: annotations {r.annotations()}")
    got = variable_bytes(r)
    check(sorted(got) == sorted(ref["vars"]), f"{tag}: variables {sorted(got)}")
    # (a memory's commit counts: one row per member, made anew by open at another
    # width; each member's changes begun and ended equal, none under way)
    bad = [v for v in without_counts(ref["vars"]) if got.get(v) != ref["vars"][v]]
    check(not bad, f"{tag}: variables whose bytes differ: {bad}")
    for v in set(got) - set(without_counts(got)):
        counts = r.get_range(v, 0, r.nrows(v))
        check((counts[:, 0] == counts[:, 1]).all(), f"{tag}: {v} holds {counts.tolist()}")
    graphs = {}
    for n in GRAPHS:
        g = graphs[n] = tg.TemporalGraph.open(r, n)
        starts = r.chunk_offsets(f"{n}/nbr")
        for k in ("ts", "eid"):
            check(np.array_equal(r.chunk_offsets(f"{n}/{k}"), starts),
                  f"{tag}: {n}/{k} chunks differ from nbr's")
        check(np.array_equal(g.indptr[g.node_offsets], starts) and
              g.node_offsets[0] == 0 and g.node_offsets[-1] == g.num_nodes and
              (np.diff(g.node_offsets) >= 0).all(),
              f"{tag}: {n}: node_offsets {g.node_offsets} vs chunks {starts}")
        compare(graph_reads(g), ref["graphs"][n], f"{tag}: graph {n!r}")
        check(g.tcsr_bytes() >= g.indptr.nbytes, f"{tag}: tcsr_bytes")
    mems = {}
    for n, spec in MEMORIES.items():
        # the restore itself split every variable at the node ranges (cuts: rows
        # per node), before open() ran
        ranges = [partition(N, r.width, g)[0] for g in range(r.width)] + [N]
        check(np.array_equal(r.chunk_offsets(f"{n}/mail"),
                             np.array(ranges) * spec["mailbox_size"]),
              f"{tag}: {n}: the restore split the mailbox off its node ranges")
        m = mems[n] = tg.NodeMemory.open(r, n)
        S = spec["mailbox_size"]
        check(np.array_equal(r.chunk_offsets(f"{n}/mail"), m.node_offsets * S) and
              np.array_equal(r.chunk_offsets(f"{n}/memory"), m.node_offsets) and
              np.array_equal(m.node_offsets, [partition(N, r.width, g)[0]
                                              for g in range(r.width)] + [N]),
              f"{tag}: {n}: chunks off its node ranges")
        check(np.array_equal(r.chunk_offsets(f"{n}/commits"), np.arange(r.group_size + 1)),
              f"{tag}: {n}: commit counts {r.chunk_offsets(f'{n}/commits')}")
        compare(memory_reads(m), ref["memories"][n], f"{tag}: memory {n!r}")
        check(f"mailbox_size={S}," in repr(m) and m.dtype == spec["dtype"] and
              m.ts_dtype == spec["ts_dtype"], f"{tag}: {m!r}")
    if not further:
        return graphs, mems
    for n, m in mems.items():  # one more round: what a commit after a restore gives
        before = m.read(np.arange(N))
        nodes, mm, mail, ts = updates(n, 7)
        nodes = np.arange(N)  # every node once: the expected state is plain
        dt = MEMORIES[n]["dtype"]
        mm = (mm[:1].repeat(N, 0) + nodes[:, None]).astype(dt)
        mail = (mail[:1].repeat(N, 0) - nodes[:, None]).astype(dt)
        ts = ts[0] + nodes.astype(ts.dtype)
        a, b = partition(N, r.size, r.rank)
        m.write(nodes[a:b], mm[a:b], ts[a:b])
        m.post(nodes[a:b], mail[a:b], ts[a:b])
        m.commit(wait=bool(r.size % 2))  # a non-blocking one too
        m.snapshot()
        after = m.read(np.arange(N))
        want_mail = np.concatenate([before.mail.numpy()[:, 1:], mail[:, None]], 1)
        want_mts = np.concatenate([before.mail_ts.numpy()[:, 1:], ts[:, None]], 1)
        check(after.memory.numpy().tobytes() == mm.tobytes() and
              after.memory_ts.numpy().tobytes() == ts.tobytes() and
              after.mail.numpy().tobytes() == want_mail.tobytes() and
              after.mail_ts.numpy().tobytes() == want_mts.tobytes(),
              f"{tag}: {n}: a commit after open")
        m.reset()
        check(not m.read(np.arange(N)).memory.numpy().any(), f"{tag}: {n}: reset")
        m.restore()
        check(memory_reads(m) == {k: getattr(after, k).numpy()[::-1].tobytes() for k in
                                  ("memory", "memory_ts", "mail", "mail_ts")},
              f"{tag}: {n}: snapshot / restore after open")
    return graphs, mems


def remove_all(r, graphs, mems, tag):
    for g in graphs.values():
        g.remove()
    for m in mems.values():
        m.remove()
    check(r.variables() == [] and r.annotations() == [],
          f"{tag}: left after remove: {r.variables()} {r.annotations()}")


@cases("build, save; restore at every rank count and width; open, compare, go on")
def _(t):
    with shared_tmpdir() as tmp:
        write_files(tmp)
        p1, p2 = os.path.join(tmp, "ck1"), os.path.join(tmp, "ck2")
        with DDStore(comm, width=WIDTH, transport=TRANSPORT) as s:
            build(s, tmp)
            ref = reference(s)
            s.save(p1, block_bytes=200)  # many blocks: partial reads
            # opening on the store that built them: the same reads
            verify(s, ref, f"{size} ranks w{WIDTH}, not saved", further=False)
        if size > 1:  # saved from the first size - 1 ranks, at width 1
            sub = first_ranks(size - 1)
            if sub is not None:
                with DDStore(sub, width=1, transport=TRANSPORT) as s:
                    build(s, tmp)
                    # (but the memories' commit counts: a row per member)
                    check(without_counts(variable_bytes(s)) == without_counts(ref["vars"]),
                          f"built on {size - 1} ranks: other bytes")
                    s.save(p2)
                sub.Free()
            comm.Barrier()
        for k in range(1, size + 1):
            sub = first_ranks(k)
            if sub is not None:
                for w in [w for w in range(1, k + 1) if k % w == 0]:
                    tag = f"saved {size} ranks w{WIDTH}, restored {k} ranks w{w}"
                    with DDStore.restore(p1, sub, width=w, transport=TRANSPORT) as r:
                        graphs, mems = verify(r, ref, tag)
                        remove_all(r, graphs, mems, tag)
                sub.Free()
            comm.Barrier()
        if size > 1:
            tag = f"saved {size - 1} ranks w1, restored {size} ranks w{size}"
            with DDStore.restore(p2, comm, width=size, transport=TRANSPORT) as r:
                verify(r, ref, tag, further=False)
        # a restored, opened store saved again restores again (its annotations kept)
        p3 = os.path.join(tmp, "ck3")
        with DDStore.restore(p1, comm, width=1, transport=TRANSPORT) as r:
            graphs, mems = verify(r, ref, "restored w1", further=False)
            r.save(p3)
        with DDStore.restore(p3, comm, width=size, transport=TRANSPORT) as r:
            verify(r, ref, f"saved again, restored w{size}", further=False)

        # ------------------------------------------------------------ refusals
        with DDStore.restore(p1, comm, transport=TRANSPORT) as r:
            graphs = ", ".join(repr(n) for n in GRAPHS[:2])
            expect_error(DDStoreValueError, ["no TemporalGraph 'nope'", "known",
                                             "'a', 'b'"],
                         tg.TemporalGraph.open, r, "nope")
            expect_error(DDStoreValueError, ["no TemporalGraph 'm3'", graphs],
                         tg.TemporalGraph.open, r, "m3")
            expect_error(DDStoreValueError, ["no NodeMemory 'a'", "['m1', 'm3']"],
                         tg.NodeMemory.open, r, "a", agree=True, agreed=True, store=r)
            expect_error(DDStoreValueError, ["no NodeMemory 'nope'"],
                         tg.NodeMemory.open, r, "nope", agree=True, store=r)
            r.remove("a/edge_t")  # a graph missing a variable is no longer known
            expect_error(DDStoreValueError, ["no TemporalGraph 'a'", "'b'"],
                         tg.TemporalGraph.open, r, "a")
            check("a" not in r.annotations(), "the annotation went with its variable")


def main():
    cases.run()


if __name__ == "__main__":
    run_main(main, note=f"({TRANSPORT}, saved at width {WIDTH})")
