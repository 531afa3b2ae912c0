"""Issue 43, items 5-8 and 11: nothing a rank's own code, signals or environment do breaks
a collective round halfway (tests/mpi/collective_robust.py), and the pieces in-process:
the robust text of an exception, the ASCII-decimal integer settings, SIGINT deferred
past a round on one rank."""
import signal

import numpy as np
import pytest



class BadStr(Exception):
    def __str__(self):
        raise ValueError("no text")


def test_error_text_never_fails():
    from ddstore._collective import _error_of, _text
    from ddstore.errors import DDStoreMemoryError, DDStoreOSError, DDStoreValueError
    assert _error_of(BadStr(), "add('x')") == (
        DDStoreValueError, "add('x'): BadStr: <str() raised ValueError>")

    class NoMemory(MemoryError):
        def __str__(self):
            raise RuntimeError

    assert _error_of(NoMemory(), None) == (DDStoreMemoryError,
                                           "NoMemory: <str() raised RuntimeError>")
    assert _text(BadStr()) == "<str() raised ValueError>"
    # an OSError: a DDStoreOSError (an OSError, and a DDStoreValueError as before)
    assert _error_of(OSError(5, "eio"), "f") == (DDStoreOSError,
                                                 "f: OSError: [Errno 5] eio")
    assert issubclass(DDStoreOSError, DDStoreValueError)


@pytest.mark.parametrize("text", ["1_000", "\u0663", "+5", "0x10", "1e3", " 7 7"])
def test_integer_settings_are_plain_ascii_decimal(monkeypatch, text):
    from ddstore import DDStoreValueError
    from ddstore.store import env_settings
    monkeypatch.setenv("DDSTORE_SERVE_MIN_PIECES", text)
    with pytest.raises(DDStoreValueError) as info:
        env_settings()
    msg = str(info.value)
    assert "DDSTORE_SERVE_MIN_PIECES" in msg and repr(text) in msg  # (as set)
    assert "plain decimal digits 0-9" in msg and "[1, " in msg


def test_settings_read(monkeypatch):
    from ddstore.store import SERVE_MIN_PIECES, env_settings
    monkeypatch.setenv("DDSTORE_SERVE_MIN_PIECES", " 1000 ")
    monkeypatch.setenv("DDSTORE_SERVE", "OFF")
    monkeypatch.delenv("DDSTORE_PROGRESS_US", raising=False)
    got = env_settings()
    assert got["DDSTORE_SERVE_MIN_PIECES"] == 1000 and got["DDSTORE_SERVE"] == "off"
    assert got["DDSTORE_PROGRESS_US"] == 200
    monkeypatch.delenv("DDSTORE_SERVE_MIN_PIECES")
    assert env_settings()["DDSTORE_SERVE_MIN_PIECES"] == SERVE_MIN_PIECES


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test, whatever this process inherited: a
    process started in the background by a non-interactive shell (``cmd &``) inherits
    SIGINT ignored, and Python then installs no handler (a SIGINT does nothing there,
    with or without the store: what the store keeps)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_sigint_after_the_round_is_raised_when_the_call_ends(store, python_sigint):
    """One rank: a SIGINT in a step's post-round part waits until the step ends (the
    variable made after it exists), then is raised; in a local part it is raised at
    once and agreed (a DDStoreInterrupt, which rolls back the transaction); the handler
    is Python's own again after each."""
    from ddstore._collective import DDStoreInterrupt, is_agreed
    reached = []
    with pytest.raises(KeyboardInterrupt) as info:
        with store.collective("test.after") as step:
            step.agree()
            signal.raise_signal(signal.SIGINT)  # to this thread: handled now
            sum(range(1000))
            reached.append(True)
    assert reached == [True] and not isinstance(info.value, DDStoreInterrupt)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    before = store.variables()
    with pytest.raises(DDStoreInterrupt) as info:
        with store.transaction("t"):
            store.add("t1", np.zeros(3))
            with store.collective("test.local"):
                signal.raise_signal(signal.SIGINT)  # to this thread: handled now
                sum(range(1000))
                reached.append(False)  # not reached
    assert reached == [True] and is_agreed(info.value) and "rank 0" in str(info.value)
    assert store.variables() == before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored(store):
    """SIGINT ignored in this process (inherited, or set by the program): a step
    installs nothing, the signal does nothing, the disposition is unchanged after."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with store.collective("test.ignored") as step:
            step.agree()
            signal.raise_signal(signal.SIGINT)
            sum(range(1000))
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_custom_sigint_handler_is_called_after_the_round(store):
    calls = []
    previous = signal.signal(signal.SIGINT, lambda s, f: calls.append(s))
    try:
        with store.collective("test.custom") as step:
            step.agree()
            signal.raise_signal(signal.SIGINT)  # to this thread: handled now
            sum(range(1000))
            assert calls == []  # deferred
        assert calls == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.shared_launch("collective_robust.py", timeout=300)
def test_rounds_survive_bad_text_interrupts_two_stores_and_settings(shared_launch, nprocs):
    """tests/mpi/collective_robust.py: every case passes on every rank, within the
    timeout (no hang); the fixture fails the test otherwise."""
    assert "collective_robust: " in shared_launch
