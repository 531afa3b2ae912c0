"""The synthetic Ising data set of the DDStore paper.

Each sample is one spin configuration of a ``size x size x size`` simple-cubic lattice
(default 5 x 5 x 5 = 125 atoms) as a PyG ``Data``:

- ``x``: ``[125, 1]`` float32, the spins (+1 or -1);
- ``pos``: ``[125, 3]`` float32, lattice positions (spacing 1, atom ``(i, j, k)`` at
  ``(i, j, k)``; node number ``(i * size + j) * size + k``);
- ``edge_index``: ``[2, E]`` int64, both directions of every nearest-neighbour bond;
- ``edge_attr``: ``[E, 1]`` float32, the bond length;
- ``y``: ``[1, 1]`` float32, the total energy of the nearest-neighbour Ising Hamiltonian
  ``E = -J * sum over bonds <i,j> of s_i * s_j`` (each bond counted once, no field).

Boundaries are **open (not periodic)** by default: an atom on a face has fewer than six
neighbours, so the 5^3 lattice has ``3 * 5 * 5 * 4 = 300`` bonds (600 directed edges) and
every edge is a real geometric neighbour pair of length 1.  ``periodic=True`` adds the
wrap-around bonds (``3 * size^3`` bonds; needs ``size >= 3``), whose ``edge_attr`` is
then still 1 (the minimum-image distance).

Spins are drawn per sample with a random up-probability ``p ~ U(0, 1)``, so that the
data set covers every magnetisation (as HydraGNN's Ising generator does) rather than
only the ``p = 1/2`` configurations; energies range from ``-J * bonds`` to well above 0.
Sample ``i`` depends only on ``(seed, i)``: the data set is deterministic, and any
subset can be built without building the others.
"""
import functools
import math
import numbers

import numpy as np
import torch

from ..errors import DDStoreIndexError, DDStoreValueError
from .._checks import as_bool, as_seed, is_int
from ..memory import check_fits

__all__ = ["ising_dataset", "ising_graph", "ising_energy", "lattice_bonds",
           "IsingDataset", "check_lattice_fits", "BYTES_PER_ATOM"]


def lattice_bonds(size=5, periodic=False):
    """``[nbonds, 2]`` int64 node pairs of every nearest-neighbour bond (each once).
    ``size``: an integer >= 1 (>= 3 when ``periodic``) whose lattice fits in memory;
    ``periodic``: True or False."""
    if not is_int(size) or size < 1:
        raise DDStoreValueError(f"lattice size={size!r} must be an integer >= 1")
    periodic = as_bool(periodic, "lattice periodic")
    if periodic and size < 3:
        raise DDStoreValueError(f"periodic lattice needs size >= 3, got size={size}")
    return _lattice_bonds(int(size), periodic)


BYTES_PER_ATOM = 100  # a sample's bytes per atom: its bonds both ways, positions, spins


def check_lattice_fits(size, name="lattice size="):
    """Raise :class:`~ddstore.DDStoreMemoryError` unless a sample of a ``size`` lattice
    fits in the memory this node has available (``name``: how the caller's user gives
    the size, e.g. ``"--lattice "``); the message names the largest size that fits."""
    def largest(avail):  # the largest k with k**3 atoms within avail, exactly
        atoms = avail // BYTES_PER_ATOM
        k = int(round(atoms ** (1 / 3)))
        while k ** 3 > atoms:
            k -= 1
        while (k + 1) ** 3 <= atoms:
            k += 1
        return f"{name.rstrip('= ')} <= {k}"
    check_fits(size ** 3 * BYTES_PER_ATOM, f"{name}{size} ({size ** 3} atoms)", largest)


@functools.lru_cache(maxsize=8)
def _lattice_bonds(size, periodic):
    check_lattice_fits(size)  # once per size (a refusal is not cached)
    idx = np.arange(size ** 3, dtype=np.int64).reshape(size, size, size)
    bonds = []
    for axis in range(3):
        if periodic:
            other = np.roll(idx, -1, axis=axis)
            bonds.append(np.stack([idx.ravel(), other.ravel()], axis=1))
        else:
            lo = [slice(None)] * 3
            hi = [slice(None)] * 3
            lo[axis], hi[axis] = slice(0, size - 1), slice(1, size)
            bonds.append(np.stack([idx[tuple(lo)].ravel(), idx[tuple(hi)].ravel()],
                                  axis=1))
    out = np.concatenate(bonds)
    out.setflags(write=False)
    return out


