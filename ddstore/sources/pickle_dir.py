"""PFF: one pickle file per sample, read through a restricted unpickler.

Layout written by :func:`write_pickle_files` (and ``ddstore.graphs.write_pickle_dir``)::

    path/ddstore-pff.json          {"format": "ddstore-pff", "nsamples": N, "pattern": ...}
    path/sample-00000000.pkl       sample 0
    path/sample-00000001.pkl       ...

A directory without ``ddstore-pff.json`` is read too: its ``*.pkl`` files (or those
matching ``pattern``) sorted by the numbers in their names ("natural" order), which is
how HydraGNN-style ``label-<i>.pkl`` directories are numbered.

Unpickling runs code named by the file, so files are read through
:class:`RestrictedUnpickler`, which admits only numpy arrays and scalars, torch tensors
and dtypes, and PyG ``Data`` objects.  A pickle that names anything else raises a
:class:`~ddstore.errors.DDStoreValueError` naming the file, before anything it names is
called.  Nor can the callables it admits be asked for memory the file does not hold:
``bytes``, ``bytearray``, ``set`` and ``frozenset`` are made only from items spelled out
in the pickle (not from a size or a ``range``), and numpy arrays only as numpy's own
pickles make them (filled from the bytes in the file, checked against their shape).
"""
import _compat_pickle
import glob
import io
import json
import os
import pickle
import re

from .._checks import sample_at
from ..errors import DDStoreValueError
from .base import (Source, check_index, file_share, regular_file, written_in_place,
                   written_path)

__all__ = ["RestrictedUnpickler", "restricted_load", "restricted_loads",
           "PickleDirSource", "write_pickle_files", "META_NAME"]

META_NAME = "ddstore-pff.json"
_DEFAULT_PATTERN = "sample-{:08d}.pkl"

_ALLOWED = {
    "collections": {"OrderedDict"},
    "_codecs": {"encode"},  # how protocols < 3 spell bytes objects
    "builtins": {"set", "frozenset", "complex", "slice", "range", "bytearray", "bytes"},
    "numpy": {"ndarray", "dtype"},
    "numpy.core.multiarray": {"_reconstruct", "scalar"},
    "numpy._core.multiarray": {"_reconstruct", "scalar"},
    "numpy.core.numeric": {"_frombuffer"},
    "numpy._core.numeric": {"_frombuffer"},
    "torch._utils": {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
                     "_rebuild_parameter", "_rebuild_parameter_with_state"},
    "torch": {"Size", "device"},
    "torch_geometric.data.data": {"Data", "DataEdgeAttr", "DataTensorAttr"},
    "torch_geometric.data.storage": {"GlobalStorage", "NodeStorage", "EdgeStorage"},
    "torch_geometric.data.feature_store": {"TensorAttr"},
    "torch_geometric.data.graph_store": {"EdgeAttr", "EdgeLayout"},
}


def _given(kind):
    """``kind`` (bytes, bytearray, set, frozenset) for the unpickler: made only from what the
    pickle spells out (a list, a tuple, str or bytes: how pickle writes these objects),
    never from a size or a lazy range, so a few bytes of pickle cannot ask for gigabytes
    (``bytearray(2**40)``, ``set(range(2**40))``)."""
    def make(*args):
        if args and not isinstance(args[0], (list, tuple, str, bytes)):
            raise ValueError(f"{kind.__name__}() of a {type(args[0]).__name__}: a pickle "
                             f"spells out its items (a list, str or bytes)")
        return kind(*args)
    return make


_NDARRAY = object()  # numpy.ndarray as the pickle names it: only _reconstruct's argument


def _reconstruct(cls, shape, dtype):
    """numpy's ``_reconstruct`` as numpy's own pickles call it: an empty ndarray
    (``shape`` (0,)) that ``__setstate__`` then fills from the bytes in the pickle,
    checked against its shape.  Anything else (another class, a size asked for here)
    is refused."""
    import numpy as np
    if cls is not _NDARRAY or shape != (0,):
        raise ValueError("numpy _reconstruct is called by numpy's pickles with "
                         "(ndarray, (0,), ...) only")
    return np.ndarray.__new__(np.ndarray, (0,), dtype)


def _rebuilt_tensor(name):
    """torch's ``torch._utils.<name>``, refusing a tensor of more elements than its
    storage holds (a stride-0 view, ``zeros(1, 4).expand(2**31, 4)``: 748 bytes of
    pickle that a copy turns into 32 GB)."""
    def rebuild(*args, **kwargs):
        import torch._utils
        t = getattr(torch._utils, name)(*args, **kwargs)
        if t.numel() * t.element_size() > t.untyped_storage().nbytes():
            raise ValueError(f"a tensor of shape {tuple(t.shape)} over a storage of "
                             f"{t.untyped_storage().nbytes()} bytes (a view that repeats "
                             f"its elements, strides {t.stride()}): a pickle holds the "
                             f"bytes of its tensors")
        return t
    return rebuild


