"""What keeps HTTP fast: the server's connections send small responses at once (no Nagle), the
sampling gate (tinker_emulator/workshop_server/gate.py) starts a session's burst of requests together, route
dependencies run on the event loop (no thread hop), and the SDK is told to use its pyqwest
transport (half httpx's CPU per request, every connection kept open)."""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import Future

import pytest

from tinker_emulator.workshop_server import state
from tinker_emulator.workshop_server.__main__ import listening_socket
from tinker_emulator.workshop_server.gate import SampleGate
from tinker_emulator.workshop_server.routes.sessions import client_config


class Started:
    """What a local backend's ``sample`` returns: an APIFuture, whose ``future()`` is a concurrent future."""

    def __init__(self, log: list[int], value: int):
        log.append(value)
        self._done: Future = Future()
        self._done.set_result(value)

    def future(self) -> Future:
        return self._done


async def burst(gate: SampleGate, session: str, values: list[int], log: list[int], gap_s: float = 0.0) -> list[int]:
    async def one(value: int) -> int:
        return await gate.run(session, lambda: Started(log, value))

    tasks = []
    for value in values:
        tasks.append(asyncio.ensure_future(one(value)))
        await asyncio.sleep(gap_s)
    return await asyncio.gather(*tasks)


def test_requests_a_few_ms_apart_start_in_one_turn():
    async def main() -> None:
        gate, log = SampleGate(quiet_s=0.2, min_quiet_s=0.2, turn_gap_s=0.05), []
        task = asyncio.ensure_future(burst(gate, "a", [1, 2, 3, 4], log, gap_s=0.01))
        await asyncio.sleep(0.1)
        assert log == []  # none started while more were coming
        assert await task == [1, 2, 3, 4] and log == [1, 2, 3, 4]
        assert gate.expected("a") == 4

    asyncio.run(main())


def test_a_burst_as_large_as_the_last_goes_without_waiting_for_quiet():
    async def main() -> None:
        gate, log = SampleGate(quiet_s=0.01), []
        await burst(gate, "a", [1, 2, 3], log)
        await asyncio.sleep(0.1)  # the next requests are the session's next turn
        gate.quiet_s = gate.max_wait_s = 60.0  # only the count can release it now
        assert await asyncio.wait_for(burst(gate, "a", [4, 5, 6], log), timeout=10) == [4, 5, 6]

    asyncio.run(main())


def test_a_smaller_burst_goes_after_the_quiet_time_and_sessions_wait_apart():
    async def main() -> None:
        gate, log = SampleGate(quiet_s=0.01), []
        await burst(gate, "a", [1, 2, 3], log)
        assert await asyncio.wait_for(burst(gate, "a", [4, 5], log), timeout=10) == [4, 5]
        assert await asyncio.wait_for(burst(gate, "b", [6], log), timeout=10) == [6]
        await asyncio.sleep(0.1)  # their turns are over
        gate.keep(["b"])
        assert gate.expected("a") == 0 and gate.expected("b") == 1

    asyncio.run(main())


def test_a_burst_split_by_a_late_request_does_not_lower_what_the_next_waits_for():
    """A turn's size counts the requests a quiet time let go early, so bursts split again and
    again (a loaded client) do not shrink what the session waits for to 2 for good."""

    async def main() -> None:
        gate, log = SampleGate(quiet_s=0.01, min_quiet_s=0.01, memory=4, turn_gap_s=0.5), []
        await burst(gate, "a", [1, 2, 3, 4], log)
        for _ in range(gate.memory + 2):
            await asyncio.sleep(0.6)  # the next turn
            calls = [asyncio.ensure_future(gate.run("a", lambda v=v: Started(log, v))) for v in (1, 2)]
            count = len(log)
            while len(log) < count + 2:  # the quiet time let the first two go
                await asyncio.sleep(0.005)
            calls += [asyncio.ensure_future(gate.run("a", lambda v=v: Started(log, v))) for v in (3, 4)]
            await asyncio.wait_for(asyncio.gather(*calls), timeout=10)
        await asyncio.sleep(0.6)
        assert gate.expected("a") == 4
        gate.quiet_s = gate.min_quiet_s = gate.max_wait_s = 60.0  # only the count can release it now
        assert await asyncio.wait_for(burst(gate, "a", [5, 6, 7, 8], log), timeout=10) == [5, 6, 7, 8]

    asyncio.run(main())


def test_the_quiet_time_follows_the_gaps_between_a_sessions_requests():
    """Requests that come together make a short quiet time (a smaller burst is not held 25 ms);
    requests that come 20 ms apart make the longest."""

    async def main() -> None:
        gate, log = SampleGate(quiet_s=0.025, min_quiet_s=0.002, gap_factor=2.0, turn_gap_s=1.0), []
        assert gate.quiet("a") == 0.025  # nothing known yet
        await burst(gate, "a", list(range(8)), log)
        assert gate.quiet("a") == 0.002
        await burst(gate, "b", [1, 2, 3, 4], log, gap_s=0.02)
        assert gate.quiet("b") == 0.025

    asyncio.run(main())


def test_a_bad_request_fails_alone():
    async def main() -> None:
        gate, log = SampleGate(quiet_s=0.01), []

        def bad() -> Started:
            raise ValueError("bad prompt")

        good = asyncio.ensure_future(gate.run("a", lambda: Started(log, 1)))
        with pytest.raises(ValueError, match="bad prompt"):
            await gate.run("a", bad)
        assert await good == 1

    asyncio.run(main())


def test_the_servers_connections_have_nagle_off():
    """asyncio sets TCP_NODELAY on the connections of the server's socket (else each response
    waits 40 ms for a delayed ACK)."""

    async def main() -> int:
        accepted: asyncio.Future = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=listening_socket("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        nodelay = await asyncio.wait_for(accepted, timeout=10)
        writer.close()
        server.close()
        return nodelay

    assert asyncio.run(main()) != 0


def test_a_client_can_connect_as_soon_as_the_address_is_printed():
    """The server prints its address before uvicorn starts; the socket already listens, so a
    connection then waits in the backlog (a bound socket that does not listen refuses it, which
    a loaded machine showed)."""
    sock = listening_socket("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname(), timeout=10):
            pass
    finally:
        sock.close()


def test_route_dependencies_run_on_the_event_loop():
    """FastAPI runs a plain ``def`` dependency in its thread pool: two thread hops per request."""
    assert asyncio.iscoroutinefunction(state.server) and asyncio.iscoroutinefunction(state.tenant)


def test_clients_are_told_to_use_the_sdks_pyqwest_transport():
    assert client_config(compress=True).use_pyqwest_transport is True


def test_a_data_dir_that_cannot_be_made_is_one_line(tmp_path):
    from tinker_emulator.workshop_server.__main__ import main

    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit) as exited:
        main(["--data-dir", str(tmp_path / "a-file" / "data"), "--port", "0"])
    assert exited.value.code == f"cannot use --data-dir {tmp_path / 'a-file' / 'data'}: Not a directory"
