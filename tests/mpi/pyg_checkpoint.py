"""MPI program: checkpoint and restart of ddstore.pyg's stores (issue 37, item 3).

Usage: ``pyg_checkpoint.py`` on 1-4 ranks (under ``timeout``).

Four graphs are built over one store, covering the options a graph store keeps:

- ``g``: ``from_pyg`` with node-level time (``time_attr="t"``, int64), weights
  (``weight_attr="edge_weight"``, float32), a bfloat16 node attribute, a second layout
  (a CSR of other edges), out-lists (``build_backward``), an attribute put then removed;
- ``e``: edge-level time (``edge_time``, float64, per entry);
- ``h``: ``from_hetero`` (two node types, three edge types, a node type with no edges,
  declared rows), out-lists;
- ``b``: out-lists with the in-lists dropped (``keep_in_lists=False``), weighted
  afterwards by ``put_edge_weights`` (the out-lists' weights);
- ``z``: no edges (an empty edge index of 7 nodes: its seeds are sampled);

and one empty ``GraphStore`` (``solo``).  The store is saved, then restored at every rank
count ``k`` of 1..size (a sub-communicator of the first ``k`` ranks) and every width
dividing ``k``, transports auto and rma in turn; ``FeatureStore.open`` /
``GraphStore.open`` / ``open_stores`` reopen each graph.  Checked against the store that
was saved: every variable (names, dtypes, row shapes, every byte), every
``get_tensor`` (whole and indexed), every ``get_edge_index`` of every stored layout,
``get_all_edge_attrs``, ``num_edges``, ``node_counts``, ``weight_attr_of``,
``has_backward``, and every batch of PyG's ``NeighborLoader`` for the same seed: uniform,
temporal (node-level and edge-level time), weighted, backward, bidirectional
(``BidirectionalNeighborSampler``), heterogeneous, backward over dropped in-lists.  The
builds are on every rank at width size/2 (or size), and (size > 1) on rank 0 alone, then
restored on more ranks.  After an open, puts and removals go on (``remove_tensor``,
``remove_edge_index``, a new attribute) and a second save / restore sees them.  A
transaction that fails alike on every rank after puts, declarations, a new layout and
out-lists over opened stores, or after making a new pair, leaves the annotations (and
variables) as they were, and a save after it restores as the first one did.  Errors:
an unknown name names the known ones, a name of the other kind says so.
``NodeData.open`` gives back what ``load_synthetic`` returned (counts, split sizes, the
stores' reads and batches) at another width.
"""
import time

import torch
from mpi4py import MPI

import ddstore
from ddstore import DDStoreValueError
from ddstore import pyg as dpyg
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NeighborLoader

from _harness import (Cases, check, comm, expect_error, first_ranks, rank, run_main,
                      shared_tmpdir, size)

cases = Cases()
N, E = 40, 160
HN = {"a": 24, "b": 16, "c": 5}


def _data():
    g = torch.Generator().manual_seed(11)
    data = Data(x=torch.randn(N, 4, generator=g), y=torch.randint(0, 3, (N,), generator=g),
                t=torch.randint(0, 100, (N,), generator=g),
                edge_index=torch.randint(0, N, (2, E), generator=g),
                edge_weight=torch.rand(E, generator=g) + 0.01)
    edata = Data(x=torch.randn(N, 2, generator=g),
                 edge_index=torch.randint(0, N, (2, E), generator=g),
                 edge_time=torch.rand(E, generator=g, dtype=torch.float64) * 100)
    h = HeteroData()
    for t, n in HN.items():
        h[t].num_nodes = n
    h["a"].x = torch.randn(HN["a"], 3, generator=g)
    h["b"].x = torch.randn(HN["b"], 3, generator=g)
    for et, (s, d) in {("a", "ab", "b"): ("a", "b"), ("b", "ba", "a"): ("b", "a"),
                       ("a", "aa", "a"): ("a", "a")}.items():
        m = 50
        h[et].edge_index = torch.stack([torch.randint(0, HN[s], (m,), generator=g),
                                        torch.randint(0, HN[d], (m,), generator=g)])
        h[et].edge_attr = torch.randn(m, 2, generator=g)
    bdata = Data(x=torch.randn(N, 2, generator=g),
                 edge_index=torch.randint(0, N, (2, E), generator=g),
                 w=torch.rand(E, generator=g, dtype=torch.float64))
    csr_ptr = torch.cat([torch.zeros(1, dtype=torch.long),
                         torch.cumsum(torch.randint(0, 4, (N,), generator=g), 0)])
    csr_col = torch.randint(0, N, (int(csr_ptr[-1]),), generator=g)
    return data, edata, h, bdata, (csr_ptr, csr_col)


