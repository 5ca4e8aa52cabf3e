"""Secrets: the operator holds only the Secrets it was told to, whatever else the cluster has.

    python bench/bench_secret_memory.py [--secrets 5000] [--size 102400]

One operator with Secrets on (--secret-names wildcard-tls) is measured idle in a cluster with
no other Secrets, then a second one after the cluster got `--secrets` unrelated Secrets of
`--size` bytes each (5,000 x 100 KiB = 488 MiB by default). Goal: the same RSS within noise,
and no request of the operator returned any of them (the apiserver's audit log: every
Secret list and watch it made carried a metadata.name field selector of a listed name).
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from harness import Session, common_args, parallel

NAME = "wildcard-tls"


def unscoped_secret_reads(session: Session, since: float) -> int | None:
    """Operator requests after `since` that could have returned a Secret not named NAME
    (None on an external cluster, which has no audit log to read)."""
    plane = session.cluster.plane
    if plane is None:
        return None
    found = 0
    for event in plane.audit_events():
        stamp = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        ref = event.get("objectRef") or {}
        if (stamp.timestamp() < since or ref.get("resource") != "secrets"
                or not event.get("userAgent", "").startswith("configmirror/")):
            continue
        scoped = f"fieldSelector=metadata.name%3D{NAME}" in event["requestURI"]
        if (event["verb"] in ("list", "watch") and not scoped) or ref.get("name") not in (
                None, NAME):
            found += 1
    return found


def measure(session: Session, workers: int, label: str) -> int:
    operator = session.operator(workers, "--secret-names", NAME,
                                "--secret-source-namespaces", "*")
    operator.wait_ready(120)
    session.idle(operator, 120)
    rss = operator.rss_bytes()
    operator.stop()
    print(f"  {label:<34} operator RSS {rss / 1024 / 1024:6.1f} MiB")
    return rss


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--secrets", type=int, default=5000)
    parser.add_argument("--size", type=int, default=100 * 1024)
    args = parser.parse_args()
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        (src,) = cluster.namespaces("sec-src", 1)
        targets = cluster.namespaces("sec", 50)
        cluster.kube.request("create", f"/api/v1/namespaces/{src}/secrets", body={
            "metadata": {"name": NAME, "annotations": {
                "configmirror.io/replicate-to": "sec-0*"}},
            "type": "Opaque", "data": {"tls.crt": "Y2VydA=="}})
        print(f"secrets: memory with {args.secrets} unrelated Secrets of {args.size} B "
              f"(one listed name, replicated to {len(targets)} namespaces)")
        without = measure(session, args.workers, "no unrelated Secrets")
        blob = os.urandom(args.size * 3 // 4).hex()[:args.size]  # ~size bytes of data
        unrelated = [(targets[i % len(targets)], i) for i in range(args.secrets)]
        took = parallel(lambda p: cluster.kube.request(
            "create", f"/api/v1/namespaces/{p[0]}/secrets",
            body={"metadata": {"name": f"unrelated-{p[1]:05d}"},
                  "stringData": {"blob": blob}}, timeout=120), unrelated, 8)
        print(f"  created {args.secrets} unrelated Secrets in {took:.0f} s")
        since = time.time()
        with_them = measure(session, args.workers, f"{args.secrets} unrelated Secrets")
        print(f"  RSS with / without = {with_them / without:.3f} (goal: 1.0 within noise)")
        returned = unscoped_secret_reads(session, since)
        print(f"  operator requests that could return an unrelated Secret: {returned} "
              f"(goal: 0)")


if __name__ == "__main__":
    main()
