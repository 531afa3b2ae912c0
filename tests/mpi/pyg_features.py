"""MPI program: ddstore.pyg.FeatureStore as PyG's own (issue 26, items 2, 3, 7) on 1-4
ranks, every width dividing the rank count (or those named), both transports.

- ``from_pyg(Data(x=np.memmap))`` stores ``x`` range-wise: a spy memmap records every
  read; each rank reads exactly its own member's rows, once; the stored ``x`` equals
  the file byte for byte, whole and at random rows (read across ranks);
- bfloat16: put whole and by rows, read back as bfloat16, every byte;
- puts with an index write those rows on every replica (read back from every rank);
  an index out of range on one rank only raises the same error everywhere, nothing
  changed; remove_tensor of a missing attribute is False on every rank;
- ``from_hetero`` with ``edge_label_index`` / ``edge_label``: not stored as edge
  attributes; ``edge_features`` gives the loader's batch its per-edge rows by e_id;
- a first put with an index creates the attribute (largest index + 1 rows, or the rows
  declared by ``declare_rows``), rows never written zeros, each member keeping its own
  rows (read back whole from every rank); partitions put in any order into declared
  rows; a negative index on one rank only (no declaration): the same error everywhere,
  nothing created; a declaration that differs between ranks: refused everywhere;
- ``update_tensor`` with another layout replaces the attribute (read back from every
  rank); refused input (strings, row shapes that differ between ranks, rows other than
  declared), a failed allocation of the new rows and an enclosing transaction failing
  later leave the held attribute as it was (reopened from its annotation too); a
  committing enclosing transaction removes the old rows at its end; ``remove_tensor``
  inside a transaction that fails later: the attribute is back;
- every put that takes the whole tensor on every rank (new attribute, with an index,
  the whole held one, ``update_tensor``) refuses values or indices that differ between
  ranks (the same shapes and dtypes), naming the fingerprints, nothing changed.
"""
import os

import numpy as np
import torch
from mpi4py import MPI

from _harness import (check, expect_error, run_main, same_array, shared_tmpdir, every_width,
                      widths_from)
from _graphs import two_type_graph

import ddstore  # noqa: E402
from ddstore import DDStoreIndexError  # noqa: E402
from ddstore import pyg as dpyg  # noqa: E402
from ddstore.placement import member_offsets  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import NeighborLoader  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N = 37
READS = []  # the keys every SpyMemmap was indexed with, on this rank


class SpyMemmap(np.memmap):
    """np.memmap that records how it is indexed."""

    def __getitem__(self, key):
        READS.append(key)
        return super().__getitem__(key)


def memmap_x(store, tag, tmp):
    path = os.path.join(tmp, "x.bin")
    full = np.random.default_rng(4).standard_normal((N, 5)).astype(np.float32)
    if rank == 0 and not os.path.exists(path):
        full.tofile(path)
    comm.Barrier()
    x = SpyMemmap(path, dtype=np.float32, mode="r", shape=(N, 5))
    ei = torch.tensor([[i for i in range(N)], [(i * 7) % N for i in range(N)]])
    data = Data(x=x, edge_index=ei, edge_attr=torch.arange(N * 2.).view(N, 2))
    del READS[:]
    fs, gs = dpyg.from_pyg(store, data, name=f"mm{tag}")
    off = member_offsets(N, store.group_size)
    lo, hi = int(off[store.group_rank]), int(off[store.group_rank + 1])
    check(READS == [slice(lo, hi, None)],
          f"{tag}: memmap x read as {READS}, expected this member's rows {lo}:{hi} once")
    check(same_array(fs.get_tensor(None, "x", None), full), f"{tag}: memmap x whole")
    idx = torch.from_numpy(np.random.default_rng(rank).integers(-N, N, 50))
    check(same_array(fs.get_tensor(None, "x", idx), full[idx.numpy()]),
          f"{tag}: memmap x rows")
    check(same_array(fs.get_tensor(None, "x", -1), full[-1]), f"{tag}: x[-1] is [F]")


