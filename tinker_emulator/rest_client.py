"""``LocalRestClient``: Tinker's ``RestClient`` for the checkpoints on this machine.

What has a local meaning works on the checkpoint folders (see ``checkpoints.py``): listing a
run's checkpoints or every checkpoint under the root, a run's information (base model, LoRA rank,
user metadata, last checkpoints), a checkpoint's weights information, deleting or copying one,
and file URLs of a checkpoint's files (the local "archive"). What only a server has (accounts,
sessions, billing, audit logs, publishing) raises ``LocalBackendError``, a ``tinker.TinkerError``
that names the local backend. Results that depend on saves come after the requests queued before
them, as on Tinker.
"""

from __future__ import annotations

import datetime as dt
import getpass
import shutil
from pathlib import Path
from typing import Any, NoReturn

from tinker import RestClient, types
from tinker.lib.public_interfaces.api_future import APIFuture

from tinker_emulator import checkpoints
from tinker_emulator.errors import LocalBackendError, unavailable
from tinker_emulator.futures import completed, run_in_order
from tinker_emulator.models import server_capabilities
from tinker_emulator.sampling_client import LocalSamplingClient

# checkpoint folder kind -> Tinker's checkpoint type
CHECKPOINT_TYPES: dict[str, types.CheckpointType] = {
    "weights": "training",
    "sampler_weights": "sampler",
    "external": "external",
}


