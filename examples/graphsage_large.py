"""GraphSAGE node classification with PyG's NeighborLoader over a DDStore, data-parallel
over MPI ranks.

Run::

    mpiexec -n 2 python examples/graphsage_large.py                 # products-sized
    mpiexec -n 2 python examples/graphsage_large.py --scale 0.02    # 49 k nodes, 1.2 M edges
    mpiexec -n 4 python examples/graphsage_large.py --ogb dataset/ogbn_products

What it does:

- the graph goes into the store range-wise (``ddstore.pyg.ranges``): by default the
  ogbn-products-shaped synthetic graph (``SyntheticNodeGraph``: 2,449,029 nodes,
  61,859,140 undirected edges, 100 float32 features, 47 classes of Zipf-like sizes whose
  nodes have class-mean-plus-noise features and mostly same-class neighbours), each rank
  generating only its own node and edge ranges; ``--scale`` shrinks it. ``--ogb DIR``
  loads an OGB node-property dataset in its raw layout (``DIR/raw/edge.csv.gz``,
  ``node-feat.csv.gz``, ``node-label.csv.gz``, ``DIR/split/<name>/*.csv.gz``; e.g. the
  ``dataset/ogbn_products`` that ``ogb`` downloads), each rank parsing only its rows;
  ``--npy DIR`` the same from ``.npy`` files (``edge_index.npy``, ``x.npy``, ``y.npy``,
  ``{train,valid,test}_idx.npy``).  No rank holds the whole graph;
- PyG's ``NeighborLoader`` takes ``data=(feature_store, graph_store)`` and ddstore's
  ``NeighborSampler`` (the loop in C, where the graph lives; no pyg-lib or torch-sparse),
  fanouts ``--fanouts 15,10,5``, ``--batch-size 1024`` seed nodes;
- every epoch the training nodes are shuffled globally (same permutation on every rank,
  rank ``r`` takes every ``P``-th), every rank runs the same number of batches, and the
  gradients of a 3-layer GraphSAGE (mean aggregation) are averaged by
  ``DistributedDataParallel`` over gloo.  Beside it, on the same batches, an MLP on the
  seed nodes' own features alone is trained (the "features only" baseline);
- at the end, accuracy on (an even sample of at most ``--eval-nodes`` nodes of) each split, for
  GraphSAGE, the MLP and the majority class of the training labels.

On a GPU and reading ahead (issue 44)::

    mpiexec -n 2 python examples/graphsage_large.py --scale 0.02 --device cuda --prefetch 2

``--device`` (default ``cpu``, as before) is where the models train (gradients still
averaged over gloo, which reduces CUDA tensors, so ranks may share a GPU).
``--prefetch K`` wraps the training ``NeighborLoader`` with the store's pipeline
(:class:`ddstore.device.DevicePrefetcher`): a background thread samples and reads the
next ``K`` batches while the model steps, each staged in reused buffers (pinned, and
copied on a side stream, on CUDA).  The sampler then draws from its own seeded stream
(``--sampler-seed``, default ``--seed``) and each rank's loader is given exactly the
epoch's batches, so that the batches do not depend on when the thread draws them
(the default sampler draws its keys from torch's generator, which dropout uses too):
``--sampler-seed S`` gives the same losses with ``--prefetch 0`` and ``--prefetch K``
(``tests/test_examples_prefetch.py``).  ``--prefetch 0`` without ``--sampler-seed`` is
the path above, unchanged.
"""
import math
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import ddstore
from ddstore import pyg as dpyg
from ddstore.cli import (ArgumentParser, HelpFormatter, agree_exit, at_least, check_width,
                         input_path, int_list, plural, run_program, seed)
from ddstore.prefetch import MAX_PREFETCH
from ddstore.distributed import init_torch_distributed
from ddstore.pyg import load_npy, load_ogb, load_synthetic