def ising_energy(spins, bonds, coupling=1.0):
    """``-coupling * sum(s_i * s_j)`` over ``bonds`` (``[nbonds, 2]`` node pairs, each
    bond once) for the flat array of spins ``spins``."""
    s = np.asarray(spins, dtype=np.float64).ravel()
    b = np.asarray(bonds, dtype=np.int64)
    return float(-coupling * np.sum(s[b[:, 0]] * s[b[:, 1]]))


def ising_graph(spins, periodic=False, coupling=1.0):
    """The ``Data`` of one spin configuration ``spins`` of shape ``(L, L, L)`` (+1/-1)."""
    from torch_geometric.data import Data
    spins = np.asarray(spins)
    if spins.ndim != 3 or len(set(spins.shape)) != 1:
        raise DDStoreValueError(f"spins must have shape (L, L, L), got {spins.shape}")
    if not np.isin(spins, (-1, 1)).all():
        raise DDStoreValueError("spins must all be +1 or -1")
    size = spins.shape[0]
    bonds = lattice_bonds(size, periodic)
    grid = np.stack(np.meshgrid(np.arange(size), np.arange(size), np.arange(size),
                                indexing="ij"), axis=-1).reshape(-1, 3)
    edge_index = np.concatenate([bonds, bonds[:, ::-1]]).T.copy()
    energy = ising_energy(spins, bonds, coupling)
    return Data(x=torch.from_numpy(spins.reshape(-1, 1).astype(np.float32)),
                pos=torch.from_numpy(grid.astype(np.float32)),
                edge_index=torch.from_numpy(edge_index),
                edge_attr=torch.ones(edge_index.shape[1], 1, dtype=torch.float32),
                y=torch.tensor([[energy]], dtype=torch.float32))


class IsingDataset(torch.utils.data.Dataset):
    """A lazy map-style data set of Ising graphs: ``ds[i]`` builds sample ``i``."""

    def __init__(self, n, seed=0, size=5, periodic=False, coupling=1.0):
        if not is_int(n) or n < 0:
            raise DDStoreValueError(f"ising_dataset: n={n!r} must be an integer >= 0")
        lattice_bonds(size, periodic)  # validates size/periodic
        if not isinstance(coupling, numbers.Real) or isinstance(coupling, (bool, np.bool_)) \
                or not math.isfinite(coupling):
            raise DDStoreValueError(f"ising_dataset: coupling={coupling!r} must be a finite "
                                    f"real number")
        # (the package's seed rule: any integer, modulo 2**64; never a truncated float)
        self.n, self.seed = int(n), as_seed(seed, "ising_dataset: seed")
        self.size, self.periodic, self.coupling = int(size), bool(periodic), float(coupling)

    def __len__(self):
        return self.n

    def spins(self, index):
        """The spin configuration of sample ``index``, shape ``(size, size, size)``."""
        rng = np.random.default_rng([self.seed, int(index)])
        p_up = rng.random()
        up = rng.random((self.size,) * 3) < p_up
        return np.where(up, 1, -1).astype(np.int8)

    def __getitem__(self, index):
        if not is_int(index):
            raise DDStoreIndexError(f"IsingDataset index must be an integer, got "
                                    f"{index!r}")
        if not -self.n <= index < self.n:
            raise DDStoreIndexError(f"IsingDataset index {index} out of range "
                                    f"[{-self.n}, {self.n})")
        index = int(index) % self.n
        return ising_graph(self.spins(index), self.periodic, self.coupling)


def ising_dataset(n, seed=0, size=5, periodic=False, coupling=1.0):
    """``n`` Ising graphs (see the module docs), deterministic for ``seed``.

    Returns a lazy :class:`IsingDataset`: samples are built when indexed, so
    ``GraphDataset.from_samples`` builds only each rank's own chunk (and the three
    samples it compares between ranks).  ``list(...)`` it for an in-memory list.
    """
    return IsingDataset(n, seed=seed, size=size, periodic=periodic, coupling=coupling)
