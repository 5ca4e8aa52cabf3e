"""configmirror's alerts and dashboard: promtool checks and unit-tests the rules, every metric a
rule or a panel reads is in a running operator's /metrics, the rules stay quiet on a healthy
leader and standby (their real metrics), the chart and deploy/monitoring/ carry the same rules,
and the chart ships the dashboard for Grafana's sidecar.

promtool (and promql-selectors, which reads PromQL with Prometheus' own parser) is built once
by hack/promtool/build.sh (configmirror_testing.tools: without it these tests skip locally and
fail in CI).
"""

from __future__ import annotations

import json
import math
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.chart import (
    CHART,
    documents,
    one,
    template,
    values_file,
    without_helm_labels,
    yaml_diff,
)
from configmirror_testing.cluster import REPO, Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators, configmap, read
from configmirror_testing.helm import Helm
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.promtool import Promtool, Selector
from configmirror_testing.tools import require_tool
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane

RULES = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
RULE_TESTS = REPO / "tests" / "monitoring" / "prometheus-rules.test.yaml"
DEPLOY_MONITORING = REPO / "deploy" / "monitoring"
# Labels Prometheus gives every series of a target; they are not in /metrics.
TARGET_LABELS = {"namespace", "job", "instance", "pod", "service", "endpoint", "container"}
# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b")
# The suffixes a scrape's samples carry beyond their family's name, by family type.
SAMPLE_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
                                                                    "_created"),
                   "summary": ("", "_count", "_sum", "_created"), "gauge": ("",),
                   "unknown": ("",), "info": ("_info",), "stateset": ("",)}
MONITORING = {"metrics": {
    "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"},
                       "ruleLabels": {"team": "platform"}},
    "grafanaDashboard": {"enabled": True, "namespace": "grafana",
                         "annotations": {"grafana_folder": "Platform"}}}}


@pytest.fixture(scope="session")
def promtool() -> Promtool:
    return Promtool(require_tool("promtool"))


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]


def alert_names() -> list[str]:
    return [rule["alert"] for rule in rules()]


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels() -> Iterator[dict[str, Any]]:
    for panel in dashboard()["panels"]:
        yield panel
        yield from panel.get("panels", [])


def panel_queries() -> list[str]:
    """Every panel's PromQL, with Grafana's interval variables as Prometheus would get them."""
    return [GRAFANA_INTERVALS.sub("5m", target["expr"])
            for panel in panels() for target in panel.get("targets", [])]


def variable_queries() -> list[str]:
    """The dashboard variables' label_values(SELECTOR, label) queries, as their selectors."""
    found = []
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", var["definition"])
            assert match, f"variable {var['name']}: {var['definition']}"
            found.append(match.group(1))
    return found


# -- the rules, by promtool ---------------------------------------------------------------------

def test_rules_pass_promtool_check(promtool: Promtool) -> None:
    done = promtool("check", "rules", "--lint=all", "--lint-fatal", str(RULES))
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout, done.stdout


def test_rules_pass_their_promtool_unit_tests(promtool: Promtool) -> None:
    done = promtool("test", "rules", str(RULE_TESTS), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout


def test_every_alert_is_unit_tested_both_firing_and_quiet() -> None:
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for case in test.get("alert_rule_test", [])]
    for name in alert_names():
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case.get("exp_alerts") for case in mine), f"{name}: no case where it fires"
        assert any(not case.get("exp_alerts") for case in mine), f"{name}: no quiet case"


def test_every_alert_says_what_happened_and_what_to_check() -> None:
    for rule in rules():
        name = rule["alert"]
        assert name.startswith("Configmirror"), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        for annotation in ("summary", "description", "runbook"):
            assert len(rule["annotations"].get(annotation, "")) > 20, f"{name}: {annotation}"


# -- the dashboard --------------------------------------------------------------------------

def test_dashboard_queries_parse_as_promql(promtool: Promtool) -> None:
    parsed = promtool.selectors(panel_queries() + variable_queries())
    assert all(parsed), "every query reads at least one series"


def test_dashboard_panels_tile_the_grid_and_use_the_datasource_variable() -> None:
    board = dashboard()
    assert board["uid"] == "configmirror", "a fixed uid: re-imports replace, not duplicate"
    names = {var["name"] for var in board["templating"]["list"]}
    assert {"datasource", "namespace", "job"} <= names
    ids, cells = set(), set()
    for panel in panels():
        title = panel.get("title")
        assert panel["id"] not in ids, f"panel id {panel['id']} twice"
        ids.add(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, f"{title} is wider than the grid"
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, f"{title} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", title
        assert panel.get("description"), f"{title}: say what it shows"
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), title
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), title


