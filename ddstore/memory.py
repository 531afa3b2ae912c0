"""Memory planning: how much a node can give a store, the agreed budget per rank, and
the width that fits a data size (``DDStore(width="auto")``, :meth:`DDStore.plan`)."""
import decimal
import math
import numbers
import os

from .errors import DDStoreMemoryError, DDStoreValueError
from ._checks import is_int

__all__ = ["MEMORY_BUDGET_FRACTION", "available_memory", "memory_settings",
           "agreed_budget", "plan_width", "gb", "release_free_heap"]

# default memory budget per rank: this fraction of the node's available memory, divided
# by the ranks of the communicator on that node (the rest is left for the interpreter,
# torch, batches and transient buffers)
MEMORY_BUDGET_FRACTION = 0.7


def available_memory(shared=True):
    """Bytes this node can still give to a store now: the smaller of the kernel's
    ``MemAvailable`` and the free space of ``/dev/shm`` (MPI allocates shared windows
    there), the same measure the C core checks every allocation against.
    ``shared=False``: ``MemAvailable`` alone (what a process's own arrays may take)."""
    limit = None
    try:
        if shared:
            st = os.statvfs("/dev/shm")
            limit = st.f_bavail * st.f_frsize
    except OSError:  # pragma: no cover - no /dev/shm
        pass
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:  # pragma: no cover - not Linux
        pass
    if avail is None:
        try:
            import psutil
            avail = int(psutil.virtual_memory().available)
        except ImportError:  # pragma: no cover
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(avail if limit is None else min(limit, avail))


_TRIM = []  # glibc's malloc_trim, or None where there is none: found once


def release_free_heap():
    """Give the heap memory that ``free`` has kept back to the kernel (glibc's
    ``malloc_trim(0)``; nothing elsewhere).  Called after the builds that free large
    temporaries (``pyg.put_node_data``, :class:`~ddstore.dynamic.DynamicGraph`,
    :class:`~ddstore.graphs.GraphDataset` from samples or files), once per build, not
    per call (a trim walks the whole heap: 28 ms on a 400 MB heap of small arrays): what
    a build frees stays in the process's heap otherwise, counted in its RSS for the rest
    of the training (a dynamic graph of 480 MB held 946 MB after its build, 479 MB with
    the trim).  Returns True when the call was made."""
    if not _TRIM:
        import ctypes
        import ctypes.util
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            trim = libc.malloc_trim
            trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):  # not glibc
            trim = None
        _TRIM.append(trim)
    if _TRIM[0] is None:
        return False
    _TRIM[0](0)
    return True


def check_nbytes(nbytes, what="nbytes"):
    """``nbytes`` as an int; raises :class:`DDStoreValueError` naming ``what``."""
    if not is_int(nbytes) or nbytes < 0:
        raise DDStoreValueError(f"{what}={nbytes!r} must be an integer number of bytes "
                                f">= 0")
    return int(nbytes)


def check_budget(budget):
    """``budget`` as an int (exact: an integer of any size) or a float (or None);
    raises :class:`DDStoreValueError`."""
    if budget is None:
        return None
    if is_int(budget) and budget > 0:  # (math.isfinite of 10**400 would overflow)
        return int(budget)
    if (isinstance(budget, bool) or not isinstance(budget, numbers.Real) or is_int(budget)
            or not math.isfinite(budget) or budget <= 0):
        raise DDStoreValueError(f"memory_budget={budget!r} must be a positive finite "
                                f"number of bytes per rank (or None for "
                                f"{MEMORY_BUDGET_FRACTION} x the node's available memory "
                                f"/ ranks on the node)")
    return float(budget)


def memory_settings(width, data_nbytes, memory_budget, what="data_nbytes"):
    """Local checks of the memory arguments: ``(nbytes, (budget, host, available))``,
    both None when no data size is given; raises :class:`DDStoreValueError`."""
    from mpi4py import MPI
    if data_nbytes is None:
        if width == "auto":
            raise DDStoreValueError("width='auto' needs data_nbytes= (the bytes of data "
                                    "that will be added), or choose a width with "
                                    "DDStore.plan(nbytes)")
        if memory_budget is not None:
            raise DDStoreValueError(f"memory_budget={memory_budget!r} needs data_nbytes= "
                                    f"(the bytes of data it is checked against)")
        return None, None
    nbytes = check_nbytes(data_nbytes, what)
    budget = check_budget(memory_budget)
    return nbytes, (budget, MPI.Get_processor_name(), available_memory())


