"""Build and install ddstore.  The C core is compiled through cffi against the MPI found
by ``MPICC`` (or ``mpicc`` on PATH); install without build isolation so that it is the
same MPI that mpi4py uses:

    pip install mpich mpi4py cffi numpy
    pip install --no-build-isolation -e .
"""
from setuptools import find_packages, setup

setup(
    name="ddstore",
    version="0.1.0",
    description="Distributed in-memory data store for GNN and spatiotemporal training "
                "on MPI",
    packages=find_packages(include=["ddstore", "ddstore.*"]),
    py_modules=["pyddstore"],
    python_requires=">=3.10",  # torch 2.x and numpy 2 need 3.10
    setup_requires=["cffi>=1.15"],
    cffi_modules=["python_bindings/build_ddstore.py:ffibuilder"],
    install_requires=["numpy", "mpi4py>=3.1", "cffi>=1.15", "tqdm"],
    extras_require={
        "torch": ["torch", "torch_geometric"],
        "adios": ["adios2"],
    },
    entry_points={"console_scripts": ["ddstore=ddstore.__main__:run"]},
)
