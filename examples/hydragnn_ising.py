"""Data-parallel training of a PNA network on the Ising data set, served from a DDStore.

The DDStore paper's use case on one machine: every rank holds a chunk of the graphs in a
DDStore, a ``DistributedSampler`` shuffles globally every epoch, and each mini-batch is
one batched one-sided read.  A HydraGNN-style model (a stack of PNA convolutions, mean
pooling and an MLP head) predicts the total Ising energy; gradients are averaged by
``torch.distributed`` (gloo on CPU, NCCL when every rank has a GPU).

Run (the defaults finish in well under two minutes on a 2-core machine)::

    mpiexec -n 4 python examples/hydragnn_ising.py
    mpiexec -n 4 python examples/hydragnn_ising.py --source adios --width 2

Per epoch rank 0 prints the train and validation loss (MSE of the standardised energy),
training samples/s over all ranks, and the per-graph load latency (time to fetch and
collate a mini-batch divided by its graphs) p50/p99 over every rank's batches.

Checkpoint and restart (a job that outlives its allocation)::

    mpiexec -n 4 python examples/hydragnn_ising.py --epochs 6 --checkpoint ck
    mpiexec -n 4 python examples/hydragnn_ising.py --epochs 6 --resume ck

``--checkpoint DIR`` writes, after each epoch, the store (``DIR/store``: the graphs, with
``store.save``, once: they do not change while training) and the training state
(``DIR/epoch-<k>.pt``: model, optimizer, RNG states, target statistics, the loss
history; ``torch.save`` by rank 0).  ``--resume DIR`` restores the store
(``DDStore.restore``, any width), reopens the three splits by name
(``GraphDataset.open``: no data set is generated or read) and the training state of the
last epoch saved (or ``--resume-epoch k``), and goes on from the next epoch: on the same
rank count it prints the same losses, bit for bit, as the run that never stopped (the
``DistributedSampler`` order is a function of the seed, the epoch and the rank count).
On another rank count it resumes too, but each rank's mini-batches (and so the losses)
are those of that rank count.

Reading ahead (``--prefetch K``, default 0)::

    mpiexec -n 4 python examples/hydragnn_ising.py --prefetch 2

wraps the training loader with the store's pipeline to the device
(``GraphDataset.loader(..., prefetch=K, device=...)``, a
:class:`ddstore.device.DevicePrefetcher`): a background thread reads and collates the
next ``K`` mini-batches while the model steps on this one, and each is staged in reused
buffers (pinned, and copied to the GPU on a side stream, with ``--device cuda``).  The
batches, their order and so the losses are those of ``--prefetch 0``
(``tests/test_examples_prefetch.py`` compares them on the CPU); the load latency
printed is then the time the step waited for its batch.
"""
import logging
import os
import shutil
import sys
import tempfile
import time

import numpy as np
from mpi4py import MPI

from ddstore.cli import (ArgumentParser, HelpFormatter, agree_exit, agreed_call, at_least,
                         check_resume, check_width, claim_checkpoint, nothing_to_train,
                         other_settings, output_dir, run_program, saved_epochs, seed)
