"""Validation: replay task graphs on real devices through PyTorch and compare with predictions.

* :mod:`.plan` — task graph -> per-process programs (no torch)
* :mod:`.executor` — options, results, knob audit, tensor work of one op; :func:`replay`
* :mod:`.launch` (one process per rank), :mod:`.cpu` (gloo runner), :mod:`.cuda` (CUDA runner),
  :mod:`.single_gpu` (one process holds every rank)
* :mod:`.reference` — input data, unscheduled reference, correctness check
* :mod:`.compare` (MAPE, Kendall tau, top-1), :mod:`.report` (CSV, markdown, PNG),
  :mod:`.importer` (measured-runs CSV), :mod:`.workflow` (:func:`validate`), :mod:`.cli`

Importing this package does not import torch; the functions below do when called.
"""

from __future__ import annotations


def validate(*args, **kwargs):
    """See :func:`ficco_sim.validate.workflow.validate`."""
    from .workflow import validate as _validate
    return _validate(*args, **kwargs)


def compare_measured(*args, **kwargs):
    """See :func:`ficco_sim.validate.importer.compare_measured`."""
    from .importer import compare_measured as _compare
    return _compare(*args, **kwargs)
