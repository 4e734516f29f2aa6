"""GEM's environments in tinker-cookbook 0.6.1's RL training (``tinker_cookbook.rl.train``).

``gemlab.cookbook.adapter.GemDatasetBuilder`` is a cookbook ``RLDatasetBuilder`` of GEM envs,
multi-turn games included: groups of ``group_size`` copies of one env on one problem, the
cookbook's renderers, a conversation that grows a turn at a time, seeds from ``gemlab.seeds``.
``python -m gemlab.cookbook key=value ...`` trains with it (``gemlab/cookbook/__main__.py``).

The cookbook is an optional dependency: ``import gemlab`` (and this package) never imports it;
``gemlab.cookbook.adapter`` does, and says in one line how to install it when it is missing.
``check_gem_options`` is here, without the cookbook, so the command refuses a bad key before loading it.
"""

from __future__ import annotations


def check_gem_options(env_id: str, env_wrappers: str, template: str, **sizes: int) -> None:
    """Fail before any work on an unknown env id, wrapper or template, or a size (``group_size=``,
    ...) that is not a positive integer: a ``ValueError`` whose one line says what is allowed."""
    from gemlab.envs import check_env_id, wrapper_names  # GEM's registry, without PyTorch
    from gemlab.templates import get_template

    check_env_id(env_id)
    wrapper_names(env_wrappers)
    get_template(template)
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
