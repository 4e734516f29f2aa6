"""How much of Tinker's client interface the local backend covers, generated from tinker's classes.

Every public method and property of ``tinker.ServiceClient``, ``TrainingClient``,
``SamplingClient`` and ``RestClient`` (as installed) is in one of three states locally: it
**works**, it **works with a difference** (``DIFFERENCES`` says which), or it **raises a clear
error** (``ERRORS``: a ``LocalBackendError``, a ``tinker.TinkerError`` naming the local backend).
An ``X_async`` form has the state of ``X``. The
table's second column says the same over HTTP against ``python -m tinker_emulator.workshop_server``
(``tinker_emulator/workshop_server/coverage.py``). ``python -m tinker_emulator.coverage --write`` rewrites
the table in ``docs/local-backend.md``; ``tests/local/test_coverage.py`` checks it is in sync
with the installed tinker and that every listed error is raised.
"""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import tinker

WORKS, DIFFERENT, ERROR = "works", "works with a difference", "raises a clear error"
DOC = Path(__file__).resolve().parents[1] / "docs" / "local-backend.md"
STABLE_REINFORCE = "`stable_reinforce` is a local stand-in (importance sampling; Tinker publishes no formula)"
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"

DIFFERENCES = {
    "ServiceClient.copy_weights": "copies to a new local run; `ttl_seconds` and `weights_access_token` are ignored",
    "ServiceClient.create_lora_training_client": (
        "a Tinker model name runs on the stand-in `$GEMLAB_LOCAL_MODEL` (the runner and the workshop server default to "
        "`gemlab/tiny-chat`), without one it is refused; optimizer AdamW only"
    ),
    "ServiceClient.create_rest_client": "a `LocalRestClient` over the checkpoint root",
    "ServiceClient.create_sampling_client": "`retry_config` and `record_stability_info` are accepted and not needed",
    "ServiceClient.get_console_url": "the checkpoint root as a `file://` URI",
    "ServiceClient.get_server_capabilities": "lists the local presets",
    "ServiceClient.get_telemetry": "`None`",
    "TrainingClient.forward": STABLE_REINFORCE,
    "TrainingClient.forward_backward": STABLE_REINFORCE,
    "TrainingClient.optim_step": "AdamW (`types.AdamParams`) only",
    "TrainingClient.save_state": "`ttl_seconds` is ignored: nothing expires",
    "TrainingClient.save_weights_for_sampler": "`ttl_seconds` is ignored: nothing expires",
    "TrainingClient.save_weights_external": "no encryption (`age_encryption_recipients` raises)",
    "TrainingClient.save_weights_and_get_sampling_client": "`record_stability_info` is accepted and not needed",
    "TrainingClient.create_sampling_client": "`record_stability_info` is accepted and not needed",
    "TrainingClient.get_info": "`tokenizer_id` is the local model",
    "TrainingClient.get_tokenizer": "the local model's tokenizer",
    "TrainingClient.get_console_url": "the run's checkpoint folder as a `file://` URI",
    "TrainingClient.get_telemetry": "`None`",
    "SamplingClient.sample": "`topk_prompt_logprobs`, `target_prompt_logprobs`, `prompt_alt_tokens_k` raise",
    "SamplingClient.from_sampler_handle": "handles of this process only",
    "SamplingClient.get_sampler_handle": "valid in this process only",
    "SamplingClient.get_tokenizer": "the local model's tokenizer",
    "SamplingClient.get_telemetry": "`None`",
    "RestClient.copy_weights": "no projects: `destination_project_id` is ignored",
    "RestClient.get_external_weights_urls": "`file://` URLs of the checkpoint's files, never expiring",
    "RestClient.get_server_capabilities": "lists the local presets",
    "RestClient.get_telemetry": "`None`",
    "RestClient.list_training_runs": "runs under the checkpoint root; `access_scope`, `project_id` ignored",
    "RestClient.set_checkpoint_ttl_from_tinker_path": "accepted and ignored: nothing expires",
}
ERRORS = {
    "ServiceClient.holder": "no server connection",
    "SamplingClient.create": "Tinker's internal factory; use `ServiceClient.create_sampling_client`",
    "RestClient.assign_session_project": "no sessions or projects",
    "RestClient.export_session_trace": "no sessions",
    "RestClient.get_audit_log": "no organization",
    "RestClient.get_billing_usage": "no billing",
    "RestClient.get_current_checkpoint_storage_usage": "no billing",
    "RestClient.get_session": "no sessions",
    "RestClient.list_sessions": "no sessions",
    "RestClient.search_sessions": "no sessions",
    "RestClient.publish_checkpoint_from_tinker_path": "local checkpoints are files",
    "RestClient.unpublish_checkpoint_from_tinker_path": "local checkpoints are files",
    "RestClient.whoami": "no accounts",
}
CLIENTS = ("ServiceClient", "TrainingClient", "SamplingClient", "RestClient")


