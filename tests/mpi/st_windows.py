"""MPI program: index-batched windows over replicated and partitioned stores.

Run under mpiexec (inside ``timeout``) with 2, 3 or 4 ranks: ``st_windows.py <tmpdir>``.  For every width that
divides the rank count, both transports and both straddling strategies (halo /
multi-owner read), every window of every split read by every rank is compared element for
element with the materialised sliding-window pipeline and with a local (width 1) dataset;
statistics with brute force; DistributedSampler and BatchShuffleSampler coverage; NaN
errors raised collectively; HDF5 read per rank.  Exits non-zero on any failure.
"""
import os
import sys
import time

T0 = time.time()

import numpy as np
from mpi4py import MPI

from _harness import check, expect_error, run_main, every_width

import torch

torch.set_num_threads(1)

import ddstore  # noqa: E402
from ddstore import DDStoreValueError  # noqa: E402
from ddstore import spatiotemporal as st  # noqa: E402
from ddstore.testing.windows import (brute_force_stats, materialize_windows,  # noqa
                                              standardize_windows)

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TMP = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
CHICKENPOX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                          "chickenpox.json")


def equal(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    ok = a.shape == b.shape and np.array_equal(a, b)
    if not ok and a.shape == b.shape:
        bad = np.argwhere(a != b)
        what += f" (first mismatch at {bad[0].tolist()}: {a[tuple(bad[0])]} vs " \
                f"{b[tuple(bad[0])]}, {len(bad)} in all)"
    elif not ok:
        what += f" (shapes {a.shape} vs {b.shape})"
    check(ok, what)


def cases():
    rng = np.random.default_rng(7)  # same on every rank
    out = [("rand_h3", (rng.standard_normal((80, 4, 2)) * [1, 5] + [2, -3]), 3, False, False),
           ("rand_h7_pernode", rng.standard_normal((53, 3, 1)) * 2 + 1, 7, True, True),
           ("rand_h1", rng.standard_normal((40, 2, 3)), 1, False, False),
           # fewer steps than ranks at n=4: a member holds nothing
           ("tiny", rng.standard_normal((3, 2, 1)), 1, True, False)]
    if os.path.exists(CHICKENPOX):
        out.append(("chickenpox", st.load_pgt_json(CHICKENPOX).to_numpy(), 4, False, False))
    return out


CASES = cases()
_local_store = ddstore.DDStore(MPI.COMM_SELF, width=1)
_local = {}


def split_of(raw):
    return (1.0, 0.0, 0.0) if raw.shape[0] < 10 else (0.7, 0.1, 0.2)


def local_windows(key, raw, h, overlap, per_node, standardize):
    """Windows of a replicated width-1 dataset on this rank alone (the local mode)."""
    if key not in _local:
        ds = st.WindowDataset(_local_store, f"local_{key}", raw, h, overlap=overlap,
                              per_node=per_node, standardize=standardize,
                              split=split_of(raw))
        _local[key] = ds.get_batch(np.arange(len(ds)))
    return _local[key]


def run_dataset(store, tag, name, raw, h, overlap, per_node, standardize, halo):
    label = f"{tag} {name} std={standardize}"
    ds = st.WindowDataset(store, f"{name}_{standardize}", raw, h, overlap=overlap,
                          per_node=per_node, standardize=standardize, halo=halo,
                          split=split_of(raw))
    w = store.group_size
    lay = ds.layout
    g = store.group_rank
    T = raw.shape[0]
    mine = lay["member"] == g
    # the pieces cover the time axis once, in order
    check(lay["lo"][0] == 0 and lay["hi"][-1] == T and
          np.array_equal(lay["lo"][1:], lay["hi"][:-1]), f"{label}: pieces cover [0, T)")
    # memory: the rows this member stores are exactly its pieces' rows
    lo_r, hi_r = store.local_rows(ds.name)
    check(hi_r - lo_r == int(lay["stored"][mine].sum()) == int(lay["member_stored"][g]),
          f"{label}: local rows")
    if halo and w > 1:
        # every window of every split is owned by one member, which stores all its steps,
        # and each split's windows are spread evenly over the members
        for split_name, (a, b) in ds.split_bounds.items():
            starts = np.arange(a, b)
            owners = ds.owner_of(starts)
            piece = np.searchsorted(lay["hi"], starts, side="right")
            check(np.all(starts + 2 * h <= lay["lo"][piece] + lay["stored"][piece]),
                  f"{label}: {split_name} windows inside their owner's rows")
            counts = np.bincount(owners, minlength=w)
            check(counts.max() - counts.min() <= 1,
                  f"{label}: {split_name} windows per member {counts.tolist()}")
    else:
        check(int(lay["member_stored"][g]) == int(lay["hi"][mine].sum() -
                                                  lay["lo"][mine].sum()),
              f"{label}: no halo stored")
    if standardize:
        a, b = ds.split_bounds["train"]
        xw, _ = materialize_windows(raw.astype(np.float64), h, np.arange(a, b))
        mean, std = brute_force_stats(xw, per_node=per_node)
        check(np.allclose(ds.mean, mean, rtol=1e-12, atol=1e-13)
              and np.allclose(ds.std, std, rtol=1e-12), f"{label}: stats vs brute force")
        # every rank of the group computed the same statistics
        allmeans = comm.allgather(ds.mean)
        mates = allmeans[store.group * w:(store.group + 1) * w]
        check(all(np.array_equal(m, ds.mean) for m in mates), f"{label}: stats agree")
    X, Y = materialize_windows(raw.astype(np.float64), h)
    if standardize:
        X = standardize_windows(X, ds.mean, ds.std, dtype=np.float32)
        Y = standardize_windows(Y, ds.mean, ds.std, dtype=np.float32)
    else:
        X, Y = X.astype(np.float32), Y.astype(np.float32)
    # every window, in a random order per rank, in batches of 13
    perm = np.random.default_rng(rank + 100).permutation(len(ds))
    xs, ys = [], []
    for i in range(0, len(perm), 13):
        xb, yb = ds.get_batch(perm[i:i + 13])
        xs.append(xb.numpy())
        ys.append(yb.numpy())
    equal(np.concatenate(xs), X[perm], f"{label}: all x windows")
    equal(np.concatenate(ys), Y[perm], f"{label}: all y windows")
    # same as local (width 1) mode
    lx, ly = local_windows(f"{name}_{standardize}", raw, h, overlap, per_node, standardize)
    if standardize:
        check(np.allclose(np.concatenate(xs), lx.numpy()[perm], rtol=1e-5, atol=1e-6)
              and np.allclose(np.concatenate(ys), ly.numpy()[perm], rtol=1e-5, atol=1e-6),
              f"{label}: equals local mode")
    else:
        equal(np.concatenate(xs), lx.numpy()[perm], f"{label}: x equals local mode")
        equal(np.concatenate(ys), ly.numpy()[perm], f"{label}: y equals local mode")
    # straddling windows one by one, through each split
    straddle = [s for b in lay["hi"][:-1] for s in range(max(0, b - 2 * h + 1), b)
                if s < len(ds)]
    for split in ds.splits():
        for s in straddle:
            if split.start <= s < split.stop:
                x, y = split[s - split.start]
                equal(x.numpy(), X[s], f"{label}: straddling x {s} via {split.split_name}")
                equal(y.numpy(), Y[s], f"{label}: straddling y {s}")
    return ds, X, Y


def sampler_checks(ds, X, label):
    train = ds.splits()[0]
    N = len(train)
    for epoch in (0, 1):
        smp = torch.utils.data.DistributedSampler(train, num_replicas=size, rank=rank,
                                                  shuffle=True, seed=3)
        smp.set_epoch(epoch)
        mine = list(smp)
        loader = torch.utils.data.DataLoader(train, batch_size=7, sampler=smp,
                                             collate_fn=st.batch_collate)
        got = torch.cat([xb for xb, _ in loader]).numpy()
        equal(got, X[train.start + np.array(mine)], f"{label}: DistributedSampler batches")
        everything = np.concatenate(comm.allgather(np.array(mine, dtype=np.int64)))
        counts = np.bincount(everything, minlength=N)
        total = -(-N // size) * size
        check(counts.min() >= 1 and len(everything) == total
              and int((counts - 1).sum()) == total - N,
              f"{label}: DistributedSampler epoch {epoch} covers every start once "
              f"(+{total - N} padding)")
    for local in (False, True):
        bs = st.BatchShuffleSampler(train, 8, shuffle=True, seed=5, local=local)
        bs.set_epoch(1)
        batches = list(bs)
        check(len(batches) == len(bs), f"{label}: batch sampler len")
        check(all(b == list(range(b[0], b[0] + len(b))) for b in batches),
              f"{label}: batches of consecutive starts")
        everything = comm.allgather(batches)
        check(len({len(b) for b in everything}) == 1, f"{label}: equal batch counts")
        flat = np.array([i for r in everything for b in r for i in b], dtype=np.int64)
        check(set(flat.tolist()) == set(range(N)), f"{label}: batch sampler covers all")
        if local and ds.halo:
            starts = train.start + np.array([i for b in batches for i in b], dtype=np.int64)
            frac = float(np.mean(ds.owner_of(starts) == ds.store.group_rank)) if len(
                starts) else 1.0
            if rank == 0:
                print(f"{label}: local batch sampler, {frac:.0%} of rank 0's windows local")
        dl = train.loader(8, sampler="batch", local=local)
        st.set_epoch(dl, 2)
        for idx, (xb, _) in zip(dl.batch_sampler, dl):
            equal(xb.numpy(), X[train.start + np.array(idx)], f"{label}: batch loader")


def error_checks(store, tag):
    raw = np.random.default_rng(1).standard_normal((60, 3, 2))
    bad = raw.copy()
    bad[57, 1, 0] = np.nan  # owned by the last member
    bad[58, 2, 1] = -np.inf
    expect_error(DDStoreValueError,
                 ["2 non-finite values", "first at step 57, node 1, feature 0"],
                 lambda: st.WindowDataset(store, "nan", bad, 3), what=f"{tag}: NaN")
    # a NaN in the copy of the last rank only (e.g. its own file): with width < size
    # the groups read different copies; every rank must raise, not only that group
    # (a reader of its own: an array's copies that differ are refused by their
    # fingerprints first, naming the series' values)
    mine = bad if rank == size - 1 else raw
    reader = st.Series(mine.shape, mine.dtype, lambda a, b: mine[a:b], source="a reader")
    expect_error(DDStoreValueError, "'nan_one_copy' (from a reader) has 2 non-finite values",
                 lambda: st.WindowDataset(store, "nan_one_copy", reader, 3),
                 what=f"{tag}: NaN in one rank's copy (rank {rank})")
    check("nan_one_copy" not in store.variables(), f"{tag}: half-built variable left")
    expect_error(DDStoreValueError, ["series 'data' differs between ranks",
                                     "; every rank must pass the same series: make it "
                                     "alike on every rank (the same seed for a random "
                                     "series, the same file)"],
                 lambda: st.WindowDataset(store, "nan_one_copy", mine, 3),
                 what=f"{tag}: NaN in one rank's array (rank {rank})", agree=True,
                 store=store)
    if store.group_size > 1:
        expect_error(DDStoreValueError, "width must be 1",
                     lambda: st.WindowDataset(store, "dev", raw, 3, resident="device"),
                     what=f"{tag}: resident=device with width>1")
    # ranks disagree on the horizon: every rank raises, nobody hangs
    expect_error(DDStoreValueError, "is collective",
                 lambda: st.WindowDataset(store, "mismatch", raw, 3 if rank == 0 else 2),
                 what=f"{tag}: horizon mismatch")
    # invalid on rank 0 only: every rank raises rank 0's error, naming rank 0 (agreed)
    expect_error(DDStoreValueError, "rank 0: horizon=0 out of range",
                 lambda: st.WindowDataset(store, "bad_rank0", raw, 0 if rank == 0 else 3),
                 what=f"{tag}: horizon 0 on rank 0 only", agree=True)
    ds = st.WindowDataset(store, "after_errors", raw, 3, fill=None)
    X, _ = materialize_windows(raw, 3)
    X = standardize_windows(X, ds.mean, ds.std, dtype=np.float32)
    xb, _ = ds.get_batch(np.arange(len(ds)))
    equal(xb.numpy(), X, f"{tag}: store usable after errors")
    # samplers that differ are named alone (not with the other sampler's settings)
    # (in a later step of the call: named with the call, as a setting of its first step)
    msg = expect_error(DDStoreValueError, ["WindowDataset.loader(", "sampler differs "
                                           "between ranks"],
                       lambda: ds.splits()[0].loader(
                           4, sampler="global" if rank == 0 else "batch"),
                       what=f"{tag}: samplers differ", agree=True, store=store)
    check(msg is None or "local" not in msg, f"{tag}: samplers differ: {msg}")
    expect_error(DDStoreValueError, "local differs between ranks",
                 lambda: ds.splits()[0].loader(4, sampler="batch",
                                               local=rank == 0),
                 what=f"{tag}: local differs", agree=True)
    # free(): the series is removed, reads are refused naming it, a second free and a
    # free of a dataset whose name was since rebuilt touch nothing of the new one
    ds.free()
    check("after_errors" not in store.variables(), f"{tag}: free removes the series")
    expect_error(ddstore.DDStoreStateError, ["'after_errors' was freed", "free()"],
                 lambda: ds.get_batch([0, 1]), what=f"{tag}: read after free")
    expect_error(ddstore.DDStoreStateError, "was freed", lambda: ds[0],
                 what=f"{tag}: item after free")
    again = st.WindowDataset(store, "after_errors", raw[::-1].copy(), 3, standardize=False)
    ds.free()
    check("after_errors" in store.variables(), f"{tag}: a stale free left the new one")
    Xr, _ = materialize_windows(raw[::-1], 3)
    equal(again.get_batch(np.arange(len(again)))[0].numpy(), Xr.astype(np.float32),
          f"{tag}: the rebuilt dataset after a stale free")
    # a free inside a transaction that rolls back: the series and the dataset come back
    try:
        with store.transaction("free, then a failure"):
            again.free()
            with store.collective("a later step"):
                raise ValueError("a later failure")
    except DDStoreValueError:
        pass
    equal(again.get_batch(np.arange(len(again)))[0].numpy(), Xr.astype(np.float32),
          f"{tag}: a free rolled back")
    again.free()
    again.free()
    check("after_errors" not in store.variables(), f"{tag}: free twice")


def h5_checks(store, tag):
    path = os.path.join(TMP, "st_windows.h5")
    rng = np.random.default_rng(9)
    data = rng.random((150, 5)) * 60
    ts = np.datetime64("2018-01-01") + np.arange(150) * np.timedelta64(5, "m")
    if rank == 0 and not os.path.exists(path):
        st.write_pems_h5(path, data, ts)
    comm.Barrier()
    series = st.load_pems_h5(path)
    ds = st.WindowDataset(store, "h5", series, 6, time_features=("tod", "dow"))
    series.close()
    # the file is float64 and is read at that precision (statistics included)
    X, Y = materialize_windows(data[:, :, None], 6)
    X = standardize_windows(X, ds.mean, ds.std, dtype=np.float32)
    xb, yb = ds.get_batch(np.arange(len(ds)))
    equal(xb[..., :1].numpy(), X, f"{tag}: HDF5 windows")
    tf = st.time_feature_array(ts, ("tod", "dow"))
    equal(xb[:, :, 2, 1:].numpy(), np.stack([tf[s:s + 6] for s in range(len(ds))]),
          f"{tag}: HDF5 time features")


def main():
    widths = every_width()
    for width in widths:
        for transport in ("rma", "auto"):
            for halo in ((True, False) if width > 1 else (True,)):
                tag = f"[n={size} width={width} {transport} halo={halo}]"
                with ddstore.DDStore(comm, width=width, transport=transport) as store:
                    for i, (name, raw, h, overlap, per_node) in enumerate(CASES):
                        for standardize in (True, False):
                            ds, X, Y = run_dataset(store, tag, name, raw, h, overlap,
                                                   per_node, standardize, halo)
                            if i == 0 and not standardize and transport == "auto":
                                sampler_checks(ds, X, tag)
                    if transport == "auto":
                        error_checks(store, tag)
                        h5_checks(store, tag)
                if rank == 0:
                    print(f"{tag} done {time.time() - T0:.1f}s", flush=True)
    _local_store.free()


run_main(main)