from ddstore import DDStoreMemoryError
from ddstore.graphs.ising import check_lattice_fits
from ddstore.prefetch import MAX_PREFETCH


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--num-samples", type=at_least(10), default=4000,
                   help="Ising graphs in total (an 80/10/10 split: at least 10)")
    p.add_argument("--epochs", type=at_least(0), default=6)
    p.add_argument("--batch-size", type=at_least(1), default=32, help="graphs per rank per step")
    p.add_argument("--hidden", type=at_least(1), default=24, help="hidden channels")
    p.add_argument("--layers", type=at_least(1), default=2, help="PNA convolution layers")
    p.add_argument("--lr", type=at_least(0, float, above=True), default=3e-3)
    p.add_argument("--seed", type=seed(), default=0)
    p.add_argument("--lattice", type=at_least(2), default=5,
                   help="lattice edge (5 -> 125 atoms)")
    p.add_argument("--width", type=at_least(1), default=None,
                   help="DDStore width, ranks per replica (default: all ranks)")
    p.add_argument("--transport", default="auto", choices=["auto", "rma", "shm"])
    p.add_argument("--source", default="memory", choices=["memory", "pickle", "adios"],
                   help="preload from the lazy in-memory generator, or from PFF/CFF files "
                        "written first by rank 0")
    p.add_argument("--data-dir", type=output_dir, default=None,
                   help="where --source pickle/adios files go (default: a temporary "
                        "directory, removed at the end)")
    p.add_argument("--threads", type=at_least(1, most=os.cpu_count() or 1), default=1,
                   help="torch threads per rank (at most the cores here)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where to train: auto = CUDA when every rank sees a GPU (ranks "
                        "outnumbering the GPUs share them, over gloo), else the CPU")
    p.add_argument("--prefetch", type=at_least(0, most=MAX_PREFETCH), default=0, metavar="K",
                   help="read K training batches ahead through the store's pipeline to "
                        "the device (ddstore.device.DevicePrefetcher: a read-ahead thread, "
                        "reused staging buffers, pinned and copied on a side stream on "
                        "CUDA); 0 = each batch read when asked for, as before")
    p.add_argument("--quiet", action="store_true", help="no progress bars or store log")
    p.add_argument("--checkpoint", type=output_dir, default=None, metavar="DIR",
                   help="after each epoch save the store (once) and the training state "
                        "in DIR")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="restore the store and training state from DIR and continue "
                        "from the next epoch")
    p.add_argument("--resume-epoch", type=at_least(1), default=None,
                   help="with --resume: the epoch whose state to load (default: the "
                        "last one saved)")
    args = p.parse_args(argv)
    check_width(p, args.width)
    if args.resume_epoch is not None and not args.resume:
        p.error("--resume-epoch needs --resume (the directory of the run to go on with)")
    if args.data_dir is not None and args.source == "memory":
        p.error("--data-dir is where --source pickle or adios writes its files; --source "
                "memory writes none")
    return args


def build_model(hidden, layers, deg):
    """HydraGNN-style: node embedding, PNA convolutions, mean pool, MLP head."""
    import torch
    from torch_geometric.nn import PNAConv, global_mean_pool

    class IsingPNA(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(1, hidden)
            self.convs = torch.nn.ModuleList(
                PNAConv(hidden, hidden, aggregators=["mean", "min", "max", "std"],
                        scalers=["identity", "amplification", "attenuation"], deg=deg,
                        edge_dim=1, towers=1, divide_input=False)
                for _ in range(layers))
            self.head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden),
                                            torch.nn.ReLU(),
                                            torch.nn.Linear(hidden, 1))

        def forward(self, batch):
            h = self.embed(batch.x)
            for conv in self.convs:
                h = torch.relu(conv(h, batch.edge_index, batch.edge_attr)) + h
            return self.head(global_mean_pool(h, batch.batch, batch.num_graphs))

    return IsingPNA()


def load_splits(args, comm, store):
    """The 80/10/10 split of the Ising data set as three GraphDatasets."""
    import torch
    import ddstore.graphs as graphs
    full = graphs.ising_dataset(args.num_samples, seed=args.seed, size=args.lattice)
    perm = np.random.default_rng(args.seed).permutation(args.num_samples)
    n_train, n_val = int(0.8 * args.num_samples), int(0.1 * args.num_samples)
    parts = {"train": perm[:n_train], "val": perm[n_train:n_train + n_val],
             "test": perm[n_train + n_val:]}
    subsets = {k: torch.utils.data.Subset(full, v.tolist()) for k, v in parts.items()}
    progress = not args.quiet
    if args.source == "memory":
        return {k: graphs.GraphDataset.from_samples(store, k, s, progress=progress)
                for k, s in subsets.items()}
    tmp = None
    directory = args.data_dir
    if directory is None:
        tmp = comm.bcast(tempfile.mkdtemp(prefix="ddstore-ising-") if comm.rank == 0
                         else None, root=0)
        directory = tmp
    try:
        paths = {}
        error = interrupted = None
        if comm.rank == 0:
            t0 = time.perf_counter()
            try:
                for k, s in subsets.items():
                    if args.source == "pickle":
                        paths[k] = os.path.join(directory, f"{k}-pff")
                        graphs.write_pickle_dir(s, paths[k])
                    else:
                        paths[k] = os.path.join(directory, f"{k}.bp")
                        graphs.write_adios(s, paths[k])
                print(f"rank 0 wrote {args.source} files under {directory} in "
                      f"{time.perf_counter() - t0:.1f} s", flush=True)
            except BaseException as exc:  # told on every rank (Ctrl-C too): no hang
                error = f"{type(exc).__name__}: {exc}"
                interrupted = isinstance(exc, KeyboardInterrupt)
        paths, error, interrupted = comm.bcast((paths, error, interrupted), root=0)
        if interrupted:
            raise KeyboardInterrupt
        if error:  # (every rank has rank 0's error: one line, from rank 0)
            where = "" if args.data_dir is None else f"--data-dir {args.data_dir}: "
            agree_exit(comm, f"{where}writing {args.source} files failed: {error}")
        if args.source == "pickle":
            sets = {k: graphs.GraphDataset.from_pickle_dir(store, k, p, progress=progress)
                    for k, p in paths.items()}
        else:
            sets = {k: graphs.GraphDataset.from_adios(store, k, p, progress=progress)
                    for k, p in paths.items()}
        comm.Barrier()  # every rank has read the files (the loads are collective)
        return sets
    finally:  # (no barrier on a failure: a rank may be elsewhere, the job is ending)
        if tmp is not None and comm.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)


