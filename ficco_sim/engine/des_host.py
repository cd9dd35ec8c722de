"""A host device's issuing threads in the discrete-event engine (the CPU replay's ranks,
:class:`~ficco_sim.hardware.HostSpec`): each rank has one thread, a ``simpy.PriorityResource``
of capacity one, on which its compute ops run one at a time and its message posts take
their turns (posts first: priority ``(0, 0)``)."""

from __future__ import annotations

from typing import Callable

import numpy as np


def post(env, thread, seconds: float):
    """Post a message on a rank's issuing thread: once no compute op holds it, ``seconds``."""
    with thread.request(priority=(0, 0)) as req:
        yield req
        if seconds:
            yield env.timeout(seconds)


def post_all(env, thread, posts: list[tuple[int, float]], release: Callable[[np.ndarray], None]):
    """A communication kernel's SM transfers (``posts``: index, seconds) posted on its rank's
    thread in order, each released to move (once its other end has posted it too) as its
    post ends."""
    with thread.request(priority=(0, 0)) as req:
        yield req
        for j, seconds in posts:
            if seconds:
                yield env.timeout(seconds)
            release(np.array([j], dtype=np.int64))
