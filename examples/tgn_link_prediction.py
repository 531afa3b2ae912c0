"""Memory-based temporal link prediction (TGN, JODIE or APAN), data-parallel over MPI
ranks, the graph and the per-node memory in a DDStore; TGAT and a random scorer beside it.

Run (2 ranks, the default synthetic stream; TGN, then TGAT on the same stream)::

    mpiexec -n 2 python examples/tgn_link_prediction.py
    mpiexec -n 2 python examples/tgn_link_prediction.py --model jodie --baseline none
    mpiexec -n 2 python examples/tgn_link_prediction.py --model apan --width 1
    mpiexec -n 4 python examples/tgn_link_prediction.py --jodie DATA/wikipedia.csv
    mpiexec -n 2 python examples/tgn_link_prediction.py --checkpoint CK --epochs 3
    mpiexec -n 2 python examples/tgn_link_prediction.py --resume CK --epochs 5

What it does:

- the stream is ``ddstore.temporal.synthetic_stream(..., partners=4, p_repeat=0.7)`` by
  default: power-law activity and communities as in ``tgat_link_prediction.py``, and 70 %
  of the edges recurring pairs, each node re-interacting with 4 partners of its own,
  drawn uniformly from all nodes (``--partners``, ``--p-repeat``): only whom a node has
  met before tells a partner from a random node, which is what memory keeps.  Or a JODIE
  CSV (``--jodie PATH``: ``user,item,timestamp,state_label,features...``, read by
  ``TemporalGraph.from_jodie`` with PyG's chronological 70/15/15 split).  It is stored
  as a T-CSR with ``add_reverse=True``, striped over groups of ``--width`` ranks;
- the memory and mailbox of every node live in a ``ddstore.temporal.NodeMemory``
  (``--memory-dim``; mail = [memory of the node, memory of the other end, edge
  features]; mailbox of 1 for TGN and JODIE, ``--mailbox`` for APAN).  Every batch
  (``EdgeBatches``, each rank its share of the same time window) reads the memory and
  mailbox of the nodes it needs (one-sided reads), trains, then stages the new memory of
  its positive edges' ends (``write``) and their mails (``post``; APAN also to their
  sampled neighbours, ``post_to_neighbors``), and ``commit()`` applies every rank's
  updates in ``(ts, rank, position)`` order: the state is what one process training on
  the whole batch gets.  ``reset()`` starts each epoch from zeros; after training,
  ``snapshot()`` keeps the end-of-training state, val and then test are evaluated from
  it (the memory going on through their events, as TGL does), and ``restore()`` puts it
  back, so no val/test event stays in the memory that training produced;
- ``--model tgn``: a GRU updates a node's memory from its newest mail and the time
  encoding of the gap since its memory was last updated (TGL's last-mail combine); the
  embedding is one layer of temporal attention over the ``--fanout`` most recent
  neighbours, with their (updated) memory, the edge features and time encodings;
  ``--model jodie``: an RNN updates the memory, the embedding is JODIE's time projection
  ``memory * (1 + w * log(1 + dt))``, no neighbours; ``--model apan``: no memory updater
  and no neighbour sampling for the embedding: each node attends over its mailbox
  (``--mailbox`` mails with their time encodings), the result is its new memory and its
  embedding, and each event's mails go to both ends and to their sampled neighbours;
- an MLP scores (src, dst) against one random negative destination; binary
  cross-entropy; gradients averaged with ``DistributedDataParallel`` over gloo;
- after each epoch: average precision and ROC AUC on val and test (one fixed random
  negative per edge, the same as the TGAT example's), beside a random scorer's; then,
  unless ``--baseline none``, TGAT (``tgat_link_prediction.py``, its own defaults:
  2 layers, ``uniform`` 10/10) is trained on the same stream with the same batch size,
  epochs, width, hidden size and learning rate, and a table compares the last epochs;
- ``--checkpoint DIR``: after each epoch, the store (graph, node memory and a note of
  the epoch: ``store.save(DIR/store)``) and the training state (model, optimizer, torch
  RNG, the epoch's metrics: ``torch.save`` on rank 0, ``DIR/training-<epoch>.pt``,
  written first, so that a job killed at any point leaves a store checkpoint whose
  training state is there).  ``--resume DIR`` restores the store
  (``DDStore.restore``, at this run's rank count and ``--width``), reopens the graph
  and the memory by name (``TemporalGraph.open``, ``NodeMemory.open``: no source
  data read), loads the training state and goes on from the next epoch: it prints
  what the run that never stopped prints, to the bit at the same rank count (any
  width; DDP's gradients are summed in rank order,
  :func:`ddstore.distributed.rank_order_mean`, so that
  the buckets a new DDP lays out do not change the sums).  On another rank count it
  goes on as well (each rank's share of a batch, and so the float sums, then differ).
"""
import glob
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
from ddstore.cli import (ArgumentParser, HelpFormatter, agreed_call, at_least, check_width,
                         claim_checkpoint, input_path, nothing_to_train,
                         other_settings, output_dir, plural, run_program)
