"""Data-parallel training of a recurrent GNN on a dynamic graph (Twitter tennis).

::

    mpiexec -n 2 python examples/dynamic_graph_forecast.py
    mpiexec -n 2 python examples/dynamic_graph_forecast.py --width 2 --epochs 40

Data: Twitter mentions among 1,000 accounts during Roland-Garros 2017, one graph per hour
(``tests/data/twitter_tennis_rg17.json``, PyTorch Geometric Temporal): each step has its
own edges (who mentioned whom, weighted by count), two node features and a node target
(mentions received).  Any PGT JSON with per-step graphs (``--data``, a file of your own:
e.g. PyTorch Geometric Temporal's ``england_covid.json``, downloaded from its dataset
repository; only Twitter tennis comes with this project) works the same way.

The node signals ``[T, nodes, features + target]`` are index-batched by
:class:`ddstore.dynamic.DynamicWindowDataset` (the target is ``log1p``'d and
kept as the last feature); the graph is kept in the same :class:`ddstore.DDStore` as
checkpoints plus per-step deltas (:class:`ddstore.dynamic.DynamicGraph`), and each
window brings the snapshots of its ``h`` input steps, batched block-diagonally.  The model
is a graph GRU (update/reset gates and candidate are PyG ``GCNConv`` layers) that applies
each step's own snapshot, then predicts the next step's target of every node as a change
from the last observed value.  Gradients are averaged with ``DistributedDataParallel``
over gloo; ranks come from MPI.  Prints the training loss and the validation MAE (in
``log1p`` units) per epoch next to the persistence baseline (next value = last value), the
test MAE, and the edge memory of deltas vs full snapshots.
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
from ddstore.cli import (agreed_call, at_least, check_width, plural,  # noqa: E402
                         run_program)
from ddstore.dynamic import DynamicWindowDataset  # noqa: E402
from ddstore.distributed import init_torch_distributed  # noqa: E402
from graph_gru import GraphGRUCell, bundled, check_horizon, example_parser, \
    split_mae, train_epoch  # noqa: E402 (examples/graph_gru.py)


def parse_args(argv=None):
    p = example_parser(__doc__, "a PGT JSON with per-step graphs (default: Twitter tennis, "
                                "bundled)", batch_size=8)
    p.add_argument("--horizon", type=at_least(1), default=4, help="input steps per window")
    p.add_argument("--checkpoint-every", type=at_least(1), default=None,
                   help="graph checkpoint interval (default: from the delta sizes)")
    args = p.parse_args(argv)
    check_width(p, args.width)
    if args.data is not None and not os.path.isfile(args.data):  # (read by every rank)
        p.error(f"--data {args.data}: " + ("not a file" if os.path.exists(args.data)
                                             else "no such file"))
    return args


def load(args):
    path = args.data or bundled("twitter_tennis_rg17.json")
    series = st.load_pgt_json(path)
    if not isinstance(series, st.DynamicSeries):
        raise SystemExit(f"{path}: not a dynamic graph (static graph: see "
                         f"examples/traffic_index_batching.py)")
    if series.target_feature is None:
        raise SystemExit(f"{path}: no node target 'y'")
    check_horizon(args.horizon, series.num_steps, os.path.basename(path))
    data = series.to_numpy().astype(np.float32)
    target = series.target_feature
    data[:, :, target] = np.log1p(np.maximum(data[:, :, target], 0))
    return series, st.from_arrays(data), target, os.path.basename(path)


class DynamicGRU(nn.Module):
    """Runs the graph GRU over the ``h`` input steps, step ``j`` on its own snapshot;
    predicts the next target of every node as last value + a learned change."""

    def __init__(self, in_channels, hidden, target):
        super().__init__()
        self.hidden, self.target = hidden, target
        self.cell = GraphGRUCell(in_channels, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, graphs):
        B, h, n, f = x.shape
        state = x.new_zeros(B * n, self.hidden)
        for j, (ei, ew) in enumerate(graphs):
            state = self.cell(x[:, j].reshape(B * n, f), state, ei, ew)
        return x[:, -1, :, self.target] + self.head(state).view(B, n)


def evaluate(model, split, target, batch_size, comm):
    """MAE (log1p units) of the next step's target over ``split`` (windows shared by
    rank); ``model=None`` is the persistence baseline."""
    def predict(batch):
        x, y, graphs = batch
        pred = x[:, -1, :, target] if model is None else model(x, graphs)
        return (split.inverse_transform(pred[..., None], features=[target]),
                split.inverse_transform(y[:, 0, :, target:target + 1], features=[target]))
    return split_mae(split, predict, batch_size, comm, model)


def main():
    args = parse_args()
    comm = MPI.COMM_WORLD
    torch.manual_seed(args.seed)
    t_start = time.time()
    # each rank opens the file itself: a refusal is said once, by rank 0
    raw, series, target, label = agreed_call(comm, load, args)
    store = ddstore.DDStore(comm, width=args.width)
    ds = DynamicWindowDataset(store, "tennis", series, args.horizon, edges=raw.edges,
                                 weights=raw.weights,
                                 checkpoint_every=args.checkpoint_every)
    train, val, test = ds.splits()
    loader = train.loader(args.batch_size, seed=args.seed)
    init_torch_distributed(comm, backend="gloo")
    model = nn.parallel.DistributedDataParallel(
        DynamicGRU(ds.num_features, args.hidden, target))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = ds.graph
    if comm.rank == 0:
        print(f"{label}: T={ds.num_steps}, nodes={ds.num_nodes}, features="
              f"{ds.num_features} (target {target}, log1p), {int(g.num_edges().sum())} "
              f"edges in {len(g)} snapshots, horizon {args.horizon}; windows train/val/"
              f"test = {len(train)}/{len(val)}/{len(test)}; {plural(comm.size, 'rank')}, width "
              f"{store.width}, {len(loader)} batches of {args.batch_size} per rank",
              flush=True)
    held = comm.allgather(g.nbytes())
    if comm.rank == 0:
        per_rank = ", ".join(f"{b / 1024:.1f}" for b in held)
        print(f"edge bytes: deltas + checkpoints (every {g.checkpoint_every} steps) "
              f"{sum(held) / 1024:.1f} KiB in the store ({per_rank} KiB per rank) vs "
              f"{g.materialized_nbytes() / 1024:.1f} KiB as full PyG snapshots on each "
              f"rank ({comm.size * g.materialized_nbytes() / 1024:.1f} KiB over "
              f"{plural(comm.size, 'rank')})", flush=True)
    persistence = evaluate(None, val, target, 64, comm)
    for epoch in range(args.epochs):
        st.set_epoch(loader, epoch)
        t0 = time.time()
        train_loss = train_epoch(loader, lambda b: nn.functional.l1_loss(
            model(b[0], b[2]), b[1][:, 0, :, target]), opt, comm)
        val_mae = evaluate(model.module, val, target, 64, comm)
        if comm.rank == 0:
            print(f"epoch {epoch:3d}  train L1 (standardised) {train_loss:.4f}  val MAE "
                  f"{val_mae:.4f}  (persistence MAE {persistence:.4f})  "
                  f"({time.time() - t0:.2f}s)", flush=True)
    test_mae = evaluate(model.module, test, target, 64, comm)
    test_persistence = evaluate(None, test, target, 64, comm)
    peak = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    if comm.rank == 0:
        print(f"test MAE {test_mae:.4f} vs persistence {test_persistence:.4f} (log1p of "
              f"mentions); total {time.time() - t_start:.1f}s")
        for r, p in enumerate(peak):
            print(f"rank {r}: peak RSS {p:.0f} MiB")
    dist.destroy_process_group()
    ds.free()
    store.free()
    return 0


if __name__ == "__main__":
    sys.exit(run_program(main))
