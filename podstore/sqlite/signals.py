"""Signal handlers held off while a call changes what the store and its thread hold.

A handler's exception (``KeyboardInterrupt``, a SIGTERM handler's ``SystemExit``) raised
between ``BEGIN IMMEDIATE`` and its bookkeeping, or between ``COMMIT`` and the counters'
release, would leave a transaction no ``with`` ends or a count a fork waits on for ever. So
those steps run with catchable signals blocked in the main thread; a handler due meanwhile
raises from :func:`release`. Other threads never run handlers.

``pthread_sigmask`` through ctypes: ``signal.pthread_sigmask`` builds a set of ``Signals``
each time, 20 times as costly for a full set.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from typing import Any

#: Never blocked: a blocked fault signal kills the process; SIGKILL and SIGSTOP cannot be.
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

#: The note on a handler's exception raised just after a commit (see :func:`committed`).
COMMITTED = "podstore: the transaction committed before this exception was raised"


def hold() -> Any:
    """Block the catchable signals in the main thread; returns what :func:`release` restores
    (None elsewhere). A handler already due may raise here, with nothing held."""
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
    """Block catchable signals in this (podstore-owned) thread for good: else the kernel gives
    it those the main thread blocks, and Python runs the handler in the main thread at once."""
    _sigmask(_SIG_BLOCK, _ALL, None)


def release(previous: Any) -> None:
    """Restore the mask :func:`hold` replaced; a handler due meanwhile raises from here."""
    if previous is not None:
        # CPython runs due handlers as this call returns.
        _sigmask(_SIG_SETMASK, previous, None)


def committed(exc: BaseException) -> bool:
    """Whether ``exc``, raised out of a write or ``transaction()``, came after it committed."""
    return COMMITTED in getattr(exc, "__notes__", ())
