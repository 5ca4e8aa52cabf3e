"""JSON on the hot path: the standard library, orjson and msgspec on the bodies a write moves.

    python bench/bench_json.py

No cluster: each library, side by side in one process, on what one replica write of a
1 x 5,000 fan-out costs in JSON: the body it sends (encode), the server's answer and the
watch event of its own write (decode, managedFields included), a LIST page of 500 such
objects (decode) and the content digest (sorted-key encode, then blake2b). Prints CPU
microseconds per operation and the ratio to the standard library's in the same run. msgspec
is measured when it is installed (it is not a dependency).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

import orjson

from harness import replica_body

try:
    import msgspec
except ImportError:  # measured only where installed
    msgspec = None


def realistic() -> tuple[dict[str, Any], bytes, bytes, bytes, list[Any]]:
    """(a replica's body, the server's answer to it, its watch event, a LIST page of 500,
    what the digest serialises)."""
    body = replica_body("configmirror-bench-sources-000", "src-0000", "bench-0001")
    stored = json.loads(json.dumps(body))
    meta = stored["metadata"]
    meta.update({
        "uid": "3f1e0c52-8a4b-4c8e-9d0e-1b2c3d4e5f60", "resourceVersion": "123456",
        "creationTimestamp": "2026-12-02T06:00:00Z",
        "managedFields": [{
            "manager": "configmirror", "operation": "Update", "apiVersion": "v1",
            "time": "2026-12-02T06:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:payload": {}}, "f:metadata": {
                "f:annotations": {".": {}, **{f"f:{k}": {} for k in meta["annotations"]}},
                "f:labels": {".": {}, **{f"f:{k}": {} for k in meta["labels"]}}}}}]})
    answer = json.dumps(stored, separators=(",", ":")).encode()
    event = json.dumps({"type": "ADDED", "object": stored}, separators=(",", ":")).encode()
    page = json.dumps({"kind": "ConfigMapList", "apiVersion": "v1",
                       "metadata": {"resourceVersion": "1"}, "items": [stored] * 500}).encode()
    digested = [body["data"], {}, False, meta["labels"], meta["annotations"]]
    return body, answer, event, page, digested


def per_call(step: Callable[[], object], seconds: float = 0.5) -> float:
    """CPU microseconds per call of `step`, best of three rounds."""
    step()
    best = float("inf")
    for _ in range(3):
        count, started = 0, time.process_time()
        while (used := time.process_time() - started) < seconds / 3:
            for _ in range(20):
                step()
            count += 20
        best = min(best, used / count * 1e6)
    return best


def main() -> None:
    body, answer, event, page, digested = realistic()
    print(f"JSON per write: body {len(orjson.dumps(body))} B, answer {len(answer)} B, "
          f"event {len(event)} B, LIST page {len(page) // 1024} KiB")

    def blake(blob: bytes) -> str:
        return hashlib.blake2b(blob, digest_size=16).hexdigest()

    cases: list[tuple[str, dict[str, Callable[[], object]]]] = [
        ("encode the body", {
            "json": lambda: json.dumps(body, separators=(",", ":")).encode(),
            "orjson": lambda: orjson.dumps(body)}),
        ("decode the answer", {"json": lambda: json.loads(answer),
                               "orjson": lambda: orjson.loads(answer)}),
        ("decode the watch event", {"json": lambda: json.loads(event),
                                    "orjson": lambda: orjson.loads(event)}),
        ("decode a LIST page", {"json": lambda: json.loads(page),
                                "orjson": lambda: orjson.loads(page)}),
        ("the digest", {
            "json": lambda: blake(json.dumps(digested, sort_keys=True,
                                             separators=(",", ":")).encode()),
            "orjson": lambda: blake(orjson.dumps(digested, option=orjson.OPT_SORT_KEYS))}),
    ]
    if msgspec is not None:
        encoder, decoder = msgspec.json.Encoder(), msgspec.json.Decoder()
        sorted_encoder = msgspec.json.Encoder(order="sorted")
        extra = [lambda: encoder.encode(body), lambda: decoder.decode(answer),
                 lambda: decoder.decode(event), lambda: decoder.decode(page),
                 lambda: blake(sorted_encoder.encode(digested))]
        for (_, steps), step in zip(cases, extra, strict=True):
            steps["msgspec"] = step
    per_write = dict.fromkeys(cases[0][1], 0.0)
    for name, steps in cases:
        times = {library: per_call(step) for library, step in steps.items()}
        print(f"  {name:24s}" + "".join(
            f"  {library} {us:8.1f} us ({us / times['json']:4.2f}x)"
            for library, us in times.items()))
        if name != "decode a LIST page":  # once per informer page, not per write
            for library, us in times.items():
                per_write[library] += us
    print("  per write (encode, answer, event, digest)" + "".join(
        f"  {library} {us:.0f} us" for library, us in per_write.items()))


if __name__ == "__main__":
    main()