def parse_args(argv=None):
    p = ArgumentParser(description="GraphSAGE over a DDStore with PyG's "
                                            "NeighborLoader",
                                formatter_class=HelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--ogb", type=input_path, default=None, metavar="DIR",
                     help="OGB node-property dataset directory (raw/, split/)")
    src.add_argument("--npy", type=input_path, default=None, metavar="DIR",
                     help="directory of edge_index.npy, x.npy, y.npy and train_idx.npy "
                          "(required), valid_idx.npy, test_idx.npy (each evaluated when "
                          "given)")
    p.add_argument("--scale", type=at_least(0, float, above=True, most=1000), default=1.0,
                   help="synthetic graph size, times ogbn-products'")
    p.add_argument("--classes", type=at_least(2), default=47,
                   help="synthetic graph's classes (the graph has at least as many "
                        "nodes)")
    p.add_argument("--width", type=at_least(1), default=None,
                   help="ranks per replica (default all)")
    p.add_argument("--transport", default="auto", choices=["auto", "rma", "shm"])
    p.add_argument("--fanouts", type=int_list(-1), default="15,10,5",
                   help="neighbours per hop (-1: all), e.g. --fanouts -1,5")
    p.add_argument("--batch-size", type=at_least(1), default=1024)
    p.add_argument("--hidden", type=at_least(1), default=128)
    p.add_argument("--epochs", type=at_least(1), default=3)
    p.add_argument("--max-batches", type=at_least(0), default=0,
                   help="per epoch and rank; 0 = all")
    p.add_argument("--eval-nodes", type=at_least(0), default=20000,
                   help="at most this many nodes evaluated per split (an even sample: "
                        "every ceil(n / limit)-th node); 0 = all")
    p.add_argument("--lr", type=at_least(0, float, above=True), default=3e-3)
    p.add_argument("--dropout", type=at_least(0, float), default=0.2)
    p.add_argument("--seed", type=seed(), default=0)
    p.add_argument("--threads", type=at_least(1, most=os.cpu_count() or 1), default=1,
                   help="torch threads per rank (at most the cores here)")
    p.add_argument("--device", default="cpu", choices=["cpu", "auto", "cuda"],
                   help="where the models train (auto: CUDA where every rank sees a GPU)")
    p.add_argument("--prefetch", type=at_least(0, most=MAX_PREFETCH), default=0, metavar="K",
                   help="training batches sampled and read ahead through the store's "
                        "pipeline to --device (ddstore.device.DevicePrefetcher); 0 = none")
    p.add_argument("--sampler-seed", type=seed(), default=None,
                   help="the sampler's own seeded stream (default: with --prefetch, "
                        "--seed; without, keys drawn from torch's generator)")
    args = p.parse_args(argv)
    check_width(p, args.width)
    if not args.dropout < 1:
        p.error(f"argument --dropout: must be below 1, got {args.dropout}")
    if args.prefetch and args.sampler_seed is None:
        args.sampler_seed = args.seed
    return args


def log(comm, *a):
    if comm.rank == 0:
        print(*a, flush=True)


class Models(nn.Module):
    """GraphSAGE on the sampled subgraph, and an MLP on the seed nodes' features alone
    (the baseline), trained side by side on the same batches."""

    def __init__(self, num_features, hidden, num_classes, layers, dropout):
        super().__init__()
        from torch_geometric.nn import GraphSAGE
        self.sage = GraphSAGE(num_features, hidden, num_layers=layers,
                              out_channels=num_classes, dropout=dropout)
        self.mlp = nn.Sequential(nn.Linear(num_features, hidden), nn.ReLU(),
                                 nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))

    def forward(self, batch):
        """Logits of the batch's seed nodes.  GraphSAGE computes layer ``k`` only on the
        nodes and edges within ``layers - k`` hops of the seeds (PyG's trim_to_layer,
        from the sampler's per-hop counts)."""
        n = batch.batch_size
        sage = self.sage(batch.x, batch.edge_index,
                         num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                         num_sampled_edges_per_hop=batch.num_sampled_edges)
        return sage[:n], self.mlp(batch.x[:n])


