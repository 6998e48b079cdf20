"""The native core's stamped read against the Python road (``proxy/stamps.py``): the same byte
streams, read by both, give the same bytes, kernel stamps on both within the same bounds, the
same end of stream and the same errors; and the core is loaded wherever the install could build
it (a silent fallback to the Python road fails here with the reason)."""

from __future__ import annotations

import importlib.util
import os
import select
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fetchlat import native
from fetchlat.proxy import clock, stamps
from fetchlat.proxy.stamps import SO_TIMESTAMPNS, StampCounts, StampedReader

from testkit.stamping import kernel_stamping

ROOT = Path(__file__).resolve().parents[2]
CORE = native.core()
needs_core = pytest.mark.skipif(CORE is None, reason=f"native core not loaded: {native.reason()}")


def _setup_module() -> Any:
    spec = importlib.util.spec_from_file_location("fetchlat_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_core_is_loaded_where_the_install_could_build_it() -> None:
    why_not = _setup_module().why_not_native()
    if why_not is None:
        assert CORE is not None, native.reason()
        assert stamps.road() == "native"
    else:
        assert CORE is None and stamps.road() == "python"


def test_a_stale_or_switched_off_core_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    native._load.cache_clear()
    try:
        assert native.core() is None and native.reason() == "FETCHLAT_NATIVE=0"
        monkeypatch.delenv(native.NATIVE_ENV)
        monkeypatch.setenv(native.PURE_ENV, "1")
        native._load.cache_clear()
        assert native.core() is None and native.reason() == "FETCHLAT_PURE_PYTHON=1"
        monkeypatch.delenv(native.PURE_ENV)
        if CORE is not None:
            # a copy of the checkout's core and specs is the build's; an edit to a module of
            # relay/ or to a spec the layouts come from makes it stale
            src, specs = tmp_path / "src", tmp_path / "specs"
            shutil.copytree(native.SOURCE_DIR, src)
            shutil.copytree(native.SPECS_DIR, specs)
            monkeypatch.setattr(native, "SOURCE_DIR", src)
            monkeypatch.setattr(native, "SPECS_DIR", specs)
            native._load.cache_clear()
            assert native.core() is not None, native.reason()
            for edited in (src / "relay" / "pair.rs", specs / CORE.LAYOUT_SPECS[0]):
                kept = edited.read_text()
                edited.write_text(kept + "// edited\n")
                native._load.cache_clear()
                assert native.core() is None and native.reason().startswith("stale native build"), edited
                edited.write_text(kept)
    finally:
        native._load.cache_clear()


class Sink:
    def __init__(self) -> None:
        self.data = bytearray()
        self.stamps: list[int] = []
        self.eof = 0
        self.errors: list[OSError] = []

    def deliver(self, data: bytes, t_ns: int) -> None:
        assert isinstance(data, bytes)
        self.data += data
        self.stamps.append(t_ns)


@contextmanager
def pair(stamped: bool = True) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A loopback TCP connection: (sender, receiver), the receiver non-blocking, stamped."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    if stamped:
        receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    receiver.setblocking(False)
    try:
        yield sender, receiver
    finally:
        sender.close()
        receiver.close()


def reader(sock: socket.socket, sink: Sink) -> StampedReader:
    return StampedReader(None, sock, StampCounts(), sink.deliver, lambda: setattr(sink, "eof", sink.eof + 1),
                         sink.errors.append)  # type: ignore[arg-type]  # no loop: reads are called by hand


def read_all(r: StampedReader, road: str, sink: Sink, want: int) -> None:
    deadline = time.monotonic() + 10
    while len(sink.data) < want and time.monotonic() < deadline:
        select.select([r.fd], [], [], 1.0)
        if road == "native":
            r._readable_native(stamps._NATIVE_RECV)
        else:
            r._readable_python()


PIECES = [b"x", bytes(range(256)) * 3, os.urandom(70_000), os.urandom(300_000), b"\x00\x00\x00\x08abcdefgh"]


@needs_core
@pytest.mark.parametrize("stamped", [True, False])
def test_both_roads_read_the_same_bytes_with_the_same_kind_of_stamp(stamped: bool) -> None:
    sinks = {"python": Sink(), "native": Sink()}
    with kernel_stamping(), pair(stamped) as (s_py, r_py), pair(stamped) as (s_nat, r_nat):
        readers = {"python": reader(r_py, sinks["python"]), "native": reader(r_nat, sinks["native"])}
        senders = {"python": s_py, "native": s_nat}
        sent = 0
        for piece in PIECES:
            before = clock.now_ns()
            for road in ("python", "native"):
                senders[road].sendall(piece)
            sent += len(piece)
            for road in ("python", "native"):
                n_before = len(sinks[road].stamps)
                read_all(readers[road], road, sinks[road], sent)
                after = clock.now_ns()
                # every stamp of this piece: after it was sent, never after it was read
                assert all(before <= t <= after for t in sinks[road].stamps[n_before:]), road
        for road in ("python", "native"):
            senders[road].shutdown(socket.SHUT_WR)
            select.select([readers[road].fd], [], [], 5.0)
            getattr(readers[road], "_readable_native" if road == "native" else "_readable_python")(
                *([stamps._NATIVE_RECV] if road == "native" else []))
        counts = {road: (r.counts.kernel, r.counts.clock) for road, r in readers.items()}
    assert sinks["python"].data == sinks["native"].data == b"".join(PIECES)
    for road in ("python", "native"):
        reads = len(sinks[road].stamps)
        assert counts[road] == ((reads, 0) if stamped else (0, reads)), (road, counts)
        assert sinks[road].eof == 1 and not sinks[road].errors and readers[road].stopped


@needs_core
def test_nothing_there_and_a_failed_read_are_the_same_on_both_roads() -> None:
    outcome: dict[str, tuple[int, int, int | None]] = {}
    for road in ("python", "native"):
        sink = Sink()
        with pair() as (_sender, receiver):
            r = reader(receiver, sink)
            call = (lambda r=r: r._readable_native(stamps._NATIVE_RECV)) if road == "native" else r._readable_python
            call()  # a spurious wake-up: nothing delivered, nothing ended
            assert not sink.data and sink.eof == 0 and not sink.errors
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, r.fd)  # the descriptor now names a file, not a socket: the read fails
            os.close(devnull)
            call()
        outcome[road] = (len(sink.data), sink.eof, sink.errors[0].errno if sink.errors else None)
        assert r.stopped
    assert outcome["python"] == outcome["native"] and outcome["native"][2] is not None, outcome


@needs_core
def test_both_roads_move_a_kernel_stamp_onto_the_monotonic_clock_by_one_rule() -> None:
    """The relay's thread (``stamps.rs``, ``WallOffset``) and the event loop (``proxy/clock.py``)
    read wall - monotonic the same way: the same refresh, tries and tightness, and readings taken
    side by side agree within the tightness of a pair of reads."""
    assert CORE is not None
    # the constants are the core's (tests/test_core_constants.py); here, the readings
    gaps = []
    for _ in range(50):
        py = clock.read_wall_minus_mono_ns()
        core = CORE.wall_minus_mono_ns()
        gaps.append(abs(core - py))
    assert sorted(gaps)[len(gaps) // 2] < clock.TIGHT_NS, sorted(gaps)[:10]
