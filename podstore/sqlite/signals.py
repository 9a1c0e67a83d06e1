"""Signal handlers held off while a call changes what the store and its thread hold.

Python runs a signal handler (Ctrl-C's ``KeyboardInterrupt``, a SIGTERM handler's
``SystemExit``) in the main thread between any two bytecodes. Raised between ``BEGIN
IMMEDIATE`` and the bookkeeping that records it, or between ``COMMIT`` and the release of the
thread's counters, it would leave a transaction open that no ``with`` will end (later writes
become its savepoints and are never committed) or a count that makes a fork wait for ever. So
the few steps that change that state run with the catchable signals blocked in the main thread
(the kernel keeps them pending); a handler due meanwhile runs when they are unblocked, at a
point the caller chose (:func:`release` raises its exception there). Other threads never run
handlers, and pay nothing.

The block uses ``pthread_sigmask`` through ctypes: ``signal.pthread_sigmask`` converts the
previous mask to a set of ``Signals`` each time, which costs 20 times as much for a full set.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from typing import Any

#: Signals that are never blocked: the kernel sends these for a fault of the thread itself
#: (blocking one makes the fault kill the process), and SIGKILL and SIGSTOP cannot be.
_KEEP = ("SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP", "SIGSYS")
_SIG_BLOCK, _SIG_SETMASK = signal.SIG_BLOCK, signal.SIG_SETMASK
_SigSet = ctypes.c_byte * 128  # glibc's and musl's sigset_t: 1,024 bits

MAIN = threading.main_thread().ident
_libc = ctypes.CDLL(None, use_errno=True)
_sigmask = _libc.pthread_sigmask
_sigmask.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_sigmask.restype = ctypes.c_int
_ALL = _SigSet()
_libc.sigfillset(_ALL)
for _name in _KEEP:
    if hasattr(signal, _name):
        _libc.sigdelset(_ALL, int(getattr(signal, _name)))

#: A note added to an exception a signal handler raised just after a transaction committed
#: (docs/api.md, "Interrupts, SIGTERM and cancellation"): see :func:`committed`.
COMMITTED = "podstore: the transaction committed before this exception was raised"


def hold() -> Any:
    """Block the catchable signals if this is the main thread; returns what :func:`release`
    restores (None elsewhere). A handler already due may raise here before anything is
    blocked: nothing is held then."""
    if threading.get_ident() != MAIN:
        return None
    previous = _SigSet()
    try:
        _sigmask(_SIG_BLOCK, _ALL, previous)
    except BaseException:
        # A handler due before the block ran just after it: unblock, then let it raise.
        _sigmask(_SIG_SETMASK, previous, None)
        raise
    return previous


def keep_out() -> None:
    """Block the catchable signals in the calling thread for good: a thread of podstore's own
    then never receives one, which the kernel would otherwise give it while the main thread
    blocks them — and Python would run the handler in the main thread at once, inside the
    steps the block keeps it out of."""
    _sigmask(_SIG_BLOCK, _ALL, None)


def release(previous: Any) -> None:
    """Restore the mask :func:`hold` replaced; a handler that became due meanwhile runs here
    (its exception is raised from this call)."""
    if previous is not None:
        # The interpreter runs due handlers as this call returns (CPython checks for them
        # at the end of every call), so their exception comes out of release().
        _sigmask(_SIG_SETMASK, previous, None)


def committed(exc: BaseException) -> bool:
    """Whether ``exc`` (raised out of a write or a ``transaction()`` block) came after its
    transaction committed."""
    return COMMITTED in getattr(exc, "__notes__", ())
