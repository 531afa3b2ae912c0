"""TGAT-style temporal link prediction, data-parallel over MPI ranks, graph in a DDStore.

Run (2 ranks, the default synthetic stream, about a minute)::

    mpiexec -n 2 python examples/tgat_link_prediction.py
    mpiexec -n 2 python examples/tgat_link_prediction.py --width 1 --strategy recent --chunks 4
    mpiexec -n 4 python examples/tgat_link_prediction.py --data /path/to/WIKI   # TGL layout

What it does:

- the interaction stream (``ddstore.temporal.synthetic_stream`` by default: power-law
  activity, communities, recurring pairs, edge features carrying the destination's
  community; or a TGL directory with ``--data``) is stored as a T-CSR with
  ``add_reverse=True``, striped over groups of ``--width`` ranks;
- each training batch (``EdgeBatches``, time order, TGL's random chunk scheduling with
  ``--chunks``) gives every rank its share of the batch's positive edges and one random
  negative destination per edge; the roots (src, dst, negative) are sampled 2 layers deep
  (``--fanouts 10,10``, ``--strategy uniform``) strictly before each edge's time;
- a TGAT-style model (learnable cosine time encoding, multi-head attention of each root
  over its sampled neighbours' embeddings, edge features and time encodings; 2 layers)
  embeds src, dst and negative; an MLP scores the pairs; binary cross-entropy;
  gradients are averaged with ``DistributedDataParallel`` over gloo;
- after each epoch, average precision and ROC AUC on the validation and test edges
  (against one fixed random negative per edge) are printed beside a random scorer's.
"""
import sys
import time

import numpy as np
from mpi4py import MPI

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import ddstore
from ddstore import temporal as tg
from ddstore.cli import (ArgumentParser, HelpFormatter, at_least, check_width,
                         input_path, int_list, plural, run_program, seed)
from ddstore.distributed import init_torch_distributed


def parse_args(argv=None):
    p = ArgumentParser(description="TGAT-style link prediction over a DDStore",
                                formatter_class=HelpFormatter)
    p.add_argument("--data", type=input_path, default=None,
                   help="TGL-format directory (edges.csv, ...)")
    p.add_argument("--num-nodes", type=at_least(2), default=1000)
    p.add_argument("--num-edges", type=at_least(1), default=30_000)
    p.add_argument("--strategy", default="uniform", choices=["uniform", "recent"])
    p.add_argument("--fanouts", type=int_list(1), default="10,10")
    p.add_argument("--chunks", type=at_least(1), default=1,
                   help="random chunk scheduling (TGL)")
    add_training_args(p)
    args = p.parse_args(argv)
    check_width(p, args.width)
    if args.hidden % args.heads:  # (the attention splits hidden over the heads)
        p.error(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}")
    if args.batch_size % args.chunks:  # (EdgeBatches' rule, said before any work)
        p.error(f"--chunks {args.chunks} must divide --batch-size {args.batch_size}")
    return args


# options of add_training_args that tgn_link_prediction.py passes on to train_tgat
SHARED_OPTIONS = ("batch_size", "epochs", "max_batches", "hidden", "time_dim", "heads",
                  "lr", "seed")


def add_training_args(p):
    """The store and training options of both link-prediction examples."""
    p.add_argument("--width", type=at_least(1), default=None,
                   help="ranks per replica (default all)")
    p.add_argument("--transport", default="auto", choices=["auto", "rma", "shm"])
    p.add_argument("--batch-size", type=at_least(1), default=200,
                   help="positive edges per batch")
    p.add_argument("--epochs", type=at_least(1), default=3)
    p.add_argument("--max-batches", type=at_least(0), default=0, help="per epoch; 0 = all")
    p.add_argument("--hidden", type=at_least(1), default=32)
    p.add_argument("--time-dim", type=at_least(1), default=16)
    p.add_argument("--heads", type=at_least(1), default=2)
    p.add_argument("--lr", type=at_least(0, float, above=True), default=1e-3)
    p.add_argument("--seed", type=seed(), default=0)


def log(comm, *a):
    if comm.rank == 0:
        print(*a, flush=True)


# ---------------------------------------------------------------------------- model
class TimeEncode(nn.Module):
    """cos(dt * w + b), w initialised to TGAT's geometric frequencies."""

    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(1, dim)
        with torch.no_grad():
            self.lin.weight.copy_(torch.from_numpy(
                1.0 / 10 ** np.linspace(0, 9, dim, dtype=np.float32)).view(dim, 1))
            self.lin.bias.zero_()

    def forward(self, dt):
        return torch.cos(self.lin(dt.view(-1, 1).float()))


