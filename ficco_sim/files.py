"""Writing files so that a crash or an error never leaves one half-written, and one writer
per output folder.

Every file ficco-sim writes goes through :func:`atomic_path`: the content is written to a
temporary file beside the target, flushed to disk, then moved over the target in one step.
On any failure (disk full, I/O error, permission, Ctrl-C) the temporary file is removed and
the previous file is untouched. The CLI turns the ``OSError`` into one line and exit 2.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     write_text_atomic(pathlib.Path(d) / "a.txt", "hello").read_text()
'hello'
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

from .errors import InputError

try:
    import fcntl
except ImportError:   # Windows: no advisory locks; one writer per folder is then the user's care
    fcntl = None  # type: ignore[assignment]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path, *, force: bool = True, make_dirs: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one step
    (with the permissions a plain ``open`` would give), on failure it is removed and ``path``
    is untouched. ``force=False`` refuses an existing file."""
    p = Path(path)
    if p.is_dir():
        raise InputError(str(p), None, "is a folder: give a file name")
    if p.exists() and not p.is_file():       # /dev/null, /dev/stdout, a pipe: written through, never replaced
        with _naming(p):
            yield p
        return
    if p.exists() and not force:
        raise InputError(str(p), None, "exists; pass --force to overwrite it")
    if not p.parent.exists() and not make_dirs:
        raise InputError(str(p), None, "its folder does not exist")
    with _naming(p):
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp" + p.suffix, dir=p.parent)
        os.close(fd)
    try:
        yield Path(tmp)
        with _naming(p):
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, p)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def _naming(p: Path) -> Iterator[None]:
    """An operating-system error of writing ``p`` as an :class:`InputError` naming ``p`` (not
    the temporary file beside it)."""
    try:
        yield
    except OSError as exc:
        raise InputError(str(p), None, f"cannot be written: {exc.strerror or exc}") from None


def figure_suffixes() -> tuple[str, ...]:
    """The suffixes a Gantt chart or plot can be saved with: matplotlib's writers (no suffix:
    PNG, as :func:`save_figure` saves it)."""
    try:
        from matplotlib.figure import Figure
        return ("",) + tuple(f".{s}" for s in Figure().canvas.get_supported_filetypes())
    except ImportError:        # the error comes when a figure is drawn
        return ("", ".png", ".pdf", ".svg", ".jpg", ".jpeg")


def check_output(path: str | Path | None, flag: str, *, figure: bool = False) -> None:
    """Refuse an output path before any work (and before anything else is written): its folder
    must exist, it must not be a folder, and a ``figure`` must have a suffix matplotlib saves
    (:func:`figure_suffixes`)."""
    if not path:
        return
    p = Path(path)
    if not p.resolve().parent.is_dir():
        raise InputError(flag, None, f"{path}: its folder does not exist")
    if p.is_dir():
        raise InputError(flag, None, f"{path} is a folder: give a file name")
    if figure and p.suffix.lower() not in (known := figure_suffixes()):
        raise InputError(flag, None, f"{path}: a figure is saved as {', '.join(s[1:] for s in known if s)} "
                         f"(from its suffix), not {p.suffix}")


def read_text(path: str | Path) -> str:
    """A text input file (an undecodable byte read as U+FFFD); one that cannot be read is an
    :class:`InputError` naming it."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(p), None, f"cannot read: {exc.strerror}") from None


def write_text_atomic(path: str | Path, text: str, *, force: bool = True, make_dirs: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, force=force, make_dirs=make_dirs) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_stamped_csv(path: str | Path, frame, about: str, script: str) -> Path:
    """``frame`` (a DataFrame) as CSV at ``path``, atomically, under one ``#`` line saying what
    it holds and when, where and by which script it was made (readers skip it with
    ``comment="#"``)."""
    import datetime
    import platform
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return write_text_atomic(path, f"# {about}; generated {stamp} on {platform.node()} by {script}\n"
                             + frame.to_csv(index=False))


def save_figure(fig, path: str | Path, *, dpi: int = 110) -> Path:
    """Save a matplotlib figure atomically (format from the suffix) and close it."""
    p = Path(path)
    try:
        with atomic_path(p) as tmp:
            # bbox "tight": legends and labels outside the axes stay in the picture
            fig.savefig(tmp, dpi=dpi, format=p.suffix.lstrip(".") or "png", bbox_inches="tight")
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    return p


LOCK_NAME = ".ficco-sim.lock"


_HELD: dict[Path, int] = {}   # folders this process holds, with their nesting depth


@contextlib.contextmanager
def folder_lock(folder: str | Path, what: str) -> Iterator[None]:
    """Hold ``folder``'s lock while writing into it; a second process gets an :class:`InputError`
    naming the first (its description, process id and start time). The operating system drops
    the lock when its process ends, however it ends (``kill -9`` included), so a stale lock never
    blocks. Re-entrant within one process."""
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    key = d.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    fh = open(d / LOCK_NAME, "a+")
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                raise InputError(str(d), None, f"{holder} is writing into this folder; wait for it to end, "
                                 "or give another --out") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{what} (pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')})")
        fh.flush()
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]
    finally:
        fh.close()