# -- every metric read is exported --------------------------------------------------------

def exported(text: str) -> tuple[set[str], dict[str, list[dict[str, str]]]]:
    """A scrape's metric names (every family, sampled or not yet, with the sample suffixes of
    its type) and its samples' labels by sample name."""
    names: set[str] = set()
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type]}
        for sample in family.samples:
            names.add(sample.name)
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    return names, samples


def unmet(selector: Selector, samples: list[dict[str, str]]) -> list[str]:
    """The matchers of `selector` that no sample satisfies: equality, and each literal of an
    alternation (`state=~"queued|in_flight"`). Grafana variables and target labels are
    Prometheus' side, not the operator's."""
    faults = []
    for m in selector.matchers:
        if m.name in TARGET_LABELS or "$" in m.value:
            continue
        if m.type == "=":
            wanted = [m.value]
        elif m.type == "=~" and re.fullmatch(r"[\w|]+", m.value):
            wanted = m.value.split("|")
        else:
            continue
        have = {labels.get(m.name) for labels in samples}
        faults += [f'{selector.name}{{{m.name}="{v}"}}' for v in wanted if v not in have]
    return faults


@pytest.fixture(scope="module")
def operator_pair(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    """A leader and a standby (--leader-elect, --source-metrics) that replicated a source with
    a conflict into three namespaces, the leader idle. Shared by the tests that read their
    /metrics; stopped (cleanly) after them."""
    folder = tmp_path_factory.mktemp("monitoring")
    namespaces = Namespaces(cluster, "t-monitoring")
    operators = Operators(cluster, folder)
    try:
        home, src, taken = namespaces(), namespaces(), namespaces()
        targets = [namespaces(), namespaces()]
        cluster.core.create_namespaced_config_map(taken, configmap("cfg"))  # not ours
        flags = ("--leader-elect", "--leader-election-namespace", home,
                 "--leader-election-id", unique_name("monitoring"), "--source-metrics")
        first = operators(*flags)
        wait_for(lambda: first.metric("configmirror_leader") == 1, what="the first to lead")
        second = operators(*flags)
        cluster.core.create_namespaced_config_map(src, configmap(
            "cfg", {REPLICATE_TO: ",".join([*targets, taken])}))
        for ns in targets:
            wait_for(lambda ns=ns: read(cluster, ns, "cfg"), what=f"the replica in {ns}")
        first.wait_idle()
        yield first, second
    finally:
        try:
            operators.stop_all()
        finally:
            namespaces.cleanup()


@pytest.mark.operator_process
def test_every_metric_a_rule_or_panel_reads_is_exported(
        promtool: Promtool,
        operator_pair: tuple[OperatorProcess, OperatorProcess]) -> None:
    leader, _ = operator_pair
    assert leader.metric("configmirror_leader") == 1
    assert leader.metric("configmirror_replica_writes_total", action="create") >= 2
    names, samples = exported(_metrics_text(leader))
    exprs = [rule["expr"] for rule in rules()] + panel_queries() + variable_queries()
    missing, unmatched = [], []
    for expr, selectors in zip(exprs, promtool.selectors(exprs), strict=True):
        for selector in selectors:
            if selector.name not in names:
                missing.append(f"{selector.name} (in {expr.strip()!r})")
            elif selector.name in samples:
                unmatched += unmet(selector, samples[selector.name])
    assert not missing, "not in the operator's /metrics:\n" + "\n".join(missing)
    assert not unmatched, "no exported series has these labels:\n" + "\n".join(unmatched)


def _metrics_text(op: OperatorProcess) -> str:
    """The raw text of `op`'s /metrics (Scrape drops the families without samples yet)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics",
                                timeout=5) as resp:
        return str(resp.read().decode())


# -- the rules against real metrics ----------------------------------------------------------

def series_of(text: str, instance: str) -> list[dict[str, str]]:
    """promtool input series holding a scrape's every sample constant for an hour, labelled as
    the Prometheus Operator labels a pod's series."""
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not math.isfinite(sample.value):
                continue
            labels = {**sample.labels, "namespace": "configmirror",
                      "job": "configmirror-metrics", "instance": instance}
            selector = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            found.append({"series": f"{sample.name}{{{selector}}}",
                          "values": f"{sample.value!r}x60"})
    return found


def run_rule_test(promtool: Promtool, folder: Path, series: list[dict[str, str]],
                  firing: list[dict[str, str]]) -> None:
    """promtool test rules: at 45 minutes (past every `for`), ALERTS holds exactly the alerts
    `firing` (by their labels), all firing: nothing else fires or is pending."""
    test = folder / f"{unique_name('real')}.test.yaml"
    test.write_text(yaml.safe_dump({
        "rule_files": [str(RULES)], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [{
            "expr": "ALERTS", "eval_time": "45m",
            "exp_samples": [{"labels": "ALERTS{" + ", ".join(
                f"{k}={json.dumps(v)}" for k, v in sorted(
                    {**labels, "alertstate": "firing"}.items())) + "}", "value": 1}
                for labels in firing]}]}]}))
    done = promtool("test", "rules", str(test), check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.mark.operator_process
def test_no_alert_fires_on_a_healthy_leader_and_standby(
        promtool: Promtool, tmp_path: Path,
        operator_pair: tuple[OperatorProcess, OperatorProcess]) -> None:
    leader, standby = operator_pair
    # What the leader-only queue signals guard against: a standby queues every watch event
    # and works none of them off.
    wait_for(lambda: standby.metric("workqueue_depth") > 0,  # its one queue, "configmirror"
             what="the standby to queue the leader's writes it watched")
    assert standby.metric("configmirror_leader") == 0
    series = (series_of(_metrics_text(leader), "configmirror-a")
              + series_of(_metrics_text(standby), "configmirror-b"))
    run_rule_test(promtool, tmp_path, series, firing=[])


@pytest.mark.operator_process
def test_only_no_leader_fires_when_only_the_standby_is_left(
        promtool: Promtool, tmp_path: Path,
        operator_pair: tuple[OperatorProcess, OperatorProcess]) -> None:
    _, standby = operator_pair
    series = series_of(_metrics_text(standby), "configmirror-b")
    run_rule_test(promtool, tmp_path, series, firing=[
        {"alertname": "ConfigmirrorNoLeader", "severity": "critical",
         "namespace": "configmirror", "job": "configmirror-metrics"}])


# -- the chart and deploy/monitoring/ ------------------------------------------------------------

def rendered(helm: Helm, folder: Path, values: dict[str, Any],
             namespace: str = "configmirror") -> list[dict[str, Any]]:
    return documents(template(helm, folder, values, namespace=namespace))


def test_monitoring_objects_are_rendered_only_when_enabled(helm: Helm, tmp_path: Path) -> None:
    kinds = {o["kind"] for o in rendered(helm, tmp_path, {})}
    assert "PrometheusRule" not in kinds
    assert "dashboard" not in " ".join(o["metadata"]["name"] for o in rendered(helm, tmp_path, {}))
    objects = rendered(helm, tmp_path, MONITORING)
    assert one(objects, "PrometheusRule")["metadata"]["labels"]["release"] == "prometheus"


def test_chart_prometheus_rule_holds_the_rules_file_plus_rule_labels(
        helm: Helm, tmp_path: Path) -> None:
    rule = one(rendered(helm, tmp_path, MONITORING, namespace="ops"), "PrometheusRule")
    assert rule["metadata"]["namespace"] == "ops"
    expected = yaml.safe_load(RULES.read_text())
    for group in expected["groups"]:
        for r in group["rules"]:
            r["labels"] = {**r["labels"], "team": "platform"}
    assert rule["spec"] == expected, yaml_diff(expected, rule["spec"])


def test_without_leader_election_the_chart_keeps_every_alert(
        helm: Helm, tmp_path: Path) -> None:
    # An operator without election reports configmirror_leader 1 once its workers run, so
    # the no-leader alert still means what it says.
    values = {"replicas": 1, "leaderElection": {"enabled": False},
              "metrics": {"prometheusRule": {"enabled": True}}}
    spec = one(rendered(helm, tmp_path, values), "PrometheusRule")["spec"]
    names = [r["alert"] for group in spec["groups"] for r in group["rules"]]
    assert names == alert_names()


def test_chart_rules_as_helm_writes_them_pass_promtool_check(
        helm: Helm, promtool: Promtool, tmp_path: Path) -> None:
    spec = one(rendered(helm, tmp_path, MONITORING), "PrometheusRule")["spec"]
    path = tmp_path / "chart-rules.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = promtool("check", "rules", "--lint=all", "--lint-fatal", str(path))
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout, done.stdout


def test_deploy_monitoring_renders_the_charts_prometheus_rule(
        cluster: Cluster, helm: Helm, tmp_path: Path) -> None:
    """One truth: `kubectl kustomize deploy/monitoring` is the chart's PrometheusRule with its
    defaults (release configmirror in namespace configmirror), field for field."""
    kustomized = documents(cluster.require_plane().kubectl(
        "kustomize", str(DEPLOY_MONITORING)).stdout)
    assert [o["kind"] for o in kustomized] == ["PrometheusRule"]
    charted = without_helm_labels(one(rendered(
        helm, tmp_path, {"metrics": {"prometheusRule": {"enabled": True}}}), "PrometheusRule"))
    assert kustomized[0] == charted, (
        "deploy/monitoring/prometheusrule.yaml differs from the chart's rendering of "
        "files/prometheus-rules.yaml (change both):\n" + yaml_diff(kustomized[0], charted))


def test_runbook_base_url_makes_every_runbook_url_a_link_in_the_chart_and_in_deploy(
        cluster: Cluster, helm: Helm, tmp_path: Path) -> None:
    """The chart's metrics.prometheusRule.runbookBaseURL, and the kustomize patch
    docs/reference/alerts.md gives for deploy/monitoring/ (taken from the page as written,
    its base pointed at this checkout), put the same URL before every alert's runbook_url
    and change nothing else."""
    base = "https://docs.example.com/configmirror"
    charted = without_helm_labels(one(rendered(helm, tmp_path, {"metrics": {"prometheusRule": {
        "enabled": True, "runbookBaseURL": base + "/"}}}), "PrometheusRule"))
    expected = without_helm_labels(one(rendered(
        helm, tmp_path, {"metrics": {"prometheusRule": {"enabled": True}}}), "PrometheusRule"))
    for group in expected["spec"]["groups"]:
        for r in group["rules"]:
            r["annotations"]["runbook_url"] = f"{base}/{r['annotations']['runbook_url']}"
    assert charted == expected, yaml_diff(expected, charted)
    page = (REPO / "docs" / "reference" / "alerts.md").read_text()
    [block] = [b.split("\n", 1)[1] for b in page.split("```")[1::2]
               if b.startswith("yaml\n") and "kind: Kustomization" in b]
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "kustomization.yaml").write_text(block.replace(
        "../configmirror/deploy/monitoring", os.path.relpath(DEPLOY_MONITORING, ours)))
    [patched] = documents(cluster.require_plane().kubectl("kustomize", str(ours)).stdout)
    assert patched == expected, yaml_diff(expected, patched)


