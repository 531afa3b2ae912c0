"""Memory measurement for the benchmarks (Linux ``/proc``; zeros elsewhere).

- ``peak_rss()`` is the kernel's high-water mark of this process's resident set
  (``VmHWM``); ``reset_peak()`` restarts it (``/proc/self/clear_refs``), so a benchmark can
  measure the peak of each phase exactly.
- RSS counts every page this process has touched, including pages of shared memory that
  other ranks own (a store's peer chunks read through MPI-3 shared memory), so RSS summed
  over ranks over-counts a node.  PSS (proportional set size) divides each shared page
  among the processes that map it, so PSS sums to the node's true use; the kernel keeps
  no PSS peak, so :class:`MemoryWatch` samples it in a background thread.
"""
import threading

__all__ = ["peak_rss", "current_rss", "reset_peak", "smaps_rollup", "MemoryWatch",
           "node_available"]


def _status(field):
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss():
    """Bytes: the peak resident set of this process since start (or the last reset)."""
    return _status("VmHWM")


def current_rss():
    """Bytes resident now."""
    return _status("VmRSS")


def reset_peak():
    """Restart the peak-RSS mark at the current RSS; False where the kernel cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:  # pragma: no cover
        return False


def smaps_rollup():
    """``{Rss, Pss, Shared_Clean, Shared_Dirty, Private_Clean, Private_Dirty}`` in bytes."""
    out = {}
    try:
        with open("/proc/self/smaps_rollup") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and parts[-1] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:  # pragma: no cover
        pass
    return out


def node_available():
    """Bytes the kernel reports as available on this node (``MemAvailable``)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover
        pass
    return 0


class MemoryWatch:
    """Samples this process's PSS (and, if ``node=True``, the node's MemAvailable) every
    ``interval`` seconds in a daemon thread; :meth:`phase` returns the peaks since the
    previous call together with the exact peak RSS, then starts a new phase."""

    def __init__(self, interval=0.25, node=False):
        self.interval, self.node = interval, node
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reset()
        reset_peak()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="ddstore-memwatch")
        self._thread.start()

    def _reset(self):
        self._peak_pss = 0
        self._min_avail = None

    def _sample(self):
        pss = smaps_rollup().get("Pss", 0)
        avail = node_available() if self.node else None
        with self._lock:
            self._peak_pss = max(self._peak_pss, pss)
            if avail is not None:
                self._min_avail = avail if self._min_avail is None else min(
                    self._min_avail, avail)

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def sample(self):
        """Sample now, besides the thread's samples: at a moment known to be a peak
        (a benchmark's batch alive), which a sample every ``interval`` may miss."""
        self._sample()

    def phase(self):
        """``{peak_rss, rss, peak_pss, pss, min_node_available}`` of the phase just ended
        (bytes), then a new phase starts."""
        self._sample()
        with self._lock:
            out = {"peak_rss": peak_rss(), "rss": current_rss(),
                   "peak_pss": self._peak_pss, "pss": smaps_rollup().get("Pss", 0),
                   "min_node_available": self._min_avail}
            self._reset()
        reset_peak()
        return out

    def stop(self):
        self._stop.set()
        self._thread.join()


if __name__ == "__main__":  # (python -m ddstore.bench.memory printed nothing)
    import sys
    print(f"ddstore.bench.memory is a helper of the benchmarks, not one of them:\n{__doc__}"
          f"\nThe benchmarks: python -m ddstore --help", file=sys.stderr)
    sys.exit(0 if {"-h", "--help"} & set(sys.argv[1:]) else 2)
