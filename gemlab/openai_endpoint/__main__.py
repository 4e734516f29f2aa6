"""``python -m gemlab.openai_endpoint --model MODEL_OR_SAMPLER_PATH [--host 127.0.0.1] [--port 8000] [--api-key KEY]``

Serves a base model (a local preset, a Hugging Face folder, or a Tinker model name) or saved
sampler weights (``local://...``, ``tinker://...``, or a checkpoint folder) through an
OpenAI-compatible API. Loopback only unless ``--host`` says otherwise; beyond loopback an API key
(``--api-key`` or $GEMLAB_SERVE_API_KEY) is required.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemlab.config import BACKENDS

# The sampling code, PyTorch and the backends load in main, after the arguments are read: --help and a
# refused argument answer without them.
if TYPE_CHECKING:
    from gemlab.openai_endpoint.guard import Limits

KEY_VARIABLE = "GEMLAB_SERVE_API_KEY"


def is_sampler_path(model: str) -> bool:
    """Saved weights (a Tinker/local path, or a folder holding a LoRA adapter) rather than a base model."""
    return model.startswith(("local://", "tinker://")) or (Path(model) / "adapter_config.json").is_file()


def sampling_client(service: Any, model: str) -> Any:
    """A sampling client of ``model``: saved weights or a base model."""
    if is_sampler_path(model):
        return service.create_sampling_client(model_path=model).result()
    return service.create_sampling_client(base_model=model).result()


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Limits]:
    """The command line and the limits it sets; exits with one line for a value it cannot use."""
    parser = argparse.ArgumentParser(prog="python -m gemlab.openai_endpoint", description=__doc__.split("\n\n")[1])
    parser.add_argument("--model", required=True, help="base model name or folder, or a sampler path (local://..., tinker://...)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", default="auto", choices=BACKENDS, help="'auto': Tinker if TINKER_API_KEY is set")
    parser.add_argument("--served-model-name", default=None, help="the model id clients send (default: --model)")
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"key clients send as 'Authorization: Bearer KEY' (default: ${KEY_VARIABLE}; required beyond loopback)",
    )
    parser.add_argument(
        "--allowed-host", action="append", default=[], help="another Host name clients may use (repeatable)"
    )
    parser.add_argument("--max-body-mb", type=float, default=4.0, help="largest request body in MiB (default 4)")
    parser.add_argument(
        "--max-concurrent", type=int, default=64, help="requests served at once; more get 503 (default 64)"
    )
    args = parser.parse_args(argv)
    from gemlab.openai_endpoint.guard import Limits, allowed_hosts_for, is_loopback  # FastAPI, not the model

    if not 0 <= args.port <= 65535:
        parser.exit(2, f"--port must be in 0..65535, got {args.port}\n")
    if not 0 < args.max_body_mb <= 1024 or args.max_concurrent < 1:
        parser.exit(
            2,
            f"--max-body-mb must be in (0, 1024] and --max-concurrent at least 1, got {args.max_body_mb} and "
            f"{args.max_concurrent}\n",
        )
    key = args.api_key or os.environ.get(KEY_VARIABLE) or None
    if not is_loopback(args.host) and key is None:
        parser.exit(2, f"--host {args.host} reaches beyond this machine: set --api-key or ${KEY_VARIABLE}\n")
    limits = Limits(
        api_key=key,
        allowed_hosts=allowed_hosts_for(args.host, (h.lower() for h in args.allowed_host)),
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        max_concurrent=args.max_concurrent,
    )
    return args, limits


def main(argv: list[str] | None = None) -> int:
    args, limits = parse_args(argv)
    from gemlab.backend import get_service_client
    from gemlab.memory import is_out_of_memory, out_of_memory

    try:
        client = sampling_client(get_service_client(args.backend), args.model)
    except Exception as exc:  # a model that is not here, or its files, a package or memory missing: one line
        why = out_of_memory(args.model, "while loading it") if is_out_of_memory(exc) else exc
        print(f"cannot serve {args.model!r}: {why}", file=sys.stderr)
        return 2

    import uvicorn

    from gemlab.openai_endpoint.app import create_app
    from gemlab.openai_endpoint.errors import head_too_large
    from gemlab.openai_endpoint.guard import is_loopback
    from gemlab.openai_endpoint.recorder import Recorder
    from gemlab.openai_endpoint.server_thread import HEAD_TIMEOUT_S
    from tinker_emulator import asgi_limits

    logging.basicConfig(format="gemlab.openai_endpoint: %(message)s", level=logging.WARNING)
    name = args.served_model_name or args.model
    app = create_app(client, model_name=name, recorder=Recorder(capacity=10_000), limits=limits)
    if not is_loopback(args.host):
        print(f"warning: serving beyond loopback on {args.host}; every request needs the API key", file=sys.stderr)
    print(f"serving {name!r} at http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    limited = asgi_limits.uvicorn_options(HEAD_TIMEOUT_S, too_large_body=head_too_large())
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", **limited)
    return 0


if __name__ == "__main__":
    sys.exit(main())
