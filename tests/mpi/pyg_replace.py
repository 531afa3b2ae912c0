"""MPI program: a layout put again replaces it, and an edge index reads back in the
dtypes it was put in, as PyG's own graph stores do (``Data`` / ``HeteroData`` /
``MyGraphStore``).

Usage: ``timeout 240 mpiexec -n <1-3> python tests/mpi/pyg_replace.py`` (width = the
rank count, transports auto and rma); in-process on one rank from
tests/test_pyg_replace.py.

- a COO put again: ``get_edge_index`` gives the new edges (bytes and dtype), the old
  variables are gone, the new ones sit beside the old names (``coo~1``) and return to
  the first names at the next replacement; a sampler built before refuses its next
  batch (``DDStoreStateError``: the lists it was built on changed), a new one samples
  exactly the new edges ([-1]: every in-edge of the seeds, brute force);
- with out-lists (``build_backward``, kept or with the in-lists dropped): the
  replacement removes them (they describe the old edges), backward sampling is refused
  until ``build_backward`` runs again, then its [-1] hop is the new out-edges exactly;
- a refused replacement keeps the old edges (variables, bytes, dtype): a negative node
  id on the last rank only, dtypes or edges that differ between ranks, a ``put_edge_range``
  callable that fails on the last rank in the build after the first pass went well;
  a transaction enclosing replacements that fails afterwards removes the new lists and
  brings back the old ones (in place, with their out-lists; same batches), and one that
  commits removes the old ones only then; the same for ``remove_edge_index`` (its
  variables stay until the enclosing transaction commits; a rollback brings it back);
- dtypes as put (int32, int16, uint8; CSR and CSC pointers and indices of different
  dtypes) against ``MyGraphStore``, also through PyG's ``coo()`` / ``csr()`` /
  ``csc()``; ``put_edge_range`` reads back int64;
- a graph store with times and weights: the replacement reads the feature store's new
  times and weights (temporal weighted [-1] hops are exactly the new eligible edges,
  draws with replacement only new positive-weight ones);
- a checkpoint of a replaced edge type (names ``coo~1``, int32) restores and reopens
  with the same edges, dtypes and sampled batches.
"""
import numpy as np
import torch
from mpi4py import MPI

from _harness import Cases, check, expect_error, run_main, same_array, shared_tmpdir

import ddstore  # noqa: E402
from ddstore import pyg as dpyg  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput  # noqa: E402
from torch_geometric.testing import MyGraphStore  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N = 30
cases = Cases()


def graph(seed, m, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, N, (2, m), generator=g).to(dtype)


def triples(out):
    """The sampled edges ``(source, destination, edge id)`` of a homogeneous output."""
    s, d = out.node[out.row].tolist(), out.node[out.col].tolist()
    return sorted(zip(s, d, out.edge.tolist()))


def full_hop(sampler, ei, seeds, backward=False):
    """Check that a [-1] hop from ``seeds`` gives exactly the in-edges (``backward``:
    out-edges) of the seeds in ``ei``."""
    out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
    s, d = ei[0].long(), ei[1].long()
    at = s if backward else d
    keep = torch.isin(at, seeds).nonzero().flatten().tolist()
    want = sorted((int(s[e]), int(d[e]), e) for e in keep)
    return triples(out) == want


def names(store, part):
    return [v for v in store.variables() if part in v]