def target_stats(store, comm, name):
    """Mean and std of the graph energies of records ``name`` (each rank reads its own
    rows; the sums are reduced over the whole communicator)."""
    lo, hi = store.local_rows(name)
    y = store.get_records_packed(name, np.arange(lo, hi))[0]["y"].astype(np.float64) \
        if hi > lo else np.zeros((0, 1))
    sums = comm.allreduce(np.array([y.sum(), (y ** 2).sum(), y.size], dtype=np.float64))
    mean = sums[0] / sums[2]
    return float(mean), float(np.sqrt(max(sums[1] / sums[2] - mean ** 2, 1e-12)))


STATE_KEYS = ("num_samples", "batch_size", "hidden", "layers", "lr", "seed", "lattice")


def save_checkpoint(args, comm, store, stored, epoch, model, optimizer, state):
    """After epoch ``epoch``: the store (the first time only: ``stored``) then, by rank
    0, the training state, written under a temporary name and renamed."""
    import torch
    if not stored:
        store.save(os.path.join(args.checkpoint, "store"))
    if comm.rank == 0:
        state = dict(state, epoch=epoch, model=model.module.state_dict(),
                     optimizer=optimizer.state_dict(), torch_rng=torch.get_rng_state(),
                     numpy_rng=numpy_rng_state(), ranks=comm.size,
                     args={k: getattr(args, k) for k in STATE_KEYS})
        name = os.path.join(args.checkpoint, f"epoch-{epoch}.pt")
        torch.save(state, name + ".tmp")
        os.replace(name + ".tmp", name)
    comm.Barrier()
    return True


def numpy_rng_state(state=None):
    """numpy's global RNG state as tensors and Python values (what ``torch.load`` with
    ``weights_only=True`` reads back), or, given such a state, set it."""
    import torch
    if state is None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        return [kind, torch.from_numpy(keys.copy()), int(pos), int(has_gauss),
                float(gauss)]
    kind, keys, pos, has_gauss, gauss = state
    np.random.set_state((kind, keys.numpy(), pos, has_gauss, gauss))