def build(store):
    """The four graphs (collective)."""
    data, edata, h, bdata, csr = _data()
    fs, gs = dpyg.from_pyg(store, data, name="g", time_attr="t",
                           weight_attr="edge_weight")
    fs.put_tensor(torch.randn(N, 2, generator=torch.Generator().manual_seed(3)).to(
        torch.bfloat16), group_name=None, attr_name="xb")
    fs.put_tensor(torch.zeros(N), group_name=None, attr_name="gone")
    fs.remove_tensor(group_name=None, attr_name="gone")
    gs.put_edge_index(csr, edge_type=None, layout="csr", size=(N, N))
    gs.build_backward()
    efs, egs = dpyg.from_pyg(store, edata, name="e", time_attr="edge_time")
    hfs, hgs = dpyg.from_hetero(store, h, name="h")
    hgs.build_backward()
    bfs, bgs = dpyg.from_pyg(store, Data(x=bdata.x, edge_index=bdata.edge_index),
                             name="b")
    bgs.build_backward(keep_in_lists=False)
    bfs.put_tensor(bdata.w, group_name=dpyg.EDGES, attr_name="w")
    bgs.put_edge_weights("w")
    dpyg.GraphStore(store, "solo")
    zfs, zgs = dpyg.from_pyg(store, Data(x=torch.arange(7.0).view(7, 1), num_nodes=7),
                             name="z")
    return {"g": (fs, gs), "e": (efs, egs), "h": (hfs, hgs), "b": (bfs, bgs),
            "z": (zfs, zgs)}


def _flat(batch):
    """A batch as a sorted list of (key path, value)."""
    out = []

    def walk(prefix, d):
        for k in sorted(d, key=repr):
            v = d[k]
            if isinstance(v, dict):
                walk(prefix + (k,), v)
            else:
                out.append((prefix + (k,), v))
    walk((), batch.to_dict())
    return out


def _batches(fs, gs, seed, **kw):
    """Every batch of a NeighborLoader over (fs, gs) for sampler seed ``seed``."""
    loader_kw = {k: kw.pop(k) for k in ("input_time", "time_attr") if k in kw}
    nodes = kw.pop("input_nodes", torch.arange(0, N, 3))  # one batch of 14 seeds
    bidir = kw.pop("bidirectional", False)
    nn = kw.pop("num_neighbors", [3, 2])
    if bidir:
        smp = dpyg.BidirectionalNeighborSampler(gs, nn, seed=seed, **kw)
    else:
        smp = dpyg.NeighborSampler(gs, nn, seed=seed, time_attr=loader_kw.get(
            "time_attr"), **kw)
    loader = NeighborLoader((fs, gs), num_neighbors=nn, input_nodes=nodes, batch_size=16,
                            neighbor_sampler=smp, **loader_kw)
    return [_flat(b) for b in loader]