class TemporalAttention(nn.Module):
    """One layer: each root attends over its sampled neighbours."""

    def __init__(self, dim_in, dim_edge, dim_time, dim_out, heads):
        super().__init__()
        self.heads, self.dim_out = heads, dim_out
        self.time = TimeEncode(dim_time)
        self.q = nn.Linear(dim_in + dim_time, dim_out)
        self.k = nn.Linear(dim_in + dim_edge + dim_time, dim_out)
        self.v = nn.Linear(dim_in + dim_edge + dim_time, dim_out)
        self.out = nn.Linear(dim_in + dim_out, dim_out)
        self.norm = nn.LayerNorm(dim_out)

    def forward(self, h, block, edge_feat):
        """``h``: embeddings of ``block.nodes``; returns embeddings of its roots."""
        nr = block.num_roots
        row, col = block.row, block.col
        h_root = h[:nr]
        zero_t = self.time(torch.zeros(nr))
        q = self.q(torch.cat([h_root, zero_t], 1))[row]
        kv_in = torch.cat([h[col], edge_feat, self.time(block.dts)], 1)
        k, v = self.k(kv_in), self.v(kv_in)
        H, d = self.heads, self.dim_out // self.heads
        score = (q.view(-1, H, d) * k.view(-1, H, d)).sum(-1) / d ** 0.5  # [E, H]
        idx = row.view(-1, 1).expand(-1, H)
        smax = torch.full((nr, H), -1e30).scatter_reduce(0, idx, score, "amax")
        w = torch.exp(score - smax[row])
        denom = torch.zeros(nr, H).index_add_(0, row, w)
        w = w / denom[row].clamp_min(1e-30)
        agg = torch.zeros(nr, H, d).index_add_(0, row, w.unsqueeze(-1) * v.view(-1, H, d))
        return self.norm(F.relu(self.out(torch.cat([h_root, agg.reshape(nr, H * d)], 1))))


class EdgePredictor(nn.Module):
    """Score of a (source, destination) pair from their embeddings: a linear map of each,
    summed, ReLU, a linear score (TGL's edge predictor)."""

    def __init__(self, dim):
        super().__init__()
        self.src_fc = nn.Linear(dim, dim)
        self.dst_fc = nn.Linear(dim, dim)
        self.score = nn.Linear(dim, 1)

    def forward(self, z, n):
        """Scores of (src, dst) and (src, neg) for ``z`` = embeddings of [src, dst, neg]
        (n each)."""
        src, dst, neg = z[:n], z[n:2 * n], z[2 * n:]
        hs = self.src_fc(src)
        pos = self.score(F.relu(hs + self.dst_fc(dst))).view(-1)
        negs = self.score(F.relu(hs + self.dst_fc(neg))).view(-1)
        return pos, negs


class TGAT(nn.Module):
    def __init__(self, dim_node, dim_edge, args, layers):
        super().__init__()
        dims = [dim_node] + [args.hidden] * layers
        # layers[0] is applied to the deepest block
        self.layers = nn.ModuleList(TemporalAttention(dims[i], dim_edge, args.time_dim,
                                                      dims[i + 1], args.heads)
                                    for i in range(layers))
        self.predict = EdgePredictor(args.hidden)

    def embed(self, blocks, h, efeats):
        """``h``: input features of the deepest block's nodes; returns root embeddings."""
        for layer, block, ef in zip(self.layers, reversed(blocks), reversed(efeats)):
            h = layer(h, block, ef)
        return h

    def forward(self, blocks, h, efeats, n):
        """Scores of (src, dst) and (src, neg): the roots are [src, dst, neg] (n each)."""
        return self.predict(self.embed(blocks, h, efeats), n)


def prepare(graph, sampler, src, dst, neg, t, dim_node, dim_edge):
    """Sample and read the features of one batch (numpy in, tensors out)."""
    roots = np.concatenate([src, dst, neg])
    blocks = sampler.sample(roots, np.tile(t, 3))
    deepest = blocks[-1].nodes
    if graph.node_feat_dim is not None:
        h = torch.from_numpy(graph.node_features(deepest).astype(np.float32))
    else:
        h = torch.zeros(len(deepest), dim_node)
    efeats = []
    for b in blocks:
        if graph.edge_feat_dim is not None:
            efeats.append(torch.from_numpy(graph.edge_features(b.eid).astype(np.float32)
                                           .reshape(len(b.eid), dim_edge)))
        else:
            efeats.append(torch.zeros(len(b.eid), dim_edge))
    return [b.to_torch() for b in blocks], h, efeats


# ---------------------------------------------------------------------------- training
@torch.no_grad()
def evaluate(model, graph, sampler, split, args, comm, dims):
    model.eval()
    batches = tg.EdgeBatches(graph, args.batch_size, split, negatives=1, comm=comm,
                             seed=args.seed + 1000)  # the same negatives every epoch
    scores, labels = [], []
    for src, dst, neg, t, _ in batches:
        if len(src):
            blocks, h, ef = prepare(graph, sampler, src, dst, neg[:, 0], t, *dims)
            pos, negs = model(blocks, h, ef, len(src))
            scores += [pos.sigmoid().numpy(), negs.sigmoid().numpy()]
            labels += [np.ones(len(src)), np.zeros(len(src))]
    model.train()
    # the random scorer draws a stream of its own per split (seed 0 for test, 1 for val)
    return tg.link_prediction_metrics(comm, np.concatenate(scores) if scores else [],
                                      np.concatenate(labels) if labels else [],
                                      seed=int(split == "val"))