from ddstore import temporal as tg
from ddstore.distributed import rank_order_mean
import tgat_link_prediction as tgat  # examples/tgat_link_prediction.py
from tgat_link_prediction import EdgePredictor, TemporalAttention, TimeEncode, \
    bce, epoch_line, log

MODELS = ("tgn", "jodie", "apan")


def parse_args(argv=None):
    p = ArgumentParser(description="TGN / JODIE / APAN link prediction with the "
                                            "node memory in a DDStore",
                                formatter_class=HelpFormatter)
    p.add_argument("--model", default="tgn", choices=MODELS)
    p.add_argument("--jodie", type=input_path, default=None, metavar="PATH",
                   help="JODIE CSV (user,item,timestamp,state_label,features...)")
    p.add_argument("--num-nodes", type=at_least(2), default=1000,
                   help="synthetic stream: nodes (at least two)")
    p.add_argument("--num-edges", type=at_least(1), default=30_000)
    p.add_argument("--partners", type=at_least(0), default=4,
                   help="synthetic stream: each node's own recurring partners, drawn "
                        "uniformly with replacement among all --num-nodes nodes (itself "
                        "included), so more than --num-nodes only repeats them")
    p.add_argument("--p-repeat", type=at_least(0, float, most=1), default=0.7,
                   help="synthetic stream: share of edges to a partner")
    tgat.add_training_args(p)
    p.add_argument("--memory-dim", type=at_least(1), default=32)
    p.add_argument("--fanout", type=at_least(1), default=10,
                   help="recent neighbours (TGN's attention, APAN's delivery)")
    p.add_argument("--mailbox", type=at_least(1), default=None,
                   help="mails per node, APAN only (default: 10)")
    p.add_argument("--baseline", default="tgat", choices=["tgat", "none"],
                   help="also train TGAT on the same stream")
    p.add_argument("--pipelined-commit", action="store_true",
                   help="commit each batch's memory without waiting (NodeMemory.commit("
                        "wait=False)): the update of batch i runs while batch i+1 is "
                        "sampled; the next read waits for it, so the metrics are the same")
    p.add_argument("--checkpoint", type=output_dir, default=None, metavar="DIR",
                   help="after each epoch, save the store to DIR/store and the training "
                        "state to DIR/training-<epoch>.pt")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="go on from the checkpoint in DIR (written by --checkpoint): the "
                        "store restored, the graph and memory reopened, the next epoch")
    args = p.parse_args(argv)
    if args.mailbox is not None and args.model != "apan":
        p.error(f"--mailbox is for --model apan (--model {args.model} keeps one mail per "
                f"node)")
    args.mailbox = 10 if args.mailbox is None else args.mailbox
    if args.hidden % args.heads:
        p.error(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}")
    if args.model == "apan" and args.memory_dim % args.heads:
        p.error(f"--memory-dim {args.memory_dim} must be a multiple of --heads {args.heads}"
                f" for apan")
    check_width(p, args.width)
    if args.resume:  # refused here, once, rather than by the restore on every rank
        if not os.path.isdir(args.resume):
            p.error(f"--resume {args.resume}: no such directory")
        names = os.listdir(args.resume)
        if "store" not in names or not any(n.startswith("training-") and
                                           n.endswith(".pt") for n in names):
            p.error(f"--resume {args.resume}: no store/ and training-<epoch>.pt in it (not "
                    f"a directory that this example's --checkpoint wrote)")
    return args


