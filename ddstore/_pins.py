"""The store's chunks page-locked in place, for copies to a GPU that read them directly.

A copy from pageable host memory to a GPU goes through a bounce buffer of the driver (or
our pinned staging, filled by a host copy: about 5-13 GB/s, against about 55 GB/s for a
DMA from page-locked memory on an H200).  :class:`HostPins` registers a chunk of the store
with CUDA where it lies (``cudaHostRegister``, portable to every device), once per chunk,
so that ``device_tensor.copy_(chunk[rows], non_blocking=True)`` is a DMA with no host copy.

Lifetime: a registration is undone (``cudaHostUnregister``, after the devices the views
were handed out for have finished their work) before its memory is unmapped: the store
calls :meth:`HostPins.release` when a variable is removed and when the store is freed.
Pages of a registered range that were unmapped while registered would stay pinned, and a
later mapping at the same address would be read stale: hence the rule.

Without CUDA (``device="cpu"``) the views are plain tensors over the same memory and
nothing is registered: the logic of the layers that use them is tested that way.
"""
import threading
import warnings

__all__ = ["HostPins", "clear_cuda_error", "cuda_runtime"]

_PORTABLE = 1  # cudaHostRegisterPortable: page-locked for every CUDA context
_RUNTIME = []  # [the CUDA runtime library torch loaded, as a ctypes handle], once found


def cuda_runtime():
    """The CUDA runtime library this process loaded (torch's ``libcudart``), as a ctypes
    handle on that same instance, or None where it is not a shared library found in
    ``/proc/self/maps`` (a CPU build, a statically linked runtime)."""
    if not _RUNTIME:
        import ctypes
        try:
            with open("/proc/self/maps") as f:
                paths = sorted({line.split()[-1] for line in f if "libcudart.so" in line})
        except OSError:
            paths = []
        for path in paths:
            try:
                _RUNTIME.append(ctypes.CDLL(path))  # already loaded: the same instance
                break
            except OSError:
                continue
        else:
            return None  # looked for again next time (torch may load it later)
    return _RUNTIME[0]


def clear_cuda_error():
    """Reset this thread's last error of the CUDA runtime (``cudaGetLastError``) after a
    runtime call whose failure is handled here: the runtime keeps the last error per
    thread, and torch checks it after each kernel it launches, so a refusal we answered
    (a chunk staged instead of page-locked) would otherwise fail an unrelated later
    kernel with our error."""
    lib = cuda_runtime()
    if lib is not None:
        try:
            lib.cudaGetLastError()
        except AttributeError:  # not a runtime after all: nothing to reset
            pass


class HostPins:
    """Per variable id, the views handed out and the ranges registered with CUDA."""

    def __init__(self):
        self._lock = threading.Lock()
        self._views = {}       # (vid, device type) -> [tensor or None per member]
        self._registered = {}  # vid -> [pointer registered]
        self._devices = set()  # CUDA devices views were handed out for
        self._refused = set()  # vids CUDA refused to register (warned once each)

    def views(self, vid, name, members, device):
        """``[tensor or None]`` per group member for variable ``vid`` (``name`` for
        messages): ``members`` yields each member's numpy view in turn, or None for one
        this process does not map (consumed only the first time).  On a CUDA ``device`` each
        chunk is registered once; a chunk CUDA refuses gives None (a warning says why, once
        per variable)."""
        import torch
        cuda = device.type == "cuda"
        key = (vid, "cuda" if cuda else "cpu")
        with self._lock:
            got = self._views.get(key)
            if got is not None:
                if cuda:
                    self._devices.add(device)
                return got
            out = []
            for m, arr in enumerate(members):
                if arr is None or arr.size == 0:
                    out.append(None if arr is None else torch.from_numpy(arr))
                    continue
                t = torch.from_numpy(arr)
                if cuda and not self._register(vid, name, m, t, device):
                    t = None
                out.append(t)
            if cuda:
                self._devices.add(device)
            self._views[key] = out
            return out

    def _register(self, vid, name, member, t, device):
        """Register tensor ``t`` (member ``member``'s chunk) with CUDA; False if refused."""
        import torch
        if vid in self._refused:
            return False
        ptr, nbytes = t.data_ptr(), t.numel() * t.element_size()
        with torch.cuda.device(device):  # no context made on device 0 by a thread
            err = int(torch.cuda.cudart().cudaHostRegister(ptr, nbytes, _PORTABLE))
        if err != 0:
            clear_cuda_error()  # handled here: no later kernel of torch's may fail with it
            self._refused.add(vid)
            warnings.warn(f"variable {name!r}: CUDA did not page-lock member {member}'s "
                          f"chunk ({nbytes} bytes) in place (cudaHostRegister error "
                          f"{err}); its rows reach the device through pinned staging",
                          RuntimeWarning, stacklevel=4)
            return False
        self._registered.setdefault(vid, []).append(ptr)
        return True

    def release(self, vid=None):
        """Undo the registrations of variable ``vid`` (every variable when None), after
        the devices they were used for have finished: call before unmapping them."""
        with self._lock:
            vids = [v for v in {k[0] for k in self._views} | set(self._registered)
                    if vid is None or v == vid]
            for v in vids:
                self._views.pop((v, "cuda"), None)
                self._views.pop((v, "cpu"), None)
                self._refused.discard(v)
            ptrs = [p for v in vids for p in self._registered.pop(v, [])]
            if not ptrs:
                return
            import torch
            try:
                for dev in self._devices:  # the DMAs that read these ranges are done
                    torch.cuda.synchronize(dev)
            except Exception:  # noqa: BLE001 -- at exit CUDA may be gone already
                pass
            for p in ptrs:
                try:
                    torch.cuda.cudart().cudaHostUnregister(p)
                except Exception:  # noqa: BLE001 -- the process's end unpins it anyway
                    pass
