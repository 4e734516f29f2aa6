"""Config validation and presets: bad input fails with one clear message."""

import chz
import pytest

from gemlab.config import Config, config_from_argv, make_config


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"gamma": 1.5}, r"gamma must be in \[0.0, 1.0\], got 1.5"),
        ({"batch_size": 0}, "batch_size must be a positive number, got 0"),
        ({"template": "qwen_game"}, "template must be one of 'qwen3_game'"),
        ({"advantage": "zscore"}, "advantage must be one of 'rebn'"),
        ({"backend": "cloud"}, "backend must be one of 'auto', 'local', 'tinker'"),
    ],
)
def test_bad_config_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        Config(**overrides)


def test_defaults_are_gems():
    c = Config()
    assert (c.gamma, c.learning_rate, c.lora_rank, c.batch_size, c.num_env) == (0.9, 4e-5, 8, 128, 32)
    assert (c.template, c.env_id, c.env_wrappers, c.advantage) == (
        "qwen3_game",
        "game:GuessTheNumber-v0-easy",
        "concat",
        "rebn",
    )


def test_presets_and_argv():
    assert make_config("laptop").backend == "local"
    c = config_from_argv(["preset=laptop", "seed=3", "gamma=0.5"])
    assert (c.seed, c.gamma, c.model_name) == (3, 0.5, make_config("laptop").model_name)
    with pytest.raises(ValueError, match="Unknown preset 'big'"):
        config_from_argv(["preset=big"])
    assert chz.asdict(c)["seed"] == 3


def test_smollm2_preset_validates():
    config = make_config("smollm2")
    assert config.model_name == "HuggingFaceTB/SmolLM2-135M-Instruct" and config.backend == "local"
    assert config.warmup_steps > 0  # SmolLM2 never writes \\boxed{} at base: RL alone sees no reward
    assert config.warmup_data == "own_answers"  # reasoning-gym tasks have no scripted player
    # scored on held-out sums
    assert (config.env_id, config.eval_env_id) == ("rg:sums-1digit-train", "rg:sums-1digit-test")
    with pytest.raises(ValueError, match="eval_every needs max_staleness=0"):
        make_config("smollm2", max_staleness=1)
    assert config_from_argv(["preset=smollm2", "seed=2"]).seed == 2