def loader_for(data, sampler, fanouts, ids, batch_size):
    from torch_geometric.loader import NeighborLoader
    return NeighborLoader(data.pyg, num_neighbors=fanouts, neighbor_sampler=sampler,
                          input_nodes=torch.from_numpy(np.ascontiguousarray(ids)),
                          batch_size=batch_size, shuffle=False)


def eval_sample(ids, total, limit, rank, size):
    """This rank's part of an even sample of a ``total``-node split (every
    ``ceil(total / limit)``-th node of the split, whatever the rank count: about
    ``limit`` nodes in all; 0: all): ``ids`` is the rank's share of the split,
    ``ddstore.partition(total, size, rank)`` of its ids in file order."""
    if not limit or total <= limit:
        return ids
    step = int(math.ceil(total / limit))
    lo, _ = ddstore.partition(total, size, rank)
    return ids[(-lo) % step::step]


@torch.no_grad()
def evaluate(model, data, sampler, fanouts, ids, args, majority, device):
    """(GraphSAGE correct, MLP correct, majority correct, labelled) summed over ranks."""
    model.eval()
    counts = np.zeros(4, dtype=np.int64)
    for batch in loader_for(data, sampler, fanouts, ids, args.batch_size):
        if device.type != "cpu":
            batch = batch.to(device)
        n = batch.batch_size
        sage, mlp = model(batch)
        y = batch.y[:n]
        keep = y >= 0
        counts += [int((sage.argmax(1) == y)[keep].sum()), int((mlp.argmax(1) == y)[keep].sum()),
                   int((y == majority)[keep].sum()), int(keep.sum())]
    model.train()
    return MPI.COMM_WORLD.allreduce(counts)


