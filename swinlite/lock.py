"""One run per output folder: an exclusive lock on ``<output>/.lock`` held for the whole run.

Held by a training run (``swinlite.engine``, on ``--output-dir``) and by a feature extraction
(:func:`swinlite.extract.run_extraction`, on ``--output``): two runs writing one folder would leave files of two
runs under one record of settings. The lock is a ``fcntl.flock`` on the file, so the operating system releases it
when the process ends in any way (exit, exception, SIGKILL, crash); the file also records what holds it (the kind
of run, its pid, host and start time) for the message a refused run prints. A lock file left behind by a process
that has died holds no lock: the next run notes it and takes over.

A ``flock`` belongs to the open file, which a forked child (a DataLoader worker) shares: a worker orphaned by its
run's ``kill -9`` kept the folder locked until PyTorch's watchdog ended it, and the resume right after was refused
as "in use" by the dead run. Forked children therefore close their copies at once (:func:`_close_in_child`); the
lock stays with the process that took it. ``os.open``'s descriptors are not inherited across ``exec``.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

LOCK_FILE = ".lock"

_HELD: set[OutputLock] = set()  # the locks this process holds


def _close_in_child() -> None:
    """In a forked child: close the inherited lock descriptors, so the lock ends with the process that took it."""
    for lock in _HELD:
        os.close(lock.fd)
        lock.fd = None
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)


class OutputLock:
    """Exclusive lock on an output folder; ``acquire`` creates the folder, ``release`` (or exit) frees it.

    Args:
        folder: the run's output folder.
        run: what takes the lock, recorded for the message another run is refused with ("training run").
        option: the command-line option that names ``folder``, for the messages ("--output-dir").
    """

    def __init__(self, folder: str | Path, run: str, option: str) -> None:
        self.path = Path(folder) / LOCK_FILE
        self.run, self.option = run, option
        self.fd: int | None = None
        self.stale: str | None = None  # the previous holder's record, when it left the file behind
        self.created = False  # the folder did not exist: a run that wrote nothing leaves no empty folder

    def acquire(self) -> None:
        """Take the lock; ValueError naming the holder (its record: "training run (pid N on HOST, started ...)")
        when another live run has it, or when the folder cannot be written."""
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"output folder {folder} is a file; choose another {self.option}")
        try:
            self.created = not folder.exists()
            folder.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                if os.fstat(fd).st_nlink > 1:  # a hard-link copy's (cp -al): the lock of another folder too
                    os.close(fd)
                    self.path.unlink(missing_ok=True)  # this folder's name of it only: a file of its own instead
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.read(fd, 4096).decode(errors="replace").strip()
                    os.close(fd)
                    raise ValueError(
                        f"output folder {folder} is in use by another {holder or 'run (holder unknown)'}; "
                        f"wait for it to finish or choose another {self.option}"
                    ) from None
                if os.path.exists(self.path) and os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break  # else the holder removed the file between our open and flock: take the new one
                os.close(fd)
            self.stale = os.read(fd, 4096).decode(errors="replace").strip() or None
            os.ftruncate(fd, 0)
            started = time.strftime("%Y-%m-%d %H:%M:%S")
            record = f"{self.run} (pid {os.getpid()} on {socket.gethostname()}, started {started})"
            os.pwrite(fd, record.encode(), 0)
        except PermissionError as e:
            message = f"output folder {folder} cannot be written ({e.strerror}); choose another {self.option}"
            raise ValueError(message) from None
        except OSError as e:
            raise ValueError(f"output folder {folder} cannot be used: {e}") from None
        self.fd = fd
        _HELD.add(self)

    @property
    def taken_over(self) -> str | None:
        """What a run tells its user when it took the lock over from a run that died (:attr:`stale`), else None."""
        if self.stale is None:
            return None
        return f"{self.path} was left by a run that ended without releasing it ({self.stale}); taken over"

    def release(self) -> None:
        """Remove the lock file and free the lock (idempotent); remove the folder if it made it and it is empty."""
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)  # before unlocking: a waiter that opened this file retries on the new one
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None
        _HELD.discard(self)
        if self.created and not any(self.path.parent.iterdir()):
            self.path.parent.rmdir()

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
