"""The routes: Tinker's HTTP API (``/api/v1/...``, as the installed SDK calls it) over the local backend.

Training requests are queued on the local backend's training worker the moment they arrive, so one
client's requests run in the order the SDK sends them; each answers with a future
(``{"request_id": ...}``) that ``retrieve_future`` long-polls, answering ``try_again`` while the work
runs. ``ForwardBackwardOutput`` and ``SampleResponse`` come back as protobuf, the rest as JSON.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pydantic
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from tinker import types

from gemlab.local import LocalSamplingClient, LocalTrainingClient
from gemlab.local.http import paths, wire
from gemlab.local.http.errors import error_body, install, status_and_message
from gemlab.local.http.gate import SampleGate
from gemlab.local.http.guard import Guard
from gemlab.local.http.keys import KeyRing
from gemlab.local.http.registry import NotFound, Registry, Sampler, Session

M = TypeVar("M", bound=pydantic.BaseModel)
API = "/api/v1"
POLL_S = 20.0  # how long retrieve_future waits before answering try_again (the SDK waits 45 s)


@dataclass
class Limits:
    """What one request may ask for."""

    max_body: int = 64 * 1024 * 1024
    max_tokens: int = 4096
    max_samples: int = 64
    max_pending: int = 256
    max_pending_per_session: int = 64


def client_config(compress: bool) -> types.ClientConfigResponse:
    """The flags this server gives every client: plain API keys, forward_backward chunks in turn
    (the server runs them in arrival order), zstd bodies when ``compress``, and the SDK's httpx
    transport: its reqwest-based one (pyqwest) costs the client about half the CPU per request,
    but a process that used it aborted at exit ("terminate called without an active exception",
    exit -6: the `tinker` CLI in tests/local/test_local_http.py)."""
    return types.ClientConfigResponse(
        pjwt_auth_enabled=False,
        parallel_fwdbwd_chunks=False,
        proto_compress_fwdbwd=compress,
        use_pyqwest_transport=False,
        sample_use_retrieve_futures=False,
        custom_loss_server_side=False,
        sample_join_sampling_session=False,
    )


def make_app(data_dir: Path, keys: list[str], limits: Limits | None = None, compress: bool = True, device: str | None = None) -> Any:
    """The ASGI app: FastAPI routes behind the key and body-size guard."""
    limits = limits or Limits()
    registry = Registry(data_dir, limits.max_pending, limits.max_pending_per_session, device)
    gate = SampleGate()
    app = FastAPI(title="gemlab local Tinker server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.registry = registry
    install(app)

    async def parse(request: Request, model: type[M]) -> M:
        return model.model_validate_json(await request.body())

    def tenant(request: Request) -> str:
        return request.scope["state"]["tenant"]

    def json(value: Any) -> JSONResponse:
        if isinstance(value, pydantic.BaseModel):
            value = value.model_dump(mode="json", exclude_none=True)
        return JSONResponse(paths.to_tinker(value))

    def future(session: Session, work: Any, encode: Callable[[Any], Any] = lambda r: r, **extra: Any) -> JSONResponse:
        request_id = registry.submit(session, work, encode)
        return JSONResponse({"request_id": request_id, **extra})

    async def wrapped(api_future: Any) -> Any:
        """A local backend future (Tinker's ``AwaitableConcurrentFuture``) awaited on this loop."""
        return await asyncio.wrap_future(api_future._future)

    # ----- client set-up and sessions ----------------------------------------------------
    @app.get(f"{API}/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post(f"{API}/client/config")
    async def config() -> JSONResponse:
        return json(client_config(compress))

    @app.post(f"{API}/client/dynamic_config")
    async def dynamic_config() -> JSONResponse:
        return json(types.ClientDynamicConfigResponse())

    @app.post(f"{API}/create_session")
    async def create_session(request: Request) -> JSONResponse:
        await parse(request, types.CreateSessionRequest)
        session = registry.new_session(tenant(request))
        return json(types.CreateSessionResponse(session_id=session.id))

    @app.post(f"{API}/session_heartbeat")
    async def heartbeat(request: Request) -> JSONResponse:
        body = await parse(request, types.SessionHeartbeatRequest)
        registry.session(body.session_id, tenant(request))
        return json(types.SessionHeartbeatResponse())

    @app.post(f"{API}/sessions/{{session_id}}/finish")
    async def finish(session_id: str, request: Request) -> Response:
        registry.session(session_id, tenant(request)).last_seen = 0.0  # the next sweep drops it
        return Response(status_code=204)

    @app.post(f"{API}/telemetry")
    async def telemetry() -> dict:
        return {"status": "accepted"}

    @app.get(f"{API}/get_server_capabilities")
    async def capabilities(request: Request) -> JSONResponse:
        return json(await wrapped(registry.tenant(tenant(request)).rest.get_server_capabilities()))

    # ----- training runs -------------------------------------------------------------------
    @app.post(f"{API}/create_model")
    async def create_model(request: Request) -> JSONResponse:
        body = await parse(request, types.CreateModelRequest)
        session = registry.session(body.session_id, tenant(request))
        lora = body.lora_config or types.LoraConfig(rank=32)
        client = session.tenant.service.create_lora_training_client(
            base_model=body.base_model,
            rank=lora.rank,
            seed=lora.seed,
            train_mlp=lora.train_mlp,
            train_attn=lora.train_attn,
            train_unembed=lora.train_unembed,
            user_metadata={k: str(v) for k, v in (body.user_metadata or {}).items()} or None,
            optimizer=body.optimizer_config,
        )
        model_id = f"{session.id}:train:{body.model_seq_id}"
        registry.add_model(model_id, session, body.base_model, wrapped(client))
        created = registry.models[model_id].client
        return future(session, _after(created, lambda _: types.CreateModelResponse(model_id=model_id)), model_id=model_id)

    @app.post(f"{API}/get_info")
    async def get_info(request: Request) -> JSONResponse:
        body = await parse(request, types.GetInfoRequest)
        model, client = registry.model(body.model_id, tenant(request))
        info = client.get_info()
        # tokenizer_id: the name the `tokenizer` command installs the served tokenizer under
        data = info.model_data.model_copy(update={"tokenizer_id": model.base_model})
        return json(info.model_copy(update={"model_id": model.id, "model_data": data}))

    @app.post(f"{API}/forward_backward")
    async def forward_backward(request: Request) -> JSONResponse:
        raw = wire.decompress(await request.body(), request.headers.get("content-encoding", ""), limits.max_body)
        body = wire.decode_forward_backward(raw)
        model, client = registry.model(body.model_id, tenant(request))
        run = client.forward if body.forward_only else client.forward_backward
        work = wrapped(run(body.data, body.loss_fn, body.loss_fn_config))
        return future(model.session, work, wire.encode_forward_backward_output)

    @app.post(f"{API}/optim_step")
    async def optim_step(request: Request) -> JSONResponse:
        body = await parse(request, types.OptimStepRequest)
        model, client = registry.model(body.model_id, tenant(request))
        return future(model.session, wrapped(client.optim_step(body.optim_params)))

    @app.post(f"{API}/save_weights")
    async def save_weights(request: Request) -> JSONResponse:
        body = await parse(request, types.SaveWeightsRequest)
        model, client = registry.model(body.model_id, tenant(request))
        name = body.path or f"step-{uuid.uuid4().hex[:8]}"
        work = client.save_state(name, overwrite=body.overwrite, user_metadata=body.user_metadata)
        return future(model.session, wrapped(work))

    @app.post(f"{API}/save_weights_external")
    async def save_weights_external(request: Request) -> JSONResponse:
        body = await parse(request, types.SaveWeightsExternalRequest)
        model, client = registry.model(body.model_id, tenant(request))
        return future(model.session, wrapped(client.save_weights_external(body.path)))

    @app.post(f"{API}/load_weights")
    async def load_weights(request: Request) -> JSONResponse:
        body = await parse(request, types.LoadWeightsRequest)
        who = tenant(request)
        if body.model_id is not None:  # into an existing training run
            model, client = registry.model(body.model_id, who)
            folder = str(paths.folder(body.path, model.session.tenant.root))
            load = client.load_state_with_optimizer if body.optimizer else client.load_state
            work = _after(wrapped(load(folder)), lambda _: types.LoadWeightsResponse(path=body.path, model_id=model.id))
            return future(model.session, work)
        # a new training run from a checkpoint (ServiceClient.create_training_client_from_state*)
        session = registry.session(body.session_id, who)
        if body.model_seq_id is None:
            raise ValueError("load_weights needs model_id, or session_id with model_seq_id")
        folder = str(paths.folder(body.path, session.tenant.root))
        service = session.tenant.service
        make = service.create_training_client_from_state_with_optimizer if body.optimizer else service.create_training_client_from_state
        metadata = {k: str(v) for k, v in (body.user_metadata or {}).items()} or None
        client = make(folder, base_model=body.base_model, user_metadata=metadata)
        model_id = f"{session.id}:train:{body.model_seq_id}"
        base_model = body.base_model or _base_model_of(folder)
        registry.add_model(model_id, session, base_model, wrapped(client))
        created = registry.models[model_id].client
        return future(session, _after(created, lambda _: types.LoadWeightsResponse(path=body.path, model_id=model_id)))

    @app.post(f"{API}/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request) -> JSONResponse:
        body = await parse(request, types.SaveWeightsForSamplerRequest)
        model, client = registry.model(body.model_id, tenant(request))
        if body.path is not None:
            work = client.save_weights_for_sampler(body.path, user_metadata=body.user_metadata)
            return future(model.session, wrapped(work))
        sampler_id = f"{model.session.id}:sample:{body.sampling_session_seq_id}"
        made = asyncio.ensure_future(wrapped(client.save_weights_and_get_sampling_client(kind=body.kind)))
        registry.add_sampler(Sampler(sampler_id, model.session, model.base_model, None, made))
        work = _after(made, lambda _: types.SaveWeightsForSamplerResponseInternal(sampling_session_id=sampler_id))
        return future(model.session, work)

    # ----- sampling ------------------------------------------------------------------------
    @app.post(f"{API}/create_sampling_session")
    async def create_sampling_session(request: Request) -> JSONResponse:
        body = await parse(request, types.CreateSamplingSessionRequest)
        session = registry.session(body.session_id, tenant(request))
        sampler_id = f"{session.id}:sample:{body.sampling_session_seq_id}"
        if body.model_path is not None:
            folder = str(paths.folder(body.model_path, session.tenant.root))
            made = wrapped(session.tenant.service.create_sampling_client(model_path=folder, base_model=body.base_model))
            base_model = body.base_model or _base_model_of(folder)
            registry.add_sampler(Sampler(sampler_id, session, base_model, body.model_path, asyncio.ensure_future(made)))
        elif body.base_model is not None:
            shared = registry.base_sampler(body.base_model, session.tenant)
            registry.add_sampler(Sampler(sampler_id, session, body.base_model, None, shared.client))
        else:
            raise ValueError("create_sampling_session needs model_path or base_model")
        return json(types.CreateSamplingSessionResponse(sampling_session_id=sampler_id))

    @app.get(f"{API}/samplers/{{sampler_id}}")
    async def get_sampler(sampler_id: str, request: Request) -> JSONResponse:
        sampler = registry.sampler(sampler_id, tenant(request))
        return json(types.GetSamplerResponse(sampler_id=sampler.id, base_model=sampler.base_model, model_path=sampler.model_path))

    @app.post(f"{API}/asample")
    async def asample(request: Request) -> JSONResponse:
        body = await parse(request, types.SampleRequest)
        who = tenant(request)
        params = body.sampling_params
        if params.max_tokens is None or not 1 <= params.max_tokens <= limits.max_tokens:
            raise ValueError(f"sampling_params.max_tokens must be between 1 and {limits.max_tokens}, got {params.max_tokens}")
        if not 1 <= body.num_samples <= limits.max_samples:
            raise ValueError(f"num_samples must be between 1 and {limits.max_samples}, got {body.num_samples}")
        if body.sampling_session_id is not None:
            sampler = registry.sampler(body.sampling_session_id, who)
            session = sampler.session or _any_session(registry, who)
        elif body.model_path is not None or body.base_model is not None:
            session = _any_session(registry, who)
            if body.model_path is not None:
                folder = str(paths.folder(body.model_path, session.tenant.root))
                made = wrapped(session.tenant.service.create_sampling_client(model_path=folder))
                sampler = Sampler("", session, body.base_model or _base_model_of(folder), body.model_path, asyncio.ensure_future(made))
            else:
                sampler = registry.base_sampler(body.base_model, session.tenant)
        else:
            raise ValueError("asample needs sampling_session_id, model_path or base_model")
        session.last_seen = time.monotonic()

        async def sample() -> types.SampleResponse:
            client: LocalSamplingClient = await sampler.client
            return await gate.run(
                session.id,
                lambda: client.sample(
                    body.prompt,
                    body.num_samples,
                    params,
                    include_prompt_logprobs=bool(body.prompt_logprobs),
                    topk_prompt_logprobs=body.topk_prompt_logprobs,
                    topk_sample_logprobs=body.topk_sample_logprobs,
                    prompt_alt_tokens_k=body.prompt_alt_tokens_k,
                    prompt_logprobs_last_n=body.prompt_logprobs_last_n,
                )
            )

        request_id = registry.submit(session, sample(), wire.encode_sample_response)
        ids = [f"{request_id}:{j}" for j in range(body.num_samples)]
        return JSONResponse({"request_id": request_id, "sample_sequence_ids": ids})

    # ----- futures -------------------------------------------------------------------------
    @app.post(f"{API}/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        body = await parse(request, types.FutureRetrieveRequest)
        pending = registry.result(body.request_id, tenant(request))
        if not pending.task.done():
            await asyncio.wait([pending.task], timeout=POLL_S)
        if not pending.task.done():
            return JSONResponse({"type": "try_again", "request_id": body.request_id, "queue_state": "active"})
        pending.retrieved_at = pending.retrieved_at or time.monotonic()
        error = pending.task.exception() if not pending.task.cancelled() else asyncio.CancelledError("cancelled")
        if error is not None:
            _, message, category = status_and_message(error)
            return JSONResponse(error_body(message, category))
        encoded = pending.encode(pending.task.result())
        if isinstance(encoded, bytes):
            return Response(encoded, media_type=wire.PROTOBUF)
        return json(encoded)

    @app.post(f"{API}/cancel_future")
    async def cancel_future(request: Request) -> Response:
        body = await request.json()
        registry.result(body.get("request_id"), tenant(request)).task.cancel()
        return Response(status_code=204)

    # ----- checkpoints and runs (RestClient) -----------------------------------------------
    @app.get(f"{API}/training_runs")
    async def training_runs(request: Request, limit: int = 20, offset: int = 0) -> JSONResponse:
        rest = registry.tenant(tenant(request)).rest
        return json(_tinker_ids(await wrapped(rest.list_training_runs(limit=limit, offset=offset))))

    @app.get(f"{API}/training_runs/{{run_id}}")
    async def training_run(run_id: str, request: Request) -> JSONResponse:
        owner = registry.tenant(tenant(request))
        run_id = _run_id(registry, run_id, owner.name)
        paths.run_folder(run_id, owner.root)
        return json(_tinker_ids(await wrapped(owner.rest.get_training_run(run_id))))

    @app.get(f"{API}/training_runs/{{run_id}}/checkpoints")
    async def list_checkpoints(run_id: str, request: Request) -> JSONResponse:
        owner = registry.tenant(tenant(request))
        run_id = _run_id(registry, run_id, owner.name)
        paths.run_folder(run_id, owner.root)
        return json(_tinker_ids(await wrapped(owner.rest.list_checkpoints(run_id))))

    @app.delete(f"{API}/training_runs/{{run_id}}/checkpoints/{{checkpoint_id:path}}")
    async def delete_checkpoint(run_id: str, checkpoint_id: str, request: Request) -> Response:
        owner = registry.tenant(tenant(request))
        tinker_path = f"{paths.TINKER}{_run_id(registry, run_id, owner.name)}/{checkpoint_id}"
        folder = paths.folder(tinker_path, owner.root)
        await wrapped(owner.rest.delete_checkpoint_from_tinker_path(str(folder)))
        return Response(status_code=204)

    @app.get(f"{API}/checkpoints")
    async def user_checkpoints(request: Request, limit: int = 100, offset: int = 0) -> JSONResponse:
        rest = registry.tenant(tenant(request)).rest
        return json(_tinker_ids(await wrapped(rest.list_user_checkpoints(limit=limit, offset=offset))))

    @app.post(f"{API}/weights_info")
    async def weights_info(request: Request) -> JSONResponse:
        body = await request.json()
        owner = registry.tenant(tenant(request))
        folder = paths.folder(body.get("tinker_path") if isinstance(body, dict) else None, owner.root)
        return json(await wrapped(owner.rest.get_weights_info_by_tinker_path(str(folder))))

    async def sweeper() -> None:
        while True:
            await asyncio.sleep(30)
            registry.sweep()
            gate.keep(registry.sessions)

    @app.on_event("startup")
    async def start_sweeper() -> None:
        app.state.sweeper = asyncio.create_task(sweeper())

    return Guard(app, KeyRing(keys), limits.max_body)


async def _after(work: Any, then: Callable[[Any], Any]) -> Any:
    return then(await work)


def _base_model_of(folder: str) -> str:
    from gemlab.local.checkpoints import load_meta

    return load_meta(Path(folder))["base_model"]


def _any_session(registry: Registry, tenant: str) -> Session:
    """A session of this key to account sampling by path to (the SDK's sampler handles carry none)."""
    for session in registry.sessions.values():
        if session.tenant.name == tenant:
            return session
    raise NotFound("no session for this API key: create a ServiceClient first")


def _run_id(registry: Registry, run_id: str, tenant: str) -> str:
    """A training run id, or the run of a model id this key owns."""
    model = registry.models.get(run_id)
    if model is not None and model.session.tenant.name == tenant and model.client.done() and not model.client.exception():
        client: LocalTrainingClient = model.client.result()
        return client._run_id
    return run_id


def _tinker_ids(value: pydantic.BaseModel) -> dict:
    """A rest answer with Tinker's checkpoint ids (``external_weights/...`` for local ``external/...``)."""
    data = value.model_dump(mode="json", exclude_none=True)

    def fix(item: Any) -> Any:
        if isinstance(item, dict):
            fixed = {k: fix(v) for k, v in item.items()}
            if isinstance(fixed.get("checkpoint_id"), str) and fixed["checkpoint_id"].startswith("external/"):
                fixed["checkpoint_id"] = "external_weights/" + fixed["checkpoint_id"][len("external/") :]
            return fixed
        if isinstance(item, list):
            return [fix(v) for v in item]
        return item

    return fix(data)