# ---------------------------------------------------------------------------- models
class MemoryUpdater(nn.Module):
    """memory' = cell([newest mail, time encoding of (mail ts - memory ts)], memory) for
    nodes whose newest mail is newer than their memory; the others keep theirs.  Returns
    the memory and its timestamp (the consumed mail's)."""

    def __init__(self, cell, mail_dim, memory_dim, time_dim):
        super().__init__()
        self.time = TimeEncode(time_dim)
        self.cell = cell(mail_dim + time_dim, memory_dim)

    def forward(self, state):
        mail, mts = state.mail[:, -1], state.mail_ts[:, -1]
        fresh = mts > state.memory_ts
        dt = (mts - state.memory_ts).clamp_min(0)
        new = self.cell(torch.cat([mail, self.time(dt)], 1), state.memory)
        return (torch.where(fresh[:, None], new, state.memory),
                torch.where(fresh, mts, state.memory_ts))


class TGN(nn.Module):
    """GRU memory updater, then one layer of temporal attention over the sampled recent
    neighbours with their memory."""

    def __init__(self, dim_edge, mail_dim, args):
        super().__init__()
        self.update = MemoryUpdater(nn.GRUCell, mail_dim, args.memory_dim, args.time_dim)
        self.attn = TemporalAttention(args.memory_dim, dim_edge, args.time_dim, args.hidden,
                                      args.heads)
        self.predict = EdgePredictor(args.hidden)

    def forward(self, state, inv, root_ts, n, block, edge_feat):
        memory, memory_ts = self.update(state)     # of the batch's distinct nodes
        z = self.attn(memory[inv], block, edge_feat)
        pos, neg = self.predict(z, n)
        return pos, neg, memory, memory_ts


class JODIE(nn.Module):
    """RNN memory updater; embedding = memory * (1 + w * log(1 + time since its update))."""

    def __init__(self, dim_edge, mail_dim, args):
        super().__init__()
        self.update = MemoryUpdater(nn.RNNCell, mail_dim, args.memory_dim, args.time_dim)
        self.project = nn.Linear(1, args.memory_dim)
        with torch.no_grad():
            self.project.weight.normal_(0, 0.1)
            self.project.bias.zero_()
        self.out = nn.Linear(args.memory_dim, args.hidden)
        self.predict = EdgePredictor(args.hidden)

    def forward(self, state, inv, root_ts, n, block=None, edge_feat=None):
        memory, memory_ts = self.update(state)
        m, mts = memory[inv], memory_ts[inv]
        dt = torch.log1p((root_ts - mts).clamp_min(0)).float().view(-1, 1)
        z = self.out(m * (1 + self.project(dt)))
        pos, neg = self.predict(z, n)
        return pos, neg, memory, memory_ts


