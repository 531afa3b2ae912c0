"""NodeMemory: per-node memory and mailbox for memory-based temporal models (TGN, JODIE,
APAN), held in a :class:`~ddstore.DDStore` and changed only by a collective, exact
:meth:`NodeMemory.commit`.

Layout (for a memory called ``name``; ``width`` members per group, one replica per group):
group member ``g`` holds the nodes ``partition(num_nodes, width, g)`` of five store
variables, whose global row is the node id, and its row of a sixth:

- ``name/memory`` (``dtype``, ``[memory_dim]``) and ``name/memory_ts`` (``ts_dtype``:
  float64, or int64 to keep integer times exactly, as a graph built from them does);
- ``name/mail`` (``dtype``, rows of ``[mail_dim]``) and ``name/mail_ts`` (``ts_dtype``
  scalars): ``mailbox_size`` consecutive rows per node (node ``v``'s ring is rows
  ``[v * mailbox_size, (v + 1) * mailbox_size)``), physical slot
  ``count % mailbox_size`` next, so a read copies each ring, oldest first, as two row
  ranges straight into the caller's buffer;
- ``name/mail_count`` (int64): mails the node has received since the last reset (the next
  ring slot is ``mail_count % mailbox_size``);
- ``name/commits`` (int64, rows of ``[2]``, one per group member): the changes member
  ``g`` has begun and ended (commits, resets, restores), which a process forked from a
  rank (a DataLoader worker, which has no lock shared with the ranks) checks around its
  reads of the members' chunks (see :meth:`NodeMemory.read`).

Reads are local and one-sided (``store.get_batch``, any owner), and may run in other
threads during a commit (each sees the whole state before or after it).  Updates are
staged on the rank that computed them (:meth:`~NodeMemory.write`, :meth:`~NodeMemory.post`)
and applied by every owner at one collective :meth:`~NodeMemory.commit`, in the order
``(ts, rank, position)``.
"""
import os
import threading
import time
import warnings
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .._collective import holds_interrupts, join_bounded
from ..annotations import check_object_name
from .._checks import (as_dtype, as_indices, as_int, cast_values, check_free_names,
                       check_indices, is_int, native_order, partition, names_under,
                       tensor_values)
from .._times import FLOAT_TIMES, as_time_dtype, as_times, refuse_rounded_list
from ..errors import DDStoreError, DDStoreStateError, DDStoreValueError, plain_class
from ..placement import alltoallv_rows

_VARS = ("memory", "memory_ts", "mail", "mail_ts", "mail_count")  # the state
_ALL = _VARS + ("commits",)  # and the counts of changes begun and ended per member

# a read in a forked process waits at most this long for a change under way among the
# ranks (one whose rank died mid-commit would never end)
FORKED_READ_WAIT = 600.0
_FENCE = threading.Lock()  # acquired and released: a full memory barrier (see _settled)
# a member's commit counts after a commit failed while applying it: the state is unknown
# (forked readers and open refuse it; a checkpoint keeps it)
_FAILED = -1


@dataclass
class MemoryBatch:
    """What :meth:`NodeMemory.read` returns, in request order (CPU torch tensors):
    ``memory [n, memory_dim]``, ``memory_ts [n]`` (the memory's ``ts_dtype``), ``mail [n,
    mailbox_size, mail_dim]`` and ``mail_ts [n, mailbox_size]`` (``ts_dtype``), mailbox
    rows in arrival order,
    oldest first, so the newest mail is always ``mail[:, -1]``.  Slots a node has not
    filled yet come first and hold zeros with ts 0."""
    memory: object
    memory_ts: object
    mail: object
    mail_ts: object

    def __len__(self):
        return int(self.memory.shape[0])


class _StateLock:
    """Many readers or one writer, within one process: :meth:`NodeMemory.read` holds it
    shared, the calls that change the state (commit, reset, restore, remove) hold it
    exclusively.  Fair both ways: a read that arrives while a writer holds the lock or
    waits for it queues, and the writer hands the lock to every queued read when it
    ends, before the next writer may take it; a writer waits only for the reads that
    held the lock when it arrived.  So a read waits for at most one commit, and a loop
    of reads in another thread never holds a commit back (nor a loop of commits a read).
    """

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0   # reads holding the lock
        self._queued = 0    # reads waiting for the next hand-over
        self._turn = 0      # hand-overs so far
        self._writing = False
        self._waiting = 0   # writers waiting

    def acquire_shared(self):
        """Hold the lock shared (a read); pair with :meth:`release_shared`.  Plain
        methods, not a context manager: this is on every read's path."""
        cond = self._cond
        with cond:
            if not (self._writing or self._waiting):
                self._readers += 1
                return
            turn = self._turn
            self._queued += 1
            try:
                while self._turn == turn:
                    cond.wait()
            except BaseException:  # interrupted: let go of the place or the lock
                if self._turn == turn:
                    self._queued -= 1
                else:
                    self._readers -= 1
                    cond.notify_all()
                raise
            # counted in _readers by the hand-over

    def release_shared(self):
        cond = self._cond
        with cond:
            self._readers -= 1
            if not self._readers and self._waiting:
                cond.notify_all()

    def _hand_over(self):
        """Every queued read holds the lock (called with the condition held)."""
        self._readers += self._queued
        self._queued = 0
        self._turn += 1
        self._cond.notify_all()

    def acquire_exclusive(self):
        """Hold the lock exclusively (a writer); pair with :meth:`release_exclusive`,
        which any thread may call (a non-blocking commit's background thread does)."""
        with self._cond:
            self._waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            except BaseException:
                self._waiting -= 1
                if not self._writing:
                    self._hand_over()
                raise
            self._waiting -= 1
            self._writing = True

    def release_exclusive(self):
        with self._cond:
            self._writing = False
            self._hand_over()

    @contextmanager
    def exclusive(self):
        self.acquire_exclusive()
        try:
            yield
        finally:
            self.release_exclusive()


class _ForkedMidCommit:
    """The lock of a memory in a process forked while a commit held (or awaited) the
    parent's: no thread here will release that, and the state here is half a commit's;
    every use says so (a read used to wait for ever)."""

    def __init__(self, name):
        self.name = name

    def _refuse(self, *args):
        raise DDStoreStateError(
            f"NodeMemory {self.name!r}: this process was forked (os.fork, a DataLoader "
            f"worker) while a commit was under way in its parent, so the memory's state "
            f"here is unknown; fork after mem.wait() (or a commit with wait=True)")
    acquire_shared = acquire_exclusive = exclusive = _refuse


_MEMORIES = weakref.WeakSet()  # every NodeMemory of this process (for a fork's child)
_LOCKS = weakref.WeakValueDictionary()  # (store, memory variable's id) -> its lock


def _after_fork_in_child():
    """In a forked child: each memory's lock anew (its state copied from the parent,
    held by threads that do not exist here), or refusing if a commit had it; its reads
    check the ranks' commit counts (no lock here orders them with the ranks' writes)."""
    for mem in list(_MEMORIES):
        mem._forked = True
        lock = getattr(mem, "_lock", None)
        if isinstance(lock, _StateLock):
            mem._lock = (_ForkedMidCommit(mem.name) if lock._writing or lock._waiting
                         else _StateLock())


os.register_at_fork(after_in_child=_after_fork_in_child)


# the commit's round carries every rank's counts per group member (size x width pairs
# gathered on every rank) up to this many; beyond it an alltoall of the counts
_COUNTS_IN_AGREEMENT = 1 << 16

_MAX_ROW_BYTES = 2 ** 63 - 1  # what the store allows for one row (one node's state)


def _check_row_bytes(name, memory_dim, mail_dim, mailbox_size, dt):
    """Raise :class:`DDStoreValueError` if a node's memory or mailbox row exceeds what the
    store can hold in one row, naming the argument and its allowed range."""
    item = dt.itemsize
    for label, dim in (("memory_dim", memory_dim), ("mail_dim", mail_dim)):
        if dim > _MAX_ROW_BYTES // item:
            raise DDStoreValueError(f"NodeMemory {name!r}: {label}={dim} out of range: "
                                    f"allowed 1 <= {label} <= {_MAX_ROW_BYTES // item} "
                                    f"(one node's row of {item}-byte values must fit in "
                                    f"2**63 - 1 bytes)")
    top = _MAX_ROW_BYTES // max(mail_dim * item, 8)
    if mailbox_size > top:
        raise DDStoreValueError(f"NodeMemory {name!r}: mailbox_size={mailbox_size} out of "
                                f"range: allowed 1 <= mailbox_size <= {top} (one node's "
                                f"mailbox, mailbox_size x mail_dim={mail_dim} x {item} "
                                f"bytes, must fit in 2**63 - 1 bytes)")