class LocalRestClient(RestClient):
    """Tinker's ``RestClient`` over the local checkpoint folders under ``root`` (default
    ``$GEMLAB_LOCAL_DIR``, else ``~/.cache/gemlab/local``); runs this process created are found
    wherever their own service client saves them. ``base_url``/``api_key`` are ignored."""

    def __init__(
        self, _holder: Any = None, *, base_url: str | None = None, api_key: str | None = None, root: Any = None
    ):
        self._root = (Path(root).expanduser() if root is not None else checkpoints.default_root()).absolute()

    @property
    # a read-only property: the local client has no connection holder to set
    def holder(self) -> NoReturn:  # type: ignore[override]
        unavailable("RestClient.holder (the HTTP connection holder)", "there is no server connection")

    def __repr__(self) -> str:
        return f"<LocalRestClient root={self._root}>"

    def get_telemetry(self) -> None:
        return None

    # ----- runs and checkpoints -------------------------------------------------------------
    def get_server_capabilities(self) -> APIFuture[types.GetServerCapabilitiesResponse]:
        """The local presets, as ``ServiceClient.get_server_capabilities``."""
        return completed(server_capabilities())

    def list_checkpoints(self, training_run_id: types.ModelID) -> APIFuture[types.CheckpointsListResponse]:
        """Every checkpoint of run ``training_run_id``, oldest first."""
        return run_in_order(
            lambda: types.CheckpointsListResponse(checkpoints=self._checkpoints(training_run_id), cursor=None)
        )

    def list_user_checkpoints(self, limit: int = 100, offset: int = 0) -> APIFuture[types.CheckpointsListResponse]:
        """Every checkpoint under the root, newest first, ``limit`` from ``offset``."""

        def run() -> types.CheckpointsListResponse:
            found = sorted(
                (c for run_id in self._run_ids() for c in self._checkpoints(run_id)), key=lambda c: c.time, reverse=True
            )
            cursor = types.Cursor(offset=offset, limit=limit, total_count=len(found))
            return types.CheckpointsListResponse(checkpoints=found[offset : offset + limit], cursor=cursor)

        return run_in_order(run)

    def get_training_run(
        self, training_run_id: types.ModelID, access_scope: str = "owned"
    ) -> APIFuture[types.TrainingRun]:
        """Base model, LoRA rank, user metadata and last checkpoints of run ``training_run_id``."""
        return run_in_order(lambda: self._training_run(training_run_id))

    def get_training_run_by_tinker_path(
        self, tinker_path: str, access_scope: str = "owned"
    ) -> APIFuture[types.TrainingRun]:
        """The run that saved the checkpoint at ``tinker_path`` (a ``local://`` path)."""
        run_id, _ = _parse(tinker_path)
        return run_in_order(lambda: self._training_run(run_id))

    def list_training_runs(
        self, limit: int = 20, offset: int = 0, access_scope: str = "owned", project_id: str | None = None
    ) -> APIFuture[types.TrainingRunsResponse]:
        """The runs under the root (and those this process created), newest first."""

        def run() -> types.TrainingRunsResponse:
            described = (
                self._training_run(r) for r in self._run_ids() if checkpoints.run_info(r) or self._checkpoints(r)
            )
            runs = sorted(described, key=lambda r: r.last_request_time, reverse=True)
            cursor = types.Cursor(offset=offset, limit=limit, total_count=len(runs))
            return types.TrainingRunsResponse(training_runs=runs[offset : offset + limit], cursor=cursor)

        return run_in_order(run)

    def get_weights_info_by_tinker_path(self, tinker_path: str) -> APIFuture[types.WeightsInfoResponse]:
        """Base model and LoRA settings of the checkpoint at ``tinker_path``."""
        folder = checkpoints.resolve(tinker_path, self._root)

        def run() -> types.WeightsInfoResponse:
            meta = checkpoints.load_meta(folder)
            return types.WeightsInfoResponse(
                base_model=meta["base_model"],
                optimizer_config=types.AdamOptimizerConfig(),
                is_lora=True,
                lora_rank=meta["lora"]["rank"],
                train_unembed=meta["lora"]["train_unembed"],
                train_mlp=meta["lora"]["train_mlp"],
                train_attn=meta["lora"]["train_attn"],
            )

        return run_in_order(run)

    def delete_checkpoint(self, training_run_id: types.ModelID, checkpoint_id: str) -> APIFuture[None]:
        """Delete checkpoint ``checkpoint_id`` (``"weights/<name>"``, ``"sampler_weights/<name>"``)."""
        return self.delete_checkpoint_from_tinker_path(f"{checkpoints.SCHEME}{training_run_id}/{checkpoint_id}")

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> APIFuture[None]:
        """Delete the checkpoint folder at ``tinker_path`` once the saves queued before it are done."""
        _parse(tinker_path)

        def run() -> None:
            shutil.rmtree(checkpoints.resolve(tinker_path, self._root))

        return run_in_order(run)

    def copy_weights(
        self,
        path: str,
        destination_project_id: str | None = None,
        *,
        ttl_seconds: int | None = None,
        weights_access_token: str | None = None,
    ) -> APIFuture[str]:
        """A copy of the checkpoint under a new run id, as ``ServiceClient.copy_weights`` (there
        are no projects locally: ``destination_project_id`` is ignored)."""
        folder = checkpoints.resolve(path, self._root)
        run_id = checkpoints.new_run_id()
        kind = folder.parent.name if folder.parent.name in checkpoints.KINDS else "weights"
        new_path = checkpoints.checkpoint_path(run_id, kind, folder.name)
        checkpoints.register_run(run_id, self._root)

        def copy() -> str:
            checkpoints.copy(folder, checkpoints.folder_of(new_path, self._root))
            return new_path

        return run_in_order(copy)

    def get_external_weights_urls(self, tinker_path: str) -> APIFuture[types.ExternalWeightsUrlsResponse]:
        """``file://`` URLs of the checkpoint's files (PEFT's adapter format), which never expire."""
        folder = checkpoints.resolve(tinker_path, self._root)
        urls = {f.name: f.absolute().as_uri() for f in sorted(folder.iterdir()) if f.is_file()}
        return completed(
            types.ExternalWeightsUrlsResponse(urls=urls, expires=dt.datetime.max.replace(tzinfo=dt.timezone.utc))
        )

    def set_checkpoint_ttl_from_tinker_path(self, tinker_path: str, ttl_seconds: int | None) -> APIFuture[None]:
        """Accepted and ignored: local checkpoints never expire."""
        checkpoints.resolve(tinker_path, self._root)
        return completed(None)

    def get_sampler(self, sampler_id: str) -> APIFuture[types.GetSamplerResponse]:
        """The base model of the live local sampler ``sampler_id`` (from ``get_sampler_handle``)."""
        sampler = LocalSamplingClient.from_sampler_handle(sampler_id)
        return completed(types.GetSamplerResponse(sampler_id=sampler_id, base_model=sampler.get_base_model()))

    # ----- what only a server has ---------------------------------------------------------------
    def whoami(self) -> NoReturn:
        unavailable("RestClient.whoami", "there are no accounts locally")

    def publish_checkpoint_from_tinker_path(self, tinker_path: str) -> NoReturn:
        unavailable("publishing a checkpoint", "local checkpoints are files on this machine")

    def unpublish_checkpoint_from_tinker_path(self, tinker_path: str) -> NoReturn:
        unavailable("unpublishing a checkpoint", "local checkpoints are files on this machine")

    def get_session(self, session_id: str, access_scope: str = "owned") -> NoReturn:
        unavailable("RestClient.get_session (server sessions)")

    def list_sessions(self, limit: int = 20, offset: int = 0, access_scope: str = "owned") -> NoReturn:
        unavailable("RestClient.list_sessions (server sessions)")

    def search_sessions(self, request: Any) -> NoReturn:
        unavailable("RestClient.search_sessions (server sessions)")

    def assign_session_project(self, session_id: str, project_id: str) -> NoReturn:
        unavailable("RestClient.assign_session_project (server sessions and projects)")

    def export_session_trace(self, session_id: str) -> NoReturn:
        unavailable("RestClient.export_session_trace (server session traces)")

    def get_audit_log(self, event_type: str = "all", day: Any = None) -> NoReturn:
        unavailable("RestClient.get_audit_log (organization audit logs)")

    def get_billing_usage(self, starting_on: Any, ending_before: Any) -> NoReturn:
        unavailable("RestClient.get_billing_usage (billing)")

    def get_current_checkpoint_storage_usage(self, project_id: str | None = None) -> NoReturn:
        unavailable("RestClient.get_current_checkpoint_storage_usage (billing)")

    # ----- helpers ------------------------------------------------------------------------------
    def _run_ids(self) -> list[str]:
        """The runs under the root (folders named as run ids) and those this process made there."""
        listed = self._root.iterdir() if self._root.is_dir() else ()
        on_disk = {p.name for p in listed if p.is_dir() and checkpoints.NAME.fullmatch(p.name)}
        mine = {r for r in checkpoints._run_roots if checkpoints._run_roots[r] == self._root}
        return sorted(on_disk | mine)

    def _checkpoints(self, run_id: str) -> list[types.Checkpoint]:
        """Run ``run_id``'s whole checkpoints: staging folders, stray files and folders with no
        weights or unreadable metadata are not checkpoints, so a crashed save never breaks a listing."""
        run = checkpoints.run_folder(run_id, self._root)
        found = []
        for kind, checkpoint_type in CHECKPOINT_TYPES.items():
            for folder in sorted((run / kind).glob("*")):
                if not checkpoints.NAME.fullmatch(folder.name) or not (folder / checkpoints.WEIGHTS_FILE).is_file():
                    continue
                try:
                    meta = checkpoints.load_meta(folder)
                except (OSError, ValueError):  # no gemlab.json, or one cut short
                    continue
                found.append(
                    types.Checkpoint(
                        checkpoint_id=f"{kind}/{folder.name}",
                        checkpoint_type=checkpoint_type,
                        time=_mtime(folder / checkpoints.META_FILE),
                        tinker_path=checkpoints.checkpoint_path(run_id, kind, folder.name),
                        size_bytes=sum(f.stat().st_size for f in folder.iterdir() if f.is_file()),
                        public=False,
                        user_metadata=meta.get("user_metadata") or None,
                    )
                )
        return sorted(found, key=lambda c: c.time)

    def _training_run(self, run_id: str) -> types.TrainingRun:
        saved = self._checkpoints(run_id)
        info = checkpoints.run_info(run_id)
        if info is None and saved:
            newest = saved[-1].tinker_path
            info = checkpoints.load_meta(checkpoints.resolve(newest, self._root))
        if info is None:
            raise LocalBackendError(
                f"tinker_emulator: no training run {run_id!r} in this process or under {self._root}"
            )
        last = {kind: [c for c in saved if c.checkpoint_type == kind] for kind in ("training", "sampler")}
        folder = checkpoints.run_folder(run_id, self._root)
        return types.TrainingRun(
            training_run_id=run_id,
            base_model=info["base_model"],
            model_owner=getpass.getuser(),
            is_lora=True,
            corrupted=False,
            lora_rank=info["lora"]["rank"],
            last_request_time=saved[-1].time if saved else _mtime(folder) if folder.exists() else _now(),
            last_checkpoint=last["training"][-1] if last["training"] else None,
            last_sampler_checkpoint=last["sampler"][-1] if last["sampler"] else None,
            user_metadata=info.get("user_metadata") or None,
        )


def _parse(path: str) -> tuple[str, str]:
    """``(run_id, checkpoint_id)`` of a ``local://<run_id>/<kind>/<name>`` path."""
    checkpoints.folder_of(path)  # refuses tinker:// paths with an explanation
    parts = path[len(checkpoints.SCHEME) :].split("/") if path.startswith(checkpoints.SCHEME) else []
    if len(parts) != 3 or parts[1] not in CHECKPOINT_TYPES:
        raise ValueError(
            f"{path!r} is not a local checkpoint path; they look like "
            f"'{checkpoints.SCHEME}<run_id>/<weights|sampler_weights|external>/<name>'"
        )
    return parts[0], f"{parts[1]}/{parts[2]}"


def _mtime(path: Path) -> dt.datetime:
    return dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.timezone.utc)


def _now() -> dt.datetime:
    return dt.datetime.now(tz=dt.timezone.utc)