def gb(nbytes):
    try:
        return f"{nbytes / 1e9:.4g} GB"
    except OverflowError:  # an integer beyond any float: its decimal digits
        return f"{decimal.Decimal(int(nbytes)) / 10 ** 9:.4g} GB"


def check_fits(nbytes, what, allowed):
    """Raise :class:`DDStoreMemoryError` unless ``nbytes`` of this process's own arrays
    fit in the memory this node has available now (``MemAvailable``, not ``/dev/shm``:
    :func:`available_memory` with ``shared=False``): ``what`` says what needs them (an
    argument and its value), ``allowed`` the range that fits, made from the bytes
    available (``allowed(avail)``, a str), so the message names both."""
    avail = available_memory(shared=False)
    if nbytes > avail:
        raise DDStoreMemoryError(f"{what} needs {gb_bytes(nbytes)}, more than the "
                                 f"{gb_bytes(avail)} of memory available on this node; "
                                 f"allowed: {allowed(avail)}")


def gb_bytes(nbytes):
    """``nbytes`` in GB and exact bytes: where a share is compared with a budget, two
    amounts that round alike ("25 GB, more than 25 GB") still show which is larger."""
    return f"{gb(nbytes)} ({int(nbytes)} bytes)"


def agreed_budget(infos):
    """The memory budget per rank every rank uses: the smallest over the ranks of each
    rank's own budget (given, or the default from its node's available memory).
    ``infos``: per rank ``(budget or None, host, available bytes)``."""
    per_host = {}
    for _, host, _ in infos:
        per_host[host] = per_host.get(host, 0) + 1
    budgets = [b if b is not None else MEMORY_BUDGET_FRACTION * avail / per_host[host]
               for b, host, avail in infos]
    r = min(range(len(budgets)), key=budgets.__getitem__)  # (exact: ints of any size)
    given = infos[r][0] is not None
    how = (f"memory_budget={gb_bytes(budgets[r])} (given, rank {r})" if given else
           f"memory budget {gb_bytes(budgets[r])} per rank ({MEMORY_BUDGET_FRACTION} x "
           f"{gb(infos[r][2])} available on rank {r}'s node / {per_host[infos[r][1]]} "
           f"ranks there)")
    return budgets[r], how


def plan_width(size, nbytes, budget, how):
    """The smallest width dividing ``size`` whose per-rank share ``ceil(nbytes / width)``
    fits ``budget``; raises :class:`DDStoreMemoryError` when none does."""
    for w in range(1, size + 1):
        if size % w == 0 and -(-nbytes // w) <= budget:
            return w
    raise DDStoreMemoryError(
        f"{gb(nbytes)} of data does not fit: even at width={size} (the communicator "
        f"size) each rank holds {gb_bytes(-(-nbytes // size))}, more than the {how}; use "
        f"more ranks (or nodes), or a larger memory_budget")


def decide_width(width, size, nbytes, settings):
    """``(width, budget)`` from the agreed per-rank ``settings`` (see
    :func:`agreed_budget`): ``width="auto"`` becomes the smallest width that fits
    (:func:`plan_width`); a given width whose share per rank exceeds the budget raises
    :class:`DDStoreMemoryError` naming the width that would fit.  The same on every rank
    (agreed values only)."""
    budget, how = agreed_budget(settings)
    if width == "auto":
        return plan_width(size, nbytes, budget, how), budget
    if -(-nbytes // width) > budget:
        try:
            hint = f"width={plan_width(size, nbytes, budget, how)} (or width='auto') fits"
        except DDStoreMemoryError:
            hint = "no width fits on this many ranks"
        raise DDStoreMemoryError(
            f"width={width}: each rank would hold {gb_bytes(-(-nbytes // width))} of the "
            f"{gb(nbytes)} of data (data_nbytes={nbytes}), more than the {how}; {hint}")
    return width, budget
