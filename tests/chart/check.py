"""Checks the Helm chart (helm/latchkey) offline, without a cluster.

Run by scripts/check-chart.sh in the CI tools' environment. Helm's own Go
code (helm-python-sdk) lints and renders the chart for every value set in
tests/chart/values/ and every `helm install` example of the book and the chart's README; each
rendered manifest must pass kubernetes-validate's strict schemas, and the
invariants below must hold for each render. Value sets that the chart must
refuse are rendered too, and must fail. Each invariant is also run once on a
render with a planted fault, which it must report, so that a check that can
no longer fail does not pass unnoticed.

The invariants read the service's own sources where they can drift from
the chart: the settings and their defaults (src/config/) and the metric
names and labels (src/metrics.rs).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import helm_python
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "latchkey"
DASHBOARD = CHART / "dashboards" / "latchkey.json"
VALUE_SETS = Path(__file__).resolve().parent / "values"
# The book's chapters that show `helm install` commands, and the chart's README.
READMES = [ROOT / "docs/src/deploying.md", ROOT / "docs/src/production.md", CHART / "README.md"]

# The newest Kubernetes kubernetes-validate knows; the chart's floor comes
# from Chart.yaml's kubeVersion.
KUBE_LATEST = kubernetes_validate.latest_version()
# The kubelet's preStop `sleep` action is on by default from this version.
KUBE_SLEEP_ACTION = "1.30"

# Kinds of custom resources: no schema to validate against here.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}

# Values that become LATCHKEY_* variables as they are (numbers as integers).
VALUE_VARIABLES = {
    "redis.mode": "LATCHKEY_REDIS_MODE",
    "redis.sentinelMaster": "LATCHKEY_SENTINEL_MASTER",
    "config.keyPrefix": "LATCHKEY_KEY_PREFIX",
    "config.maxWaitMs": "LATCHKEY_MAX_WAIT_MS",
    "config.queueGraceMs": "LATCHKEY_QUEUE_GRACE_MS",
    "config.maxWaiters": "LATCHKEY_MAX_WAITERS",
    "config.minReplicas": "LATCHKEY_MIN_REPLICAS",
    "config.log": "LATCHKEY_LOG",
    "config.defaultLeaseMs": "LATCHKEY_DEFAULT_LEASE_MS",
    "config.minLeaseMs": "LATCHKEY_MIN_LEASE_MS",
    "config.maxLeaseMs": "LATCHKEY_MAX_LEASE_MS",
    "config.redisPoolSize": "LATCHKEY_REDIS_POOL_SIZE",
    "config.redisConnectTimeoutMs": "LATCHKEY_REDIS_CONNECT_TIMEOUT_MS",
    "config.redisResponseTimeoutMs": "LATCHKEY_REDIS_RESPONSE_TIMEOUT_MS",
    "config.corsOrigins": "LATCHKEY_CORS_ORIGINS",
    "config.maxBodyBytes": "LATCHKEY_MAX_BODY_BYTES",
    "config.shutdownGraceMs": "LATCHKEY_SHUTDOWN_GRACE_MS",
}
# Settings the chart sets from more than one value (checked one by one in
# check_environment).
DERIVED_VARIABLES = {
    "LATCHKEY_LISTEN",
    "LATCHKEY_REDIS_URL",
    "LATCHKEY_REDLOCK_NODES",
    "LATCHKEY_API_KEYS_FILE",
    "LATCHKEY_REDIS_TLS_CA_FILE",
    "LATCHKEY_REDIS_TLS_CERT_FILE",
    "LATCHKEY_REDIS_TLS_KEY_FILE",
}
# Settings of src/config/ the chart leaves unset on purpose.
UNSET_VARIABLES = {
    "LATCHKEY_API_KEYS": "keys come from a Secret mounted as LATCHKEY_API_KEYS_FILE",
    "LATCHKEY_CONFIG": "every setting is an environment variable",
}
# The Redis TLS settings, which a latchkey build with Redis TLS support
# has; until src/config/ declares them they are accepted by name.
TLS_VARIABLES = {
    "LATCHKEY_REDIS_TLS_CA_FILE",
    "LATCHKEY_REDIS_TLS_CERT_FILE",
    "LATCHKEY_REDIS_TLS_KEY_FILE",
}
# Labels Prometheus adds to every scraped series (the target's).
TARGET_LABELS = {"namespace", "pod", "instance", "job", "service", "container", "endpoint"}
PROMQL_FUNCTIONS = {
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase",
    "histogram_quantile", "vector", "topk", "clamp_min", "label_values",
}
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset"}


# ---------------------------------------------------------------------------
# The service's sources


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str
    labels: tuple[str, ...]

    def series(self) -> set[str]:
        """The series names Prometheus stores for this metric."""
        if self.kind == "HistogramVec":
            return {f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        return {self.name}


def registered_metrics(source: str) -> dict[str, Metric]:
    """The metrics src/metrics.rs creates *and* registers, by name."""
    created = {}
    pattern = re.compile(
        r"let (\w+) = (IntCounterVec|HistogramVec|IntGauge|IntCounter)::new\((.*?)\)\s*\.expect",
        re.S,
    )
    for variable, kind, body in pattern.findall(source):
        name = re.search(r'"(latchkey_\w+)"', body)
        if not name:
            raise SystemExit(f"src/metrics.rs: no latchkey_ name for `{variable}`")
        labels = re.search(r"&\[([^\]]*)\]", body)
        label_names = tuple(re.findall(r'"(\w+)"', labels.group(1))) if labels else ()
        created[variable] = Metric(name.group(1), kind, label_names)
    registry = re.search(r"for collector in \[(.*?)\]\s*\{", source, re.S)
    if not registry:
        raise SystemExit("src/metrics.rs: no `for collector in [...]` registration loop")
    registered = re.findall(r"Box::new\((\w+)\.clone\(\)\)", registry.group(1))
    metrics = {created[v].name: created[v] for v in registered if v in created}
    if len(metrics) < 5:
        raise SystemExit(f"src/metrics.rs: only {len(metrics)} registered metrics parsed")
    return metrics


def settings(source: str) -> dict[str, str | None]:
    """Every LATCHKEY_* variable of src/config/, with its default."""
    found: dict[str, str | None] = {}
    for attribute in re.findall(r"#\[arg\((.*?)\)\]\s*\n", source, re.S):
        env = re.search(r'env = "(LATCHKEY_\w+)"', attribute)
        if env:
            default = re.search(r'default_value = "([^"]*)"', attribute)
            found[env.group(1)] = default.group(1) if default else None
    if "LATCHKEY_REDIS_URL" not in found or len(found) < 15:
        raise SystemExit(f"src/config/: parsed only {sorted(found)}")
    return found


# ---------------------------------------------------------------------------
# Rendering


@dataclass
class Render:
    """One rendered release: its objects and the values it was made from."""

    label: str
    values: dict[str, Any]
    docs: list[dict[str, Any]]
    notes: str = ""

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d.get("kind") == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any] | None:
        for doc in self.of_kind(kind):
            if name is None or doc["metadata"]["name"] == name:
                return doc
        return None

    def deployment(self) -> dict[str, Any]:
        deployments = self.of_kind("Deployment")
        if len(deployments) != 1:
            raise Problem(f"expected one Deployment, got {len(deployments)}")
        return deployments[0]

    def container(self) -> dict[str, Any]:
        return self.deployment()["spec"]["template"]["spec"]["containers"][0]


class Problem(Exception):
    """An invariant that does not hold."""


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` laid over `base` as Helm lays --set over -f (lists replace)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def render(chart: helm_python.Chart, label: str, values: dict[str, Any], name: str) -> Render:
    files = chart.render(values, name=name, namespace="apps", is_install=True)
    docs, notes = [], ""
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                docs.append(doc)
    return Render(label, chart.merge_values(values), docs, notes)


def get(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node[part]
    return node


def as_list(value: Any) -> list[str]:
    """A list setting as the chart reads it (a list, or a comma-separated string)."""
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    return [item.strip() for item in str(value or "").split(",") if item.strip()]


def plain(value: Any) -> str:
    """A value as the chart writes it into a variable (whole numbers as integers)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# ---------------------------------------------------------------------------