class APAN(nn.Module):
    """Attention of each node's memory over its mailbox (mails and their time
    encodings); the result is the node's embedding and its new memory."""

    def __init__(self, dim_edge, mail_dim, args):
        super().__init__()
        M = args.memory_dim
        self.heads = args.heads
        self.time = TimeEncode(args.time_dim)
        self.q = nn.Linear(M + args.time_dim, M)
        self.k = nn.Linear(mail_dim + args.time_dim, M)
        self.v = nn.Linear(mail_dim + args.time_dim, M)
        self.out = nn.Linear(2 * M, M)
        self.norm = nn.LayerNorm(M)
        self.predict = EdgePredictor(M)

    def forward(self, state, inv, root_ts, n, block=None, edge_feat=None):
        mem, mail, mts = state.memory[inv], state.mail[inv], state.mail_ts[inv]
        r, S, _ = mail.shape
        H, d = self.heads, mem.shape[1] // self.heads
        valid = mts > 0  # times are shifted to start at 1: ts 0 is an empty slot
        dt = (root_ts.view(-1, 1) - mts).clamp_min(0)
        q = self.q(torch.cat([mem, self.time(torch.zeros(r))], 1)).view(r, 1, H, d)
        kv = torch.cat([mail, self.time(dt.reshape(-1)).view(r, S, self.time.lin.out_features)],
                       2)
        k, v = self.k(kv).view(r, S, H, d), self.v(kv).view(r, S, H, d)
        score = (q * k).sum(-1) / d ** 0.5                       # [r, S, H]
        score = score.masked_fill(~valid.unsqueeze(-1), -1e30)
        w = torch.softmax(score, 1) * valid.unsqueeze(-1)        # empty mailbox: all 0
        agg = (w.unsqueeze(-1) * v).sum(1).reshape(r, H * d)
        z = self.norm(F.relu(self.out(torch.cat([mem, agg], 1))))
        pos, neg = self.predict(z, n)
        return pos, neg, z, root_ts


MODEL_CLASSES = {"tgn": TGN, "jodie": JODIE, "apan": APAN}


# ---------------------------------------------------------------------------- one batch
class Runner:
    """What one batch needs, in order: sample, read the memory, run the model; then
    stage the memory and the mails of the batch's events and commit them."""

    def __init__(self, graph, memory, sampler, args, dim_edge, shift):
        self.graph, self.memory, self.sampler = graph, memory, sampler
        self.model_name, self.dim_edge, self.shift = args.model, dim_edge, shift
        self.wait = not args.pipelined_commit
        self.memory_s = 0.0  # time in NodeMemory reads and commits

    def edge_features(self, eids):
        if self.graph.edge_feat_dim is None:
            return torch.zeros(len(eids), self.dim_edge)
        return torch.from_numpy(self.graph.edge_features(eids).astype(np.float32)
                                .reshape(len(eids), self.dim_edge))

    def forward(self, model, src, dst, neg, t, eid):
        """Scores of (src, dst) and (src, neg), and what :meth:`stage` needs."""
        n = len(src)
        roots = np.concatenate([src, dst, neg])
        block = ef = None
        if self.model_name == "tgn":
            block = self.sampler.sample(roots, np.tile(t, 3))[0]
            nodes = block.nodes
            ef = self.edge_features(block.eid)
        else:
            nodes = roots
        uniq, inv = np.unique(nodes, return_inverse=True)
        a = time.perf_counter()
        state = self.memory.read(uniq)
        self.memory_s += time.perf_counter() - a
        root_ts = torch.from_numpy(self.shift(np.tile(t, 3)))
        inv_t = torch.from_numpy(inv.reshape(-1))
        pos, negs, memory, memory_ts = model(state, inv_t, root_ts, n,
                                             block.to_torch() if block else None, ef)
        # memory and memory_ts are per row of `uniq` (tgn, jodie) or per root (apan)
        at = inv[:2 * n] if self.model_name != "apan" else np.arange(2 * n)
        return pos, negs, (src, dst, t, eid, memory.detach(), memory_ts, at)

    def stage(self, staged):
        """Stage the new memory of the events' ends and their mails, then commit
        (collective)."""
        src, dst, t, eid, memory, memory_ts, at = staged
        n = len(src)
        ends = np.concatenate([src, dst])
        m = memory[torch.from_numpy(at)]
        self.memory.write(ends, m.numpy(), memory_ts[torch.from_numpy(at)].numpy())
        ef = self.edge_features(eid)
        m_src, m_dst = m[:n], m[n:]
        mail = torch.cat([torch.cat([m_src, m_dst, ef], 1),
                          torch.cat([m_dst, m_src, ef], 1)]).numpy()
        ts = self.shift(np.concatenate([t, t]))
        self.memory.post(ends, mail, ts)
        if self.model_name == "apan":  # the events' mails also go to sampled neighbours
            block = self.sampler.sample(ends, np.concatenate([t, t]))[0]
            self.memory.post_to_neighbors(block, mail, ts)
        a = time.perf_counter()
        self.memory.commit(wait=self.wait)  # not waiting: the next read waits for it
        self.memory_s += time.perf_counter() - a


