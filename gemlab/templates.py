"""Prompt templates: how an observation becomes the tokens the policy sees.

The first three are GEM's Tinker example templates, character for character. ``chat`` uses the
tokenizer's own chat template instead, so any chat model gets the prompt format it was tuned on.

``chat_turns`` is ``chat`` for a whole episode: the first observation is rendered as ``chat``
renders it, and each later one *continues* the episode's tokens (the last prompt, the action as
sampled, then the new observation as the next user message), as tinker-cookbook's renderers do.
Each prompt then extends the previous prompt plus action token for token, so the sampler can keep
an episode's KV cache across its turns and the learner can train an episode as one sequence. Use
it with envs that send only what is new each turn (no ``concat`` wrapper).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Tokenizer(Protocol):
    """The slice of a Hugging Face tokenizer that templates need."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def apply_chat_template(self, conversation: list[dict], **kwargs) -> object: ...

    def __hash__(self) -> int: ...  # the encodings are cached per tokenizer (functools.lru_cache)


def _qwen3_game(observation: str) -> str:
    return (
        "<|im_start|>user\nYou are playing language games. Make valid actions to win.\n"
        f"Observation: {observation}"
        "\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def _qwen3_general(question: str) -> str:
    return (
        f"<|im_start|>user\nQuestion: {question}"
        "\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def _no_template(observation: str) -> str:
    return observation


@dataclass(frozen=True)
class Template:
    """A named way to turn an observation into prompt tokens."""

    name: str
    description: str
    text_fn: Callable[[str], str] | None = None  # None: the tokenizer's chat template renders it
    continues: bool = False  # later turns extend the episode's tokens (``continue_tokens``)

    @property
    def renders_text(self) -> bool:
        """True when the template is a plain string function (independent of the tokenizer)."""
        return self.text_fn is not None

    def render_text(self, observation: str, tokenizer: Tokenizer | None = None) -> str:
        """The prompt as text (with special markers spelled out)."""
        if self.text_fn is not None:
            return self.text_fn(observation)
        if tokenizer is None:
            raise ValueError(f"template {self.name!r} needs a tokenizer to render")
        return str(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": observation}],
                tokenize=False,
                add_generation_prompt=True,
            )
        )

    def render(self, observation: str, tokenizer: Tokenizer) -> list[int]:
        """The prompt as token ids, ready for ``ModelInput.from_ints``. The observation is text:
        a special token spelled out in it (a tool's output, say) never becomes that token."""
        if not _control_strings(tokenizer, observation):
            return list(_encode(tokenizer, self.render_text(observation, tokenizer)))
        before, _, after = self.render_text(_HOLE, tokenizer).partition(_HOLE)
        return [*_encode(tokenizer, before), *_as_text(tokenizer, observation), *_encode(tokenizer, after)]

    def continue_tokens(self, history: list[int], observation: str, tokenizer: Tokenizer) -> list[int]:
        """The next turn's prompt for a template that ``continues``: ``history`` (the last prompt
        and the action as sampled) followed by the chat template's tokens for a new user message
        ``observation`` and the assistant's header. An action that stopped on the end-of-turn
        token already holds it; one cut at ``max_tokens`` gets it here."""
        if not self.continues:
            raise ValueError(f"template {self.name!r} renders each turn on its own; use render()")
        between, after, end = _turn_markers(tokenizer)
        end_tokens = list(_encode(tokenizer, end)) if end else []
        closed = bool(end_tokens) and history[-len(end_tokens) :] == end_tokens
        opening = between[len(end) :] if closed else between
        if _control_strings(tokenizer, observation):
            return [
                *history,
                *_encode(tokenizer, opening),
                *_as_text(tokenizer, observation),
                *_encode(tokenizer, after),
            ]
        return list(history) + list(_encode(tokenizer, opening + observation + after))


@functools.lru_cache(maxsize=8192)
def _encode(tokenizer: Tokenizer, text: str) -> tuple[int, ...]:
    """Token ids of a prompt, remembered: every env's first observation is the same, and a game's
    histories recur from step to step, so most prompts were encoded before (the tokenizer runs on
    the event loop, where the sampler waits for it)."""
    return tuple(tokenizer.encode(text, add_special_tokens=False))


_HOLE = "\x00observation\x00"


def _control_strings(tokenizer: Tokenizer, text: str) -> list[str]:
    """The tokenizer's special and added tokens (``<|im_end|>``...) that ``text`` spells out."""
    return [token for token in _added_tokens(tokenizer) if token in text]


@functools.lru_cache(maxsize=8)
def _added_tokens(tokenizer: Tokenizer) -> tuple[str, ...]:
    added = set(getattr(tokenizer, "all_special_tokens", [])) | set(getattr(tokenizer, "get_added_vocab", dict)())
    return tuple(sorted(filter(None, added), key=len, reverse=True))


def _as_text(tokenizer: Tokenizer, text: str) -> list[int]:
    """``text``'s token ids with every special or added token it spells out encoded as the
    characters it is made of (one at a time, so that no merge rebuilds it), never as itself."""
    pattern = re.compile("(" + "|".join(map(re.escape, _added_tokens(tokenizer))) + ")")
    ids: list[int] = []
    for index, piece in enumerate(pattern.split(text)):
        pieces = list(piece) if index % 2 else [piece] if piece else []
        for part in pieces:
            ids += tokenizer.encode(part, add_special_tokens=False)
    return ids


@functools.lru_cache(maxsize=8)
def _turn_markers(tokenizer: Tokenizer) -> tuple[str, str, str]:
    """The chat template's text between an assistant reply and the next user message's content,
    after that content (the assistant's header), and the end-of-turn marker that begins the first;
    read off the tokenizer's own template by rendering a conversation with placeholder contents."""
    rendered = str(
        tokenizer.apply_chat_template(
            [
                {"role": "user", "content": "\x00A"},
                {"role": "assistant", "content": "\x00B"},
                {"role": "user", "content": "\x00C"},
            ],
            tokenize=False,
            add_generation_prompt=True,
        )
    )
    between = rendered[rendered.index("\x00B") + 2 : rendered.index("\x00C")]
    after = rendered[rendered.index("\x00C") + 2 :]
    end = next(
        (marker for marker in getattr(tokenizer, "all_special_tokens", []) if marker and between.startswith(marker)), ""
    )
    return between, after, end


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template("qwen3_game", "GEM's game prompt in Qwen3 chat format (GEM's default for games)", _qwen3_game),
        Template("qwen3_general", "GEM's question prompt in Qwen3 chat format", _qwen3_general),
        Template("no", "the raw observation, no template at all", _no_template),
        Template("chat", "the tokenizer's own chat template, one user turn", None),
        Template(
            "chat_turns",
            "the tokenizer's own chat template, the whole episode as one conversation",
            None,
            continues=True,
        ),
    )
}


def get_template(name: str) -> Template:
    """Look a template up by name; an unknown name lists the known ones."""
    try:
        return TEMPLATES[name]
    except KeyError:
        close = difflib.get_close_matches(name, TEMPLATES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"Unknown template {name!r}. Known templates: {', '.join(TEMPLATES)}.{hint}") from None
