"""Training runs: made new or from a checkpoint, their forward/backward passes, optimizer steps,
saves and loads. Each call is queued on the local backend's training worker as it arrives, so
one client's requests run in the order the SDK sends them; each answers with a future."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from tinker import types

from tinker_emulator import memory
from tinker_emulator.losses import loss_spec
from tinker_emulator.workshop_server import paths, served, units, validate, wire
from tinker_emulator.workshop_server.registry import Sampler, Session
from tinker_emulator.workshop_server.replies import answer, awaited, queued, read, then
from tinker_emulator.workshop_server.state import Server, ServerDep, TenantDep

router = APIRouter(prefix="/api/v1")


def start_run(
    server: Server, session: Session, seq_id: int, base_model: str, client: Any
) -> tuple[str, asyncio.Future[Any]]:
    """Register training run ``seq_id`` of ``session`` while ``client`` (a local backend future of
    its training client) is built; its model id and the future of its client on this loop."""
    model_id = f"{session.id}:train:{seq_id}"
    server.registry.add_model(model_id, session, base_model, awaited(client))
    return model_id, server.registry.models[model_id].client


def _metadata(values: dict[str, Any] | None) -> dict[str, str] | None:
    return {k: str(v) for k, v in (values or {}).items()} or None


@router.post("/create_model")
async def create_model(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.CreateModelRequest)
    served.check(body.base_model)
    session = server.registry.session(body.session_id, tenant)
    server.registry.check_model_room(session)  # before the run is built
    lora = body.lora_config or types.LoraConfig(rank=32)
    client = session.tenant.service.create_lora_training_client(
        base_model=body.base_model,
        rank=lora.rank,
        seed=lora.seed,
        train_mlp=lora.train_mlp,
        train_attn=lora.train_attn,
        train_unembed=lora.train_unembed,
        user_metadata=_metadata(body.user_metadata),
        optimizer=body.optimizer_config,
    )
    model_id, created = start_run(server, session, body.model_seq_id, body.base_model, client)
    return queued(
        server, session, then(created, lambda _: types.CreateModelResponse(model_id=model_id)), model_id=model_id
    )


@router.post("/get_info")
async def get_info(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.GetInfoRequest)
    model, client = server.registry.model(body.model_id, tenant)
    info = client.get_info()
    # tokenizer_id: the name the `tokenizer` command installs the served tokenizer under
    data = info.model_data.model_copy(update={"tokenizer_id": model.base_model})
    return answer(info.model_copy(update={"model_id": model.id, "model_data": data}))


@router.post("/forward_backward")
async def forward_backward(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    """Decompressed and parsed, then checked against the run's model and the server's bounds
    (``validate``) and decoded, all off the event loop, so a large body never holds up other
    requests; queued as bounded units (``units``), so it never holds up other keys for long."""
    raw, encoding, limits = await request.body(), request.headers.get("content-encoding", ""), server.limits
    try:
        msg = await asyncio.to_thread(wire.read_forward_backward, raw, encoding, limits.max_body)
        model, client = server.registry.model(msg.model_id, tenant)
        body = await asyncio.to_thread(
            wire.decode_forward_backward, msg, limits.max_body // 4, client, limits.max_train_tokens
        )
    except Exception:
        del raw
        await asyncio.to_thread(memory.trim)  # a refused body may have been large once decompressed
        raise
    del raw, msg
    server.registry.check_room(model.session)  # before the work is queued on the worker
    loss_inputs(body.data, body.loss_fn)
    run = client.forward if body.forward_only else client.forward_backward
    config = validate.finite_config(body.loss_fn_config)
    pieces = units.split(body.data, limits.unit_tokens)
    started = await asyncio.to_thread(
        units.submit, pieces, lambda unit: run(unit, cast(types.LossFnType, body.loss_fn), config).future()
    )
    large = sum(datum.model_input.length for datum in body.data) >= memory.LARGE_TOKENS
    return queued(server, model.session, units.gathered(started, large), wire.encode_forward_backward_output)


def loss_inputs(data: list[types.Datum], loss_fn: str) -> None:
    """``ValueError`` unless every datum carries the inputs ``loss_fn`` needs: checked for the whole
    request before its first unit is queued."""
    needed = loss_spec(loss_fn).inputs
    for index, datum in enumerate(data):
        missing = [key for key in needed if key not in datum.loss_fn_inputs]
        if missing:
            raise ValueError(f"data[{index}].loss_fn_inputs lacks {missing}; this loss needs {list(needed)}")


@router.post("/optim_step")
async def optim_step(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.OptimStepRequest)
    model, client = server.registry.model(body.model_id, tenant)
    server.registry.check_room(model.session)
    return queued(server, model.session, awaited(client.optim_step(body.optim_params)))


@router.post("/save_weights")
async def save_weights(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.SaveWeightsRequest)
    model, client = server.registry.model(body.model_id, tenant)
    server.registry.check_room(model.session)
    name = body.path or f"step-{uuid.uuid4().hex[:8]}"
    work = client.save_state(name, overwrite=body.overwrite, user_metadata=body.user_metadata)
    return queued(server, model.session, awaited(work))


@router.post("/save_weights_external")
async def save_weights_external(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.SaveWeightsExternalRequest)
    model, client = server.registry.model(body.model_id, tenant)
    return queued(server, model.session, awaited(client.save_weights_external(body.path)))


@router.post("/load_weights")
async def load_weights(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    """A checkpoint loaded into an existing training run (``model_id``), or a new run made from
    it (``session_id`` and ``model_seq_id``: ``ServiceClient.create_training_client_from_state*``)."""
    body = await read(request, types.LoadWeightsRequest)
    if body.base_model is not None:
        served.check(body.base_model)
    if body.model_id is not None:
        model, client = server.registry.model(body.model_id, tenant)
        folder = str(paths.folder(body.path, model.session.tenant.root))
        load = client.load_state_with_optimizer if body.optimizer else client.load_state
        work = then(awaited(load(folder)), lambda _: types.LoadWeightsResponse(path=body.path, model_id=model.id))
        return queued(server, model.session, work)
    session = server.registry.session(body.session_id, tenant)
    if body.model_seq_id is None:
        raise ValueError("load_weights needs model_id, or session_id with model_seq_id")
    server.registry.check_model_room(session)
    folder = str(paths.folder(body.path, session.tenant.root))
    service = session.tenant.service
    make = (
        service.create_training_client_from_state_with_optimizer
        if body.optimizer
        else service.create_training_client_from_state
    )
    loading = make(folder, base_model=body.base_model, user_metadata=_metadata(body.user_metadata))
    base_model = body.base_model or paths.base_model_of(folder)
    model_id, created = start_run(server, session, body.model_seq_id, base_model, loading)
    return queued(
        server, session, then(created, lambda _: types.LoadWeightsResponse(path=body.path, model_id=model_id))
    )


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.SaveWeightsForSamplerRequest)
    model, client = server.registry.model(body.model_id, tenant)
    if body.path is not None:
        work = client.save_weights_for_sampler(body.path, user_metadata=body.user_metadata)
        return queued(server, model.session, awaited(work))
    sampler_id = f"{model.session.id}:sample:{body.sampling_session_seq_id}"
    server.registry.check_sampler_room(model.session)
    made = asyncio.ensure_future(awaited(client.save_weights_and_get_sampling_client(kind=body.kind)))
    server.registry.add_sampler(Sampler(sampler_id, model.session, model.base_model, None, made))
    reply = then(made, lambda _: types.SaveWeightsForSamplerResponseInternal(sampling_session_id=sampler_id))
    return queued(server, model.session, reply)