def test_chart_dashboard_configmap_holds_the_dashboard_for_the_sidecar(
        helm: Helm, tmp_path: Path) -> None:
    [board] = [o for o in rendered(helm, tmp_path, MONITORING) if o["kind"] == "ConfigMap"]
    meta = board["metadata"]
    assert meta["namespace"] == "grafana"
    assert meta["labels"]["grafana_dashboard"] == "1"
    assert meta["annotations"] == {"grafana_folder": "Platform"}
    assert json.loads(board["data"]["configmirror.json"]) == dashboard()
    default_ns = [o for o in rendered(helm, tmp_path, {"metrics": {"grafanaDashboard": {
        "enabled": True}}}, namespace="ops") if o["kind"] == "ConfigMap"]
    assert default_ns[0]["metadata"]["namespace"] == "ops"


def test_chart_dashboard_configmap_passes_server_side_dry_run(
        cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path) -> None:
    values = {"metrics": {"grafanaDashboard": {"enabled": True, "namespace": namespace}}}
    [board] = [o for o in rendered(helm, tmp_path, values) if o["kind"] == "ConfigMap"]
    done = cluster.require_plane().kubectl("apply", "--dry-run=server", "-f", "-",
                                           input=yaml.safe_dump(board))
    assert done.stdout.strip().endswith("(server dry run)"), done.stdout


