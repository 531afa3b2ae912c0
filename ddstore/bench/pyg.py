"""PyG NeighborLoader over the store (ddstore.pyg) benchmark.

Run::

    python -m ddstore.bench.pyg                       # one rank, width 1
    mpiexec -n 2 python -m ddstore.bench.pyg          # two ranks, width 2 (auto and rma)
    mpiexec -n 2 python -m ddstore.bench.pyg --widths 1,2 --scale 0.1

The ogbn-products-shaped :class:`~ddstore.sources.SyntheticNodeGraph` (``--scale 1``:
2,449,029 nodes, 123,718,280 directed edges, 100 float32 features) is put into the store
range-wise (``ddstore.pyg.ranges.load_synthetic``: each rank generates only its ranges).
Then each rank iterates PyG's ``NeighborLoader(data=(feature_store, graph_store),
num_neighbors=[15, 10, 5], batch_size=1024, neighbor_sampler=ddstore's)`` over random
seed nodes (its own stream; one warm-up batch, then ``--batches`` timed ones, each
dropped before the next is drawn) on one thread.  Reported per configuration (width x
transport): batches/s and sampled edges/s per rank (the loader's whole work: sampling,
relabelling, feature and label reads; mean and slowest rank), the share of that time spent
in the sampler, and per rank the peak RSS of loading and of sampling, the peak PSS (RSS
counts the pages of peers' chunks read through shared memory in full -- on one node MPICH's
windows are shared memory with either transport -- while PSS divides them among the ranks
mapping them: the memory the job really uses, per rank), the bytes the store holds, a
batch's own ``x`` and ``y``, and the one-sided traffic of a batch (``rma``, also per option:
MPI_Get calls, round trips and bytes per batch and per remote owner, counted outside the
timed batches; :func:`ddstore.bench.traffic`).

``--options`` times the sampling options (``subgraph_type`` bidirectional and induced,
``weight_attr``, temporal sampling by a node time ``time_attr`` with a time per seed
``input_time``, and ``sample_direction="backward"``) beside PyG's default, each against
the same option of the reference where it runs: ms per batch, the sampler's share and
the ratio to the reference per option and configuration (width x transport).  Every
ratio is printed with its control: the reference (and our directional loader, for the
ratios to it) timed twice in the job; the spread of the two is printed beside the
ratio, so that a change can be told from the noise of a shared machine.  (Backward
sampling is not temporal: PyG's sampler refuses ``time_attr`` with it, and so does
ours.)

``--alone`` measures what the options given cost by themselves, memory above all: it
times only those options (no default loader unless ``directional`` is among them, no
controls, no ``--prefetch`` runs) and, before sampling, each option's preparation
(:func:`_prepare`) frees what none of the options given needs -- for ``backward``, when
no other option reads in-lists, ``build_backward(keep_in_lists=False)``: the out-lists
replace the in-lists; for ``temporal`` alone, the loaded graph's edges are removed
before the time-sorted graph is put; for ``weighted``, the weights' edge attribute is
removed once they are kept in CSC order (the sampler reads only that copy, and PyG's
homogeneous loaders read no edge attribute), so that they are held once.  The peak of
that preparation (both lists are held while the out-lists are built) is reported apart
(``prepare_peak_*``), so that the sampling peak is that of a job holding only what it
samples.  For example::

    mpiexec -n 2 python -m ddstore.bench.pyg --options backward --alone

``--workers 0,2,4`` times the default loader with DataLoader worker processes
(``num_workers``, forked: they read the store's shared memory by load) against the
prefetch thread (``ddstore.prefetch.prefetch(loader, --workers-prefetch)``) and
``num_workers=0``, timed first and again last (the control of the ratios), per rank and
configuration, with ``--step-ms`` for the training step they overlap; where the store's
reads need MPI (``rma``) the loader refuses workers at construction and the refusal is
reported instead.  For example::

    mpiexec -n 2 python -m ddstore.bench.pyg --scale 0.01 --workers 0,2,4 --step-ms 20

The reference is the same ``NeighborLoader`` over PyG's in-memory ``Data`` (every rank
holding the whole graph) where a PyG sampler (pyg-lib or torch-sparse) is installed; where
none is, ``NeighborLoader(Data)`` raises ImportError, and the report says so.  Targets:
per-rank throughput at least the in-memory path's; peak RSS per rank at most 0.6 x
(graph + features) at width 2 over 2 ranks, where graph + features is what the in-memory
``Data`` holds: ``edge_index`` (2 x int64 per directed edge) + ``x`` (float32) + ``y``
(int64), and the options' data when they are run: the weights (float32 per directed
edge) and the node times (int64 per node).  Results are printed and written as JSON under
``--out``.
"""
import os
import platform
import time

import numpy as np
from mpi4py import MPI

from ddstore.bench import exit_on_every_rank, log, parser, plural, ratio, ratio_text, \
    rma_counts, traffic, traffic_text, write_report
from ddstore.cli import at_least, int_list, pause
from ddstore.prefetch import MAX_PREFETCH

MAX_WORKERS = 256  # DataLoader worker processes a --workers entry may ask for


# --options: the sampler keyword arguments of each (the same for ours and PyG's;
# NeighborLoader takes them too, but sample_direction, which only the samplers take)
OPTIONS = {"directional": {}, "bidirectional": {"subgraph_type": "bidirectional"},
           "induced": {"subgraph_type": "induced"}, "weighted": {"weight_attr": "bench_w"},
           "temporal": {"time_attr": "time"},
           "backward": {"sample_direction": "backward"},
           # PyG's BidirectionalNeighborSampler class (ours), on out-lists built as for
           # backward: each hop samples forward and backward and merges the two
           "bidirectional_sampler": {"sampler": "BidirectionalNeighborSampler"}}