def sampling_cases(transport):
    @cases(f"replace coo, {transport}")
    def _(t):
        with ddstore.DDStore(comm, width=size, transport=transport) as store:
            gs = dpyg.GraphStore(store, "r")
            g1, g2 = graph(1, 120), graph(2, 90, torch.int32)
            seeds = torch.arange(0, N, 4)
            gs.put_edge_index(g1, edge_type=None, layout="coo", size=(N, N))
            first = store.variables()
            s1 = dpyg.NeighborSampler(gs, [-1])
            check(full_hop(s1, g1, seeds), "sample of the first graph")
            gs.put_edge_index(g2, edge_type=None, layout="coo", size=(N, N))
            got = gs.get_edge_index(None, "coo")
            check(same_array(got[0], g2[0]) and same_array(got[1], g2[1]),
                  f"edges after replacing: {[x.dtype for x in got]}")
            check(sorted(store.variables()) == sorted(
                v.replace("/coo/", "/coo~1/") for v in first),
                f"variables after replacing: {store.variables()} (first: {first})")
            check([a.layout.value for a in gs.get_all_edge_attrs()] == ["coo"],
                  f"edge attrs {gs.get_all_edge_attrs()}")
            expect_error(ddstore.DDStoreStateError, "changed since this sampler was built",
                         s1.sample_from_nodes, NodeSamplerInput(input_id=None, node=seeds),
                         what="a sampler of the replaced edges", agree=True)
            check(full_hop(dpyg.NeighborSampler(gs, [-1]), g2, seeds),
                  "a new sampler samples the new edges")
            gs.put_edge_index(g1, edge_type=None, layout="coo", size=(N, N))
            check(sorted(store.variables()) == sorted(first),
                  f"the first names again: {store.variables()}")
            got = gs.get_edge_index(None, "coo")
            check(same_array(got[0], g1[0]) and same_array(got[1], g1[1]),
                  "edges after replacing back")

    @cases(f"replace with out-lists, {transport}")
    def _(t):
        with ddstore.DDStore(comm, width=size, transport=transport) as store:
            gs = dpyg.GraphStore(store, "r")
            g1, g2 = graph(3, 100), graph(4, 70)
            seeds = torch.arange(1, N, 3)
            for keep in (True, False):
                gs.put_edge_index(g1, edge_type=None, layout="coo", size=(N, N))
                gs.build_backward(keep_in_lists=keep)
                check(gs.has_backward(None) and names(store, "/out/"),
                      f"keep={keep}: out-lists built")
                gs.put_edge_index(g2, edge_type=None, layout="coo", size=(N, N))
                check(not gs.has_backward(None) and not names(store, "/out/"),
                      f"keep={keep}: out-lists left after replacing: "
                      f"{store.variables()}")
                check(full_hop(dpyg.NeighborSampler(gs, [-1]), g2, seeds),
                      f"keep={keep}: forward sample of the new edges")
                expect_error(ddstore.DDStoreValueError, "build_backward",
                             dpyg.NeighborSampler, gs, [-1], sample_direction="backward",
                             what=f"keep={keep}: backward without out-lists", agree=True)
                gs.build_backward()
                check(full_hop(dpyg.NeighborSampler(gs, [-1], sample_direction="backward"),
                               g2, seeds, backward=True),
                      f"keep={keep}: backward sample of the new edges")
                check(gs.remove_edge_index(edge_type=None, layout="coo") is True and
                      store.variables() == [], f"keep={keep}: removed: "
                                               f"{store.variables()}")


for _transport in ("auto", "rma"):
    sampling_cases(_transport)


