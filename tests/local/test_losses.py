"""Each built-in loss against its formula computed by hand, and its gradient against autograd
of that formula on the same model; gradient accumulation, AdamW, and custom losses."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tinker import types

from tests.helpers.local import grads, nudge, rl_datum, sft_datum, weights
from tinker_emulator import lora, losses

CONFIGS = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {},
    "cispo": {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1},
    "dro": {"beta": 0.5},
    "gspo": {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1},
    "stable_reinforce": {},
}
# Tinker's documented defaults (tinker-docs.thinkingmachines.ai/tinker/losses/{ppo,cispo}); gspo's
# page gives none, so the local backend takes the GSPO paper's range (arXiv 2507.18071, sec. 5.1).
DEFAULT_CLIPS = {"ppo": (0.8, 1.2), "cispo": (0.0, 4.0), "gspo": (1 - 3e-4, 1 + 4e-4)}


def formula(name: str, lp: torch.Tensor, inputs: dict[str, torch.Tensor], config: dict[str, float]) -> torch.Tensor:
    """Tinker's per-token loss, written out independently of tinker_emulator.losses."""
    if name == "cross_entropy":
        return -lp * inputs["weights"]
    q, adv = inputs["logprobs"], inputs["advantages"]
    ratio = torch.exp(lp - q)
    lo, hi = config.get("clip_low_threshold"), config.get("clip_high_threshold")
    if name in ("importance_sampling", "stable_reinforce"):  # stable_reinforce: the local stand-in
        return -ratio * adv
    if name == "ppo":
        return -torch.min(ratio * adv, torch.clamp(ratio, lo, hi) * adv)
    if name == "cispo":
        return -torch.clamp(ratio, lo, hi).detach() * lp * adv
    if name == "dro":
        return -(lp * adv - 0.5 * config["beta"] * (lp - q) ** 2)
    if name == "gspo":
        mask = inputs["sequence_ratio_mask"] > 0
        sequence = torch.exp((lp.detach() - q)[mask].sum() / mask.sum())  # geometric mean of ratios
        token = sequence * torch.exp(lp - lp.detach())  # value s, gradient of the token's own logprob
        return -torch.min(token * adv, torch.clamp(token, lo, hi) * adv)
    raise AssertionError(name)


def test_documented_defaults():
    for name, (lo, hi) in DEFAULT_CLIPS.items():
        assert losses.resolve_config(name, None) == pytest.approx({"clip_low_threshold": lo, "clip_high_threshold": hi})
    assert losses.resolve_config("stable_reinforce", None) == {}
    with pytest.raises(ValueError, match="beta"):
        losses.resolve_config("dro", None)


def test_loss_functions_and_their_gradients():
    torch.manual_seed(0)
    lp = torch.randn(50) - 2
    mask = (torch.arange(50) >= 20).float()
    inputs = {
        "logprobs": lp + 0.4 * torch.randn(50),
        "advantages": torch.randn(50),
        "weights": torch.rand(50),
        "sequence_ratio_mask": mask,
    }
    q, adv = inputs["logprobs"], inputs["advantages"]
    ratio = torch.exp(lp - q)
    clipped = torch.clamp(ratio, 0.8, 1.2)
    sequence = torch.exp(((lp - q) * mask).sum() / mask.sum())
    seq_clipped = torch.clamp(sequence, 0.9, 1.1)
    # d loss / d lp, by hand
    expected_grads = {
        "cross_entropy": -inputs["weights"],
        "importance_sampling": -ratio * adv,
        "stable_reinforce": -ratio * adv,
        "ppo": torch.where(ratio * adv <= clipped * adv, -ratio * adv, torch.zeros(50)),
        "cispo": -torch.clamp(ratio, 0.0, 4.0) * adv,
        "dro": -(adv - 0.5 * (lp - q)),
        "gspo": torch.where(sequence * adv <= seq_clipped * adv, -sequence * adv, torch.zeros(50)),
    }
    for name in losses.LOSSES:
        given = {"beta": 0.5} if name == "dro" else CONFIGS[name] if name == "gspo" else None
        config = losses.resolve_config(name, given)
        leaf = lp.clone().requires_grad_(True)
        elementwise = losses.LOSSES[name].fn(leaf, inputs, config)
        torch.testing.assert_close(elementwise, formula(name, lp, inputs, config))
        elementwise.sum().backward()
        torch.testing.assert_close(leaf.grad, expected_grads[name], msg=name)


