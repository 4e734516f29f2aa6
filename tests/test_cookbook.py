"""gemlab.cookbook: GEM envs in tinker-cookbook 0.6.1's RL training (the cookbook is installed on
first use, tests/helpers/cookbook.py), and GEM's own cookbook adapter, unchanged, with the cookbook
version it fits (0.1.0).

- The adapter's contracts, in-process on real GEM envs and the cookbook's Qwen3 renderer: a group
  plays one game, batches repeat by index (so resume replays them), the conversation grows by the
  parsed action and GEM's reply, and GEM judges every action.
- The cookbook's own training loop through ``python -m gemlab.cookbook`` for 2 steps, then resumed
  to 3, on GuessTheNumber (multi-turn) and ``rg:sums-1digit``, under ``python -m tinker_emulator`` and
  over HTTP against ``python -m tinker_emulator.workshop_server``.
- GEM's ``tinker_cookbook_adapter.py`` / ``tinker_cookbook_train.py`` (tests/fixtures/gem): still
  GEM's bytes; they train an ``rg:`` task with cookbook 0.1.0, and fail as documented on a game and
  on cookbook 0.6.1.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import gem_cookbook
from tests.helpers.cookbook import MODEL, cookbook_0_1_0, installed_cookbook, metrics
from tests.helpers.http_server import ROOT, ServerProcess, run_client

GAME, RG = "game:GuessTheNumber-v0-easy", "rg:sums-1digit"
RUNS = {  # the command line of each env's tiny run: 2 groups of 2, short actions, a small LoRA
    GAME: [f"env_id={GAME}"],
    RG: [f"env_id={RG}", "template=qwen3_general"],
}
SIZES = ["group_size=2", "groups_per_batch=2", "max_tokens=16", "lora_rank=8"]
INSTALL_LINE = (
    "gemlab.cookbook needs tinker-cookbook 0.6.1 (no module named 'blobfile'): "
    "pip install --no-deps tinker-cookbook==0.6.1 && pip install datasets termcolor blobfile"
)


@pytest.fixture(scope="module")
def cookbook() -> Path:
    """tinker_cookbook 0.6.1's package folder: imported here when it is installed, else installed
    now with what its training loop imports (tests/helpers/cookbook.py; skips if pip cannot)."""
    try:
        import tinker_cookbook.rl.train  # noqa: F401
    except ModuleNotFoundError:
        folder = installed_cookbook()
        importlib.invalidate_caches()  # so that this process finds what pip just installed
        return folder
    import tinker_cookbook

    return Path(tinker_cookbook.__file__).parent if tinker_cookbook.__version__ == "0.6.1" else installed_cookbook()


@pytest.fixture(scope="module")
def renderer(cookbook: Path):
    """The cookbook's Qwen3 instruct renderer on gemlab/tiny-chat's tokenizer (Tinker's Qwen names map to it)."""
    from tinker_cookbook.renderers import get_renderer

    from tinker_emulator.models import load_tokenizer

    return get_renderer("qwen3_instruct", load_tokenizer("gemlab/tiny-chat"))


def _dataset(renderer, env_id: str = GAME, seed: int = 0, groups_per_batch: int = 4):
    from gemlab.cookbook.adapter import GemDataset

    return GemDataset(
        env_id=env_id, env_wrappers="", template="qwen3_game", renderer=renderer,
        group_size=3, groups_per_batch=groups_per_batch, n_batches=10, seed=seed,
    )


def _secret_numbers(builders) -> list[list[int]]:
    groups = [asyncio.run(builder.make_envs()) for builder in builders]
    return [[env.env.unwrapped.game_number for env in group] for group in groups]


# ----- the adapter, in-process ------------------------------------------------------------------
def test_a_group_plays_one_game_and_a_batch_depends_on_its_index_only(renderer):
    first, again = _dataset(renderer).get_batch(3), _dataset(renderer).get_batch(3)
    numbers = _secret_numbers(first)
    assert all(len(set(group)) == 1 for group in numbers)  # group_size copies, one secret number
    assert numbers == _secret_numbers(again)  # a resumed run rebuilds batch 3 as it was
    assert len({group[0] for group in numbers}) > 1  # the groups of a batch play different games
    other_seed = _secret_numbers(_dataset(renderer, seed=1).get_batch(3))
    assert [g[0] for g in other_seed] != [g[0] for g in numbers]


def test_groups_reset_with_the_seed_gemlabs_trainer_gives_them(renderer):
    """Batch i's group g is reset with derive_seed(derive_seed(seed, i, 1), 0, g, 2): the seed
    gemlab's collect_batch resets group g with in round 0 of step i (gemlab/seeds.py)."""
    import gem

    from gemlab.seeds import derive_seed

    batch = _dataset(renderer, seed=7).get_batch(2)
    for group, numbers in enumerate(_secret_numbers(batch)):
        env = gem.make(GAME)
        env.reset(seed=derive_seed(derive_seed(7, 2, 1), 0, group, 2))
        assert numbers[0] == env.unwrapped.game_number


def test_the_conversation_grows_and_gem_judges_the_parsed_text(renderer):
    from gemlab.cookbook.adapter import GemEnv, user_message
    from gemlab.envs import make_envs
    from gemlab.templates import get_template

    (game,) = make_envs(GAME, 1, seed=3, env_wrappers="")
    instructions, _ = game.reset(seed=3)
    secret = game.unwrapped.game_number
    wrong = secret % 10 + 1  # another number in 1-10
    env = GemEnv(game, user_message(get_template("qwen3_game"), instructions), renderer)
    tokenizer = renderer.tokenizer

    prompt, stop = asyncio.run(env.initial_observation())
    text = tokenizer.decode(prompt.to_ints())
    assert text.startswith(
        "<|im_start|>user\nYou are playing language games. Make valid actions to win.\nObservation: You are "
        "playing Guess The Number."
    )
    assert text.endswith("within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n")
    assert stop == renderer.get_stop_sequences()

    action = tokenizer.encode(f"\\boxed{{{wrong}}}<|im_end|>", add_special_tokens=False)
    step = asyncio.run(env.step(action))
    assert (step.reward, step.episode_done) == (0.0, False)
    hint = "lower" if wrong > secret else "higher"
    # the next prompt is the last prompt, the action, and GEM's reply as the next user message
    assert step.next_observation.to_ints()[: prompt.length + len(action)] == prompt.to_ints() + action
    assert tokenizer.decode(step.next_observation.to_ints()[prompt.length + len(action) :]) == (
        f"\n<|im_start|>user\nAt turn 1, you guessed {wrong}, and the target number is {hint} than "
        f"{wrong}.<|im_end|>\n<|im_start|>assistant\n"
    )

    cut_off = tokenizer.encode("\\boxed{", add_special_tokens=False)  # hit max_tokens: no stop token
    last = asyncio.run(env.step(cut_off))
    # GEM's format-error reward
    assert (last.reward, last.episode_done, last.next_observation.length) == (-0.1, True, 0)
    assert last.logs["observation"] == "At turn 2, you did not provide a valid guess."


def test_bad_command_lines_are_one_line_and_status_2(cookbook, capsys):
    from gemlab.cookbook.__main__ import main

    for argv, says in [
        (
            ["env_id=game:GuessTheNumbr-v0-easy"],
            "Unknown GEM env id 'game:GuessTheNumbr-v0-easy'. Closest registered ids: game:GuessTheNumber-v0-easy",
        ),
        (
            ["template=qwen"],
            "Unknown template 'qwen'. Known templates: qwen3_game, qwen3_general, no, chat, chat_turns.",
        ),
        (["group_size=0"], "group_size must be a positive integer, got 0"),
        (["nokey=1"], "Extraneous argument 'nokey'"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"gemlab.cookbook: {says}"), err


def test_the_command_lines_types_are_the_cookbooks(cookbook):
    """``--help`` answers before PyTorch loads: the command spells two of the cookbook's types out."""
    from tinker.types import LossFnType
    from tinker_cookbook.cli_utils import LogdirBehavior

    from gemlab.cookbook import __main__ as command

    assert (command.LossFnType, command.LogdirBehavior) == (LossFnType, LogdirBehavior)


@pytest.mark.slow  # subprocesses
def test_gemlab_does_not_import_the_cookbook_and_a_missing_one_is_one_line(tmp_path: Path):
    loaded = (
        "import sys, gemlab, gemlab.trainer, gemlab.cookbook; print(sorted(m for m in sys.modules if "
        "'tinker_cookbook' in m))"
    )
    done = subprocess.run([sys.executable, "-c", loaded], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.strip() == "[]", done.stderr[-2000:]
    # a cookbook whose import fails for want of one of its own imports
    (tmp_path / "tinker_cookbook").mkdir()
    (tmp_path / "tinker_cookbook" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'blobfile'\", name='blobfile')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "gemlab.cookbook"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert (done.returncode, done.stderr) == (1, INSTALL_LINE + "\n")


# ----- the cookbook's training loop, 2 steps then resumed to 3 ------------------------------------
def _run_local(args: list[str], tmp_path: Path) -> str:
    env = {
        **os.environ,
        "GEMLAB_LOCAL_DIR": str(tmp_path / "checkpoints"),
        "HF_HUB_OFFLINE": "1",
        "GEMLAB_THREADS": "1",
    }
    for name in ("TINKER_API_KEY", "TINKER_BASE_URL", "GEMLAB_LOCAL_MODEL"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "tinker_emulator", "-m", "gemlab.cookbook", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def hf_home(cookbook: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hub cache holding the served tokenizer under the Tinker name the runs use."""
    home = tmp_path_factory.mktemp("hf")
    done = subprocess.run(
        [sys.executable, "-m", "tinker_emulator.workshop_server", "tokenizer", MODEL],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(home)}, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return home


@pytest.fixture(scope="module")
def server(cookbook: Path, tmp_path_factory: pytest.TempPathFactory):
    server = ServerProcess(tmp_path_factory.mktemp("cookbook-http") / "data")
    yield server
    server.stop()


def _check_run(log: Path, env_id: str, steps: list[int]) -> None:
    assert json.loads((log / "config.json").read_text())["dataset_builder"]["env_id"] == env_id
    trained = [row for row in metrics(log) if "optim/lr" in row]
    assert [row["step"] for row in trained] == steps
    for row in trained:
        assert row["env/all/total_episodes"] == 4  # 2 groups of 2
        assert math.isfinite(row["env/all/reward/total"]) and -0.1 <= row["env/all/reward/total"] <= 1.0
    turns = [row["env/all/turns_per_episode"] for row in trained]
    if env_id == RG:
        assert turns == [1.0] * len(steps)  # a question and its answer
        return
    assert max(turns) > 1  # GuessTheNumber: episodes of several turns (gemlab/tiny-chat guesses, rarely right at once)
    # each turn's prompt is the whole conversation so far: it grows by at least the last action
    for line in (log / "iteration_000000" / "train_rollout_summaries.jsonl").read_text().splitlines():
        played = json.loads(line)["steps"]
        for before, after in zip(played, played[1:], strict=False):
            assert after["ob_len"] >= before["ob_len"] + before["ac_len"]


@pytest.mark.slow  # two cookbook runs in subprocesses
@pytest.mark.parametrize("env_id", [GAME, RG])
def test_cookbook_training_on_the_local_backend_then_resumed(env_id: str, cookbook: Path, tmp_path: Path):
    log = tmp_path / "run"
    args = [*RUNS[env_id], *SIZES, f"log_path={log}"]
    _run_local([*args, "max_steps=2"], tmp_path)
    _check_run(log, env_id, [0, 1])
    state_path = json.loads((log / "checkpoints.jsonl").read_text().splitlines()[-1])["state_path"]
    assert state_path.startswith("local://")
    logs = _run_local([*args, "max_steps=3", "behavior_if_log_dir_exists=resume"], tmp_path)
    assert f"Resumed training from {state_path}" in logs
    _check_run(log, env_id, [0, 1, 2])


@pytest.mark.slow  # a server and two cookbook runs in subprocesses
@pytest.mark.parametrize("env_id", [GAME, RG])
def test_cookbook_training_over_http_then_resumed(env_id: str, hf_home: Path, server: ServerProcess, tmp_path: Path):
    log = tmp_path / "run"
    args = ["-m", "gemlab.cookbook", *RUNS[env_id], *SIZES, f"log_path={log}"]
    run_client(server, [*args, "max_steps=2"], tmp_path, timeout=600, HF_HOME=str(hf_home))
    _check_run(log, env_id, [0, 1])
    state_path = json.loads((log / "checkpoints.jsonl").read_text().splitlines()[-1])["state_path"]
    assert state_path.startswith("tinker://")
    resumed = run_client(
        server, [*args, "max_steps=3", "behavior_if_log_dir_exists=resume"], tmp_path, timeout=600, HF_HOME=str(hf_home)
    )
    assert f"Resumed training from {state_path}" in resumed.stdout + resumed.stderr
    _check_run(log, env_id, [0, 1, 2])


# ----- GEM's cookbook adapter, unchanged ------------------------------------------------------------
def test_gems_cookbook_files_are_upstreams():
    found = {name: gem_cookbook.git_blob_id(gem_cookbook.FIXTURES / name) for name in gem_cookbook.UPSTREAM_BLOBS}
    assert found == gem_cookbook.UPSTREAM_BLOBS, "tests/fixtures/gem/tinker_cookbook_*.py differ from GEM's files"


def _run_gems(cookbook_folder: Path | None, env_id: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """GEM's train script as its README runs it, on the local backend, from a folder holding it as
    ``examples/train_tinker/``; ``cookbook_folder`` alone on ``PYTHONPATH`` (None: none, so the
    installed 0.6.1; gemlab's own examples/ folder stays off the path)."""
    root = gem_cookbook.as_upstream_package(tmp_path / "gem")
    env = {
        **os.environ,
        "GEMLAB_LOCAL_DIR": str(tmp_path / "checkpoints"),
        "HF_HUB_OFFLINE": "1",
        "GEMLAB_THREADS": "1",
    }
    for name in ("TINKER_API_KEY", "TINKER_BASE_URL", "GEMLAB_LOCAL_MODEL", "PYTHONPATH"):
        env.pop(name, None)
    if cookbook_folder is not None:
        env["PYTHONPATH"] = str(cookbook_folder)
    args = gem_cookbook.train_args(env_id, MODEL, tmp_path / "log")
    return subprocess.run(
        [sys.executable, "-m", "tinker_emulator", "-m", gem_cookbook.MODULE, *args],
        capture_output=True, text=True, env=env, cwd=root, timeout=600,
    )


@pytest.mark.slow  # installs cookbook 0.1.0 and runs GEM's script in a subprocess
def test_gems_cookbook_adapter_trains_an_rg_task_with_cookbook_0_1_0(cookbook: Path, tmp_path: Path):
    done = _run_gems(cookbook_0_1_0(), "rg:simple_equations", tmp_path)  # the rg task of GEM's README
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    log = tmp_path / "log"
    assert "recipe_name" not in json.loads((log / "config.json").read_text())  # 0.1.0's Config, not 0.6.1's
    trained = [row for row in metrics(log) if "optim/lr" in row]
    assert [row["step"] for row in trained] == [0, 1]
    assert all(row["env/all/total_episodes"] == 4 and row["env/all/turns_per_episode"] == 1 for row in trained)
    assert all(math.isfinite(row["env/all/reward/total"]) for row in trained)
    final = json.loads((log / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["name"] == "final" and final["state_path"].startswith("local://")


@pytest.mark.slow  # runs GEM's script in subprocesses
@pytest.mark.parametrize(
    "version, env_id, error",
    [
        ("0.1.0", GAME, "AttributeError: 'GuessTheNumberEnv' object has no attribute 'seed'"),
        (
            "0.6.1",
            "rg:simple_equations",
            "TypeError: Config.__init__() missing 1 required keyword-only argument: 'recipe_name'",
        ),
    ],
    ids=["a-game-with-0.1.0", "rg-with-0.6.1"],
)
def test_gems_cookbook_adapter_fails_as_documented(
    version: str, env_id: str, error: str, cookbook: Path, tmp_path: Path
):
    """GEM's adapter reads ``env.seed``, which only its reasoning-gym envs have; cookbook 0.4.2 and
    later require ``Config(recipe_name=...)``, which GEM's script does not pass."""
    done = _run_gems(cookbook_0_1_0() if version == "0.1.0" else None, env_id, tmp_path)
    assert done.returncode == 1 and done.stderr.rstrip().endswith(error), done.stderr[-3000:]
    assert not (tmp_path / "log" / "metrics.jsonl").exists() or not metrics(tmp_path / "log")  # nothing trained