def public_members(client: str) -> list[str]:
    """The public methods and properties of ``tinker.<client>``, as installed."""
    cls = getattr(tinker, client)
    return sorted(
        name for name in dir(cls) if not name.startswith("_") and _is_member(inspect.getattr_static(cls, name))
    )


def _is_member(attribute: object) -> bool:
    return inspect.isfunction(attribute) or isinstance(attribute, (property, staticmethod, classmethod))


def status(client: str, member: str) -> tuple[str, str]:
    """``(state, note)`` of ``tinker.<client>.<member>`` on the local backend."""
    key = f"{client}.{member.removesuffix('_async')}"
    if key in ERRORS:
        return ERROR, ERRORS[key]
    if key in DIFFERENCES:
        return DIFFERENT, DIFFERENCES[key]
    return WORKS, ""


def http_status(client: str, member: str) -> tuple[str, str]:
    """``(state, note)`` of ``tinker.<client>.<member>`` over HTTP against ``python -m
    tinker_emulator.workshop_server``."""
    from tinker_emulator.workshop_server.coverage import http_status as over_http

    return over_http(f"{client}.{member.removesuffix('_async')}", status(client, member))


def table() -> str:
    """The coverage table, in markdown, for the installed tinker: in-process and over HTTP."""
    lines = [f"Generated by `python -m tinker_emulator.coverage --write` from tinker {tinker.__version__}.", ""]
    for client in CLIENTS:
        members = public_members(client)
        summary = "; ".join(
            f"{where}: "
            + ", ".join(f"{sum(how(client, m)[0] == s for m in members)} {s}" for s in (WORKS, DIFFERENT, ERROR))
            for where, how in (("in-process", status), ("over HTTP", http_status))
        )
        lines += [f"**`tinker.{client}`** ({summary})", ""]
        lines += ["| method | in-process | note | over HTTP | note |", "|---|---|---|---|---|"]
        for m in members:
            (local, note), (http, http_note) = status(client, m), http_status(client, m)
            lines.append(f"| `{m}` | {local} | {note} | {http} | {http_note} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def documented_table(doc: Path = DOC) -> str:
    """The table as it stands in ``doc``, between the coverage markers."""
    text = doc.read_text()
    return text[text.index(START) + len(START) : text.index(END)].strip("\n") + "\n"


def write(doc: Path = DOC) -> None:
    """Replace the table between the coverage markers of ``doc``."""
    text = doc.read_text()
    head, tail = text[: text.index(START) + len(START)], text[text.index(END) :]
    doc.write_text(f"{head}\n{table()}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC}")
    args = parser.parse_args()
    if args.write:
        if not DOC.is_file() or START not in DOC.read_text():
            raise SystemExit(f"tinker_emulator.coverage: {DOC} with {START} ... {END} markers is needed for --write")
        write()
        print(f"wrote the coverage table to {DOC}")
    else:
        print(table(), end="")


if __name__ == "__main__":
    main()
