"""``LocalSamplingClient``: Tinker's ``SamplingClient`` on a local model.

``sample`` queues a request and returns a future at once; concurrent requests are batched
into one generation (see ``generation.py`` for the batching and what logprobs and stop tokens
mean). Randomness is per request: ``SamplingParams.seed`` when given, else a seed derived
from the client's seed and the request's position in this client's call order, and sample
``j`` of a request draws from ``(seed, j)``. Same seeds, same tokens, whatever else was in
the batch (up to float rounding across batch shapes).
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import torch
from tinker import SamplingClient, types
from tinker.lib.public_interfaces.api_future import APIFuture, AwaitableConcurrentFuture
from tinker.types.topk_logprobs import TopkLogprobs

from tinker_emulator import decoding, lora
from tinker_emulator.errors import unavailable
from tinker_emulator.generation import (
    MAX_ROWS,
    Request,
    Row,
    RowResult,
    SampleBatcher,
    generate,
    generation_batches,
)
from tinker_emulator.models import LoadedModel
from tinker_emulator.prefill import worth_sharing
from tinker_emulator.scoring import scored_batches
from tinker_emulator.turn_cache import Memory, budget_bytes

if TYPE_CHECKING:
    from tinker.lib.api_future_impl import QueueState
    from tinker.lib.telemetry import Telemetry
    from transformers import PreTrainedTokenizer


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that depends on every part (numpy's SeedSequence mixing)."""
    entropy = [int(p) & 0xFFFF_FFFF_FFFF_FFFF for p in parts]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> np.uint64(1))


class _SampleFuture(AwaitableConcurrentFuture):
    """A sampling future: a blocking wait first releases the batch it belongs to, so a
    synchronous ``.result()`` never waits on a flush that only the event loop would start."""

    def result(self, timeout: float | None = None) -> Any:
        _batcher.flush()
        return super().result(timeout)

    def future(self) -> Any:
        _batcher.flush()
        return super().future()


