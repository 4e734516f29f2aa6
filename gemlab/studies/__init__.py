"""The GEM paper's studies at laptop scale (notebook 08, ``research/experiments/reproduce_gem.py``):
``definitions`` (the runs as configs), ``runner`` (runs them, resumably), ``figures`` (tables and
figures from their folders), ``guessing`` (exact statistics of scripted GuessTheNumber players),
``stats``, ``evaluation`` and ``async_runs``. The env variants they use live with the envs, in
``gemlab/env_variants.py``.
"""
