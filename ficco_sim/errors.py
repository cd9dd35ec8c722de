"""The one error type for bad input.

Anything a user can get wrong (a file, a field, a flag, a size) raises
:class:`InputError`; the CLI turns it into one line and exit code 2. Any other
exception is a bug in ficco-sim.

>>> str(InputError("hw_profiles/x.yaml", "sm.max_blocks", "must be a positive integer, got -1"))
'hw_profiles/x.yaml: sm.max_blocks: must be a positive integer, got -1'
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input, located by ``where`` (a file, a flag) and ``field``."""

    def __init__(self, where: str | None, field: str | None, message: str):
        self.where = where
        self.field = field
        self.message = message
        super().__init__(self.line())

    def __reduce__(self):       # pickled whole (a worker process raises it to the parent)
        return (type(self), (self.where, self.field, self.message))

    def line(self) -> str:
        parts = [p for p in (self.where, self.field) if p]
        return ": ".join(parts + [self.message])


def require(cond: bool, where: str | None, field: str | None, message: str) -> None:
    """Raise :class:`InputError` unless ``cond`` holds."""
    if not cond:
        raise InputError(where, field, message)
