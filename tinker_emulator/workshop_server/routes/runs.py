"""Checkpoints and training runs, as the SDK's RestClient and the ``tinker`` CLI ask for them.
A run is named by its run id (the folder of its checkpoints) or by the model id of a training
run this key made over HTTP."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from tinker_emulator import asgi_limits
from tinker_emulator.workshop_server import paths, validate
from tinker_emulator.workshop_server.registry import Registry
from tinker_emulator.workshop_server.replies import answer, awaited
from tinker_emulator.workshop_server.state import ServerDep, TenantDep

router = APIRouter(prefix="/api/v1")
Count = Annotated[int, Query(ge=0)]  # a listing's limit or offset (a negative one answers 422)


def run_id_of(registry: Registry, run_id: str, tenant: str) -> str:
    """A training run id, or the run of a model id this key owns (its local client's ``model_id``,
    which is the run id, as on Tinker)."""
    model = registry.models.get(run_id)
    if (
        model is not None
        and model.session.tenant.name == tenant
        and model.client.done()
        and not model.client.exception()
    ):
        return model.client.result().model_id
    return run_id


def tinker_ids(value: pydantic.BaseModel) -> Any:
    """A rest answer with Tinker's checkpoint ids (``external_weights/...`` for local ``external/...``)."""
    return _external_ids(value.model_dump(mode="json", exclude_none=True))


def _external_ids(item: Any) -> Any:
    if isinstance(item, dict):
        fixed = {k: _external_ids(v) for k, v in item.items()}
        if isinstance(fixed.get("checkpoint_id"), str) and fixed["checkpoint_id"].startswith("external/"):
            fixed["checkpoint_id"] = "external_weights/" + fixed["checkpoint_id"][len("external/") :]
        return fixed
    if isinstance(item, list):
        return [_external_ids(v) for v in item]
    return item


@router.get("/training_runs")
async def training_runs(server: ServerDep, tenant: TenantDep, limit: Count = 20, offset: Count = 0) -> JSONResponse:
    rest = server.registry.tenant(tenant).rest
    runs = await awaited(rest.list_training_runs(limit=limit, offset=offset))
    return answer(tinker_ids(runs))


def owned_run(run_id: str, server: Any, tenant: str) -> tuple[Any, str]:
    """The tenant asking, and its run ``run_id`` (refused unless that run's folder is the tenant's)."""
    owner = server.registry.tenant(tenant)
    run_id = run_id_of(server.registry, run_id, owner.name)
    paths.run_folder(run_id, owner.root)
    return owner, run_id


@router.get("/training_runs/{run_id}")
async def training_run(run_id: str, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    owner, run_id = owned_run(run_id, server, tenant)
    return answer(tinker_ids(await awaited(owner.rest.get_training_run(run_id))))


@router.get("/training_runs/{run_id}/checkpoints")
async def list_checkpoints(run_id: str, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    owner, run_id = owned_run(run_id, server, tenant)
    return answer(tinker_ids(await awaited(owner.rest.list_checkpoints(run_id))))


@router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}")
async def delete_checkpoint(run_id: str, checkpoint_id: str, server: ServerDep, tenant: TenantDep) -> Response:
    owner = server.registry.tenant(tenant)
    tinker_path = f"{paths.TINKER}{run_id_of(server.registry, run_id, owner.name)}/{checkpoint_id}"
    folder = paths.folder(tinker_path, owner.root)
    await awaited(owner.rest.delete_checkpoint_from_tinker_path(str(folder)))
    return Response(status_code=204)


@router.get("/checkpoints")
async def user_checkpoints(server: ServerDep, tenant: TenantDep, limit: Count = 100, offset: Count = 0) -> JSONResponse:
    rest = server.registry.tenant(tenant).rest
    saved = await awaited(rest.list_user_checkpoints(limit=limit, offset=offset))
    return answer(tinker_ids(saved))


@router.post("/weights_info")
async def weights_info(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = asgi_limits.json_loads(validate.json_body(await request.body()))
    owner = server.registry.tenant(tenant)
    folder = paths.folder(body.get("tinker_path") if isinstance(body, dict) else None, owner.root)
    return answer(await awaited(owner.rest.get_weights_info_by_tinker_path(str(folder))))
