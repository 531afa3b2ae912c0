"""Node memory benchmark (:class:`ddstore.temporal.NodeMemory`) against TGL's ``MailBox``
update path re-implemented in torch in the same process.

Run::

    mpiexec -n 2 python -m ddstore.bench.node_memory     # 2 ranks, width 2
    python -m ddstore.bench.node_memory                  # one rank

Events come from :func:`ddstore.temporal.synthetic_stream` (power-law degrees).  A batch
is ``--batch-size`` events (default 600, TGL's); rank ``r`` of ``P`` takes the ``r``-th
contiguous slice of each batch (what ``EdgeBatches(comm=...)`` hands out), so the P ranks
together process the same events as the one-process torch baseline.  Per event: read the
memory and mailbox of its 2 endpoints (``NodeMemory.read``), then write 2 memories and
post 2 mails (``write`` / ``post``, staged), and one collective ``commit()`` per batch.
memory_dim 100, mail_dim ``2 * 100 + 172`` = 372 (TGN on Wikipedia/Reddit), mailbox
sizes ``--mailbox`` (default 1 and 10).  The rows written are fixed random rows (the
model's compute is not what is measured).

The baseline is TGL's ``MailBox`` (``modules/memorys.py``) on rank 0, on the whole batch,
run in the same job batch by batch after ours (the other ranks asleep meanwhile, so both
see the same load on a shared machine):
read = ``index_select`` of memory, memory_ts, mailbox, mailbox_ts; update = ``unique``
keeping the last occurrence per node, ``index_put`` of memory / memory_ts, and the ring
``mailbox[nid, next_mail_pos[nid]] = mail``, ``next_mail_pos = (next_mail_pos + 1) %
size``.  (TGL keeps one mail per node per batch, the last; NodeMemory keeps every mail of
the batch in the ring, up to ``mailbox_size``, in ``(ts, rank, position)`` order.)

``--sampling-ms X`` adds X ms of CPU work after each commit (the sampling of the next
batch, simulated), timed as ``sampling``; ``--pipelined`` commits with ``wait=False`` so
that the commit overlaps it, and ``commit`` is then the call plus the ``wait()`` after the
sampling (until the next read may start).  The ratio to torch leaves the sampling out;
``with_sampling`` is the whole step.

Reported per mailbox size: the median over the warm batches (the first ``--warmup``
skipped) of the slowest rank's time per batch for read, write+post, commit and their
sum, the torch baseline's read, update and sum, and the ratio ours / torch with its
control (the torch step run a second time on every batch: the spread of the two sums
is printed beside the ratio); the bytes
each rank holds (``NodeMemory.nbytes()``) and the same computed for ``--big-nodes``
(default 10 M) nodes at width 2: ``state / width + O(batch)``.  Printed and written as
JSON to ``--out`` (default ``bench_results/node_memory_n<ranks>.json``).
"""
import platform
import time

import numpy as np
from mpi4py import MPI

from ddstore.bench import log, parser, plural, ratio, ratio_text, report_path, \
    write_report
from ddstore.cli import at_least, check_width, int_list, pause

MEMORY_DIM = 100
EDGE_DIM = 172