# The container's environment, as the kubelet would build it


@dataclass(frozen=True)
class Env:
    """A variable's value and where it comes from: "configmap", "value"
    (literal in the pod spec), "secret" (a Secret of this chart, decoded) or
    "secret-ref" (a Secret the operator manages: value is NAME/KEY)."""

    source: str
    value: str
    optional: bool = False


def environment(r: Render) -> dict[str, Env]:
    container = r.container()
    env: dict[str, Env] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        if not ref:
            raise Problem(f"envFrom other than a configMapRef: {source}")
        config_map = r.one("ConfigMap", ref["name"])
        if config_map is None:
            raise Problem(f"envFrom names ConfigMap {ref['name']}, which the chart does not render")
        for key, value in (config_map.get("data") or {}).items():
            env[key] = Env("configmap", str(value))
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item:
            # $(VAR) refers to a variable defined before (the kubelet's rule).
            def expand(match: re.Match[str]) -> str:
                known = env.get(match.group(1))
                if known is None:
                    return match.group(0)
                return f"<{known.source}:{known.value}>"

            env[name] = Env("value", re.sub(r"\$\((\w+)\)", expand, str(item["value"])))
            continue
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if not ref:
            raise Problem(f"{name}: neither a value nor a secretKeyRef")
        secret = r.one("Secret", ref["name"])
        if secret is not None:
            data = secret.get("data") or {}
            if ref["key"] not in data:
                raise Problem(f"{name}: Secret {ref['name']} has no key {ref['key']}")
            env[name] = Env("secret", base64.b64decode(data[ref["key"]]).decode())
        else:
            env[name] = Env("secret-ref", f"{ref['name']}/{ref['key']}", bool(ref.get("optional")))
    return env


def mounted_file(r: Render, path: str) -> tuple[str, str]:
    """The (Secret name, key) mounted read-only at `path` in the container."""
    spec = r.deployment()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in r.container().get("volumeMounts", []):
        directory = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(directory):
            continue
        secret = volumes.get(mount["name"], {}).get("secret")
        if not secret:
            continue
        if not mount.get("readOnly"):
            raise Problem(f"{path}: mount {mount['name']} is not readOnly")
        for item in secret.get("items", []):
            if directory + item["path"] == path:
                return secret["secretName"], item["key"]
    raise Problem(f"{path} is no file of a mounted Secret")