@cases("a refused replacement keeps the edges")
def _(t):
    with ddstore.DDStore(comm, width=size) as store:
        gs = dpyg.GraphStore(store, "r")
        g1 = graph(5, 80, torch.int32)
        gs.put_edge_index(g1, edge_type=None, layout="coo", size=(N, N))
        held = store.variables()

        def unchanged(what):
            got = gs.get_edge_index(None, "coo")
            check(same_array(got[0], g1[0]) and same_array(got[1], g1[1]) and
                  store.variables() == held, f"{what}: the old edges changed")
        bad = graph(6, 80, torch.int32)
        if rank == size - 1:  # in this rank's share only
            bad[0, -1] = -3
        expect_error(ddstore.DDStoreIndexError, "negative node id -3", gs.put_edge_index,
                     bad, edge_type=None, layout="coo", size=(N, N), agree=True,
                     store=store, what="negative id on the last rank")
        unchanged("negative id")
        if size > 1:
            other = graph(6, 80, torch.int32 if rank == 0 else torch.int64)
            expect_error(ddstore.DDStoreValueError, "edge index dtypes",
                         gs.put_edge_index, other, edge_type=None, layout="coo",
                         size=(N, N), agree=True, store=store, what="dtypes differ")
            unchanged("dtypes differ")
        if size > 1:  # is_sorted decides how the lists are built: agreed like the rest
            expect_error(ddstore.DDStoreValueError, ["is_sorted", "differs between ranks"],
                         gs.put_edge_index, graph(6, 80, torch.int32), edge_type=None,
                         layout="coo", size=(N, N), is_sorted=(rank == 0), agree=True,
                         store=store, what="is_sorted differs")
            unchanged("is_sorted differs")
        if size > 1:
            other = graph(6 + (rank == size - 1), 80, torch.int32)  # same shape, dtype
            expect_error(ddstore.DDStoreValueError, ["'sources' differs between ranks"],
                         gs.put_edge_index, other, edge_type=None, layout="coo",
                         size=(N, N), agree=True, store=store, what="edges differ")
            unchanged("edges differ")
        new = graph(7, 60).numpy()
        lo, hi = ddstore.partition(60, size, rank)
        calls = [0]

        def edges(a, b):  # the last rank fails when asked again, in the build
            calls[0] += 1
            if rank == size - 1 and calls[0] > 1:
                raise OSError("disk gone")
            return new[:, lo + a:lo + b]
        expect_error(ddstore.DDStoreValueError, "disk gone", gs.put_edge_range, edges,
                     (lo, hi), size=(N, N), agree=True, store=store,
                     what="put_edge_range failing in the build")
        unchanged("put_edge_range failing in the build")
        check(calls[0] >= 2, f"the callable was asked {calls[0]} times")
        gs.put_edge_range(new[:, lo:hi], (lo, hi), size=(N, N))
        got = gs.get_edge_index(None, "coo")
        check(same_array(got[0], new[0]) and same_array(got[1], new[1]),
              "put_edge_range replaced (int64)")
        # replacements inside a transaction that fails afterwards: the new lists go and
        # the old ones come back (in place, with their out-lists); committed, the old
        # ones are removed only then
        tx, ab, ba = dpyg.GraphStore(store, "tx"), ("a", "r", "b"), ("b", "s", "a")
        for et, seed in ((ab, 11), (ba, 12)):
            tx.put_edge_index(graph(seed, 40), edge_type=et, layout="coo", size=(N, N))
        tx.build_backward(ab)
        kept, attrs = store.variables(), tx.get_all_edge_attrs()
        seeds = torch.arange(0, N, 3)
        want = dpyg.NeighborSampler(tx, [3], seed=4).sample_from_nodes(
            NodeSamplerInput(input_id=None, node=seeds, input_type="b"))

        def fails_after(commit=False):
            with store.transaction("test"):
                tx.put_edge_index(graph(13, 30), edge_type=ab, layout="coo", size=(N, N))
                tx.put_edge_index(graph(14, 20), edge_type=ab, layout="coo", size=(N, N))
                check(len(names(store, "tx/csc/a__r__b/")) == 6 and
                      not tx.has_backward(ab),
                      f"inside the transaction: {store.variables()}")
                if not commit:
                    with store.collective(None):  # a later step failing on every rank
                        raise ddstore.DDStoreValueError("later failure")
        expect_error(ddstore.DDStoreValueError, "later failure", fails_after, agree=True,
                     what="an enclosing transaction fails after two replacements")
        check(store.variables() == kept and tx.get_all_edge_attrs() == attrs and
              tx.has_backward(ab), f"enclosing rollback: {store.variables()}")
        got = tx.get_edge_index(ab, "coo")
        check(torch.equal(torch.stack(list(got)), graph(11, 40)), "the old edges are back")
        out = dpyg.NeighborSampler(tx, [3], seed=4).sample_from_nodes(
            NodeSamplerInput(input_id=None, node=seeds, input_type="b"))
        check(all(torch.equal(getattr(out, k)[ab], getattr(want, k)[ab])
                  for k in ("row", "col", "edge")), "the old edges sample as before")

        def remove_then_fail():  # a removal is undone by its enclosing rollback too
            with store.transaction("test"):
                check(tx.remove_edge_index(edge_type=ab, layout="coo") is True and
                      tx.get_all_edge_attrs() == attrs[1:] and
                      ab not in tx.sampled_edge_types(),
                      f"removed inside the transaction: {tx.get_all_edge_attrs()}")
                # its in-lists and out-lists set aside: hidden until the commit
                held = store.variables()
                aside = sorted(v.split("~aside1")[0] for v in held if "~aside" in v)
                check(sorted(v.split("~aside1")[0] for v in held) == kept and
                      aside == sorted(v for v in kept if "a__r__b" in v),
                      f"removed inside the transaction: {held}")
                with store.collective(None):
                    raise ddstore.DDStoreValueError("later failure")
        expect_error(ddstore.DDStoreValueError, "later failure", remove_then_fail,
                     agree=True, what="an enclosing transaction fails after a removal")
        check(store.variables() == kept and tx.has_backward(ab) and
              sorted(tx.get_all_edge_attrs(), key=repr) == sorted(attrs, key=repr) and
              torch.equal(torch.stack(list(tx.get_edge_index(ab, "coo"))), graph(11, 40)),
              f"rollback of a removal: {store.variables()}, {tx.get_all_edge_attrs()}")
        fails_after(commit=True)  # (the second built under the base names: the first's
        check(sorted(names(store, "tx/csc/a__r__b/")) == sorted(  # old ones hidden then)
            f"tx/csc/a__r__b/coo/{k}" for k in ("eid", "nbr")) and
            not names(store, "tx/out/"), f"committed: {store.variables()}")
        check(torch.equal(torch.stack(list(tx.get_edge_index(ab, "coo"))), graph(14, 20)),
              "committed: the last edges put")