def _out_field_view(t, shape, dtype):
    """A numpy view of ``t`` if it can be filled in place as a field of ``shape`` and
    ``dtype`` (a C-contiguous, writable CPU tensor without grad: what
    :meth:`NodeMemory.read` returns), else None."""
    import torch
    if not isinstance(t, torch.Tensor) or not t.is_cpu or t.requires_grad \
            or t.shape != shape or not t.is_contiguous():
        return None
    if t.is_neg() or t.is_conj():  # (a lazy negation: its values are not its bytes)
        return None
    try:  # the dtype compared as numpy's (what read writes through): no conversion
        view = t.numpy()
    except TypeError:  # a dtype numpy lacks (bfloat16): not the memory's
        return None
    return view if view.dtype == dtype and view.flags.writeable else None


class _OutViews:
    """A :class:`MemoryBatch` and the numpy views of its four tensors, with what each
    tensor was (object, address, shape, strides) when they were made."""
    __slots__ = ("batch", "views", "_was")

    def __init__(self, batch, views):
        self.batch, self.views = batch, views
        self._was = [(t, t.data_ptr(), t.shape, t.stride(), t.dtype)
                     for t in _fields(batch)]

    def holds(self, batch, n):
        """Whether ``batch`` (this one) still has the tensors the views were made of,
        unchanged, for a read of ``n`` nodes (``t.data = ...`` keeps the object: its
        dtype and a lazy negation are looked at too)."""
        if self.views[0].shape[0] != n:
            return False
        for t, (was, ptr, shape, stride, dtype) in zip(_fields(batch), self._was):
            if t is not was or t.requires_grad or t.data_ptr() != ptr or \
                    t.shape != shape or t.stride() != stride or t.dtype != dtype or \
                    t.is_neg():
                return False
        return True


_FIELDS = ("memory", "memory_ts", "mail", "mail_ts")  # a MemoryBatch's, in order


def _fields(batch):
    """``batch``'s tensors in :data:`_FIELDS`' order (attributes read directly: the
    hot path of a batch filled again)."""
    return batch.memory, batch.memory_ts, batch.mail, batch.mail_ts


def _as_array(x):
    """``x`` as a numpy array in this machine's byte order (``'>f4'`` as its values); a
    torch tensor through the package's one rule (:func:`~ddstore._checks.tensor_values`:
    bfloat16, which numpy lacks, as float32, which holds each of its values exactly)."""
    return native_order(np.asarray(tensor_values(x, "NodeMemory")))