TIMES = 1000  # node times and seed times are integers in [0, TIMES)


def _args(argv, prog=None):
    p = parser("pyg", prog, "PyG NeighborLoader over the store vs in memory",
               batch_size=1024, widths_help="comma-separated; auto = all ranks")
    p.add_argument("--scale", type=at_least(0, float, above=True), default=1.0,
                   help="graph size, times ogbn-products'")
    p.add_argument("--fanouts", default="15,10,5", type=int_list(-1),
                   help="neighbours sampled per hop (-1: all)")
    p.add_argument("--batches", type=at_least(1), default=20,
                   help="timed batches per rank and configuration (after one warm-up)")
    p.add_argument("--in-memory", default="auto", choices=["auto", "skip"],
                   help="the NeighborLoader(Data) reference (auto: where a PyG sampler "
                        "is installed)")
    p.add_argument("--prefetch", default="0", type=int_list(0, most=MAX_PREFETCH),
                   help="comma-separated prefetch depths to run (0: the loader alone; k: "
                        "ddstore.prefetch.prefetch(loader, k), a background thread k "
                        "batches ahead)")
    p.add_argument("--workers", default="",
                   type=int_list(0, most=MAX_WORKERS, empty=True),
                   help="comma-separated DataLoader num_workers to time (e.g. 0,2,4; "
                        "empty: none) against the prefetch thread "
                        "(--workers-prefetch) and num_workers=0 (timed twice: the "
                        "control), per configuration; where the store's reads need MPI "
                        "(rma) the loader refuses workers and the refusal is reported")
    p.add_argument("--workers-prefetch", type=at_least(1, most=MAX_PREFETCH), default=2,
                   help="the prefetch thread's depth in the --workers comparison")
    p.add_argument("--step-ms", type=pause("ms"), default=0.0,
                   help="a simulated training step per batch (sleep: the CPU waits as for "
                        "a GPU step), what prefetching overlaps")
    p.add_argument("--options", default="directional",
                   help="comma-separated sampling options to time, ours and the in-memory "
                        "reference's alike: directional (PyG's default), bidirectional, "
                        "induced (subgraph_type), weighted (weight_attr: a float32 weight "
                        "per directed edge, 30 %% of them 0, put range-wise and weighted "
                        "by GraphStore.put_edge_weights), temporal (time_attr: a node "
                        "time in [0, 1000) per node, one per seed as input_time), "
                        "backward (sample_direction='backward', on out-lists built by "
                        "GraphStore.build_backward), bidirectional_sampler (the class "
                        "BidirectionalNeighborSampler, forward and backward merged per "
                        "hop); 'all' for every one")
    p.add_argument("--alone", action="store_true",
                   help="time only the options given (no default loader unless "
                        "'directional' is given, no controls, no prefetch runs) and free "
                        "what they do not need before sampling (backward alone: "
                        "build_backward(keep_in_lists=False); temporal alone: the "
                        "loaded graph's edges removed); the preparation's peak "
                        "memory is reported apart from sampling's")
    p.add_argument("--weighted", action="store_true",
                   help="the same as adding 'weighted' to --options")
    p.add_argument("--profile", action="store_true",
                   help="cProfile the timed batches of our loaders on rank 0 (the "
                        "default one and each option's, each configuration): the top "
                        "functions by cumulative time and their calls per batch, printed "
                        "and written to the JSON")
    args = p.parse_args(argv)
    args.prefetch = list(args.prefetch)
    if args.alone and (len(args.prefetch) > 1 or args.prefetch[0] or args.workers):
        exit_on_every_rank("--alone times each option's loader by itself: no prefetch "
                           "depths or DataLoader workers (give --prefetch 0 and no "
                           "--workers, or drop --alone)")
    args.workers = sorted(set(args.workers) | ({0} if args.workers else set()))
    options = [o for o in args.options.split(",") if o]
    options = list(OPTIONS) if options == ["all"] else options
    if args.weighted and "weighted" not in options:
        options.append("weighted")
    if not options or any(o not in OPTIONS for o in options):
        exit_on_every_rank(f"--options: comma-separated names of {list(OPTIONS)}, or all; "
                           f"got {args.options!r}")
    args.options = options
    if not 0 < args.scale <= 1000 or args.batches < 1 or args.batch_size < 1:
        exit_on_every_rank("--scale must be in (0, 1000], --batches and --batch-size "
                           ">= 1")
    return args


def _pyg_sampler():
    """The PyG sampler library installed, or None."""
    import torch_geometric.typing as t
    if getattr(t, "WITH_PYG_LIB", False):
        return "pyg-lib"
    if getattr(t, "WITH_TORCH_SPARSE", False):
        return "torch-sparse"
    return None


def _option_library(option, lib):
    """The library PyG's in-memory loader samples ``option`` with: pyg-lib has no
    induced subgraphs, for which PyG calls torch-sparse (when installed)."""
    import torch_geometric.typing as t
    if option == "induced" and lib == "pyg-lib":
        return "torch-sparse" if getattr(t, "WITH_TORCH_SPARSE", False) else None
    return lib