class LocalSamplingClient(SamplingClient):
    """Samples from a local base model, with a LoRA adapter (a snapshot of trained weights) or
    without one. Build it through ``LocalServiceClient`` or ``LocalTrainingClient``."""

    _handles: weakref.WeakValueDictionary[str, LocalSamplingClient] = weakref.WeakValueDictionary()
    _ids = itertools.count()

    def __init__(
        self,
        *,
        model: LoadedModel,
        adapter: str | None,
        base_model: str,
        seed: int,
        owns_adapter: bool,
        keep_alive: Any = None,
    ):
        self._keep_alive = keep_alive  # whoever owns a shared adapter (an inflight sampler's run)
        self._model = model
        self._adapter = adapter
        self._base_model = base_model
        self._seed = seed
        self._requests = itertools.count()  # next() on a count is atomic: safe from any thread
        self._handle = f"local-sampler-{next(self._ids)}"
        LocalSamplingClient._handles[self._handle] = self
        if owns_adapter and adapter is not None:
            finalizer = weakref.finalize(self, release_adapter, model, adapter)
            finalizer.atexit = False

    @property
    def context_length(self) -> int:
        """Tokens the model's context holds (prompt and answer together)."""
        return self._model.context_length

    @property
    def vocab_size(self) -> int:
        """Token ids the model takes: ``0 .. vocab_size - 1``."""
        return self._model.vocab_size

    # ----- sampling -----------------------------------------------------------------------
    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> APIFuture[types.SampleResponse]:
        """Generate ``num_samples`` completions of ``prompt``; a future of the ``SampleResponse``
        (with each sampled token's ``topk_sample_logprobs`` most likely alternatives when asked)."""
        unsupported = {
            "topk_prompt_logprobs": topk_prompt_logprobs,
            "target_prompt_logprobs": target_prompt_logprobs,
            "prompt_alt_tokens_k": prompt_alt_tokens_k,
        }
        for key, value in unsupported.items():
            if value:
                raise NotImplementedError(f"The local backend does not support {key} (got {value!r})")
        tokens = self._prompt_tokens(prompt)
        _check_last_n(prompt_logprobs_last_n, include_prompt_logprobs, len(tokens))
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
        if (
            isinstance(topk_sample_logprobs, bool)
            or not isinstance(topk_sample_logprobs, int)
            or topk_sample_logprobs < 0
        ):
            raise ValueError(f"topk_sample_logprobs must be a non-negative integer, got {topk_sample_logprobs!r}")
        rows, request_index = self._rows(tokens, num_samples, sampling_params, topk_sample_logprobs)
        job = _Job(
            self,
            tokens,
            rows=rows,
            score=include_prompt_logprobs,
            last_n=prompt_logprobs_last_n,
            sequence_prefix=f"{self._handle}-{request_index}",
        )
        return _SampleFuture(_batcher.submit(Request(group=self._group, payload=job, worker=self._model.worker)))

    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> types.SampleResponse:
        """``await sample(...)``: the ``SampleResponse`` itself (one await, as in Tinker)."""
        return await self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            topk_sample_logprobs,
            target_prompt_logprobs,
            prompt_alt_tokens_k,
            prompt_logprobs_last_n,
        )

    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        """Logprob of each prompt token given the ones before it (the first is ``None``)."""
        tokens = self._prompt_tokens(prompt)
        _check_last_n(prompt_logprobs_last_n, True, len(tokens))
        job = _Job(self, tokens, score=True, last_n=prompt_logprobs_last_n)
        return _SampleFuture(_batcher.submit(Request(group=self._group, payload=job, worker=self._model.worker)))

    async def compute_logprobs_async(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        """``await compute_logprobs(...)``."""
        return await self.compute_logprobs(prompt, prompt_logprobs_last_n)

    # ----- information --------------------------------------------------------------------
    def get_tokenizer(self) -> PreTrainedTokenizer:
        """The local model's tokenizer."""
        return self._model.tokenizer

    def get_base_model(self) -> str:
        """The base model name this sampler was created for (the Tinker name, if one was mapped)."""
        return self._base_model

    async def get_base_model_async(self) -> str:
        return self._base_model

    def get_telemetry(self) -> Telemetry | None:
        return None

    def get_sampler_handle(self) -> str:
        """A string that ``from_sampler_handle`` turns back into this client (same process only)."""
        return self._handle

    @staticmethod
    def from_sampler_handle(handle: str, *, api_key: str | None = None) -> LocalSamplingClient:
        """The live client behind ``handle`` (from ``get_sampler_handle`` in this process)."""
        client = LocalSamplingClient._handles.get(handle)
        if client is None:
            raise ValueError(f"No local sampling client {handle!r} in this process (handles do not cross processes)")
        return client

    @staticmethod
    def create(*args: Any, **kwargs: Any) -> NoReturn:
        """Tinker's internal factory needs a server connection; locally a sampler comes from
        ``create_sampling_client`` or ``save_weights_and_get_sampling_client``."""
        unavailable(
            "SamplingClient.create (Tinker's internal factory)",
            "use ServiceClient.create_sampling_client or TrainingClient.save_weights_and_get_sampling_client",
        )

    def on_queue_state_change(self, queue_state: QueueState, queue_state_reason: str | None) -> None:
        """Local sampling never queues behind other users; nothing to report."""

    def __reduce__(self) -> Any:
        raise TypeError(
            "A local sampling client cannot be pickled: its model lives in this process. "
            "Share it between threads, or pass get_sampler_handle() within the process."
        )

    def __repr__(self) -> str:
        return f"<LocalSamplingClient {self._base_model} on {self._model.name}, adapter={self._adapter}>"

    # ----- helpers ------------------------------------------------------------------------
    @property
    def _group(self) -> tuple[int, str | None]:
        return (id(self._model), self._adapter)

    def _prompt_tokens(self, prompt: types.ModelInput) -> list[int]:
        if not isinstance(prompt, types.ModelInput):
            raise TypeError(f"prompt must be a tinker.types.ModelInput, got {type(prompt).__name__}")
        try:
            tokens = prompt.to_ints()
        except Exception as exc:
            raise ValueError("The local backend only takes text prompts (EncodedTextChunk)") from exc
        if not tokens:
            raise ValueError("The prompt is empty: give at least one token, e.g. ModelInput.from_ints([...])")
        vocab = self._model.vocab_size
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:
            raise ValueError(
                f"Prompt token ids {bad[:5]} are outside the vocabulary of {self._model.name} (0..{vocab - 1})"
            )
        return tokens

    def _rows(
        self, tokens: list[int], num_samples: int, params: types.SamplingParams, top_logprobs: int
    ) -> tuple[list[Row], int]:
        limit = self._model.context_length - len(tokens)
        max_tokens = limit if params.max_tokens is None else params.max_tokens
        if self._base_model != self._model.name and limit >= 1 and max_tokens > limit:
            max_tokens = limit  # a stand-in for a Tinker model: the sample ends with the stand-in's context ("length")
        if max_tokens < 1 or max_tokens > limit:
            raise ValueError(
                f"max_tokens={params.max_tokens} does not fit: the prompt has {len(tokens)} tokens and "
                f"{self._model.name}'s context holds {self._model.context_length} (1..{limit} new tokens allowed)"
            )
        if not math.isfinite(params.temperature) or params.temperature < 0 or not 0 < params.top_p <= 1:
            raise ValueError(f"Need temperature >= 0 and 0 < top_p <= 1, got {params.temperature} and {params.top_p}")
        stop_ids, stop_strings = self._stops(params.stop)
        request_index = next(self._requests)
        seed = params.seed if params.seed is not None else derive_seed(self._seed, request_index)
        rows = [
            Row(
                prompt=tokens,
                max_tokens=max_tokens,
                temperature=float(params.temperature),
                top_k=int(params.top_k),
                top_p=float(params.top_p),
                stop_ids=stop_ids,
                stop_strings=stop_strings,
                generator=torch.Generator().manual_seed(derive_seed(seed, j)),
                top_logprobs=min(top_logprobs, self._model.vocab_size),
            )
            for j in range(num_samples)
        ]
        return rows, request_index

    def _stops(self, stop: Any) -> tuple[frozenset[int], tuple[str, ...]]:
        """As tinker 0.38 states: ``None`` stops at EOS, ``[]`` never stops early, and stop strings
        or token ids stop there as well as at EOS."""
        if stop is None:
            return self._model.eos_token_ids, ()
        items = [stop] if isinstance(stop, str) else list(stop)
        if not items:
            return frozenset(), ()
        ids = self._model.eos_token_ids | frozenset(int(s) for s in items if not isinstance(s, str))
        strings = tuple(s for s in items if isinstance(s, str))
        if any(not s for s in strings):
            raise ValueError("Stop strings must not be empty")
        return ids, strings


def _check_last_n(last_n: int | None, include_prompt_logprobs: bool, prompt_length: int) -> None:
    if last_n is None:
        return
    if not include_prompt_logprobs:
        raise ValueError("prompt_logprobs_last_n applies to prompt logprobs; set include_prompt_logprobs")
    if not 1 <= last_n <= prompt_length - 1:
        raise ValueError(
            f"prompt_logprobs_last_n must be between 1 and len(prompt) - 1 = {prompt_length - 1}, got {last_n}"
        )


@dataclass
class _Job:
    """A queued request: sampling (``rows`` set) and/or prompt scoring (``score`` set)."""

    client: LocalSamplingClient  # kept alive until the job has run: its adapter goes with it
    tokens: list[int]
    rows: list[Row] = field(default_factory=list)
    score: bool = False
    last_n: int | None = None
    sequence_prefix: str = ""


def _score(model: Any, lm: LoadedModel, prompts: list[list[int]]) -> list[list[float | None]]:
    """Prompt logprobs (the first ``None``) of each prompt, in micro-batches."""
    scored: list[list[float | None]] = [[None] for _ in prompts]
    long_prompts = [i for i, p in enumerate(prompts) if len(p) > 1]
    inputs = [prompts[i][:-1] for i in long_prompts]
    targets = [torch.as_tensor(prompts[i][1:]) for i in long_prompts]
    for group, logprobs in scored_batches(model, inputs, targets, lm.pad_token_id, lm.vocab_size):
        for g, lp in zip(group, logprobs, strict=True):
            scored[long_prompts[g]] += lp.tolist()
    return scored


def _mask_before(logprobs: list[float | None], last_n: int | None) -> list[float | None]:
    if last_n is None:
        return logprobs
    return [None] * (len(logprobs) - last_n) + logprobs[-last_n:]


def _run_group(requests: list[Request]) -> list[Any]:
    """All requests for one (model, adapter): generation in batches of up to ``MAX_ROWS`` rows
    sorted by prompt length (a large model's cut where padding would cost more than a call:
    ``generation_batches``), and one scoring pass for prompt logprobs."""
    jobs: list[_Job] = [r.payload for r in requests]
    lm, adapter = jobs[0].client._model, jobs[0].client._adapter
    rows = [row for job in jobs for row in job.rows]
    generated: list[Any] = [None] * len(rows)
    scored_jobs = [job for job in jobs if job.score]

    def decode(ids: list[int]) -> str:
        return lm.tokenizer.decode(ids, skip_special_tokens=False)

    memory = Memory(lm.turns, adapter, (lora.version(lm, adapter), lm.dtype)) if rows and budget_bytes() else None
    with lora.active(lm, adapter) as model, torch.inference_mode():
        lengths = [len(row.prompt) for row in rows]
        decoder = None
        if worth_sharing(model):
            batches = generation_batches(lengths)
            decoder = decoding.for_model(model, lm.dtype, lm.use_threads) if rows else None
        else:  # the tiny models' recorded runs were sampled in these batches, through Hugging Face
            order = sorted(range(len(rows)), key=lambda i: lengths[i])
            batches = [order[start : start + MAX_ROWS] for start in range(0, len(order), MAX_ROWS)]
        for chunk in batches:
            for i, result in zip(
                chunk, generate(model, [rows[i] for i in chunk], lm.pad_token_id, decode, memory, decoder), strict=True
            ):
                generated[i] = result
        scores = dict(zip(map(id, scored_jobs), _score(model, lm, [job.tokens for job in scored_jobs]), strict=True))
    outputs: list[Any] = []
    position = 0
    for job in jobs:
        prompt_logprobs = _mask_before(scores[id(job)], job.last_n) if job.score else None
        if not job.rows:
            outputs.append(prompt_logprobs)
            continue
        results = generated[position : position + len(job.rows)]
        position += len(job.rows)
        sequences = [
            types.SampledSequence(
                stop_reason=result.stop_reason,
                sequence_id=f"{job.sequence_prefix}-{j}",
                tokens_np=np.asarray(result.tokens, dtype=np.int32),
                logprobs_np=np.asarray(result.logprobs, dtype=np.float32),
                topk_logprobs_np=_topk(result),
            )
            for j, result in enumerate(results)
        ]
        prompt_np = None
        if prompt_logprobs is not None:
            prompt_np = np.asarray([np.nan if x is None else x for x in prompt_logprobs], dtype=np.float32)
        outputs.append(types.SampleResponse(sequences=sequences, prompt_logprobs_np=prompt_np))
    return outputs


def _topk(result: RowResult) -> TopkLogprobs | None:
    """A row's top-k alternatives as Tinker's dense ``(tokens, k)`` matrices (``None`` when not asked)."""
    if not result.top_ids:
        return None
    return TopkLogprobs(
        token_ids=np.asarray(result.top_ids, dtype=np.int32), logprobs=np.asarray(result.top_logprobs, dtype=np.float32)
    )


def release_adapter(model: LoadedModel, adapter: str) -> None:
    """Delete ``adapter`` once the work queued on its model's worker is done (its client is gone)."""
    model.worker.submit(lambda: lora.delete_adapter(model, adapter))


_batcher = SampleBatcher(_run_group)