@torch.no_grad()
def evaluate(model, runner, graph, split, args, comm):
    """Score the split's edges in time order, the memory going on through them; the
    metrics on rank 0 (None elsewhere)."""
    model.eval()
    batches = tg.EdgeBatches(graph, args.batch_size, split, negatives=1, comm=comm,
                             seed=args.seed + 1000)  # the TGAT example's negatives
    scores, labels = [], []
    for src, dst, neg, t, eid in batches:
        pos, negs, staged = runner.forward(model, src, dst, neg[:, 0], t, eid)
        runner.stage(staged)
        scores += [pos.sigmoid().numpy(), negs.sigmoid().numpy()]
        labels += [np.ones(len(src)), np.zeros(len(src))]
    model.train()
    # the random scorer draws a stream of its own per split (seed 0 for test, 1 for val)
    return tg.link_prediction_metrics(comm, np.concatenate(scores) if scores else [],
                                      np.concatenate(labels) if labels else [],
                                      seed=int(split == "val"))


def build_graph(store, args, comm):
    """Collective: the stream as a T-CSR in ``store``; logs what it is (rank 0)."""
    t0 = time.perf_counter()
    if args.jodie:
        graph = tg.TemporalGraph.from_jodie(store, "g", args.jodie, add_reverse=True)
        what = f"JODIE file {args.jodie}"
    else:
        graph, what = synthetic_graph(store, args, comm)
    log(comm, f"{what}: {graph} over {plural(comm.size, 'rank')}, width {store.width}; built in "
              f"{time.perf_counter() - t0:.1f} s")
    return graph


def synthetic_graph(store, args, comm):
    s = tg.synthetic_stream(args.num_nodes, args.num_edges, seed=args.seed,
                            partners=args.partners, p_repeat=args.p_repeat)
    lo, hi = ddstore.partition(s.num_edges, comm.size, comm.rank)
    graph = tg.TemporalGraph.from_arrays(
        store, "g", s.src[lo:hi], s.dst[lo:hi], s.t[lo:hi], edge_feat=s.edge_feat[lo:hi],
        split=s.split[lo:hi], num_nodes=s.num_nodes, add_reverse=True)
    return graph, (f"synthetic stream ({args.num_nodes} nodes, {args.num_edges} edges, "
                   f"{args.partners} partners per node, p_repeat {args.p_repeat})")


def time_shift(graph, comm):
    """The memory's timestamps of event times ``t``: ``t - t_min + 1`` as float64 (the
    earliest is 1 and 0 means 'never': an empty mailbox slot, a memory not yet updated),
    the difference taken exactly in the graph's time dtype first (integer times such as
    Unix nanoseconds, beyond 2**53, rounded before it collapsed events into one time)."""
    lo, hi = ddstore.partition(graph.num_edges, comm.size, comm.rank)
    t = graph.edges(np.arange(lo, hi))[2]
    t_min = comm.allreduce(t.min().item() if len(t) else math.inf, op=MPI.MIN)
    if t_min == math.inf:  # (no edges: nothing is shifted)
        return lambda times: np.asarray(times, np.float64)
    if np.dtype(graph.time_dtype).kind == "f":
        return lambda times: np.asarray(times, np.float64) - t_min + 1.0
    low = np.array(t_min, np.int64).view(np.uint64)  # t - t_min in [0, 2**64): exact

    def shift(times):
        return (np.asarray(times, np.int64).view(np.uint64) - low).astype(np.float64) + 1.0
    return shift


# ---------------------------------------------------------------------------- checkpoints


# the options a checkpoint must be resumed with (the others: --epochs, --width,
# --transport, --baseline, --pipelined-commit, --checkpoint may change)
SAME_OPTIONS = ("model", "jodie", "num_nodes", "num_edges", "partners", "p_repeat",
                "memory_dim", "fanout", "mailbox", "batch_size", "max_batches", "hidden",
                "time_dim", "heads", "lr", "seed")
