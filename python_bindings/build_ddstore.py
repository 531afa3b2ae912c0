"""cffi build script: compiles csrc/ into the extension module ``ddstore._ddstore_cffi``.

MPI is found the way mpi4py finds it: the compiler wrapper named by the environment
variable ``MPICC`` (default: the ``mpicc`` beside the running Python, where the ``mpich``
package from PyPI installs one, else ``mpicc`` on PATH).  Its compile and link flags (``mpicc -show`` for MPICH, ``--showme`` for Open MPI)
are passed to the compiler, and the MPI library directory is put in the extension's
rpath, so it loads the same ``libmpi`` that mpi4py loads from that installation.

Run directly (``python python_bindings/build_ddstore.py [OUTDIR]``) to build in place
(or into ``OUTDIR/ddstore/``), or through ``setup.py`` (``cffi_modules``).

``DDSTORE_SANITIZE=1`` builds with AddressSanitizer and UndefinedBehaviorSanitizer
(``-fsanitize=address,undefined``, frame pointers and debug lines kept): the build
``scripts/sanitize.sh`` makes into ``build/asan`` and runs the tests over.  Python itself
is not instrumented, so such a module loads only with the ASan runtime preloaded
(``LD_PRELOAD=$(gcc -print-file-name=libasan.so)``).

Link-time optimisation (``-flto``) is on when the compiler Python builds extensions
with accepts it (a probe compiles and links a two-file shared library), off for the
sanitizer build, and off with ``DDSTORE_LTO=0``.  The C core is split by layer (the store
walks a read, ``transport.c`` moves its bytes): without LTO every single-row read paid
the calls across those files (about 500 instructions per ``dds_read_range``, 434 with
LTO, counted by callgrind; ``docs/benchmarks.md``).
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CSRC = os.path.join(ROOT, "csrc")


def mpi_flags():
    """(include_dirs, library_dirs, libraries, extra_link_args) from the MPI wrapper."""
    # MPICC, else the mpicc that pip's `mpich` put beside this Python (a virtual
    # environment that is not activated has it there but not on PATH), else PATH
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    mpicc = (os.environ.get("MPICC") or (beside if os.access(beside, os.X_OK) else None)
             or shutil.which("mpicc"))
    if not mpicc:
        raise RuntimeError(f"no MPI compiler wrapper found (looked at $MPICC, {beside} and "
                           f"PATH): 'pip install mpich' (or set MPICC=/path/to/your/mpicc "
                           f"for a cluster MPI)")
    words = None
    for flag in ("-show", "--showme", "-showme"):
        try:
            out = subprocess.run(shlex.split(mpicc) + [flag], capture_output=True,
                                 text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        words = shlex.split(out)[1:]
        break
    if words is None:
        raise RuntimeError(f"could not query compile flags from MPICC={mpicc!r}")
    incs, libdirs, libs, link = [], [], [], []
    for w in words:
        if w.startswith("-I"):
            incs.append(w[2:])
        elif w.startswith("-L"):
            libdirs.append(w[2:])
        elif w.startswith("-l"):
            libs.append(w[2:])
        elif w.startswith("-Wl,") or w.startswith("-pthread"):
            link.append(w)
    for d in libdirs:
        link.append(f"-Wl,-rpath,{d}")
    return incs, libdirs, libs or ["mpi"], link


SANITIZE = os.environ.get("DDSTORE_SANITIZE", "") not in ("", "0")


def lto_flags():
    """``["-flto"]`` when link-time optimisation is wanted and the extension compiler
    (Python's ``CC``, as setuptools uses it) compiles and links a two-file shared library
    with it; else ``[]`` (a compiler or linker without LTO support builds as before)."""
    if SANITIZE or os.environ.get("DDSTORE_LTO", "1") == "0":
        return []
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    with tempfile.TemporaryDirectory() as d:
        for name, text in (("a.c", "int dds_lto_b(int);\nint dds_lto_a(int x) "
                                    "{ return dds_lto_b(x) + 1; }\n"),
                           ("b.c", "int dds_lto_b(int x) { return 2 * x; }\n")):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        cmd = cc + ["-O2", "-flto", "-fPIC", "-shared", os.path.join(d, "a.c"),
                    os.path.join(d, "b.c"), "-o", os.path.join(d, "t.so")]
        try:
            ok = subprocess.run(cmd, capture_output=True, timeout=120).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
    return ["-flto"] if ok else []
_SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]


def _api_headers():
    """The concept headers of the C API, in the order the umbrella ``csrc/ddstore.h``
    includes them (its ``#include "..."`` lines)."""
    with open(os.path.join(CSRC, "ddstore.h")) as f:
        return re.findall(r'^#include "([^"]+)"', f.read(), re.M)


def _declarations(name):
    """What cffi declares of one API header: its text without preprocessor lines and
    the C++ ``extern "C"`` wrapper."""
    with open(os.path.join(CSRC, name)) as f:
        return "\n".join(line for line in f.read().splitlines()
                         if not (line.startswith("#") or 'extern "C"' in line
                                 or line.strip() == "}"))


_cdef = "\n".join(_declarations(h) for h in _api_headers())

ffibuilder = FFI()
# MPI_Comm is opaque to cffi: an int in MPICH, a pointer in Open MPI.
ffibuilder.cdef("typedef ... MPI_Comm;\n" + _cdef)
_incs, _libdirs, _libs, _link = mpi_flags()
_lto = lto_flags()


def _csrc(f):
    """A file of csrc/: relative to ROOT for setup.py, absolute when run directly (cffi
    then compiles inside the output directory)."""
    path = os.path.join(CSRC, f)
    return path if __name__ == "__main__" else os.path.relpath(path, ROOT)


ffibuilder.set_source(
    "ddstore._ddstore_cffi",
    '#include "ddstore.h"',
    sources=[_csrc(f) for f in ("ddstore.c", "temporal.c", "tcsr.c", "neighbor.c",
                                "dynamic.c", "subgraph.c", "checks.c", "progress.c", "serve.c",
                                "base.c", "transport.c",
                                "sampling.c", "relabel.c", "device.c")],
    include_dirs=[CSRC] + _incs,
    library_dirs=_libdirs,
    libraries=_libs,
    depends=[_csrc(os.path.basename(h)) for h in sorted(glob.glob(os.path.join(CSRC, "*.h")))],
    extra_compile_args=["-O2", "-std=c11", "-Wall"] + _lto
    + (_SANITIZE_FLAGS if SANITIZE else []),
    # with LTO the optimisation happens at the link: it needs the level again
    extra_link_args=_link + (["-O2"] + _lto if _lto else [])
    + (_SANITIZE_FLAGS if SANITIZE else []),
)

if __name__ == "__main__":
    os.chdir(ROOT)
    ffibuilder.compile(tmpdir=sys.argv[1] if len(sys.argv) > 1 else ".", verbose=True)