def bfloat16(store, tag):
    g = torch.Generator().manual_seed(9)
    b = torch.randn(N, 3, generator=g).bfloat16()
    b[0, 0], b[1, 0] = float("nan"), float("-inf")
    fs = dpyg.FeatureStore(store, f"bf{tag}")
    fs.put_tensor(b, "n", "b", None)
    check(same_array(fs.get_tensor("n", "b", None), b), f"{tag}: bfloat16 whole")
    idx = torch.tensor([N - 1, 0, size, N // 2, -2])
    check(same_array(fs.get_tensor("n", "b", idx), b[idx]), f"{tag}: bfloat16 rows")
    rows = torch.tensor([N - 1, 1, N // 2])
    vals = torch.tensor([[1.5, -2.0, 0.25]]).bfloat16()
    fs.put_tensor(vals, "n", "b", rows)
    b[rows] = vals
    check(same_array(fs.get_tensor("n", "b", None), b), f"{tag}: bfloat16 after row put")
    fs.remove_tensor("n", "b", None)


def row_puts(store, tag):
    x = torch.arange(N * 2, dtype=torch.int64).view(N, 2)
    fs = dpyg.FeatureStore(store, f"rp{tag}")
    fs.put_tensor(x, ["a", "r", "b"], "x", None)  # an edge type given as a list
    idx = torch.tensor([0, N - 1, -3, N // 2, 1])
    vals = -torch.arange(10).view(5, 2)
    fs.put_tensor(vals, ("a", "r", "b"), "x", idx)
    x[idx] = vals
    check(same_array(fs.get_tensor(("a", "r", "b"), "x", None), x), f"{tag}: row put")
    fs.put_tensor(torch.tensor(7), ("a", "r", "b"), "x", slice(N - 4, None))
    x[N - 4:] = 7
    check(same_array(fs.get_tensor(["a", "r", "b"], "x", None), x), f"{tag}: slice put")
    before = store.variables()
    bad = torch.tensor([0, N if rank == size - 1 else 1])
    expect_error(DDStoreIndexError, [f"index {N} (position 1) out of range"],
                 fs.put_tensor, torch.zeros(2, 2, dtype=torch.int64), ("a", "r", "b"), "x",
                 bad, agree=True, store=store, what=f"{tag}: bad index on one rank")
    check(store.variables() == before and
          same_array(fs.get_tensor(("a", "r", "b"), "x", None), x),
          f"{tag}: a refused row put changed something")
    removed = fs.remove_tensor("zz", "x", None)
    check(removed is False, f"{tag}: remove_tensor of a missing attribute gave {removed}")
    check(fs.remove_tensor(("a", "r", "b"), "x", None) is True, f"{tag}: remove")


def hetero(store, tag):
    g = torch.Generator().manual_seed(13)
    et = ("a", "to", "b")
    h = two_type_graph(g, 19, 11, 400, et, features=3)
    h[et].w = torch.randn(400, 2, generator=g)
    h[et].edge_label_index = torch.stack([torch.randint(0, 19, (6,), generator=g),
                                          torch.randint(0, 11, (6,), generator=g)])
    h[et].edge_label = torch.ones(6)
    fs, gs = dpyg.from_hetero(store, h, name=f"h{tag}")
    names = sorted(a.attr_name for a in fs.edge_tensor_attrs())
    check(names == ["w"], f"{tag}: edge attributes {names}, expected ['w']")
    s = dpyg.NeighborSampler(gs, [-1], seed=3)
    loader = NeighborLoader((fs, gs), num_neighbors=[-1],
                            input_nodes=("b", torch.arange(11)), batch_size=11,
                            neighbor_sampler=s, transform=dpyg.edge_features(fs))
    b = next(iter(loader))
    check(b[et].e_id.numel() == 400 and same_array(b[et].w, h[et].w[b[et].e_id]),
          f"{tag}: hetero edge_features")


def first_put_with_index(store, tag):
    fs = dpyg.FeatureStore(store, f"fi{tag}")
    x = torch.arange(3 * N, dtype=torch.float32).view(N, 3)
    idx = torch.tensor([N - 1, 0, N // 2, 3])
    fs.put_tensor(x[idx], "n", "x", idx)  # every rank the same; each keeps its rows
    want = torch.zeros(N, 3)
    want[idx] = x[idx]
    check(fs.num_rows("n", "x") == N and same_array(fs.get_tensor("n", "x", None), want),
          f"{tag}: first put with an index")
    off = member_offsets(N, store.group_size)
    mine = store.local_view(fs._attrs[("n", "x")].var)
    g = store.group_rank
    check(same_array(torch.from_numpy(np.array(mine)), want[int(off[g]):int(off[g + 1])]),
          f"{tag}: this member's rows of the first put with an index")
    del mine
    fs.declare_rows({"p": N})
    parts = [torch.arange(a, min(a + 10, N)) for a in range(0, N, 10)]
    for part in reversed(parts[1:]):  # partitions, the first one never put
        fs.put_tensor(x[part] + 1, "p", "x", part)
    want = x + 1
    want[parts[0]] = 0
    check(same_array(fs.get_tensor("p", "x", None), want), f"{tag}: declared partitions")
    before = store.variables()
    bad = torch.tensor([0, -1 if rank == size - 1 else 1])
    expect_error(DDStoreIndexError, ["index -1 (position 1) counts from the end"],
                 fs.put_tensor, torch.ones(2, 3), "m", "x", bad, agree=True, store=store,
                 what=f"{tag}: negative first index on one rank")
    if size > 1:
        expect_error(ddstore.DDStoreValueError, ["counts"], fs.declare_rows,
                     {"m": 5 + rank}, agree=True, store=store,
                     what=f"{tag}: declarations differ")
    check(store.variables() == before and fs.get_tensor_size("m", "x") is None,
          f"{tag}: a refused first put created something")
    fs.put_tensor(torch.ones(1, 3), "m", "x", [0])  # 'm' was not declared: 1 row
    check(fs.num_rows("m", "x") == 1, f"{tag}: a refused declaration was kept")


def update_other_layout(store, tag):
    """``update_tensor`` with another layout replaces the attribute; refused input
    (a dtype that cannot be stored, row shapes that differ between ranks, rows other
    than declared) leaves the held one as it was, on every rank."""
    fs = dpyg.FeatureStore(store, f"u{tag}")
    x = torch.arange(N * 2, dtype=torch.float32).view(N, 2)
    fs.declare_rows({"d": N})
    for group in ("n", "d"):
        fs.put_tensor(x, group, "x", None)
    held = store.variables()

    def kept(what):
        check(store.variables() == held and all(
            same_array(fs.get_tensor(g, "x", None), x) for g in ("n", "d")),
            f"{tag}: {what}: the held attribute changed")
    expect_error(ddstore.DDStoreValueError, ["cannot be stored"], fs.update_tensor,
                 np.array(["a", "b"]), group_name="n", attr_name="x", agree=True,
                 what=f"{tag}: update_tensor with strings")
    kept("strings")
    if size > 1:
        other = torch.ones(N, 3 if rank == size - 1 else 4, dtype=torch.float64)
        expect_error(ddstore.DDStoreValueError, ["differs between ranks", f"float64 [{N}, 4]",
                                                 f"float64 [{N}, 3]"], fs.update_tensor,
                     other,
                     group_name="n", attr_name="x", agree=True,
                     what=f"{tag}: update_tensor, row shapes differing")
        kept("row shapes differing between ranks")
    expect_error(ddstore.DDStoreValueError, ["declare"], fs.update_tensor,
                 torch.ones(N + 1, 2, dtype=torch.float64), group_name="d",
                 attr_name="x", agree=True, what=f"{tag}: update_tensor, rows not declared")
    kept("rows not declared")
    if size > 1:  # values that differ between ranks (same shapes): refused, not mixed
        mixed = x + (rank == size - 1)
        for what, call, args in (
                ("put_tensor of a new attribute", fs.put_tensor, (mixed, "n", "y", None)),
                ("put_tensor with an index", fs.put_tensor, (mixed[:3], "n", "x", [0, 1, 2])),
                ("put_tensor of the whole held attribute", fs.put_tensor,
                 (mixed, "n", "x", None)),
                ("update_tensor with another layout", fs.update_tensor,
                 (mixed.double(), "n", "x", None)),
                ("an index that differs", fs.put_tensor,
                 (x[:2], "n", "x", [rank, rank + 1]))):
            expect_error(ddstore.DDStoreValueError, ["differs between ranks", "fingerprint"],
                         call, *args, agree=True, what=f"{tag}: {what}")
            kept(f"values differing between ranks: {what}")
    new = torch.arange(N * 3, dtype=torch.float64).view(N, 3)
    # the new rows' allocation fails (agreed, as the core's out-of-memory is) after the
    # held ones were set aside; then an enclosing transaction fails after the update
    plain_add = store.add

    def add_failing(name, rows):
        with store.collective(None):
            if rank == size - 1:
                raise ddstore.DDStoreMemoryError("injected: out of memory")
    store.add = add_failing
    try:
        expect_error(ddstore.DDStoreMemoryError, ["injected: out of memory"],
                     fs.update_tensor, new, group_name="n", attr_name="x", agree=True,
                     what=f"{tag}: update_tensor, allocation failing")
    finally:
        store.add = plain_add
    kept("the allocation of the new rows failed")

    def then_fail(call, check_inside, what):
        """``call()`` inside a transaction that fails later (on the last rank): the
        held attribute is back as it was."""
        def run():
            with store.transaction("enclosing"):
                call()
                check(check_inside(), f"{tag}: inside the transaction: {what}")
                with store.collective(None):
                    if rank == size - 1:
                        raise ddstore.DDStoreValueError("later")
        expect_error(ddstore.DDStoreValueError, ["later"], run, agree=True,
                     what=f"{tag}: a transaction failing after {what}")
        kept(f"an enclosing transaction failed after {what}")
    then_fail(lambda: fs.update_tensor(new, group_name="n", attr_name="x"),
              lambda: same_array(fs.get_tensor("n", "x", None), new) and
              len(store.variables()) == len(held) + 1, "update_tensor")
    reopened = dpyg.FeatureStore.open(store, f"u{tag}")
    check(same_array(reopened.get_tensor("n", "x", None), x),
          f"{tag}: the annotation after the rollback does not reopen the held attribute")
    then_fail(lambda: fs.remove_tensor(group_name="n", attr_name="x"),
              lambda: fs.get_tensor_size("n", "x") is None, "remove_tensor")
    with store.transaction("committing"):
        fs.update_tensor(new, group_name="d", attr_name="x")
    check(store.variables() == held, f"{tag}: the replaced rows outlived the commit")
    check(same_array(fs.get_tensor("d", "x", None), new) and
          same_array(fs.get_tensor("d", "x", [N - 1, 0]), new[[N - 1, 0]]),
          f"{tag}: update_tensor with another layout")


def main(widths=None):
    if widths is None:
        widths = every_width()
    with shared_tmpdir() as tmp:
        for width in widths:
            for transport in ("auto", "rma"):
                tag = f"w{width}-{transport}"
                with ddstore.DDStore(comm, width=width, transport=transport) as store:
                    memmap_x(store, tag, tmp)
                    bfloat16(store, tag)
                    row_puts(store, tag)
                    hetero(store, tag)
                    first_put_with_index(store, tag)
                    update_other_layout(store, tag)


if __name__ == "__main__":
    import sys
    run_main(main, widths_from(sys.argv[1:]))
