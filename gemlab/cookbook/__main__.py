"""``python -m gemlab.cookbook key=value ...``: tinker-cookbook 0.6.1's RL training on a GEM env,
modelled on the cookbook's ``recipes/math_rl/train.py`` (its keys, a ``Config`` with
``recipe_name``, ``check_log_dir``, then ``tinker_cookbook.rl.train.main``).

On the local backend: ``python -m tinker_emulator -m gemlab.cookbook env_id=game:GuessTheNumber-v0-easy
max_steps=2 log_path=/tmp/gem-cookbook``. Bad input is one line and exit status 2.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime
from typing import Any, Literal

import chz
from chz.blueprint import EntrypointHelpException

# the base of chz's argv errors; chz exports only the help one
from chz.blueprint._entrypoint import EntrypointException

from gemlab.cookbook import check_gem_options
from gemlab.env_ids import GUESS_EASY
from gemlab.model_names import QWEN3_4B_INSTRUCT

# The cookbook, Tinker's types and PyTorch load once the keys are read: --help and a refused key answer
# without them. Two of its types, written out here for that (tests/test_cookbook.py checks they match):
LossFnType = Literal[  # tinker.types.LossFnType
    "cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce", "custom"
]
LogdirBehavior = Literal["delete", "resume", "ask", "raise"]  # tinker_cookbook.cli_utils.LogdirBehavior

RECIPE_NAME = "gemlab_cookbook_gem"  # the cookbook attaches it to the run as user_metadata


@chz.chz
class CLIConfig:
    """The command line's keys (math_rl's, with GEM's env keys)."""

    # model
    model_name: str = QWEN3_4B_INSTRUCT
    lora_rank: int = 32
    renderer_name: str | None = None  # None: the model's recommended renderer (or the checkpoint's)
    load_checkpoint_path: str | None = None
    # GEM env
    env_id: str = GUESS_EASY
    env_wrappers: str = ""  # none: the conversation keeps the history (gemlab/cookbook/adapter.py)
    template: str = "qwen3_game"  # gemlab template whose words wrap the first observation
    seed: int = 0
    # training
    group_size: int = 4
    groups_per_batch: int = 16
    n_batches: int = 100
    learning_rate: float = 1e-5
    max_tokens: int = 256
    temperature: float = 1.0
    num_substeps: int = 1
    loss_fn: LossFnType = "importance_sampling"
    loss_fn_config: dict[str, Any] | None = None
    max_steps: int | None = None
    # logging and checkpoints
    log_path: str | None = None
    wandb_project: str | None = None
    wandb_name: str | None = None
    save_every: int = 20
    base_url: str | None = None
    behavior_if_log_dir_exists: LogdirBehavior = "ask"

    @chz.validate
    def _check(self) -> None:
        check_gem_options(
            self.env_id,
            self.env_wrappers,
            self.template,
            group_size=self.group_size,
            groups_per_batch=self.groups_per_batch,
            n_batches=self.n_batches,
        )


def run_name(cli: CLIConfig) -> str:
    """A run's default name: env, model, rank, rate, group, batch, seed and the minute it started."""
    env = cli.env_id.replace(":", "_")
    return (
        f"gem-{env}-{cli.model_name.replace('/', '-')}-r{cli.lora_rank}-lr{cli.learning_rate}-g{cli.group_size}"
        f"-b{cli.groups_per_batch}-seed{cli.seed}-{datetime.now().strftime('%Y-%m-%d-%H-%M')}"
    )


async def cli_main(cli: CLIConfig) -> None:
    """Build the cookbook's ``Config`` from ``cli`` and run its training loop."""
    try:
        from gemlab.cookbook.adapter import GemDatasetBuilder
    except ModuleNotFoundError as missing:  # no cookbook: the adapter's one line says how to install it
        sys.exit(str(missing))
    from tinker_cookbook import checkpoint_utils, cli_utils
    from tinker_cookbook.rl.train import Config
    from tinker_cookbook.rl.train import main as train

    renderer_name = await checkpoint_utils.resolve_renderer_name_from_checkpoint_or_default_async(
        model_name=cli.model_name,
        explicit_renderer_name=cli.renderer_name,
        load_checkpoint_path=cli.load_checkpoint_path,
        base_url=cli.base_url,
    )
    name = run_name(cli)
    log_path = cli.log_path or cli_utils.runs_path("gem", name)
    dataset_builder = GemDatasetBuilder(
        env_id=cli.env_id,
        model_name_for_tokenizer=cli.model_name,
        renderer_name=renderer_name,
        group_size=cli.group_size,
        groups_per_batch=cli.groups_per_batch,
        n_batches=cli.n_batches,
        seed=cli.seed,
        template=cli.template,
        env_wrappers=cli.env_wrappers,
    )
    config = Config(
        learning_rate=cli.learning_rate,
        dataset_builder=dataset_builder,
        model_name=cli.model_name,
        recipe_name=RECIPE_NAME,
        renderer_name=renderer_name,
        lora_rank=cli.lora_rank,
        max_tokens=cli.max_tokens,
        temperature=cli.temperature,
        wandb_project=cli.wandb_project,
        wandb_name=cli.wandb_name or name,
        log_path=log_path,
        base_url=cli.base_url,
        load_checkpoint_path=cli.load_checkpoint_path,
        num_substeps=cli.num_substeps,
        eval_every=0,  # no test set
        save_every=cli.save_every,
        loss_fn=cli.loss_fn,
        loss_fn_config=cli.loss_fn_config,
        max_steps=cli.max_steps,
    )
    cli_utils.check_log_dir(log_path, behavior_if_exists=cli.behavior_if_log_dir_exists)
    await train(config)


def main(argv: list[str] | None = None) -> int:
    """Parse ``key=value`` arguments (``--help`` lists them) and train; bad input: one line, status 2."""
    try:
        cli = chz.Blueprint(CLIConfig).make_from_argv(sys.argv[1:] if argv is None else argv)
    except EntrypointHelpException as help_text:
        print(help_text)
        return 0
    except EntrypointException as error:
        print(f"gemlab.cookbook: {str(error).splitlines()[0]} (--help lists every key)", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"gemlab.cookbook: {error}", file=sys.stderr)
        return 2
    asyncio.run(cli_main(cli))
    return 0


if __name__ == "__main__":
    sys.exit(main())