def _no_objects(make):
    """``make`` (numpy's ``dtype``, a ``numpy.dtypes`` class) refusing a dtype that holds
    Python objects: no layer stores one, and numpy's ``__setstate__`` of an object array
    from a hostile pickle's state crashes the process (a list of 3 items for 2**20
    elements).  Every dtype of a pickle, a structured dtype's fields' too, is made by
    such a call, so none gets past it."""
    def build(*args, **kwargs):
        dt = make(*args, **kwargs)
        if getattr(dt, "hasobject", False):
            raise ValueError(f"a numpy dtype holding Python objects ({dt}): stored data "
                             f"holds numbers, booleans and strings only")
        return dt
    return build


_CALLS = {("builtins", "bytearray"): _given(bytearray), ("builtins", "bytes"): _given(bytes),
          ("torch._utils", "_rebuild_tensor"): _rebuilt_tensor("_rebuild_tensor"),
          ("torch._utils", "_rebuild_tensor_v2"): _rebuilt_tensor("_rebuild_tensor_v2"),
          # (v3: the dtypes without a typed storage class, uint16/32/64, as torch writes them)
          ("torch._utils", "_rebuild_tensor_v3"): _rebuilt_tensor("_rebuild_tensor_v3"),
          ("builtins", "set"): _given(set), ("builtins", "frozenset"): _given(frozenset),
          ("numpy", "ndarray"): _NDARRAY,
          ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
          ("numpy._core.multiarray", "_reconstruct"): _reconstruct}


