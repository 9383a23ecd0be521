"""The hookline chart, rendered over a matrix of values and Kubernetes versions:
every manifest validates offline against the Kubernetes schemas, the alert
rules pass promtool, and the properties the deployment relies on hold (grace
period vs request timeout, probes, security context, no secret in env, the
signing Secret mounted as a directory, the topic hook, lag scaling only on the
ready queues, no more replicas than the partitions their consumers read, the
services' own defaults unless a difference is listed with its reason). Run by
`make chart-test` (deploy/helm/chart-test.sh), which installs helm, promtool
and kubernetes-validate first."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CHART = REPO / "deploy/helm/hookline"
VALUES_DIR = HERE / "values"
HELM = os.environ.get("HELM", str(REPO / ".cache/tools/helm"))
PROMTOOL = os.environ.get("PROMTOOL", shutil.which("promtool") or "promtool")
KUBE_VALIDATE = os.environ.get("KUBERNETES_VALIDATE", str(REPO / ".venv/bin/kubernetes-validate"))
BIN_DIR = Path(os.environ.get("HOOKLINE_BIN_DIR", REPO / "target/debug"))

KUBE_DEFAULT = "1.30.0"
# The oldest the chart supports and a newer one, for a few value sets.
KUBE_OTHERS = ["1.25.0", "1.35.0"]
NAMESPACE = "hookline"
CRD_KINDS = {"PodMonitor", "PrometheusRule", "ScaledObject", "TriggerAuthentication", "KafkaTopic"}
COMPONENTS = {"fanout": "fanout", "dispatcher": "dispatcher", "dlqSink": "dlq-sink"}
BINARIES = {"fanout": "hookline-fanout", "dispatcher": "hookline-dispatcher", "dlq-sink": "hookline-dlq-sink"}
LAG_TOPICS = {"fanout": "events", "dispatcher": "deliveries"}

VALUE_FILES = sorted(p.stem for p in VALUES_DIR.glob("*.yaml"))
MATRIX = [(v, KUBE_DEFAULT) for v in VALUE_FILES] + [
    (v, k) for v in ("defaults", "keda", "monitoring") for k in KUBE_OTHERS
]


def helm_template(*args: str, kube: str = KUBE_DEFAULT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HELM, "template", "hookline", str(CHART), "-n", NAMESPACE, "--kube-version", kube, *args],
        capture_output=True,
        text=True,
    )


def render(values: str, kube: str = KUBE_DEFAULT, *extra: str) -> list[dict]:
    out = helm_template("-f", str(VALUES_DIR / f"{values}.yaml"), *extra, kube=kube)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def deep_merge(base: dict, over: dict) -> dict:
    merged = copy.deepcopy(base)
    for k, v in (over or {}).items():
        merged[k] = deep_merge(merged[k], v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


def values_of(name: str) -> dict:
    base = yaml.safe_load((CHART / "values.yaml").read_text())
    return deep_merge(base, yaml.safe_load((VALUES_DIR / f"{name}.yaml").read_text()) or {})


def kinds(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def component_of(doc: dict) -> str:
    return doc["metadata"]["labels"].get("app.kubernetes.io/component", "")


def configmap_env(docs: list[dict], component: str) -> dict:
    (cm,) = [d for d in kinds(docs, "ConfigMap") if component_of(d) == component and "data" in d]
    return cm["data"]


def seconds(duration: str) -> int:
    m = re.fullmatch(r"(\d+)s", duration)
    assert m, f"expected whole seconds, got {duration}"
    return int(m.group(1))


def pod_specs(docs: list[dict]):
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            yield d, d["spec"]["template"]["spec"]


@pytest.fixture(scope="session")
def rendered() -> dict:
    return {(v, k): render(v, k) for v, k in MATRIX}


# --- rendering and offline schema validation --------------------------------


@pytest.mark.parametrize("values,kube", MATRIX)
def test_renders_and_validates_against_kubernetes_schemas(values, kube, rendered, tmp_path):
    docs = rendered[(values, kube)]
    assert docs, "nothing rendered"
    core = [d for d in docs if d["kind"] not in CRD_KINDS]
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump_all(core))
    out = subprocess.run(
        [KUBE_VALIDATE, "-k", kube, "--strict", "--quiet", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for crd in (d for d in docs if d["kind"] in CRD_KINDS):
        assert crd["apiVersion"] and crd["metadata"]["name"] and crd["spec"], crd


def test_kubernetes_validate_rejects_a_broken_manifest(rendered, tmp_path):
    (dep, *_) = kinds(rendered[("defaults", KUBE_DEFAULT)], "Deployment")
    broken = copy.deepcopy(dep)
    broken["spec"]["template"]["spec"]["containers"][0]["notAField"] = True
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    out = subprocess.run([KUBE_VALIDATE, "-k", KUBE_DEFAULT, "--strict", str(path)], capture_output=True, text=True)
    assert out.returncode != 0, "the validator must catch an unknown field"


def test_helm_lint_strict_passes_for_every_values_file():
    for values in VALUE_FILES:
        out = subprocess.run(
            [HELM, "lint", "--strict", "--kube-version", KUBE_DEFAULT, str(CHART), "-f", str(VALUES_DIR / f"{values}.yaml")],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, f"{values}: {out.stdout}{out.stderr}"


# --- the pod template --------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_FILES)
def test_grace_period_exceeds_request_timeout_plus_drain_slack(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    v = values_of(values)
    for dep in kinds(docs, "Deployment"):
        comp = component_of(dep)
        grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        env = configmap_env(docs, comp)
        shutdown = seconds(env["HOOKLINE_SHUTDOWN_GRACE"])
        assert grace > shutdown, (comp, grace, shutdown)
        if comp == "dispatcher":
            timeout = seconds(env["HOOKLINE_REQUEST_TIMEOUT"])
            assert timeout == v["dispatcher"]["requestTimeoutSeconds"]
            assert grace > timeout + v["dispatcher"]["drainSlackSeconds"], (grace, timeout)
            assert shutdown >= timeout


def test_a_grace_period_below_the_drain_fails_rendering():
    out = helm_template("--set", "dispatcher.terminationGracePeriodSeconds=20")
    assert out.returncode != 0
    assert "dispatcher.terminationGracePeriodSeconds (20) is too low" in out.stderr
    out = helm_template("--set", "dispatcher.requestTimeoutSeconds=60")
    assert out.returncode != 0
    assert "shutdownGraceSeconds (25) is below dispatcher.requestTimeoutSeconds (60)" in out.stderr


@pytest.mark.parametrize("values", VALUE_FILES)
def test_probes_use_healthz_and_readyz_on_the_metrics_port(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    port = values_of(values)["metrics"]["port"]
    for dep in kinds(docs, "Deployment"):
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert configmap_env(docs, component_of(dep))["HOOKLINE_HTTP_ADDR"] == f"0.0.0.0:{port}"


@pytest.mark.parametrize("values", VALUE_FILES)
def test_pods_run_non_root_read_only_without_capabilities(values, rendered):
    for doc, spec in pod_specs(rendered[(values, KUBE_DEFAULT)]):
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 65532
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, doc["metadata"]["name"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            mounts = {m["name"]: m for m in c["volumeMounts"]}
            assert mounts["tmp"]["mountPath"] == "/tmp"
        assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in spec["volumes"]


@pytest.mark.parametrize("values", VALUE_FILES)
def test_no_secret_reaches_env_only_file_mounts(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    credential = re.compile(r"(password|secret|token|jaas)", re.I)
    envs = [cm["data"] for cm in kinds(docs, "ConfigMap") if cm.get("data") and "hookline.json" not in cm["data"]]
    for _, spec in pod_specs(docs):
        for c in spec["containers"]:
            for e in c.get("env", []):
                assert "valueFrom" not in e or "secretKeyRef" not in e["valueFrom"], e
            envs.append({e["name"]: e.get("value", "") for e in c.get("env", [])})
    for env in envs:
        for name, value in env.items():
            assert not credential.search(name) or name in ("HOOKLINE_SECRETS_DIR", "HOOKLINE_SECRETS_POLL_INTERVAL"), name
            if name == "HOOKLINE_KAFKA_CONFIG":
                for entry in value.split(";"):
                    key, _, val = entry.partition("=")
                    if credential.search(key) or key == "sasl.username":
                        assert val.startswith("@/etc/hookline/kafka/sasl/"), entry


def test_sasl_ssl_credentials_are_mounted_files_referenced_by_path(rendered):
    docs = rendered[("sasl-ssl", KUBE_DEFAULT)]
    for comp in ("fanout", "dispatcher", "dlq-sink"):
        entries = dict(e.split("=", 1) for e in configmap_env(docs, comp)["HOOKLINE_KAFKA_CONFIG"].split(";"))
        assert entries["security.protocol"] == "SASL_SSL"
        assert entries["sasl.mechanism"] == "SCRAM-SHA-512"
        assert entries["sasl.password"] == "@/etc/hookline/kafka/sasl/password"
        assert entries["ssl.ca.location"] == "/etc/hookline/kafka/tls/ca.crt"
        assert entries["ssl.key.location"] == "/etc/hookline/kafka/tls/tls.key"
        assert entries["compression.type"] == "zstd"
    for _, spec in pod_specs(docs):
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["kafka-sasl"]["secret"]["secretName"] == "hookline-kafka-credentials"
        assert vols["kafka-tls"]["secret"]["secretName"] == "hookline-kafka-ca"
    (auth,) = kinds(docs, "TriggerAuthentication")
    assert {p["parameter"] for p in auth["spec"]["secretTargetRef"]} == {"username", "password", "ca", "cert", "key"}


def test_each_component_can_be_its_own_principal(rendered):
    """per-stage-credentials.yaml: each component's own Secret is mounted and
    referenced by path, rendering the -X entries the `secured` fault scenario
    runs the stages with (tests/faults/src/scenarios/secured.rs: SCRAM over
    SASL_SSL for fanout and dispatcher, a client certificate for the DLQ
    sink); the topics Job keeps the global credentials."""
    docs = rendered[("per-stage-credentials", KUBE_DEFAULT)]
    sasl = {"security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location"}
    mtls = {"security.protocol", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location"}
    want = {
        "fanout": (sasl, "hookline-kafka-fanout", "kafka-sasl"),
        "dispatcher": (sasl, "hookline-kafka-dispatcher", "kafka-sasl"),
        "dlq-sink": (mtls, "hookline-kafka-dlq-sink-cert", "kafka-tls"),
    }
    for comp, (keys, secret, volume) in want.items():
        entries = dict(e.split("=", 1) for e in configmap_env(docs, comp)["HOOKLINE_KAFKA_CONFIG"].split(";"))
        assert set(entries) == keys, (comp, entries)
        if comp == "dlq-sink":
            assert entries["security.protocol"] == "SSL"
            assert entries["ssl.certificate.location"] == "/etc/hookline/kafka/tls/tls.crt"
            assert entries["ssl.key.location"] == "/etc/hookline/kafka/tls/tls.key"
        else:
            assert entries["security.protocol"] == "SASL_SSL"
            assert entries["sasl.password"] == "@/etc/hookline/kafka/sasl/password"
    for doc, spec in pod_specs(docs):
        vols = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["name"] for c in spec["containers"] for m in c["volumeMounts"]}
        if doc["kind"] == "Job":
            assert vols["kafka-sasl"]["secret"]["secretName"] == "hookline-kafka-admin"
            continue
        _, secret, volume = want[component_of(doc)]
        assert vols[volume]["secret"]["secretName"] == secret, component_of(doc)
        assert volume in mounts
        if component_of(doc) == "dlq-sink":
            assert "kafka-sasl" not in vols, "an mTLS component mounts no SCRAM Secret"
        else:
            assert vols["kafka-tls"]["secret"]["secretName"] == "hookline-kafka-ca"


def test_credentials_in_values_are_refused():
    out = helm_template("--set", "kafka.config.sasl\\.password=hunter2")
    assert out.returncode != 0 and "looks like a credential" in out.stderr
    out = helm_template("--set", "kafka.securityProtocol=SASL_SSL")
    assert out.returncode != 0 and "kafka.sasl.existingSecret" in out.stderr


@pytest.mark.parametrize("values", [v for v in VALUE_FILES if v != "disabled"])
def test_signing_secret_is_a_directory_mount_without_subpath(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    (dep,) = [d for d in kinds(docs, "Deployment") if component_of(d) == "dispatcher"]
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "signing-secrets"]
    assert "subPath" not in mount and "subPathExpr" not in mount
    assert mount["readOnly"] is True
    assert mount["mountPath"] == configmap_env(docs, "dispatcher")["HOOKLINE_SECRETS_DIR"]
    (vol,) = [v for v in spec["volumes"] if v["name"] == "signing-secrets"]
    expected = values_of(values)["signing"]["existingSecret"] or "hookline-signing"
    assert vol["secret"]["secretName"] == expected
    assert "items" not in vol["secret"], "items would freeze the key set"


def test_config_checksum_changes_with_the_config():
    def checksums(*extra):
        out = helm_template(*extra)
        assert out.returncode == 0, out.stderr
        return {
            component_of(d): d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            for d in yaml.safe_load_all(out.stdout)
            if d and d["kind"] == "Deployment"
        }

    base = checksums()
    assert set(base) == {"fanout", "dispatcher", "dlq-sink"}
    assert checksums() == base
    changed = checksums("--set", "dispatcher.env.HOOKLINE_GLOBAL_IN_FLIGHT=64")
    assert changed["dispatcher"] != base["dispatcher"]
    assert changed["fanout"] == base["fanout"]
    assert checksums("--set", "log.level=debug")["fanout"] != base["fanout"]
    session = checksums("--set", "kafka.groupSessionTimeout=30s")
    assert all(session[c] != base[c] for c in base), "every component must restart on a new session timeout"


CUSTOM_LADDER = "retry-30s=30s,retry-5m=5m,retry-1h=1h"


def test_the_dispatcher_follows_the_ladder_the_topic_hook_creates(rendered):
    docs = rendered[("retry-ladder", KUBE_DEFAULT)]
    env = configmap_env(docs, "dispatcher")
    assert env["HOOKLINE_RETRY_TIERS"] == CUSTOM_LADDER
    assert (env["HOOKLINE_MAX_ATTEMPTS"], env["HOOKLINE_MAX_AGE"], env["HOOKLINE_RETRY_JITTER"]) == ("8", "12h", "250ms")
    (job,) = kinds(docs, "Job")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    job_env = {e["name"]: e["value"] for e in c["env"]}
    assert job_env["HOOKLINE_RETRY_TIERS"] == CUSTOM_LADDER
    # The same values through Strimzi: exactly these tier topics, no default one.
    docs = render("retry-ladder", KUBE_DEFAULT, "--set", "topics.provision.enabled=false",
                  "--set", "topics.strimzi.enabled=true", "--set", "topics.strimzi.cluster=k")
    tiers = [t["spec"]["topicName"] for t in kinds(docs, "KafkaTopic") if t["spec"]["topicName"].startswith("deliveries.retry")]
    assert tiers == ["deliveries.retry-30s", "deliveries.retry-5m", "deliveries.retry-1h"]
    assert configmap_env(docs, "dispatcher")["HOOKLINE_RETRY_TIERS"] == CUSTOM_LADDER


@pytest.mark.parametrize("values", [v for v in VALUE_FILES if v != "disabled"])
def test_dispatcher_and_topics_share_one_ladder(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    v = values_of(values)
    ladder = ",".join(f"{t['name']}={t['delay']}" for t in v["topics"]["retryTiers"])
    env = configmap_env(docs, "dispatcher")
    assert env["HOOKLINE_RETRY_TIERS"] == ladder
    policy = v["dispatcher"]["retryPolicy"]
    assert env["HOOKLINE_MAX_ATTEMPTS"] == str(policy["maxAttempts"])
    assert env["HOOKLINE_MAX_AGE"] == policy["maxAge"]
    assert env["HOOKLINE_RETRY_JITTER"] == policy["jitter"]
    for job in kinds(docs, "Job"):
        (c,) = job["spec"]["template"]["spec"]["containers"]
        assert {e["name"]: e["value"] for e in c["env"]}["HOOKLINE_RETRY_TIERS"] == ladder


@pytest.mark.parametrize("values", [v for v in VALUE_FILES if v != "disabled"])
def test_fanout_and_dispatcher_share_one_lane_count(values, rendered):
    # A tenant's lane is a hash of its id over the lane count: fanout writes a
    # burst where the dispatcher reads it only if both count the same lanes.
    docs = rendered[(values, KUBE_DEFAULT)]
    lanes = str(values_of(values).get("overflow", {}).get("lanes", 8))
    assert configmap_env(docs, "fanout")["HOOKLINE_OVERFLOW_LANES"] == lanes
    assert configmap_env(docs, "dispatcher")["HOOKLINE_OVERFLOW_LANES"] == lanes
    out = helm_template("--set", "overflow.lanes=9")
    assert out.returncode != 0 and "lanes" in out.stderr


def test_a_ladder_the_dispatcher_would_refuse_fails_rendering():
    def tiers(*pairs):
        args = []
        for i, (name, delay) in enumerate(pairs):
            args += ["--set", f"topics.retryTiers[{i}].name={name}", "--set", f"topics.retryTiers[{i}].delay={delay}"]
        return helm_template(*args)

    out = tiers(("a", "1m"), ("b", "30s"))
    assert out.returncode != 0 and "tier b delay 30s must be greater than the previous tier's 1m" in out.stderr
    out = tiers(("a", "1m"), ("a", "5m"))
    assert out.returncode != 0 and "tier name a appears twice" in out.stderr
    out = tiers(("a", "0s"))
    assert out.returncode != 0 and "tier a has a zero delay" in out.stderr
    out = helm_template("--set", "dispatcher.retryPolicy.maxAge=0s")
    assert out.returncode != 0 and "maxAge must be greater than zero" in out.stderr
    out = helm_template("--set", "dispatcher.retryPolicy.maxAttempts=0")
    assert out.returncode != 0 and "maxAttempts" in out.stderr
    out = helm_template("--set", "dispatcher.env.HOOKLINE_RETRY_TIERS=x=1s")
    assert out.returncode != 0 and "dispatcher.env.HOOKLINE_RETRY_TIERS is set by the chart" in out.stderr


def test_a_tier_longer_than_its_retention_allows_fails_rendering_on_either_path():
    long_tier = ["--set", "topics.retryTiers[0].name=retry-1d", "--set", "topics.retryTiers[0].delay=1d"]
    for path in ([], ["--set", "topics.provision.enabled=false", "--set", "topics.strimzi.enabled=true",
                      "--set", "topics.strimzi.cluster=k"]):
        out = helm_template(*long_tier, *path)
        assert out.returncode != 0, path
        assert "topic deliveries.retry-1d: retention 7d is below the minimum of 2073600000ms" in out.stderr
        out = helm_template(*long_tier, *path, "--set", "topics.perTopic.deliveries\\.retry-1d.retention=24d")
        assert out.returncode == 0, out.stderr


def test_extra_volumes_reach_the_pod(rendered):
    docs = rendered[("extra-ca", KUBE_DEFAULT)]
    (dep,) = [d for d in kinds(docs, "Deployment") if component_of(d) == "dispatcher"]
    spec = dep["spec"]["template"]["spec"]
    assert {"name": "extra-ca", "secret": {"secretName": "webhook-extra-ca"}} in spec["volumes"]
    (c,) = spec["containers"]
    assert {"name": "extra-ca", "mountPath": "/etc/hookline/extra-ca", "readOnly": True} in c["volumeMounts"]
    assert configmap_env(docs, "dispatcher")["HOOKLINE_TLS_EXTRA_CA"] == "/etc/hookline/extra-ca/ca.crt"


def test_disabled_components_render_nothing(rendered):
    docs = rendered[("disabled", KUBE_DEFAULT)]
    assert {component_of(d) for d in kinds(docs, "Deployment")} == {"fanout"}
    assert not [d for d in docs if d["metadata"]["name"].endswith(("-dispatcher", "-dlq-sink"))]


# --- consumer groups -------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_FILES)
def test_every_component_gets_the_group_settings_and_static_membership_is_opt_in(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    kafka = values_of(values)["kafka"]
    deps = kinds(docs, "Deployment")
    assert deps
    for dep in deps:
        comp = component_of(dep)
        env = configmap_env(docs, comp)
        assert env["HOOKLINE_GROUP_SESSION_TIMEOUT"] == kafka["groupSessionTimeout"], comp
        assert env["HOOKLINE_CONSUMER_STALL_TIMEOUT"] == kafka["consumerStallTimeout"], comp
        assert "HOOKLINE_GROUP_INSTANCE_ID" not in env, "one ConfigMap value would be shared by every replica"
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        instance = [e for e in c.get("env", []) if e["name"] == "HOOKLINE_GROUP_INSTANCE_ID"]
        if kafka["staticMembership"]:
            assert instance == [
                {"name": "HOOKLINE_GROUP_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
            ], comp
        else:
            assert not instance, f"{comp}: static membership must be opt-in"
    for job in kinds(docs, "Job"):
        (c,) = job["spec"]["template"]["spec"]["containers"]
        assert not {e["name"] for e in c["env"]} & {"HOOKLINE_GROUP_SESSION_TIMEOUT", "HOOKLINE_GROUP_INSTANCE_ID"}


def test_static_membership_keeps_extra_env(rendered):
    docs = rendered[("static-membership", KUBE_DEFAULT)]
    (dep,) = [d for d in kinds(docs, "Deployment") if component_of(d) == "dispatcher"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert [e["name"] for e in c["env"]] == ["HOOKLINE_GROUP_INSTANCE_ID", "RUST_BACKTRACE"]


def test_group_settings_the_services_would_refuse_fail_rendering():
    for timeout in ("500ms", "31m"):
        out = helm_template("--set", f"kafka.groupSessionTimeout={timeout}")
        assert out.returncode != 0 and f"kafka.groupSessionTimeout {timeout} is outside 1s..30m" in out.stderr
    out = helm_template("--set", "kafka.groupSessionTimeout=ten")
    assert out.returncode != 0 and "groupSessionTimeout" in out.stderr
    out = helm_template("--set", "kafka.consumerStallTimeout=0s")
    assert out.returncode != 0 and "kafka.consumerStallTimeout 0s must be at least 1s" in out.stderr
    out = helm_template("--set", "kafka.staticMembership=yes")
    assert out.returncode != 0 and "staticMembership" in out.stderr
    for key in ("session\\.timeout\\.ms=45000", "group\\.instance\\.id=a", "partition\\.assignment\\.strategy=range"):
        out = helm_template("--set", f"kafka.config.{key}")
        assert out.returncode != 0 and "is a consumer-group setting the services own" in out.stderr, key
    out = helm_template("--set", "fanout.env.HOOKLINE_GROUP_INSTANCE_ID=fanout-0")
    assert out.returncode != 0 and "every replica the same instance id" in out.stderr
    out = helm_template("--set", "dlqSink.env.HOOKLINE_GROUP_SESSION_TIMEOUT=30s")
    assert out.returncode != 0 and "dlqSink.env.HOOKLINE_GROUP_SESSION_TIMEOUT is set by the chart" in out.stderr
    out = helm_template("--set", "kafka.staticMembership=true", "--set", "fanout.extraEnv[0].name=HOOKLINE_GROUP_INSTANCE_ID",
                        "--set", "fanout.extraEnv[0].value=x")
    assert out.returncode != 0 and "drop one" in out.stderr


# --- values match the services' real flags -----------------------------------


def help_env(binary: str, *sub: str) -> set[str]:
    path = BIN_DIR / binary
    assert path.exists(), f"{path} missing: chart-test builds the binaries first"
    out = subprocess.run([str(path), *sub, "--help"], capture_output=True, text=True, check=True)
    # A flag that may carry a secret shows its variable without its value.
    return set(re.findall(r"\[env: (HOOKLINE_[A-Z0-9_]+)[=\]]", out.stdout))


@pytest.mark.parametrize("values", VALUE_FILES)
def test_every_env_var_the_chart_sets_is_a_real_flag(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    for dep in kinds(docs, "Deployment"):
        comp = component_of(dep)
        known = help_env(BINARIES[comp])
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        chart_env = set(configmap_env(docs, comp)) | {e["name"] for e in c.get("env", []) if e["name"].startswith("HOOKLINE_")}
        unknown = chart_env - known
        assert not unknown, f"{comp} has no flag for {sorted(unknown)}"
    for job in kinds(docs, "Job"):
        known = help_env("hookline-fanout", "topics")
        (c,) = job["spec"]["template"]["spec"]["containers"]
        unknown = {e["name"] for e in c["env"]} - known
        assert not unknown, f"`hookline-fanout topics` has no flag for {sorted(unknown)}"



# --- the chart's defaults are the services' defaults ----------------------------

# A value the chart renders by default that is not the binary's default, and
# why. Keyed by (binary, flag); "*" is every binary and `hookline-fanout topics`.
DELIBERATE: dict[tuple[str, str], str] = {
    ("*", "--brokers"): "127.0.0.1:9092 suits a laptop; in a cluster the brokers are a Service (kafka:9092)",
    ("*", "--log-format"): "text is for terminals; a pod's logs go to a log pipeline, which wants JSON lines",
    ("hookline-dlq-sink", "--archive-url"): "the local archive is the PersistentVolumeClaim mounted at "
    "dlqSink.archive.mountPath, not a directory relative to the working directory",
    ("hookline-fanout topics", "--execute"): "the hook exists to apply the plan; run by hand, the command previews",
}

# A flag the chart sets whose binary states no default to compare with, and why.
NO_DEFAULT: dict[tuple[str, str], str] = {
    ("*", "--http-addr"): "each service defaults to a port of its own (9464-9466) so the three share a host; "
    "a pod has one, metrics.port",
    ("hookline-fanout topics", "--set"): "per-topic settings; none by default",
}


def help_text(binary: str, *sub: str) -> str:
    path = BIN_DIR / binary
    assert path.exists(), f"{path} missing: chart-test builds the binaries first"
    # Without HOOKLINE_* variables, which clap would show in place of nothing.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLINE_")}
    return subprocess.run([str(path), *sub, "--help"], capture_output=True, text=True, check=True, env=env).stdout


# An option's first line: `  -X, --name` or `      --name`, then `<VALUE>`,
# `[=<VALUE>]` or nothing (a switch). Deeper lines are its description.
OPTION = re.compile(r"^(?:  -\w, |      )(--[A-Za-z0-9-]+)(\[=<[^>]+>\]| <[^>]+>)?", re.M)


def help_defaults(binary: str, *sub: str) -> dict[str, tuple[str, str | None]]:
    """HOOKLINE_* variable -> (flag, default as --help states it, or None).

    The default is clap's `[default: …]`, else one the description spells
    ``Default: `…` `` or `(default …,`; a switch's is false."""
    text = help_text(binary, *sub)
    starts = list(OPTION.finditer(text))
    found = {}
    for m, end in zip(starts, [*(n.start() for n in starts[1:]), len(text)]):
        block = text[m.start():end]
        env = re.search(r"\[env: (HOOKLINE_[A-Z0-9_]+)[=\]]", block)
        if not env:
            continue
        flag, value = m.group(1), m.group(2)
        joined = " ".join(block.split())
        stated = (re.search(r"^\s*\[default: (.*)\]\s*$", block, re.M)
                  or re.search(r"Default: `([^`]+)`", joined)
                  or re.search(r"\(default ([^\s,;)]+)[,;)]", joined))
        default = stated.group(1) if stated else ("false" if not value else None)
        if default == '""':
            default = ""
        found[env.group(1)] = (flag, default)
    return found


UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int | None:
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * UNITS_MS[u] for n, u in parts)


def same_setting(a: str, b: str) -> bool:
    """Equal as the services read them: durations by length (`25s` is
    `25000ms`), numbers by value, lists and `name=value` pairs item by item."""
    a, b = str(a).strip(), str(b).strip()
    if a == b:
        return True
    da, db = duration_ms(a), duration_ms(b)
    if da is not None and db is not None:
        return da == db
    try:
        return float(a) == float(b)
    except ValueError:
        pass
    pa, pb = re.split(r"[,;=]", a), re.split(r"[,;=]", b)
    return len(pa) > 1 and len(pa) == len(pb) and all(map(same_setting, pa, pb))


def rendered_settings(docs: list[dict]) -> dict[str, dict[str, str]]:
    """What each binary is started with by the rendered chart: binary (or
    `hookline-fanout topics`) -> HOOKLINE_* variable -> value."""
    out = {}
    for dep in kinds(docs, "Deployment"):
        comp = component_of(dep)
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        env = dict(configmap_env(docs, comp))
        env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
        out[BINARIES[comp]] = env
    for job in kinds(docs, "Job"):
        (c,) = job["spec"]["template"]["spec"]["containers"]
        out["hookline-fanout topics"] = {e["name"]: e["value"] for e in c["env"]}
    return out


