"""GEM envs as tinker-cookbook 0.6.1 RL data: ``Env``, ``EnvGroupBuilder``, ``RLDataset`` and the
``RLDatasetBuilder`` that ``tinker_cookbook.rl.train.Config(dataset_builder=...)`` takes.

How a GEM episode becomes a cookbook episode:

- **History is a conversation that grows.** The first observation (wrapped by a gemlab template's
  words, e.g. GEM's game prompt) is the first user message; each action is the assistant message
  the cookbook's renderer parsed from the sampled tokens, and GEM's reply to it (``"At turn 1, you
  guessed 5, and the target number is higher than 5."``) the next user message. This is how the
  cookbook's own multi-turn recipes keep history (``recipes/multiplayer_rl/guess_number``), the
  model sees its past moves in its own chat format, and each observation extends the previous
  observation and action, which lets the cookbook train a whole episode as one sequence
  (``rl/data_processing.py``) instead of re-sending the history every turn. GEM's ``concat``
  wrapper, which writes the history into each observation, would repeat it: the default here is
  no wrapper.
- **GEM judges every action.** The renderer's parsed text goes to ``env.step`` whatever it is
  (also a response cut off at ``max_tokens``); the reward is GEM's (its format-error reward
  included), as in GEM's own loops and the cookbook's guess_number recipe.
- **Groups and seeds.** A group is ``group_size`` identical copies of the env (``gemlab.envs.make_envs``)
  reset with one seed, so they play one problem (GRPO's groups; the cookbook centres rewards
  within each). Batch ``i``'s group ``g`` uses ``derive_seed(derive_seed(seed, i, 1), 0, g, 2)``,
  the seed gemlab's Trainer resets group ``g`` with in the first round of step ``i``
  (``gemlab/seeds.py``); ``get_batch(i)`` is a function of ``i`` alone, so a resumed run plays
  the batches it would have played.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chz
import tinker

INSTALL = "pip install --no-deps tinker-cookbook==0.6.1 && pip install datasets termcolor blobfile"
try:
    import tinker_cookbook.rl.train  # noqa: F401  (the cookbook and what its training loop imports)
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(
        f"gemlab.cookbook needs tinker-cookbook 0.6.1 (no module named {missing.name!r}): {INSTALL}"
    ) from None
from tinker_cookbook.completers import StopCondition  # noqa: E402
from tinker_cookbook.renderers import Message, Renderer, get_renderer, get_text_content  # noqa: E402
from tinker_cookbook.rl.types import (  # noqa: E402
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)
from tinker_cookbook.tokenizer_utils import get_tokenizer  # noqa: E402

from gemlab.cookbook import check_gem_options  # noqa: E402
from gemlab.envs import make_envs  # noqa: E402
from gemlab.seeds import derive_seed  # noqa: E402
from gemlab.templates import Template, get_template  # noqa: E402

# gemlab's text templates are one Qwen3 user turn; the cookbook's renderer writes the chat markers.
_USER_TURN, _ASSISTANT_TURN = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"


def user_message(template: Template, observation: str) -> str:
    """The first user message: ``observation`` in the words of ``template`` without its chat
    markers (``qwen3_game``: GEM's game prompt; ``no`` and ``chat``: the observation itself)."""
    if not template.renders_text:
        return observation
    return template.render_text(observation).removeprefix(_USER_TURN).removesuffix(_ASSISTANT_TURN)


class GemEnv(Env):
    """One episode of a GEM env (already reset) as a cookbook ``Env``: single use, as the cookbook
    requires; the conversation grows by the parsed action and GEM's next observation each turn."""

    def __init__(self, env: Any, first_message: str, renderer: Renderer):
        self.env = env
        self.renderer = renderer
        self.messages: list[Message] = [{"role": "user", "content": first_message}]

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return self.renderer.build_generation_prompt(self.messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        """GEM's ``env.step`` on the renderer's parsed text; its numeric ``info`` becomes metrics."""
        message, _termination = self.renderer.parse_response(action)
        text = get_text_content(message)
        observation, reward, terminated, truncated, info = self.env.step(text)
        done = bool(terminated or truncated)
        if not done:
            self.messages += [message, {"role": "user", "content": observation}]
        return StepResult(
            reward=float(reward),
            episode_done=done,
            next_observation=tinker.ModelInput.empty()
            if done
            else self.renderer.build_generation_prompt(self.messages),
            next_stop_condition=self.renderer.get_stop_sequences(),
            # any real number (numpy's too), as the cookbook's metrics hold them at run time
            metrics={key: value for key, value in (info or {}).items() if isinstance(value, numbers.Real)},
            logs={"action": text, "observation": str(observation)},
        )


@dataclass(frozen=True)
class GemEnvGroupBuilder(EnvGroupBuilder):
    """``group_size`` copies of ``env_id`` on the problem of ``problem_seed``. Holds names and
    numbers only (and a renderer, which the cookbook pickles safely); envs are made in ``make_envs``."""

    env_id: str
    env_wrappers: str
    template: str
    renderer: Renderer
    group_size: int
    problem_seed: int

    async def make_envs(self) -> Sequence[Env]:
        envs = make_envs(
            self.env_id,
            self.group_size,
            seed=self.problem_seed,
            env_wrappers=self.env_wrappers,
            group_size=self.group_size,
        )
        template = get_template(self.template)
        return [
            GemEnv(env, user_message(template, env.reset(seed=self.problem_seed)[0]), self.renderer) for env in envs
        ]

    def logging_tags(self) -> list[str]:
        return [self.env_id]


@dataclass(frozen=True)
class GemDataset(RLDataset):
    """``n_batches`` batches of ``groups_per_batch`` groups; batch ``i`` depends on ``i`` and ``seed`` only."""

    env_id: str
    env_wrappers: str
    template: str
    renderer: Renderer
    group_size: int
    groups_per_batch: int
    n_batches: int
    seed: int

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        batch_seed = derive_seed(self.seed, index, 1)
        return [
            GemEnvGroupBuilder(
                env_id=self.env_id,
                env_wrappers=self.env_wrappers,
                template=self.template,
                renderer=self.renderer,
                group_size=self.group_size,
                problem_seed=derive_seed(batch_seed, 0, group, 2),
            )
            for group in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.n_batches


@chz.chz
class GemDatasetBuilder(RLDatasetBuilder):
    """A cookbook ``RLDatasetBuilder`` of GEM envs (no test set): ``env_id`` is any GEM id
    (``game:GuessTheNumber-v0-easy``, ``rg:...``), ``template`` a gemlab template name for the
    first observation, ``env_wrappers`` GEM wrapper names (comma-separated; none by default)."""

    env_id: str
    model_name_for_tokenizer: str
    renderer_name: str
    group_size: int
    groups_per_batch: int
    n_batches: int = 100
    seed: int = 0
    template: str = "qwen3_game"
    env_wrappers: str = ""

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

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        renderer = get_renderer(self.renderer_name, tokenizer=get_tokenizer(self.model_name_for_tokenizer))
        dataset = GemDataset(
            env_id=self.env_id,
            env_wrappers=self.env_wrappers,
            template=self.template,
            renderer=renderer,
            group_size=self.group_size,
            groups_per_batch=self.groups_per_batch,
            n_batches=self.n_batches,
            seed=self.seed,
        )
        return dataset, None
