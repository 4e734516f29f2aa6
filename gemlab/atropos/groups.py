"""What comes out of ``/batch`` becomes episodes: each scored group is checked (a malformed or
oversized one is refused in one line, never trained on), turned into gemlab ``Episode``s by
``gemlab.atropos.loop.group_episodes``, and stamped with the weights version that sampled it.

The version comes from the trainer's own endpoint: ``VersionBook`` is its recorder, and keeps,
for every completion it served, the sampled token ids and logprobs under the version that sampled
them. A turn of a scored group is found there by those same tokens and logprobs (ManagedServer
copies them from the endpoint's answer); a group is as old as its oldest turn. A group sampled
elsewhere (another inference server) has no version: it is counted, and trained as fresh.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gemlab.atropos.loop import group_episodes, turns
from gemlab.episodes import Episode
from gemlab.openai_endpoint.completions import Generation
from gemlab.openai_endpoint.recorder import Recorder

Key = tuple[tuple[int, ...], tuple[float, ...]]


class Refused(ValueError):
    """A ``/batch`` item the trainer will not train on; the message says why in one line."""


class VersionBook(Recorder):
    """The endpoint's recorder, also answering which weights version sampled a given turn."""

    def __init__(self, capacity: int = 100_000) -> None:
        super().__init__(capacity)
        self._versions: OrderedDict[Key, int] = OrderedDict()
        self._book_lock = threading.Lock()

    def add(self, generation: Generation) -> None:
        super().add(generation)
        with self._book_lock:
            for choice in generation.choices:
                self._versions[(tuple(choice.token_ids), tuple(choice.logprobs))] = generation.sampler_version
            while len(self._versions) > self.capacity:
                self._versions.popitem(last=False)

    def version_of(self, tokens: Sequence[int], logprobs: Sequence[float]) -> int | None:
        """The version that sampled exactly these tokens with these logprobs, if this endpoint did."""
        with self._book_lock:
            return self._versions.get((tuple(tokens), tuple(float(x) for x in logprobs)))


def check_group(group: Any, *, max_sequences: int, max_token_len: int, vocab_size: int) -> None:
    """Raise ``Refused`` unless ``group`` is a scored group the trainer can train on: parallel
    lists of token ids (in the vocabulary, at most ``max_token_len`` each), masks, finite scores
    and finite inference logprobs, at most ``max_sequences`` sequences."""
    if not isinstance(group, dict):
        raise Refused(f"a scored group must be a JSON object, got {type(group).__name__}")
    for name in ("tokens", "masks", "scores", "inference_logprobs"):
        if not isinstance(group.get(name), list):
            hint = ": collect it through atroposlib's ManagedServer" if name == "inference_logprobs" else ""
            raise Refused(f"a scored group needs a list {name!r}{hint}")
    sizes = {name: len(group[name]) for name in ("tokens", "masks", "scores", "inference_logprobs")}
    if len(set(sizes.values())) != 1 or not sizes["tokens"]:
        raise Refused(
            "a scored group needs as many tokens, masks, scores and inference_logprobs as it has sequences "
            f"(>0), got {sizes}"
        )
    if sizes["tokens"] > max_sequences:
        raise Refused(f"a scored group of {sizes['tokens']} sequences is more than a batch ({max_sequences})")
    for tokens, mask, logprobs, score in zip(
        group["tokens"], group["masks"], group["inference_logprobs"], group["scores"], strict=True
    ):
        if not all(isinstance(x, list) for x in (tokens, mask, logprobs)) or not len(tokens) == len(mask) == len(
            logprobs
        ):
            raise Refused("each sequence needs lists of tokens, mask entries and logprobs of one length")
        if len(tokens) > max_token_len:
            raise Refused(f"a sequence of {len(tokens)} tokens is longer than max_token_len={max_token_len}")
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in tokens):
            raise Refused(f"a sequence holds something that is not a token id in 0..{vocab_size - 1}")
        if not all(isinstance(m, int) and not isinstance(m, bool) for m in mask):
            raise Refused("a mask holds something that is not an integer")
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
            raise Refused(f"a score must be a finite number, got {score!r}")
        written = [logprobs[i] for a, b in turns(mask) for i in range(a, b)]
        if not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x <= 0 for x in written
        ):
            raise Refused("the logprobs of the tokens the model wrote must be finite numbers <= 0")


@dataclass
class Converted:
    """One ``/batch`` as episodes, and what was left out of it."""

    episodes: list[Episode] = field(default_factory=list)
    groups: int = 0
    refused: int = 0
    stale: int = 0
    unversioned: int = 0
    sequences_dropped: int = 0
    reasons: list[str] = field(default_factory=list)  # one line per refused group


def group_version(episodes: Sequence[Episode], book: VersionBook) -> int | None:
    """The oldest version among the group's turns; None if any turn was not sampled by ``book``'s endpoint."""
    versions = [book.version_of(t.act_tokens, t.act_logprobs) for e in episodes for t in e.transitions]
    return None if not versions or None in versions else min(v for v in versions if v is not None)


def convert(
    batch: list[Any],
    step: int,
    book: VersionBook,
    *,
    max_staleness: int,
    max_sequences: int,
    max_token_len: int,
    vocab_size: int,
) -> Converted:
    """The groups of ``batch`` as the episodes of ``step``: refused groups and groups sampled by
    weights more than ``max_staleness`` versions older than ``step`` are counted, not kept."""
    out = Converted()
    for index, group in enumerate(batch):
        out.groups += 1
        try:
            check_group(group, max_sequences=max_sequences, max_token_len=max_token_len, vocab_size=vocab_size)
            episodes = group_episodes(group, index)
            if not episodes:
                raise Refused("no sequence of the group has a token the model wrote after a prompt")
        except (Refused, ValueError) as error:
            out.refused += 1
            out.sequences_dropped += (
                len(group.get("tokens") or [])
                if isinstance(group, dict) and isinstance(group.get("tokens"), list)
                else 0
            )
            out.reasons.append(str(error))
            continue
        version = group_version(episodes, book)
        if version is None:
            out.unversioned += 1
            version = step
        elif step - version > max_staleness:
            out.stale += 1
            out.sequences_dropped += len(episodes)
            continue
        for episode in episodes:
            episode.group = (step, index)
            for transition in episode.transitions:
                transition.sampler_version = version
        out.episodes.extend(episodes)
    return out