STATE = "training"  # the store's note of the epoch its checkpoint was taken after


def save_checkpoint(directory, store, epoch, model, opt, history, args, comm):
    """Collective, after epoch ``epoch``: rank 0 writes the training state
    (``training-<epoch>.pt``, by rename: whole or absent), then every rank saves the
    store with a note of the epoch (all or nothing: ``DDStore.save``); then rank 0
    removes the older training states.  A job killed anywhere leaves the previous
    store checkpoint and its training state, or the new ones."""
    name = os.path.join(directory, f"training-{epoch:04d}.pt")
    if comm.rank == 0:
        os.makedirs(directory, exist_ok=True)
        torch.save({"epoch": epoch, "model": model.state_dict(),
                    "optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state(),
                    "history": history,
                    "options": {k: jodie_key(args.jodie) if k == "jodie" else
                                getattr(args, k) for k in SAME_OPTIONS}},
                   name + ".tmp")
        os.replace(name + ".tmp", name)
    comm.Barrier()
    store.annotate(STATE, "tgn_link_prediction", {"epoch": epoch})
    store.save(os.path.join(directory, "store"))
    if comm.rank == 0:
        for old in glob.glob(os.path.join(directory, "training-*.pt")):
            if old != name:
                os.remove(old)


def jodie_key(path):
    """``--jodie`` as a checkpoint keeps it: the file's resolved path (the same file
    named from another directory is the same setting)."""
    return None if path is None else os.path.realpath(path)


