"""``python -m gemlab.serve --model MODEL_OR_SAMPLER_PATH [--host 127.0.0.1] [--port 8000]``

Serves a base model (a local preset, a Hugging Face folder, or a Tinker model name) or saved
sampler weights (``local://...``, ``tinker://...``, or a checkpoint folder) through an
OpenAI-compatible API. Loopback only unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gemlab.backend import get_service_client
from gemlab.config import BACKENDS
from gemlab.serve import Recorder, create_app


def is_sampler_path(model: str) -> bool:
    """Saved weights (a Tinker/local path, or a folder holding a LoRA adapter) rather than a base model."""
    return model.startswith(("local://", "tinker://")) or (Path(model) / "adapter_config.json").is_file()


def sampling_client(service: Any, model: str) -> Any:
    """A sampling client of ``model``: saved weights or a base model."""
    if is_sampler_path(model):
        return service.create_sampling_client(model_path=model).result()
    return service.create_sampling_client(base_model=model).result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemlab.serve", description=__doc__.split("\n\n")[1])
    parser.add_argument("--model", required=True, help="base model name or folder, or a sampler path (local://..., tinker://...)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", default="auto", choices=BACKENDS, help="'auto': Tinker if TINKER_API_KEY is set")
    parser.add_argument("--served-model-name", default=None, help="the model id clients send (default: --model)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.exit(2, f"--port must be in 0..65535, got {args.port}\n")
    try:
        client = sampling_client(get_service_client(args.backend), args.model)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        parser.exit(2, f"cannot serve {args.model!r}: {exc}\n")

    import uvicorn

    name = args.served_model_name or args.model
    app = create_app(client, model_name=name, recorder=Recorder(capacity=10_000))
    print(f"serving {name!r} at http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