def _data(training, prompt):
    """Two datums with sampler logprobs near the model's, so clipping is active on some tokens."""
    torch.manual_seed(1)
    actions = [[11, 12, 13, 14], [20, 21, 22]]
    probe = [rl_datum(prompt, a, [0.0] * len(a), 1.0) for a in actions]
    current = training.forward(probe, "importance_sampling").result().loss_fn_outputs
    data = []
    for action, out, advantage in zip(actions, current, (1.5, -0.7), strict=True):
        lp = out["logprobs"].to_torch()[-len(action) :]
        datum = rl_datum(prompt, action, (lp + 0.4 * torch.randn(len(action))).tolist(), advantage)
        weights = torch.zeros(datum.model_input.length)
        weights[-len(action) :] = torch.rand(len(action)) + 0.5
        datum.loss_fn_inputs["weights"] = types.TensorData.from_torch(weights)
        datum.loss_fn_inputs["sequence_ratio_mask"] = types.TensorData.from_torch((weights > 0).float())
        data.append(datum)
    return data


def _autograd_reference(training, data, name, config):
    """Gradient of the hand formula through the model itself, not through gemlab's loss code."""
    model_handle = training._model
    for p in training._params:
        p.grad = None
    with lora.active(model_handle, training._adapter) as model:
        total = 0.0
        for datum in data:
            ids = torch.tensor([datum.model_input.to_ints()])
            logits = model(input_ids=ids).logits[0].float()
            tensors = {k: v.to_torch() for k, v in datum.loss_fn_inputs.items()}
            lp = torch.log_softmax(logits, -1).gather(-1, tensors["target_tokens"][:, None])[:, 0]
            total = total + formula(name, lp, {k: v.float() for k, v in tensors.items()}, config).sum()
        total.backward()
    reference = grads(training)
    for p in training._params:
        p.grad = None
    return reference


@pytest.mark.parametrize("name", list(CONFIGS))
def test_builtin_loss_matches_formula_and_autograd(training, prompt, name):
    nudge(training, prompt)
    data = _data(training, prompt)
    config = CONFIGS[name]
    result = training.forward_backward(data, name, config or None).result()
    got = grads(training)
    hand_total = 0.0
    lo, hi = DEFAULT_CLIPS.get(name, (None, None))
    full_config = {"clip_low_threshold": lo, "clip_high_threshold": hi, **config}
    for datum, out in zip(data, result.loss_fn_outputs, strict=True):
        lp = out["logprobs"].to_torch()
        inputs = {k: v.to_torch().float() for k, v in datum.loss_fn_inputs.items()}
        expected = formula(name, lp, inputs, full_config)
        torch.testing.assert_close(out["elementwise_loss"].to_torch(), expected, rtol=1e-5, atol=1e-6)
        hand_total += float(expected.sum())
    assert math.isclose(result.metrics["loss:sum"], hand_total, rel_tol=1e-5, abs_tol=1e-5)
    reference = _autograd_reference(training, data, name, full_config)
    assert sum(float(g.abs().sum()) for g in reference) > 0
    scale = max(float(g.abs().max()) for g in reference)  # float32 sums in another order: noise ~1e-6 of it
    for a, b in zip(got, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * scale)


def test_clipping_is_active_in_ppo_test_data(training, prompt):
    """The data above must exercise both sides of PPO's clip, or the ppo test proves little."""
    nudge(training, prompt)
    data = _data(training, prompt)
    out = training.forward(data, "ppo").result().loss_fn_outputs
    ratios = torch.cat(
        [
            torch.exp(o["logprobs"].to_torch() - d.loss_fn_inputs["logprobs"].to_torch())[-3:]
            for o, d in zip(out, data, strict=True)
        ]
    )
    assert bool((ratios < 0.8).any() or (ratios > 1.2).any()) and bool(((ratios > 0.8) & (ratios < 1.2)).any())


def test_gradients_accumulate_until_optim_step(training, prompt):
    nudge(training, prompt)
    data = [sft_datum(prompt, [3, 4, 5])]
    training.forward_backward(data, "cross_entropy").result()
    once = grads(training)
    training.forward_backward(data, "cross_entropy").result()
    for a, b in zip(grads(training), once, strict=True):
        torch.testing.assert_close(a, 2 * b)
    before = weights(training)
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    assert all(p.grad is None for p in training._params)
    assert any(not torch.equal(a, b) for a, b in zip(weights(training), before, strict=True))


def test_forward_computes_no_gradient(training, prompt):
    out = training.forward([sft_datum(prompt, [3, 4])], "cross_entropy").result()
    assert all(p.grad is None for p in training._params)
    assert out.metrics["loss:sum"] > 0