# ---------------------------------------------------------------------------
# Invariants: each takes a render and raises Problem


def check_well_formed(r: Render) -> None:
    seen = set()
    for doc in r.docs:
        for field_name in ("apiVersion", "kind", "metadata"):
            if field_name not in doc:
                raise Problem(f"an object without {field_name}: {str(doc)[:120]}")
        if not doc["metadata"].get("name"):
            raise Problem(f"{doc['kind']} without metadata.name")
        key = (doc["kind"], doc["metadata"]["name"])
        if key in seen:
            raise Problem(f"{key} rendered twice")
        seen.add(key)


def kube_floor() -> str:
    """The oldest Kubernetes of Chart.yaml's kubeVersion (`>=1.25.0-0`)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    match = re.fullmatch(r">=\s*(\d+\.\d+)\.\d+(-0)?", chart["kubeVersion"])
    if not match:
        raise SystemExit(f"Chart.yaml kubeVersion {chart['kubeVersion']!r} is not >=X.Y.Z-0")
    return match.group(1)


def check_schemas(r: Render) -> None:
    uses_sleep = any("sleep" in (c.get("lifecycle", {}).get("preStop") or {})
                     for d in r.of_kind("Deployment")
                     for c in d["spec"]["template"]["spec"]["containers"])
    floor = KUBE_SLEEP_ACTION if uses_sleep else kube_floor()
    for doc in r.docs:
        where = f"{doc['kind']} {doc['metadata']['name']}"
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            if not isinstance(doc.get("spec"), dict):
                raise Problem(f"{where}: no spec")
            continue
        for version in (floor, KUBE_LATEST):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = "/".join(str(p) for p in e.path)
                raise Problem(f"{where} (Kubernetes {version}): {path}: {e.message}") from None
            except kubernetes_validate.SchemaNotFoundError as e:
                raise Problem(f"{where}: {e.message}") from None


def prestop_seconds(container: dict[str, Any]) -> int:
    pre_stop = (container.get("lifecycle") or {}).get("preStop") or {}
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"]["seconds"])
    command = (pre_stop.get("exec") or {}).get("command")
    if command:
        if command[0] != "/bin/sleep" or len(command) != 2:
            raise Problem(f"preStop exec is not `/bin/sleep N`: {command}")
        return int(command[1])
    return 0


def check_termination(r: Render) -> None:
    """The pod may take the preStop pause plus latchkey's whole drain."""
    spec = r.deployment()["spec"]["template"]["spec"]
    container = r.container()
    pause = prestop_seconds(container)
    if r.values["preStop"]["enabled"] and pause != int(r.values["preStop"]["seconds"]):
        raise Problem(f"preStop pauses {pause} s, preStop.seconds is {r.values['preStop']['seconds']}")
    grace_ms = int(environment(r)["LATCHKEY_SHUTDOWN_GRACE_MS"].value)
    period = spec.get("terminationGracePeriodSeconds")
    if period is None or period * 1000 <= pause * 1000 + grace_ms:
        raise Problem(
            f"terminationGracePeriodSeconds {period} is not above preStop {pause} s "
            f"+ LATCHKEY_SHUTDOWN_GRACE_MS {grace_ms} ms"
        )


def check_environment(r: Render, config_rs: dict[str, str | None]) -> None:
    """Every value the chart maps arrives in the container as its variable,
    nothing else LATCHKEY_* is set, and the names are settings."""
    v = r.values
    env = environment(r)
    expected: dict[str, Env | None] = {}
    for path, name in VALUE_VARIABLES.items():
        expected[name] = Env("configmap", plain(get(v, path)))
    expected["LATCHKEY_LISTEN"] = Env("configmap", f"0.0.0.0:{plain(v['service']['containerPort'])}")

    redis = v["redis"]
    urls, nodes = as_list(redis["url"]), as_list(redis["redlockNodes"])
    if redis["existingSecret"]:
        keys = redis["existingSecretKeys"]
        expected["LATCHKEY_REDIS_URL"] = Env("secret-ref", f"{redis['existingSecret']}/{keys['url']}")
        expected["LATCHKEY_REDLOCK_NODES"] = Env(
            "secret-ref", f"{redis['existingSecret']}/{keys['redlockNodes']}", optional=True)
    else:
        auth = redis["auth"]
        if auth["existingSecret"]:
            password = f"<secret-ref:{auth['existingSecret']}/{auth['passwordKey']}>"
            expected["LATCHKEY_REDIS_URL"] = Env("value", ",".join(
                url.replace("://", f"://{auth['username']}:{password}@", 1) for url in urls))
        else:
            expected["LATCHKEY_REDIS_URL"] = Env("secret", ",".join(urls))
        expected["LATCHKEY_REDLOCK_NODES"] = Env("secret", ",".join(nodes)) if nodes else None

    api_keys = v["apiKeys"]
    if api_keys["existingSecret"] or api_keys["entries"]:
        path = env.get("LATCHKEY_API_KEYS_FILE")
        if path is None:
            raise Problem("API keys are configured, LATCHKEY_API_KEYS_FILE is not set")
        secret, key = mounted_file(r, path.value)
        if api_keys["existingSecret"]:
            if (secret, key) != (api_keys["existingSecret"], api_keys["existingSecretKey"]):
                raise Problem(f"{path.value} is {secret}/{key}, not apiKeys.existingSecret's key")
        else:
            made = r.one("Secret", secret)
            entries = base64.b64decode((made or {}).get("data", {}).get(key, "")).decode()
            if entries.split() != list(api_keys["entries"]):
                raise Problem(f"{path.value} holds {entries.split()}, not apiKeys.entries")
        expected["LATCHKEY_API_KEYS_FILE"] = Env("configmap", path.value)

    tls = redis["tls"]
    for name, key in (("LATCHKEY_REDIS_TLS_CA_FILE", "caKey"),
                      ("LATCHKEY_REDIS_TLS_CERT_FILE", "certKey"),
                      ("LATCHKEY_REDIS_TLS_KEY_FILE", "keyKey")):
        if tls["existingSecret"] and tls[key]:
            path = env.get(name)
            if path is None:
                raise Problem(f"redis.tls.{key} is set, {name} is not")
            if mounted_file(r, path.value) != (tls["existingSecret"], tls[key]):
                raise Problem(f"{name} {path.value} is not redis.tls.{key} of redis.tls.existingSecret")
            expected[name] = Env("configmap", path.value)

    for name, want in expected.items():
        have = env.get(name)
        if want is None:
            if have is not None:
                raise Problem(f"{name} is set ({have.source}) though its values are empty")
        elif have != want:
            raise Problem(f"{name}: expected {want}, the container gets {have}")
    known = set(config_rs) | TLS_VARIABLES
    for name in env:
        if name.startswith("LATCHKEY_"):
            if name not in known:
                raise Problem(f"{name} is set, but it is no setting of src/config/")
            if name not in expected:
                raise Problem(f"{name} is set, but no value of the chart maps to it")