def reads(stores):
    """Everything the layer reads, as a list of (label, value)."""
    out = []
    for name, (fs, gs) in stores.items():
        attrs = fs.get_all_tensor_attrs() + fs.edge_tensor_attrs()
        for a in sorted({(repr(a.group_name), a.attr_name): a for a in attrs}.items()):
            a = a[1]
            full = fs.get_tensor(a.group_name, a.attr_name)
            out.append((f"{name} get_tensor {a.group_name!r} {a.attr_name}", full))
            idx = torch.tensor([full.shape[0] - 1, 0, 2]) if full.shape[0] > 2 else None
            if idx is not None:
                out.append((f"{name} get_tensor idx {a.attr_name}",
                            fs.get_tensor(a.group_name, a.attr_name, index=idx)))
        out.append((f"{name} attrs", sorted(
            (repr(ea.edge_type), ea.layout.value, ea.is_sorted, tuple(ea.size))
            for ea in gs.get_all_edge_attrs())))
        for ea in gs.get_all_edge_attrs():
            out.append((f"{name} get_edge_index {ea.edge_type} {ea.layout.value}",
                        list(gs.get_edge_index(ea.edge_type, ea.layout))))
        for et in gs.sampled_edge_types():
            out.append((f"{name} {et} counts", (gs.num_edges(et), gs.weight_attr_of(et),
                                                gs.has_backward(et))))
        out.append((f"{name} node_counts", sorted(gs.node_counts().items(), key=repr)))
        out.append((f"{name} options", (gs.time_attr, gs.weight_attr, gs.chunk_edges,
                                        fs.chunk_rows)))
    if "g" not in stores:
        return out
    fs, gs = stores["g"]
    seed_t = torch.arange(0, N, 3) * 3
    out.append(("g uniform", _batches(fs, gs, 5)))
    out.append(("g temporal", _batches(fs, gs, 6, input_time=seed_t, time_attr="t")))
    out.append(("g weighted", _batches(fs, gs, 7, weight_attr="edge_weight")))
    out.append(("g backward", _batches(fs, gs, 8, sample_direction="backward")))
    out.append(("g bidirectional", _batches(fs, gs, 9, bidirectional=True)))
    out.append(("g disjoint temporal", _batches(fs, gs, 10, input_time=seed_t,
                                                time_attr="t", disjoint=True)))
    if "e" not in stores:
        return out
    fs, gs = stores["e"]
    out.append(("e temporal", _batches(fs, gs, 11, input_time=torch.rand(
        14, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 100,
        time_attr="edge_time")))
    fs, gs = stores["h"]
    out.append(("h hetero", _batches(fs, gs, 12,
                                     input_nodes=("a", torch.arange(0, HN["a"], 2)))))
    out.append(("h hetero backward", _batches(
        fs, gs, 13, input_nodes=("b", torch.arange(HN["b"])), sample_direction="backward")))
    fs, gs = stores["b"]
    out.append(("b backward weighted", _batches(fs, gs, 14, sample_direction="backward",
                                                weight_attr="w")))
    fs, gs = stores["z"]
    out.append(("z no edges", _batches(fs, gs, 15, input_nodes=torch.arange(7))))
    return out


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and \
            a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def variables_bytes(store):
    """{variable: (dtype, row shape, nrows, bytes of every row)} (reads every row)."""
    out = {}
    for v in store.variables():
        n = store.nrows(v)
        out[v] = (str(store.dtype(v)), tuple(store.row_shape(v)), n,
                  store.get_range(v, 0, n).tobytes())
    return out


def open_all(store):
    return {name: dpyg.open_stores(store, name) for name in ("g", "e", "h", "b", "z")}


def compare(store, ref_vars, ref_reads, tag):
    got = variables_bytes(store)
    check(sorted(got) == sorted(ref_vars), f"{tag}: variables {sorted(got)} != "
                                           f"{sorted(ref_vars)}")
    for v, want in ref_vars.items():
        check(got.get(v) == want, f"{tag}: variable {v!r} differs")
    mine = reads(open_all(store))
    check(len(mine) == len(ref_reads), f"{tag}: {len(mine)} reads, {len(ref_reads)}")
    for (label, a), (label2, b) in zip(ref_reads, mine):
        check(label == label2 and _equal(a, b), f"{tag}: {label} differs")


def idle_barrier():
    """A barrier that sleeps while it waits (the ranks left out of a sub-communicator's
    restore do not spin on the cores the others need)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.005)


def restore_everywhere(path, ref_vars, ref_reads, tag, configs=None):
    """Restore at each ``(k, width)`` of ``configs`` (default: every rank count k of
    1..size, the first k ranks, and every width dividing k), transports auto and rma in
    turn, and compare."""
    if configs is None:
        configs = [(k, w) for k in range(1, size + 1) for w in range(1, k + 1)
                   if k % w == 0]
    for turn, (k, w) in enumerate(configs):
        transport = ("auto", "rma")[turn % 2]
        sub = first_ranks(k)
        if sub is not None:
            with ddstore.DDStore.restore(path, sub, width=w, transport=transport) as st:
                compare(st, ref_vars, ref_reads, f"{tag} -> {k} ranks w{w} {transport}")
            sub.Free()
        idle_barrier()


@cases("build, save, restore at every rank count and width")
def _(t):
    t.dir = t.tmp
    w = size // 2 if size % 2 == 0 and size > 1 else size
    with ddstore.DDStore(comm, width=w) as store:
        built = build(store)
        ref_vars = variables_bytes(store)
        ref_reads = reads(built)
        # the objects opened over the building store read what the builders read
        opened = reads(open_all(store))
        check(len(opened) == len(ref_reads) and all(
            a[0] == b[0] and _equal(a[1], b[1]) for a, b in zip(ref_reads, opened)),
            "open over the building store reads differently")
        store.save(f"{t.dir}/world")
    t.ref = (ref_vars, ref_reads)
    restore_everywhere(f"{t.dir}/world", ref_vars, ref_reads, f"{size} ranks w{w}")


@cases("build on one rank, restore on more", min_ranks=2)
def _(t):
    sub = first_ranks(1)
    if sub is not None:
        with ddstore.DDStore(sub, width=1) as store:
            build(store)
            store.save(f"{t.dir}/one")
        sub.Free()
    idle_barrier()
    restore_everywhere(f"{t.dir}/one", *t.ref, "1 rank",
                       [(size, size), (2, 1)] + ([(3, 3)] if size >= 3 else []))


@cases("after open: puts and removals, saved again")
def _(t):
    with ddstore.DDStore.restore(f"{t.dir}/world", comm, width=1) as st:
        fs, gs = dpyg.open_stores(st, "g")
        check(fs.remove_tensor(group_name=None, attr_name="y"), "remove_tensor")
        fs.put_tensor(torch.arange(N * 2).view(N, 2), group_name=None, attr_name="z")
        check(gs.remove_edge_index(None, "csr"), "remove_edge_index csr")
        _, egs = dpyg.open_stores(st, "e")
        check(egs.remove_edge_index(None, "coo"), "remove_edge_index e")
        check("e/csc/_/coo/nbr" not in st, "e's lists removed")
        ref = reads({"g": (fs, gs)})
        st.save(f"{t.dir}/again")
    with ddstore.DDStore.restore(f"{t.dir}/again", comm, width=size) as st:
        fs, gs = dpyg.open_stores(st, "g")
        got = reads({"g": (fs, gs)})
        check(len(got) == len(ref) and all(
            a[0] == b[0] and _equal(a[1], b[1]) for a, b in zip(ref, got)),
            "reads after puts and removals, saved again")
        check(fs.get_tensor_size(group_name=None, attr_name="y") is None, "y removed")
        check(torch.equal(fs.get_tensor(group_name=None, attr_name="z"),
                          torch.arange(N * 2).view(N, 2)), "z put after open")
        check([ea.layout.value for ea in gs.get_all_edge_attrs()] == ["coo"], "csr gone")
        egs = dpyg.GraphStore.open(st, "e")
        check(egs.get_all_edge_attrs() == [], "e has no edges left")
        # a sampler over the graph store opened twice: the same batches
        b1 = _batches(fs, gs, 21, weight_attr="edge_weight")
        b2 = _batches(*dpyg.open_stores(st, "g"), 21, weight_attr="edge_weight")
        check(_equal(b1, b2), "two opens sample alike")


def _failing_block(store, fs, gs):
    """Collective: puts, out-lists, weights and a replacement of a stored layout in a
    transaction that then fails alike on every rank."""
    with store.transaction("test"):
        fs.put_tensor(torch.ones(N, 2), group_name=None, attr_name="extra")
        fs.declare_rows({"other": 3})
        gs.put_edge_index((torch.tensor([0, 1]), torch.tensor([0] + [1] * (N - 1) + [2])),
                          edge_type=None, layout="csc", size=(N, N))
        gs.build_backward()
        fs.put_tensor(torch.full((gs.num_edges(None),), 0.5), group_name=dpyg.EDGES,
                      attr_name="w2")
        gs.put_edge_index(torch.tensor([[0], [1]]), edge_type=None, layout="coo")
        with store.collective(None):  # a later step that fails on every rank
            raise DDStoreValueError("later failure")


@cases("rollbacks leave the annotations as they were")
def _(t):
    with ddstore.DDStore.restore(f"{t.dir}/world", comm, width=size) as st:
        def state():
            return {n: (a.kind, a.meta, sorted(a.arrays), a.variables, a.cuts)
                    for n, a in ((n, st.annotation(n)) for n in st.annotations())}
        before, names = state(), st.variables()
        fs, gs = dpyg.open_stores(st, "e")
        expect_error(DDStoreValueError, ["later failure"], _failing_block, st, fs, gs,
                     agree=True, store=st)
        check(state() == before, "a rolled-back block changed the annotations")

        def new_pair():
            with st.transaction("new"):
                nfs = dpyg.FeatureStore(st, "tx")
                ngs = dpyg.GraphStore(st, "tx")
                nfs.put_tensor(torch.zeros(N, 1), group_name=None, attr_name="x")
                ngs.put_edge_index(torch.tensor([[0], [1]]), edge_type=None)
                ngs.put_edge_index(torch.tensor([[0], [1]]), edge_type=None)
                with st.collective(None):
                    raise DDStoreValueError("later failure")
        expect_error(DDStoreValueError, ["later failure"], new_pair, agree=True, store=st)
        check(state() == before and st.variables() == names,
              f"a rolled-back construction left annotations: {sorted(state())}")
        st.save(f"{t.dir}/rolled")
    with ddstore.DDStore.restore(f"{t.dir}/rolled", comm, width=1) as st:
        compare(st, *t.ref, "after rollbacks")


@cases("NodeData.open after load_synthetic")
def _(t):
    with ddstore.DDStore(comm, width=1) as store:
        nd = dpyg.load_synthetic(store, scale=0.0003, name="syn")
        fs, gs = nd.pyg
        ref = [fs.get_tensor(group_name=None, attr_name=a) for a in ("x", "y")]
        ref.append(dpyg.NeighborSampler(gs, [4, 3], seed=2)._sample(torch.arange(30)))
        store.save(f"{t.dir}/syn")
    with ddstore.DDStore.restore(f"{t.dir}/syn", comm, width=size,
                                 transport="rma") as st:
        got = dpyg.NodeData.open(st, "syn")
        check(got[2:] == (nd.num_nodes, nd.num_edges, nd.num_features, nd.num_classes,
                          {}, nd.split_sizes), f"NodeData.open counts {got[2:]}")
        fs, gs = got.pyg
        for a, want in zip(("x", "y"), ref):
            check(_equal(fs.get_tensor(group_name=None, attr_name=a), want),
                  f"NodeData.open: {a} differs")
        out = dpyg.NeighborSampler(gs, [4, 3], seed=2)._sample(torch.arange(30))
        check(all(_equal(getattr(out, k), getattr(ref[2], k))
                  for k in ("node", "row", "col", "edge")), "NodeData.open: sample")
        expect_error(DDStoreValueError, ["NodeData.open", "no pyg.NodeData 'g'"],
                     dpyg.NodeData.open, st, "g")


@cases("errors: unknown name, other kind")
def _(t):
    with ddstore.DDStore.restore(f"{t.dir}/world", comm, width=size) as st:
        expect_error(DDStoreValueError, ["GraphStore.open", "no pyg.GraphStore 'x'",
                                         "known pyg.GraphStore names: ['b', 'e', 'g', "
                                         "'h', 'solo', 'z']"],
                     dpyg.GraphStore.open, st, "x")
        expect_error(DDStoreValueError, ["FeatureStore.open", "no pyg.FeatureStore 'x'",
                                         "known pyg.FeatureStore names: ['b', 'e', 'g', "
                                         "'h', 'z']"],
                     dpyg.FeatureStore.open, st, "x")
        expect_error(DDStoreValueError, ["no pyg.FeatureStore 'solo'",
                                         "'solo' names a pyg.GraphStore there"],
                     dpyg.FeatureStore.open, st, "solo")
        gs = dpyg.GraphStore.open(st, "solo")
        check(gs.get_all_edge_attrs() == [], "the empty graph store opens empty")
        st.annotate("plain", "other")
        expect_error(DDStoreValueError, ["no pyg.GraphStore 'plain'"],
                     dpyg.GraphStore.open, st, "plain")


def main():
    with shared_tmpdir("ddstore-pygck-") as tmp:
        t = type("T", (), {})()
        t.tmp = tmp
        cases.run(t)


if __name__ == "__main__":
    run_main(main)