@cases("a timed and weighted replacement reads the attributes again")
def _(t):
    m = 90

    def data(seed):
        g = torch.Generator().manual_seed(seed)
        return Data(x=torch.randn(N, 2, generator=g),
                    edge_index=torch.randint(0, N, (2, m), generator=g),
                    edge_time=torch.randint(0, 20, (m,), generator=g).double(),
                    edge_weight=torch.randint(0, 3, (m,), generator=g).float())
    d1, d2 = data(15), data(16)
    seeds = torch.arange(N)
    times = torch.randint(0, 20, (N,), generator=torch.Generator().manual_seed(2)).double()
    with ddstore.DDStore(comm, width=size) as store:
        fs, gs = dpyg.from_pyg(store, d1, name="tw", time_attr="edge_time",
                               weight_attr="edge_weight")
        for attr in ("edge_time", "edge_weight"):  # the new edges' times and weights
            fs.put_tensor(getattr(d2, attr), group_name=dpyg.EDGES, attr_name=attr)
        gs.put_edge_index(d2.edge_index, edge_type=None, layout="coo", size=(N, N))
        dst, w, tm = d2.edge_index[1], d2.edge_weight, d2.edge_time
        # [-1]: exactly the new eligible in-edges (the new times); [3] with replacement:
        # 3 draws among the new eligible positive-weight ones (the new weights), or none
        for nn, replace in (([-1], False), ([3], True)):
            s = dpyg.NeighborSampler(gs, nn, time_attr="edge_time", replace=replace,
                                     weight_attr="edge_weight", seed=1)
            out = s.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds,
                                                       time=times))
            bad = []
            for i in range(N):
                eligible = (dst == i) & (tm <= times[i]) & ((w > 0) if replace else True)
                want = sorted(eligible.nonzero().view(-1).tolist())
                got = sorted(out.edge[out.node[out.col] == i].tolist())
                if (not replace and got != want) or (replace and (
                        not set(got) <= set(want) or len(got) != (3 if want else 0))):
                    bad.append((i, got, want))
            check(not bad, f"temporal weighted {nn} of the new edges differs: {bad[:3]}")
            check(out.edge.numel() > 0, f"{nn}: nothing sampled")
        got = gs.get_edge_index(None, "coo")
        check(torch.equal(got[0], d2.edge_index[0]) and torch.equal(got[1], d2.edge_index[1]),
              "the new edges as put")


def outcome(fn):
    """``("ok", fn())``, or ``("raised", its exception's type name)``."""
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 -- compared with the reference's
        return "raised", type(exc).__name__


