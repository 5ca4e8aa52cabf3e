"""`make demo`: a local control plane, the operator, and the example from deploy/examples/.

Prints the replicas configmirror made and a KUBECONFIG= line to explore with kubectl, then
runs until Ctrl-C and stops everything. `--once` stops right after printing (used by tests).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path

from configmirror_testing.controlplane import ControlPlane, find_assets
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import WaitTimeout, wait_for

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deploy" / "examples"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="print the result and stop")
    args = parser.parse_args()
    assets = find_assets(REPO, build=True)
    if assets is None:
        print("demo: no control plane; run `make controlplane` (needs Go)", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("demo: starting etcd and kube-apiserver ...", flush=True)
    with ControlPlane(assets) as plane:
        log = plane.dir / "operator.log"
        operator = OperatorProcess(plane.kubeconfig, log)
        try:
            print(plane.kubectl("apply", "-f", str(EXAMPLES / "namespaces.yaml")).stdout, end="")
            print(plane.kubectl("apply", "-f", str(EXAMPLES / "source.yaml")).stdout, end="")
            replicas = wait_for_replicas(plane, expected=3)
            print("\ndemo: configmirror replicated platform/shared-ca:\n" + replicas)
            print("demo: Events on the source:\n" + wait_for_events(plane))
            print(f"demo: explore it:  export KUBECONFIG={plane.kubeconfig}")
            print(f"demo: operator log: {log}")
            if not args.once:
                print("demo: try `kubectl label ns team-sandbox env=prod` or edit the source; "
                      "Ctrl-C stops everything", flush=True)
                while not stop.is_set() and operator.proc.poll() is None:
                    stop.wait(0.5)
        finally:
            code = operator.stop(30)
            print(f"demo: operator exited with {code}; stopping the control plane")
    return 0 if code == 0 else 1


def wait_for_events(plane: ControlPlane, timeout: float = 30) -> str:
    """The source's Events once its `Replicated` Event is written (the operator writes one
    per change, a moment after the last replica)."""
    table = ""

    def replicated() -> bool:
        nonlocal table
        table = plane.kubectl("get", "events", "-n", "platform").stdout
        return "Replicated" in table

    with contextlib.suppress(WaitTimeout):
        wait_for(replicated, timeout, "the Replicated Event", interval=0.2)
    return table


def wait_for_replicas(plane: ControlPlane, expected: int, timeout: float = 30) -> str:
    """The replica table once it has `expected` rows (or as it is after `timeout`)."""
    table = ""

    def enough() -> bool:
        nonlocal table
        table = plane.kubectl("get", "configmaps", "-A", "-l", "configmirror.io/replica=true",
                              "-L", "app.kubernetes.io/part-of").stdout
        return len(table.strip().splitlines()) - 1 >= expected

    with contextlib.suppress(WaitTimeout):
        wait_for(enough, timeout, f"{expected} replicas", interval=0.2)
    return table


if __name__ == "__main__":
    sys.exit(main())