def load_state(args, comm):
    """The training state to resume from (every rank reads it)."""
    import torch
    epochs = saved_epochs(args.resume)  # (checked at the start of main: check_resume)
    if not epochs:  # (removed since)
        raise SystemExit(f"--resume {args.resume}: no epoch-<k>.pt in it")
    epoch = args.resume_epoch if args.resume_epoch is not None else epochs[-1]
    try:  # tensors and Python values only: a checkpoint cannot run code
        state = torch.load(os.path.join(args.resume, f"epoch-{epoch}.pt"),
                           weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- unpickling raises many types
        raise SystemExit(f"--resume {args.resume}: epoch-{epoch}.pt cannot be read as "
                         f"this example's training state ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    if not isinstance(state, dict) or not {"args", "ranks", "model"} <= set(state) or \
            not isinstance(state["args"], dict) or \
            any(not hasattr(args, k) for k in state["args"]):  # (another's settings)
        raise SystemExit(f"--resume {args.resume}: epoch-{epoch}.pt was not written by "
                         f"this example's --checkpoint (another example's checkpoint?)")
    diff = other_settings(args.resume, state["args"], args)
    if diff:
        raise SystemExit(diff)
    if comm.rank == 0 and state["ranks"] != comm.size:
        print(f"resuming a run of {state['ranks']} rank{'s' * (state['ranks'] != 1)} on "
              f"{comm.size}: the mini-batches of each rank (and so the losses) are those "
              f"of {comm.size} rank{'s' * (comm.size != 1)}", flush=True)
    return state


def run_epoch(model, loader, device, mean, std, optimizer=None):
    """One pass; returns (loss sum, graphs, per-graph load latencies in seconds)."""
    import torch

    from ddstore.graphs import timed_batches
    training = optimizer is not None
    model.train(training)
    loss_sum, count, latencies = 0.0, 0, []
    for batch, seconds in timed_batches(loader):
        latencies.append(seconds / batch.num_graphs)
        batch = batch.to(device)
        target = (batch.y.view(-1, 1) - mean) / std
        with torch.set_grad_enabled(training):
            loss = torch.nn.functional.mse_loss(model(batch), target)
        if training:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        loss_sum += float(loss.detach()) * batch.num_graphs
        count += batch.num_graphs
    return loss_sum, count, latencies


def main(argv=None):
    args = parse_args(argv)
    # what each rank finds on its node (files, memory), agreed: a refusal ends every rank
    # before torch or the data start
    check_resume(MPI.COMM_WORLD, args.resume, epoch=args.resume_epoch)
    try:  # (the store's message says "lattice size=", the graphs' own argument)
        check_lattice_fits(args.lattice, name="--lattice ")
        too_big = None
    except DDStoreMemoryError as exc:
        too_big = str(exc)
    agree_exit(MPI.COMM_WORLD, too_big, code=2)
    # (a refusal ends every rank)
    claim_checkpoint(MPI.COMM_WORLD, args.checkpoint, args.resume, epoch=args.resume_epoch)
    import torch
    torch.set_num_threads(max(1, args.threads))
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.utils import degree
    import ddstore
    from ddstore.distributed import init_torch_distributed, rank_order_mean
    from ddstore.graphs import GraphDataset

    comm = MPI.COMM_WORLD
    rank = comm.rank
    if rank == 0 and not args.quiet:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    device = init_torch_distributed(comm, device=args.device)

    state = None
    if args.resume:  # a refusal on any rank: one line from rank 0, every rank ends
        state = agreed_call(comm, load_state, args, comm)
    if state is None:
        store = ddstore.DDStore(comm, width=args.width, transport=args.transport)
    else:  # the graphs come back from the checkpoint, at this rank count and width
        store = ddstore.DDStore.restore(os.path.join(args.resume, "store"), comm,
                                        width=args.width, transport=args.transport)
    with store:
        t0 = time.perf_counter()
        if state is None:
            data = load_splits(args, comm, store)
        else:
            data = {k: GraphDataset.open(store, k) for k in ("train", "val", "test")}
        t_load = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if state is None:
            mean, std = target_stats(store, comm, "train")
        else:  # as saved: the sums' order depends on the ranks that made them
            mean, std = state["mean"], state["std"]
        sample = data["train"][0]
        deg = torch.bincount(degree(sample.edge_index[1], sample.num_nodes,
                                    dtype=torch.long))
        model = build_model(args.hidden, args.layers, deg).to(device)
        if state is not None:
            model.load_state_dict(state["model"])
        model = DistributedDataParallel(model)
        # the gradients summed in rank order: a resumed run's bits are the same at 3
        # ranks or more too (DDP's buckets, laid out anew, change the ring's order)
        model.register_comm_hook(None, rank_order_mean)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            numpy_rng_state(state["numpy_rng"])
        # training: DistributedSampler's global shuffle; val / test: every size-th graph,
        # each graph once (DistributedSampler pads a split to a multiple of the ranks,
        # so its mean counted some graphs twice and changed with the rank count), with the
        # model unwrapped (DDP's forward is a collective: a rank with fewer or no graphs
        # of a split would leave the others waiting in it)
        samplers = {k: torch.utils.data.DistributedSampler(
            d, num_replicas=comm.size, rank=rank, shuffle=True, seed=args.seed)
            if k == "train" else range(rank, len(d), comm.size) for k, d in data.items()}
        loaders = {k: d.loader(args.batch_size, sampler=samplers[k])
                   for k, d in data.items()}
        if args.prefetch:  # the store's pipeline to the device, training batches only
            loaders["train"] = data["train"].loader(
                args.batch_size, sampler=samplers["train"], prefetch=args.prefetch,
                device=device)
        if rank == 0:
            print(f"ranks {comm.size}, width {store.width} ({store.replicas} replica(s)), "
                  f"transport {store.transport}, source "
                  f"{'the checkpoint' if args.resume else args.source}; graphs train "
                  f"{len(data['train'])} val {len(data['val'])} test {len(data['test'])}; "
                  f"preload {t_load:.2f} s; store bytes on rank 0 {store.nbytes()}; "
                  f"energy mean {mean:.2f} std {std:.2f}"
                  + (f"; training batches read {args.prefetch} ahead to {device}"
                     if args.prefetch else ""), flush=True)
            print(f"{'epoch':>5} {'train_loss':>10} {'val_loss':>9} {'samples/s':>10} "
                  f"{'load_p50_us':>11} {'load_p99_us':>11} {'time_s':>7}", flush=True)
        if state is None:
            va_loss, va_n, _ = run_epoch(model.module, loaders["val"], device, mean, std)
            sums = comm.allreduce(np.array([va_loss, va_n]))
            history, first = [float(sums[0] / sums[1])], 1
            if rank == 0:
                print(f"{0:>5} {'-':>10} {history[0]:>9.4f} {'-':>10} {'-':>11} "
                      f"{'-':>11} {'-':>7}  (before training)", flush=True)
        else:
            history, first = list(state["history"]), state["epoch"] + 1
            if rank == 0:
                print(f"resumed from {args.resume} after epoch {state['epoch']} (store "
                      f"restored and reopened in {t_load:.2f} s)", flush=True)
                idle = nothing_to_train(args.resume, state["epoch"], args.epochs,
                                        args.epochs)
                if idle:
                    print(idle, flush=True)
        stored = False
        for epoch in range(first, args.epochs + 1):
            samplers["train"].set_epoch(epoch)
            comm.Barrier()
            t0 = time.perf_counter()
            tr_loss, tr_n, lat = run_epoch(model, loaders["train"], device, mean, std,
                                           optimizer)
            t_train = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            va_loss, va_n, _ = run_epoch(model.module, loaders["val"], device, mean, std)
            sums = comm.allreduce(np.array([tr_loss, tr_n, va_loss, va_n]))
            all_lat = comm.gather(lat, root=0)
            if rank == 0:
                lat_us = np.concatenate([np.asarray(v) for v in all_lat]) * 1e6
                p50, p99 = np.percentile(lat_us, [50, 99])
                val = float(sums[2] / sums[3])
                history.append(val)
                print(f"{epoch:>5} {sums[0] / sums[1]:>10.4f} {val:>9.4f} "
                      f"{sums[1] / t_train:>10.1f} {p50:>11.1f} {p99:>11.1f} "
                      f"{t_train:>7.2f}", flush=True)
            if args.checkpoint:
                stored = save_checkpoint(args, comm, store, stored, epoch, model,
                                         optimizer, {"mean": mean, "std": std,
                                                     "history": comm.bcast(history)})
        te_loss, te_n, _ = run_epoch(model.module, loaders["test"], device, mean, std)
        sums = comm.allreduce(np.array([te_loss, te_n]))
        if rank == 0:
            fell = len(history) > 1 and history[-1] < history[0]
            print(f"test_loss {sums[0] / sums[1]:.4f} (MSE of standardised energy; "
                  f"RMSE {np.sqrt(sums[0] / sums[1]) * std:.2f} energy units)")
            print(f"validation loss {'fell' if fell else 'did NOT fall'}: "
                  f"{history[0]:.4f} -> {history[-1]:.4f}; total "
                  f"{time.perf_counter() - t_start:.1f} s", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(run_program(main))