@cases("dtypes as put, against MyGraphStore")
def _(t):
    t.conversions = {}
    et = ("a", "r", "b")
    ei = graph(8, 50)
    order = torch.argsort(ei[0], stable=True)
    rowptr = torch.zeros(N + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(ei[0], minlength=N), 0)
    order_d = torch.argsort(ei[1], stable=True)
    colptr = torch.zeros(N + 1, dtype=torch.long)
    colptr[1:] = torch.cumsum(torch.bincount(ei[1], minlength=N), 0)
    puts = [("coo", ei.to(torch.int32)), ("coo", ei.to(torch.uint8)),
            ("coo", (ei[0].to(torch.int16), ei[1])),
            ("csr", (rowptr.to(torch.int32), ei[1][order])),
            ("csc", (ei[0][order_d], colptr.to(torch.int16)))]
    with ddstore.DDStore(comm, width=size) as store:
        for i, (layout, x) in enumerate(puts):
            gs, ref = dpyg.GraphStore(store, f"d{i}"), MyGraphStore()
            for s in (gs, ref):
                s.put_edge_index(x, edge_type=et, layout=layout, size=(N, N))
            got = gs.get_edge_index(et, layout, size=(N, N))
            want = ref.get_edge_index(et, layout, size=(N, N))
            check(all(same_array(a, b) for a, b in zip(got, want)),
                  f"{layout} {[w.dtype for w in want]}: got {[g.dtype for g in got]}")
            for conv in ("coo", "csr", "csc"):  # PyG's conversions, raising alike
                (ka, a), (kb, b) = outcome(getattr(gs, conv)), outcome(getattr(ref, conv))
                ok = ka == kb and (ka == "raised" and a == b or ka == "ok" and all(
                    (u[et] is None and v[et] is None) or same_array(u[et], v[et])
                    for u, v in zip(a, b)))
                check(ok, f"{layout} {[w.dtype for w in want]}: PyG's {conv}() differs: "
                          f"{ka} {a if ka == 'raised' else ''} / {kb} "
                          f"{b if kb == 'raised' else ''}")
                t.conversions[ka] = t.conversions.get(ka, 0) + 1
        check(t.conversions.get("ok", 0) >= 9, f"conversions compared: {t.conversions}")
        gs = dpyg.GraphStore(store, "range")
        lo, hi = ddstore.partition(50, size, rank)
        gs.put_edge_range(ei[:, lo:hi].to(torch.int32), (lo, hi), size=(N, N))
        got = gs.get_edge_index(None, "coo")
        check(got[0].dtype == torch.int64 and torch.equal(got[0], ei[0]) and
              torch.equal(got[1], ei[1]), "put_edge_range reads back int64")


@cases("a checkpoint of a replaced edge type")
def _(t):
    g1, g2 = graph(9, 60), graph(10, 75, torch.int32)
    seeds = torch.arange(2, N, 5)
    with shared_tmpdir() as tmp:
        with ddstore.DDStore(comm, width=size) as store:
            gs = dpyg.GraphStore(store, "r")
            gs.put_edge_index(g1, edge_type=None, layout="coo", size=(N, N))
            gs.put_edge_index(g2, edge_type=None, layout="coo", size=(N, N))
            check(names(store, "/coo~1/") and not names(store, "/coo/"),
                  f"replaced names: {store.variables()}")
            store.save(tmp)
            want = dpyg.NeighborSampler(gs, [2, 2], seed=3).sample_from_nodes(
                NodeSamplerInput(input_id=None, node=seeds))
        with ddstore.DDStore.restore(tmp, comm) as again:
            gs = dpyg.GraphStore.open(again, "r")
            got = gs.get_edge_index(None, "coo")
            check(same_array(got[0], g2[0]) and same_array(got[1], g2[1]),
                  f"reopened edges {[x.dtype for x in got]}")
            out = dpyg.NeighborSampler(gs, [2, 2], seed=3).sample_from_nodes(
                NodeSamplerInput(input_id=None, node=seeds))
            check(all(torch.equal(getattr(out, k), getattr(want, k))
                      for k in ("node", "row", "col", "edge")),
                  "the reopened graph samples the batch it sampled before")
            check(full_hop(dpyg.NeighborSampler(gs, [-1]), g2, seeds),
                  "reopened: [-1] hop of the replaced edges")


def main():
    cases.run()


if __name__ == "__main__":
    run_main(main)
