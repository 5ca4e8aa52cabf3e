"""The reference pages under docs/reference/ are what hack/docs_reference.py makes of the code."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference",
                                                  REPO / "hack" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_reference_pages_are_what_the_generator_makes() -> None:
    stale = _generator().stale()
    assert not stale, (f"docs/reference/{', '.join(stale)} differ(s) from the code: "
                       "run `make docs-reference` and commit the result")


def test_every_event_reason_the_code_records_has_a_meaning() -> None:
    generator = _generator()
    found = generator.events_in_code()
    assert {"Replicated", "InvalidSpec", "TargetConflict", "PullNotAllowed"} <= set(found)
    assert set(found) <= set(generator.EVENT_MEANINGS)
    assert found["Replicated"] == "Normal" and found["TargetConflict"] == "Warning"


def test_every_annotation_the_spec_module_names_is_in_its_table() -> None:
    from configmirror.replication import spec
    named = {value for name, value in vars(spec).items()
             if name.isupper() and isinstance(value, str)
             and re.fullmatch(re.escape(spec.PREFIX) + r"[a-z-]+", value)}
    listed = [a.name for a in spec.ANNOTATIONS]
    assert named == set(listed) and len(listed) == len(set(listed))


# -- what the README and the site tell a reader to run holds for this tree ----------------------

_PATH = re.compile(r"(?<![\w./-])((?:deploy|hack|charts|docs|tests|src|bench|testing)/[\w./-]*\w)")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "SECURITY.md",
            REPO / "charts" / "configmirror" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_every_repository_path_and_link_the_documents_name_exists() -> None:
    missing = []
    for document in _documents():
        text = document.read_text()
        for path in _PATH.findall(text):
            if not (REPO / path).exists():
                missing.append(f"{document.relative_to(REPO)}: {path}")
        for link in _LINK.findall(re.sub(r"`[^`]*`", "", text)):
            if "://" not in link and not (document.parent / link).exists():
                missing.append(f"{document.relative_to(REPO)}: ({link})")
    assert not missing, missing


def test_the_readme_quickstart_loads_the_image_deploy_runs_and_labels_what_it_selects() -> None:
    from configmirror import __version__
    readme = (REPO / "README.md").read_text()
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    [image] = kustomization["images"]
    assert image["newTag"] == __version__
    assert f"kind load docker-image configmirror:{__version__}" in readme
    deployment = yaml.safe_load((REPO / "deploy" / "deployment.yaml").read_text())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert "--source-namespace-selector=configmirror.io/source=true" in container["args"]
    assert "kubectl label namespace platform configmirror.io/source=true" in readme
    assert "kubectl apply -k deploy/" in readme


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs gives `page`'s headings (the toc extension, as mkdocs.yml configures it)."""
    import markdown

    html = markdown.markdown(page.read_text(), extensions=["toc", "attr_list", "fenced_code"])
    return set(re.findall(r'<h[1-6] id="([^"]+)"', html))


def test_every_alert_links_its_runbook_by_an_anchor_the_docs_have() -> None:
    """runbook_url is a path in the docs site (reference/alerts/#<alert>, the site's URL of
    docs/reference/alerts.md and that alert's section), in the chart's rules file and in
    deploy/monitoring/ alike; the chart's runbookBaseURL and the documented kustomize patch
    put a site's URL before it."""
    anchors = _anchors(REPO / "docs" / "reference" / "alerts.md")
    files = {"chart": yaml.safe_load(
                 (REPO / "charts/configmirror/files/prometheus-rules.yaml").read_text()),
             "deploy": yaml.safe_load(
                 (REPO / "deploy/monitoring/prometheusrule.yaml").read_text())["spec"]}
    for where, rules in files.items():
        alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
        assert len(alerts) >= 7, where
        for rule in alerts:
            url = rule["annotations"].get("runbook_url", "")
            page, _, anchor = url.partition("#")
            assert page == "reference/alerts/", (where, rule["alert"], url)
            assert anchor == rule["alert"].lower() and anchor in anchors, \
                (where, rule["alert"], url, sorted(anchors))


# -- the chart's rules that chart-values.md shows hold what the operator takes ---------------------

def test_the_charts_delete_grace_pattern_takes_exactly_what_the_flag_takes() -> None:
    """values.schema.json's deleteGrace (a string; a number is checked as one, minimum 0)
    matches a text exactly when --delete-grace parses it: Go durations, a bare number of
    seconds, a sign, a negative only when zero."""
    import itertools
    import json
    import random

    from configmirror.operator.settings import parse_duration

    schema = json.loads((REPO / "charts/configmirror/values.schema.json").read_text())
    node = schema["properties"]["deleteGrace"]
    assert node["type"] == ["string", "number"] and node["minimum"] == 0
    pattern = re.compile(node["pattern"], re.ASCII)

    def takes(text: str) -> bool:
        try:
            parse_duration(text)
        except ValueError:
            return False
        return True

    written = ["60", "0", "0.5", ".5", "5.", "90s", "10m", "1h30m", "1.5s", "300ms", "1ns", "1us",
               "1\u00b5s", "1\u03bcs", "+5s", "-0", "-0s", "-0.0m0s", "-.0h", " 60s ", "", " ",
               "-1s", "-5", "-0.1", "a minute", "1d", "1.2.3s", "s", ".s", "1m 30s", "1e3",
               "inf", "nan", "0x10", "1_000", "++1s", "+-0", "1h-30m", "1.s", "m1", "1mm"]
    generated = random.Random(7)
    alphabet = "0123456789.+-smhun\u00b5 "
    fuzzed = ["".join(generated.choice(alphabet) for _ in range(generated.randint(1, 7)))
              for _ in range(3000)]
    differ = [text for text in itertools.chain(written, fuzzed)
              if (pattern.search(text) is not None) != takes(text)]
    assert not differ, differ
