"""Env creation and config validation: bad input fails with one clear message."""

import chz
import pytest

from gemlab.backend import BackendError, get_service_client, resolve_backend
from gemlab.config import Config, config_from_argv, make_config
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


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"gamma": 1.5}, r"gamma must be in \[0.0, 1.0\], got 1.5"),
        ({"batch_size": 0}, "batch_size must be a positive number, got 0"),
        ({"template": "qwen_game"}, "template must be one of 'qwen3_game'"),
        ({"normalization": "zscore"}, "normalization must be one of 'rebn'"),
        ({"backend": "cloud"}, "backend must be one of 'auto', 'local', 'tinker'"),
    ],
)
def test_bad_config_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        Config(**overrides)


def test_defaults_are_gems():
    c = Config()
    assert (c.gamma, c.learning_rate, c.lora_rank, c.batch_size, c.num_env) == (0.9, 4e-5, 8, 128, 32)
    assert (c.template, c.env_id, c.env_wrappers, c.normalization) == ("qwen3_game", "game:GuessTheNumber-v0-easy", "concat", "rebn")


def test_presets_and_argv():
    assert make_config("laptop").backend == "local"
    c = config_from_argv(["preset=laptop", "seed=3", "gamma=0.5"])
    assert (c.seed, c.gamma, c.model_name) == (3, 0.5, make_config("laptop").model_name)
    with pytest.raises(ValueError, match="Unknown preset 'big'"):
        config_from_argv(["preset=big"])
    assert chz.asdict(c)["seed"] == 3


def test_real_tinker_without_key_names_local_backend(monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert resolve_backend("auto") == "local"
    with pytest.raises(BackendError, match="TINKER_API_KEY.*backend='local'"):
        get_service_client("tinker")
    monkeypatch.setenv("TINKER_API_KEY", "tml-dummy")
    assert resolve_backend("auto") == "tinker"


def test_smollm2_preset_validates():
    config = make_config("smollm2")
    assert config.model_name == "HuggingFaceTB/SmolLM2-135M-Instruct" and config.backend == "local"
    assert config.warmup_steps > 0  # SmolLM2 never writes \boxed{} at base: RL alone sees no reward
    assert config_from_argv(["preset=smollm2", "seed=2"]).seed == 2
