"""Data-parallel training of a recurrent graph model on index-batched windows.

::

    mpiexec -n 2 python examples/traffic_index_batching.py                 # synthetic
    mpiexec -n 2 python examples/traffic_index_batching.py --width 2 --sampler batch
    mpiexec -n 2 python examples/traffic_index_batching.py --data chickenpox
    mpiexec -n 2 python examples/traffic_index_batching.py --data metr-la.h5 --horizon 12

The series lives once in a :class:`ddstore.DDStore` (``--width 1``: every rank holds it,
``--width 2``: striped over the two ranks); windows ``x = series[s:s+h]``,
``y = series[s+h:s+2h]`` are cut per mini-batch by
:class:`ddstore.spatiotemporal.WindowDataset`.  The model is a TGCN/DCRNN-style
sequence-to-sequence network: a graph GRU cell whose gates are PyG ``GCNConv`` layers
encodes the ``h`` input steps, a linear head predicts the ``h`` output steps of feature 0.
Gradients are averaged with ``DistributedDataParallel`` over gloo; ranks come from MPI.

Data: by default a synthetic PeMS-like series (one week of 5-minute steps on 48
sensors, built in); ``--data chickenpox`` for the real Hungarian chickenpox series kept in
``tests/data``; or ``--data PATH`` (a PyTorch Geometric Temporal JSON, a PeMS/METR-LA
``.h5``, or a ``.npy`` ``[T, nodes(, features)]``).  Prints the training loss and the
validation MAE (original units) per epoch, test MAE, and peak memory per rank (rank 0).

Checkpoint and restart: ``--checkpoint DIR`` saves, after each epoch, the store once
(``DIR/store``: the standardised series does not change) and the training state
(``DIR/epoch-<k>.pt``: model, optimizer, torch RNG; ``torch.save`` by rank 0);
``--resume DIR`` restores the store (any width), reopens the series by name
(``WindowDataset.open``: no data file is read) and the last state saved, and goes on
from the next epoch: the same losses and weights, bit for bit, as the run that never
stopped, on the same rank count (the gradients summed in rank order,
:func:`ddstore.distributed.rank_order_mean`; ``--sampler batch``: and the same width,
whose blocks follow the members); rank 0
says so when a run is resumed on another layout.
"""
import os
import resource
import sys
import time

import numpy as np
from mpi4py import MPI

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

import ddstore  # noqa: E402
from ddstore import spatiotemporal as st  # noqa: E402
from ddstore.cli import (agreed_call, at_least, check_resume,  # noqa: E402
                         check_width, claim_checkpoint, nothing_to_train,
                         other_settings, output_dir, plural, run_program, saved_epochs)
from ddstore.distributed import init_torch_distributed, rank_order_mean  # noqa: E402
from graph_gru import GraphGRUCell, bundled, check_horizon, example_parser, \
    split_mae, train_epoch  # noqa: E402 (examples/graph_gru.py)


def parse_args(argv=None):
    p = example_parser(__doc__, "'chickenpox' (bundled), or a JSON (PGT), .h5 (PeMS/METR-LA)"
                                " or .npy series; default: synthetic", batch_size=16)
    p.add_argument("--horizon", type=at_least(1), default=None,
                   help="window length h (default 4 for weekly data, 12 for 5-minute)")
    p.add_argument("--sampler", choices=["global", "batch"], default="global",
                   help="global: DistributedSampler; batch: batch-level shuffle")
    p.add_argument("--overlap", action="store_true", help="PGT's overlapping splits")
    p.add_argument("--checkpoint", type=output_dir, metavar="DIR", default=None,
                   help="after each epoch save the store (once) and the training state")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="restore the store and the last training state from DIR and "
                        "continue from the next epoch (no data file is read: --data may "
                        "be left out)")
    args = p.parse_args(argv)
    check_width(p, args.width)
    if args.data not in (None, "chickenpox") and not args.resume:  # (read by every rank)
        if not args.data.endswith((".json", ".h5", ".hdf5", ".npy")):
            p.error(f"--data {args.data}: expected a .json, .h5 or .npy file, or "
                    f"chickenpox (the bundled data set)")
        if not os.path.isfile(args.data):
            p.error(f"--data {args.data}: " + ("not a file" if os.path.exists(args.data)
                                                else "no such file"))
    return args