def test_optim_step_is_torch_adamw_with_clipping(training, prompt):
    nudge(training, prompt)
    training.forward_backward([sft_datum(prompt, [8, 9])], "cross_entropy").result()
    params = [w.clone().requires_grad_(True) for w in weights(training)]
    for p, g in zip(params, grads(training), strict=True):
        p.grad = g.clone()
    adam = types.AdamParams(learning_rate=3e-3, beta1=0.8, beta2=0.9, eps=1e-8, weight_decay=0.1, grad_clip_norm=0.5)
    # the reference optimizer resumes from the client's state (one step already taken by nudge)
    reference = torch.optim.AdamW(params, lr=adam.learning_rate, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.1)
    state = copy.deepcopy(training._optimizer.state_dict())
    reference.load_state_dict(state)
    for group in reference.param_groups:
        group.update(lr=3e-3, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.1)
    norm = torch.nn.utils.clip_grad_norm_(params, 0.5)
    reference.step()
    response = training.optim_step(adam).result()
    assert math.isclose(response.metrics["grad_norm:mean"], float(norm), rel_tol=1e-5)
    for a, b in zip(weights(training), params, strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-6, atol=1e-7)


def test_forward_backward_custom_matches_builtin(service, training, prompt):
    nudge(training, prompt)
    data = _data(training, prompt)
    builtin = training.forward_backward(data, "importance_sampling").result()
    expected = grads(training)
    for p in training._params:
        p.grad = None

    def custom(batch, logprobs_list):
        loss = sum(
            (-torch.exp(lp - d.loss_fn_inputs["logprobs"].to_torch()) * d.loss_fn_inputs["advantages"].to_torch()).sum()
            for d, lp in zip(batch, logprobs_list, strict=True)
        )
        return loss, {"custom/tokens:sum": float(sum(len(lp) for lp in logprobs_list))}

    result = training.forward_backward_custom(data, custom).result()
    assert math.isclose(result.metrics["loss:sum"], builtin.metrics["loss:sum"], rel_tol=1e-5)
    assert result.metrics["custom/tokens:sum"] == sum(d.model_input.length for d in data)
    for a, b in zip(grads(training), expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    for out, ref in zip(result.loss_fn_outputs, builtin.loss_fn_outputs, strict=True):
        torch.testing.assert_close(out["logprobs"].to_torch(), ref["logprobs"].to_torch())


def test_custom_loss_handle(service, training, prompt):
    def neg_ll(logprobs, weights):
        loss = -(logprobs * weights).sum()
        return loss, {"custom/neg_ll:sum": loss}

    handle = service.create_custom_loss(neg_ll, input_ranks={"logprobs": 1, "weights": 1}).result()
    data = [sft_datum(prompt, [3, 4, 5])]
    custom = training.forward_backward_custom(data, handle).result()
    via_custom = grads(training)
    for p in training._params:
        p.grad = None
    builtin = training.forward_backward(data, "cross_entropy").result()
    assert math.isclose(custom.metrics["loss:sum"], builtin.metrics["loss:sum"], rel_tol=1e-5)
    for a, b in zip(via_custom, grads(training), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_cross_entropy_takes_two_dimensional_targets(training, prompt):
    """(N, K) target_tokens and weights: K targets per position, the same as K 1-D datums summed."""
    nudge(training, prompt)
    tokens = list(prompt) + [5, 6, 7]
    n = len(tokens) - 1
    columns = [torch.tensor(tokens[1:]), torch.tensor(tokens[1:]).flip(0)]
    column_weights = [torch.rand(n), torch.rand(n)]
    wide = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": torch.stack(columns, 1), "weights": torch.stack(column_weights, 1)},
    )
    result = training.forward_backward([wide], "cross_entropy").result()
    wide_grads = grads(training)
    for p in training._params:
        p.grad = None
    narrow = [
        types.Datum(model_input=wide.model_input, loss_fn_inputs={"target_tokens": c, "weights": w})
        for c, w in zip(columns, column_weights, strict=True)
    ]
    reference = training.forward_backward(narrow, "cross_entropy").result()
    lp = result.loss_fn_outputs[0]["logprobs"].to_torch()
    assert list(lp.shape) == [n, 2]
    for k, out in enumerate(reference.loss_fn_outputs):
        torch.testing.assert_close(lp[:, k], out["logprobs"].to_torch(), rtol=1e-5, atol=1e-6)
    assert math.isclose(result.metrics["loss:sum"], reference.metrics["loss:sum"], rel_tol=1e-5)
    scale = max(float(g.abs().max()) for g in wide_grads)  # float32 sums in another order
    for a, b in zip(wide_grads, grads(training), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * scale)
    bad = types.Datum(
        model_input=wide.model_input,
        loss_fn_inputs={"target_tokens": torch.stack(columns, 1), "weights": column_weights[0]},
    )
    with pytest.raises(ValueError, match="must match"):
        training.forward_backward([bad], "cross_entropy")