def check_settings_coverage(config_rs: dict[str, str | None], defaults: dict[str, Any]) -> None:
    """Every setting of src/config/ is mapped or deliberately unset, and
    the chart's defaults are the binary's."""
    mapped = set(VALUE_VARIABLES.values()) | DERIVED_VARIABLES
    for name in config_rs:
        if name not in mapped and name not in UNSET_VARIABLES:
            raise Problem(f"src/config/ has {name}; map it in the chart (and in this check) "
                          "or list it in UNSET_VARIABLES with the reason")
    for name in mapped - TLS_VARIABLES:
        if name not in config_rs:
            raise Problem(f"the chart maps {name}, which src/config/ does not declare")
    for path, name in VALUE_VARIABLES.items():
        binary = config_rs[name]
        if binary is not None and plain(get(defaults, path)) != binary:
            raise Problem(f"{path} defaults to {get(defaults, path)!r}, latchkey's {name} to {binary!r}")


def check_probes(r: Render) -> None:
    container = r.container()
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get_action = (container.get(probe) or {}).get("httpGet")
        if not get_action or get_action.get("path") != path:
            raise Problem(f"{probe} is not an HTTP GET of {path}: {container.get(probe)}")
        port = get_action.get("port")
        if port not in ports and port not in ports.values():
            raise Problem(f"{probe} probes port {port}, which the container does not declare")
    listen = environment(r)["LATCHKEY_LISTEN"].value
    if int(listen.rsplit(":", 1)[1]) != ports.get("http"):
        raise Problem(f"LATCHKEY_LISTEN {listen} is not the container's http port {ports.get('http')}")


def pod_specs(r: Render) -> list[tuple[str, dict[str, Any]]]:
    specs = [(f"Deployment {d['metadata']['name']}", d["spec"]["template"]["spec"])
             for d in r.of_kind("Deployment")]
    specs += [(f"Pod {p['metadata']['name']}", p["spec"]) for p in r.of_kind("Pod")]
    return specs