def test_chart_lints_with_the_monitoring_objects(helm: Helm, tmp_path: Path) -> None:
    done = helm("lint", "--strict", str(CHART), *values_file(MONITORING, tmp_path), check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("values", "names"), [
    ({"prometheusRule": {"enabled": "yes"}}, ["/metrics/prometheusRule/enabled", "boolean"]),
    ({"prometheusRule": {"ruleLabels": {"team": 1}}},
     ["/metrics/prometheusRule/ruleLabels/team", "string"]),
    ({"prometheusRule": {"severity": "page"}}, ["severity", "additional properties"]),
    ({"grafanaDashboard": {"namespace": "Not_A_Namespace"}},
     ["/metrics/grafanaDashboard/namespace", "pattern"]),
    ({"grafanaDashboard": {"labels": {"grafana_dashboard": 1}}},
     ["/metrics/grafanaDashboard/labels/grafana_dashboard", "string"]),
])
def test_schema_rejects_a_bad_monitoring_value_naming_it(
        helm: Helm, tmp_path: Path, values: dict[str, Any], names: list[str]) -> None:
    done = helm("template", "configmirror", str(CHART),
                *values_file({"metrics": values}, tmp_path), check=False)
    assert done.returncode != 0, f"{values} was accepted"
    for name in names:
        assert name in done.stderr, done.stderr
