"""How the commands speak to the user: the name they were called by, and -o json or yaml."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import yaml

FORMATS = ("text", "json", "yaml")  # -o of plan, status, wait and version


def prog() -> str:
    """How the user called us: `kubectl configmirror` as a kubectl plugin (kubectl runs the
    `kubectl-configmirror` executable), else `configmirror`."""
    return "kubectl configmirror" if os.path.basename(sys.argv[0]).startswith(
        "kubectl-configmirror") else "configmirror"


def dump(doc: dict[str, Any], output: str) -> str:
    """`doc` as -o json or -o yaml prints it (ending in a newline)."""
    if output == "yaml":
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return json.dumps(doc, indent=2) + "\n"