def _args(argv, prog=None):
    p = parser("node_memory", prog, "ddstore NodeMemory benchmark: read + write/post + "
                                    "commit per batch vs TGL's MailBox in torch", out=None,
               batch_size=600, batch_help="events per batch")
    p.add_argument("--num-nodes", type=at_least(1), default=100_000)
    p.add_argument("--batches", type=at_least(1), default=40,
                   help="batches timed per mailbox size (the first --warmup not counted)")
    p.add_argument("--warmup", type=at_least(0), default=5)
    p.add_argument("--read-calls", type=at_least(0), default=1000,
                   help="calls of read(nodes, out=) timed per size (1, 64, 600 nodes) for "
                        "its fixed cost; 0: not measured")
    p.add_argument("--mailbox", type=int_list(1), default="1,10",
                   help="comma-separated mailbox sizes")
    p.add_argument("--memory-dim", type=at_least(1), default=MEMORY_DIM)
    p.add_argument("--edge-dim", type=at_least(1), default=EDGE_DIM,
                   help="mail_dim = 2 * memory_dim + edge_dim")
    p.add_argument("--width", type=at_least(1), default=None,
                   help="ranks per replica (default: all ranks, one replica)")
    p.add_argument("--transport", default="auto", choices=["auto", "rma", "shm"])
    p.add_argument("--torch-threads", type=at_least(1), default=1,
                   help="torch threads of the baseline (one rank's core)")
    p.add_argument("--big-nodes", type=at_least(1), default=10_000_000,
                   help="node count of the computed per-rank memory (at width 2)")
    p.add_argument("--sampling-ms", type=pause("ms"), default=0.0,
                   help="simulated sampling of the next batch after each commit: this "
                        "many ms of CPU work (numpy sorts), timed as 'sampling'")
    p.add_argument("--sampling-sleep", action="store_true",
                   help="the simulated sampling sleeps instead of computing (what this "
                        "rank's cores would do if the sampling ran elsewhere)")
    p.add_argument("--pipelined", action="store_true",
                   help="commit(wait=False): the commit overlaps the simulated sampling; "
                        "'commit' is then the call plus wait() after the sampling (when "
                        "the next read may start)")
    p.add_argument("--quick", action="store_true",
                   help="a tiny setting (smoke test): 2000 nodes, 8 batches of 60 "
                        "after 2 of warm-up, 100 read calls, where those options are "
                        "not given")
    args = p.parse_args(argv)
    if args.quick:  # its sizes as defaults: an option given explicitly keeps its value
        p.set_defaults(num_nodes=2000, batches=8, warmup=2, batch_size=60, read_calls=100)
        args = p.parse_args(argv)
    check_width(p, args.width)
    return args


