"""The status board: what each rank of a store's communicator is doing, readable by the
other ranks without their help (see docs/cluster.md, "Failure behaviour").

Every :class:`~ddstore.DDStore` owns a board: an MPI window (``MPI_Win_allocate``, a few
hundred bytes per rank) over its communicator, made and freed with the store.  A rank
writes its own slot with plain local stores whenever what it does changes, so publishing
costs a few hundred nanoseconds and no communication (the collective step of
:mod:`ddstore._collective` calls :func:`publish` when this rank enters or leaves a named
collective call):

- *computing*: outside any ddstore collective call (training, a checkpoint, a plot, or an
  MPI call of its own);
- *in a call*: inside collective call ``X`` (e.g. ``"NodeMemory.commit('mem')"``);
- *exiting*: in the collective free at interpreter exit;
- *left*: ended without that free (an uncaught exception while the abort hook is off).

Another rank reads a slot with ``MPI_Rget`` under a shared lock held for the board's
lifetime (:meth:`Board.poll`, used by the free at interpreter exit in
:mod:`ddstore._lifecycle`).  Inside a node the window is shared memory and a read never
needs the owner; between nodes (or with ``transport="rma"``, whose board is not shared
memory) a read may need the owner to be inside MPI: a read that has not completed is
reported as "not answering" (the owner is busy outside MPI, i.e. computing), and the
last status read stays known.

A slot: ``word``, ``~word`` (a read that does not see both alike is torn and read again),
then two buffers for the description of the call.  ``word`` packs the state, the
description's length and a generation; the description of generation ``g`` is in buffer
``g % 2``, written before the word that names it, so a reader that reads the word, the
buffer, then the same word again holds a description that was not being rewritten.
"""
import time

__all__ = ["Board", "publish", "boards", "same_ranks", "set_exiting", "set_left", "describe",
           "UNKNOWN",
           "COMPUTING", "IN_CALL", "EXITING", "LEFT"]

UNKNOWN, COMPUTING, IN_CALL, EXITING, LEFT = 0, 1, 2, 3, 4
_DESC = 240                  # bytes of a description (longer ones are cut)
_HEAD = 16                   # word, ~word
SLOT = _HEAD + 2 * _DESC     # bytes per rank
_MASK = (1 << 64) - 1

# live boards (creation order) and this rank's own state for boards made later
_BOARDS = []
_SELF = {"exiting": None, "left": None, "done": False}


def _signed(word):
    return word - (1 << 64) if word >= 1 << 63 else word


class Board:
    """The status board of one store's communicator ``comm`` (collective to make and to
    :meth:`free`).  ``shared=False`` asks MPI not to back it by shared memory (the
    store's ``transport="rma"``, which tests the inter-node path on one machine)."""

    def __init__(self, comm, shared=True):
        from mpi4py import MPI
        info = MPI.Info.Create()
        if not shared:
            info.Set("alloc_shm", "false")
        try:
            self.win = MPI.Win.Allocate(SLOT, 1, info, comm)
        finally:
            info.Free()
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        mem = self.win.tomemory()
        self._bytes = memoryview(mem).cast("B")
        self._words = self._bytes[:_HEAD].cast("q")
        self._gen = 0
        self._last = None    # the description in buffer self._gen % 2
        self._desc_bits = 0  # its length and generation, as in a word
        self._in_call = None  # the words of IN_CALL with it
        self._readers = {}   # peer rank -> _Reader
        self.win.Lock_all(MPI.MODE_NOCHECK)
        if _SELF["left"] is not None:
            self.publish(LEFT, _SELF["left"])
        elif _SELF["exiting"] is not None:
            self.publish(EXITING, _SELF["exiting"])
        else:
            self.publish(COMPUTING, None)
        _BOARDS.append(self)

    # ------------------------------------------------------------------ writing
    def publish(self, state, desc):
        """Write this rank's slot (local stores only): ``state`` with description
        ``desc`` (None for none)."""
        if desc is not None and desc != self._last:
            data = desc.encode("utf-8", "replace")[:_DESC]
            self._gen += 1
            at = _HEAD + (self._gen & 1) * _DESC
            self._bytes[at:at + len(data)] = data
            self._last = desc
            self._desc_bits = (len(data) << 8) | ((self._gen & 0xFFFFFFFF) << 16)
        word = state | (0 if desc is None else self._desc_bits)
        w = self._words
        w[0] = word
        w[1] = _signed(~word & _MASK)

    def computing(self):
        """:meth:`publish` of ``COMPUTING`` (the hot path: two stores)."""
        w = self._words
        w[0] = COMPUTING
        w[1] = ~COMPUTING

    def in_call(self, desc):
        """:meth:`publish` of ``IN_CALL`` with ``desc`` (the hot path: two stores when
        ``desc`` is the last one written)."""
        if desc != self._last:
            self.publish(IN_CALL, desc)
            self._in_call = (self._words[0], self._words[1])
            return
        w = self._words
        w[0], w[1] = self._in_call

    # ------------------------------------------------------------------ reading
    def poll(self):
        """Advance the reads of every other rank's slot (never blocks) and return
        ``[(state, description, answering)]`` in rank order, this rank's own included:
        the last status read from each rank (``UNKNOWN`` before the first), and whether
        its last read completed within a second of being started."""
        out = []
        for r in range(self.size):
            if r == self.rank:
                word = self._words[0] & _MASK
                out.append((word & 0xFF, self._last if word >> 8 & 0xFF else None, True))
                continue
            reader = self._readers.get(r)
            if reader is None:
                reader = self._readers[r] = _Reader(self.win, r)
            reader.advance()
            out.append((reader.state, reader.desc, reader.answering()))
        return out

    def free(self):
        """Collective over the board's communicator: release the window."""
        if self in _BOARDS:
            _BOARDS.remove(self)
        self._words = self._bytes = None
        self.win.Unlock_all()  # completes any read still pending (every rank is here)
        self.win.Free()


