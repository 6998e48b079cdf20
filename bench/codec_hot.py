"""Small exchanges replayed hot through one connection's codec: the Python road
(``KafkaConnection``: request framed and read, answer matched, forwarded, events made) against the
native core's ``Wire`` (framing, headers and correlation as records, drained every 64 exchanges).
µs per exchange, best of ``--repeat``. What the same work costs inside the proxy, between
syscalls, is in ``docs/performance.md`` ("Which part of the road").

    python bench/codec_hot.py
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.protocol import apis
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame, response_frame
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.schema import load

from testkit.wire_roads import CORE, wire


def exchanges(n: int) -> dict[str, tuple[int, list[bytes], list[bytes]]]:
    tid = uuid.UUID(int=7)
    md_req = encode(load("MetadataRequest"), 12, {"Topics": [{"Name": "t", "TopicId": uuid.UUID(int=0)}],
                                                  "AllowAutoTopicCreation": False,
                                                  "IncludeTopicAuthorizedOperations": False})
    md_resp = encode(load("MetadataResponse"), 12, {
        "ThrottleTimeMs": 0, "Brokers": [{"NodeId": 0, "Host": "127.0.0.1", "Port": 9092, "Rack": None}],
        "ClusterId": "c", "ControllerId": 0,
        "Topics": [{"ErrorCode": 0, "Name": "t", "TopicId": tid, "IsInternal": False, "Partitions": [
            {"ErrorCode": 0, "PartitionIndex": 0, "LeaderId": 0, "LeaderEpoch": 0, "ReplicaNodes": [0],
             "IsrNodes": [0], "OfflineReplicas": []}], "TopicAuthorizedOperations": -2147483648}]})
    av_req = encode(load("ApiVersionsRequest"), 3, {"ClientSoftwareName": "b", "ClientSoftwareVersion": "1"})
    av_resp = encode(load("ApiVersionsResponse"), 3, {"ErrorCode": 0, "ThrottleTimeMs": 0, "ApiKeys": [
        {"ApiKey": k, "MinVersion": 0, "MaxVersion": 5} for k in range(60)]})
    out = {}
    for name, key, ver, req, resp in (("ApiVersions v3", apis.API_VERSIONS, 3, av_req, av_resp),
                                      ("Metadata v12", apis.METADATA, 12, md_req, md_resp)):
        out[name] = (key, [request_frame(key, ver, i, "bench-client", req) for i in range(n)],
                     [response_frame(key, ver, i, resp) for i in range(n)])
    return out


def best(repeat: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exchanges", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.exchanges
    rewriter = ResponseRewriter(lambda node, host, port: ("127.0.0.1", 40000 + node))
    for name, (_, reqs, resps) in exchanges(n).items():
        def python(rw: ResponseRewriter | None, reqs: list[bytes] = reqs, resps: list[bytes] = resps) -> float:
            conn = KafkaConnection(rewriter=rw)
            t0 = time.perf_counter()
            for i in range(n):
                conn.receive_from_client(reqs[i], i)
                conn.forward_from_broker(resps[i], i)
                conn.after_write()
            return (time.perf_counter() - t0) / n * 1e6

        def native(reqs: list[bytes] = reqs, resps: list[bytes] = resps) -> float:
            w = wire()
            t0 = time.perf_counter()
            for i in range(n):
                w.from_client(reqs[i], i)
                w.from_broker(resps[i], i)
                if i % 64 == 63:
                    w.drain()
            w.drain()
            return (time.perf_counter() - t0) / n * 1e6

        line = (f"{name:15s} Python road {best(args.repeat, lambda: python(None)):5.2f} µs, "
                f"with the sidecar's rewriter {best(args.repeat, lambda: python(rewriter)):5.2f} µs")
        if CORE is not None:
            line += f", native Wire {best(args.repeat, native):5.2f} µs"
        print(line)


if __name__ == "__main__":
    main()