def _quiet_barrier(comm):
    """A barrier that sleeps instead of spinning (the torch baseline runs alone)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.001)


def _events(args):
    from ddstore import temporal as tg
    s = tg.synthetic_stream(args.num_nodes, args.batches * args.batch_size, seed=args.seed,
                            edge_dim=1)
    return s.src.astype(np.int64), s.dst.astype(np.int64), np.asarray(s.t, np.float64)


def _batch_nodes(src, dst, t, a, z):
    """Endpoints of events [a, z) interleaved (src0, dst0, src1, ...) and their times."""
    nodes = np.stack([src[a:z], dst[a:z]], axis=1).reshape(-1)
    return nodes, np.repeat(t[a:z], 2)


class _Ours:
    """NodeMemory on every rank; :meth:`step` runs one batch (this rank's slice)."""

    def __init__(self, comm, store, args, S, events, mail_dim):
        from ddstore.temporal import NodeMemory
        rank, size = comm.Get_rank(), comm.Get_size()
        self.comm, self.args, self.events = comm, args, events
        self.mem = mem = NodeMemory(store, f"bench_mem{S}", args.num_nodes,
                                    args.memory_dim, mail_dim, mailbox_size=S)
        per_node = _state_bytes_per_node(args.memory_dim, mail_dim, S, mem.dtype.itemsize)
        # (the state's rows, and the member's 16 bytes of commit counts)
        self.nbytes = comm.allgather((mem.nbytes(), per_node * (mem.hi - mem.lo) + 16))
        rng = np.random.default_rng(args.seed + rank)
        B = args.batch_size
        self.lo, self.hi = (B * rank) // size, (B * (rank + 1)) // size  # slice of a batch
        n = 2 * (self.hi - self.lo)
        self.mem_rows = rng.standard_normal((n, args.memory_dim)).astype(np.float32)
        self.mail_rows = rng.standard_normal((n, mail_dim)).astype(np.float32)
        # read, write+post, commit (call + wait), sampling, the call, the wait
        self.times = np.zeros((args.batches, 6))
        self.work = np.random.default_rng(args.seed).random(20_000)
        self.out = None

    def step(self, b):
        B, mem = self.args.batch_size, self.mem
        nodes, ts = _batch_nodes(*self.events, b * B + self.lo, b * B + self.hi)
        self.comm.Barrier()
        t0 = time.perf_counter()
        self.out = mem.read(nodes, out=self.out)
        t1 = time.perf_counter()
        mem.write(nodes, self.mem_rows, ts)
        mem.post(nodes, self.mail_rows, ts)
        t2 = time.perf_counter()
        mem.commit(wait=not self.args.pipelined)
        t3 = time.perf_counter()
        end = t3 + self.args.sampling_ms / 1e3  # the next batch's sampling (simulated)
        if self.args.sampling_sleep:  # an idle wait (sampling on another core/device)
            time.sleep(self.args.sampling_ms / 1e3)
        while time.perf_counter() < end:
            np.sort(self.work)
        t4 = time.perf_counter()
        mem.wait()  # the next read may start (at once after a blocking commit)
        t5 = time.perf_counter()
        self.times[b] = (t1 - t0, t2 - t1, (t3 - t2) + (t5 - t4), t4 - t3, t3 - t2, t5 - t4)

    def read_calls(self, sizes=(1, 64, 600)):
        """Local: the fixed cost of a read, µs a call of ``read(nodes, out=)`` (the best
        of 3 runs of ``--read-calls`` calls) for ``sizes`` random nodes, beside a numpy
        ``take`` of the same rows of four local arrays of the state's shapes (control)."""
        mem, k = self.mem, self.args.read_calls
        rng = np.random.default_rng(self.args.seed)
        S, dim, mail = mem.mailbox_size, mem.memory_dim, mem.mail_dim
        local = [np.zeros((self.args.num_nodes, dim), np.float32),
                 np.zeros(self.args.num_nodes), np.zeros((self.args.num_nodes, S, mail),
                                                         np.float32),
                 np.zeros((self.args.num_nodes, S))]
        out = {}
        for n in sizes if k else ():
            nodes = rng.integers(0, self.args.num_nodes, n)
            batch = mem.read(nodes)
            ours = _best(lambda: mem.read(nodes, out=batch), k)
            numpy = _best(lambda: [a.take(nodes, axis=0) for a in local], k)
            out[str(n)] = dict(read_us=ours, numpy_take_us=numpy)
        return out

    def finish(self):
        """Collective: remove the state; on rank 0 the slowest rank's times per batch."""
        self.mem.remove()
        every = self.comm.gather(self.times, root=0)
        return np.max(np.stack(every), axis=0) if self.comm.Get_rank() == 0 else None


class _Torch:
    """TGL's MailBox (modules/memorys.py), CPU, the whole batch on one rank."""

    def __init__(self, args, S, events, mail_dim):
        import torch
        N, B = args.num_nodes, args.batch_size
        self.args, self.events, self.S = args, events, S
        self.node_memory = torch.zeros((N, args.memory_dim), dtype=torch.float32)
        self.node_memory_ts = torch.zeros(N, dtype=torch.float32)
        self.mailbox = torch.zeros((N, S, mail_dim), dtype=torch.float32)
        self.mailbox_ts = torch.zeros((N, S), dtype=torch.float32)
        self.next_mail_pos = torch.zeros(N, dtype=torch.long)
        rng = np.random.default_rng(args.seed)
        self.memory = torch.from_numpy(
            rng.standard_normal((2 * B, args.memory_dim)).astype(np.float32))
        self.mail = torch.from_numpy(rng.standard_normal((2 * B, mail_dim)).astype(np.float32))
        self.times = np.zeros((args.batches, 2))
        self.control = np.zeros((args.batches, 2))  # the same step again: the control

    def step(self, b, times=None):
        import torch
        B, S = self.args.batch_size, self.S
        nodes, ts = _batch_nodes(*self.events, b * B, (b + 1) * B)
        t0 = time.perf_counter()
        # prep_input_mails
        idx = torch.from_numpy(nodes)
        mem = self.node_memory.index_select(0, idx)
        mem_ts = self.node_memory_ts.index_select(0, idx)
        mem_input = self.mailbox.index_select(0, idx).reshape(idx.shape[0], -1)
        mail_ts = self.mailbox_ts.index_select(0, idx)
        t1 = time.perf_counter()
        # update_memory + update_mailbox (deliver_to 'self', mail_combine 'last')
        nid = torch.from_numpy(nodes)
        mts = torch.from_numpy(ts).float()
        uni, inv = torch.unique(nid, return_inverse=True)
        perm = torch.arange(inv.size(0), dtype=inv.dtype)
        perm = inv.new_empty(uni.size(0)).scatter_(0, inv, perm)  # last occurrence
        unid = nid[perm]
        self.node_memory[unid] = self.memory[perm]
        self.node_memory_ts[unid] = mts[perm]
        pos = self.next_mail_pos[unid]
        self.mailbox[unid, pos] = self.mail[perm]
        self.mailbox_ts[unid, pos] = mts[perm]
        if S > 1:
            self.next_mail_pos[unid] = torch.remainder(pos + 1, S)
        t2 = time.perf_counter()
        (self.times if times is None else times)[b] = (t1 - t0, t2 - t1)
        return mem, mem_ts, mem_input, mail_ts


def _best(call, k):
    """µs a call of ``call``: the best of 3 runs of ``k`` calls."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(k):
            call()
        best = min(best, time.perf_counter() - t)
    return best / k * 1e6


def _pair(comm, store, args, S, events, mail_dim):
    """Ours (every rank) and torch (rank 0, the others asleep) alternate batch by batch,
    so both see the same load on a shared machine."""
    import torch
    rank = comm.Get_rank()
    ours = _Ours(comm, store, args, S, events, mail_dim)
    base = _Torch(args, S, events, mail_dim) if rank == 0 else None
    threads = torch.get_num_threads()
    torch.set_num_threads(args.torch_threads)
    try:
        for b in range(args.batches):
            ours.step(b)
            if base is not None:
                base.step(b)
                base.step(b, base.control)
            _quiet_barrier(comm)
    finally:
        torch.set_num_threads(threads)
    calls = ours.read_calls()
    return ours.nbytes, ours.finish(), base, calls


def _state_bytes_per_node(memory_dim, mail_dim, S, itemsize=4):
    """memory, memory_ts, mail ring, mail_ts ring, mail_count."""
    return memory_dim * itemsize + 8 + S * mail_dim * itemsize + S * 8 + 8


def _batch_bytes(args, mail_dim, ranks, itemsize=4):
    """O(batch) per rank: the staged updates and their keys (node, rank, position, ts),
    held about three times during a commit (staged, concatenated, received)."""
    per = 2 * args.batch_size // ranks
    return 3 * per * ((args.memory_dim + mail_dim) * itemsize + 2 * 32)


def main(argv=None, prog=None):
    import ddstore
    args = _args(argv, prog)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mail_dim = 2 * args.memory_dim + args.edge_dim
    sizes = list(args.mailbox)
    t0 = time.perf_counter()
    events = _events(args)
    log(comm, f"{args.batches} batches of {args.batch_size} events over "
              f"{args.num_nodes} nodes on {plural(size, 'rank')} (generated in "
              f"{time.perf_counter() - t0:.1f} s); memory_dim {args.memory_dim}, mail_dim "
              f"{mail_dim}, mailbox {sizes}")
    warm = slice(min(args.warmup, args.batches - 1), None)
    results = []
    with ddstore.DDStore(comm, width=args.width or size, transport=args.transport) as store:
        width = store.group_size
        for S in sizes:
            nbytes, ours, base, calls = _pair(comm, store, args, S, events, mail_dim)
            res = None
            if rank == 0:
                med = np.median(ours[warm], axis=0) * 1e3
                tot = float(np.median(ours[warm, :3].sum(axis=1)) * 1e3)  # no sampling
                with_sampling = float(np.median(ours[warm, :4].sum(axis=1)) * 1e3)
                tmed = np.median(base.times[warm], axis=0) * 1e3
                ttot = float(np.median(base.times[warm].sum(axis=1)) * 1e3)
                again = float(np.median(base.control[warm].sum(axis=1)) * 1e3)
                total = ratio(tot, ttot, control=[ttot, again])
                per_node = _state_bytes_per_node(args.memory_dim, mail_dim, S)
                big_state = per_node * args.big_nodes
                big_batch = _batch_bytes(args, mail_dim, 2)
                res = dict(
                    mailbox_size=S, width=width, transport=store.transport,
                    shm_peers=store.shm_peers,
                    ms_per_batch=dict(read=float(med[0]), write_post=float(med[1]),
                                      commit=float(med[2]), commit_call=float(med[4]),
                                      commit_wait=float(med[5]), sampling=float(med[3]),
                                      total=tot, with_sampling=with_sampling),
                    pipelined=bool(args.pipelined), sampling_ms=args.sampling_ms,
                    torch_ms_per_batch=dict(read=float(tmed[0]), update=float(tmed[1]),
                                            total=ttot),
                    torch_control_ms_per_batch=again,
                    ratio_ours_over_torch=total["ratio"], ratio_total=total,
                    ratio_read=float(med[0] / tmed[0]),
                    ratio_update=float((med[1] + med[2]) / tmed[1]),
                    nbytes_per_rank=[int(x[0]) for x in nbytes],
                    nbytes_formula_per_rank=[int(x[1]) for x in nbytes],
                    state_bytes_per_node=per_node, read_calls=calls,
                    big=dict(num_nodes=args.big_nodes, width=2,
                             state_bytes=big_state, state_bytes_per_rank=big_state // 2,
                             batch_bytes_per_rank=big_batch,
                             bytes_per_rank=big_state // 2 + big_batch))
                print(f"mailbox {S:2d}, width {width}: ours {tot:7.2f} ms/batch (read "
                      f"{med[0]:.2f}, write+post {med[1]:.2f}, commit {med[2]:.2f} (call "
                      f"{med[4]:.2f} + wait {med[5]:.2f}), "
                      f"sampling {med[3]:.2f}{' pipelined' if args.pipelined else ''}; with "
                      f"sampling {with_sampling:.2f}); "
                      f"torch {ttot:7.2f} ms (read {tmed[0]:.2f}, update {tmed[1]:.2f}); "
                      f"ours/torch {ratio_text(total)}; "
                      f"{max(x[0] for x in nbytes) / 1e6:.1f} MB/rank; "
                      f"10M nodes at width 2: {res['big']['bytes_per_rank'] / 1e9:.2f} "
                      f"GB/rank", flush=True)
                if calls:
                    print(f"mailbox {S:2d}: one read(nodes, out=) on rank 0, "
                          + ", ".join(f"{n} nodes {c['read_us']:.1f} us (numpy take of the "
                                      f"4 arrays {c['numpy_take_us']:.1f})"
                                      for n, c in calls.items()), flush=True)
            _quiet_barrier(comm)
            results.append(comm.bcast(res, root=0))
    if rank == 0:
        print("\n| mailbox | ours read | write+post | commit | ours total | torch read "
              "| torch update | torch total | ours/torch | control spread | MB/rank |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in results:
            m, q = r["ms_per_batch"], r["torch_ms_per_batch"]
            print(f"| {r['mailbox_size']} | {m['read']:.2f} | {m['write_post']:.2f} | "
                  f"{m['commit']:.2f} | {m['total']:.2f} | {q['read']:.2f} | "
                  f"{q['update']:.2f} | {q['total']:.2f} | {r['ratio_ours_over_torch']:.2f}"
                  f" | {100 * r['ratio_total']['spread']:.0f} % | "
                  f"{max(r['nbytes_per_rank']) / 1e6:.1f} |", flush=True)
        targets = {"target_ratio": 2.0,
                   "meets_2x": bool(size == 2 and all(r["ratio_ours_over_torch"] <= 2.0
                                                      for r in results)),
                   "nbytes_is_state_over_width": all(
                       r["nbytes_per_rank"] == r["nbytes_formula_per_rank"]
                       for r in results)}
        import torch
        report = dict(benchmark="node_memory", ranks=size, num_nodes=args.num_nodes,
                      batch_size=args.batch_size, batches=args.batches,
                      warmup=args.warmup, memory_dim=args.memory_dim, mail_dim=mail_dim,
                      torch_threads=args.torch_threads, torch_version=torch.__version__,
                      host=platform.node(), results=results, targets=targets)
        print(f"targets: {targets}", flush=True)
        write_report(report, report_path(args.out, "node_memory", size), args.seed)
    return 0


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