def train_tgat(graph, args, comm, tag=""):
    """Train a TGAT on ``graph`` for ``args.epochs`` epochs (DDP over the initialised
    process group), evaluating val and test after each; rank 0 prints one line per epoch
    (``tag`` first) and gets the last epoch's ``(val, test)`` metrics (None elsewhere)."""
    fanouts = tuple(args.fanouts)
    dim_edge = int(np.prod(graph.edge_feat_dim)) if graph.edge_feat_dim else 1
    dim_node = int(np.prod(graph.node_feat_dim)) if graph.node_feat_dim else args.hidden
    dims = (dim_node, dim_edge)
    torch.manual_seed(args.seed)
    model = TGAT(dim_node, dim_edge, args, len(fanouts))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    sampler = tg.TemporalSampler(graph, fanouts, args.strategy, seed=args.seed)
    eval_sampler = tg.TemporalSampler(graph, fanouts, args.strategy, seed=args.seed + 1)
    train = tg.EdgeBatches(graph, args.batch_size, "train", chunks=args.chunks,
                           negatives=1, comm=comm, seed=args.seed)
    val = test = None
    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        t_sample = 0.0
        losses = []
        for i, (src, dst, neg, t, _) in enumerate(train):
            if args.max_batches and i >= args.max_batches:
                break
            a = time.perf_counter()
            blocks, h, ef = prepare(graph, sampler, src, dst, neg[:, 0], t, *dims)
            t_sample += time.perf_counter() - a
            pos, negs = ddp(blocks, h, ef, len(src))
            loss = bce(pos, negs)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        train_s = time.perf_counter() - t0
        val = evaluate(model, graph, eval_sampler, "val", args, comm, dims)
        test = evaluate(model, graph, eval_sampler, "test", args, comm, dims)
        log(comm, epoch_line(f"{tag}epoch {epoch}", losses, train_s,
                             f"sampling + feature reads {t_sample:.1f} s", val, test))
    return (val, test) if comm.rank == 0 else None


def bce(pos, negs):
    """Binary cross-entropy of positives against 1 and negatives against 0 (sums over
    this rank's edges divided by their number: 0, not NaN, for a rank with none)."""
    n = max(1, pos.shape[0])
    return (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
            + F.binary_cross_entropy_with_logits(negs, torch.zeros_like(negs),
                                                 reduction="sum")) / n


def epoch_line(head, losses, train_s, detail, val, test):
    """One epoch's line: loss, training time (``detail`` in brackets), val and test
    metrics and the random scorer's (rank 0; None elsewhere)."""
    if val is None:
        return None
    return (f"{head}: loss {np.mean(losses):.4f}, {len(losses)} batches in {train_s:.1f} s "
            f"({detail}) | val AP {val[0]:.4f} AUC {val[1]:.4f} | test AP {test[0]:.4f} "
            f"AUC {test[1]:.4f} | random AP {test[2]:.4f} AUC {test[3]:.4f} ({test[4]} "
            f"test edges)")


def start_ranks():
    """Collective: one torch thread per rank (one rank per core), torch.distributed over
    gloo on MPI.COMM_WORLD (DDP's gradient averaging); returns the communicator."""
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    init_torch_distributed(comm, backend="gloo")
    return comm


def main(argv=None):
    args = parse_args(argv)
    comm = start_ranks()
    with ddstore.DDStore(comm, width=args.width, transport=args.transport) as store:
        t0 = time.perf_counter()
        if args.data:
            graph = tg.TemporalGraph.from_tgl(store, "g", args.data, add_reverse=True)
        else:
            s = tg.synthetic_stream(args.num_nodes, args.num_edges, seed=args.seed)
            lo, hi = ddstore.partition(s.num_edges, comm.size, comm.rank)
            graph = tg.TemporalGraph.from_arrays(
                store, "g", s.src[lo:hi], s.dst[lo:hi], s.t[lo:hi],
                edge_feat=s.edge_feat[lo:hi], split=s.split[lo:hi], num_nodes=s.num_nodes,
                add_reverse=True)
        log(comm, f"{graph} in the store over {plural(comm.size, 'rank')}, width {store.width}, "
                  f"{store.replicas} replica(s); T-CSR {graph.tcsr_bytes() / 1e6:.1f} MB on "
                  f"rank 0; built in {time.perf_counter() - t0:.1f} s")
        train_tgat(graph, args, comm)
        graph.remove()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(run_program(main))
