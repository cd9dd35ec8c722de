"""Writing files so that a crash or an error never leaves one half-written.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_text_atomic(d / "a.txt", "hello").read_text()
'hello'
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | Path, *, force: bool = True, make_dirs: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one step,
    on failure it is removed and ``path`` is untouched. ``force=False`` refuses an existing file."""
    p = Path(path)
    if p.exists() and not force:
        raise InputError(str(p), None, "exists; pass --force to overwrite it")
    if not p.parent.exists():
        if not make_dirs:
            raise InputError(str(p), None, "its folder does not exist")
        p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp" + p.suffix, dir=p.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text_atomic(path: str | Path, text: str, *, force: bool = True, make_dirs: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, force=force, make_dirs=make_dirs) as tmp:
        tmp.write_text(text)
    return Path(path)