def check_security(r: Render) -> None:
    for where, spec in pod_specs(r):
        pod = spec.get("securityContext") or {}
        for container in spec["containers"] + spec.get("initContainers", []):
            c = container.get("securityContext") or {}
            what = f"{where}, container {container['name']}"
            if not c.get("runAsNonRoot", pod.get("runAsNonRoot")):
                raise Problem(f"{what}: runAsNonRoot is not true")
            if c.get("runAsUser", pod.get("runAsUser")) in (0, None):
                raise Problem(f"{what}: no non-zero runAsUser")
            if c.get("readOnlyRootFilesystem") is not True:
                raise Problem(f"{what}: readOnlyRootFilesystem is not true")
            if c.get("allowPrivilegeEscalation") is not False:
                raise Problem(f"{what}: allowPrivilegeEscalation is not false")
            if c.get("privileged"):
                raise Problem(f"{what}: privileged")
            capabilities = c.get("capabilities") or {}
            if "ALL" not in (capabilities.get("drop") or []) or capabilities.get("add"):
                raise Problem(f"{what}: capabilities are not drop: [ALL] without add: {capabilities}")
            seccomp = (c.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
            if seccomp != "RuntimeDefault":
                raise Problem(f"{what}: seccompProfile is {seccomp}, not RuntimeDefault")
        if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
            raise Problem(f"{where}: shares a host namespace")


CREDENTIALS = re.compile(r"rediss?://[^/@,\s]*:([^/@,\s]+)@")


def secret_strings(r: Render) -> set[str]:
    """What must never be readable outside a Secret: the Redis URLs that
    carry credentials (and those credentials), the API key entries."""
    redis = r.values["redis"]
    strings = set()
    for url in as_list(redis["url"]) + as_list(redis["redlockNodes"]):
        match = CREDENTIALS.search(url)
        if match:
            strings |= {url, match.group(1)}
    strings |= {str(entry) for entry in r.values["apiKeys"]["entries"]}
    return strings


def check_no_plaintext_secrets(r: Render) -> None:
    secrets = secret_strings(r)
    texts: list[tuple[str, str, str]] = []
    for config_map in r.of_kind("ConfigMap"):
        where = f"ConfigMap {config_map['metadata']['name']}"
        for key, value in (config_map.get("data") or {}).items():
            if re.search(r"REDIS_URL|REDLOCK_NODES|PASSWORD|SECRET|TOKEN|API_KEYS$", key):
                raise Problem(f"{where} has the key {key}, which belongs in a Secret")
            texts.append((where, key, str(value)))
    for name, env in environment(r).items():
        if env.source == "value":
            texts.append(("the container's env", name, env.value))
    texts.append(("NOTES.txt", "", r.notes))
    for where, key, text in texts:
        leaked = [s for s in secrets if s in text]
        if leaked or CREDENTIALS.search(text):
            raise Problem(f"{where}: {key} holds a credential in plain text")


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def check_wiring(r: Render) -> None:
    """Selectors find the latchkey pods and nothing else; the Service, the
    ServiceMonitor, the HPA and the PDB point at what the chart renders."""
    deployment = r.deployment()
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    if not matches(deployment["spec"]["selector"]["matchLabels"], pod_labels):
        raise Problem("the Deployment's selector does not match its pods")
    other_pods = [p["metadata"].get("labels") or {} for p in r.of_kind("Pod")]
    selectors = []
    for service in r.of_kind("Service"):
        selectors.append((f"Service {service['metadata']['name']}", service["spec"]["selector"]))
        ports = {p["name"] for p in r.container()["ports"]}
        for port in service["spec"]["ports"]:
            if port["targetPort"] not in ports:
                raise Problem(f"Service targetPort {port['targetPort']} is no container port")
    for pdb in r.of_kind("PodDisruptionBudget"):
        selectors.append(("the PodDisruptionBudget", pdb["spec"]["selector"]["matchLabels"]))
    spread = deployment["spec"]["template"]["spec"].get("topologySpreadConstraints") or []
    for constraint in spread:
        selectors.append((f"the {constraint['topologyKey']} spread",
                          constraint["labelSelector"]["matchLabels"]))
    for where, selector in selectors:
        if not selector or not matches(selector, pod_labels):
            raise Problem(f"{where} does not select the latchkey pods")
        if any(matches(selector, labels) for labels in other_pods):
            raise Problem(f"{where} also selects a pod that is not latchkey (the test pod)")
    if r.values["topologySpread"]["enabled"] and not r.values["topologySpreadConstraints"]:
        keys = {c["topologyKey"] for c in spread}
        if not {"topology.kubernetes.io/zone", "kubernetes.io/hostname"} <= keys:
            raise Problem(f"the default spread covers {keys}, not zones and nodes")
        if any(c["whenUnsatisfiable"] != "ScheduleAnyway" for c in spread):
            raise Problem("the default spread is not soft (ScheduleAnyway)")
    hpas = r.of_kind("HorizontalPodAutoscaler")
    if hpas:
        target = hpas[0]["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) != ("Deployment", deployment["metadata"]["name"]):
            raise Problem(f"the HPA scales {target}, not the Deployment")
        if "replicas" in deployment["spec"]:
            raise Problem("the Deployment sets replicas while an HPA owns them")
    for monitor in r.of_kind("ServiceMonitor"):
        services = [s for s in r.of_kind("Service")
                    if matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        if len(services) != 1:
            raise Problem(f"the ServiceMonitor selects {len(services)} Services, not 1")
        port_names = {p["name"] for p in services[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            if endpoint.get("port") not in port_names or endpoint.get("path") != "/metrics":
                raise Problem(f"ServiceMonitor endpoint {endpoint} is not the Service's /metrics")


def promql_parts(expr: str) -> tuple[set[str], set[str]]:
    """The series names and the label names an expression refers to."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\$\{?\w+\}?", "", s)
    s = re.sub(r"\[[^\]]*\]", "", s)
    labels: set[str] = set()
    # Grafana's label_values(selector, label)
    labels |= set(re.findall(r"label_values\(\s*[^,]+?\s*,\s*(\w+)\s*\)", s))
    s = re.sub(r"label_values\(\s*([^,]+?)\s*,\s*\w+\s*\)", r"\1", s)
    for body in re.findall(r"\{([^}]*)\}", s):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", body))
    s = re.sub(r"\{[^}]*\}", " ", s)
    grouping = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"
    for body in re.findall(grouping, s):
        labels |= set(re.findall(r"[A-Za-z_]\w*", body))
    s = re.sub(grouping, " ", s)
    names: set[str] = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        token, rest = match.group(0), s[match.end():].lstrip()
        if rest.startswith("("):
            if token not in PROMQL_FUNCTIONS:
                raise Problem(f"unknown function {token}() in {expr!r}")
        elif token not in PROMQL_KEYWORDS and not re.fullmatch(r"\d.*|e\d*", token):
            names.add(token)
    return names, labels


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = []

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if "expr" in t)
            panels(panel.get("panels", []))

    panels(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def check_dashboard(dashboard: dict[str, Any], metrics: dict[str, Metric]) -> None:
    """Every expression refers only to series and labels latchkey exports."""
    series = {s: m for m in metrics.values() for s in m.series()}
    labels = {label for m in metrics.values() for label in m.labels} | TARGET_LABELS | {"le"}
    exprs = dashboard_expressions(dashboard)
    if len(exprs) < len(metrics):
        raise Problem(f"only {len(exprs)} expressions for {len(metrics)} metrics")
    used = set()
    for expr in exprs:
        names, expr_labels = promql_parts(expr)
        if not names:
            raise Problem(f"{expr!r} refers to no metric")
        for name in names:
            if name not in series:
                raise Problem(f"{expr!r} refers to {name}, which src/metrics.rs does not register")
            used.add(series[name].name)
        unknown = sorted(expr_labels - labels)
        if unknown:
            raise Problem(f"{expr!r} uses the label {unknown[0]!r}, no label of a latchkey metric "
                          "or of a scrape target")
    unused = set(metrics) - used
    if unused:
        raise Problem(f"the dashboard shows nothing of {sorted(unused)}")


def check_dashboard_config_map(r: Render, file_text: str) -> None:
    enabled = r.values["metrics"]["dashboard"]["enabled"]
    maps = [c for c in r.of_kind("ConfigMap") if "latchkey.json" in (c.get("data") or {})]
    if not enabled:
        if maps:
            raise Problem("a dashboard ConfigMap is rendered though metrics.dashboard.enabled is false")
        return
    if len(maps) != 1:
        raise Problem(f"{len(maps)} dashboard ConfigMaps")
    labels = maps[0]["metadata"].get("labels") or {}
    if labels.get("grafana_dashboard") != "1":
        raise Problem("the dashboard ConfigMap lacks the label grafana_dashboard: \"1\"")
    if json.loads(maps[0]["data"]["latchkey.json"]) != json.loads(file_text):
        raise Problem("the dashboard ConfigMap is not dashboards/latchkey.json")


# ---------------------------------------------------------------------------
# The run


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.lines.append(f"ok    {text}")
        print(f"ok    {text}", flush=True)

    def fail(self, text: str) -> None:
        self.failures.append(text)
        print(f"FAIL  {text}", flush=True)


def readme_installs() -> list[tuple[str, dict[str, Any], str]]:
    """Every `helm install` command of READMES: (where, values, release)."""
    found = []
    for readme in READMES:
        text = readme.read_text()
        for block in re.findall(r"```sh(?:,norun)?\n(.*?)```", text, re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.split(" #", 1)[0].strip()
                if not line.startswith("helm install"):
                    continue
                words = shlex.split(line)
                release, values = words[2], {}
                i = 4
                while i < len(words):
                    flag = words[i]
                    if flag in ("--set", "--set-string", "--set-json"):
                        parse = {"--set": helm_python.parse_set_string,
                                 "--set-string": helm_python.parse_set_string_values,
                                 "--set-json": helm_python.parse_set_json}[flag]
                        values = merge(values, parse(words[i + 1]))
                        i += 2
                    elif flag in ("-f", "--values"):
                        values = merge(values, yaml.safe_load((ROOT / words[i + 1]).read_text()))
                        i += 2
                    elif flag in ("--namespace", "-n", "--version"):
                        i += 2
                    else:
                        raise SystemExit(f"{readme.name}: cannot read {flag!r} in: {line}")
                if words[3] != "./helm/latchkey":
                    raise SystemExit(f"{readme.name}: installs {words[3]}, not ./helm/latchkey")
                found.append((f"{readme.relative_to(ROOT)}: {line[:90]}", values, release))
    return found


# Value sets the chart must refuse, with a word of the message it must give.
MUST_FAIL: list[tuple[str, dict[str, Any], str]] = [
    ("no Redis URL", {}, "redis.url is required"),
    ("an empty Redis URL list", {"redis": {"url": []}}, "redis.url is required"),
    ("two URLs in standalone mode",
     {"redis": {"url": "redis://a:6379,redis://b:6379"}}, "standalone"),
    ("an http:// URL", {"redis": {"url": "http://a:6379"}}, "redis://"),
    ("an unknown mode", {"redis": {"url": "redis://a:6379", "mode": "replica"}}, "redis.mode"),
    ("two RedLock nodes",
     {"redis": {"url": "redis://a:6379", "redlockNodes": ["redis://b:1", "redis://c:1"]}},
     "at least 3"),
    ("a client certificate without its key",
     {"redis": {"url": "rediss://a:6379", "tls": {"existingSecret": "t", "certKey": "tls.crt"}}},
     "go together"),
    ("TLS files without a rediss:// URL",
     {"redis": {"url": "redis://a:6379", "tls": {"existingSecret": "t"}}}, "rediss://"),
    ("credentials in redis.url with redis.auth",
     {"redis": {"url": "redis://u:p@a:6379", "auth": {"existingSecret": "pw"}}}, "credentials"),
    ("redis.auth with redis.existingSecret",
     {"redis": {"existingSecret": "s", "auth": {"existingSecret": "pw"}}}, "redis.auth"),
    ("a malformed API key entry",
     {"redis": {"url": "redis://a:6379"}, "apiKeys": {"entries": ["team-a:reader:abc"]}},
     "apiKeys.entries[0]"),
    ("terminationGracePeriodSeconds below the drain",
     {"redis": {"url": "redis://a:6379"}, "terminationGracePeriodSeconds": 16}, "at least 17"),
    ("a long drain with the default period set",
     {"redis": {"url": "redis://a:6379"}, "config": {"shutdownGraceMs": 60000},
      "terminationGracePeriodSeconds": 30}, "at least 67"),
    ("a privileged port", {"redis": {"url": "redis://a:6379"}, "service": {"containerPort": 80}},
     "containerPort"),
]


def planted_faults(good: Render, dashboard: dict[str, Any], metrics: dict[str, Metric],
                   config_rs: dict[str, str | None], chart: helm_python.Chart,
                   ) -> list[tuple[str, Callable[[], None]]]:
    """For each invariant, a render (or dashboard) it must reject."""

    def mutated(change: Callable[[Render], None]) -> Render:
        broken = copy.deepcopy(good)
        change(broken)
        return broken

    def with_values(extra: dict[str, Any]) -> Render:
        return render(chart, "planted", merge({"redis": {"url": "redis://a:6379"}}, extra), "lk")

    def set_path(doc: dict[str, Any], path: str, value: Any) -> None:
        *parents, last = path.split(".")
        for part in parents:
            doc = doc[int(part)] if isinstance(doc, list) else doc[part]
        if value is None:
            del doc[last]
        else:
            doc[last] = value

    def dep(r: Render) -> dict[str, Any]:
        return r.deployment()

    def config_map(r: Render) -> dict[str, Any]:
        return next(c for c in r.of_kind("ConfigMap") if "LATCHKEY_LISTEN" in c["data"])

    def bad_dashboard(expr: str) -> dict[str, Any]:
        broken = copy.deepcopy(dashboard)
        broken["panels"][1]["targets"][0]["expr"] = expr
        return broken

    return [
        ("well-formed: an object without metadata", lambda: check_well_formed(
            mutated(lambda r: r.docs[0].pop("metadata")))),
        ("schemas: replicas as a string", lambda: check_schemas(
            mutated(lambda r: set_path(dep(r), "spec.replicas", "two")))),
        ("schemas: an unknown field", lambda: check_schemas(
            mutated(lambda r: set_path(dep(r), "spec.template.spec.gracePeriod", 5)))),
        ("termination: a period below the drain", lambda: check_termination(
            mutated(lambda r: set_path(dep(r), "spec.template.spec.terminationGracePeriodSeconds", 15)))),
        ("termination: no preStop", lambda: check_termination(
            mutated(lambda r: set_path(dep(r), "spec.template.spec.containers.0.lifecycle", None)))),
        ("environment: extraEnv overrides LATCHKEY_REDIS_MODE", lambda: check_environment(
            with_values({"extraEnv": [{"name": "LATCHKEY_REDIS_MODE", "value": "cluster"}]}), config_rs)),
        ("environment: a setting missing from the ConfigMap", lambda: check_environment(
            mutated(lambda r: config_map(r)["data"].pop("LATCHKEY_MAX_WAITERS")), config_rs)),
        ("environment: a misspelt variable", lambda: check_environment(
            with_values({"extraEnv": [{"name": "LATCHKEY_MAX_WAITERZ", "value": "1"}]}), config_rs)),
        ("settings: a setting the chart does not know", lambda: check_settings_coverage(
            {**config_rs, "LATCHKEY_NEW_SETTING": "1"}, good.values)),
        ("settings: a chart default that differs", lambda: check_settings_coverage(
            config_rs, merge(chart.values, {"config": {"maxWaitMs": 1000}}))),
        ("probes: liveness on /", lambda: check_probes(
            with_values({"livenessProbe": {"httpGet": {"path": "/"}}}))),
        ("probes: readiness on /healthz", lambda: check_probes(
            with_values({"readinessProbe": {"httpGet": {"path": "/healthz"}}}))),
        ("security: a writable root filesystem", lambda: check_security(
            with_values({"securityContext": {"readOnlyRootFilesystem": False}}))),
        ("security: no seccomp profile", lambda: check_security(
            with_values({"securityContext": {"seccompProfile": None},
                         "podSecurityContext": {"seccompProfile": None}}))),
        ("security: an added capability", lambda: check_security(
            with_values({"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}))),
        ("security: privilege escalation", lambda: check_security(
            with_values({"securityContext": {"allowPrivilegeEscalation": True}}))),
        ("secrets: the Redis URL in the ConfigMap", lambda: check_no_plaintext_secrets(
            mutated(lambda r: config_map(r)["data"].update(
                LATCHKEY_REDIS_URL="redis://default:pw@a:6379")))),
        ("secrets: a password in a plain env value", lambda: check_no_plaintext_secrets(
            with_values({"extraEnv": [{"name": "X", "value": "rediss://u:hunter2@a:1"}]}))),
        ("wiring: a Service selecting other pods", lambda: check_wiring(
            mutated(lambda r: r.of_kind("Service")[0]["spec"]["selector"].update(tier="x")))),
        ("wiring: the test pod carrying the selector labels", lambda: check_wiring(
            mutated(lambda r: r.of_kind("Pod")[0]["metadata"]["labels"].update(
                dep(r)["spec"]["selector"]["matchLabels"])))),
        ("wiring: a hard spread by default", lambda: check_wiring(
            mutated(lambda r: set_path(dep(r), "spec.template.spec.topologySpreadConstraints.0"
                                       ".whenUnsatisfiable", "DoNotSchedule")))),
        ("dashboard: a metric latchkey does not export", lambda: check_dashboard(
            bad_dashboard("sum(rate(latchkey_locks_acquired_total[5m]))"), metrics)),
        ("dashboard: an object name as a label", lambda: check_dashboard(
            bad_dashboard("sum by (name) (rate(latchkey_acquisitions_total[5m]))"), metrics)),
        ("dashboard: a counter without _total", lambda: check_dashboard(
            bad_dashboard("rate(latchkey_redis_errors[5m])"), metrics)),
        ("dashboard: a gauge read as a histogram", lambda: check_dashboard(
            bad_dashboard("histogram_quantile(0.9, rate(latchkey_waiters_bucket[5m]))"), metrics)),
    ]


def main() -> int:
    started = time.monotonic()
    helm_python.disable_logging()
    report = Report()
    metrics = registered_metrics((ROOT / "src" / "metrics.rs").read_text())
    config_rs = settings("".join((ROOT / "src" / "config" / name).read_text()
                                for name in ("settings.rs", "load.rs")))
    dashboard_text = DASHBOARD.read_text()
    dashboard = json.loads(dashboard_text)
    chart = helm_python.Chart.load(CHART)
    print(f"Helm {helm_python.helm_sdk_version()}, kubernetes-validate schemas "
          f"{kube_floor()} (1.30 with the preStop sleep action) and {KUBE_LATEST}; "
          f"{len(metrics)} metrics in src/metrics.rs, {len(config_rs)} settings in src/config/")

    def attempt(label: str, check: Callable[[], None]) -> None:
        try:
            check()
        except Problem as e:
            report.fail(f"{label}: {e}")
        except helm_python.HelmError as e:
            report.fail(f"{label}: {type(e).__name__}: {e}")
        else:
            report.ok(label)

    attempt("chart defaults and settings match src/config/",
            lambda: check_settings_coverage(config_rs, chart.values))
    attempt(f"dashboard: {len(dashboard_expressions(dashboard))} expressions use only "
            "registered metrics and their labels", lambda: check_dashboard(dashboard, metrics))

    cases = [(f"values {p.name}", yaml.safe_load(p.read_text()), "latchkey")
             for p in sorted(VALUE_SETS.glob("*.yaml"))]
    cases += [(f"example {where}", values, release) for where, values, release in readme_installs()]
    invariants: list[tuple[str, Callable[[Render], None]]] = [
        ("well-formed", check_well_formed),
        ("schemas", check_schemas),
        ("termination", check_termination),
        ("environment", lambda r: check_environment(r, config_rs)),
        ("probes", check_probes),
        ("security", check_security),
        ("no plaintext secrets", check_no_plaintext_secrets),
        ("wiring", check_wiring),
        ("dashboard ConfigMap", lambda r: check_dashboard_config_map(r, dashboard_text)),
    ]
    first: Render | None = None
    for label, values, release in cases:
        lint = helm_python.lint(CHART, values, strict=True)
        serious = [m for m in lint["messages"] if m["severity"] >= 2] + [
            {"path": "", "error": e} for e in lint["errors"]]
        if serious:
            report.fail(f"{label}: helm lint --strict: "
                        + "; ".join(f"{m['path']}: {m['error']}" for m in serious))
            continue
        try:
            rendered = render(chart, label, values, release)
        except helm_python.HelmError as e:
            report.fail(f"{label}: does not render: {e}")
            continue
        first = first or rendered
        failed = []
        for name, invariant in invariants:
            try:
                invariant(rendered)
            except Problem as e:
                failed.append(f"{name}: {e}")
        if failed:
            for problem in failed:
                report.fail(f"{label}: {problem}")
        else:
            kinds = sorted({d["kind"] for d in rendered.docs})
            report.ok(f"{label}: lint, {len(rendered.docs)} objects ({', '.join(kinds)}), "
                      "every invariant")

    for label, values, message in MUST_FAIL:
        def refused(values: dict[str, Any] = values, message: str = message) -> None:
            try:
                chart.render(values, name="lk", namespace="apps")
            except helm_python.HelmRenderError as e:
                if message not in str(e):
                    raise Problem(f"refused, but without {message!r}: {e}") from None
                return
            raise Problem("rendered")
        attempt(f"refuses {label}", refused)

    if first is None:
        report.fail("no value set rendered; the planted faults need one")
    else:
        for label, check in planted_faults(first, dashboard, metrics, config_rs, chart):
            try:
                check()
            except Problem as e:
                report.ok(f"planted fault caught: {label} ({e})")
            else:
                report.fail(f"planted fault NOT caught: {label}")

    elapsed = time.monotonic() - started
    if report.failures:
        print(f"\ncheck_chart: {len(report.failures)} of {len(report.lines) + len(report.failures)} "
              f"checks failed in {elapsed:.1f} s", file=sys.stderr)
        return 1
    print(f"\ncheck_chart: all {len(report.lines)} checks passed in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