def main(argv=None):
    args = parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = init_torch_distributed(comm, backend="gloo", device=args.device)
    fanouts = list(args.fanouts)
    with ddstore.DDStore(comm, width=args.width, transport=args.transport) as store:
        t0 = time.perf_counter()
        if args.ogb:
            data = load_ogb(store, args.ogb)
            what = f"OGB dataset {args.ogb}"
        elif args.npy:
            data = load_npy(store, args.npy)
            what = f"npy dataset {args.npy}"
        else:
            data = load_synthetic(store, scale=args.scale, seed=args.seed,
                                  num_classes=args.classes)
            what = f"synthetic ogbn-products-shaped graph (scale {args.scale})"
        load_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        held = comm.allgather(store.nbytes())
        log(comm, f"{what}: {data.num_nodes} nodes, {data.num_edges} directed edges, "
                  f"{data.num_features} features, {data.num_classes} classes; split "
                  f"{data.split_sizes}; in the store over {plural(size, 'rank')}, width "
                  f"{store.width}: {max(held) / 1e6:.0f} MB per rank; loaded in "
                  f"{load_s:.1f} s")
        if "train" not in data.splits:  # (alike on every rank: said once, by rank 0)
            agree_exit(comm, f"{what} has no training split (train_idx.npy with --npy): "
                             f"nothing to train on")
        fs, gs = data.pyg
        if not any(a.attr_name == "y" for a in fs.get_all_tensor_attrs()):
            agree_exit(comm, f"{what} has no labels (y.npy with --npy): nothing to train "
                             f"on")
        sampler = dpyg.NeighborSampler(gs, num_neighbors=fanouts, seed=args.sampler_seed)

        # the majority class of the training labels (read one-sidedly from the store)
        train_mine = data.splits["train"]
        y_mine = fs.get_tensor(group_name=None, attr_name="y",
                               index=torch.from_numpy(train_mine)).numpy().reshape(-1)
        counts = comm.allreduce(np.bincount(y_mine[y_mine >= 0],
                                            minlength=data.num_classes))
        if not counts.sum():
            agree_exit(comm, f"{what}: no node of the training split has a label (every "
                             f"y < 0 there): nothing to train on")
        majority = int(np.argmax(counts))
        train_all = np.concatenate(comm.allgather(train_mine))  # node ids only

        model = Models(data.num_features, args.hidden, data.num_classes, len(fanouts),
                       args.dropout).to(device)
        ddp = nn.parallel.DistributedDataParallel(model)
        if args.prefetch or device.type != "cpu":
            log(comm, f"training on {device}" + (f", batches read {args.prefetch} ahead "
                                                  f"(sampler seed {args.sampler_seed})"
                                                  if args.prefetch else ""))
        opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
        for epoch in range(1, args.epochs + 1):
            perm = np.random.default_rng([args.seed, epoch]).permutation(train_all)
            mine = perm[rank::size]
            nb = comm.allreduce(-(-len(mine) // args.batch_size), op=MPI.MIN)
            if args.max_batches:
                nb = min(nb, args.max_batches)
            t0 = time.perf_counter()
            losses, edges = [], 0
            # a seeded sampler: exactly the epoch's batches (no draw for a batch not used)
            ids = mine if args.sampler_seed is None else mine[:nb * args.batch_size]
            loader = loader_for(data, sampler, fanouts, ids, args.batch_size)
            if args.prefetch:
                from ddstore.device import DevicePrefetcher
                loader = DevicePrefetcher(loader, device, prefetch=args.prefetch,
                                          store=store)
            for i, batch in enumerate(loader):
                if i >= nb:
                    break
                if not args.prefetch and device.type != "cpu":
                    batch = batch.to(device)
                n = batch.batch_size
                y = batch.y[:n]
                keep = y >= 0
                sage, mlp = ddp(batch)
                loss_sage = F.cross_entropy(sage[keep], y[keep])
                loss_mlp = F.cross_entropy(mlp[keep], y[keep])
                opt.zero_grad()
                (loss_sage + loss_mlp).backward()
                opt.step()
                if bool(keep.any()):  # (a batch without a labelled seed: no loss)
                    losses.append((loss_sage.item(), loss_mlp.item()))
                edges += int(batch.edge_index.size(1))
            secs = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            edges = comm.allreduce(edges)
            # the mean over every rank's batches that had a labelled seed node
            tot = comm.allreduce(np.array([sum(a for a, _ in losses),
                                           sum(b for _, b in losses), len(losses)]))
            said = (f"loss {tot[0] / tot[2]:.4f} (GraphSAGE), {tot[1] / tot[2]:.4f} (MLP)"
                    if tot[2] else "no loss (no batch had a labelled seed node)")
            log(comm, f"epoch {epoch}: {said}; {nb} batches per rank in {secs:.1f} s, "
                      f"{edges / secs / 1e6:.2f} M sampled edges/s over "
                      f"{plural(size, 'rank')}")

        t0 = time.perf_counter()
        results = {}
        evaluated = [w for w in ("train", "valid", "test") if w in data.splits]
        for which in evaluated:  # (a split file left out: not evaluated)
            ids = eval_sample(data.splits[which], data.split_sizes[which], args.eval_nodes,
                              comm.rank, size)
            c = evaluate(model, data, sampler, fanouts, ids, args, majority, device)
            results[which] = (c[:3] / max(int(c[3]), 1), int(c[3]))
        log(comm, f"accuracy on {', '.join(f'{w} ({r[1]} nodes)' for w, r in results.items())}"
                  f" (evaluated in {time.perf_counter() - t0:.1f} s):")
        log(comm, f"  {'':26s} " + " ".join(f"{w:>7s}" for w in evaluated))
        for k, label in enumerate(("GraphSAGE", "MLP (features only)",
                                   f"majority class ({majority})")):
            log(comm, f"  {label:26s} " + " ".join(f"{results[w][0][k]:7.4f}"
                                                   for w in evaluated))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(run_program(main))
