"""``LocalTrainingClient``: Tinker's ``TrainingClient`` as a LoRA trainer in this process.

Each request queues on the training worker and runs in submission order. ``forward_backward`` adds
the gradient of the summed loss to the adapter's gradients, which accumulate until
``optim_step`` applies AdamW (decoupled weight decay, optional global-norm clipping, exactly
``torch.optim.AdamW``) and clears them, as on Tinker. Per datum, ``loss_fn_outputs`` carries
``logprobs`` and ``elementwise_loss``; ``metrics["loss:sum"]`` is the total loss.
"""

from __future__ import annotations

import copy
import math
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
from tinker import TrainingClient, types
from tinker.lib.public_interfaces.api_future import APIFuture
from tinker.lib.public_interfaces.custom_loss import LossHandle, check_loss_inputs, run_loss_handle

from tinker_emulator import checkpoints, lora, memory
from tinker_emulator.futures import SAMPLING, ClientFuture, client_future, get_worker, run_in_order, then
from tinker_emulator.losses import loss_spec, resolve_config
from tinker_emulator.models import LoadedModel, load_model
from tinker_emulator.prefill import worth_sharing
from tinker_emulator.sampling_client import LocalSamplingClient, release_adapter
from tinker_emulator.scoring import scored_batches

if TYPE_CHECKING:
    from tinker.lib.retry_handler import RetryConfig
    from tinker.lib.telemetry import Telemetry
    from transformers import PreTrainedTokenizer

CustomLossFn = Callable[[list[types.Datum], list[torch.Tensor]], tuple[torch.Tensor, dict[str, float]]]


class _Batch:
    """Datums checked and turned into tensors: ``inputs[i]`` predicts ``tensors[i]["target_tokens"]``.
    The keys in ``required`` must be there, one value per input token."""

    def __init__(self, data: Sequence[types.Datum], required: Sequence[str], vocab_size: int):
        if not isinstance(data, (list, tuple)) or not data:
            raise ValueError("No data provided: pass a non-empty list of tinker.types.Datum")
        self.data = list(data)
        self.inputs: list[list[int]] = []
        self.tensors: list[dict[str, torch.Tensor]] = []
        for index, datum in enumerate(self.data):
            if not isinstance(datum, types.Datum):
                raise TypeError(f"data[{index}] is a {type(datum).__name__}, not a tinker.types.Datum")
            try:
                tokens = datum.model_input.to_ints()
            except Exception as exc:
                raise ValueError(f"data[{index}].model_input: the local backend only takes text tokens") from exc
            if not tokens:
                raise ValueError(f"data[{index}].model_input is empty")
            missing = [key for key in required if key not in datum.loss_fn_inputs]
            if missing:
                raise ValueError(f"data[{index}].loss_fn_inputs lacks {missing}; this loss needs {list(required)}")
            tensors = {}
            # cross_entropy (the loss with weights) also takes (N, K) targets and weights, as Tinker does
            two_d = ("target_tokens", "weights") if "weights" in required else ()
            for key in required:
                tensor = datum.loss_fn_inputs[key].to_torch()
                if tensor.ndim not in ((1, 2) if key in two_d else (1,)) or tensor.shape[0] != len(tokens):
                    shapes = f"[{len(tokens)}]" + (f" or [{len(tokens)}, K]" if key in two_d else "")
                    raise ValueError(
                        f"data[{index}].loss_fn_inputs[{key!r}] has shape {list(tensor.shape)} but model_input has "
                        f"{len(tokens)} tokens; {key!r} must have shape {shapes} "
                        "(model_input[i] predicts target_tokens[i])"
                    )
                tensors[key] = tensor.long() if key == "target_tokens" else tensor.float()
                if key != "target_tokens" and not bool(torch.isfinite(tensors[key]).all()):
                    where = tuple(int(i) for i in (~torch.isfinite(tensors[key])).nonzero()[0])
                    value = float(tensors[key][where])
                    position = ", ".join(map(str, where))
                    raise ValueError(
                        f"data[{index}].loss_fn_inputs[{key!r}][{position}] is {value}: values must be finite"
                    )
            if two_d and tensors["target_tokens"].shape != tensors["weights"].shape:
                raise ValueError(
                    f"data[{index}]: target_tokens has shape {list(tensors['target_tokens'].shape)} but weights has "
                    f"{list(tensors['weights'].shape)}; they must match"
                )
            bad = [t for t in tokens + tensors["target_tokens"].flatten().tolist() if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"data[{index}] has token ids {bad[:5]} outside the vocabulary (0..{vocab_size - 1})")
            self.inputs.append(tokens)
            self.tensors.append(tensors)