class _Reader:
    """The reads of one peer's slot: its word, then (when it names a description not
    held yet) the description and the word again (see the module docstring), each an
    ``MPI_Rget`` advanced without blocking."""
    __slots__ = ("win", "rank", "state", "desc", "word", "stage", "request", "started",
                 "buf", "pending")
    IDLE, WORD, DESC, CHECK = range(4)

    def __init__(self, win, rank):
        self.win, self.rank = win, rank
        self.state, self.desc, self.word = UNKNOWN, None, None
        self.stage, self.request, self.started = self.IDLE, None, None
        self.buf = bytearray(_DESC)
        self.pending = None  # (word, description bytes) being checked

    def answering(self):
        return self.request is None or time.monotonic() - self.started < 1.0

    def _get(self, stage, nbytes, disp):
        from mpi4py import MPI
        self.stage = stage
        self.request = self.win.Rget([self.buf, nbytes, MPI.BYTE], self.rank,
                                     [disp, nbytes, MPI.BYTE])
        self.started = time.monotonic()

    def advance(self):
        """Start a read, or carry the one under way as far as it completes at once."""
        if self.request is None:
            self._get(self.WORD, _HEAD, 0)
        while self.request.Test():
            self.request = None
            if not self._completed():
                return

    def _word(self):
        w0 = int.from_bytes(self.buf[0:8], "little")
        w1 = int.from_bytes(self.buf[8:16], "little")
        return w0 if w1 == ~w0 & _MASK else None  # None: torn

    def _completed(self):
        """Handle a completed read; True when the next one was started."""
        if self.stage == self.DESC:
            word = self.pending[0]
            self.pending = (word, bytes(self.buf[:word >> 8 & 0xFF]))
            self._get(self.CHECK, _HEAD, 0)
            return True
        word, stage = self._word(), self.stage
        self.stage = self.IDLE
        if word is None:
            return False  # torn: read again at the next poll
        if stage == self.CHECK and word == self.pending[0]:
            self.desc = self.pending[1].decode("utf-8", "replace")
            self.word, self.state = word, word & 0xFF
            return False
        n = word >> 8 & 0xFF
        if n == 0 or (self.word is not None and word >> 8 == self.word >> 8):
            if n == 0:
                self.desc = None
            self.word, self.state = word, word & 0xFF  # the description held, if any
            return False
        self.pending = (word, None)
        self._get(self.DESC, n, _HEAD + (word >> 16 & 1) * _DESC)
        return True


def publish(desc, comm):
    """This rank entered collective call ``desc`` over ``comm`` (``desc=None``: left it):
    written to the board of every live store whose communicator has the same ranks as
    ``comm`` (the hook of :mod:`ddstore._collective`, called per named step: a few
    hundred nanoseconds, no communication).  Once this rank is exiting, its boards keep
    saying so."""
    if _SELF["done"]:
        return
    for board in _BOARDS:
        if board.comm is comm or same_ranks(board.comm, comm):
            if desc is None:
                board.computing()
            else:
                board.in_call(desc)


def same_ranks(a, b):
    """Whether communicators ``a`` and ``b`` hold the same ranks (False when either is
    freed)."""
    from mpi4py import MPI
    try:
        return MPI.Comm.Compare(a, b) in (MPI.IDENT, MPI.CONGRUENT, MPI.SIMILAR)
    except MPI.Exception:  # a freed communicator
        return False


def boards():
    """The live boards (a new list, in creation order)."""
    return list(_BOARDS)


def set_exiting(desc):
    """This rank is in the free at interpreter exit (on every board, and those made
    later)."""
    _SELF["exiting"], _SELF["done"] = desc, True
    for board in _BOARDS:
        board.publish(EXITING, desc)


def set_left(desc):
    """This rank ends without the collective free at exit (every board)."""
    _SELF["left"], _SELF["done"] = desc, True
    for board in _BOARDS:
        board.publish(LEFT, desc)


def describe(state, desc, answering=True):
    """What a rank is doing, as a phrase after its rank: ``"is in add('y')"``."""
    if state == IN_CALL:
        text = f"is in {desc}" if desc else "is in a collective call"
    elif state == EXITING:
        text = "is exiting"
    elif state == LEFT:
        text = f"has left ({desc})" if desc else "has left"
    elif state == COMPUTING:
        text = "is computing outside any ddstore call"
    else:
        text = "has not been read yet"
    if not answering:
        text += " (not answering: busy outside MPI)"
    return text


def summary(statuses, ranks=None):
    """``"rank 0 is in add('y'), ranks 1, 2 are exiting"`` for ``statuses`` (from
    :meth:`Board.poll`), over ``ranks`` (default all)."""
    groups = {}
    for r in (range(len(statuses)) if ranks is None else ranks):
        groups.setdefault(describe(*statuses[r]), []).append(r)
    parts = []
    for text, rs in groups.items():
        if len(rs) == 1:
            parts.append(f"rank {rs[0]} {text}")
        else:
            verb = text.split(" ", 1)
            plural = {"is": "are", "has": "have"}.get(verb[0], verb[0])
            parts.append(f"ranks {_spans(rs)} {plural} {verb[1]}")
    return ", ".join(parts)


def _spans(ranks):
    """``"1, 2"``, ``"1-5, 7"`` (ascending ``ranks``; runs of three or more joined)."""
    out, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            run = ranks[start:i]
            out += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
            start = i
    return ", ".join(out)