class NodeMemory:
    """Memory and mailbox of every node, striped over each group of ``store`` like the
    T-CSR (one replica per group).

    ``NodeMemory(store, name, num_nodes, memory_dim, mail_dim, mailbox_size=1,
    dtype=np.float32, ts_dtype=np.float64)`` is collective (every rank, same arguments);
    the state starts at zeros.  ``ts_dtype``: the timestamps' dtype, float64 or int64
    (integer times kept exactly and ordered exactly: pass a graph's ``time_dtype``).
    Then:

    - :meth:`read` (local, one-sided): the state of any nodes;
    - :meth:`write` / :meth:`post` (local): stage a memory update / a mail;
    - :meth:`commit` (collective): apply every rank's staged updates everywhere;
    - :meth:`reset`, :meth:`snapshot`, :meth:`restore`, :meth:`remove` (collective);
      :meth:`nbytes` (local);
    - :meth:`open` (collective): the memory of a store from ``DDStore.restore``, by name
      (checkpoint and restart; ``restore`` is the in-memory snapshot, another thing).

    **What commit guarantees.** Every staged update of every rank reaches the owner of
    its node in every group and is applied in the order ``(ts, rank, position)``
    (``position``: the update's place among this rank's staged writes, or among its staged
    mails, since the last commit).  For the memory of a node the greatest update of the
    commit wins (it replaces memory and memory_ts, even where the stored memory_ts is
    later, as TGL does); mails enter the node's ring in that order, the
    ``mailbox_size`` latest being kept.  So a P-rank run whose ranks stage contiguous
    slices of a time-ordered batch in rank order (what ``EdgeBatches(comm=...)`` hands
    out) equals a one-process run over the whole batch, whatever P, width or transport.
    After ``commit`` returns, every rank reads the new state.

    **Reads in other threads during a commit.** :meth:`read` may be called from other
    threads (a prefetching loader) while the main thread is in :meth:`commit` (or
    :meth:`reset`, :meth:`restore`, :meth:`remove`).  Every read returns the state of
    the whole memory between two commits, for every node it asks for (its own rows,
    node-local or remote ones alike): never a node, nor two nodes of one read, from two
    different commits.  A read that began on any rank before the commit began on that
    rank returns the state before the commit, and the commit's changes wait, on every
    rank, until such reads have finished; a read that begins while its rank is inside
    the commit waits for the commit to end and returns the state after it.  (Each
    process holds a readers/writer lock per ``NodeMemory``: reads hold it shared; a
    commit holds it exclusively from before its first collective step until after its
    last one, so no rank changes a row before every rank holds it, and none lets a read
    in before every rank has finished.)  Staging (:meth:`write`, :meth:`post`) and the
    collective calls belong to one thread, the one that calls the other collectives.

    **Errors.** A bad node id, a dtype or shape that does not match, a length mismatch,
    a NaN or infinite value in a memory or mail row (named by its node, as edge weights
    are), a NaN/infinite timestamp, a timestamp ``ts_dtype`` does not hold exactly (an
    integer outside ``[-2**53, 2**53]`` for float64; a float that is not a whole number
    within int64 for int64) is recorded where it is
    staged and raised at the next ``commit()`` on **every** rank (a
    :class:`DDStoreIndexError` or :class:`DDStoreValueError` naming the rank, the node
    or argument, the value and the allowed range); nothing of that commit is applied
    anywhere (the stored bytes are unchanged), and every rank's staged updates are
    dropped (stage them again).  Ranks that are in different collective calls raise
    "collective calls out of step" instead of waiting.
    """

    def __init__(self, store, name, num_nodes, memory_dim, mail_dim, mailbox_size=1,
                 dtype=np.float32, ts_dtype=FLOAT_TIMES):
        self._lock = _StateLock()  # reads against commits in other threads (see read)
        self._last_out = None  # the last MemoryBatch read filled (see _out_views)
        self._comm = None      # the non-blocking commits' communicator (a dup of comm)
        self._pending = None   # the thread of the last non-blocking commit
        self._told_level = False  # commit(wait=False) below MPI_THREAD_MULTIPLE: told
        self._failure = None   # what made a commit fail after its round (text, re-raised)
        with store.collective("NodeMemory", name) as step:
            if not isinstance(name, str) or not name:
                raise DDStoreValueError(f"NodeMemory name must be a non-empty str, got "
                                        f"{name!r}")
            dt = as_dtype(dtype, f"NodeMemory {name!r}: dtype", "fc",
                          "a floating-point or complex dtype (e.g. float32)")
            tdt = as_time_dtype(ts_dtype, f"NodeMemory {name!r}: ts_dtype")
            for label, v, low in (("num_nodes", num_nodes, 1),
                                  ("memory_dim", memory_dim, 1), ("mail_dim", mail_dim, 1),
                                  ("mailbox_size", mailbox_size, 1)):
                if not is_int(v) or v < low:
                    raise DDStoreValueError(f"NodeMemory {name!r}: {label}={v!r} must be an"
                                            f" integer >= {low}")
            if num_nodes > _MAX_ROW_BYTES:  # the store's bound on a variable's rows
                raise DDStoreValueError(f"NodeMemory {name!r}: num_nodes={num_nodes} out "
                                        f"of range: allowed 1 <= num_nodes <= 2**63 - 1")
            _check_row_bytes(name, int(memory_dim), int(mail_dim), int(mailbox_size), dt)
            if int(num_nodes) > _MAX_ROW_BYTES // int(mailbox_size):
                raise DDStoreValueError(f"NodeMemory {name!r}: mailbox_size={mailbox_size} "
                                        f"out of range for num_nodes={num_nodes}: allowed "
                                        f"1 <= mailbox_size <= "
                                        f"{_MAX_ROW_BYTES // int(num_nodes)} (the mailbox "
                                        f"holds num_nodes x mailbox_size rows, at most "
                                        f"2**63 - 1)")
            check_free_names(f"NodeMemory {name!r}", names_under(name, store.variables()))
            check_object_name(store, name, self.KIND, f"NodeMemory {name!r}")
            step.agree(same={"num_nodes": int(num_nodes), "memory_dim": int(memory_dim),
                             "mail_dim": int(mail_dim), "mailbox_size": int(mailbox_size),
                             "dtype": str(dt), "ts_dtype": str(tdt)})
            self._create(store, name, num_nodes, memory_dim, mail_dim, mailbox_size, dt,
                         tdt)

    def _setup(self, store, name, num_nodes, memory_dim, mail_dim, mailbox_size, dt, tdt):
        """Local: the attributes (the node ranges: ``partition(num_nodes, width, g)``)."""
        _MEMORIES.add(self)
        self.store, self.name, self.ts_dtype = store, name, tdt
        self.num_nodes, self.memory_dim = int(num_nodes), int(memory_dim)
        self.mail_dim, self.mailbox_size, self.dtype = int(mail_dim), int(mailbox_size), dt
        self.node_offsets = np.array(
            [partition(self.num_nodes, store.group_size, g)[0]
             for g in range(store.group_size)] + [self.num_nodes], dtype=np.int64)
        self.lo = int(self.node_offsets[store.group_rank])
        self.hi = int(self.node_offsets[store.group_rank + 1])
        S = self.mailbox_size
        # (rows per node, row shape, dtype): a mailbox is S rows per node
        self._layout = {
            "memory": (1, (self.memory_dim,), dt), "memory_ts": (1, (), tdt),
            "mail": (S, (self.mail_dim,), dt), "mail_ts": (S, (), tdt),
            "mail_count": (1, (), np.int64)}
        self._var = {k: f"{name}/{k}" for k in _ALL}
        self._forked = False  # True in a process forked from the rank
        self._changing = False  # this rank's commit count was begun (see _begin)
        self._h = {}  # their handles, once they hold this memory (_attach): every read
        # goes through them, so another variable added under a removed one's name is
        # refused, not read with this memory's layout
        self._buffers = {}  # the commit's send and receive buffers (see _buffer)
        self._snapshot = None
        self._own, self._rolled = None, False

    def _create(self, store, name, num_nodes, memory_dim, mail_dim, mailbox_size, dt,
                tdt):
        """Collective, after the constructor's round: the six variables (all, or none
        on every rank) and the non-blocking commits' communicator."""
        self._setup(store, name, num_nodes, memory_dim, mail_dim, mailbox_size, dt, tdt)
        with store.transaction(f"NodeMemory {name!r}") as txn:  # all six, or none
            for k in _VARS:
                per, shape, vdt = self._layout[k]
                store.init(self._var[k], (self.hi - self.lo) * per, shape, vdt)
            self._init_counts()
            self._attach(txn, zero=True)

    def _init_counts(self):
        """Collective: the commit counts, one row of ``[begun, ended]`` per member."""
        self.store.init(self._var["commits"], 1, (2,), np.int64)

    def _attach(self, txn, zero=False, fresh=False):
        """Collective, inside a transaction, once the six variables hold this rank's
        node range: views of its chunks, the communicator of the non-blocking commits
        (rolled back with ``txn``) and the annotation (what :meth:`open` reads);
        ``zero``: the state zeroed, ``fresh``: the commit counts (just made)."""
        store, S = self.store, self.mailbox_size
        # views of this rank's chunks (what the owner scatters commits into); the
        # mailbox as [local nodes, S, ...] (a view of its S rows per node)
        self._h = {k: store.handle(self._var[k]) for k in _ALL}
        # one lock per memory in this process: another object of it (open on the live
        # store) reads and commits in turn with this one (each with its own lock, a read
        # through one saw half of a commit through the other, and a commit through one
        # during a non-blocking commit through the other lost mails)
        key = (id(store), store.core_ids(self._var["memory"])[1][0])
        self._lock = _LOCKS.setdefault(key, self._lock)
        self._own = {k: store.local_view(self._h[k]) for k in _VARS}
        # this member's counts of changes begun and ended: zero when made; as saved by a
        # checkpoint (equal: a save waits for a commit under way), or as another object
        # of this memory on this store counts them
        self._counts = store.local_view(self._h["commits"])[0]
        if zero or fresh:
            self._counts[:] = 0
        for k in ("mail", "mail_ts"):
            self._own[k] = self._own[k].reshape((self.hi - self.lo, S)
                                                + self._layout[k][1])
        self._clear()
        if zero:
            self._zero_own_rows()
        store.sync()
        # collective, after the round: the background commits' own
        # communicator, so they never interleave with collectives on store.comm
        self._comm = store.comm.Dup()
        # rolled back by an enclosing transaction: the communicator and the views go
        # too (the object is removed, even if an older memory of its name is back)
        txn.on_rollback(self._rolled_back)
        with store.collective(None):  # (a rank failing here: agreed, rolled back)
            store.annotate(self.name, self.KIND, {
                "version": 1, "num_nodes": self.num_nodes, "memory_dim": self.memory_dim,
                "mail_dim": self.mail_dim, "mailbox_size": self.mailbox_size,
                "dtype": self.dtype.str, "ts_dtype": np.dtype(self.ts_dtype).str},
                variables=[self._var[k] for k in _ALL],
                # rows per node: a restore splits every variable at this memory's node
                # ranges (the counts: one row per member, made anew by open at another
                # width)
                cuts={**{self._var[k]: self._layout[k][0] for k in _VARS},
                      self._var["commits"]: 1})

    KIND = "NodeMemory"

    @classmethod
    def open(cls, store, name):
        """Collective: the node memory ``name`` of ``store`` (every node's memory,
        mailbox, timestamps and mail counts as they were saved), from what its
        constructor recorded (:meth:`DDStore.annotate`) and its variables (the commit
        counts made anew where missing or of another width); for a store from
        :meth:`DDStore.restore` (any rank count and width) or :meth:`DDStore.load`.
        Reads of every node return what they returned when the store was saved, and
        :meth:`commit`, :meth:`reset`, :meth:`snapshot` / :meth:`restore` and
        :meth:`remove` work as on the memory that was saved (a snapshot is not part of a
        checkpoint: take a new one).

        One collective step, ``"NodeMemory.open"`` (the memory's own communicator is
        duplicated).  The constructor's annotation declares every variable as
        ``rows per node`` items (``cuts``), so a restore at any width puts each member's
        rows at this memory's node range (``partition(num_nodes, width, g)``) and
        nothing moves.  A failure is raised alike on every rank
        (:class:`DDStoreValueError` naming the memories the store holds when there is no
        memory ``name``)."""
        self = cls.__new__(cls)
        self._lock = _StateLock()
        self._last_out = None
        self._comm = self._pending = self._failure = None
        self._told_level = False
        with store.collective("NodeMemory.open", name) as step:
            ann = store.annotation(name, kind=cls.KIND)
            with ann.reading(f"NodeMemory.open({name!r})", version=1) as meta:
                self._setup(store, name, meta["num_nodes"], meta["memory_dim"],
                            meta["mail_dim"], meta["mailbox_size"], np.dtype(meta["dtype"]),
                            np.dtype(meta["ts_dtype"]))
            for k in _VARS:
                per, shape, vdt = self._layout[k]
                var = self._var[k]
                if store.nrows(var) != self.num_nodes * per or \
                        store.row_shape(var) != shape or store.dtype(var) != vdt:
                    raise DDStoreValueError(
                        f"NodeMemory {name!r}: variable {var!r} holds {store.nrows(var)} "
                        f"rows of {store.row_shape(var)} {store.dtype(var)}; its "
                        f"annotation says {self.num_nodes * per} rows of {shape} "
                        f"{np.dtype(vdt)}")
                if not np.array_equal(store.chunk_offsets(var), self.node_offsets * per):
                    raise DDStoreValueError(
                        f"NodeMemory {name!r}: variable {var!r} is split at rows "
                        f"{store.chunk_offsets(var).tolist()}, not at the memory's node "
                        f"ranges {(self.node_offsets * per).tolist()}")
            counts = self._var["commits"]
            if counts in store and (store.get_range(counts, 0, store.nrows(counts)) ==
                                    _FAILED).any():
                raise DDStoreStateError(
                    f"NodeMemory {name!r}: a commit failed while applying it before this "
                    f"state was saved or opened (marked in {counts!r}): its state is "
                    f"unknown; remove it and create a new one")
            step.agree(same={"NodeMemory": meta})
            with store.transaction(f"NodeMemory.open {name!r}") as txn:
                counts = self._var["commits"]  # one row per member of this width (a
                # checkpoint of another width, or of a version without them: anew)
                fresh = counts not in store or store.nrows(counts) != store.group_size
                if fresh:
                    if counts in store:
                        store.remove(counts)
                    self._init_counts()
                self._attach(txn, fresh=fresh)
        return self

    def _check_vars(self, failure=True):
        """Raise :class:`DDStoreStateError` if the state's variables are gone
        (:meth:`remove`, or ``store.remove()`` of one of them; the same on every rank,
        since both are collective) or, with ``failure``, if a commit failed after its
        round (``_failure``: what failed; on every rank when the ranks agreed on it, else
        on this rank, and in a collective call a step's local part agrees on it)."""
        self.store.check_alive()
        if failure and self._failure is not None:
            raise DDStoreStateError(f"NodeMemory {self.name!r}: {self._failure}: remove it "
                                    f"and create a new one")
        if self._own is None and self._rolled:
            raise DDStoreStateError(
                f"NodeMemory {self.name!r}: this object was rolled back with the "
                f"transaction that built it; NodeMemory.open(store, {self.name!r}) opens "
                f"the memory of that name if the store holds one, else create a new one")
        gone = [self._var[k] for k in _ALL if self._h.get(k) not in self.store]
        if self._own is None or gone:
            missing = gone or list(self._var.values())
            raise DDStoreStateError(f"NodeMemory {self.name!r} was removed from the store "
                                    f"(missing {missing}); create a new one")

    # ------------------------------------------------------------------ reading
    def read(self, nodes, out=None):
        """Local (one-sided reads, no action of the owners): the state of ``nodes``
        (duplicates allowed, any owners) as a :class:`MemoryBatch` in request order.

        ``out``: a :class:`MemoryBatch` from an earlier ``read`` of the same length,
        filled in place and returned (its four fields are not allocated; the checks of
        a batch filled again are about 1.5 us instead of 6).  Raises
        :class:`DDStoreIndexError` for a node outside ``[0, num_nodes)`` (on this rank
        only: reads are local).

        Safe in other threads while the main thread commits: the whole read is the
        state before the commit or, if it begins during the commit on this rank (then
        it waits for it), the state after it; never a mix (see the class docstring).
        The same in a process forked from the rank (a DataLoader worker) while the ranks
        commit: it reads the members' counts of changes begun and ended
        (``name/commits``) before and after its rows, waits while a change is under way
        (at most ``FORKED_READ_WAIT`` seconds, then :class:`DDStoreStateError`) and
        reads again when one began meanwhile."""
        import torch
        what = f"NodeMemory {self.name!r}: read"
        idx = as_indices(nodes, what, self.num_nodes, "node")
        check_indices(idx, self.num_nodes, what, item="node")
        n, S = idx.shape[0], self.mailbox_size
        given = out is not None
        if out is None:
            views = (np.empty((n, self.memory_dim), self.dtype), np.empty(n, self.ts_dtype),
                     np.empty((n, S, self.mail_dim), self.dtype),
                     np.empty((n, S), self.ts_dtype))
            out = MemoryBatch(*map(torch.from_numpy, views))
        else:
            views = self._out_views(out, n, what)
            if self.ts_dtype == np.int64:  # nodes that may be out's own times (the
                idx = idx.copy()  # mail's ranges are computed after the times are read)
        lock = self._lock  # no commit applies anywhere while this rank reads
        lock.acquire_shared()
        try:
            self._check_vars()
            if self._forked:
                self._settled(idx, views, what)
            else:
                self._read_into(idx, views)
        finally:
            lock.release_shared()
        if given:  # written through numpy: tell autograd, as torch's in-place ops do (a
            # graph that saved these tensors then refuses its backward, not silently
            # computing with the new values)
            from torch.autograd.graph import increment_version
            increment_version(_fields(out))
        return out

    def _out_views(self, out, n, what):
        """The numpy views of ``out``'s fields: those of the last batch :meth:`read`
        filled while ``out`` is that batch and its tensors are as they were (a tensor's
        ``numpy()`` costs about 1 us: four of them were more than the allocations that
        ``out`` spares), else checked whole (:meth:`_check_out`)."""
        last = self._last_out
        if last is not None and last.batch is out and last.holds(out, n):
            return last.views
        views = self._check_out(out, n, what)
        self._last_out = _OutViews(out, views)
        return views

    def _check_out(self, out, n, what):
        """The numpy views of ``out``'s four fields, in :class:`MemoryBatch`'s order;
        refuse an ``out`` that :meth:`read` could not fill whole, before any of it is
        written: each field must be what a read of ``n`` nodes returns."""
        if not isinstance(out, MemoryBatch):  # (a batch of another length: its fields
            # are named below, with their shapes)
            raise DDStoreValueError(f"{what}: out must be a MemoryBatch of {n} nodes (from "
                                    f"an earlier read of as many), got "
                                    f"{type(out).__name__}")
        S, views = self.mailbox_size, []
        for field, shape, dtype in zip(_FIELDS, ((n, self.memory_dim), (n,),
                                                 (n, S, self.mail_dim), (n, S)),
                                       (self.dtype, self.ts_dtype) * 2):
            t = getattr(out, field)
            view = _out_field_view(t, shape, dtype)
            if view is None:
                got = (f"{type(t).__name__} of shape {tuple(getattr(t, 'shape', ()))}, "
                       f"dtype {getattr(t, 'dtype', None)}")
                raise DDStoreValueError(
                    f"{what}: out.{field} must be a C-contiguous, writable CPU tensor "
                    f"without grad, of shape {shape} and dtype {np.dtype(dtype)} (what a "
                    f"read of {n} nodes returns), got a {got}")
            views.append(view)
        for i in range(4):  # (a read writes them in two calls: one would overwrite one)
            for j in range(i + 1, 4):
                if np.may_share_memory(views[i], views[j]):
                    raise DDStoreValueError(
                        f"{what}: out.{_FIELDS[i]} and out.{_FIELDS[j]} share memory; "
                        f"each field needs its own (as a read without out= makes them)")
        return views

    def _settled(self, idx, views, what):
        """:meth:`_read_into` in a forked process: between two equal readings of the
        owners' counts of changes begun, with none under way at the first.  Each member
        begins its count after the change's round, before it writes its rows, and ends
        it after the sync that ends the change (so after every member wrote): a read
        between two equal readings saw no member write, and every member at the same
        change (a member past the change had to wait in the sync for every other's
        writes, begun after the round, so before the first reading of its count)."""
        h = self._h["commits"]
        owners = np.unique(self._owner(idx))
        deadline = time.monotonic() + FORKED_READ_WAIT  # (a change under way, or a
        # change begun during every read: bounded alike)
        try:
            while True:
                counts = self.store.get_batch(h, owners)
                if (counts == _FAILED).any():
                    raise DDStoreStateError(
                        f"{what}: a commit of the ranks failed while applying it (marked "
                        f"in {self._var['commits']!r}; this process was forked from a "
                        f"rank): the memory's state is unknown")
                under_way = counts[:, 0] != counts[:, 1]
                if not under_way.any():
                    _FENCE.acquire()  # (the counts are read before the rows, the rows
                    _FENCE.release()  # before the second reading, on any CPU)
                    self._read_into(idx, views)
                    _FENCE.acquire()
                    _FENCE.release()
                    if np.array_equal(self.store.get_batch(h, owners)[:, 0],
                                      counts[:, 0]):
                        return
                if time.monotonic() > deadline:
                    raise DDStoreStateError(
                        f"{what}: a commit of the ranks has been under way for "
                        f"{FORKED_READ_WAIT:g} s (this process was forked from a rank; "
                        f"members {owners[under_way].tolist()} began a change and did "
                        f"not end it): did a rank stop in a commit?" if under_way.any()
                        else f"{what}: the ranks began a change during every read for "
                        f"{FORKED_READ_WAIT:g} s (this process was forked from a rank): "
                        f"read between commits, or in the rank")
                if under_way.any():
                    time.sleep(0.0002)
        except DDStoreStateError as exc:  # a store's refusal, named as this read's
            msg = str(exc)
            if msg.startswith(what):
                raise
            if "wrote its rows since the fork" in msg:
                msg += ("; a worker holds a copy of this memory made at its fork (at "
                        "width 1, or a rank alone on its node): read node memory in the "
                        "rank, or use a width whose members share the node")
            raise DDStoreStateError(f"{what}: {msg}") from None

    def _begin(self):
        """This member begins a change of its rows (a commit, reset or restore): after
        the step's round (which every member entered, so none is waiting for a forked
        reader of the state before: counted before the round, a worker whose rank had
        not yet entered the commit waited for a change its rank held back) and before
        this member writes; :meth:`_end` pairs it."""
        self._counts[0] += 1
        self._changing = True

    def _end(self):
        """This member's change ended: after the sync that ends it on every member, or
        after it failed (once per :meth:`_begin`)."""
        if self._changing:
            self._changing = False
            self._counts[1] += 1

    @contextmanager
    def _changes(self):
        """:meth:`_end` when the block ends, however it ends."""
        try:
            yield
        finally:
            self._end()

    def _read_into(self, idx, views):
        """Read the state of nodes ``idx`` into ``views`` (numpy arrays of the four
        fields): one read of the store for memory, times and a mailbox of one slot;
        with more slots, the mail's ring order needs the counts first."""
        n, S = idx.shape[0], self.mailbox_size
        memory, memory_ts, mail, mail_ts = views
        h = self._h
        if S == 1:
            self.store.get_many(((h["memory"], idx, memory), (h["memory_ts"], idx, memory_ts),
                                 (h["mail"], idx, mail.reshape((n, self.mail_dim))),
                                 (h["mail_ts"], idx, mail_ts.reshape((n,)))))
            return
        # ring slots to arrival order: logical row j is slot (count + j) % S, so node v's
        # ring is rows [v*S + c, v*S + S) then [v*S, v*S + c), c = count % S: two ranges
        # per node, read straight into the caller's buffers (mail and times in one read)
        c = self.store.get_many(((h["memory"], idx, memory),
                                 (h["memory_ts"], idx, memory_ts),
                                 (h["mail_count"], idx)))[2]
        c %= S
        starts = np.empty((n, 2), np.int64)
        counts = np.empty((n, 2), np.int64)
        np.multiply(idx, S, out=starts[:, 1])
        np.add(starts[:, 1], c, out=starts[:, 0])
        np.subtract(S, c, out=counts[:, 0])
        counts[:, 1] = c
        starts, counts = starts.reshape(-1), counts.reshape(-1)
        self.store.get_many(
            ((h["mail"], starts, counts, mail.reshape((n * S, self.mail_dim))),
             (h["mail_ts"], starts, counts, mail_ts.reshape((n * S,)))))

    # ------------------------------------------------------------------ staging
    def _clear(self):
        self._writes = []   # (nodes, ts, rows)
        self._posts = []
        self._error = None  # the first bad staging since the last commit (raised there)

    def _stage(self, op, nodes, rows, ts, dim, kind):
        """Validate one staging; record it, or record the first error (raised at commit)."""
        what = f"NodeMemory {self.name!r}: {op}"
        try:
            idx = as_indices(nodes, what, self.num_nodes, "node id")
            check_indices(idx, self.num_nodes, what, item="node id")
            arr, t = self._checked_rows(what, idx, rows, ts, dim, kind, "node")
        except Exception as exc:  # noqa: BLE001 -- not an array at all: raised at commit
            self._keep_error(exc, what)
            return
        if idx.shape[0]:
            (self._writes if op == "write" else self._posts).append(
                (idx.copy(), t, np.array(arr, copy=True, order="C")))  # (packed as bytes)

    def _checked_rows(self, what, idx, rows, ts, dim, kind, item):
        """``(rows, ts)``: ``rows`` ``[len(idx), dim]`` of this memory's dtype, finite,
        and ``ts`` (one per entry, or one for all) as ``ts_dtype``, finite; else a
        :class:`DDStoreValueError` naming ``what`` and the position given (``item``:
        what an entry of ``idx`` is, ``node`` or ``root node``)."""
        n = idx.shape[0]
        arr = _as_array(rows)
        want = (n, dim)
        if arr.shape != want or arr.dtype.kind not in "biufc":
            raise DDStoreValueError(f"{what}: {kind} has dtype {arr.dtype} shape "
                                    f"{arr.shape}; needs dtype {self.dtype} shape {want} "
                                    f"(one row of {dim} per {item.split()[0]}; another "
                                    f"dtype is cast to {self.dtype} by value, as "
                                    f"DDStore.update casts)")
        if arr.dtype != self.dtype:  # the package's one rule (DDStore.update's)
            arr = cast_values(arr, self.dtype, f"{what}: {kind}", "this memory's")
        bad = ~np.isfinite(arr).all(axis=1)  # arr is [n, dim] here
        if bad.any():  # worded as the edge weights' check (check_finite_weights)
            p = int(np.argmax(bad))
            value = arr[p][~np.isfinite(arr[p])][0]
            raise DDStoreValueError(f"{what}: row {p} ({item} {int(idx[p])}) has {kind} "
                                    f"value {value}; {kind} values must be finite "
                                    f"({int(bad.sum())} of {n} rows hold NaN or inf)")
        t = _as_array(ts)
        refuse_rounded_list(ts, t, f"{what}: ts")
        if t.ndim == 0:
            t = np.full(n, t)
        if t.shape != (n,) or (n and t.dtype.kind not in "iufO"):
            raise DDStoreValueError(f"{what}: ts has dtype {t.dtype} shape {t.shape}; "
                                    f"needs {n} real timestamps (one per "
                                    f"{item.split()[0]}) or one")
        # as this memory's ts_dtype, exactly (what it would change is refused)
        t = as_times(t, self.ts_dtype, f"{what}: ts",
                     where=lambda p: f" ({item} {int(idx[p])})")
        bad = ~np.isfinite(t)
        if bad.any():
            p = int(np.argmax(bad))
            raise DDStoreValueError(f"{what}: ts[{p}] = {t[p]} ({item} {int(idx[p])}) is "
                                    f"NaN or infinite; timestamps must be finite")
        return arr, t

    def _keep_error(self, exc, what):
        """Keep the first bad staging since the last commit, to raise in the commit's
        local part: a :class:`DDStoreError` as it is, another exception (not an array
        at all, a ``MemoryError``...) worded with ``what`` and chained to it."""
        if self._error is not None:
            return
        if not isinstance(exc, DDStoreError):
            wrapped = plain_class(exc)(f"{what}: {type(exc).__name__}: {exc}")
            wrapped.__cause__ = exc
            exc = wrapped
        self._error = exc

    def write(self, nodes, memory, ts):
        """Local: stage new memory rows ``memory [len(nodes), memory_dim]`` (finite
        values of this memory's dtype, or of another cast to it as
        :meth:`DDStore.update` casts: a float16, bfloat16 or float64 tensor into a
        float32 memory, every value in its range) for ``nodes`` at times ``ts`` (one per
        node, or
        one for all: finite reals ``ts_dtype`` holds exactly: integers within
        ``[-2**53, 2**53]`` for float64, whole numbers for int64).  Applied at the next
        :meth:`commit`; a bad argument is raised there, on every rank."""
        self._stage("write", nodes, memory, ts, self.memory_dim, "memory")

    def post(self, nodes, mail, ts):
        """Local: stage mails ``mail [len(nodes), mail_dim]`` (as :meth:`write`'s
        rows) to ``nodes`` at times ``ts`` (as in :meth:`write`).  Applied at
        the next :meth:`commit`; a bad argument is raised there, on every rank."""
        self._stage("post", nodes, mail, ts, self.mail_dim, "mail")

    def post_to_neighbors(self, block, mail, ts):
        """Local: APAN's delivery: each root ``i`` of ``block`` (a
        :class:`~ddstore.temporal.TemporalBlock`) sends ``mail[i]`` at ``ts[i]`` to
        every neighbour sampled for it (``block.nodes[block.col]`` where
        ``block.row == i``; ``ts`` one per root or one for all, as :meth:`post` takes
        it).  Staged like :meth:`post` of those mails in the block's edge order (after
        this rank's earlier posts), so the same ordering rule applies; a bad block, mail
        or ts is raised at :meth:`commit`, on every rank, naming the root as passed."""
        try:
            missing = [a for a in ("row", "col", "nodes", "num_roots")
                       if not hasattr(block, a)]
            if missing:
                raise DDStoreValueError(
                    f"NodeMemory {self.name!r}: post_to_neighbors: block must be a "
                    f"TemporalBlock (a hop of TemporalSampler.sample: row, col, nodes, "
                    f"num_roots); got {type(block).__name__}, which has no "
                    f"{', '.join(missing)}")
            what = f"NodeMemory {self.name!r}: post_to_neighbors"
            nodes = np.asarray(block.nodes)
            nr = as_int(block.num_roots, f"{what}: block.num_roots", 0)  # (2.7 was 2)
            if nr > len(nodes):
                raise DDStoreValueError(f"{what}: block.num_roots={nr} but block.nodes "
                                        f"holds {len(nodes)} (the roots come first)")
            row = as_indices(block.row, f"{what}: block.row", nr)
            col = as_indices(block.col, f"{what}: block.col", len(nodes))
            check_indices(row, nr, f"{what}: block.row", detail=" (a root's position)")
            check_indices(col, len(nodes), f"{what}: block.col",
                          detail=" (a position in block.nodes)")
            if row.shape != col.shape:
                raise DDStoreValueError(f"{what}: block.row has {row.shape[0]} entries and "
                                        f"block.col {col.shape[0]}; needs one of each per "
                                        f"edge")
            nbrs = as_indices(nodes[col], f"{what}: block.nodes")
            check_indices(nbrs, self.num_nodes, f"{what}: block.nodes", item="node id")
            # checked per root, as given (positions, shapes and times named as passed)
            m, t = self._checked_rows(what, as_indices(nodes[:nr], what), mail, ts,
                                      self.mail_dim, "mail", "root node")
        except Exception as exc:  # noqa: BLE001 -- raised at commit
            self._keep_error(exc, f"NodeMemory {self.name!r}: post_to_neighbors")
            return
        if row.shape[0]:  # staged as post(nbrs, m[row], t[row]) would (fresh arrays)
            self._posts.append((np.array(nbrs, copy=True), t[row], m[row]))

    def staged(self):
        """``(writes, mails)``: how many updates this rank has staged since the last
        commit."""
        return (sum(len(w[0]) for w in self._writes), sum(len(p[0]) for p in self._posts))

    # ------------------------------------------------------------------ commit
    def _gather(self, staged, dim):
        """This rank's staged updates as (keys [k, 4] int64: node, rank, position and the
        ts's 8 bytes (``ts_dtype``); rows [k, dim])."""
        if len(staged) == 1:
            nodes, ts, rows = staged[0]
        elif staged:
            nodes = np.concatenate([s[0] for s in staged])
            ts = np.concatenate([s[1] for s in staged])
            rows = np.concatenate([s[2] for s in staged])
        else:
            nodes = np.zeros(0, np.int64)
            ts = np.zeros(0, self.ts_dtype)
            rows = np.zeros((0, dim), self.dtype)
        keys = np.stack([nodes, np.full(nodes.shape[0], self.store.rank, np.int64),
                         np.arange(nodes.shape[0], dtype=np.int64), ts.view(np.int64)],
                        axis=1)
        return keys, rows

    @holds_interrupts  # (an exchange or a sync follows the round)
    def commit(self, wait=True):
        """Collective: apply every rank's staged writes and mails (see the class
        docstring for the order and the guarantee), then clear them.

        One collective step, ``"NodeMemory.commit"``: its local part raises this rank's
        first bad staging, a failed earlier non-blocking commit, or whatever packing the
        updates raises, and its one round agrees on that and gathers the number of
        updates each rank sends to each group member; then one ``Alltoallv`` of records
        (keys ``(node, rank, position, ts)`` with their row, writes then mails): a rank
        sends each staged update to the owner of its node in every group (``staged x
        replicas`` records) and receives the updates of its own node range, about
        ``total / width``; nothing of size ``num_nodes`` is exchanged.  Owners scatter
        them into their own chunks (what ``store.update`` does, row by row), then the
        store's sync makes them visible to every reader.

        ``wait=False`` (the same on every rank, checked in the round): a non-blocking
        commit, to overlap the update of batch ``i`` with the sampling of batch ``i + 1``.
        The checks, the packing and the step's round (so every error is still raised on
        every rank, before anything starts) run here as with ``wait=True``; the exchange,
        the apply and the sync run in a background thread on this memory's own
        communicator (a duplicate of ``store.comm``, made by the constructor), so the
        caller may make other collective calls on the store meanwhile.  Until it ends,
        this memory's lock is held as during a blocking commit: :meth:`read` (any
        thread), :meth:`reset`, :meth:`snapshot`, :meth:`restore`, :meth:`remove` and
        the next ``commit`` wait for it, so every read returns exactly what it would
        after a blocking commit; :meth:`write` / :meth:`post` stage at once (for the
        next commit).  :meth:`wait` blocks until it is applied.  ``store.remove`` of its
        variables and ``store.free`` (at exit: at most ``DDSTORE_EXIT_TIMEOUT``
        seconds) wait for it too.  A failure in the background is kept and raised by
        every later call on this memory (the next commit raises it on every rank).

        After the round, blocking or not, the ranks agree (one ``Allreduce`` of a flag)
        on the allocation of the receive buffer before the exchange, and on the apply
        after it: what one rank raised there is a :class:`DDStoreStateError` on every
        rank naming it (no rank waits for one that failed); a failed apply leaves the
        state unknown: every later call refuses the memory, and the members mark it in
        their commit counts (``name/commits``), which forked readers, :meth:`open` and a
        checkpoint of the store see."""
        error = self._error
        writes, posts = self._writes, self._posts
        self._clear()  # dropped on every rank whether or not the commit succeeds
        given, good_wait = wait, isinstance(wait, (bool, np.bool_))
        wait = bool(wait) if good_wait else True
        st = self.store
        self._settle()  # the previous non-blocking commit ends first (its failure kept)
        lock = self._lock
        # held from before the step's round (which every rank must enter before any rank
        # leaves it) until after the sync that ends the commit (which no rank leaves
        # before every rank's apply is done): no read of any rank overlaps any apply
        lock.acquire_exclusive()
        started = False
        try:
            small = st.size * st.group_size <= _COUNTS_IN_AGREEMENT
            # the one round: whatever the local part raises (a bad staging, a failed
            # background commit, memory for the send buffer) is raised on every rank
            with st.collective("NodeMemory.commit", self.name,
                               same={"wait": wait}) as step:
                if error is not None:
                    raise error
                if not good_wait:
                    raise DDStoreValueError(f"NodeMemory {self.name!r}: commit(wait="
                                            f"{given!r}): wait must be True or False")
                self._check_vars()
                packed = self._pack(writes, posts)
                gathered = step.agree(packed[0] if small else None)
            self._begin()  # (after the round: see _begin)
            gathered = gathered if small else None
            if wait:
                failed = self._apply(packed, gathered, st.comm)
                if failed is not None:  # alike on every rank
                    self._failed(*failed)
                self._sync()
                return
            if not self._may_overlap():  # the same calls, on the same communicator,
                started = True  # here (_background releases the lock): ranks that
                self._background(packed, gathered)  # overlap and ranks that do not agree
                return
            thread = threading.Thread(target=self._background, args=(packed, gathered),
                                      name=f"ddstore-commit-{self.name}", daemon=True)
            st.track(thread)  # store.remove / free join it first
            self._pending = thread
            thread.start()
            started = True
        finally:
            if not started:
                self._end()
                lock.release_exclusive()

    def _may_overlap(self):
        """Whether a non-blocking commit may run in a thread: MPI calls from two threads
        at once need ``MPI_THREAD_MULTIPLE`` (below it the thread's exchange crashed or
        hung the job).  Below it, the commit runs in the caller's thread, told once per
        memory with a ``RuntimeWarning``."""
        from mpi4py import MPI
        level = MPI.Query_thread()
        if level >= MPI.THREAD_MULTIPLE:
            return True
        if not self._told_level:
            self._told_level = True
            names = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED:
                     "MPI_THREAD_FUNNELED", MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED"}
            warnings.warn(f"NodeMemory {self.name!r}: commit(wait=False) overlaps its "
                          f"exchange with the caller's MPI calls, which needs "
                          f"MPI_THREAD_MULTIPLE, but MPI was initialised with "
                          f"{names.get(level, level)} on rank {self.store.rank}: it commits "
                          f"without overlap (initialise MPI with THREAD_MULTIPLE, "
                          f"mpi4py's default, to overlap)", RuntimeWarning, stacklevel=4)
        return False

    def _apply(self, packed, gathered, comm, sync=False):
        """Collective over ``comm``, the commit after its step's round: the exchange and
        the apply into this rank's chunks (with ``sync``, then the local half of the
        sync that ends it).  Returns None, or, alike on every rank, ``(what failed,
        whether anything was applied)``: the ranks agree (:meth:`_agreed`) on the receive
        buffer's allocation before the exchange and on the apply after it, so no rank
        waits in the exchange or the sync for one that failed."""
        failure = None
        got = self._received(packed[0], gathered, comm)
        try:  # everything the exchange needs, made before the ranks agree
            plan = self._exchange_plan(packed, got)
        except Exception as exc:  # noqa: BLE001 -- agreed just below
            failure = exc
        failed = self._agreed(comm, failure, "before its exchange")
        if failed is not None:
            return failed, False
        alltoallv_rows(comm, *plan)  # the one row scatter, in rows of 8 bytes
        try:
            wk, wr, pk, pr = self._unpack(got, plan[3], plan[5] * 8)
            if wk.shape[0]:
                self._apply_writes(wk, np.ascontiguousarray(wk[:, 3]).view(self.ts_dtype),
                                   wr)
            if pk.shape[0]:
                self._apply_mails(pk, np.ascontiguousarray(pk[:, 3]).view(self.ts_dtype),
                                  pr)
            if sync:
                self.store.sync_windows(*self._h.values())
        except Exception as exc:  # noqa: BLE001 -- agreed just below
            failure = exc
        failed = self._agreed(comm, failure, "while applying it")
        return None if failed is None else (failed, True)

    def _failed(self, what, applied, blocking=True):
        """A commit failed after its round (``what``, from :meth:`_apply`, alike on every
        rank): when anything was ``applied`` (the state is then unknown), or in the
        background, every later call on the memory refuses it (:meth:`_check_vars`); a
        ``blocking`` commit raises it now."""
        told = (f"{what}; its state is unknown" if applied else
                f"{what}, nothing applied (the updates it took are dropped)")
        if applied:  # marked in the store too: forked readers, open and a checkpoint
            self._changing = False  # see it (no _end: the mark stays)
            self._counts[:] = _FAILED
            if self.name in self.store.annotations(self.KIND):  # (and save)
                self.store.annotation(self.name, self.KIND).refuse_save(
                    f"{what}: its state is unknown")
        if applied or not blocking:
            self._failure = told
        if blocking:
            raise DDStoreStateError(f"NodeMemory {self.name!r}: {told}" +
                                    (": remove it and create a new one" if applied else ""))

    def _agreed(self, comm, failure, when):
        """Collective over ``comm`` (one ``Allreduce`` of a flag; the failing ranks'
        messages are gathered only when one failed): None when no rank's ``failure`` is
        set, else the same text on every rank (``"a commit failed <when> (rank r: ...)"``)
        naming the ranks and what each raised.  The ranks of a commit meet here after
        each local part that follows its round, so none waits for a rank that failed."""
        from mpi4py import MPI
        flag = np.array([failure is not None], np.int64)
        comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        if not flag[0]:
            return None
        told = None
        if failure is not None:
            try:
                told = f"{type(failure).__name__}: {failure}"
            except Exception:  # noqa: BLE001 -- an exception whose __str__ raises
                told = type(failure).__name__
        detail = "; ".join(f"rank {r}: {t}" for r, t in enumerate(comm.allgather(told))
                           if t is not None)
        return f"a commit failed {when} ({detail})"

    def _background(self, packed, gathered):
        """A non-blocking commit's thread: exchange and apply on this memory's own
        communicator, then the store's sync made of its local halves around a barrier
        on that communicator (what ``store.sync`` does on ``store.comm``); releases the
        lock the caller took, whatever happens."""
        try:
            # the agreement that ends _apply is the sync's barrier
            failed = self._apply(packed, gathered, self._comm, sync=True)
            if failed is None:
                self.store.sync_windows(*self._h.values())
            else:
                self._failed(*failed, blocking=False)  # kept for the next call
        except BaseException as exc:  # noqa: BLE001 -- kept, raised by the next call
            self._failure = (f"a non-blocking commit failed on rank {self.store.rank} "
                             f"({type(exc).__name__}: {exc}); its state is unknown")
        finally:
            self._end()
            self._lock.release_exclusive()

    def _settle(self):
        """Join the last non-blocking commit's thread (bounded at exit)."""
        thread = self._pending
        if thread is not None:
            join_bounded(thread)
            self._pending = None

    def wait(self):
        """Local: block until the last :meth:`commit` (``wait=False``) has been applied
        here and every rank's part of it is visible to this rank's reads; raises
        :class:`DDStoreStateError` if it failed.  Returns at once when none is under
        way."""
        self._settle()
        self._check_vars()

    def _records(self):
        """Bytes of one write record and of one mail record: 4 int64 keys and the row,
        padded to 8 bytes."""
        item = self.dtype.itemsize
        return (32 + -(-self.memory_dim * item // 8) * 8,
                32 + -(-self.mail_dim * item // 8) * 8)

    def _pack(self, writes, posts):
        """This rank's staged updates as one send buffer for the group members:
        ``(counts, buffer, displs)``, ``counts [width, 2]`` the writes and mails for
        member ``g``, whose bytes (its write records, then its mail records) start at
        ``displs[g]`` of ``buffer``."""
        width = self.store.group_size
        recs = self._records()
        parts = []
        for staged, dim, rec in ((writes, self.memory_dim, recs[0]),
                                 (posts, self.mail_dim, recs[1])):
            keys, rows = self._gather(staged, dim)
            dest = self._owner(keys[:, 0])
            order = None if width == 1 else np.argsort(dest, kind="stable")
            cnt = np.bincount(dest, minlength=width).astype(np.int64)
            rb = dim * self.dtype.itemsize
            parts.append((keys.view(np.uint8).reshape(-1, 32),
                          rows.view(np.uint8).reshape(rows.shape[0], rb), order, cnt,
                          np.concatenate([[0], np.cumsum(cnt)])))
        wc, pc = parts[0][3], parts[1][3]
        nbytes = wc * recs[0] + pc * recs[1]
        displs = self._displs(nbytes)
        buf = self._buffer("send", int(nbytes.sum()))
        for g in range(width):  # member g's write records, then its mail records
            d = int(displs[g])
            for (keys, rows, order, cnt, off), rec in zip(parts, recs):
                k = int(cnt[g])
                if not k:
                    continue
                view = buf[d:d + k * rec].reshape(k, rec)
                sel = slice(off[g], off[g + 1]) if order is None else \
                    order[off[g]:off[g + 1]]
                view[:, :32] = keys[sel]
                view[:, 32:32 + rows.shape[1]] = rows[sel]
                view[:, 32 + rows.shape[1]:] = 0  # padding
                d += k * rec
        return np.stack([wc, pc], axis=1), buf, displs

    def _buffer(self, which, nbytes):
        """A byte buffer of ``nbytes`` for the commit's exchange, kept between commits
        (grown as needed, O(batch)): no fresh pages to fault in on every commit."""
        buf = self._buffers.get(which)
        if buf is None or buf.shape[0] < nbytes:
            buf = self._buffers[which] = np.empty(max(nbytes, 1 << 16), np.uint8)
        return buf[:nbytes]

    def _received(self, counts, gathered, comm):
        """What each rank sends to this group member: ``[size, 2]`` counts of writes and
        mails.  ``gathered``: every rank's ``counts`` from the round (None: too many
        ranks to gather them there; then an ``alltoall`` of them over ``comm``)."""
        st = self.store
        if gathered is None:  # rank r sends to member r % width
            got = comm.alltoall(counts.tolist() * (st.size // st.group_size))
        else:
            got = [c[st.group_rank] for c in gathered]
        return np.array(got, np.int64).reshape(st.size, 2)

    def _exchange_plan(self, packed, got):
        """The arguments of the commit's one ``Alltoallv`` of records
        (:func:`~ddstore.placement.alltoallv_rows`, rows of 8 bytes: every record is
        padded to 8) from this rank's send buffer (``packed``) and what each rank sends
        to this member (``got``, from :meth:`_received`), the receive buffer included;
        refused beyond ``2**31 - 1`` rows (16 GiB) with one peer."""
        ngroups = self.store.size // self.store.group_size
        counts, buf, displs = packed
        recs = self._records()
        send_rows = (counts[:, 0] * recs[0] + counts[:, 1] * recs[1]) // 8
        recv_rows = (got[:, 0] * recs[0] + got[:, 1] * recs[1]) // 8
        if max(send_rows.max(initial=0), recv_rows.max(initial=0)) >= 2 ** 31:
            raise DDStoreValueError(f"NodeMemory {self.name!r}: a commit exchanges more "
                                    f"than 16 GiB with one rank (at most 2**31 - 1 rows "
                                    f"of 8 bytes): commit more often")
        recv = self._buffer("recv", int(recv_rows.sum()) * 8)
        return (buf.view(np.uint64), np.tile(send_rows, ngroups),
                np.tile(displs // 8, ngroups), recv.view(np.uint64), recv_rows,
                self._displs(recv_rows))

    @staticmethod
    def _displs(nbytes):
        return np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)

    def _unpack(self, got, recv, recv_displs):
        """This rank's write keys, write rows, mail keys and mail rows received by the
        exchange (each rank's records at byte ``recv_displs[r]`` of ``recv``), in
        source-rank order (views of ``recv`` where one rank sent them)."""
        recs = self._records()
        recv = recv.view(np.uint8)
        out = []
        for kind, rec, dim in ((0, recs[0], self.memory_dim), (1, recs[1], self.mail_dim)):
            start = recv_displs + (0 if kind == 0 else got[:, 0] * recs[0])
            pieces = [recv[int(a):int(a) + int(k) * rec]
                      for a, k in zip(start, got[:, kind]) if k]
            # one sender: its records in place; several: one copy into one block
            rows = (pieces[0] if len(pieces) == 1 else np.concatenate(pieces) if pieces
                    else np.zeros(0, np.uint8)).reshape(-1, rec)
            rb = dim * self.dtype.itemsize
            # views of the records (each row's bytes are contiguous and 8-aligned): the
            # apply reads keys and rows in place, no copy
            out.append(rows[:, :32].view(np.int64))
            out.append(rows[:, 32:32 + rb].view(self.dtype))
        return out

    def _sync(self):
        """Every rank's writes visible to all readers (the store's collective sync); its
        variables' local halves first, which tell processes forked from the rank that
        they changed (the writes went through views: ``DDStore.sync_windows``)."""
        self.store.sync_windows(*self._h.values())
        self.store.sync()

    def _owner(self, nodes):
        return np.searchsorted(self.node_offsets, nodes, side="right") - 1

    @staticmethod
    def _order(keys, ts):
        """Sort by node, then (ts, rank, position)."""
        return np.lexsort((keys[:, 2], keys[:, 1], ts, keys[:, 0]))

    def _apply_writes(self, keys, ts, rows):
        o = self._order(keys, ts)
        node = keys[o, 0]
        last = np.ones(node.shape[0], bool)
        last[:-1] = node[1:] != node[:-1]  # the greatest (ts, rank, position) per node
        sel = o[last]
        local = keys[sel, 0] - self.lo
        self._write_rows("memory", local, rows[sel])
        self._write_rows("memory_ts", local, ts[sel])

    def _apply_mails(self, keys, ts, rows):
        S = self.mailbox_size
        o = self._order(keys, ts)
        node = keys[o, 0]
        uniq, first, cnt = np.unique(node, return_index=True, return_counts=True)
        which = np.repeat(np.arange(uniq.shape[0]), cnt)     # unique index of each mail
        k = np.arange(node.shape[0]) - first[which]           # place in its node's order
        keep = k >= (cnt[which] - S)                          # only the S latest survive
        local = uniq - self.lo
        before = self._own["mail_count"][local]
        # the kept mails of a node are its last <= S, so their slots are distinct
        w = which[keep]
        slot = (before[w] + k[keep]) % S
        self._own["mail"][local[w], slot] = rows[o[keep]]
        self._own["mail_ts"][local[w], slot] = ts[o[keep]]
        self._write_rows("mail_count", local, before + cnt)

    def _write_rows(self, key, local, values):
        """Write ``values`` at the distinct local rows ``local`` of this rank's chunk (a
        scatter into the chunk, as ``store.update`` would copy them; readers see the rows
        after the sync that ends the commit)."""
        if local.shape[0]:
            self._own[key][local] = values

    # ------------------------------------------------------------------ whole state
    def _zero_own_rows(self):
        for k in _VARS:
            self._own[k][...] = 0

    @holds_interrupts  # (an exchange or a sync follows the round)
    def reset(self):
        """Collective: every node's memory, mailbox and timestamps back to zero (e.g. at
        the start of every epoch).  Staged updates are dropped."""
        self._clear()
        self._settle()
        with self._lock.exclusive(), self._changes():  # as in commit
            with self.store.collective("NodeMemory.reset", self.name) as step:
                self._check_vars()
                step.agree()
            self._begin()
            self._zero_own_rows()
            self._sync()

    def snapshot(self):
        """Collective: keep a copy of the whole state (each rank copies its own rows,
        in local memory: ``nbytes()`` counts it) to bring it back with :meth:`restore`,
        e.g. the state at the end of training to evaluate val and test from it twice.
        A later snapshot replaces it (a copy that does not fit on some rank raises on
        every rank, and the earlier snapshot stays)."""
        self._settle()  # the state after the last commit
        # and after a commit under way through another object of this memory (they share
        # the lock): copied between commits, never half of one (a probe's torn copies)
        lock = self._lock
        lock.acquire_shared()
        try:
            with self.store.collective("NodeMemory.snapshot", self.name):
                self._check_vars()
                copy = {k: self._own[k].copy() for k in _VARS}
        finally:
            lock.release_shared()
        self._snapshot = copy

    @holds_interrupts  # (an exchange or a sync follows the round)
    def restore(self):
        """Collective: bring back the state of the last :meth:`snapshot` (it is kept, so
        it can be restored again).  Staged updates are dropped.  Raises
        :class:`DDStoreValueError` on every rank if any rank has no snapshot."""
        self._clear()
        self._settle()
        with self._lock.exclusive(), self._changes():  # as in commit
            with self.store.collective("NodeMemory.restore", self.name) as step:
                self._check_vars()
                if self._snapshot is None:
                    raise DDStoreValueError(f"NodeMemory {self.name!r}: restore() without "
                                            f"a snapshot(); call snapshot() first")
                step.agree()
            self._begin()
            for k in _VARS:
                self._own[k][...] = self._snapshot[k]
            self._sync()

    def remove(self):
        """Collective: remove the state's variables from the store (and the snapshot,
        and what was staged; those the store still holds, when one of them was removed
        with ``store.remove``); a non-blocking commit under way ends first (a failed one
        does not prevent the removal).  Inside an enclosing transaction the variables
        are set aside until it commits; if it rolls back, this object holds them again,
        as it did before (its snapshot and staged updates too)."""
        self._settle()
        with self._lock.exclusive():  # reads in other threads finish first
            with self.store.transaction(f"NodeMemory.remove {self.name!r}") as txn:
                with self.store.collective("NodeMemory.remove", self.name) as step:
                    if self._own is None:  # removed already: said so
                        self._check_vars(failure=False)
                    step.agree()
                # what the store still holds (one of them removed with store.remove:
                # this removes the rest, alike on every rank, as removals are)
                held = [self._var[k] for k in _ALL if self._h.get(k) in self.store]
                kept = (self._own, self._snapshot, self._writes, self._posts,
                        self._error)

                def restore():  # (the variables are back under their names)
                    self._own, self._snapshot, self._writes, self._posts, \
                        self._error = kept
                    self._comm = self.store.comm.Dup()  # (every rank rolls back)
                txn.set_aside(held, on_rollback=restore)
                self._own = None  # the chunks go with the variables
                self._free_comm()
                self._snapshot = None
                self._clear()

    def _rolled_back(self):
        self._own, self._rolled = None, True
        self._free_comm()

    def _free_comm(self):
        """Free the non-blocking commits' communicator: collective (``remove``, or the
        rollback of a transaction enclosing the constructor, on every rank)."""
        if self._comm is not None:
            self._comm.Free()
            self._comm = None

    def nbytes(self):
        """Local: bytes this rank holds for this memory: its rows of the state's five
        variables (``state / width``) and its 16 bytes of commit counts, plus its
        snapshot, if any (staged updates not counted)."""
        self._check_vars()
        total = sum(self.store.nbytes(self._h[k]) for k in _ALL)
        if self._snapshot is not None:
            total += sum(a.nbytes for a in self._snapshot.values())
        return int(total)

    def __repr__(self):
        return (f"NodeMemory({self.name!r}, num_nodes={self.num_nodes}, memory_dim="
                f"{self.memory_dim}, mail_dim={self.mail_dim}, mailbox_size="
                f"{self.mailbox_size}, dtype={self.dtype}, ts_dtype={self.ts_dtype})")