def listed(table: dict, binary: str, flag: str) -> str | None:
    return table.get((binary, flag)) or table.get(("*", flag))


def test_the_charts_defaults_are_the_services_defaults(rendered):
    """Every HOOKLINE_* value the chart renders with its default values is the
    binary's own default (`--help`), or a deliberate difference in DELIBERATE,
    or a flag with no stated default in NO_DEFAULT. A default lives in the
    binary: a chart that restates it differently runs production on settings
    nobody chose."""
    settings = rendered_settings(rendered[("defaults", KUBE_DEFAULT)])
    assert set(settings) == {*BINARIES.values(), "hookline-fanout topics"}
    differ, unexplained, used = [], [], set()
    for binary, env in settings.items():
        defaults = help_defaults(*binary.split())
        for name, value in sorted(env.items()):
            assert name in defaults, f"{binary} has no flag for {name}"
            flag, default = defaults[name]
            deliberate, no_default = listed(DELIBERATE, binary, flag), listed(NO_DEFAULT, binary, flag)
            used |= {k for k in ((binary, flag), ("*", flag)) if k in DELIBERATE or k in NO_DEFAULT}
            if default is None:
                if not no_default:
                    unexplained.append(f"{binary} {flag} ({name}={value!r}) states no default")
            elif same_setting(value, default):
                assert not deliberate, f"{binary} {flag}: listed as deliberate but agrees ({value!r})"
            elif not deliberate:
                differ.append(f"{binary} {flag} ({name}): chart {value!r}, binary {default!r}")
    assert not differ, "the chart's defaults differ from the binaries':\n" + "\n".join(differ)
    assert not unexplained, "\n".join(unexplained)
    stale = (set(DELIBERATE) | set(NO_DEFAULT)) - used
    assert not stale, f"listed but no longer rendered: {sorted(stale)}"