def synthetic_series(steps=2016, sensors=48, seed=0):
    """A PeMS-like week at 5-minute steps on a ring road with shortcuts."""
    from ddstore.spatiotemporal.synthetic import synthetic_block
    speed = synthetic_block(0, steps, sensors, 1, seed)
    ring = [(i, (i + 1) % sensors) for i in range(sensors)]
    rng = np.random.default_rng(seed)
    extra = [tuple(rng.choice(sensors, 2, replace=False)) for _ in range(sensors // 4)]
    edges = np.array(ring + extra).T
    edges = np.concatenate([edges, edges[::-1]], axis=1)
    ts = np.datetime64("2017-01-02") + np.arange(steps) * np.timedelta64(5, "m")
    return st.from_arrays(speed, edges, timestamps=ts), "synthetic PeMS-like"


def load_series(args):
    """The series, its label and the horizon (``--horizon``, its default set by the
    data: 4 for weekly, 12 for 5-minute steps), checked against the series' length."""
    series, label = read_series(args)
    horizon = args.horizon or (4 if label.endswith(".json") else 12)
    check_horizon(horizon, series.num_steps, label, overlap=args.overlap)
    return series, label, horizon


def read_series(args):
    path = args.data
    if path is None:
        return synthetic_series(seed=args.seed)
    if path == "chickenpox":
        path = bundled("chickenpox.json")
    if path.endswith(".json"):
        series = st.load_pgt_json(path)
        if isinstance(series, st.DynamicSeries):  # (its edges change per step)
            raise SystemExit(f"--data {path}: a dynamic graph (edges per step): see "
                             f"examples/dynamic_graph_forecast.py")
        return series, os.path.basename(path)
    if path.endswith((".h5", ".hdf5")):
        return st.load_pems_h5(path), os.path.basename(path)
    if path.endswith(".npy"):
        return st.load_npy(path), os.path.basename(path)  # (checked, read by block)
    raise SystemExit(f"--data {path}: expected .json, .h5 or .npy")  # (parse_args says)


class Seq2Seq(nn.Module):
    """Encode ``h`` steps with the graph GRU, predict ``h`` steps of one feature."""

    def __init__(self, in_channels, hidden, horizon):
        super().__init__()
        self.hidden, self.horizon = hidden, horizon
        self.cell = GraphGRUCell(in_channels, hidden)
        self.head = nn.Linear(hidden, horizon)

    def forward(self, x, edge_index, edge_weight):
        B, h, n, f = x.shape
        state = x.new_zeros(B * n, self.hidden)
        for t in range(h):
            state = self.cell(x[:, t].reshape(B * n, f), state, edge_index, edge_weight)
        return self.head(state).view(B, n, self.horizon).permute(0, 2, 1).unsqueeze(-1)


class BatchedGraph:
    """``edge_index`` of ``B`` copies of the graph (node ids offset by ``n``), cached."""

    def __init__(self, edge_index, edge_weight, num_nodes):
        self.ei, self.ew, self.n = edge_index, edge_weight, num_nodes
        self.cache = {}

    def __call__(self, B):
        if B not in self.cache:
            off = (torch.arange(B) * self.n).repeat_interleave(self.ei.shape[1])
            self.cache[B] = (self.ei.repeat(1, B) + off, self.ew.repeat(B))
        return self.cache[B]


def evaluate(model, split, graph, batch_size, comm):
    """MAE of feature 0 in original units over ``split``, the windows shared by rank.
    ``model=None``: the training-mean predictor (0 in standardised units), a baseline."""
    def predict(batch):
        x, y = batch
        pred = x.new_zeros(x.shape[:3] + (1,)) if model is None else \
            model(x, *graph(x.shape[0]))
        return (split.inverse_transform(pred, features=[0]),
                split.inverse_transform(y[..., :1], features=[0]))
    return split_mae(split, predict, batch_size, comm, model)


# the settings a checkpoint keeps and a resumed run must repeat (the model's shape, the
# optimizer's step, the batches and the data): the others (--epochs, --width) may change
STATE_KEYS = ("data", "horizon", "overlap", "hidden", "lr", "batch_size", "sampler", "seed")


def data_key(path):
    """``--data`` as a checkpoint keeps it: a file by its resolved path (the same file
    named from another directory is the same setting), else as given."""
    return path if path in (None, "chickenpox") else os.path.realpath(path)


def load_state(args):
    """The training state of the last epoch saved in directory ``args.resume`` (read
    with ``weights_only=True``: tensors and Python values, so a checkpoint runs no
    code); refused when it was saved with other settings (:data:`STATE_KEYS`)."""
    resume = args.resume
    saved = saved_epochs(resume)  # (checked at the start of main: check_resume)
    if not saved:  # (removed since)
        raise SystemExit(f"--resume {resume}: no epoch-<k>.pt in it")
    name = f"epoch-{saved[-1]}.pt"
    try:
        state = torch.load(os.path.join(resume, name), weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- unpickling raises many types
        raise SystemExit(f"--resume {resume}: {name} cannot be read as this example's "
                         f"training state ({type(exc).__name__}: {str(exc)[:200]})") \
            from None
    if not isinstance(state, dict) or not {"label", "model", "epoch"} <= set(state):
        raise SystemExit(f"--resume {resume}: {name} was not written by this example's "
                         f"--checkpoint (another example's checkpoint?)")
    given = state.get("args", {})
    if args.data is None or data_key(args.data) == data_key(given.get("data")):
        args.data = given.get("data")  # (not read on resume: may be left out)
    if args.horizon is None:  # (the saved one; one given must equal it)
        args.horizon = given.get("horizon")
    diff = other_settings(resume, given, args)
    if diff:  # (they were taken from the checkpoint, or ignored, without a word)
        raise SystemExit(diff)
    return state


def main():
    t_start = time.time()
    args = parse_args()
    comm = MPI.COMM_WORLD
    check_resume(comm, args.resume)  # (each rank's files, agreed: a refusal ends all)
    claim_checkpoint(comm, args.checkpoint, args.resume)  # (a refusal ends every rank)
    torch.manual_seed(args.seed)
    state = None
    if args.resume:  # the series from the checkpoint: no data file is read
        # a refusal on any rank: one line from rank 0, every rank ends
        state = agreed_call(comm, load_state, args)
        label = state["label"]
        store = ddstore.DDStore.restore(os.path.join(args.resume, "store"), comm,
                                        width=args.width)
        ds = st.WindowDataset.open(store, "series")
        horizon = ds.horizon
    else:
        # each rank opens the file itself: a refusal is said once, by rank 0
        series, label, horizon = agreed_call(comm, load_series, args)
        args.horizon = horizon  # (the one trained, kept by a checkpoint: not "unset")
        time_features = ("tod",) if series.timestamps is not None else None
        store = ddstore.DDStore(comm, width=args.width)
        ds = st.WindowDataset(store, "series", series, horizon, overlap=args.overlap,
                              time_features=time_features)
    train, val, test = ds.splits()
    loader = train.loader(args.batch_size, sampler=args.sampler, seed=args.seed)
    graph = BatchedGraph(ds.edge_index, ds.edge_weight, ds.num_nodes)
    init_torch_distributed(comm, backend="gloo")
    model = nn.parallel.DistributedDataParallel(
        Seq2Seq(ds.num_features, args.hidden, horizon))
    model.register_comm_hook(None, rank_order_mean)  # resumed runs: the same bits
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.L1Loss()
    first, stored = 0, False
    if state is not None:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        first = state["epoch"] + 1
    if comm.rank == 0:
        print(f"{label}: T={ds.num_steps}, nodes={ds.num_nodes}, features={ds.num_features}"
              f", horizon={horizon}; windows train/val/test = {len(train)}/{len(val)}/"
              f"{len(test)}; {plural(comm.size, 'rank')}, width {store.width} "
              f"({'replicated' if store.width == 1 else 'partitioned'}), sampler "
              f"{args.sampler}, {len(loader)} batches of {args.batch_size} per rank",
              flush=True)
    baseline = evaluate(None, val, graph, 64, comm)
    if comm.rank == 0:
        print(f"val MAE of the training-mean predictor: {baseline:.4f}", flush=True)
        if state is not None:
            print(f"resumed from {args.resume} after epoch {state['epoch']}", flush=True)
            was = (state.get("ranks", comm.size), state.get("width", store.width))
            if was[0] != comm.size or (args.sampler == "batch" and was[1] != store.width):
                print(f"resuming a run of {was[0]} rank(s) at width {was[1]} on {comm.size} "
                      f"at width {store.width}: the mini-batches (and so the losses) are "
                      f"those of this layout", flush=True)
            idle = nothing_to_train(args.resume, state["epoch"], args.epochs,
                                    args.epochs - 1)
            if idle:
                print(idle, flush=True)
    for epoch in range(first, args.epochs):
        st.set_epoch(loader, epoch)
        t0 = time.time()
        train_mae = train_epoch(loader, lambda b: loss_fn(
            model(b[0], *graph(b[0].shape[0])), b[1][..., :1]), opt, comm)
        val_mae = evaluate(model, val, graph, 64, comm)
        if comm.rank == 0:
            print(f"epoch {epoch:3d}  train MAE (standardised) {train_mae:.4f}  val MAE "
                  f"{val_mae:.4f}  ({time.time() - t0:.2f}s)", flush=True)
        if args.checkpoint:
            if not stored:  # the series never changes: saved once
                store.save(os.path.join(args.checkpoint, "store"))
                stored = True
            if comm.rank == 0:
                name = os.path.join(args.checkpoint, f"epoch-{epoch}.pt")
                torch.save({"epoch": epoch, "label": label, "ranks": comm.size,
                            "width": store.width,
                            "args": {k: data_key(args.data) if k == "data" else
                                     getattr(args, k) for k in STATE_KEYS},
                            "model": model.module.state_dict(),
                            "optimizer": opt.state_dict(),
                            "torch_rng": torch.get_rng_state()}, name + ".tmp")
                os.replace(name + ".tmp", name)
            comm.Barrier()
    test_mae = evaluate(model, test, graph, 64, comm)
    peak = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    held = comm.gather(ds.local_bytes() / 2 ** 20)
    if comm.rank == 0:
        print(f"test MAE {test_mae:.4f} (original units); total {time.time() - t_start:.1f}s")
        for r, (p, b) in enumerate(zip(peak, held)):
            print(f"rank {r}: peak RSS {p:.0f} MiB, series held in the store {b:.3f} MiB")
    dist.destroy_process_group()
    store.free()
    return 0


if __name__ == "__main__":
    sys.exit(run_program(main))
