"""`make demo`: a local control plane, the operator, and the example from deploy/examples/.

Prints the replicas configmirror made and a KUBECONFIG= line to explore with kubectl, then
runs until Ctrl-C and stops everything. `--once` stops right after printing (used by tests).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from configmirror.envtest import ControlPlane, find_assets, free_port

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
        operator = subprocess.Popen(
            [sys.executable, "-m", "configmirror", "run", "--kubeconfig", str(plane.kubeconfig),
             "--metrics-bind-address", f"127.0.0.1:{free_port()}",
             "--health-probe-bind-address", f"127.0.0.1:{free_port()}"],
            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        try:
            print(plane.kubectl("apply", "-f", str(EXAMPLES / "namespaces.yaml")).stdout, end="")
            print(plane.kubectl("apply", "-f", str(EXAMPLES / "source.yaml")).stdout, end="")
            replicas = wait_for_replicas(plane, expected=3)
            print("\ndemo: configmirror replicated platform/shared-ca:\n" + replicas)
            print("demo: Events on the source:\n" +
                  plane.kubectl("get", "events", "-n", "platform").stdout)
            print(f"demo: explore it:  export KUBECONFIG={plane.kubeconfig}")
            print(f"demo: operator log: {log}")
            if not args.once:
                print("demo: try `kubectl label ns team-sandbox env=prod` or edit the source; "
                      "Ctrl-C stops everything", flush=True)
                while not stop.is_set() and operator.poll() is None:
                    stop.wait(0.5)
        finally:
            operator.send_signal(signal.SIGTERM)
            code = operator.wait(30)
            print(f"demo: operator exited with {code}; stopping the control plane")
    return 0 if code == 0 else 1


def wait_for_replicas(plane: ControlPlane, expected: int, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = plane.kubectl("get", "configmaps", "-A", "-l", "configmirror.io/replica=true",
                            "-L", "app.kubernetes.io/part-of").stdout
        if len(out.strip().splitlines()) - 1 >= expected or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
