"""The contention rule: how much compute and communication slow each other down beyond
fair sharing of bandwidth, written once for every engine.

* Compute next to communication loses the SMs the communication kernels hold (in the DES
  they are simply not available; the closed form charges ``held / (SMs - held)``, at
  most 9x) and is slowed by communication's HBM traffic: ``1 + c_comp * rate / peak``
  with ``c_comp`` the profile's ``contention.compute_per_hbm_util``; and, while a
  communication kernel is resident on its GPU at all, by the profile's
  ``contention.compute_beside_comm_kernel`` (its blocks spin and poll on the SMs they
  share; fitted on real profiler traces by :mod:`ficco_sim.traces.interference`).
* Communication next to compute is slowed by compute's HBM traffic at either end:
  ``1 + c_comm * rate / peak``.

``rate`` is bytes/s, ``peak`` the profile's HBM bandwidth. Works on numbers and arrays.
:class:`Weights` scales each term (1 = the profile's rule; the heuristic fits them).

The DES applies a factor at every instant (a rate divided by it); the closed form, which
knows only which share of a run is covered, integrates the same rule with
:func:`slowed_time`.

>>> from ficco_sim.hardware import load_gpu
>>> g = load_gpu("h100")
>>> compute_slowdown(g, 0.0), comm_slowdown(g, 0.0)
(1.0, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .hardware import GpuProfile

MAX_SM_LOSS = 0.9


@dataclass(frozen=True)
class Weights:
    """Multipliers of the SM term and the HBM terms of the rule (1, 1: as calibrated)."""

    sm: float = 1.0
    hbm: float = 1.0


PROFILE = Weights()


def sm_loss(gpu: GpuProfile, held_sms):
    """Share of a GPU's SMs that ``held_sms`` communication blocks take (capped)."""
    share = held_sms / gpu.num_sms
    return np.minimum(MAX_SM_LOSS, share) if isinstance(share, np.ndarray) else min(MAX_SM_LOSS, share)


def compute_slowdown(gpu: GpuProfile, comm_hbm_rate, *, held_sms=0.0, sm_cover=1.0, hbm_cover=1.0,
                     resident_cover=0.0, weights: Weights = PROFILE):
    """Factor (>= 1) on a compute kernel's time: SMs held by communication over ``sm_cover``
    of its run, communication HBM traffic over ``hbm_cover`` of it, a communication kernel
    resident on its GPU over ``resident_cover`` of it. The DES holds SMs itself (``held_sms``
    0) and passes cover 1 or 0 at each instant."""
    out = 1.0 + weights.hbm * hbm_cover * gpu.contention.compute_per_hbm_util * comm_hbm_rate / gpu.hbm_bandwidth
    if isinstance(held_sms, np.ndarray) or held_sms:
        loss = sm_loss(gpu, held_sms)
        out = out + weights.sm * sm_cover * loss / (1.0 - loss)
    beside = gpu.contention.compute_beside_comm_kernel
    if beside:
        out = out + weights.sm * beside * resident_cover
    return out


def comm_slowdown(gpu: GpuProfile, compute_hbm_rate, *, cover=1.0, weights: Weights = PROFILE):
    """Factor (>= 1) on a transfer's bytes time: compute HBM traffic at its ends over ``cover`` of it."""
    return 1.0 + weights.hbm * cover * gpu.contention.comm_per_hbm_util * compute_hbm_rate / gpu.hbm_bandwidth


def slowed_time(base, other, b_max, excess, passes: int = 4):
    """Duration of a run that needs ``base`` seconds alone and ``other`` (a share of
    ``base``) more for the SMs it lost, slowed further at the instants something covers it:
    the DES's rule (a rate divided by the factor at every instant) integrated, ``T = base
    (1 + other) + excess(T)``, ``excess(t)`` the time the covered instants of the run's first
    ``t`` seconds add (:func:`covered_excess`). Solved by fixed point from the bound of a
    factor ``1 + b_max`` throughout. Works on numbers and arrays.

    >>> slowed_time(1.0, 0.0, 1.0, lambda t: covered_excess(t, 1.0))        # covered throughout
    2.0
    >>> slowed_time(1.0, 0.0, 1.0, lambda t: covered_excess(min(t, 0.5), 1.0))   # the first half
    1.25
    """
    t = base * (1.0 + other) * (1.0 + b_max)
    for _ in range(passes):
        t = base * (1.0 + other) + excess(t)
    return t


def covered_excess(covered_len, factor_minus_one):
    """Time a factor ``1 + b`` at every covered instant adds over ``covered_len`` covered
    seconds of wall time (work advances ``1 / (1 + b)`` as fast there): ``covered_len *
    b / (1 + b)``."""
    return covered_len * factor_minus_one / (1.0 + factor_minus_one)
