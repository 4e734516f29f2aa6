"""The GEM paper's studies at laptop scale (notebook 08, ``benchmarks/reproduce_gem.py``):
``definitions`` (the runs as configs), ``runner`` (runs them, resumably), ``figures`` (tables and
figures from their folders), ``guessing`` (exact statistics of scripted GuessTheNumber players),
``variants`` (the GEM env variants they use, registered with GEM by ``gemlab.envs``).

Nothing is imported here, so that ``gemlab.envs`` can register the variants without loading the
runner (which imports the trainer, which imports ``gemlab.envs``).
"""
