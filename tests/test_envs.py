"""Env creation: reproducible from a seed; unknown ids and wrappers fail with one clear message."""

import subprocess
import sys

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


def test_importing_gemlab_leaves_the_root_logger_alone():
    """gem's import installs a root INFO handler; through gemlab it must not, or openai/httpx print one
    line per HTTP request (notebook 09 printed 2,625 of them)."""
    code = (
        "import logging; before = (list(logging.getLogger().handlers), logging.getLogger().level)\n"
        "import gemlab\n"
        "assert (list(logging.getLogger().handlers), logging.getLogger().level) == before\n"
        "logging.getLogger('httpx').info('HTTP Request: POST http://x/v1 200 OK')\n"
        "logging.getLogger('openai._base_client').info('Retrying request')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HTTP Request" not in done.stderr + done.stdout
    assert "Retrying" not in done.stderr + done.stdout
