"""``LocalServiceClient``: Tinker's ``ServiceClient`` for in-process training and sampling.

Same methods and return types as ``tinker.ServiceClient`` 0.38: ``create_*`` return a future
of the client (usable as the client too, deprecated, as in Tinker), their ``_async`` forms
need one ``await``. No key, server or network is needed; models load from local files (see
``models.py``) and checkpoints live under ``root`` (see ``checkpoints.py``).
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from tinker import ServiceClient, types
from tinker.lib.public_interfaces.api_future import APIFuture, AwaitableConcurrentFuture
from tinker.lib.public_interfaces.custom_loss import LossHandle, PerDatumLossFn, trace_loss

from tinker_emulator import checkpoints, lora, memory
from tinker_emulator.errors import unavailable
from tinker_emulator.futures import SAMPLING, ClientFuture, client_future, completed, run_in_order
from tinker_emulator.models import choose_device, load_model, resolve_model_name, server_capabilities
from tinker_emulator.rest_client import LocalRestClient
from tinker_emulator.sampling_client import LocalSamplingClient
from tinker_emulator.training_client import LocalTrainingClient, check_compatible, sampler_from_checkpoint

if TYPE_CHECKING:
    from tinker.lib.retry_handler import RetryConfig
    from tinker.lib.telemetry import Telemetry


class LocalServiceClient(ServiceClient):
    """Tinker's ``ServiceClient``, run in this process on PyTorch + PEFT.

    ``device``: where models run (default ``$GEMLAB_DEVICE``, else CUDA, MPS or CPU).
    ``root``: where checkpoints are saved (default ``$GEMLAB_LOCAL_DIR``, else
    ``~/.cache/gemlab/local``). ``stand_in``: the local model that Tinker model names run on
    (default ``$GEMLAB_LOCAL_MODEL``; with neither, a model that is not here is refused, never
    replaced). Tinker's own constructor options (``base_url``, ``api_key``, ``project_id``, ...)
    are accepted and ignored, so scripts construct it unchanged.
    """

    def __init__(
        self,
        *,
        device: str | None = None,
        root: str | os.PathLike[str] | None = None,
        stand_in: str | None = None,
        **tinker_options: Any,
    ):
        memory.hold_down_allocator()  # before the workers' threads take heaps of their own
        self._device = choose_device(device)
        self._stand_in = stand_in
        self._root = (Path(root).expanduser() if root is not None else checkpoints.default_root()).absolute()
        self._session_id = f"local-{uuid.uuid4().hex[:12]}"

    def __enter__(self) -> LocalServiceClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def __repr__(self) -> str:
        return f"<LocalServiceClient device={self._device} root={self._root}>"

    # ----- training clients ---------------------------------------------------------------
    # a ClientFuture: awaitable, .result(), usable as the client, as Tinker's Backcompat*ClientFuture
    def create_lora_training_client(  # type: ignore[override]
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> ClientFuture[LocalTrainingClient]:
        """A future of a new LoRA training run on ``base_model`` (or the local model it maps to).
        ``seed`` fixes the LoRA initialisation and every sampling seed derived from the run;
        ``None`` draws one at random."""
        _check_optimizer(optimizer)
        spec = lora.LoraSpec(rank=rank, train_mlp=train_mlp, train_attn=train_attn, train_unembed=train_unembed)
        local = resolve_model_name(base_model, self._stand_in)
        run_seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        run_id = checkpoints.new_run_id()
        return client_future(
            lambda: LocalTrainingClient(
                model=load_model(local, self._device),
                base_model=base_model,
                spec=spec,
                seed=run_seed,
                run_id=run_id,
                root=self._root,
                user_metadata=user_metadata,
            )
        )

    async def create_lora_training_client_async(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        """``await create_lora_training_client(...)``: the client itself."""
        return await self.create_lora_training_client(
            base_model, rank, seed, train_mlp, train_attn, train_unembed, user_metadata, optimizer
        )

    # a ClientFuture: awaitable, .result(), usable as the client, as Tinker's Backcompat*ClientFuture
    def create_training_client_from_state(  # type: ignore[override]
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> ClientFuture[LocalTrainingClient]:
        """A new training run starting from the LoRA weights at ``path`` (fresh optimizer)."""
        _check_optimizer(optimizer)
        return self._from_state(path, base_model, user_metadata, with_optimizer=False)

    async def create_training_client_from_state_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        return await self.create_training_client_from_state(
            path, base_model, user_metadata, weights_access_token, optimizer
        )

    # a ClientFuture: awaitable, .result(), usable as the client, as Tinker's Backcompat*ClientFuture
    def create_training_client_from_state_with_optimizer(  # type: ignore[override]
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> ClientFuture[LocalTrainingClient]:
        """A new training run resuming the LoRA weights and AdamW state saved by ``save_state``."""
        return self._from_state(path, base_model, user_metadata, with_optimizer=True)

    async def create_training_client_from_state_with_optimizer_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> LocalTrainingClient:
        return await self.create_training_client_from_state_with_optimizer(
            path, base_model, user_metadata, weights_access_token
        )

    # ----- sampling clients ---------------------------------------------------------------
    # a ClientFuture: awaitable, .result(), usable as the client, as Tinker's Backcompat*ClientFuture
    def create_sampling_client(  # type: ignore[override]
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
    ) -> ClientFuture[LocalSamplingClient]:
        """A future of a sampler of saved weights (``model_path``: a ``local://`` path or a
        folder) or of a base model with no adapter (``base_model``)."""
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")
        if model_path is not None:
            folder = checkpoints.resolve(model_path, self._root)
            meta = checkpoints.load_meta(folder)
            local = meta["local_model"]
            return client_future(
                lambda: sampler_from_checkpoint(load_model(local, self._device, SAMPLING), folder, base_model),
                role=SAMPLING,
            )
        assert base_model is not None  # refused above when both are None
        local = resolve_model_name(base_model, self._stand_in)
        return client_future(
            lambda: LocalSamplingClient(
                model=load_model(local, self._device, SAMPLING),
                adapter=None,
                base_model=base_model,
                seed=0,
                owns_adapter=False,
            ),
            role=SAMPLING,
        )

    async def create_sampling_client_async(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
    ) -> LocalSamplingClient:
        """``await create_sampling_client(...)``: the client itself."""
        return await self.create_sampling_client(model_path, base_model, retry_config, record_stability_info)

    # ----- everything else ----------------------------------------------------------------
    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        """The local presets (a Tinker model name runs on the stand-in, when there is one)."""
        return server_capabilities()

    async def get_server_capabilities_async(self) -> types.GetServerCapabilitiesResponse:
        return self.get_server_capabilities()

    def create_custom_loss(
        self, fn: PerDatumLossFn, input_ranks: Mapping[str, types.CustomLossInputRank]
    ) -> APIFuture[LossHandle]:
        """A ``LossHandle`` for ``forward_backward_custom``, traced and checked as Tinker does."""
        return completed(trace_loss(fn, input_ranks, self._session_id))

    def copy_weights(
        self, path: str, *, ttl_seconds: int | None = None, weights_access_token: str | None = None
    ) -> APIFuture[str]:
        """A copy of the checkpoint at ``path`` under a new run id; a future of its path."""
        return self.create_rest_client().copy_weights(path, ttl_seconds=ttl_seconds)

    def close(
        self, status: Literal["success", "errored", "interrupted"], detail: str | None = None
    ) -> AwaitableConcurrentFuture[None]:
        """Nothing to finish locally; done once the queued work is."""
        return run_in_order(lambda: None)

    def get_console_url(self) -> str:
        """The checkpoint folder (there is no web console locally)."""
        return self._root.as_uri()

    def get_telemetry(self) -> Telemetry | None:
        return None

    def create_rest_client(self) -> LocalRestClient:
        """A ``RestClient`` over this client's checkpoint root (list, inspect, delete checkpoints)."""
        return LocalRestClient(root=self._root)

    @property
    def holder(self) -> NoReturn:
        unavailable("ServiceClient.holder (the HTTP connection holder)", "there is no server connection")

    # ----- helpers ------------------------------------------------------------------------
    def _from_state(
        self, path: str, base_model: str | None, user_metadata: dict[str, str] | None, with_optimizer: bool
    ) -> ClientFuture[LocalTrainingClient]:
        folder = checkpoints.resolve(path, self._root)
        meta = checkpoints.load_meta(folder)
        if base_model is not None and resolve_model_name(base_model, self._stand_in) != meta["local_model"]:
            raise ValueError(f"{path!r} was trained on {meta['local_model']!r}, not on {base_model!r}")
        run_id = checkpoints.new_run_id()

        def build() -> LocalTrainingClient:
            model = load_model(meta["local_model"], self._device)
            check_compatible(meta, model)
            client = LocalTrainingClient(
                model=model,
                base_model=base_model or meta["base_model"],
                spec=lora.LoraSpec(**meta["lora"]),
                seed=int(meta["seed"]),
                run_id=run_id,
                root=self._root,
                user_metadata=user_metadata,
            )
            client._load(path, folder, optimizer=with_optimizer)
            return client

        return client_future(build)


def _check_optimizer(optimizer: types.OptimizerConfig | None) -> None:
    if optimizer is not None and not isinstance(optimizer, types.AdamOptimizerConfig):
        raise ValueError(f"The local backend trains with AdamW only (types.AdamOptimizerConfig), got {optimizer!r}")
