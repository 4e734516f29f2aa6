"""Sampling: sampling sessions (of saved weights or a base model) and ``asample``. A session's
requests pass the sampling gate (``gate.py``) so that a turn's burst runs as one batch."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from tinker import types

from tinker_emulator import LocalSamplingClient
from tinker_emulator.workshop_server import paths, served, validate, wire
from tinker_emulator.workshop_server.registry import NotFound, Registry, Sampler, Session
from tinker_emulator.workshop_server.replies import answer, awaited, read
from tinker_emulator.workshop_server.state import Limits, Server, ServerDep, TenantDep

router = APIRouter(prefix="/api/v1")


def any_session(registry: Registry, tenant: str) -> Session:
    """A session of this key to account sampling by path to (the SDK's sampler handles carry none)."""
    for session in registry.sessions.values():
        if session.tenant.name == tenant:
            return session
    raise NotFound("no session for this API key: create a ServiceClient first")


def check_request(body: types.SampleRequest, limits: Limits) -> None:
    """``ValueError`` naming the bound when ``body`` asks for more tokens, samples or work than ``limits`` allow."""
    max_tokens = body.sampling_params.max_tokens
    if max_tokens is None or not 1 <= max_tokens <= limits.max_tokens:
        raise ValueError(f"sampling_params.max_tokens must be between 1 and {limits.max_tokens}, got {max_tokens}")
    if not 1 <= body.num_samples <= limits.max_samples:
        raise ValueError(f"num_samples must be between 1 and {limits.max_samples}, got {body.num_samples}")
    work = body.num_samples * (body.prompt.length + max_tokens)
    validate.request_tokens(
        work, limits.max_sample_tokens, "sample (num_samples x (prompt + max_tokens))", "--max-sample-tokens"
    )


def sampler_of(body: types.SampleRequest, registry: Registry, tenant: str) -> tuple[Sampler, Session]:
    """The sampler ``body`` names (a sampling session, saved weights or a base model) and the session it is accounted
    to."""
    if body.sampling_session_id is not None:
        sampler = registry.sampler(body.sampling_session_id, tenant)
        return sampler, sampler.session or any_session(registry, tenant)
    if body.model_path is None and body.base_model is None:
        raise ValueError("asample needs sampling_session_id, model_path or base_model")
    if body.base_model is not None:
        served.check(body.base_model)
    session = any_session(registry, tenant)
    if body.model_path is None:
        assert body.base_model is not None  # refused above when both are None
        return registry.base_sampler(body.base_model, session.tenant), session
    folder = str(paths.folder(body.model_path, session.tenant.root))
    made = awaited(session.tenant.service.create_sampling_client(model_path=folder))
    base_model = body.base_model or paths.base_model_of(folder)
    return Sampler("", session, base_model, body.model_path, asyncio.ensure_future(made)), session


async def sample(server: Server, session: Session, sampler: Sampler, body: types.SampleRequest) -> types.SampleResponse:
    """``body``'s samples from ``sampler``, started with the rest of ``session``'s burst."""
    client: LocalSamplingClient = await sampler.client
    return await server.gate.run(
        session.id,
        lambda: client.sample(
            body.prompt,
            body.num_samples,
            body.sampling_params,
            include_prompt_logprobs=bool(body.prompt_logprobs),
            topk_prompt_logprobs=body.topk_prompt_logprobs,
            topk_sample_logprobs=body.topk_sample_logprobs,
            prompt_alt_tokens_k=body.prompt_alt_tokens_k,
            prompt_logprobs_last_n=body.prompt_logprobs_last_n,
        ),
    )


@router.post("/create_sampling_session")
async def create_sampling_session(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.CreateSamplingSessionRequest)
    if body.base_model is not None:
        served.check(body.base_model)
    registry = server.registry
    session = registry.session(body.session_id, tenant)
    sampler_id = f"{session.id}:sample:{body.sampling_session_seq_id}"
    registry.check_sampler_room(session)
    if body.model_path is not None:
        folder = str(paths.folder(body.model_path, session.tenant.root))
        made = awaited(session.tenant.service.create_sampling_client(model_path=folder, base_model=body.base_model))
        base_model = body.base_model or paths.base_model_of(folder)
        registry.add_sampler(Sampler(sampler_id, session, base_model, body.model_path, asyncio.ensure_future(made)))
    elif body.base_model is not None:
        shared = registry.base_sampler(body.base_model, session.tenant)
        registry.add_sampler(Sampler(sampler_id, session, body.base_model, None, shared.client))
    else:
        raise ValueError("create_sampling_session needs model_path or base_model")
    return answer(types.CreateSamplingSessionResponse(sampling_session_id=sampler_id))


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    sampler = server.registry.sampler(sampler_id, tenant)
    return answer(
        types.GetSamplerResponse(sampler_id=sampler.id, base_model=sampler.base_model, model_path=sampler.model_path)
    )


@router.post("/asample")
async def asample(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.SampleRequest)
    check_request(body, server.limits)
    sampler, session = sampler_of(body, server.registry, tenant)
    validate.prompt(body.prompt, await sampler.client)  # 400 now, not a failed future later
    session.last_seen = time.monotonic()
    request_id = server.registry.submit(session, sample(server, session, sampler, body), wire.encode_sample_response)
    sampler.sampling += 1  # in use, never dropped, until answered
    server.registry.pending[request_id].task.add_done_callback(
        lambda _: setattr(sampler, "sampling", sampler.sampling - 1)
    )
    ids = [f"{request_id}:{j}" for j in range(body.num_samples)]
    return JSONResponse({"request_id": request_id, "sample_sequence_ids": ids})
