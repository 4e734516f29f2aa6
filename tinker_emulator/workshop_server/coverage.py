"""What each public method of Tinker's four clients does over HTTP against this server.

Over HTTP the SDK's own classes run in the client, so what is client-side there (handles, the
connection holder, telemetry) works whatever the local backend does in-process; what needs a route
this server does not serve ends in a 404 in Tinker's error shape naming the route. A method not
listed here works as it does in-process (``tinker_emulator.coverage``).
"""

from __future__ import annotations

NOT_SERVED = "raises a clear error"
OFFLINE_TOKENIZER = "offline after `python -m tinker_emulator.workshop_server tokenizer MODEL` and `HF_HUB_OFFLINE=1`"
WORKS, DIFFERENT = "works", "works with a difference"

# members that run in the SDK itself over HTTP: they work (the in-process note does not apply)
CLIENT_SIDE = {
    "ServiceClient.holder": WORKS,
    "ServiceClient.get_telemetry": WORKS,
    "ServiceClient.create_rest_client": WORKS,
    "ServiceClient.create_custom_loss": WORKS,
    "ServiceClient.get_console_url": DIFFERENT,
    "TrainingClient.get_console_url": DIFFERENT,
    "TrainingClient.get_telemetry": WORKS,
    "SamplingClient.create": WORKS,
    "SamplingClient.get_sampler_handle": WORKS,
    "SamplingClient.from_sampler_handle": WORKS,
    "SamplingClient.get_telemetry": WORKS,
    "RestClient.get_telemetry": WORKS,
}
DIFFERENCES = {
    "ServiceClient.get_console_url": "a Tinker console URL, which does not know this server's runs",
    "TrainingClient.get_console_url": "a Tinker console URL, which does not know this server's runs",
    "TrainingClient.get_tokenizer": OFFLINE_TOKENIZER,
    "SamplingClient.get_tokenizer": OFFLINE_TOKENIZER,
}
GAPS = {
    "ServiceClient.copy_weights": "`/copy_weights` is not served",
    "RestClient.copy_weights": "`/copy_weights` is not served",
    "RestClient.get_external_weights_urls": "the server's files are not served for download",
    "RestClient.set_checkpoint_ttl_from_tinker_path": "`/ttl` is not served (nothing expires)",
    "RestClient.publish_checkpoint_from_tinker_path": "no publishing",
    "RestClient.unpublish_checkpoint_from_tinker_path": "no publishing",
    "RestClient.get_session": "session listing is not served",
    "RestClient.list_sessions": "session listing is not served",
    "RestClient.search_sessions": "session listing is not served",
    "RestClient.assign_session_project": "no projects",
    "RestClient.export_session_trace": "no traces",
    "RestClient.get_audit_log": "no organization",
    "RestClient.get_billing_usage": "no billing",
    "RestClient.get_current_checkpoint_storage_usage": "no billing",
    "RestClient.whoami": "no accounts",
}


def http_status(key: str, local: tuple[str, str]) -> tuple[str, str]:
    """``(state, note)`` over HTTP of ``Client.method`` (without ``_async``), given its in-process status."""
    if key in GAPS:
        return NOT_SERVED, GAPS[key]
    if key in DIFFERENCES:
        return DIFFERENT, DIFFERENCES[key]
    if key in CLIENT_SIDE:
        return CLIENT_SIDE[key], ""
    return local
