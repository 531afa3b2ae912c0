"""Command-line helpers for ddstore's programs and its examples: ``argparse`` types that
refuse a value out of range with argparse's own error (exit code 2, the option named),
before anything is built or any rank waits for another."""
import argparse
import atexit
import copy
import json
import math
import os
import re
import socket
import sys
import tempfile
import time

from . import _core

__all__ = ["at_least", "int_list", "seed", "SEED_MAX", "output_dir",
           "HelpFormatter", "check_width", "check_widths", "width_text", "widths_text",
           "transports_text", "TRANSPORTS", "report_dir", "report_target", "foreign_file",
           "REPORT_KEYS", "run_program", "nothing_to_train", "input_path", "agreed_call",
           "claim_checkpoint", "RUN_MARK", "other_settings", "saved_epochs",
           "check_resume"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` of the examples and benchmarks: every option says its default, those
    without a help text too, and a help text that already names its default is left as
    it is (no second "(default: ...)")."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "(default" in text:
            return text
        return super()._get_help_string(action)

    def _format_action(self, action):
        if not action.help and action.option_strings and action.nargs != 0 and \
                action.default is not argparse.SUPPRESS:
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)


#: the largest integer an option takes unless it says otherwise: a count, size or seed
#: beyond int64 is no array's (numpy raised its own errors on every rank)
INT_MAX = 2 ** 63 - 1


def at_least(least, kind=int, above=False, most=None):
    """An ``argparse`` ``type=`` for the command lines of ddstore's programs and
    examples: the option's text as ``kind`` (int or float), refused by argparse (exit code
    2, the option named) unless it is ``>= least`` (``> least`` with ``above``; NaN and
    infinities never pass) and ``<= most`` (for an int, :data:`INT_MAX` by default)."""
    what = "an integer" if kind is int else "a number"
    told = most  # (the default bound is named only to a value beyond it)
    if most is None and kind is int:
        most = INT_MAX

    def convert(text):
        try:  # int() and float() take 1_000 and other scripts' digits (٣): not here,
            # as the environment variables do not (one spelling of a number everywhere)
            if not text.isascii() or "_" in text:
                raise ValueError(text)
            value = kind(text)
        except ValueError:
            form = "digits 0-9, a point, an exponent" if kind is float else "digits 0-9"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} ({form}; no "
                                             f"underscores)") from None
        if kind is float and math.isinf(value):  # (a learning rate of inf: nan losses)
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if not (value > least if above else value >= least):
            raise argparse.ArgumentTypeError(
                f"must be {what} {'>' if above else '>='} {least}"
                f"{'' if told is None else f' and <= {most}'}, got {text}")
        if most is not None and not value <= most:
            raise argparse.ArgumentTypeError(f"must be {what} <= {most}, got {text}")
        return value
    convert.__name__ = kind.__name__  # argparse's "invalid <name> value" wording
    return convert


# what every example's --seed takes: numpy's generators refuse a negative seed, torch's
# manual_seed one of 2**64 or more (a seed + 1000 is used for the negatives' stream)
SEED_MAX = 2 ** 63 - 1


def seed():
    """The ``argparse`` ``type=`` of a seed option: an integer in ``[0, SEED_MAX]``."""
    return at_least(0, most=SEED_MAX)


def output_dir(text):
    """An ``argparse`` ``type=`` for a directory a program will write into (a
    ``--checkpoint``): refused at once (exit code 2, the option named) when the path, or
    the nearest part of it that exists, is not a directory or cannot be written, rather
    than after the first epoch's work.  Nothing is left here (an empty directory is
    made in the nearest existing part and removed at once: root passes ``os.access``
    everywhere, ``/proc`` included)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    path = os.path.abspath(text)
    if os.path.exists(path) and not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"{text}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text}: {parent} is not writable")
    try:  # what os.access cannot tell (root; /proc, /sys, a read-only mount): a real try
        os.rmdir(tempfile.mkdtemp(prefix=".ddstore-write-check-", dir=parent))
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: nothing can be created in {parent} "
                                          f"({exc.strerror})") from None
    return text


output_dir.__name__ = "directory"


def input_path(text):
    """An ``argparse`` ``type=`` for a file or directory a program reads (``--data``):
    an empty path is refused (it was taken for "no path given", the built-in default)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (leave the option out for the "
                                          "built-in default)")
    return text


input_path.__name__ = "path"


def report_dir(text):
    """An ``argparse`` ``type=`` for a benchmark's ``--out`` directory (the report is
    written in it): :func:`output_dir`'s checks at once, and a name ending in ``.json``
    refused (it would be made a directory of that name)."""
    if text.endswith(".json"):
        raise argparse.ArgumentTypeError(
            f"{text} names a file: this --out is the directory the report is written in")
    return output_dir(text)


report_dir.__name__ = "directory"


REPORT_KEYS = ("command", "seed", "versions")  # in every benchmark's report


def foreign_file(path):
    """Why a benchmark's report must not replace ``path``, or None: ``path`` exists
    and is not a report a benchmark wrote (a JSON object holding :data:`REPORT_KEYS`,
    what ``ddstore.bench.write_report`` writes), so it is the user's."""
    if not os.path.lexists(path):
        return None
    try:
        if os.path.isfile(path) and os.path.getsize(path) <= 64 << 20:
            with open(path) as f:
                doc = json.load(f)
            if isinstance(doc, dict) and all(k in doc for k in REPORT_KEYS):
                return None
    except (OSError, ValueError):
        pass
    return f"{path} exists and is not a benchmark's report (kept)"


def report_target(text):
    """An ``argparse`` ``type=`` for a benchmark's ``--out`` that is the report's path
    when it ends in ``.json``, else the directory it is written in: a path that is a
    directory, or whose directory cannot be made or written, refused at once
    (:func:`output_dir`'s checks)."""
    if not text.endswith(".json"):
        return output_dir(text)
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a report's path")
    kept = foreign_file(text)
    if kept:
        raise argparse.ArgumentTypeError(f"{kept}: give another path (a report replaces "
                                         f"only an earlier report)")
    try:
        output_dir(os.path.dirname(text) or ".")
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc}") from None
    return text


report_target.__name__ = "path"


def checkpoint_conflict(checkpoint, resume):
    """Why the ``--checkpoint`` directory of an example's run cannot be written, or None:
    a run writes its checkpoint into a new or empty directory, or goes on with the one it
    resumes (``--resume`` the same directory), so the epochs of two runs are never
    mixed in one (a later ``--resume`` took the last epoch of either)."""
    if not checkpoint or not os.path.isdir(checkpoint) or not os.listdir(checkpoint):
        return None
    if resume and os.path.isdir(resume) and os.path.samefile(checkpoint, resume):
        return None
    held = sorted(os.listdir(checkpoint))
    if held == [RUN_MARK]:  # claimed by a run that saved nothing yet
        return (f"--checkpoint {checkpoint} is claimed by another run that has saved no "
                f"epoch yet ({os.path.join(checkpoint, RUN_MARK)}); give a new or empty "
                f"directory, or, if that run has ended, remove the directory")
    shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
    if not any(n == RUN_MARK or _EPOCH_FILE.match(n) for n in held):  # (no run's)
        return (f"--checkpoint {checkpoint} holds files that no run of an example wrote "
                f"({shown}): give a new or empty directory")
    return (f"--checkpoint {checkpoint} already holds another run's files ({shown}): "
            f"give a new or empty directory, or --resume {checkpoint} to go on with "
            f"that run")


RUN_MARK = ".ddstore-run"  # what claims an example's --checkpoint directory for one run
_EPOCH_FILE = re.compile(r"^[a-z]+-\d+\.pt$")  # an example's epoch (epoch-3.pt, ...)


def claim_checkpoint(comm, checkpoint, resume, epoch=None, prefix="epoch-"):
    """Collective over ``comm``: make the ``--checkpoint`` directory this run's.  Rank 0
    refuses one that :func:`checkpoint_conflict` refuses, then creates the directory and,
    unless the run goes on with it (``--resume`` the same directory), claims it by
    creating :data:`RUN_MARK` in it exclusively (``O_EXCL``): of two runs started at once
    with one directory (both found it empty), the second is refused instead of the two
    writing their epochs and stores into it.  A refusal ends every rank, rank 0 printing
    it once (:func:`agree_exit`, exit code 2 as for a bad argument).  The check runs on
    rank 0 only: ranks that looked at the directory at different times (before and after
    the claim) would disagree.  A run that ends (normally or with an error it reports,
    such as a refused ``--resume``) having saved nothing there leaves the directory as it
    found it: the marker, and the directory if the claim made it, are removed at exit.
    ``epoch``: the ``--resume-epoch`` the run goes on from; when it goes on in the
    directory it resumes, and that holds later epochs (``<prefix><k>.pt``, the first run's),
    it is refused: the new run's epochs would replace some of them and leave the others
    beside them (two runs in one directory, which a later ``--resume`` would mix)."""
    refused = None
    if checkpoint and comm.Get_rank() == 0:
        try:
            if os.path.islink(checkpoint) and not os.path.exists(checkpoint):
                raise FileNotFoundError(0, f"a symbolic link to {os.readlink(checkpoint)!r}"
                                           f", which does not exist")
            refused = checkpoint_conflict(checkpoint, resume)
            if refused is None and resume and not os.path.isdir(resume):
                # (told before the claim makes it: "no epoch-<k>.pt in it" otherwise)
                refused = f"--resume {resume}: no such directory"
            going_on = bool(resume) and os.path.isdir(resume) and os.path.isdir(
                checkpoint) and os.path.samefile(checkpoint, resume)
            later = [k for k in saved_epochs(checkpoint, prefix) if k > epoch] if \
                going_on and epoch is not None else []
            if refused is None and later:
                refused = (f"--checkpoint {checkpoint} is the --resume directory, which "
                           f"holds epochs after --resume-epoch {epoch} "
                           f"({', '.join(f'{prefix}{k}.pt' for k in later)}); "
                           f"going on from epoch {epoch} there would mix two runs' epochs: "
                           f"give another --checkpoint directory")
            if refused is None and not going_on:
                made = not os.path.isdir(checkpoint)
                os.makedirs(checkpoint, exist_ok=True)
                mark = os.path.join(checkpoint, RUN_MARK)
                try:
                    fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    refused = (f"--checkpoint {checkpoint}: another run claimed it as this "
                               f"one started ({mark}); give each run its own directory")
                else:
                    text = (f"host {socket.gethostname()} pid {os.getpid()} started "
                            f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
                    with os.fdopen(fd, "w") as fh:
                        fh.write(text)
                    atexit.register(_release_claim, checkpoint, text, made)
        except OSError as exc:
            refused = f"--checkpoint {checkpoint}: {exc.strerror or exc}"
    agree_exit(comm, comm.bcast(refused, root=0), code=2)  # (one message: rank 0's)


def _release_claim(checkpoint, text, made):
    """At exit: the claim of :func:`claim_checkpoint` undone when the run saved nothing
    in the directory (it holds this run's marker alone)."""
    mark = os.path.join(checkpoint, RUN_MARK)
    try:
        with open(mark) as fh:
            ours = fh.read() == text
        if ours and os.listdir(checkpoint) == [RUN_MARK]:
            os.remove(mark)
            if made:
                os.rmdir(checkpoint)
    except OSError:
        pass  # (gone already, or not ours to remove)


class _NoBar:
    """What :func:`progress_bar` gives where nothing is shown: a bar's calls, doing
    nothing."""

    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def progress_bar(show, **kwargs):
    """A ``tqdm(**kwargs)`` bar where ``show`` (rank 0 of a load asked to show one),
    else a bar that does nothing: a disabled tqdm still starts tqdm's monitor thread,
    which stayed in the process after the store was freed."""
    if not show:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(**kwargs)


def plural(n, word, words=None):
    """``"1 replica"``, ``"2 replicas"`` (``words``: the plural when it is not word + s)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def saved_epochs(directory, prefix="epoch-"):
    """The epochs whose training state an example's checkpoint ``directory`` holds
    (``<prefix><k>.pt``, ``k`` a whole number written as the examples write it: a
    user's ``epoch-best.pt`` or ``epoch-02.pt`` is not one, as the file the example
    would open for epoch 2 is ``epoch-2.pt``), sorted; ``[]`` when it is not a
    directory."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    digits = [n[len(prefix):-3] for n in names if n.startswith(prefix) and
              n.endswith(".pt")]  # (ASCII digits only: "²".isdigit() is True)
    return sorted(int(d) for d in digits if d.isascii() and d.isdecimal() and
                  d == str(int(d)))


def check_resume(comm, directory, prefix="epoch-", epoch=None):
    """Collective over ``comm``: refuse an example's ``--resume`` ``directory`` on every
    rank (:func:`agree_exit`, exit code 2 as for a bad option, rank 0 printing it once
    with the ranks it holds for: each rank looks at its own file system) when it does
    not exist, holds no ``<prefix><k>.pt`` training state, or none of ``epoch`` (when
    given); before torch, the store or the data.  Returns the saved epochs
    (:func:`saved_epochs`); nothing when ``directory`` is None (no ``--resume``)."""
    if directory is None:
        return []
    epochs, why = saved_epochs(directory, prefix), None
    if not os.path.isdir(directory):
        why = f"--resume {directory}: no such directory"
    elif not epochs:
        why = (f"--resume {directory}: no {prefix}<k>.pt in it (not a directory that "
               f"this example's --checkpoint wrote)")
    elif epoch is not None and epoch not in epochs:
        why = f"--resume {directory}: no training state for epoch {epoch} (saved: {epochs})"
    agree_exit(comm, why, code=2)
    return epochs


def nothing_to_train(resume, done, epochs, last):
    """The line a resumed example prints when no epoch is left to train, or None:
    ``done`` is the last epoch its checkpoint holds, ``last`` the last epoch this run
    would train (``--epochs`` counted the example's way).  Such a run (a batch job sent
    again after it finished) evaluates and ends as usual; the line says why no epoch
    ran and what to give to go on."""
    if done < last:
        return None
    return (f"--resume {resume}: epoch {done} is done and --epochs {epochs} trains no "
            f"further: nothing to train (give --epochs above {done + epochs - last} to go "
            f"on)")


def other_settings(resume, saved, args):
    """The line a resumed example raises when the options ``saved`` with its
    checkpoint (a dict of argparse destinations) differ from this run's ``args``, or
    None.  Each option is named as on the command line, an unset one shown as "unset"
    (rather than its ``None``)."""
    def shown(value):
        return "unset" if value is None else repr(value)
    diff = [f"--{k.replace('_', '-')}: saved {shown(v)}, now {shown(getattr(args, k))}"
            for k, v in saved.items() if getattr(args, k) != v]
    if not diff:
        return None
    return (f"--resume {resume}: the checkpoint was made with other settings: "
            f"{'; '.join(diff)} (give the saved ones to go on with it)")


def int_list(least, most=None, empty=False):
    """An ``argparse`` ``type=`` for comma-separated integers (fan-outs, depths), each
    ``>= least`` (and ``<= most``): the text as a tuple of ints (with ``empty``, an empty
    text is the empty tuple)."""
    one = at_least(least, most=most)

    def convert(text):
        if empty and not text.strip():
            return ()
        return tuple(one(part.strip()) for part in text.split(","))
    convert.__name__ = "comma-separated integers"
    return convert


# the longest simulated step (a sleep, a compute loop) a benchmark's option takes: a
# value beyond it is a slip of the keyboard, and beyond time_t it failed in time.sleep
MAX_PAUSE_S = 3600


def pause(unit):
    """An ``argparse`` ``type=`` for a simulated step's length in ``unit`` ("ms" or
    "s"): a number in ``[0, MAX_PAUSE_S]`` seconds."""
    return at_least(0, float, most=MAX_PAUSE_S * (1000 if unit == "ms" else 1))


def names_list(allowed):
    """An ``argparse`` ``type=`` for comma-separated names, each one of ``allowed``
    (at least one): the names as a tuple, in order, without repeats."""
    def convert(text):
        parts = [part.strip() for part in text.split(",") if part.strip()]
        bad = [part for part in parts if part not in allowed]
        if bad or not parts:
            raise argparse.ArgumentTypeError(
                f"{text!r}: comma-separated names, each one of {', '.join(allowed)}")
        return tuple(dict.fromkeys(parts))
    convert.__name__ = "names"
    return convert


TRANSPORTS = tuple(_core.TRANSPORTS)  # what a store's transport= takes


def width_text(text):
    """An ``argparse`` ``type=`` for one store width: ``auto`` or an integer >= 1
    (returned as the text; :func:`check_width` then checks it against the ranks)."""
    if text.strip() != "auto":
        at_least(1)(text)
    return text.strip()


width_text.__name__ = "width"


def widths_text(text):
    """An ``argparse`` ``type=`` for comma-separated store widths (each an integer >= 1)
    or ``auto``, returned as the text (:func:`check_widths` checks them against the
    ranks)."""
    if text.strip() != "auto":
        one = at_least(1)
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"{text!r}: comma-separated widths, or auto")
        for part in parts:
            one(part)
    return text.strip()


widths_text.__name__ = "widths"


def transports_text(text):
    """An ``argparse`` ``type=`` for comma-separated transports, each one of
    :data:`TRANSPORTS`, returned as the text."""
    parts = [part.strip() for part in text.split(",")]
    bad = [p for p in parts if p not in TRANSPORTS]
    if bad or not parts:
        raise argparse.ArgumentTypeError(
            f"{text!r}: comma-separated transports, each one of {', '.join(TRANSPORTS)}")
    return ",".join(parts)


transports_text.__name__ = "transports"


def check_widths(parser, text, size=None):
    """After ``parser.parse_args``: each width of ``--widths`` (:func:`widths_text`) as
    :func:`check_width` takes it."""
    if text != "auto":
        for part in text.split(","):
            check_width(parser, int(part), size, option="--widths")


def check_width(parser, width, size=None, option="--width"):
    """After ``parser.parse_args``: ``--width`` as a store over ``size`` ranks (default:
    ``MPI.COMM_WORLD``'s) takes it (:meth:`ddstore.DDStore.check_width`), else
    argparse's error naming the option and the widths allowed (exit code 2, said once by
    rank 0) instead of the store's traceback on every rank after the data was made."""
    from .settings import store_width
    if size is None:
        from mpi4py import MPI
        size = MPI.COMM_WORLD.Get_size()
    try:
        return store_width(width, size)
    except ValueError as exc:
        parser.error(f"{option} {width}: {exc}")


_RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")


def under_launcher():
    """Whether an MPI launcher (``mpiexec``, ``srun``...) started this process: its
    rank variable is set (MPICH/Hydra, PMIx, Open MPI, MVAPICH)."""
    return any(os.environ.get(var, "").isdigit() for var in _RANK_VARIABLES)


def launch_rank():
    """This process's rank in the job, without initialising MPI: from MPI if mpi4py has
    already initialised it, else from the launcher's environment (MPICH/Hydra, PMIx,
    Open MPI, MVAPICH), else 0 (not under a launcher)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank()
    for var in _RANK_VARIABLES:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def program_name():
    """The program as the user started it, for its one-line errors: ``python -m ddstore
    bench-core`` (the command line's :func:`set_program`), ``python -m
    ddstore.bench.core`` (a module of the package run with ``-m``), or the script's file
    name (``hydragnn_ising.py``)."""
    if _PROGRAM:
        return _PROGRAM[0]
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    package = os.path.dirname(os.path.abspath(__file__))
    if script.startswith(package + os.sep) and script.endswith(".py"):
        module = os.path.relpath(script[:-3], os.path.dirname(package)).replace(os.sep, ".")
        return "python -m " + module.removesuffix(".__main__")
    return os.path.basename(script) or "python"


_PROGRAM = []  # set once by the command line (python -m ddstore COMMAND)


def set_program(name):
    """Name the running program for :func:`program_name` (``python -m ddstore`` sets
    the command it dispatches to)."""
    _PROGRAM[:] = [name]


#: numpy's and torch's words for a size beyond what an array can have or the memory
#: holds: told as sizes that do not fit, as a MemoryError is (a count of 2**62 rows)
_TOO_BIG = ("Maximum allowed dimension exceeded", "Maximum allowed size exceeded",
            "array is too big")
_TORCH_TOO_BIG = ("Storage size calculation overflowed",)
#: an OverflowError of an integer too large for a size (not a float's overflow)
_INT_TOO_BIG = ("too large to convert to C", "into an index-sized integer",
                "int too big to convert")


def _too_big(exc):
    """Whether ``exc`` says that an array or tensor asked for is too big."""
    text = str(exc)
    if isinstance(exc, ValueError):
        return text.startswith(_TOO_BIG)
    if isinstance(exc, RuntimeError):  # (torch's OutOfMemoryError is one)
        return (type(exc).__name__ == "OutOfMemoryError" or text.startswith(_TORCH_TOO_BIG)
                or "DefaultCPUAllocator: " in text)
    return isinstance(exc, OverflowError) and any(w in text for w in _INT_TOO_BIG)


def run_program(main, *args):
    """Run a program's ``main(*args)`` and return its exit code (for ``sys.exit``): a
    ``MemoryError`` (sizes asked for that do not fit in this machine's memory) or a
    :class:`~ddstore.DDStoreError` (what the user asked for refused: a file that is
    missing, a horizon longer than the series, ``--device cuda`` without one) ends it
    with one line, from each rank that met it (an error the ranks agreed on: from rank 0
    alone), naming the rank and the error, and exit code 1, instead of a traceback
    from every rank.  numpy's ``ValueError`` for an array beyond any size (``Maximum
    allowed dimension exceeded``), torch's allocation failures and an ``OverflowError``
    are told as a ``MemoryError``; any other error keeps its traceback."""
    from ._collective import is_agreed
    from .errors import DDStoreError
    try:
        return main(*args)
    except (MemoryError, DDStoreError, ValueError, OverflowError, RuntimeError) as exc:
        size = isinstance(exc, MemoryError) or (
            not isinstance(exc, DDStoreError) and _too_big(exc))
        if not size and not isinstance(exc, DDStoreError):
            raise  # (a program's own error: its traceback)
        rank = launch_rank()
        if rank == 0 or not is_agreed(exc):
            prog = program_name()
            if size:
                text = (f"out of memory: {str(exc).rstrip('.') or type(exc).__name__}; "
                        f"the sizes asked for do not fit in this machine's memory: ask "
                        f"for smaller ones (--help lists them)")
            else:
                text = f"error: {exc}"
            sys.stdout.flush()
            sys.stderr.write(f"{prog}: rank {rank}: {text}\n")
            sys.stderr.flush()
        return 1


def agree_exit(comm, message, code=1):
    """Collective over ``comm``: end the program on every rank when any rank has an
    error ``message`` (None: none), rank 0 printing each message once with the ranks
    that had it (``--resume`` checks every rank makes of its own files: one line, not
    one per rank, and no rank left waiting for one that exited)."""
    everyone = comm.allgather(message)
    if not any(m is not None for m in everyone):
        return
    if comm.Get_rank() == 0:
        prog = program_name()
        sys.stdout.flush()
        for text in dict.fromkeys(m for m in everyone if m is not None):
            ranks = [r for r, m in enumerate(everyone) if m == text]
            where = "" if len(ranks) == len(everyone) else f" (ranks {ranks})"
            sys.stderr.write(f"{prog}: error: {text}{where}\n")
        sys.stderr.flush()
    raise SystemExit(code)


def agreed_call(comm, fn, *args):
    """Collective over ``comm``: ``fn(*args)`` on every rank (each opening its own files:
    an example's ``--data`` or ``--resume``), its result returned; when it refuses on
    any rank (a :class:`~ddstore.DDStoreError`, or ``SystemExit`` with a message), every
    rank ends through :func:`agree_exit`, rank 0 printing each refusal once."""
    from .errors import DDStoreError
    try:
        out, refused = fn(*args), None
    except DDStoreError as exc:
        out, refused = None, str(exc)
    except SystemExit as exc:
        out, refused = None, str(exc.code)
    agree_exit(comm, refused)
    return out


_NEGATIVE_LIST = re.compile(r"^-\d+(,\s*-?\d+)+$")


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` for programs run on every rank: ``--help``, usage and
    errors are printed by rank 0 only (every rank parses the same command line, so every
    rank reaches the same result and exits with the same code).  Options are taken
    whole: an abbreviation is refused as unknown (``--checkpoint`` was taken for
    ``--checkpoint-every`` by a program that has no ``--checkpoint``)."""

    def __init__(self, *args, allow_abbrev=False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, with a list of numbers that begins with a negative one after an
        option (``--fanouts -1,5``, which argparse takes for an option) given to it as
        ``--fanouts=-1,5``."""
        given = list(sys.argv[1:] if args is None else args)
        end = given.index("--") if "--" in given else len(given)  # (then positionals)
        joined = []
        for a in given[:end]:
            if joined and _NEGATIVE_LIST.match(a) and joined[-1].startswith("--") and \
                    "=" not in joined[-1] and joined[-1] != "--":
                joined[-1] = f"{joined[-1]}={a}"
            else:
                joined.append(a)
        return super().parse_known_args(joined + given[end:], namespace)

    def _print_message(self, message, file=None):
        if launch_rank() == 0:
            super()._print_message(message, file)