def test_settings_compare_as_the_services_read_them():
    for a, b in [("25s", "25000ms"), ("1m", "60s"), ("1h30m", "90m"), ("24h", "1d"), ("12", "12"),
                 ("0.5", "0.50"), ("", ""), ("retry-10s=10s,retry-1m=1m", "retry-10s=10000ms,retry-1m=60s")]:
        assert same_setting(a, b), (a, b)
    for a, b in [("20s", "25s"), ("10s", "10"), ("json", "text"), ("a=1s,b=2s", "a=1s"), ("", "0")]:
        assert not same_setting(a, b), (a, b)


# --- topics --------------------------------------------------------------------


@pytest.mark.parametrize("values", [v for v in VALUE_FILES if v != "strimzi"])
def test_topics_hook_runs_the_provisioning_command_before_install_and_upgrade(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    v = values_of(values)
    (job,) = kinds(docs, "Job")
    ann = job["metadata"]["annotations"]
    assert set(ann["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"]
    assert int(ann["helm.sh/hook-weight"]) < 0
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["/usr/local/bin/hookline-fanout", "topics"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["HOOKLINE_TOPICS_EXECUTE"] == "true"
    assert env["HOOKLINE_TOPICS_ALLOW_PARTITION_INCREASE"] == "false"
    assert env["HOOKLINE_TOPIC_PREFIX"] == v["topics"]["prefix"]
    assert env["HOOKLINE_RETRY_TIERS"] == ",".join(f"{t['name']}={t['delay']}" for t in v["topics"]["retryTiers"])
    assert not re.search(r"e\+\d", json.dumps(env)), "numbers must not render in float notation"
    for topic, settings in v["topics"]["perTopic"].items():
        for key, value in settings.items():
            if key != "config":
                assert f"{topic}:{key}={value}" in env["HOOKLINE_TOPICS_SET"]
        for key, value in settings.get("config", {}).items():
            assert f"{topic}:{key}={value}" in env["HOOKLINE_TOPICS_SET"]


def test_strimzi_topics_replace_the_hook_and_carry_safe_settings(rendered):
    docs = rendered[("strimzi", KUBE_DEFAULT)]
    assert not kinds(docs, "Job")
    topics = {t["spec"]["topicName"]: t for t in kinds(docs, "KafkaTopic")}
    tiers = [f"prod.deliveries.retry-{d}" for d in ("10s", "1m", "15m", "2h")]
    lanes = [f"prod.deliveries.lane-{n}" for n in range(8)]
    assert list(topics) == ["prod.events", "prod.subscriptions", "prod.deliveries", "prod.deliveries.strict", *tiers,
                            "prod.deliveries.dlq", "prod.events.quarantine", "prod.deliveries.attempts",
                            "prod.subscriptions.health", *lanes]
    for name, t in topics.items():
        assert t["metadata"]["labels"]["strimzi.io/cluster"] == "main"
        assert re.fullmatch(r"[a-z0-9.-]+", t["metadata"]["name"]), t["metadata"]["name"]
        cfg = t["spec"]["config"]
        if name in ("prod.subscriptions", "prod.subscriptions.health"):
            assert cfg["cleanup.policy"] == "compact"
            continue
        assert cfg["cleanup.policy"] == "delete"
        assert int(cfg["retention.ms"]) >= 7 * 86400 * 1000
    assert topics["prod.events"]["spec"]["partitions"] == 48
    assert topics["prod.deliveries"]["spec"]["partitions"] == 24
    # An overflow lane mirrors deliveries partition for partition.
    assert all(topics[lane]["spec"]["partitions"] == 24 for lane in lanes)
    assert int(topics["prod.events.quarantine"]["spec"]["config"]["max.message.bytes"]) >= int(
        topics["prod.events"]["spec"]["config"]["max.message.bytes"]
    )
    assert topics["prod.events"]["spec"]["config"]["compression.type"] == "zstd"
    # The attempt log holds small records: the base size, as `hookline-fanout topics` gives it.
    assert topics["prod.deliveries.attempts"]["spec"]["config"]["max.message.bytes"] == topics[
        "prod.deliveries"]["spec"]["config"]["max.message.bytes"]


def test_strimzi_refuses_unsafe_topic_settings():
    base = ["--set", "topics.strimzi.enabled=true", "--set", "topics.provision.enabled=false", "--set", "topics.strimzi.cluster=k"]
    out = helm_template(*base, "--set", "topics.perTopic.events.retention=1d")
    assert out.returncode != 0 and "retention 1d is below the minimum" in out.stderr
    out = helm_template(*base, "--set", "topics.perTopic.events.config.max\\.message\\.bytes=4194304")
    assert out.returncode != 0 and "events.quarantine: max.message.bytes" in out.stderr
    out = helm_template("--set", "topics.strimzi.enabled=true", "--set", "topics.strimzi.cluster=k")
    assert out.returncode != 0 and "turn one off" in out.stderr


# --- scaling -------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_FILES)
def test_lag_scaling_only_on_events_and_deliveries(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    prefix = values_of(values)["topics"]["prefix"]
    for so in kinds(docs, "ScaledObject"):
        comp = component_of(so)
        assert comp in LAG_TOPICS, f"{comp} must not scale on lag"
        triggers = so["spec"]["triggers"]
        assert [t["type"] for t in triggers] == ["kafka"]
        meta = triggers[0]["metadata"]
        assert meta["topic"] == prefix + LAG_TOPICS[comp], meta
        assert "retry" not in meta["topic"] and "dlq" not in meta["topic"]
        assert meta["consumerGroup"] == values_of(values)[{"dlq-sink": "dlqSink"}.get(comp, comp)]["groupId"]
        behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 60
    for hpa in kinds(docs, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 60
    for dep in kinds(docs, "Deployment"):
        comp = component_of(dep)
        key = {"dlq-sink": "dlqSink"}.get(comp, comp)
        scaled = values_of(values)[key]["autoscaling"]["enabled"]
        assert ("replicas" in dep["spec"]) != scaled, f"{comp}: replicas must be left to the autoscaler"


def test_scaling_guards():
    out = helm_template("--set", "dlqSink.autoscaling.mode=keda")
    assert out.returncode != 0 and "dlqSink/autoscaling/mode" in out.stderr
    out = helm_template("--set", "fanout.autoscaling.enabled=true", "--set", "fanout.autoscaling.maxReplicas=40")
    assert out.returncode != 0 and "exceeds the partitions of events (12)" in out.stderr


def partitions_of(v: dict, topic: str) -> int:
    t = v["topics"]
    return int((t["perTopic"].get(topic) or {}).get("partitions", t["partitions"]))


def consumer_partitions(v: dict, key: str) -> int:
    """The replicas a component's consumers keep busy: fanout has one consumer on
    events; the dispatcher one per topic (deliveries and each retry tier), so
    the fewest partitions among them; the dlq-sink one on the DLQ, the
    quarantine and the attempt log together, so their sum."""
    if key == "fanout":
        return partitions_of(v, "events")
    if key == "dispatcher":
        topics = ["deliveries", *(f"deliveries.{t['name']}" for t in v["topics"]["retryTiers"])]
        return min(partitions_of(v, t) for t in topics)
    return sum(partitions_of(v, t) for t in ("deliveries.dlq", "events.quarantine", "deliveries.attempts"))


@pytest.mark.parametrize("values", VALUE_FILES)
def test_no_component_runs_more_replicas_than_its_consumers_have_partitions(values, rendered):
    docs = rendered[(values, KUBE_DEFAULT)]
    v = values_of(values)
    scalers = {component_of(d): d["spec"] for d in docs if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")}
    for dep in kinds(docs, "Deployment"):
        comp = component_of(dep)
        key = {"dlq-sink": "dlqSink"}.get(comp, comp)
        scaler = scalers.get(comp)
        most = dep["spec"]["replicas"] if scaler is None else scaler.get("maxReplicas", scaler.get("maxReplicaCount"))
        assert most <= consumer_partitions(v, key), f"{comp}: {most} replicas, some would get no partition"


def test_replicas_beyond_the_partitions_their_consumers_read_fail_rendering():
    def fails(message, *args):
        out = helm_template(*args)
        assert out.returncode != 0, args
        assert message in out.stderr, out.stderr
        assert "extra consumers would sit idle, fail /readyz" in out.stderr
        return out.stderr

    def renders(*args):
        out = helm_template(*args)
        assert out.returncode == 0, out.stderr

    def autoscaled(key, mode, most):
        return ["--set", f"{key}.autoscaling.enabled=true", "--set", f"{key}.autoscaling.mode={mode}",
                "--set", f"{key}.autoscaling.maxReplicas={most}"]

    # fanout: one consumer on events; replicaCount, else maxReplicas in either mode.
    err = fails("fanout.replicaCount (13) exceeds the partitions of events (12)", "--set", "fanout.replicaCount=13")
    assert "lower fanout.replicaCount or raise topics.perTopic.events.partitions" in err
    for mode in ("hpa", "keda"):
        fails("fanout.autoscaling.maxReplicas (13) exceeds the partitions of events (12)", *autoscaled("fanout", mode, 13))
    renders(*autoscaled("fanout", "hpa", 12), "--set", "fanout.replicaCount=40")
    renders("--set", "fanout.replicaCount=48", "--set", "topics.perTopic.events.partitions=48")
    renders("--set", "fanout.enabled=false", "--set", "fanout.replicaCount=99")
    # dispatcher: one consumer per topic, so the topic with the fewest partitions
    # bounds it, and the message names that topic.
    retry_1m = "topics.perTopic.deliveries\\.retry-1m.partitions=8"
    err = fails("dispatcher.replicaCount (9) exceeds the partitions of deliveries.retry-1m (8), the fewest of deliveries, deliveries.strict and its retry tiers",
                "--set", retry_1m, "--set", "dispatcher.replicaCount=9")
    assert "raise topics.perTopic.deliveries.retry-1m.partitions" in err
    renders("--set", retry_1m, "--set", "dispatcher.replicaCount=8")
    fails("dispatcher.replicaCount (2) exceeds the partitions of deliveries (1)", "--set", "topics.perTopic.deliveries.partitions=1")
    for mode in ("hpa", "keda"):
        fails("dispatcher.autoscaling.maxReplicas (24) exceeds the partitions of deliveries.strict (12)",
              "--set", "topics.perTopic.deliveries.partitions=24", *autoscaled("dispatcher", mode, 24))
    # The tiers are those of topics.retryTiers, each topic deliveries.<name>.
    fails("dispatcher.replicaCount (6) exceeds the partitions of deliveries.retry-5m (4)", "-f", str(VALUES_DIR / "retry-ladder.yaml"),
          "--set", "topics.perTopic.deliveries\\.retry-5m.partitions=4", "--set", "dispatcher.replicaCount=6")
    # dlq-sink: one consumer shares the DLQ's, the quarantine's and the attempt log's
    # partitions. More than one replica needs a shared (ReadWriteMany) archive claim.
    rwx = ["--set", "dlqSink.archive.persistence.accessModes={ReadWriteMany}"]
    err = fails("dlqSink.replicaCount (37) exceeds the partitions of deliveries.dlq + events.quarantine + deliveries.attempts (36)",
                "--set", "dlqSink.replicaCount=37", *rwx)
    assert "lower dlqSink.replicaCount" in err
    renders("--set", "dlqSink.replicaCount=36", *rwx)
    small = ["--set", "topics.perTopic.deliveries\\.dlq.partitions=3", "--set", "topics.perTopic.events\\.quarantine.partitions=1",
             "--set", "topics.perTopic.deliveries\\.attempts.partitions=1", *rwx]
    fails("dlqSink.autoscaling.maxReplicas (6) exceeds the partitions of deliveries.dlq + events.quarantine + deliveries.attempts (5)",
          *small, *autoscaled("dlqSink", "hpa", 6))
    renders(*small, *autoscaled("dlqSink", "hpa", 5))


# --- the dlq-sink's archive ------------------------------------------------------


def dlq_sink_pod(docs: list[dict]) -> tuple[dict, dict]:
    (dep,) = [d for d in kinds(docs, "Deployment") if component_of(d) == "dlq-sink"]
    (volume,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "archive"]
    return dep, volume


def notes(*args: str) -> str:
    """NOTES.txt as the install prints it. `helm install --dry-run` asks a cluster
    for its version, so a copy of the chart renders the notes as a template of
    its own (a YAML block holding the text) with `helm template`."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "hookline"
        shutil.copytree(CHART, chart)
        text = (chart / "templates/NOTES.txt").read_text()
        (chart / "templates/notes-check.yaml").write_text(
            "kind: Notes\nnotes: |\n" + "".join("  " + line for line in text.splitlines(True))
        )
        out = subprocess.run(
            [HELM, "template", "hookline", str(chart), "-n", NAMESPACE, "--kube-version", KUBE_DEFAULT,
             "--show-only", "templates/notes-check.yaml", *args],
            capture_output=True,
            text=True,
        )
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)["notes"]


def test_the_default_archive_is_a_claim_the_chart_keeps(rendered):
    docs = rendered[("defaults", KUBE_DEFAULT)]
    (pvc,) = kinds(docs, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "hookline-dlq-sink-archive"
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    dep, volume = dlq_sink_pod(docs)
    assert volume == {"name": "archive", "persistentVolumeClaim": {"claimName": "hookline-dlq-sink-archive"}}
    # One node mounts it: the old pod lets go before the new one starts.
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert {"name": "archive", "mountPath": "/var/lib/hookline/archive"} in c["volumeMounts"]
    assert configmap_env(docs, "dlq-sink")["HOOKLINE_ARCHIVE_URL"] == "/var/lib/hookline/archive"
    text = notes()
    assert "hookline-dlq-sink-archive" in text and "WARNING" not in text
    # The other components keep the default rolling update.
    assert all("strategy" not in d["spec"] for d in kinds(docs, "Deployment") if component_of(d) != "dlq-sink")


def test_an_ephemeral_archive_is_explicit_and_warned_about():
    docs = render("defaults", KUBE_DEFAULT, "--set", "dlqSink.archive.ephemeral=true")
    assert not kinds(docs, "PersistentVolumeClaim")
    dep, volume = dlq_sink_pod(docs)
    assert volume == {"name": "archive", "emptyDir": {}}
    assert "strategy" not in dep["spec"]
    assert "WARNING: dlqSink.archive.ephemeral is true" in notes("--set", "dlqSink.archive.ephemeral=true")


def test_archive_claim_settings_and_alternatives():
    docs = render("defaults", KUBE_DEFAULT, "--set", "dlqSink.archive.persistence.storageClassName=fast",
                  "--set", "dlqSink.archive.persistence.size=50Gi", "--set", "dlqSink.archive.persistence.keepOnUninstall=false",
                  "--set", "dlqSink.archive.persistence.accessModes={ReadWriteMany}", "--set", "dlqSink.replicaCount=2")
    (pvc,) = kinds(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "fast" and pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert "helm.sh/resource-policy" not in (pvc["metadata"].get("annotations") or {})
    dep, _ = dlq_sink_pod(docs)
    assert "strategy" not in dep["spec"]
    # An existing claim: no claim rendered, that one mounted.
    docs = render("defaults", KUBE_DEFAULT, "--set", "dlqSink.archive.existingClaim=archive")
    assert not kinds(docs, "PersistentVolumeClaim")
    assert dlq_sink_pod(docs)[1] == {"name": "archive", "persistentVolumeClaim": {"claimName": "archive"}}
    # S3: no volume, no claim.
    docs = render("defaults", KUBE_DEFAULT, "--set", "dlqSink.archive.url=s3://bucket/dlq")
    assert not kinds(docs, "PersistentVolumeClaim")
    (dep,) = [d for d in kinds(docs, "Deployment") if component_of(d) == "dlq-sink"]
    assert not [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "archive"]
    assert "s3://bucket/dlq" in notes("--set", "dlqSink.archive.url=s3://bucket/dlq")


def test_archive_guards():
    out = helm_template("--set", "dlqSink.replicaCount=2")
    assert out.returncode != 0 and "mounts on one node" in out.stderr and "ReadWriteMany" in out.stderr
    out = helm_template("--set", "dlqSink.autoscaling.enabled=true")
    assert out.returncode != 0 and "dlqSink.autoscaling.enabled asks for more than one replica" in out.stderr
    out = helm_template("--set", "dlqSink.archive.existingClaim=a", "--set", "dlqSink.archive.ephemeral=true")
    assert out.returncode != 0 and "exclude each other" in out.stderr


def test_values_schema_is_strict():
    out = helm_template("--set", "dispatcher.replicas=3")
    assert out.returncode != 0 and "replicas" in out.stderr
    out = helm_template("--set", "kafka.bootstrap=x:9092")
    assert out.returncode != 0


# --- monitoring ----------------------------------------------------------------


def metric_names_in_code() -> set[str]:
    names = set()
    for f in (REPO / "crates/runtime/src/metric_names").glob("*.rs"):
        names |= set(re.findall(r'"(hookline_[a-z0-9_]+)"', f.read_text()))
    return names


# Names the alerts and dashboard use that crates/runtime/src/metric_names/ does
# not define yet (the monitoring design implies them); their owners are told to
# match them.
PENDING_METRICS: set[str] = set()


def referenced_metrics(text: str) -> set[str]:
    found = set(re.findall(r"\b(hookline_[a-z0-9_]+?)(?:_bucket)?\b", text))
    return {n for n in found if not n.startswith("hookline_build")} | (
        {"hookline_build_info"} if "hookline_build_info" in text else set()
    )


def test_alerts_and_dashboard_use_known_metric_names(rendered):
    docs = rendered[("monitoring", KUBE_DEFAULT)]
    (rule,) = kinds(docs, "PrometheusRule")
    (dash_cm,) = [d for d in kinds(docs, "ConfigMap") if "hookline.json" in d.get("data", {})]
    text = yaml.safe_dump(rule["spec"]) + dash_cm["data"]["hookline.json"]
    unknown = referenced_metrics(text) - metric_names_in_code() - PENDING_METRICS
    assert not unknown, f"not in crates/runtime/src/metric_names/: {sorted(unknown)}"


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar(rendered):
    docs = rendered[("monitoring", KUBE_DEFAULT)]
    (cm,) = [d for d in kinds(docs, "ConfigMap") if "hookline.json" in d.get("data", {})]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["hookline.json"])
    assert dash["uid"] == "hookline-overview" and len(dash["panels"]) >= 10


def test_pod_monitor_scrapes_the_services_not_the_hook(rendered):
    docs = rendered[("monitoring", KUBE_DEFAULT)]
    (pm,) = kinds(docs, "PodMonitor")
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    (expr,) = pm["spec"]["selector"]["matchExpressions"]
    assert sorted(expr["values"]) == ["dispatcher", "dlq-sink", "fanout"]


@pytest.fixture
def rules_dir(rendered, tmp_path) -> Path:
    (rule,) = kinds(rendered[("monitoring", KUBE_DEFAULT)], "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    shutil.copy(HERE / "alerts.test.yaml", tmp_path / "alerts.test.yaml")
    return tmp_path


def test_promtool_checks_the_rendered_rules(rules_dir):
    out = subprocess.run([PROMTOOL, "check", "rules", "rules.yaml"], cwd=rules_dir, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_cover_every_alert(rules_dir):
    rules = yaml.safe_load((rules_dir / "rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load((HERE / "alerts.test.yaml").read_text())
    covered = {
        t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts")
    }
    assert alerts == covered, f"alerts without a firing test case: {sorted(alerts - covered)}"
    out = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts.test.yaml"], cwd=rules_dir, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
