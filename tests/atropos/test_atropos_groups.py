"""A ``/batch`` item on its way to the learner (gemlab/atropos/groups.py): refused in one line when
it is malformed or oversized, versioned by the endpoint that sampled it, dropped when too stale."""

from __future__ import annotations

import chz
import pytest

from gemlab.atropos.config import AtroposConfig, config_from_argv
from gemlab.atropos.groups import Refused, VersionBook, check_group, convert
from gemlab.config import Config, TrainingConfig
from gemlab.openai_endpoint.completions import Choice, Generation

LIMITS = {"max_sequences": 8, "max_token_len": 16, "vocab_size": 100}


def group(turn_logprobs: list[list[float]], score: list[float] | None = None) -> dict:
    """Sequences of 2 prompt tokens then one written turn of the given logprobs."""
    tokens = [[1, 2, *range(10, 10 + len(lps))] for lps in turn_logprobs]
    return {
        "tokens": tokens,
        "masks": [[-100, -100, *t[2:]] for t in tokens],
        "inference_logprobs": [[1.0, 1.0, *lps] for lps in turn_logprobs],
        "scores": score or [float(i % 2) for i in range(len(tokens))],
    }


def served(book: VersionBook, version: int, turn_logprobs: list[list[float]]) -> None:
    choices = [Choice(i, list(range(10, 10 + len(lps))), lps, "", "stop") for i, lps in enumerate(turn_logprobs)]
    book.add(Generation(f"g{version}-{turn_logprobs}", "completion", 0, "m", [1, 2], choices, version))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: g.pop("inference_logprobs"), "inference_logprobs.*ManagedServer"),
        (lambda g: g["scores"].pop(), "as many tokens, masks, scores"),
        (lambda g: g["tokens"][0].append(5), "one length"),
        (lambda g: g["tokens"][0].__setitem__(0, 100), r"token id in 0\.\.99"),
        (lambda g: g["scores"].__setitem__(0, float("nan")), "finite number"),
        (lambda g: g["inference_logprobs"][0].__setitem__(2, 0.5), "<= 0"),
        (
            lambda g: [g[k][0].extend([3] * 20) for k in ("tokens", "masks", "inference_logprobs")],
            "longer than max_token_len=16",
        ),
        (
            lambda g: [g[k].extend(g[k] * 4) for k in ("tokens", "masks", "inference_logprobs", "scores")],
            "more than a batch",
        ),
    ],
)
def test_a_malformed_or_oversized_group_is_refused_in_one_line(change, message: str) -> None:
    bad = group([[-0.5, -0.25], [-1.0]])
    check_group(bad, **LIMITS)  # as made: accepted
    change(bad)
    with pytest.raises(Refused, match=message) as refused:
        check_group(bad, **LIMITS)
    assert "\n" not in str(refused.value)


def test_groups_are_versioned_by_what_the_endpoint_served_and_stale_ones_dropped() -> None:
    book = VersionBook()
    fresh, old = [[-0.5, -0.25], [-1.0]], [[-0.125], [-2.0, -0.75]]
    served(book, 4, fresh)
    served(book, 1, old)
    batch = [group(fresh), group(old), group([[-3.0], [-0.0625]]), {"tokens": "nope"}]
    out = convert(batch, 5, book, max_staleness=3, **LIMITS)
    assert (out.groups, out.refused, out.stale, out.unversioned) == (4, 1, 1, 1)
    assert out.sequences_dropped == 2  # the stale group's two sequences; the refused one had no list of tokens
    versions = {e.group: e.transitions[0].sampler_version for e in out.episodes}
    assert versions == {(5, 0): 4, (5, 2): 5}  # the unversioned group is trained as fresh
    assert convert(batch[1:2], 5, book, max_staleness=4, **LIMITS).stale == 0


def test_the_command_line_refuses_unknown_keys_and_bad_training_values() -> None:
    assert config_from_argv(["max_steps=2", "advantage=rebn", "start_api=true"]) == AtroposConfig(
        max_steps=2, advantage="rebn", start_api=True
    )
    with pytest.raises(ValueError, match="expected key=value"):
        config_from_argv(["lr=3"])
    with pytest.raises(ValueError, match="loss_fn must be one of"):
        config_from_argv(["loss_fn=mse"])


def test_the_training_half_is_declared_once() -> None:
    """The keys AtroposConfig shares with Config are TrainingConfig's, with its checks and docs (only
    the defaults may differ): a training field is declared in one place."""
    atropos, shared = chz.chz_fields(AtroposConfig), chz.chz_fields(TrainingConfig)
    assert set(atropos) & set(chz.chz_fields(Config)) == set(shared)
    assert {name: (atropos[name]._validator, atropos[name]._doc) for name in shared} == {
        name: (field._validator, field._doc) for name, field in shared.items()
    }
    assert AtroposConfig(save_every=0).train_config().save_every == 0  # Config's meaning: only at the end and on a stop
    with pytest.raises(ValueError, match="gamma must be in"):
        AtroposConfig(gamma=2.0)  # checked by the shared field itself
