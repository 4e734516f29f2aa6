"""``POST /generate``: the token-in, token-out route of SGLang's and vLLM's own servers, as
atroposlib's ``SGLangServer`` and ``VLLMServer`` call it (and through them its ``ManagedServer``,
which tracks tokens, masks and logprobs across an Atropos environment's turns).

The two request shapes are told apart by their fields:

- SGLang: ``{"input_ids": [...], "sampling_params": {"max_new_tokens", "temperature", "top_p",
  "n", "stop", "seed"}, "return_logprob": true}``, answered per sample with ``{"text",
  "output_ids", "meta_info": {"id", "finish_reason": {"type": "stop" | "length"}, "prompt_tokens",
  "completion_tokens", "output_token_logprobs": [[logprob, token_id, null], ...],
  "sampler_version"}}``: one object for ``n = 1``, a list for more, as SGLang answers;
- vLLM (atroposlib's ``vllm_api_server``): ``{"prompt": {"prompt_token_ids": [...]}, "logprobs":
  0, "n", "max_tokens", "temperature", "top_p", "stop", "seed"}``, answered ``{"text": [...],
  "prompt", "finish_reasons": [...], "logprobs": [[[{"<id>": logprob}], ...] per sample],
  "prompt_token_ids", "token_ids", "sampler_version"}``.

Both become a ``CompletionRequest`` on token ids, so the prompt is checked against the vocabulary
and the context, sampled and recorded exactly like ``/v1/completions``; like SGLang and vLLM (and
unlike an OpenAI completion) sampling stops at the model's end-of-turn tokens. Sampling controls
the sampler does not have (penalties, ``min_p``, ``top_k``, stop token ids, ...) are refused with a
400 naming the field unless they hold their neutral value; fields this module does not know are
ignored, as for the OpenAI routes.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gemlab.openai_endpoint.completions import Generation
from gemlab.openai_endpoint.schemas import CompletionRequest, OpenAIError

SAMPLING_FIELDS = ("temperature", "top_p", "n", "stop", "seed")  # passed on as CompletionRequest's
# controls a Tinker sampler does not have, with the value that means "off" in SGLang and vLLM
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "top_k": (-1, 0, None),
    "min_p": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "presence_penalty": (0, 0.0, None),
    "repetition_penalty": (1, 1.0, None),
    "min_new_tokens": (0, None),
    "min_tokens": (0, None),
    "ignore_eos": (False, None),
    "stop_token_ids": (None, []),
    "skip_special_tokens": (True, None),
    "stream": (False, None),
}


def parse(body: Any, model_name: str) -> tuple[str, CompletionRequest]:
    """The body's style (``"sglang"`` or ``"vllm"``) and the completion request it asks for;
    a 400 naming the field for anything else."""
    if not isinstance(body, dict):
        raise OpenAIError(400, f"a /generate body must be a JSON object, got {type(body).__name__}")
    if "input_ids" in body:
        style, ids, params = "sglang", body["input_ids"], body.get("sampling_params")
        params = {} if params is None else params  # absent or null: SGLang's defaults; [] is no object
        if not isinstance(params, dict):
            raise OpenAIError(400, "sampling_params must be a JSON object", param="sampling_params")
        where, max_tokens = "sampling_params.", params.get("max_new_tokens", 128)  # SGLang's default
    elif isinstance(body.get("prompt"), dict) and "prompt_token_ids" in body["prompt"]:
        style, ids, params = "vllm", body["prompt"]["prompt_token_ids"], body
        where, max_tokens = "", params.get("max_tokens", 16)  # vLLM's default
    else:
        raise OpenAIError(400, "a /generate body needs input_ids (SGLang) or prompt.prompt_token_ids (vLLM)")
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise OpenAIError(
            400,
            "the prompt must be a non-empty list of token ids",
            param="input_ids" if style == "sglang" else "prompt",
        )
    for name, neutral in NEUTRAL.items():
        if name in params and params[name] not in neutral:
            raise OpenAIError(
                400,
                f"{where}{name}={params[name]!r} is not supported: the sampler has no such control (leave it out)",
                param=f"{where}{name}",
            )
    top_k = params.get("logprobs") if style == "vllm" else None  # vLLM: logprobs=k adds the top k
    fields = {key: params[key] for key in SAMPLING_FIELDS if key in params and params[key] is not None}
    try:
        request = CompletionRequest(
            model=model_name, prompt=ids, max_tokens=max_tokens, logprobs=top_k or None, **fields
        )
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ()))
        field = {"max_tokens": "max_new_tokens" if style == "sglang" else "max_tokens", "logprobs": "logprobs"}.get(
            field, field
        )
        raise OpenAIError(
            400, f"malformed request body: {first.get('msg', 'invalid')} at {where}{field!r}", param=f"{where}{field}"
        ) from None
    return style, request


def sglang_response(generation: Generation, tokenizer: Any) -> dict[str, Any] | list[dict[str, Any]]:
    """SGLang's ``/generate`` answer: one object per sample (a list when there are several)."""
    answers = []
    for choice in generation.choices:
        finish: dict[str, Any] = {"type": "length", "length": len(choice.token_ids)}
        if choice.finish_reason == "stop":
            finish = {"type": "stop", "matched": choice.token_ids[-1] if choice.token_ids else None}
        answers.append(
            {
                "text": choice.text,
                "output_ids": choice.token_ids,
                "meta_info": {
                    "id": f"{generation.id}-{choice.index}",
                    "finish_reason": finish,
                    "prompt_tokens": len(generation.prompt_token_ids),
                    "completion_tokens": len(choice.token_ids),
                    "cached_tokens": 0,
                    "output_token_logprobs": [
                        [lp, t, None] for lp, t in zip(choice.logprobs, choice.token_ids, strict=True)
                    ],
                    "sampler_version": generation.sampler_version,
                },
            }
        )
    return answers[0] if len(answers) == 1 else answers


def vllm_response(generation: Generation, tokenizer: Any) -> dict[str, Any]:
    """vLLM's ``/generate`` answer (atroposlib's ``vllm_api_server``): per sample, each token's
    ``{id: logprob}``, the sampled token first, then its top alternatives when asked."""
    logprobs = []
    for choice in generation.choices:
        rows = choice.top_logprobs or [[] for _ in choice.token_ids]
        logprobs.append(
            [
                [{str(t): lp, **{str(a): alp for a, alp in top if a != t}}]
                for t, lp, top in zip(choice.token_ids, choice.logprobs, rows, strict=True)
            ]
        )
    return {
        "text": [c.text for c in generation.choices],
        "prompt": generation.prompt_text,
        "finish_reasons": [c.finish_reason for c in generation.choices],
        "logprobs": logprobs,
        "prompt_token_ids": generation.prompt_token_ids,
        "token_ids": [c.token_ids for c in generation.choices],
        "sampler_version": generation.sampler_version,
    }


RESPONSES = {"sglang": sglang_response, "vllm": vllm_response}
