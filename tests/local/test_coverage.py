"""The coverage table in docs/local-backend.md is in sync with the installed tinker, every method
of Tinker's four clients is implemented by the local backend (or is Tinker's own async wrapper of
one that is), and every method listed as raising does raise the local backend's clear error."""

from __future__ import annotations

import asyncio
import inspect

import pytest
import tinker

from tinker_emulator import TINY, coverage
from tinker_emulator.errors import LocalBackendError
from tinker_emulator.rest_client import LocalRestClient
from tinker_emulator.sampling_client import LocalSamplingClient
from tinker_emulator.service_client import LocalServiceClient
from tinker_emulator.training_client import LocalTrainingClient

LOCAL = {
    "ServiceClient": LocalServiceClient,
    "TrainingClient": LocalTrainingClient,
    "SamplingClient": LocalSamplingClient,
    "RestClient": LocalRestClient,
}


def test_the_documented_table_is_in_sync_with_the_installed_tinker():
    assert coverage.documented_table() == coverage.table(), "run: python -m tinker_emulator.coverage --write"


def _defined_locally(cls: type, name: str) -> bool:
    owner = next(k for k in cls.__mro__ if name in k.__dict__)
    return owner.__module__.startswith("tinker_emulator")


@pytest.mark.parametrize("client", coverage.CLIENTS)
def test_every_public_member_is_implemented_locally(client: str):
    local = LOCAL[client]
    assert issubclass(local, getattr(tinker, client))
    for name in coverage.public_members(client):
        if _defined_locally(local, name):
            continue
        # tinker's own X_async wrappers just await X, which must then be local
        assert name.endswith("_async") and _defined_locally(local, name.removesuffix("_async")), name


def test_every_listed_difference_and_error_names_a_member():
    for key in [*coverage.DIFFERENCES, *coverage.ERRORS]:
        client, name = key.split(".")
        assert name in coverage.public_members(client), key


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    service = LocalServiceClient(device="cpu", root=tmp_path_factory.mktemp("coverage"))
    training = service.create_lora_training_client(base_model=TINY, rank=2, seed=0).result()
    return {
        "ServiceClient": service,
        "TrainingClient": training,
        "SamplingClient": training.save_weights_and_get_sampling_client().result(),
        "RestClient": service.create_rest_client(),
    }


def _call(obj: object, name: str) -> object:
    """Call ``obj.name`` with a placeholder for every required argument (a property: read it)."""
    if isinstance(inspect.getattr_static(type(obj), name), property):
        return getattr(obj, name)
    method = getattr(obj, name)
    required = [
        p
        for p in inspect.signature(method).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    args = [("x" if p.kind != p.KEYWORD_ONLY else None) for p in required]
    kwargs = {p.name: "x" for p in required if p.kind == p.KEYWORD_ONLY}
    result = method(*[a for a in args if a is not None], **kwargs)
    if inspect.iscoroutine(result):
        return asyncio.run(result)
    return result


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("client", coverage.CLIENTS)
def test_every_member_listed_as_raising_raises_the_clear_error(instances, client: str):
    for name in coverage.public_members(client):
        if coverage.status(client, name)[0] != coverage.ERROR:
            continue
        with pytest.raises(LocalBackendError, match="not available on the local backend"):
            _call(instances[client], name)
    assert issubclass(LocalBackendError, tinker.TinkerError)


def test_every_http_note_names_a_member_of_the_installed_sdk():
    from tinker_emulator.workshop_server import coverage as http

    for key in [*http.GAPS, *http.DIFFERENCES, *http.CLIENT_SIDE]:
        client, name = key.split(".")
        assert name in coverage.public_members(client), key