def _in_memory_error():
    """What NeighborLoader over an in-memory Data says without a PyG sampler."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    import warnings
    d = Data(x=torch.zeros(3, 1), edge_index=torch.tensor([[0, 1], [1, 2]]))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG's "install pyg-lib" deprecation note
            next(iter(NeighborLoader(d, num_neighbors=[1], batch_size=1)))
    except ImportError as exc:
        return f"ImportError: {exc}"
    return None


def _profile_rows(prof, batches, top=25):
    """The ``top`` functions of a cProfile run by cumulative time: name, calls per
    batch, own and cumulative ms per batch."""
    import pstats
    st = pstats.Stats(prof).stats
    rows = sorted(st.items(), key=lambda kv: -kv[1][3])[:top]
    return [dict(function=f"{os.path.basename(k[0])}:{k[1]}({k[2]})",
                 calls_per_batch=v[1] / batches, own_ms_per_batch=1e3 * v[2] / batches,
                 cum_ms_per_batch=1e3 * v[3] / batches) for k, v in rows]


def _read_ahead(args, comm, store, data, fanouts, seeds):
    """:func:`ddstore.bench.device.read_ahead` over ``--batches`` batches of the
    NeighborLoader (the read time per batch, the ``--step-ms`` steps alone, read then
    step, the epoch with the largest ``--prefetch`` depth, or 2 where none is >= 1, read
    ahead in a thread: its ratio to the steps alone and the overlap)."""
    import itertools

    import torch
    from torch_geometric.loader import NeighborLoader

    from ddstore import pyg as dpyg
    from ddstore.bench.device import read_ahead
    sampler = dpyg.NeighborSampler(data.graph_store, num_neighbors=fanouts)

    def make():
        return itertools.islice(NeighborLoader(
            data.pyg, num_neighbors=fanouts, neighbor_sampler=sampler,
            input_nodes=torch.from_numpy(seeds), batch_size=args.batch_size),
            args.batches)
    return read_ahead(make, args.step_ms, max(args.prefetch) or 2, store=store,
                      barrier=comm.Barrier)


def _time_loader(loader, batches, sampler, step_s=0.0, profile=None, watch=None, warm=1,
                 counts=None):
    """(seconds, sampler seconds, sampled edges, sampled nodes) of ``batches`` batches
    after ``warm`` warm-up batches.  ``counts`` (a list): ``(before, after)``
    :func:`~ddstore.bench.rma_counts` of the timed batches is appended to it (read
    outside the timed region).  Each batch is dropped before the next is drawn, as a
    training step that ends with ``del batch`` does (a bare ``for batch in loader`` keeps
    the previous batch alive while the next is built: one batch more at the peak).
    ``watch`` (a :class:`~ddstore.bench.memory.MemoryWatch`): sampled while each batch
    is alive (its time not counted), so that the peak PSS does not depend on where the
    watch's periodic samples fall."""
    spent = [0.0]
    if sampler is not None:
        inner = sampler.sample_from_nodes

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t
        sampler.sample_from_nodes = timed
    it = iter(loader)
    for _ in range(warm):
        next(it)
    spent[0] = 0.0
    edges = nodes = 0
    paused = 0.0
    before = rma_counts() if counts is not None else None
    t0 = time.perf_counter()
    if profile is not None:
        profile.enable()
    for _ in range(batches):
        b = next(it)
        edges += int(b.edge_index.size(1))
        nodes += int(b.num_nodes)
        if watch is not None:
            t = time.perf_counter()
            watch.sample()
            paused += time.perf_counter() - t
        del b
        if step_s:
            time.sleep(step_s)
    if profile is not None:
        profile.disable()
    secs = time.perf_counter() - t0 - paused
    if counts is not None:
        counts.append((before, rma_counts()))
    return secs, spent[0], edges, nodes