class LocalTrainingClient(TrainingClient):
    """A LoRA training run on a local base model. Build it with
    ``LocalServiceClient.create_lora_training_client``."""

    def __init__(
        self,
        *,
        model: LoadedModel,
        base_model: str,
        spec: lora.LoraSpec,
        seed: int,
        run_id: str,
        root: Any,
        user_metadata: dict[str, str] | None = None,
    ):
        self._model = model
        self._base_model = base_model
        self._spec = spec
        self._seed = seed
        self._run_id = run_id
        self._root = root
        self._user_metadata = dict(user_metadata or {})
        self._adapter = lora.add_adapter(model, spec, seed, prefix="train")
        self._params = lora.parameters(model, self._adapter)
        self._optimizer = self._new_optimizer()
        self._steps = 0
        self.model_id = run_id
        checkpoints.register_run(run_id, root, self._meta(None))
        finalizer = weakref.finalize(self, release_adapter, model, self._adapter)
        finalizer.atexit = False

    # ----- forward and backward -----------------------------------------------------------
    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Loss and logprobs without gradients."""
        return self._submit_loss(data, loss_fn, loss_fn_config, backward=False)

    async def forward_async(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        return self.forward(data, loss_fn, loss_fn_config)

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Loss and logprobs, and the loss's gradient added to the accumulated gradients."""
        return self._submit_loss(data, loss_fn, loss_fn_config, backward=True)

    async def forward_backward_async(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        return self.forward_backward(data, loss_fn, loss_fn_config)

    def forward_backward_custom(
        self,
        data: list[types.Datum],
        loss_fn: CustomLossFn | LossHandle,
        *,
        loss_type_input: Literal["logprobs"] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Any differentiable ``loss_fn(data, logprobs_list) -> (loss, metrics)`` (or a
        ``LossHandle``): its gradient reaches the weights through the logprobs, as on Tinker."""
        if loss_type_input not in (None, "logprobs"):
            raise ValueError(f"Unsupported loss_type_input={loss_type_input!r}; only 'logprobs' exists")
        batch = _Batch(data, ("target_tokens",), self._model.vocab_size)
        if isinstance(loss_fn, LossHandle):
            check_loss_inputs(loss_fn, batch.data)
        elif not callable(loss_fn):
            raise TypeError("loss_fn must be a callable (data, logprobs_list) -> (loss, metrics) or a LossHandle")
        return run_in_order(lambda: self._custom(batch, loss_fn))

    async def forward_backward_custom_async(
        self,
        data: list[types.Datum],
        loss_fn: CustomLossFn | LossHandle,
        *,
        loss_type_input: Literal["logprobs"] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        return self.forward_backward_custom(data, loss_fn, loss_type_input=loss_type_input)

    # ----- optimizer ----------------------------------------------------------------------
    def optim_step(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> APIFuture[types.OptimStepResponse]:
        """One AdamW step on the accumulated gradients, which are then cleared."""
        if optim_params is not None and adam_params is not None:
            raise ValueError("Specify optim_params or legacy adam_params, not both")
        params = optim_params if optim_params is not None else adam_params
        if not isinstance(params, types.AdamParams):
            raise TypeError(f"The local backend's optimizer is AdamW: pass tinker.types.AdamParams, got {params!r}")
        _check_adam(params)
        return run_in_order(lambda: self._step(params))

    async def optim_step_async(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> APIFuture[types.OptimStepResponse]:
        return self.optim_step(optim_params, adam_params=adam_params)

    # ----- saving and loading -------------------------------------------------------------
    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsResponse]:
        """LoRA weights and optimizer state to ``local://<run_id>/weights/<name>`` (no expiry)."""
        path = checkpoints.checkpoint_path(self._run_id, "weights", name)
        return run_in_order(
            lambda: types.SaveWeightsResponse(path=self._save(path, user_metadata, optimizer=True, overwrite=overwrite))
        )

    async def save_state_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsResponse]:
        return self.save_state(name, ttl_seconds=ttl_seconds, overwrite=overwrite, user_metadata=user_metadata)

    def load_state(self, path: str, weights_access_token: str | None = None) -> APIFuture[types.LoadWeightsResponse]:
        """LoRA weights from a checkpoint (a ``local://`` path or a folder); the optimizer restarts,
        as Tinker's ``load_state`` (weights only) does."""
        folder = checkpoints.resolve(path, self._root)
        return run_in_order(lambda: self._load(path, folder, optimizer=False))

    async def load_state_async(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        return self.load_state(path, weights_access_token)

    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """LoRA weights and AdamW state from a ``save_state`` checkpoint: training continues exactly."""
        folder = checkpoints.resolve(path, self._root)
        return run_in_order(lambda: self._load(path, folder, optimizer=True))

    async def load_state_with_optimizer_async(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        return self.load_state_with_optimizer(path, weights_access_token)

    def save_weights_for_sampler(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]:
        """LoRA weights to ``local://<run_id>/sampler_weights/<name>``, for ``create_sampling_client``."""
        path = checkpoints.checkpoint_path(self._run_id, "sampler_weights", name)
        return run_in_order(lambda: types.SaveWeightsForSamplerResponse(path=self._save(path, user_metadata)))

    async def save_weights_for_sampler_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]:
        return self.save_weights_for_sampler(name, ttl_seconds=ttl_seconds, user_metadata=user_metadata)

    def save_weights_external(
        self,
        name: str,
        ttl_seconds: int | None = None,
        age_encryption_recipients: list[str] | None = None,
    ) -> APIFuture[types.SaveWeightsExternalResponse]:
        """The adapter in PEFT's format at ``local://<run_id>/external/<name>``, for
        ``PeftModel.from_pretrained`` on the same base model (no encryption locally)."""
        if age_encryption_recipients:
            raise NotImplementedError("The local backend does not encrypt saved weights")
        path = checkpoints.checkpoint_path(self._run_id, "external", name)
        return run_in_order(lambda: types.SaveWeightsExternalResponse(path=self._save(path, None)))

    async def save_weights_external_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        age_encryption_recipients: list[str] | None = None,
    ) -> APIFuture[types.SaveWeightsExternalResponse]:
        return self.save_weights_external(name, ttl_seconds, age_encryption_recipients)

    # ----- sampling clients ---------------------------------------------------------------
    # a ClientFuture: awaitable, .result(), usable as the client, as Tinker's Backcompat*ClientFuture
    def save_weights_and_get_sampling_client(  # type: ignore[override]
        self,
        name: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> ClientFuture[LocalSamplingClient]:
        """A sampler of the weights as they are once the requests before this one have run:
        ``snapshot`` copies them (later training does not touch it), ``inflight`` follows this
        run's live weights."""
        if kind not in ("snapshot", "inflight"):
            raise ValueError(f"kind must be 'snapshot' or 'inflight', got {kind!r}")
        if kind == "inflight":
            return client_future(self._inflight_sampler)
        # the weights are copied on the training worker, in order; the sampler is built from
        # that copy on the sampling worker's own model, where training never reaches it
        weights = run_in_order(lambda: lora.state_dict(self._model, self._adapter)).future()
        return ClientFuture(then(weights, get_worker(SAMPLING), self._snapshot_sampler))

    async def save_weights_and_get_sampling_client_async(
        self,
        name: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> LocalSamplingClient:
        return await self.save_weights_and_get_sampling_client(name, retry_config, record_stability_info, kind)

    # a ClientFuture: awaitable, .result(), usable as the client, as Tinker's Backcompat*ClientFuture
    def create_sampling_client(  # type: ignore[override]
        self,
        model_path: str,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
    ) -> ClientFuture[LocalSamplingClient]:
        """A sampler of saved weights (a ``local://`` path or folder) on this run's base model."""
        folder = checkpoints.resolve(model_path, self._root)
        return client_future(
            lambda: sampler_from_checkpoint(self._sampling_model(), folder, self._base_model), role=SAMPLING
        )

    async def create_sampling_client_async(
        self,
        model_path: str,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
    ) -> LocalSamplingClient:
        return await self.create_sampling_client(model_path, retry_config, record_stability_info)

    # ----- information --------------------------------------------------------------------
    def get_info(self) -> types.GetInfoResponse:
        """Base model (the name asked for; ``tokenizer_id`` is the local model), LoRA rank, run id."""
        return types.GetInfoResponse(
            model_data=types.ModelData(
                arch=getattr(self._model.model.config, "model_type", None),
                model_name=self._base_model,
                tokenizer_id=self._model.name,
            ),
            model_id=self._run_id,
            is_lora=True,
            lora_rank=self._spec.rank,
            model_name=self._base_model,
        )

    async def get_info_async(self) -> types.GetInfoResponse:
        return self.get_info()

    def get_tokenizer(self) -> PreTrainedTokenizer:
        """The local model's tokenizer (the one these token ids belong to)."""
        return self._model.tokenizer

    @property
    def context_length(self) -> int:
        """Tokens the model's context holds: the longest ``model_input`` a datum may have."""
        return self._model.context_length

    @property
    def vocab_size(self) -> int:
        """Token ids the model takes: ``0 .. vocab_size - 1``."""
        return self._model.vocab_size

    def get_console_url(self) -> str:
        """Where this run's checkpoints are saved (there is no web console locally)."""
        return (self._root / self._run_id).as_uri()

    def get_telemetry(self) -> Telemetry | None:
        return None

    def __repr__(self) -> str:
        return f"<LocalTrainingClient {self._run_id}: {self._base_model} on {self._model.name}, rank {self._spec.rank}>"

    # ----- work done on the worker thread -------------------------------------------------
    def _submit_loss(
        self, data: list[types.Datum], loss_fn: str, config: Mapping[str, float | str] | None, backward: bool
    ) -> APIFuture[types.ForwardBackwardOutput]:
        spec = loss_spec(loss_fn)
        resolved = resolve_config(loss_fn, config)
        batch = _Batch(data, spec.inputs, self._model.vocab_size)

        def run() -> types.ForwardBackwardOutput:
            outputs: dict[int, dict[str, types.TensorData]] = {}
            total = 0.0
            kept = self._gradients() if backward else None
            # a large model's pass starts with what the sampler freed handed back, and hands its own back
            with memory.handed_back(worth_sharing(self._model.model)):
                try:
                    with lora.active(self._model, self._adapter) as model, torch.set_grad_enabled(backward):
                        for group, logprobs in self._logprobs(model, batch):
                            losses = [
                                spec.fn(lp, _on(batch.tensors[i], lp.device), resolved)
                                for i, lp in zip(group, logprobs, strict=True)
                            ]
                            loss = torch.stack([elementwise.sum() for elementwise in losses]).sum()
                            if backward:
                                loss.backward()
                            total += float(loss.detach())
                            outputs.update(
                                (i, _outputs(lp, elementwise))
                                for i, lp, elementwise in zip(group, logprobs, losses, strict=True)
                            )
                except BaseException:
                    if kept is not None:  # a call that fails part way (out of memory, a bad datum late) adds nothing
                        self._restore_gradients(kept)
                    raise
            return types.ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord",
                loss_fn_outputs=[outputs[i] for i in range(len(outputs))],
                metrics={"loss:sum": total},
            )

        return run_in_order(run)

    def _gradients(self) -> list[torch.Tensor | None]:
        """The LoRA gradients accumulated so far (copies; the adapter's matrices are small)."""
        return [None if p.grad is None else p.grad.detach().clone() for p in self._params]

    def _restore_gradients(self, kept: list[torch.Tensor | None]) -> None:
        for p, grad in zip(self._params, kept, strict=True):
            p.grad = grad

    def _logprobs(self, model: Any, batch: _Batch) -> Any:
        """``(indices, logprobs)`` per micro-batch; the caller finishes each before the next."""
        targets = [tensors["target_tokens"] for tensors in batch.tensors]
        return scored_batches(model, batch.inputs, targets, self._model.pad_token_id, self._model.vocab_size)

    def _custom(self, batch: _Batch, loss_fn: CustomLossFn | LossHandle) -> types.ForwardBackwardOutput:
        """Logprobs without gradients, the user's loss and its gradient with respect to them, then
        a second pass that backpropagates that gradient into the weights (Tinker's two phases)."""
        with lora.active(self._model, self._adapter) as model:
            with torch.no_grad():
                scored = {
                    i: lp for group, chunk in self._logprobs(model, batch) for i, lp in zip(group, chunk, strict=True)
                }
            leaves = [scored[i].detach().cpu().requires_grad_(True) for i in range(len(scored))]
            if isinstance(loss_fn, LossHandle):
                loss, metrics = run_loss_handle(loss_fn, batch.data, leaves)
            else:
                loss, metrics = loss_fn(batch.data, leaves)
            loss.backward()
            grads = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
            for group, chunk in self._logprobs(model, batch):
                surrogate = sum((lp * grads[i].to(lp.device)).sum() for i, lp in zip(group, chunk, strict=True))
                surrogate.backward()
        outputs = [_outputs(leaf.detach(), leaf.detach() * grad) for leaf, grad in zip(leaves, grads, strict=True)]
        metrics = {key: float(value) for key, value in metrics.items()}
        metrics["surrogate_loss:sum"] = float(sum((o["elementwise_loss"].to_torch().sum() for o in outputs), 0.0))
        metrics["loss:sum"] = float(loss.detach().sum())
        return types.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics=metrics)

    def _step(self, params: types.AdamParams) -> types.OptimStepResponse:
        grads = [p.grad for p in self._params if p.grad is not None]
        norm = (
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            if grads
            else torch.tensor(0.0)
        )
        if not bool(torch.isfinite(norm)):
            self._optimizer.zero_grad(set_to_none=True)
            raise ValueError(
                f"The gradient norm is {float(norm)}: optimizer step refused, weights unchanged (check the loss inputs)"
            )
        if params.grad_clip_norm > 0 and grads:
            torch.nn.utils.clip_grad_norm_(self._params, params.grad_clip_norm)
        for group in self._optimizer.param_groups:
            group.update(
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=params.weight_decay,
            )
        before = ([p.detach().clone() for p in self._params], copy.deepcopy(self._optimizer.state_dict()))
        try:
            self._optimizer.step()
            finite = all(bool(torch.isfinite(p).all()) for p in self._params)
        except RuntimeError:  # torch's own overflow check, possibly after some tensors moved
            finite = False
        self._optimizer.zero_grad(set_to_none=True)
        if not finite:
            with torch.no_grad():
                for p, saved in zip(self._params, before[0], strict=True):
                    p.copy_(saved)
            self._optimizer.load_state_dict(before[1])
            raise ValueError(
                f"This optimizer step (learning_rate={params.learning_rate}) would make the weights non-finite: "
                "refused, weights and optimizer state unchanged"
            )
        self._steps += 1
        return types.OptimStepResponse(
            metrics={"grad_norm:mean": float(norm), "learning_rate:mean": params.learning_rate}
        )

    def _new_optimizer(self) -> torch.optim.AdamW:
        return torch.optim.AdamW(self._params, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0, foreach=False)

    def _meta(self, user_metadata: dict[str, str] | None) -> dict[str, Any]:
        return {
            "format": 1,
            "base_model": self._base_model,
            "local_model": self._model.name,
            "lora": self._spec.to_dict(),
            "seed": self._seed,
            "run_id": self._run_id,
            "optimizer_steps": self._steps,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "user_metadata": {**self._user_metadata, **(user_metadata or {})},
        }

    def _save(
        self, path: str, user_metadata: dict[str, str] | None, optimizer: bool = False, overwrite: bool = True
    ) -> str:
        checkpoints.save(
            checkpoints.folder_of(path, self._root),
            lora.state_dict(self._model, self._adapter),
            self._meta(user_metadata),
            self._model.peft.peft_config[self._adapter],
            optimizer=self._optimizer.state_dict() if optimizer else None,
            overwrite=overwrite,
        )
        return path

    def _load(self, path: str, folder: Any, optimizer: bool) -> types.LoadWeightsResponse:
        saved = checkpoints.load(folder)
        check_compatible(saved.meta, self._model, self._spec)
        if optimizer and saved.optimizer is None:
            raise ValueError(f"{path!r} holds no optimizer state (only save_state writes it); use load_state")
        lora.load_state_dict(self._model, self._adapter, saved.weights)
        for p in self._params:
            p.grad = None
        self._optimizer = self._new_optimizer()
        if optimizer and saved.optimizer is not None:  # None was refused above
            self._optimizer.load_state_dict(saved.optimizer)
            self._steps = int(saved.meta.get("optimizer_steps", 0))
        return types.LoadWeightsResponse(path=path, model_id=self._run_id)

    def _sampling_model(self) -> LoadedModel:
        """The sampling worker's copy of this run's base model."""
        return load_model(self._model.name, self._model.device, role=SAMPLING)

    def _snapshot_sampler(self, weights: dict[str, torch.Tensor]) -> LocalSamplingClient:
        """A sampler holding ``weights`` (runs on the sampling worker)."""
        model = self._sampling_model()
        adapter = lora.add_adapter(model, self._spec, self._seed, prefix="snap")
        lora.load_state_dict(model, adapter, weights)
        return LocalSamplingClient(
            model=model, adapter=adapter, base_model=self._base_model, seed=self._seed, owns_adapter=True
        )

    def _inflight_sampler(self) -> LocalSamplingClient:
        """A sampler of this run's live adapter: its batches run on the training worker, in order."""
        return LocalSamplingClient(
            model=self._model,
            adapter=self._adapter,
            base_model=self._base_model,
            seed=self._seed,
            owns_adapter=False,
            keep_alive=self,
        )


def _check_adam(params: types.AdamParams) -> None:
    """Refuse settings that would write NaN or inf into the weights."""
    checks = {
        "learning_rate": params.learning_rate >= 0,
        "beta1": 0 <= params.beta1 < 1,
        "beta2": 0 <= params.beta2 < 1,
        "eps": params.eps > 0,
        "weight_decay": params.weight_decay >= 0,
        "grad_clip_norm": params.grad_clip_norm >= 0,
    }
    for name, ok in checks.items():
        value = getattr(params, name)
        if not (ok and math.isfinite(value)):
            raise ValueError(f"AdamParams.{name}={value} is not allowed: it must be finite and in range")


def check_compatible(meta: dict[str, Any], model: LoadedModel, spec: lora.LoraSpec | None = None) -> None:
    """Raise unless a checkpoint's base model (and LoRA settings, when given) match."""
    if meta.get("local_model") != model.name:
        raise ValueError(f"The checkpoint was trained on {meta.get('local_model')!r}, not {model.name!r}")
    if spec is not None and meta.get("lora") != spec.to_dict():
        raise ValueError(
            f"The checkpoint's LoRA settings {meta.get('lora')} differ from this client's {spec.to_dict()}"
        )


def sampler_from_checkpoint(model: LoadedModel, folder: Any, base_model: str | None = None) -> LocalSamplingClient:
    """A sampling client holding the weights saved in ``folder`` (runs on ``model``'s worker)."""
    saved = checkpoints.load(folder)
    check_compatible(saved.meta, model)
    spec = lora.LoraSpec(**saved.meta["lora"])
    adapter = lora.add_adapter(model, spec, int(saved.meta.get("seed", 0)), prefix="snap")
    lora.load_state_dict(model, adapter, saved.weights)
    return LocalSamplingClient(
        model=model,
        adapter=adapter,
        base_model=base_model or saved.meta.get("base_model", model.name),
        seed=int(saved.meta.get("seed", 0)),
        owns_adapter=True,
    )


def _on(tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device) for key, value in tensors.items()}


def _outputs(logprobs: torch.Tensor, elementwise: torch.Tensor) -> dict[str, types.TensorData]:
    return {
        "logprobs": types.TensorData.from_torch(logprobs.detach().float().cpu()),
        "elementwise_loss": types.TensorData.from_torch(elementwise.detach().float().cpu()),
    }