def load_training_state(directory, store, args):
    """The training state of the epoch the restored store was saved after."""
    epoch = store.annotation(STATE, "tgn_link_prediction").meta["epoch"]
    name = os.path.join(directory, f"training-{epoch:04d}.pt")
    try:  # tensors and Python values only: a checkpoint cannot run code
        state = torch.load(name, weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- unpickling raises many types
        raise SystemExit(f"--resume {directory}: {name} cannot be read as this "
                         f"example's training state ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    saved = state["options"].get("jodie")
    if saved is not None and (args.jodie is None or jodie_key(args.jodie) ==
                              jodie_key(saved)):
        args.jodie = saved  # (the file is not read on resume: it may be left out)
    changed = other_settings(directory, state["options"], args)
    if changed:
        raise SystemExit(changed)
    return state


def train_memory_model(graph, store, args, comm):
    """Train ``args.model`` for ``args.epochs`` epochs (from the epoch after the
    checkpoint with ``--resume``); rank 0 prints one line per epoch and gets the last
    epoch's ``(val, test)`` metrics (None elsewhere)."""
    dim_edge = int(np.prod(graph.edge_feat_dim)) if graph.edge_feat_dim else 1
    mail_dim = 2 * args.memory_dim + dim_edge
    mailbox = args.mailbox if args.model == "apan" else 1
    state = None
    if args.resume:
        memory = tg.NodeMemory.open(store, "memory")
        # a refusal on any rank: one line from rank 0, every rank ends
        state = agreed_call(comm, load_training_state, args.resume, store, args)
    else:
        memory = tg.NodeMemory(store, "memory", graph.num_nodes, args.memory_dim,
                               mail_dim, mailbox_size=mailbox)
    torch.manual_seed(args.seed)
    model = MODEL_CLASSES[args.model](dim_edge, mail_dim, args)
    if state is not None:  # before DDP, which broadcasts rank 0's parameters
        model.load_state_dict(state["model"])
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(None, rank_order_mean)  # resumed runs: the same bits
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    start, val, test = 0, None, None
    history = []  # per epoch (rank 0): the losses and metrics, kept by checkpoints
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        history = state["history"]
        start, val, test = state["epoch"] + 1, history[-1]["val"], history[-1]["test"]
        log(comm, f"resumed from {args.resume} after epoch {state['epoch']}")
        idle = nothing_to_train(args.resume, state["epoch"], args.epochs, args.epochs - 1)
        if idle:
            log(comm, idle)
    sampler = tg.TemporalSampler(graph, (args.fanout,), "recent", seed=args.seed)
    runner = Runner(graph, memory, sampler, args, dim_edge, time_shift(graph, comm))
    train = tg.EdgeBatches(graph, args.batch_size, "train", negatives=1, comm=comm,
                           seed=args.seed)
    log(comm, f"{args.model.upper()}: {sum(p.numel() for p in model.parameters())} "
              f"parameters; {memory}, {memory.nbytes() / 1e6:.2f} MB on rank 0")
    name = args.model.upper()
    for epoch in range(start, args.epochs):
        train.set_epoch(epoch)
        memory.reset()
        runner.memory_s = 0.0
        t0 = time.perf_counter()
        losses = []
        for i, (src, dst, neg, t, eid) in enumerate(train):
            if args.max_batches and i >= args.max_batches:
                break
            pos, negs, staged = runner.forward(ddp, src, dst, neg[:, 0], t, eid)
            loss = bce(pos, negs)
            opt.zero_grad()
            loss.backward()
            opt.step()
            runner.stage(staged)
            losses.append(float(loss.detach()))
        train_s, memory_s = time.perf_counter() - t0, runner.memory_s
        memory.snapshot()                 # the end-of-training state ...
        val = evaluate(model, runner, graph, "val", args, comm)
        test = evaluate(model, runner, graph, "test", args, comm)
        memory.restore()                  # ... back, without the val/test events
        log(comm, epoch_line(f"{name} epoch {epoch}", losses, train_s,
                             f"memory reads + commits {memory_s:.1f} s", val, test))
        history.append({"epoch": epoch, "losses": losses, "val": val, "test": test})
        if args.checkpoint:
            save_checkpoint(args.checkpoint, store, epoch, model, opt, history, args, comm)
    memory.remove()
    return (val, test) if comm.rank == 0 else None


def tgat_args(args):
    """TGAT's own defaults (2 layers, uniform 10/10) with this run's shared settings."""
    base = tgat.parse_args([])
    for name in tgat.SHARED_OPTIONS:
        setattr(base, name, getattr(args, name))
    return base


def main(argv=None):
    args = parse_args(argv)
    # (a refusal ends every rank)
    claim_checkpoint(MPI.COMM_WORLD, args.checkpoint, args.resume)
    comm = tgat.start_ranks()
    if args.resume:  # the graph and the memory from the checkpoint, no source data read
        t0 = time.perf_counter()
        store = ddstore.DDStore.restore(os.path.join(args.resume, "store"), comm,
                                        width=args.width, transport=args.transport)
        graph = tg.TemporalGraph.open(store, "g")
        log(comm, f"restored {args.resume}: {graph} over {plural(comm.size, 'rank')}, width "
                  f"{store.width}, in {time.perf_counter() - t0:.1f} s")
    else:
        store = ddstore.DDStore(comm, width=args.width, transport=args.transport)
    with store:
        if not args.resume:
            graph = build_graph(store, args, comm)
        rows = {args.model.upper(): train_memory_model(graph, store, args, comm)}
        if args.baseline == "tgat":
            rows["TGAT"] = tgat.train_tgat(graph, tgat_args(args), comm, tag="TGAT ")
        graph.remove()
    if comm.rank == 0:
        val, test = rows[args.model.upper()]
        rows["random"] = ((val[2], val[3]), (test[2], test[3]))
        print(f"last epoch ({plural(args.epochs, 'epoch')}, batch {args.batch_size}, "
              f"{plural(comm.size, 'rank')}):\n{'model':<8} {'val AP':>7} {'val AUC':>7} {'test AP':>7} "
              f"{'test AUC':>8}")
        for name, (v, te) in rows.items():
            print(f"{name:<8} {v[0]:>7.4f} {v[1]:>7.4f} {te[0]:>7.4f} {te[1]:>8.4f}")
        if "TGAT" in rows:
            ours, base = rows[args.model.upper()][1], rows["TGAT"][1]
            print(f"{args.model.upper()} - TGAT on test: AP {ours[0] - base[0]:+.4f}, AUC "
                  f"{ours[1] - base[1]:+.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(run_program(main))
