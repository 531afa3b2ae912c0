"""What the recurrent examples (``traffic_index_batching.py``,
``dynamic_graph_forecast.py``) share: the graph GRU cell, one training epoch over a
loader and the MAE over a split's windows, both summed over every rank, and their
common options."""
import os

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import GCNConv

import ddstore
from ddstore import spatiotemporal as st
from ddstore.cli import ArgumentParser, HelpFormatter, at_least, input_path, seed

__all__ = ["GraphGRUCell", "example_parser", "bundled", "train_epoch", "split_mae"]

HERE = os.path.dirname(os.path.abspath(__file__))


def bundled(name):
    """The path of the data file ``name`` shipped with the repository (``tests/data``,
    or a shared data folder beside it); exits naming the places looked in if none."""
    places = [os.path.join(HERE, "..", "tests", "data", name),
              os.path.join(HERE, "..", "..", "shared", "data", name),
              os.path.join("/work/shared/data", name)]
    path = next((p for p in places if os.path.exists(p)), None)
    if path is None:
        raise SystemExit(f"{name} not found in {places}")
    return path


def check_horizon(horizon, num_steps, label, overlap=None):
    """Ends the run naming ``--horizon``'s range for this series (every split of the
    default ratios needs a whole window), before anything is built; ``overlap`` is the
    ``--overlap`` option's value, ``None`` where the example has none."""
    try:  # what the dataset will accept, exactly
        st.split_ranges(num_steps, horizon, overlap=bool(overlap))
        return
    except ddstore.DDStoreValueError:
        pass
    most = st.largest_horizon(num_steps, overlap=bool(overlap))
    if horizon < most:  # (--overlap: the rounding of the window counts leaves gaps)
        raise SystemExit(f"--horizon {horizon}: {label} has {num_steps} steps; with "
                         f"--overlap the {num_steps - 2 * horizon + 1} window starts cut "
                         f"70/10/20 % round to none for a split at this horizon (not at "
                         f"{most}, the largest that gives every split a window); another "
                         f"--horizon, or without --overlap every --horizon <= "
                         f"{st.largest_horizon(num_steps)}")
    fits = f"--horizon <= {most}" if most else "no horizon"
    other = ""
    if overlap is False:
        pgt = st.largest_horizon(num_steps, overlap=True)
        other = f"; with --overlap (PGT's split), --horizon <= {pgt}"
    raise SystemExit(f"--horizon {horizon}: {label} has {num_steps} steps, cut 70/10/20 % "
                     f"into train/val/test; {fits} gives every split a whole window (inputs "
                     f"and targets, 2 * horizon steps){other}")


def example_parser(doc, data_help, batch_size):
    """The ``argparse`` parser of an example (described by its docstring ``doc``'s first
    line) with the options both take: ``--data`` (``data_help``), ``--epochs``,
    ``--batch-size`` (per rank; default ``batch_size``), ``--hidden``, ``--lr``,
    ``--width`` (of the store) and ``--seed``."""
    p = ArgumentParser(description=doc.split("\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--data", type=input_path, help=data_help)
    p.add_argument("--epochs", type=at_least(1), default=20, help="training epochs")
    p.add_argument("--batch-size", type=at_least(1), default=batch_size, help="per rank")
    p.add_argument("--hidden", type=at_least(1), default=32)
    p.add_argument("--lr", type=at_least(0, float, above=True), default=0.01)
    p.add_argument("--width", type=at_least(1), default=1,
                   help="store width: 1 replicated, >1 partitioned over that many ranks")
    p.add_argument("--seed", type=seed(), default=0)
    return p


def train_epoch(loader, loss_of, opt, comm):
    """One epoch of ``loader``: for each batch ``opt.zero_grad()``, ``loss_of(batch)``,
    backward, ``opt.step()``.  Returns the mean loss over every rank's batches."""
    total, batches = 0.0, 0
    for batch in loader:
        opt.zero_grad()
        loss = loss_of(batch)
        loss.backward()
        opt.step()
        total += float(loss.detach())
        batches += 1
    return comm.allreduce(total) / max(comm.allreduce(batches), 1)


def split_mae(split, predict, batch_size, comm, model=None):
    """Mean absolute error over ``split``'s windows, shared by rank (rank ``r`` takes
    every ``size``-th one, in batches of ``batch_size``): ``predict(batch)`` returns
    ``(prediction, truth)`` of a batch (``split.get_batch``); summed over every rank,
    without gradients.  ``model`` (an ``nn.Module``, if any) is in eval mode meanwhile,
    in train mode after."""
    if isinstance(model, nn.Module):
        model.eval()
    mine = np.arange(comm.rank, len(split), comm.size)
    err, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(mine), batch_size):
            pred, true = predict(split.get_batch(mine[i:i + batch_size]))
            err += float((pred - true).abs().sum())
            count += true.numel()
    err, count = comm.allreduce(err), comm.allreduce(count)
    if isinstance(model, nn.Module):
        model.train()
    return err / max(count, 1)


class GraphGRUCell(nn.Module):
    """GRU cell whose update/reset gates and candidate are graph convolutions over
    ``[x, h]`` (the TGCN / DCRNN construction, with GCN in place of diffusion conv)."""

    def __init__(self, in_channels, hidden):
        super().__init__()
        self.gates = GCNConv(in_channels + hidden, 2 * hidden)
        self.candidate = GCNConv(in_channels + hidden, hidden)

    def forward(self, x, h, edge_index, edge_weight):
        zr = torch.sigmoid(self.gates(torch.cat([x, h], -1), edge_index, edge_weight))
        z, r = zr.chunk(2, dim=-1)
        c = torch.tanh(self.candidate(torch.cat([x, r * h], -1), edge_index, edge_weight))
        return z * h + (1 - z) * c


if __name__ == "__main__":
    # A self-check of the cell alone (no store, no MPI; every rank runs it on its own):
    # learn to output the previous step's signal on a 6-node ring.
    ArgumentParser(description="The graph-GRU cell and helpers shared by the "
                            "spatiotemporal examples; run alone, a self-check of the cell "
                            "(no store, no MPI): it learns to output the previous step's "
                            "signal on a 6-node ring and prints its loss before and after "
                            "15 steps.").parse_args()
    torch.manual_seed(0)
    ring = torch.arange(6)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % 6]),
                              torch.cat([(ring + 1) % 6, ring])])
    cell, head = GraphGRUCell(1, 8), nn.Linear(8, 1)
    opt = torch.optim.Adam([*cell.parameters(), *head.parameters()], lr=0.05)
    x = torch.randn(8, 6, 1)
    losses = []
    for step in range(15):
        h = torch.zeros(6, 8)
        loss = 0.0
        for t in range(1, len(x)):
            h = cell(x[t], h, edge_index, None)
            loss = loss + ((head(h) - x[t - 1]) ** 2).mean()
        loss = loss / (len(x) - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    print(f"GraphGRUCell: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} steps")
