"""The one seed derivation: every random choice of a run derives from ``Config.seed`` through here.

``derive_seed(seed, *parts)`` names one stream of randomness by integers (run seed, step, env,
round, turn, ...). Its value is exactly what gemlab has always used, CPython's hash of the tuple
``(seed, *parts)`` cut to 31 bits, written out below so that it reads as arithmetic and does not
depend on the interpreter; recorded runs in ``data/`` therefore repeat bit for bit.
``step_generator(seed, step)`` is numpy's generator for a step's subsampling and minibatch order,
seeded with the pair itself (numpy's own ``SeedSequence`` mixing), as every recorded run was.

Where each stream is used:

- ``derive_seed(seed, step)``: Python's global ``random`` before a step's batch (GEM's games draw
  their secret numbers from it);
- ``derive_seed(seed, step, 1)``: the batch's sampling seed, then ``derive_seed(that, round, env)``
  per episode and ``derive_seed(that, turn)`` per request;
- ``derive_seed(batch seed, round, group, 2)``: the problem a GRPO group shares;
- ``derive_seed(seed, -1)``: Python's global ``random`` before the warm-up's scripted examples
  (``gemlab/warmup.py``; GEM's games draw from it, and an evaluation before would change them);
  with ``warmup_data="own_answers"``, ``derive_seed(that, i)`` resets the env for problem ``i`` and
  ``derive_seed(that, i, 1)`` samples the model's answer to it;
- ``step_generator(seed, step)``: which transitions are trained on, and the minibatch order.
"""

from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1
_PRIME_1, _PRIME_2, _PRIME_5 = 11400714785074694791, 14029467366897019727, 2870177450012600261
_MODULUS = (1 << 61) - 1  # CPython hashes an int to its value modulo this prime


def _int_hash(value: int) -> int:
    magnitude = abs(value) % _MODULUS
    result = -magnitude if value < 0 else magnitude
    return -2 if result == -1 else result


def derive_seed(*parts: int) -> int:
    """A deterministic 31-bit seed from integers: CPython's (xxHash-based) tuple hash of ``parts``,
    masked to 31 bits. Equal to ``hash(tuple(parts)) & 0x7FFFFFFF`` on 64-bit CPython 3.8+."""
    acc = _PRIME_5
    for part in parts:
        acc = (acc + (_int_hash(int(part)) & _MASK) * _PRIME_2) & _MASK
        acc = ((acc << 31) | (acc >> 33)) & _MASK
        acc = (acc * _PRIME_1) & _MASK
    acc = (acc + (len(parts) ^ (_PRIME_5 ^ 3527539))) & _MASK
    if acc == _MASK:  # -1 is reserved for errors in CPython
        acc = 1546275796
    return acc & 0x7FFFFFFF


def step_generator(seed: int, step: int) -> np.random.Generator:
    """The numpy generator of one training step (subsampling, minibatch order)."""
    return np.random.default_rng([seed, step])
