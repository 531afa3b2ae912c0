"""The API reference (``docs/api``): built from the docstrings with warnings as errors.

``test_api_reference_builds`` runs ``python -m sphinx -W --keep-going -b html docs/api
<tmp>`` (autodoc + napoleon, numpy-style docstrings), so CI builds the reference with
the suite and any warning (a docstring that is not valid reStructuredText, a duplicate
object, a module that fails to import) fails it; to build it by hand::

    python -m sphinx -W -b html docs/api build/api     # then open build/api/index.html

napoleon does not warn where prose follows a ``Parameters`` section without a header of
its own (it turns each such line into a parameter); ``test_parameters_name_arguments``
catches that: every parameter the reference shows is an argument of the object.
"""
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, require_mpi_marker

API = os.path.join(ROOT, "docs", "api")

# the public modules: each has a page docs/api/<page>.rst that documents it
PUBLIC = {"ddstore": "ddstore", "ddstore.graphs": "graphs",
          "ddstore.spatiotemporal": "spatiotemporal", "ddstore.dynamic": "dynamic",
          "ddstore.temporal": "temporal", "ddstore.pyg": "pyg", "ddstore.sources": "sources",
          "pyddstore": "pyddstore", "ddstore.device": "training",
          "ddstore.prefetch": "training", "ddstore.distributed": "training"}
NOT_API = {"ddstore.bench": "benchmark programs (python -m ddstore bench-*), no API"}


def test_every_public_module_has_a_page():
    """The reference documents every public module, each on a page of the index; a new
    subpackage of ``ddstore`` (its lazy-import list) needs a page or a reason here."""
    import ddstore
    subpackages = {f"ddstore.{name}" for name in ddstore._LAZY}
    assert subpackages - set(NOT_API) <= set(PUBLIC), \
        f"subpackages with no API page: {sorted(subpackages - set(NOT_API) - set(PUBLIC))}"
    with open(os.path.join(API, "index.rst")) as f:
        index = f.read()
    for module, page in PUBLIC.items():
        assert re.search(rf"^\s+{page}$", index, re.M), f"index.rst lists no page {page}"
        with open(os.path.join(API, f"{page}.rst")) as f:
            assert f".. automodule:: {module}\n" in f.read(), f"{page}.rst: {module}"


def test_every_public_module_is_an_attribute_of_the_package():
    """What the docs call as ``ddstore.<module>.<name>`` after ``import ddstore`` alone
    (``ddstore.distributed.init_torch_distributed()``) is there: each public submodule
    is loaded on first use (``ddstore.distributed`` raised AttributeError)."""
    names = sorted(m.split(".", 1)[1] for m in PUBLIC if m.startswith("ddstore."))
    code = "import ddstore\n" + "".join(f"ddstore.{n}\n" for n in names)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def documented_objects():
    """(qualified name, object) of every public module, its ``__all__`` and the public
    methods and properties of its classes, once per object."""
    seen = set()
    for module in PUBLIC:
        mod = importlib.import_module(module)
        todo = [(module, mod)] + [(f"{module}.{n}", getattr(mod, n)) for n in mod.__all__]
        for name, obj in todo:
            if inspect.isclass(obj):
                for key, value in vars(obj).items():
                    if key.startswith("_"):
                        continue
                    value = value.fget if isinstance(value, property) else \
                        getattr(value, "__func__", value)
                    if inspect.isfunction(value):
                        todo.append((f"{name}.{key}", value))
            if id(obj) not in seen:
                seen.add(id(obj))
                yield name, obj


def parameter_names(obj):
    """The parameter names napoleon renders from ``obj``'s docstring."""
    from sphinx.ext.napoleon import Config
    from sphinx.ext.napoleon.docstring import NumpyDocstring
    text = str(NumpyDocstring(inspect.getdoc(obj) or "", Config(napoleon_use_param=True)))
    return [m.group(1) for m in re.finditer(r"^:param (.*?):", text, re.M)]


def unknown_parameters(obj):
    """The parameters ``obj``'s rendered docstring shows that are not arguments of its
    signature (None where it has no signature to check them against)."""
    names = parameter_names(obj)
    try:
        target = obj.__init__ if inspect.isclass(obj) else obj
        arguments = set(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return None
    return [n for entry in names for n in re.split(r",\s*", entry)
            if n.lstrip("*") not in arguments]


def test_parameters_name_arguments():
    bad, checked = [], 0
    for name, obj in documented_objects():
        if parameter_names(obj) and unknown_parameters(obj) is not None:
            checked += 1
            bad += [f"{name}: {n!r}" for n in unknown_parameters(obj)]
    assert checked >= 5, f"only {checked} docstrings with a Parameters section were found"
    assert not bad, ("parameters that are not arguments (prose after a Parameters "
                     "section needs a header, e.g. Notes):\n" + "\n".join(bad))


def test_the_check_catches_prose_after_parameters():
    def f(a, b=1):
        """Do it.

        Parameters
        ----------
        a : int
            The first.
        b : int, optional
            The second.

        Collective like every call here.
        """
    assert unknown_parameters(f) == ["Collective like every call here."]
    f.__doc__ = f.__doc__.replace("        Collective", "        Notes\n        -----\n"
                                                     "        Collective")
    assert parameter_names(f) == ["a", "b"] and unknown_parameters(f) == []


def sphinx_build(source, out, pythonpath):
    """Run sphinx-build with warnings as errors (--keep-going: every warning is listed):
    (exit code, output, command line)."""
    require_mpi_marker()
    env = dict(os.environ, PYTHONPATH=pythonpath + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(out / "doctrees"), str(source), str(out / "html")]
    proc = subprocess.run(["timeout", "--kill-after=10", "300"] + cmd, cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout, " ".join(cmd)


@pytest.mark.mpi
def test_api_reference_builds(tmp_path):
    rc, out, cmd = sphinx_build(API, tmp_path, ROOT)
    assert rc == 0 and "WARNING" not in out, f"exit code {rc}: {cmd}\n{out}"
    with open(tmp_path / "html" / "index.html") as f:
        index = f.read()
    for page in PUBLIC.values():
        assert f'href="{page}.html"' in index, page
    with open(tmp_path / "html" / "ddstore.html") as f:
        page = f.read()
    assert 'id="ddstore.DDStore.get_batch"' in page   # autodoc documented the members


@pytest.mark.mpi
def test_a_docstring_warning_fails_the_build(tmp_path):
    """The build above fails on a warning: a module whose docstring opens an inline
    literal it never closes, under the same configuration."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "broken_mod.py").write_text('"""Returns ``x, never closed."""\n')
    with open(os.path.join(API, "conf.py")) as f:
        (tmp_path / "src" / "conf.py").write_text(f.read())
    (tmp_path / "src" / "index.rst").write_text("Broken\n======\n\n"
                                                ".. automodule:: broken_mod\n")
    rc, out, cmd = sphinx_build(tmp_path / "src", tmp_path, str(tmp_path / "src"))
    assert rc != 0 and "Inline literal start-string without end-string" in out, \
        f"exit code {rc}: {cmd}\n{out}"