def _edge_weights(a, b):
    """Weights of directed edges ``[a, b)`` (put order: each undirected edge, then its
    reverse): in [0.1, 2) from a hash of the id, 0 for 30 % of them."""
    h = (np.arange(a, b, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    w = (h % np.uint64(1000)).astype(np.float32) / 500 + np.float32(0.1)
    w[(h >> np.uint64(10)) % np.uint64(10) < 3] = 0
    return w


def _put_weights(comm, store, data, keep_attr=True):
    """Collective: weight the loaded graph (:func:`_edge_weights`, put range-wise, kept in
    CSC order by ``GraphStore.put_edge_weights``); without ``keep_attr``, the edge
    attribute is removed once they are (the sampler reads only the CSC copy, and PyG's
    homogeneous loaders no edge attribute): the weights are then held once.  Returns
    (seconds, bytes of weights held per rank)."""
    from ddstore import partition
    from ddstore import pyg as dpyg
    gs, fs = data.graph_store, data.feature_store
    t0 = time.perf_counter()
    lo, hi = partition(gs.num_edges(None), comm.Get_size(), comm.Get_rank())
    fs.put_range(lambda a, b: _edge_weights(lo + a, lo + b), (lo, hi), dpyg.EDGES,
                 OPTIONS["weighted"]["weight_attr"])
    gs.put_edge_weights(OPTIONS["weighted"]["weight_attr"])
    if not keep_attr:
        fs.remove_tensor(group_name=dpyg.EDGES,
                         attr_name=OPTIONS["weighted"]["weight_attr"])
    put_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    attr = OPTIONS["weighted"]["weight_attr"]
    wvar = [v for v in store.variables() if (v.endswith("/w") and "/csc/" in v) or
            (v.startswith(f"{gs.name}/edge/") and v.endswith(f"/{attr}"))]
    return put_s, int(sum(store.nbytes(v) for v in wvar))


def _node_times(a, b):
    """Times of nodes ``[a, b)`` (the temporal option's ``time_attr``): int64 in
    ``[0, TIMES)`` from a hash of the id."""
    h = (np.arange(a, b, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return (h % np.uint64(TIMES)).astype(np.int64)


def _seed_times(args, rank, count):
    """This rank's seed times (``input_time`` of the temporal option)."""
    return np.random.default_rng([args.seed, rank, 1]).integers(0, TIMES, count)


def _put_times(comm, store, shape):
    """Collective: the temporal option's graph store: the node times
    (:func:`_node_times`) and the same edges as the loaded graph (each undirected edge,
    then its reverse), put range-wise under the name ``"bench_t"`` into a GraphStore
    sorted by that time.  Returns (graph store, seconds, bytes per rank)."""
    from ddstore import partition
    from ddstore import pyg as dpyg
    from ddstore.pyg.ranges import edge_columns, read_edges
    rank, size = comm.Get_rank(), comm.Get_size()
    n, before = shape.num_nodes, store.nbytes()
    t0 = time.perf_counter()
    lo, hi = partition(n, size, rank)
    fs = dpyg.FeatureStore(store, "bench_t")
    fs.put_range(lambda a, b: _node_times(lo + a, lo + b), (lo, hi), None,
                 OPTIONS["temporal"]["time_attr"])
    gs = dpyg.GraphStore(store, "bench_t", time_attr=OPTIONS["temporal"]["time_attr"])
    elo, ehi = partition(shape.num_edges, size, rank)
    # this rank's edges as load_synthetic reads them (int32 ids), each then its reverse
    columns = edge_columns(*read_edges(shape, elo, ehi, n, None), add_reverse=True)
    gs.put_edge_range(columns, rows=(2 * elo, 2 * ehi), edge_type=None, size=(n, n))
    put_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    return gs, put_s, store.nbytes() - before


#: options that read only out-lists (GraphStore.build_backward): with --alone and only
#: such options, the in-lists are dropped before sampling
OUT_LISTS_ONLY = frozenset({"backward"})
#: options that read none of the loaded graph's lists (temporal samples a graph store of
#: its own, sorted by time): with --alone and only such options, the loaded graph's edges
#: are removed before theirs are put
OWN_GRAPH_ONLY = frozenset({"temporal"})


def _prepare(option, args, comm, store, data, shape):
    """Collective: make the store ready to sample ``option`` (its weights, times or
    out-lists); with ``--alone``, also free what none of ``args.options`` needs.
    Returns what the report keeps of it: ``{"weights": (seconds, bytes per rank)}``,
    ``{"graph_store": gs, "times": (seconds, bytes per rank)}`` or ``{}``."""
    if option == "weighted":  # alone: the weights held once (no option reads the attr)
        return {"weights": _put_weights(comm, store, data, keep_attr=not args.alone)}
    if option == "temporal":
        if args.alone and OWN_GRAPH_ONLY.issuperset(args.options):
            data.graph_store.remove_edge_index(edge_type=None, layout="coo")
        gs, put_s, nbytes = _put_times(comm, store, shape)
        return {"graph_store": gs, "times": (put_s, nbytes)}
    if option in ("backward", "bidirectional_sampler") and \
            not data.graph_store.has_backward():
        keep = not (args.alone and OUT_LISTS_ONLY.issuperset(args.options))
        data.graph_store.build_backward(keep_in_lists=keep)
    return {}


def _per_batch(comm, batches, timing):
    """Means over ranks of one option's ``_time_loader`` numbers, per batch."""
    per = comm.allgather(timing[:3])
    return dict(ms_per_batch=1e3 * float(np.mean([p[0] for p in per])) / batches,
                batches_per_s_per_rank=float(np.mean([batches / p[0] for p in per])),
                edges_per_s_per_rank=float(np.mean([p[2] / p[0] for p in per])),
                sampler_share=float(np.mean([p[1] / p[0] for p in per])),
                edges_per_batch=float(np.mean([p[2] for p in per])) / batches)


def _loader_kwargs(option, times):
    """NeighborLoader keywords of an option: its sampler's but ``sample_direction``
    (only samplers take it), and the seeds' times (``input_time``) when temporal."""
    import torch
    kw = {k: v for k, v in OPTIONS[option].items()
          if k not in ("sample_direction", "sampler")}
    if "time_attr" in kw:
        kw["input_time"] = torch.from_numpy(times)
    return kw


def _time_option(args, comm, data, fanouts, seeds, times, option, graph_store=None,
                 raw=None):
    """Collective: our loader with one of :data:`OPTIONS` (over ``graph_store``, default
    the loaded one), timed as the plain one; ``raw`` (a list): this rank's
    :func:`_time_loader` numbers are appended to it."""
    import torch
    from torch_geometric.loader import NeighborLoader

    from ddstore import pyg as dpyg
    gs = graph_store or data.graph_store
    kw = dict(OPTIONS[option])
    sampler = getattr(dpyg, kw.pop("sampler", "NeighborSampler"))(
        gs, num_neighbors=fanouts, **kw)
    loader = NeighborLoader((data.feature_store, gs), num_neighbors=fanouts,
                            neighbor_sampler=sampler, input_nodes=torch.from_numpy(seeds),
                            batch_size=args.batch_size, **_loader_kwargs(option, times))
    comm.Barrier()
    prof = None
    if args.profile and comm.Get_rank() == 0:
        import cProfile
        prof = cProfile.Profile()
    counts = []
    timing = _time_loader(loader, args.batches, sampler, profile=prof, watch=args.watch,
                          counts=counts)
    if raw is not None:
        raw.append(timing)
    out = _per_batch(comm, args.batches, timing)
    out["rma"] = traffic(comm, *counts[0], args.batches, gs.store)
    if prof is not None:
        out["profile"] = _profile_rows(prof, args.batches)
    return out


def _time_workers(args, comm, data, fanouts):
    """Collective: our default loader with DataLoader workers (each of ``--workers``,
    ``num_workers=0`` first and again last: the control) and with the prefetch thread
    (``ddstore.prefetch.prefetch(loader, --workers-prefetch)``), timed in turn over the
    same seeds.  Each run's warm-up takes the batches its workers (thread) may have made
    ahead while the first was awaited (``2 * num_workers + 1``; ``depth + 1``), so that
    the timed batches are made at the steady rate.  Returns ``{run: {batches_per_s_per_rank,
    batches_per_s_by_rank, edges_per_batch, over_workers_0}}`` (runs ``"0"``, ``"2"``...,
    ``"prefetch"``), or ``{run: {refused: message}}`` where the loader refuses workers
    (the store's reads need MPI)."""
    import torch
    from torch_geometric.loader import NeighborLoader

    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    from ddstore.prefetch import prefetch
    warm_of = {n: 2 * n + 1 for n in args.workers}
    warm_of["prefetch"] = args.workers_prefetch + 1
    seeds = torch.from_numpy(np.random.default_rng([args.seed, comm.Get_rank(), 38])
                             .integers(0, data.num_nodes, (args.batches + max(
                                 warm_of.values())) * args.batch_size))
    out, control = {}, []
    for run in [0] + [n for n in args.workers if n] + ["prefetch", 0]:
        sampler = dpyg.NeighborSampler(data.graph_store, num_neighbors=fanouts)
        try:
            loader = NeighborLoader(data.pyg, num_neighbors=fanouts,
                                    neighbor_sampler=sampler, input_nodes=seeds,
                                    batch_size=args.batch_size,
                                    num_workers=0 if run == "prefetch" else run)
        except DDStoreValueError as exc:  # decided from the store: alike on every rank
            out[str(run)] = {"refused": str(exc)}
            continue
        if run == "prefetch":
            loader = prefetch(loader, args.workers_prefetch)
        comm.Barrier()
        secs, _, edges, _ = _time_loader(loader, args.batches, None, args.step_ms / 1e3,
                                         warm=warm_of[run])
        del loader, sampler
        per = comm.allgather((args.batches / secs, edges / args.batches))
        res = dict(batches_per_s_per_rank=float(np.mean([p[0] for p in per])),
                   batches_per_s_by_rank=[float(p[0]) for p in per],
                   edges_per_batch=float(np.mean([p[1] for p in per])))
        if run == 0:
            control.append(res["batches_per_s_per_rank"])
            if len(control) == 2:
                out["0"]["control"] = res
                continue
        out[str(run)] = res
    for v in out.values():
        if "refused" not in v:
            v["over_workers_0"] = ratio(v["batches_per_s_per_rank"], control[0], control)
    return out


def _workers_text(by_workers, depth):
    """One configuration's --workers comparison, as printed."""
    parts = []
    for run, v in by_workers.items():
        name = (f"prefetch thread (depth {depth})" if run == "prefetch" else
                f"num_workers={run}")
        if "refused" in v:
            parts.append(f"{name}: refused ({v['refused'][:110]}...)")
        else:
            parts.append(f"{name} {v['batches_per_s_per_rank']:.2f} "
                         f"({ratio_text(v['over_workers_0'])})")
    return "; ".join(parts)


def _profile_text(rows):
    """A profile's rows as printed: ms per batch cumulative / own, calls per batch."""
    return "\n".join(f"  {r['cum_ms_per_batch']:8.1f} {r['own_ms_per_batch']:8.1f}"
                     f" {r['calls_per_batch']:7.1f}  {r['function']}" for r in rows)


def _time_in_memory(args, comm, d, fanouts, seeds, times, option):
    """Collective: PyG's NeighborLoader over the in-memory ``d`` with ``option``, timed
    twice (the second run: the control); ``(first, second)`` as :func:`_per_batch`, or
    ``({"error": ...}, None)`` where PyG's sampler refuses the option."""
    import torch
    from torch_geometric.loader import NeighborLoader
    from torch_geometric import sampler as pyg_samplers
    kw = dict(OPTIONS[option])
    cls = getattr(pyg_samplers, kw.pop("sampler", "NeighborSampler"))
    runs = []
    for _ in range(2):
        try:
            sampler = cls(d, num_neighbors=fanouts, **kw) \
                if "sample_direction" in kw or cls is not pyg_samplers.NeighborSampler \
                else None
            loader = NeighborLoader(d, num_neighbors=fanouts, batch_size=args.batch_size,
                                    input_nodes=torch.from_numpy(seeds),
                                    neighbor_sampler=sampler,
                                    **_loader_kwargs(option, times))
            comm.Barrier()
            timing = _time_loader(loader, args.batches, None)
        except Exception as exc:  # noqa: BLE001 -- the library lacks the option
            return {"error": f"{type(exc).__name__}: {exc}"}, None
        runs.append(_per_batch(comm, args.batches, timing))
        del loader, sampler
    return runs


def main(argv=None, prog=None):
    args = _args(argv, prog)
    import torch
    from torch_geometric.loader import NeighborLoader

    import ddstore
    from ddstore import pyg as dpyg
    from ddstore.bench.memory import MemoryWatch, current_rss
    from ddstore.prefetch import prefetch
    from ddstore.pyg import load_synthetic
    from ddstore.sources.synthetic_nodes import SyntheticNodeGraph
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    fanouts = list(args.fanouts)
    shape = SyntheticNodeGraph(scale=args.scale, seed=args.seed)
    n, e2, f = shape.num_nodes, 2 * shape.num_edges, shape.num_features
    data_bytes = {"edge_index": 2 * 8 * e2, "x": 4 * n * f, "y": 8 * n}
    if "weighted" in args.options:  # what the in-memory Data holds for the options too
        data_bytes["weights"] = 4 * e2
    if "temporal" in args.options:
        data_bytes["node_times"] = 8 * n
    total_bytes = sum(data_bytes.values())
    widths = [size] if args.widths == "auto" else \
        [int(w) for w in args.widths.split(",") if w]
    bad = [w for w in widths if w < 1 or size % w]
    if bad:
        exit_on_every_rank(f"--widths {bad}: a width must divide the {size} "
                           f"rank{'s' * (size != 1)}")
    transports = [t for t in args.transports.split(",") if t]
    log(comm, f"graph: {shape}; {e2} directed edges; in-memory Data "
              f"({' + '.join(data_bytes)}) "
              f"{total_bytes / 1e9:.2f} GB; {plural(size, 'rank')}, NeighborLoader "
              f"{fanouts}, batch {args.batch_size}, {args.batches} timed batches per rank")
    base_rss = comm.allgather(current_rss())
    log(comm, f"RSS per rank before loading (Python, torch, PyG, MPI): "
              f"{max(base_rss) / 1e9:.2f} GB")
    seeds = np.random.default_rng([args.seed, rank]).integers(
        0, n, (args.batches + 1) * args.batch_size)
    times = _seed_times(args, rank, len(seeds))
    watch = args.watch = MemoryWatch()
    results = []
    for width in widths:
        for transport in (["auto"] if width == 1 else transports):
            watch.phase()
            with ddstore.DDStore(comm, width=width, transport=transport) as store:
                comm.Barrier()
                t0 = time.perf_counter()
                data = load_synthetic(store, scale=args.scale, seed=args.seed)
                load_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                mem_load = watch.phase()
                by_depth, profile_rows = {}, None
                for depth in ([] if args.alone else args.prefetch):
                    sampler = dpyg.NeighborSampler(data.graph_store, num_neighbors=fanouts)
                    loader = NeighborLoader(data.pyg, num_neighbors=fanouts,
                                            neighbor_sampler=sampler,
                                            input_nodes=torch.from_numpy(seeds),
                                            batch_size=args.batch_size)
                    if depth:
                        loader = prefetch(loader, depth)
                    comm.Barrier()
                    prof = None
                    if args.profile and rank == 0 and depth == args.prefetch[0]:
                        import cProfile
                        prof = cProfile.Profile()
                    counts = []
                    by_depth[depth] = _time_loader(loader, args.batches, sampler,
                                                   args.step_ms / 1e3, prof, watch,
                                                   counts=counts)
                    if depth == args.prefetch[0]:
                        rma = traffic(comm, *counts[0], args.batches, store)
                    if prof is not None:
                        profile_rows = _profile_rows(prof, args.batches)
                    del loader, sampler
                read_ahead_res = None
                if args.step_ms > 0 and not args.alone:  # issue 44 item 5's measurement
                    read_ahead_res = _read_ahead(args, comm, store, data, fanouts, seeds)
                by_workers = (_time_workers(args, comm, data, fanouts)
                              if args.workers and not args.alone else None)
                by_option = {} if args.alone else {
                    "directional": dict(_per_batch(comm, args.batches,
                                                   by_depth[args.prefetch[0]]), rma=rma)}
                prepared, raw, mem_prepare = {}, [], None
                for option in args.options:
                    prepared.update(_prepare(option, args, comm, store, data, shape))
                    if args.alone:  # every option prepared before any is timed
                        continue
                    if option != "directional":
                        by_option[option] = _time_option(
                            args, comm, data, fanouts, seeds, times, option,
                            prepared.get("graph_store") if option == "temporal" else None)
                if args.alone:
                    mem_prepare = watch.phase()
                    for option in args.options:
                        by_option[option] = _time_option(
                            args, comm, data, fanouts, seeds, times, option,
                            prepared.get("graph_store") if option == "temporal" else None,
                            raw)
                    by_depth[args.prefetch[0]] = raw[0]  # the first option's, reported
                    rma = by_option[args.options[0]]["rma"]
                secs, sample_s, edges, nodes = by_depth[args.prefetch[0]]
                depth_bps = {d: args.batches / v[0] for d, v in by_depth.items()}
                weights, graph_store = prepared.get("weights"), prepared.get("graph_store")
                if graph_store is not None:
                    times_s, times_bytes = prepared["times"]
                if len(by_option) > 1 and not args.alone:  # the control of the ratios
                    by_option["directional"]["control"] = _time_option(
                        args, comm, data, fanouts, seeds, times, "directional")
                mem_sample = watch.phase()
                held = store.nbytes()
                shm_peers = store.shm_peers
                per = comm.allgather(dict(
                    secs=secs, sample_s=sample_s, edges=edges, nodes=nodes, held=held,
                    load_peak_rss=mem_load["peak_rss"], rss_after_load=mem_load["rss"],
                    sample_peak_rss=mem_sample["peak_rss"],
                    load_peak_pss=mem_load["peak_pss"],
                    sample_peak_pss=mem_sample["peak_pss"], depth_bps=depth_bps,
                    prepare_peak_rss=None if mem_prepare is None else
                    mem_prepare["peak_rss"],
                    prepare_peak_pss=None if mem_prepare is None else
                    mem_prepare["peak_pss"]))
                del data
            peak = [max(p["load_peak_rss"], p["sample_peak_rss"]) for p in per]
            res = dict(
                width=width, transport=transport, shm_peers=shm_peers, load_s=load_s,
                batches_per_s_per_rank=float(np.mean([args.batches / p["secs"]
                                                      for p in per])),
                step_ms=args.step_ms,
                batches_per_s_per_rank_by_prefetch={
                    d: float(np.mean([p["depth_bps"][d] for p in per]))
                    for d in args.prefetch},
                edges_per_s_per_rank=float(np.mean([p["edges"] / p["secs"] for p in per])),
                edges_per_s_slowest_rank=float(min(p["edges"] / p["secs"] for p in per)),
                sampler_share=float(np.mean([p["sample_s"] / p["secs"] for p in per])),
                edges_per_batch=float(np.mean([p["edges"] for p in per]) / args.batches),
                nodes_per_batch=float(np.mean([p["nodes"] for p in per]) / args.batches),
                batch_feature_bytes=float(np.mean([p["nodes"] for p in per]) /
                                          args.batches * (4 * f + 8)),
                store_bytes_per_rank=[p["held"] for p in per],
                load_peak_rss_per_rank=[p["load_peak_rss"] for p in per],
                rss_after_load_per_rank=[p["rss_after_load"] for p in per],
                sample_peak_rss_per_rank=[p["sample_peak_rss"] for p in per],
                peak_rss_per_rank=peak,
                load_peak_pss_per_rank=[p["load_peak_pss"] for p in per],
                sample_peak_pss_per_rank=[p["sample_peak_pss"] for p in per],
                peak_rss_over_data=max(peak) / total_bytes,
                store_bytes_over_data=max(p["held"] for p in per) / total_bytes)
            res["rma"] = rma  # the reported loader's one-sided traffic per batch
            res["by_option"] = by_option
            if by_workers is not None:
                res["by_workers"] = by_workers
                res["workers_prefetch_depth"] = args.workers_prefetch
                log(comm, f"width {width} {transport:4s} DataLoader workers (batches/s per "
                          f"rank, x num_workers=0; step {args.step_ms:g} ms): "
                          + _workers_text(by_workers, args.workers_prefetch))
            if read_ahead_res is not None:
                from ddstore.bench.device import read_ahead_text
                res["read_ahead"] = read_ahead_res
                log(comm, f"width {width} {transport:4s} reading ahead (rank 0): "
                          + read_ahead_text(read_ahead_res))
            if args.alone:
                res["alone"] = list(args.options)
                res["prepare_peak_rss_per_rank"] = [p["prepare_peak_rss"] for p in per]
                res["prepare_peak_pss_per_rank"] = [p["prepare_peak_pss"] for p in per]
                log(comm, f"width {width} {transport:4s} alone ({', '.join(args.options)}"
                          f"; the summary below is {args.options[0]}'s): peak PSS "
                          f"preparing {max(res['prepare_peak_pss_per_rank']) / 1e9:.2f} GB "
                          f"(RSS {max(res['prepare_peak_rss_per_rank']) / 1e9:.2f} GB); "
                          + "; ".join(f"{o} {v['ms_per_batch']:.1f} ms/batch "
                                      f"({100 * v['sampler_share']:.0f} % sampler)"
                                      for o, v in by_option.items()))
            if args.profile and rank == 0:  # (--alone: no default loader's profile)
                if profile_rows is not None:
                    res["profile"] = profile_rows
                    log(comm, f"width {width} {transport}: profile of a batch (rank 0; ms "
                              f"per batch cumulative / own, calls per batch):\n" +
                              _profile_text(profile_rows))
                for option, q in by_option.items():
                    if "profile" in q:
                        log(comm, f"width {width} {transport}: profile of a {option} "
                                  f"batch:\n" + _profile_text(q["profile"]))
            if weights is not None:
                res["weights_put_s"], res["weights_bytes_per_rank"] = weights
            if graph_store is not None:
                res["times_put_s"], res["times_graph_bytes_per_rank"] = times_s, \
                    comm.allgather(times_bytes)
            if len(by_option) > 1 and not args.alone:
                plain = by_option["directional"]
                control = [plain["ms_per_batch"], plain["control"]["ms_per_batch"]]
                for v in by_option.values():
                    v["over_directional"] = ratio(v["ms_per_batch"], plain["ms_per_batch"],
                                                  control)
                log(comm, f"width {width} {transport:4s} by option (ms/batch per rank, "
                          f"x directional, sampler share): " + "; ".join(
                              f"{o} {v['ms_per_batch']:.1f} ms "
                              f"({ratio_text(v['over_directional'])}"
                              f", {100 * v['sampler_share']:.0f} %)"
                              for o, v in by_option.items())
                          + ("" if weights is None else
                             f"; weights put and ordered in {weights[0]:.1f} s, "
                             f"{weights[1] / 1e9:.2f} GB/rank"))
            results.append(res)
            log(comm, f"width {width} {transport:4s}: {res['batches_per_s_per_rank']:6.2f} "
                      f"batches/s, {res['edges_per_s_per_rank'] / 1e6:6.2f} M sampled "
                      f"edges/s per rank (slowest {res['edges_per_s_slowest_rank'] / 1e6:.2f}"
                      f"; sampler {100 * res['sampler_share']:.0f} % of it); "
                      f"{res['edges_per_batch'] / 1e3:.0f} k edges/batch (its x and y: "
                      f"{res['batch_feature_bytes'] / 1e9:.2f} GB); store "
                      f"{max(res['store_bytes_per_rank']) / 1e9:.2f} GB/rank "
                      f"({res['store_bytes_over_data']:.2f} x graph + features); peak RSS "
                      f"load {max(res['load_peak_rss_per_rank']) / 1e9:.2f} GB (after: "
                      f"{max(res['rss_after_load_per_rank']) / 1e9:.2f} GB), sampling "
                      f"{max(res['sample_peak_rss_per_rank']) / 1e9:.2f} GB "
                      f"({res['peak_rss_over_data']:.2f} x graph + features); peak PSS load "
                      f"{max(res['load_peak_pss_per_rank']) / 1e9:.2f} GB, sampling "
                      f"{max(res['sample_peak_pss_per_rank']) / 1e9:.2f} GB; loaded in "
                      f"{load_s:.1f} s")
            log(comm, f"width {width} {transport:4s}: {traffic_text(res['rma'])}")
            if len(args.prefetch) > 1 or args.prefetch != [0]:
                log(comm, f"width {width} {transport:4s}: batches/s per rank by prefetch "
                          f"depth (step {args.step_ms:g} ms): " + ", ".join(
                              f"{d}: {v:.2f}" for d, v in
                              res["batches_per_s_per_rank_by_prefetch"].items()))
    watch.stop()

    # the reference: NeighborLoader over PyG's in-memory Data on every rank
    lib = _pyg_sampler()
    in_memory = {"sampler_library": lib}
    if lib is None:
        in_memory["available"] = False
        in_memory["reason"] = ("no PyG sampler installed (pyg-lib or torch-sparse): "
                               + (_in_memory_error() or "?"))
        log(comm, f"in-memory NeighborLoader(Data): not run: {in_memory['reason']}")
    elif args.in_memory == "skip":
        in_memory["available"] = False
        in_memory["reason"] = "skipped (--in-memory skip)"
    else:
        from torch_geometric.data import Data
        watch = MemoryWatch()
        x = torch.from_numpy(shape.features(0, n))
        y = torch.from_numpy(shape.labels(0, n))
        src, dst = shape.edges(0, shape.num_edges)
        ei = np.empty((2, e2), dtype=np.int64)
        ei[0, 0::2], ei[1, 0::2], ei[0, 1::2], ei[1, 1::2] = src, dst, dst, src
        del src, dst
        d = Data(x=x, y=y, edge_index=torch.from_numpy(ei), num_nodes=n)
        if "weighted" in args.options:
            d[OPTIONS["weighted"]["weight_attr"]] = torch.from_numpy(_edge_weights(0, e2))
        if "temporal" in args.options:
            d[OPTIONS["temporal"]["time_attr"]] = torch.from_numpy(_node_times(0, n))
        # the default loader first (its peak is the in-memory path's), every option
        # twice: the second run is the control printed beside the ratios
        by_option, controls = {}, {}
        for option in ["directional"] + [o for o in args.options if o != "directional"]:
            by_option[option], controls[option] = _time_in_memory(
                args, comm, d, fanouts, seeds, times, option)
            if option == "directional":
                mem = watch.phase()
                watch.stop()
        plain = by_option["directional"]
        per = comm.allgather(mem["peak_rss"])
        in_memory.update(
            available=True, batches_per_s_per_rank=plain["batches_per_s_per_rank"],
            edges_per_s_per_rank=plain["edges_per_s_per_rank"],
            peak_rss_per_rank=per, by_option=by_option)
        for option, again in controls.items():
            if again is not None:
                by_option[option]["control"] = again
            by_option[option]["sampler_library"] = _option_library(option, lib)
        log(comm, f"in-memory NeighborLoader(Data) ({lib}): "
                  f"{in_memory['batches_per_s_per_rank']:.2f} batches/s, "
                  f"{in_memory['edges_per_s_per_rank'] / 1e6:.2f} M sampled edges/s per "
                  f"rank; peak RSS {max(per) / 1e9:.2f} GB" + "".join(
                      f"; {o}: {v['error']}" for o, v in by_option.items() if "error" in v))
        del d, x, y, ei
        # ours over the in-memory loader, per rank, per option and configuration
        for r in results:
            over = {o: ratio(v["batches_per_s_per_rank"], by_option[o][
                        "batches_per_s_per_rank"], control=[by_option[o][
                            "batches_per_s_per_rank"], by_option[o]["control"][
                            "batches_per_s_per_rank"]])
                    for o, v in r["by_option"].items() if "control" in by_option.get(o, {})}
            r["over_in_memory_by_option"] = {o: q["ratio"] for o, q in over.items()}
            r["over_in_memory_by_option_control"] = over
            log(comm, f"width {r['width']} {r['transport']:4s} over in-memory ({lib}), "
                      f"batches/s per rank: " + ", ".join(
                          f"{o} {ratio_text(q)}" + (
                              f" (against {by_option[o]['sampler_library']})"
                              if by_option[o]["sampler_library"] != lib else "")
                          for o, q in over.items()))

    if rank == 0:
        w2 = [r for r in results if r["width"] == 2 and size == 2]
        targets = {"data_bytes": total_bytes,
                   "rss_target_bytes": 0.6 * total_bytes,
                   "meets_rss_width2_of_2": (bool(all(max(r["peak_rss_per_rank"]) <=
                                                      0.6 * total_bytes for r in w2))
                                             if w2 else None),
                   "meets_pss_width2_of_2": (bool(all(
                       max(r["load_peak_pss_per_rank"] + r["sample_peak_pss_per_rank"]) <=
                       0.6 * total_bytes for r in w2)) if w2 else None)}
        if in_memory.get("available"):
            best = max(r["edges_per_s_per_rank"] for r in results)
            targets["store_over_in_memory_edges_per_s"] = \
                best / in_memory["edges_per_s_per_rank"]
            targets["meets_throughput"] = bool(best >= in_memory["edges_per_s_per_rank"])
        else:
            targets["meets_throughput"] = None
        out = dict(benchmark="pyg", ranks=size, scale=args.scale, num_nodes=n,
                   num_directed_edges=e2, num_features=f, fanouts=fanouts,
                   batch_size=args.batch_size, batches=args.batches,
                   data_bytes=data_bytes, base_rss_per_rank=base_rss,
                   host=platform.node(), results=results, in_memory=in_memory,
                   targets=targets)
        print(f"targets: {targets}", flush=True)
        write_report(out, os.path.join(args.out, f"pyg_n{size}.json"), args.seed)
    return 0


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
