"""Env creation: reproducible from a seed; unknown ids and wrappers fail with one clear message."""

import pytest

from gemlab.envs import check_env_id, make_envs, wrapper_names


def test_make_envs_is_reproducible_from_seed():
    first = [env.reset()[0] for env in make_envs("game:GuessTheNumber-v0-easy", 4, seed=3)]
    second = [env.reset()[0] for env in make_envs("game:GuessTheNumber-v0-easy", 4, seed=3)]
    assert first == second
    assert len(first) == 4


def test_unknown_env_id_names_closest():
    with pytest.raises(ValueError, match="Unknown GEM env id 'game:GuessTheNumber-v0'.*game:GuessTheNumber-v0-easy"):
        check_env_id("game:GuessTheNumber-v0")


def test_unknown_wrapper():
    assert wrapper_names("concat") == ["concat"]
    with pytest.raises(ValueError, match="Unknown GEM wrapper.*'concatt'"):
        wrapper_names("concatt")
