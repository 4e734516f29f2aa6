"""GEM's environments in tinker-cookbook 0.6.1's RL training (``tinker_cookbook.rl.train``).

``gemlab.cookbook.adapter.GemDatasetBuilder`` is a cookbook ``RLDatasetBuilder`` of GEM envs,
multi-turn games included: groups of ``group_size`` copies of one env on one problem, the
cookbook's renderers, a conversation that grows a turn at a time, seeds from ``gemlab.seeds``.
``python -m gemlab.cookbook key=value ...`` trains with it (``gemlab/cookbook/__main__.py``).

The cookbook is an optional dependency: ``import gemlab`` (and this package) never imports it;
``gemlab.cookbook.adapter`` does, and says in one line how to install it when it is missing.
"""