def _load_tensor_storage(data):
    """Stand-in for ``torch.storage._load_from_bytes``: the same bytes, loaded with
    torch's own restricted (``weights_only``) loader instead of a full unpickle."""
    import torch
    return torch.load(io.BytesIO(data), weights_only=True)


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only numpy, torch and PyG data types.

    ``find_class`` raises :class:`~ddstore.errors.DDStoreValueError` for any other global,
    so a malicious pickle fails before anything it names can run.
    """

    def __init__(self, file, origin="<pickle>"):
        super().__init__(file)
        self.origin = origin

    def find_class(self, module, name):
        # Python 2's names (__builtin__, xrange: protocols 0-2), mapped as pickle maps
        # them; the result is checked like any other name
        module, name = _compat_pickle.NAME_MAPPING.get(
            (module, name), (_compat_pickle.IMPORT_MAPPING.get(module, module), name))
        if module == "torch.storage" and name == "_load_from_bytes":
            return _load_tensor_storage
        if module == "numpy.dtypes" and name.endswith("DType") or \
                (module, name) == ("numpy", "dtype"):
            return _no_objects(super().find_class(module, name))
        if module == "torch" and not name.startswith("_"):
            import torch
            if isinstance(getattr(torch, name, None), torch.dtype):
                return getattr(torch, name)
        if name in _ALLOWED.get(module, ()):
            return _CALLS.get((module, name)) or super().find_class(module, name)
        hint = ""
        if (module, name) == ("copyreg", "_reconstructor"):
            hint = ("; it rebuilds an object pickled with protocol 0 or 1 (a Data "
                    "included): write the samples with protocol 2 or later (pickle's "
                    "default, and write_pickle_dir's)")
        if (module, name) == ("torch._tensor", "_rebuild_from_type_v2"):
            hint = ("; it rebuilds a subclass of torch.Tensor (such as PyG's EdgeIndex "
                    "and Index), which this reader does not make: pickle plain tensors "
                    "(their value.as_tensor()), or load the samples yourself and "
                    "store them with GraphDataset.from_samples")
        raise DDStoreValueError(
            f"{self.origin}: pickle refers to {module}.{name}, which is not allowed "
            f"(only numpy and torch arrays and tensors, Python values and "
            f"torch_geometric's Data and its parts may be unpickled){hint}; nothing was "
            f"executed")


def restricted_loads(data, origin="<bytes>"):
    """Unpickle ``data`` (bytes) with :class:`RestrictedUnpickler`."""
    return _load(io.BytesIO(data), origin)


def _load(fileobj, origin):
    try:
        return RestrictedUnpickler(fileobj, origin).load()
    except DDStoreValueError:
        raise
    except Exception as exc:  # corrupt or truncated pickles raise many types
        raise DDStoreValueError(f"{origin}: not a readable pickle "
                                f"({type(exc).__name__}: {exc})") from None


def restricted_load(path):
    """Unpickle the file ``path`` with :class:`RestrictedUnpickler`; every error names
    the file."""
    try:
        path = regular_file(path, "", "cannot read pickle file (No such file or directory)")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise DDStoreValueError(f"{path}: cannot read pickle file ({exc.strerror})") \
            from None
    if not data:
        raise DDStoreValueError(f"{path}: pickle file is empty")
    return _load(io.BytesIO(data), path)


def _natural_key(path):
    name = os.path.basename(path)
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


class PickleDirSource(Source):
    """Samples stored one pickle file per sample in a directory (PFF).

    Parameters
    ----------
    path : str
        The directory.
    pattern : str, optional
        Glob of the sample files when the directory has no ``ddstore-pff.json``
        (default ``*.pkl``), sorted in natural order.

    Notes
    -----
    Constructing it reads only the small metadata file (or lists the directory);
    :meth:`read` opens only the files of the requested range.
    """

    def __init__(self, path, pattern="*.pkl"):
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            what = "is not a directory" if os.path.exists(self.path) else "does not exist"
            raise DDStoreValueError(f"pickle directory {self.path!r} {what}")
        meta_path = os.path.join(self.path, META_NAME)
        self._files = None
        if os.path.lexists(meta_path):
            regular_file(meta_path)
            try:
                with open(meta_path) as f:
                    meta = json.load(f)
                self._n = meta["nsamples"]
                self._pattern = str(meta.get("pattern", _DEFAULT_PATTERN))
            except (OSError, ValueError, KeyError, TypeError, IndexError,
                    RecursionError) as exc:
                raise DDStoreValueError(f"{meta_path}: corrupt metadata file "
                                        f"({type(exc).__name__}: {exc})") from None
            if isinstance(self._n, bool) or not isinstance(self._n, int) or self._n < 0:
                raise DDStoreValueError(f"{meta_path}: nsamples={self._n!r} must be an "
                                        f"integer >= 0")
            sample_names(self._pattern, self._n, f"{meta_path}: ")
            if self._n:  # the count is the files': the last one exists (a count of 10**12
                # over four files built a list of 10**12 names, for ever)
                try:
                    last = os.path.join(self.path, self._pattern.format(self._n - 1))
                except (ValueError, OverflowError, IndexError, KeyError) as exc:
                    raise DDStoreValueError(f"{meta_path}: pattern={self._pattern!r} "
                                            f"cannot name sample {self._n - 1} "
                                            f"({type(exc).__name__}: {exc})") from None
                if not os.path.lexists(last):
                    raise DDStoreValueError(
                        f"{meta_path}: nsamples={self._n} but the last sample's file "
                        f"{last!r} does not exist; the metadata does not match the files")
            after = os.path.join(self.path, self._pattern.format(self._n))
            if os.path.lexists(after):  # (a smaller count dropped the later samples)
                raise DDStoreValueError(
                    f"{meta_path}: nsamples={self._n} but sample {self._n}'s file "
                    f"{after!r} exists too; the metadata does not match the files")
            if pattern != "*.pkl":  # (the metadata names the files: a glob is not used)
                raise DDStoreValueError(
                    f"pickle directory {self.path!r}: pattern={pattern!r} is for a "
                    f"directory without {META_NAME}; this one has it (its files are "
                    f"named by its own pattern {self._pattern!r}): leave pattern out")
        else:
            files = glob.glob(os.path.join(glob.escape(self.path), pattern))
            odd = sorted(f for f in files if not os.path.isfile(f))
            if odd:  # (dropped without a word, it renumbered the samples after it)
                raise DDStoreValueError(
                    f"pickle directory {self.path!r}: {odd[0]!r} matches {pattern!r} but "
                    f"is not a regular file (a directory, a FIFO or a dangling link; "
                    f"{len(odd)} such); remove it or give a pattern that leaves it out")
            self._files = sorted(files, key=_natural_key)
            self._n = len(self._files)
        if self._n == 0:
            raise DDStoreValueError(f"pickle directory {self.path!r} is empty: no sample "
                                    f"files ({pattern if self._files is not None else META_NAME})")

    def __len__(self):
        return self._n

    def file(self, index):
        """The file that holds sample ``index``."""
        index = check_index(f" in {self.path!r}", index, self._n)
        if self._files is not None:
            return self._files[index]
        return os.path.join(self.path, self._pattern.format(index))

    def describe(self, index):
        return f"file {self.file(index)!r}"

    def file_marks(self):
        """The directory's mark over the files read (the metadata file, if any, and every
        sample file: names and sizes, the ends of the first and last; see
        :func:`~ddstore.sources.base.file_share`), so that ranks handed different
        directories (a stale copy on one node) are refused."""
        files = [self.file(i) for i in range(self._n)]
        if self._files is None:
            files.insert(0, os.path.join(self.path, META_NAME))
        return (file_share(self.path, files=files),)

    def read_one(self, index):
        """Unpickle sample ``index`` (restricted)."""
        return restricted_load(self.file(index))


def sample_names(pattern, n, where=""):
    """Check the file-name ``pattern`` of ``n`` samples (``pattern.format(i)``) as PFF
    reads and writes it: a field for the sample number (two samples, two names), a
    plain file name directly in the directory (no separator, not absolute, not ``..``),
    at most 255 characters; raise :class:`DDStoreValueError` prefixed by ``where``
    naming the pattern."""
    try:
        names = (pattern.format(0), pattern.format(1))
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as exc:
        raise DDStoreValueError(f"{where}pattern={pattern!r} cannot name a sample by its "
                                f"number ({type(exc).__name__}: {exc}); e.g. "
                                f"{_DEFAULT_PATTERN!r}") from None
    if n > 1 and names[0] == names[1]:
        raise DDStoreValueError(f"{where}pattern={pattern!r} names the same file for "
                                f"every sample ({names[0]!r}); it needs a field for the "
                                f"sample number, e.g. {_DEFAULT_PATTERN!r}")
    if len(names[0]) > 255:  # NAME_MAX (a 100 MB name was formatted, once each)
        raise DDStoreValueError(f"{where}pattern={pattern[:80]!r}... names a file of "
                                f"{len(names[0])} characters; a file name has at most 255")
    if os.path.isabs(names[0]) or re.search(r"[\\/]", names[0]) or \
            names[0] in ("", ".", "..", META_NAME):
        raise DDStoreValueError(f"{where}pattern={pattern!r} names {names[0]!r}, outside "
                                f"the directory or not a file name; sample files lie in "
                                f"it, e.g. {_DEFAULT_PATTERN!r}")


def _is_pff(path):
    """Raise unless directory ``path`` holds a PFF data set of :func:`write_pickle_files`
    and nothing else."""
    with open(os.path.join(path, META_NAME)) as f:
        meta = json.load(f)
    if not isinstance(meta, dict) or meta.get("format") != "ddstore-pff":
        raise ValueError(f"its {META_NAME} is not of format 'ddstore-pff'")
    pattern, n = str(meta.get("pattern", _DEFAULT_PATTERN)), meta.get("nsamples")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"its nsamples={n!r} is not an integer >= 0")
    sample_names(pattern, n, f"its {META_NAME}: ")
    entries = os.listdir(path)
    if n + 1 > len(entries):  # (the names made below: as many as it holds, at most)
        raise ValueError(f"it holds {len(entries)} entries, its {META_NAME} says "
                         f"{n} samples and itself")
    other = sorted(set(entries) - {META_NAME} - {pattern.format(i) for i in range(n)})
    if other:
        raise ValueError(f"it also holds {len(other)} other entries: {other[:3]}")


def write_pickle_files(samples, path, pattern=_DEFAULT_PATTERN, progress=False,
                       call="write_pickle_files"):
    """Write each sample of ``samples`` to its own pickle file in directory ``path``
    plus the ``ddstore-pff.json`` metadata file.  Returns the number written.  Local
    (not collective): call it on one rank.

    Each sample is unpickled back (by the restricted unpickler
    :class:`PickleDirSource` reads with) before it is written: one it would refuse is
    refused here, naming it (what a layer then makes of the sample, e.g.
    :class:`~ddstore.graphs.GraphDataset`'s dtype rules, is checked when it loads).
    All or nothing, and touching nothing else: ``path`` must be new, an empty directory
    or a PFF directory of an earlier write (that and nothing else), which is replaced
    only once every file is written (:func:`~ddstore.sources.base.written_in_place`).
    ``call``: the name errors give the call (a layer's writer passes its own)."""
    path = written_path(path, call)
    what = f"{call}({path!r})"
    n = len(samples)
    sample_names(pattern, n, f"{what}: ")
    with written_in_place(path, what, "ddstore PFF directory", _is_pff) as temporary:
        os.makedirs(temporary)
        it = range(n)
        if progress:
            from tqdm import tqdm
            it = tqdm(it, desc=f"writing {path}", unit="file")
        for i in it:
            data = pickle.dumps(sample_at(samples, i, what), protocol=pickle.HIGHEST_PROTOCOL)
            # what the reader would refuse is refused here, before anything is kept (a
            # torch uint16 tensor's pickle, which torch itself cannot load back)
            try:
                restricted_loads(data, f"{what}: sample {i} would not read back: "
                                       f"{pattern.format(i)}")
            except DDStoreValueError as exc:
                if "UntypedStorage" not in str(exc):
                    raise
                raise DDStoreValueError(f"{exc} (a torch tensor of a dtype whose pickle "
                                        f"torch cannot load, uint16, uint32 or uint64: "
                                        f"store it as int32 or int64)") from None
            with open(os.path.join(temporary, pattern.format(i)), "wb") as f:
                f.write(data)
        with open(os.path.join(temporary, META_NAME), "w") as f:
            json.dump({"format": "ddstore-pff", "version": 1, "nsamples": n,
                       "pattern": pattern}, f)
    return n
