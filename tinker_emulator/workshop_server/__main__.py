"""``python -m tinker_emulator.workshop_server``: serve Tinker's HTTP API on this machine.

    python -m tinker_emulator.workshop_server [--port 8000] [--data-dir DIR] [--keys N] [--host 127.0.0.1]
                                [--models-per-key 32] [--samplers-per-key 32] [--queue-per-key 64]
                                [--results-per-key 128] [--held-mb-per-key 128] [--result-ttl 300]
                                [--read-timeout 60] [--max-header-kb 64] [--max-train-tokens 262144]
                                [--max-sample-tokens 65536] [--unit-tokens 4096]
    python -m tinker_emulator.workshop_server tokenizer Qwen/Qwen3-4B-Instruct-2507   # once per client machine

Clients set ``TINKER_BASE_URL`` and ``TINKER_API_KEY`` to what the server prints and run any Tinker
program unchanged (with ``HF_HUB_OFFLINE=1`` for tokenizers installed by the second command).

Keys share the machine fairly: a forward_backward runs as units of ``--unit-tokens`` and the
training worker takes one unit from each key in turn, so a request waits at most for the unit
running plus one per other key with work queued; one request's work is bounded in tokens
(``--max-train-tokens``, ``--max-sample-tokens``). Each key is bounded (the defaults suit a room of
30 on one machine, or 30 programs on one key): training runs open (beyond it 403, which the SDK
does not retry), samplers kept (beyond it the least recently used one not in use is dropped: an
RL loop makes one per step), requests queued, results nobody fetched and the request bytes they hold
(beyond these 429, which the SDK retries with backoff); an unfetched result is dropped after
``--result-ttl`` seconds, and a request's head and its body must each arrive within ``--read-timeout``
seconds (the connection is closed; 408 for a body), the head within ``--max-header-kb`` (431).
SIGTERM cancels the work queued and exits once the unit running is done.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from tinker_emulator import asgi_limits
from tinker_emulator.workshop_server.registry import Quotas
from tinker_emulator.workshop_server.state import Limits

DEFAULT_DATA = Path.home() / ".cache" / "gemlab" / "tinker-server"
# seconds (uvicorn takes an int); after a stop, how long open requests (long polls included) may still run
SHUTDOWN_GRACE_S = 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tinker_emulator.workshop_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="where keys and checkpoints live")
    parser.add_argument("--keys", type=int, default=1, help="how many API keys to make (one per attendee)")
    parser.add_argument("--device", default=None, help="cpu, cuda or mps (default: the best there is)")
    parser.add_argument("--no-zstd", action="store_true", help="do not ask clients to compress forward_backward")
    parser.add_argument("--max-tokens", type=int, default=Limits.max_tokens, help="largest max_tokens a sample may ask")
    parser.add_argument("--max-body-mb", type=float, default=Limits.max_body / 2**20, help="largest request body")
    parser.add_argument("--max-queue", type=int, default=Limits.max_pending, help="requests queued before 'busy'")
    parser.add_argument(
        "--max-train-tokens",
        type=int,
        default=Limits.max_train_tokens,
        help="tokens of one forward_backward's datums (400 beyond)",
    )
    parser.add_argument(
        "--max-sample-tokens",
        type=int,
        default=Limits.max_sample_tokens,
        help="num_samples x (prompt + max_tokens) of one sample request (400 beyond)",
    )
    parser.add_argument(
        "--unit-tokens",
        type=int,
        default=Limits.unit_tokens,
        help="tokens of a forward_backward run as one turn of the training worker",
    )
    parser.add_argument(
        "--max-header-kb", type=float, default=asgi_limits.MAX_HEAD / 1024, help="largest request head (431 beyond)"
    )
    quotas = parser.add_argument_group("per key (one attendee)")
    quotas.add_argument(
        "--models-per-key", type=int, default=Quotas.models, help="training runs open at once (403 beyond)"
    )
    quotas.add_argument(
        "--samplers-per-key",
        type=int,
        default=Quotas.samplers,
        help="samplers kept; beyond it the least recently used goes",
    )
    quotas.add_argument("--queue-per-key", type=int, default=Quotas.queued, help="requests queued at once (429 beyond)")
    quotas.add_argument(
        "--results-per-key", type=int, default=Quotas.results, help="finished results not yet fetched (429 beyond)"
    )
    quotas.add_argument(
        "--held-mb-per-key",
        type=float,
        default=Quotas.held_bytes / 2**20,
        help="request MiB queued or awaiting fetch (429 beyond)",
    )
    quotas.add_argument(
        "--result-ttl", type=float, default=Quotas.result_ttl_s, help="seconds an unfetched result is kept"
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=Limits.body_timeout_s,
        help="seconds a request head, and then its body, may take to arrive",
    )
    return parser.parse_args(argv)


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound and listening, so that a client who connects as soon as the
    address is printed waits in the backlog instead of being refused while the server starts.
    IPPROTO_TCP is named because asyncio turns Nagle off (TCP_NODELAY) only on connections of a
    socket that says so; with Nagle on, a response's body waits for the ACK of its headers: 40 ms
    (Linux's delayed ACK) added to every request."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError:
        sock.close()
        raise
    return sock


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from tinker_emulator.workshop_server.app import make_app
    from tinker_emulator.workshop_server.errors import error_body
    from tinker_emulator.workshop_server.keys import load_or_create

    sizes: tuple[Any, ...] = (
        args.keys,
        args.max_tokens,
        args.max_queue,
        args.models_per_key,
        args.samplers_per_key,
        args.queue_per_key,
        args.results_per_key,
    )
    sizes = (*sizes, args.max_train_tokens, args.max_sample_tokens, args.unit_tokens)
    times = (args.max_body_mb, args.held_mb_per_key, args.result_ttl, args.read_timeout, args.max_header_kb)
    if min(sizes) < 1 or min(times) <= 0:
        sys.exit(
            "--keys, --max-tokens, --max-queue, --models-per-key, --samplers-per-key, --queue-per-key, "
            "--results-per-key, "
            "--max-train-tokens, --max-sample-tokens, --unit-tokens, --max-body-mb, --held-mb-per-key, --result-ttl, "
            "--read-timeout and --max-header-kb must be positive"
        )
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback:
        print(
            f"warning: serving on {args.host}, reachable from other machines; anyone with a key can train here",
            file=sys.stderr,
        )
    data_dir = args.data_dir.expanduser().absolute()
    os.umask(0o077)  # what the server writes (tenants, runs, checkpoints, metadata) is its own: 0700 / 0600
    try:
        keys = load_or_create(data_dir, args.keys)
    except OSError as exc:  # a data dir that cannot be made or written: one line, no traceback
        sys.exit(f"cannot use --data-dir {data_dir}: {exc.strerror or exc}")
    limits = Limits(
        max_body=int(args.max_body_mb * 2**20),
        max_tokens=args.max_tokens,
        max_train_tokens=args.max_train_tokens,
        max_sample_tokens=args.max_sample_tokens,
        unit_tokens=args.unit_tokens,
        max_pending=args.max_queue,
        max_pending_per_session=min(Limits.max_pending_per_session, args.max_queue),
        body_timeout_s=args.read_timeout,
        quotas=Quotas(
            models=args.models_per_key,
            samplers=args.samplers_per_key,
            queued=args.queue_per_key,
            results=args.results_per_key,
            held_bytes=int(args.held_mb_per_key * 2**20),
            result_ttl_s=args.result_ttl,
        ),
    )
    app = make_app(data_dir, keys, limits, compress=not args.no_zstd, device=args.device)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        sys.exit(f"cannot listen on {args.host}:{args.port}: {exc.strerror}")
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    print(f"gemlab local Tinker server: data in {data_dir}", flush=True)
    print(f"export TINKER_BASE_URL=http://{shown}:{port}", flush=True)
    for key in keys[: args.keys]:
        print(f"export TINKER_API_KEY={key}", flush=True)
    logging.basicConfig(level=logging.WARNING)
    max_head = int(args.max_header_kb * 1024)
    too_large = json.dumps(
        error_body(f"the request's head is over the server's limit of {max_head} bytes (its --max-header-kb)")
    )
    limited = asgi_limits.uvicorn_options(args.read_timeout, max_head, too_large.encode())
    config = uvicorn.Config(
        app, log_level="warning", timeout_keep_alive=75, timeout_graceful_shutdown=SHUTDOWN_GRACE_S, **limited
    )
    uvicorn.Server(config).run(sockets=[sock])
    stop_work()


def stop_work() -> None:
    """After a stop (SIGTERM, Ctrl-C) has closed the server: cancel the work still queued, let the
    training worker finish the unit it runs (a save finishes whole or never starts: nothing is
    half-written), then exit at once, without waiting for a sampling batch nobody will fetch."""
    from tinker_emulator.futures import TRAINING, cancel_queued_work, get_worker

    cancel_queued_work()
    get_worker(TRAINING).drain()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tokenizer"]:
        from tinker_emulator.workshop_server.tokenizer import install_tokenizer

        if len(argv) != 2:
            sys.exit("usage: python -m tinker_emulator.workshop_server tokenizer ORG/MODEL")
        try:
            print(install_tokenizer(argv[1]))
        except ValueError as exc:
            sys.exit(str(exc))
        return
    serve(parse_args(argv))


if __name__ == "__main__":
    main()
