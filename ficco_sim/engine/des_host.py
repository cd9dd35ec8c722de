"""Time on the host in the discrete-event engine: a ``host`` kernel (a trace's launch pace,
:func:`host_time`), and a host device's issuing threads (the CPU replay's ranks,
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


def host_time(env, seconds: float, rec, done):
    """A ``host`` kernel: ``seconds`` its stream spends on the host (a trace's host thread
    between two launches), holding no SM; ``rec`` gets its span, ``done`` fires at its end."""
    rec.start = env.now
    if seconds > 0:
        yield env.timeout(seconds)
    rec.end = env.now
    done.succeed()
