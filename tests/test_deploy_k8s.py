"""deploy/k8s/ checked without a cluster: the instance config Dagster's Helm chart renders from values.yaml and
every profile's config load through Dagster's own config schema, the chart runs the Celery profile's launcher
and limits, the worker manifest is made of Kubernetes API objects and carries the Celery profile's dagster.yaml,
and `dg check defs` passes under each profile."""

from __future__ import annotations

import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from pipelines_dagster.runs import CODE_LOCATION
from tests.conftest import database_beside, missing
from tests.support.processes import stop_group
from tests.test_definitions import REPO, run_in_repo

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
BIN = Path(sys.executable).parent
PROFILES = ("dagster.yaml", "dagster.postgres.yaml", "dagster.celery.yaml")
# The instance config the chart renders from deploy/k8s/values.yaml, next to the profiles in deploy/.
CHART = "chart"
BROKER = "amqp://guest:guest@mq.invalid:5672//"
BACKEND = "redis://cache.invalid:6379/1"
CELERY_ENV = {"PIPELINES_CELERY_BROKER_URL": BROKER, "PIPELINES_CELERY_BACKEND_URL": BACKEND}
# The variables each config reads: read as the instance loads, connected to by neither test below.
CONFIG_ENV = {
    "dagster.yaml": {},
    "dagster.postgres.yaml": {"DAGSTER_PG_URL": "postgresql+psycopg2://dagster@db.invalid:5432/dagster"},
    "dagster.celery.yaml": {"DAGSTER_PG_URL": "postgresql+psycopg2://dagster@db.invalid:5432/dagster", **CELERY_ENV},
    CHART: {"DAGSTER_PG_PASSWORD": "secret", **CELERY_ENV},
}

# The storage classes each config makes.
STORAGE = {
    "dagster.yaml": ["DagsterSqliteStorage"],
    "dagster.postgres.yaml": ["DagsterPostgresStorage"],
    "dagster.celery.yaml": ["DagsterPostgresStorage"],
    CHART: ["PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"],
}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _snake_keys(values: Mapping[str, Any], *, known: set[str], where: str) -> dict[str, Any]:
    """`values` under the chart's snake_case names for them, refusing a key the chart does not write (so a
    misspelt or unsupported value fails here instead of vanishing from the rendered dagster.yaml)."""
    unknown = set(values) - known
    assert not unknown, f"{where}: the chart writes no {sorted(unknown)} into dagster.yaml"
    return {_snake(key): value for key, value in values.items() if value is not None}


# The keys of queuedRunCoordinator that _run-coordinator.tpl writes, and of sensors and schedules that
# configmap-instance.yaml writes (the daemon values schema, schema/charts/dagster/subschema/daemon.py).
QUEUED_KEYS = {
    "maxConcurrentRuns",
    "tagConcurrencyLimits",
    "dequeueIntervalSeconds",
    "dequeueUseThreads",
    "dequeueNumWorkers",
}
THREADS_KEYS = {"useThreads", "numWorkers", "numSubmitWorkers"}


def chart_instance_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """The dagster.yaml Dagster's chart renders from `values`, for the blocks deploy/k8s/values.yaml sets, as the
    chart's templates/configmap-instance.yaml and helpers/instance/*.tpl write them: storage (_postgresql.tpl,
    one config for run, event log and schedule storage), run_launcher (_run-launcher.tpl's custom launcher:
    module, class and config as given), run_coordinator (_run-coordinator.tpl), sensors, schedules,
    python_logs, telemetry, and additionalInstanceConfig appended as given."""
    postgresql = values["postgresql"]
    assert values.get("global", {}).get("postgresqlSecretUsernameKey") is None, "the user is written, not read"
    postgres_db = {
        "username": postgresql["postgresqlUsername"],
        # From the Secret global.postgresqlSecretName names, key postgresql-password.
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "hostname": postgresql["postgresqlHost"],
        "db_name": postgresql["postgresqlDatabase"],
        "port": postgresql["service"]["port"],
        "params": postgresql["postgresqlParams"],
    }
    if postgresql.get("postgresqlScheme"):
        postgres_db["scheme"] = postgresql["postgresqlScheme"]

    def storage(module: str, class_name: str) -> dict[str, Any]:
        return {"module": module, "class": class_name, "config": {"postgres_db": postgres_db}}

    launcher = values["runLauncher"]
    assert launcher["type"] == "CustomRunLauncher", "these values use the chart's custom run launcher"
    custom = launcher["config"]["customRunLauncher"]
    daemon = values["dagsterDaemon"]
    coordinator = daemon["runCoordinator"]
    assert coordinator["enabled"] and coordinator["type"] == "QueuedRunCoordinator"
    queued = coordinator["config"]["queuedRunCoordinator"]
    rendered: dict[str, Any] = {
        "schedule_storage": storage("dagster_postgres.schedule_storage", "PostgresScheduleStorage"),
        "run_launcher": {"module": custom["module"], "class": custom["class"], "config": custom["config"]},
        "run_storage": storage("dagster_postgres.run_storage", "PostgresRunStorage"),
        "event_log_storage": storage("dagster_postgres.event_log", "PostgresEventLogStorage"),
        "run_coordinator": {
            "module": "dagster._core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": _snake_keys(queued, known=QUEUED_KEYS, where="queuedRunCoordinator"),
        },
        "telemetry": {"enabled": values["telemetry"]["enabled"]},
    }
    # Blocks these values write through additionalInstanceConfig, as the profile has them; not followed here.
    own_blocks = {"runMonitoring": daemon["runMonitoring"], "runRetries": daemon["runRetries"], **values}
    enabled = [key for key in ("runMonitoring", "runRetries", "concurrency") if own_blocks[key]["enabled"]]
    assert not enabled, f"{enabled}: set these blocks in additionalInstanceConfig, as the Celery profile has them"
    for block in ("sensors", "schedules"):
        if daemon[block]["useThreads"]:
            rendered[block] = _snake_keys(daemon[block], known=THREADS_KEYS, where=block)
    if logs := values.get("pythonLogs"):
        rendered["python_logs"] = _snake_keys(
            logs, known={"pythonLogLevel", "managedPythonLoggers", "dagsterHandlerConfig"}, where="pythonLogs"
        )
    additional = values.get("additionalInstanceConfig") or {}
    twice = set(additional) & set(rendered)
    assert not twice, f"additionalInstanceConfig writes {sorted(twice)} a second time"
    return rendered | additional


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return load_yaml(K8S / "values.yaml")


@pytest.fixture(scope="module")
def celery() -> dict[str, Any]:
    return load_yaml(DEPLOY / "dagster.celery.yaml")


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    """deploy/k8s/workers.yaml's objects by kind."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all((K8S / "workers.yaml").read_text())}


def instance_config_file(name: str, directory: Path, values: Mapping[str, Any]) -> Path:
    """A profile of deploy/ as it is, or the chart's rendering of `values` written to `directory`."""
    if name != CHART:
        return DEPLOY / name
    path = directory / "dagster.chart.yaml"
    path.write_text(yaml.safe_dump(chart_instance_config(values)))
    return path


def class_config_errors(data) -> list[str]:
    """What Dagster's config schema of a configurable class (a launcher, coordinator or storage) says of the config
    it is given, env variables read: as ConfigurableClassData.rehydrate checks it, without making the object (a
    storage would connect)."""
    import importlib

    from dagster._config import process_config, resolve_to_config_type

    klass = getattr(importlib.import_module(data.module_name), data.class_name)
    result = process_config(resolve_to_config_type(klass.config_type()), data.config_dict)
    return [error.message for error in result.errors or []]


@pytest.mark.parametrize("name", [*PROFILES, CHART])
def test_every_instance_config_loads_through_dagsters_config_schema(
    name: str, values, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster._core.instance.ref import InstanceRef

    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text(instance_config_file(name, tmp_path, values).read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for variable, value in CONFIG_ENV[name].items():
        monkeypatch.setenv(variable, value)

    # The instance's own schema, as the daemon reads $DAGSTER_HOME/dagster.yaml; then each class's.
    ref = InstanceRef.from_dir(str(home))
    # The chart writes the three storages apart, which Dagster composes.
    composed = ref.storage_data.class_name == "CompositeStorage"
    storages = (
        [ref.run_storage_data, ref.event_storage_data, ref.schedule_storage_data] if composed else [ref.storage_data]
    )
    blocks = [ref.run_launcher_data, ref.run_coordinator_data, *storages]
    assert {data.class_name: class_config_errors(data) for data in blocks} == {data.class_name: [] for data in blocks}
    assert [data.class_name for data in storages] == STORAGE[name]
    assert ref.run_coordinator_data.class_name == "QueuedRunCoordinator"


def test_the_charts_launcher_is_the_celery_profiles(values, celery) -> None:
    assert values["runLauncher"]["type"] == "CustomRunLauncher"
    assert values["runLauncher"]["config"]["customRunLauncher"] == celery["run_launcher"], (
        "deploy/k8s/values.yaml's runLauncher.config.customRunLauncher differs from deploy/dagster.celery.yaml's "
        "run_launcher: give it the same module, class and config"
    )


def test_the_chart_renders_the_celery_profiles_queue_limits_monitoring_retries_and_logging(values, celery) -> None:
    rendered = chart_instance_config(values)
    assert rendered["run_coordinator"]["class"] == celery["run_coordinator"]["class"]
    assert rendered["run_coordinator"]["config"] == celery["run_coordinator"]["config"]
    for block in ("concurrency", "run_monitoring", "run_retries", "sensors", "schedules", "python_logs", "telemetry"):
        assert rendered[block] == celery[block], f"the chart's {block} differs from deploy/dagster.celery.yaml's"
    # Storage in PostgreSQL, by the driver that is installed.
    for block in ("run_storage", "event_log_storage", "schedule_storage"):
        assert rendered[block]["config"]["postgres_db"]["scheme"] == "postgresql+psycopg2"


def test_a_value_the_chart_would_not_write_is_refused_rather_than_dropped(values) -> None:
    misspelt = yaml.safe_load(yaml.safe_dump(values))
    misspelt["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["dequeueIntervalSecond"] = 5
    with pytest.raises(AssertionError, match="dequeueIntervalSecond"):
        chart_instance_config(misspelt)


def test_a_block_the_chart_would_write_twice_is_refused(values) -> None:
    twice = yaml.safe_load(yaml.safe_dump(values))
    twice["additionalInstanceConfig"]["telemetry"] = {"enabled": True}
    with pytest.raises(AssertionError, match="telemetry"):
        chart_instance_config(twice)


def test_the_chart_loads_the_code_location_under_its_name_from_the_package_module(values) -> None:
    [server] = values["dagsterWebserver"]["workspace"]["servers"]
    [deployment] = values["dagster-user-deployments"]["deployments"]
    module = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["dagster"]["module_name"]
    assert server["name"] == CODE_LOCATION
    # The user-deployments chart names the code server's Service after the deployment.
    assert (server["host"], server["port"]) == (deployment["name"], deployment["port"])
    assert deployment["dagsterApiGrpcArgs"] == ["-m", module]


def test_the_workers_and_every_pod_of_the_chart_run_one_image_on_one_secret(values, manifests) -> None:
    [deployment] = values["dagster-user-deployments"]["deployments"]
    pods = {"webserver": values["dagsterWebserver"], "daemon": values["dagsterDaemon"], "code server": deployment}
    [worker] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    images = {name: "{repository}:{tag}".format(**pod["image"]) for name, pod in pods.items()}
    assert images == dict.fromkeys(pods, worker["image"])
    secrets = {name: pod["envSecrets"] for name, pod in pods.items()}
    worker_secrets = [{"name": source["secretRef"]["name"]} for source in worker["envFrom"]]
    assert secrets == dict.fromkeys(pods, worker_secrets)


def kubernetes_model(document: Mapping[str, Any]):
    """`document` as the Kubernetes client's model of its kind, read as the client reads an API server's answer
    (no cluster: ApiClient's own deserializer, which `ApiClient.deserialize` calls on a response's body)."""
    from kubernetes.client import ApiClient

    return ApiClient()._ApiClient__deserialize(document, f"V1{document['kind']}")  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["ConfigMap", "Deployment"])
def test_the_worker_manifest_is_kubernetes_objects_with_no_field_unknown(kind: str, manifests) -> None:
    from kubernetes.client import ApiClient

    model = kubernetes_model(manifests[kind])
    assert type(model).__name__ == f"V1{kind}"
    # The client drops a field its model does not have: a misspelt field shows as a difference.
    assert ApiClient().sanitize_for_serialization(model) == manifests[kind]


def test_a_misspelt_field_in_the_manifest_fails_the_check(manifests) -> None:
    from kubernetes.client import ApiClient

    misspelt = yaml.safe_load(yaml.safe_dump(manifests["Deployment"]))
    misspelt["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 30
    assert ApiClient().sanitize_for_serialization(kubernetes_model(misspelt)) != misspelt


def test_the_workers_read_the_celery_profile_as_their_dagster_yaml(manifests) -> None:
    config_map, deployment = manifests["ConfigMap"], manifests["Deployment"]["spec"]["template"]["spec"]
    assert config_map["data"]["dagster.yaml"] == (DEPLOY / "dagster.celery.yaml").read_text(), (
        "deploy/k8s/workers.yaml's ConfigMap differs from deploy/dagster.celery.yaml: make it anew with the "
        "kubectl command above it in that file"
    )
    [container] = deployment["containers"]
    env = container_env(container)
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == f"{env['DAGSTER_HOME']}/dagster.yaml"]
    [volume] = [v for v in deployment["volumes"] if v["name"] == mount["name"]]
    assert (volume["configMap"]["name"], mount["subPath"]) == (config_map["metadata"]["name"], "dagster.yaml")


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {variable["name"]: variable["value"] for variable in container["env"]}


def worker_command(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The container's command line with its $(VAR) references expanded from `env`, as the kubelet expands them
    from the container's."""
    words = container["command"] + container["args"]
    return [re.sub(r"\$\((\w+)\)", lambda found: env[found.group(1)], word) for word in words]


def test_the_worker_runs_the_worker_command_with_one_pool_process_per_cpu_it_requests(manifests) -> None:
    from pipelines_dagster.cli.main import main
    from pipelines_dagster.cli.worker import worker

    [container] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    program, *args = worker_command(container, container_env(container))
    assert (program, args[0]) == ("pipelines-dagster", "worker")
    # Parsed and checked by the command's own options, as it would be at start, under the CLI's own context settings:
    # a context made without them makes Click keep a help option without -h on the command, for every later use.
    params = worker.make_context("worker", args[1:], **main.context_settings).params
    assert params["name"] == "pipelines"
    assert params["concurrency"] == int(container["resources"]["requests"]["cpu"])


def test_a_stopped_worker_is_given_the_longest_run_to_finish(manifests, celery) -> None:
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > celery["run_monitoring"]["max_runtime_seconds"]


@dataclass
class PodWorker:
    process: subprocess.Popen
    # The container's env, with which its liveness probe runs too.
    env: dict[str, str]
    log: Path


@pytest.fixture
def pod_worker(postgres_url: str, broker_url: str, tmp_path: Path, manifests) -> Iterator[PodWorker]:
    """The manifest's worker command running here as it would in its pod (its env, the Celery profile as its
    dagster.yaml, a name and queue of its own on the shared broker), once Celery says it is ready."""
    [container] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    name = f"k8s-probe-{uuid.uuid4().hex[:8]}"
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text(manifests["ConfigMap"]["data"]["dagster.yaml"])
    log = tmp_path / "worker.log"
    with database_beside(postgres_url, "dagster") as dagster_url:
        env = {
            "PATH": f"{BIN}:/usr/bin:/bin",
            **container_env(container),
            "WORKER_NAME": name,
            "WORKER_CONCURRENCY": "1",
            "DAGSTER_HOME": str(home),
            "PIPELINES_DATA_DIR": str(tmp_path / "data"),
            "PIPELINES_DATABASE_URL": postgres_url,
            "DAGSTER_PG_URL": dagster_url,
            "PIPELINES_CELERY_BROKER_URL": broker_url,
            "PIPELINES_CELERY_BACKEND_URL": BACKEND,
        }
        # A queue of its own: the broker is shared with other test sessions, whose runs it must not take.
        command = [*worker_command(container, env), "--queue", name]
        process = subprocess.Popen(
            command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 60
            while b" ready." not in log.read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the worker did not get ready:\n{log.read_text(errors='replace')[-3000:]}")
                time.sleep(0.2)
            yield PodWorker(process=process, env=env, log=log)
        finally:
            stop_group(process)
            from kombu import Connection

            with Connection(broker_url) as connection:
                connection.default_channel.queue_delete(name)


def run_probe(container: Mapping[str, Any], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    command = container["livenessProbe"]["exec"]["command"]
    return subprocess.run(command, env=dict(env), capture_output=True, text=True, timeout=60)


@pytest.mark.integration
def test_the_liveness_probe_asks_the_worker_of_its_own_pod(pod_worker: PodWorker, manifests) -> None:
    [container] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    # In a pod, HOSTNAME is the pod's name, and Celery's %h the same hostname.
    alive = run_probe(container, {**pod_worker.env, "HOSTNAME": socket.gethostname()})
    assert alive.returncode == 0, alive.stdout + alive.stderr
    assert f"{pod_worker.env['WORKER_NAME']}@{socket.gethostname()}: OK" in alive.stdout
    # The same name on another pod: no worker answers, so the probe fails.
    elsewhere = run_probe(container, {**pod_worker.env, "HOSTNAME": "another-pod"})
    assert elsewhere.returncode != 0
    assert "No nodes replied" in elsewhere.stdout + elsewhere.stderr, shlex.join(
        container["livenessProbe"]["exec"]["command"]
    )


@pytest.mark.integration
def test_sigterm_to_the_containers_first_process_alone_stops_the_worker_warmly(pod_worker: PodWorker) -> None:
    # The kubelet signals only the container's first process: the worker itself, not its pool processes.
    pool = psutil.Process(pod_worker.process.pid).children()
    assert pool, "a prefork worker has pool processes"
    pod_worker.process.send_signal(signal.SIGTERM)
    assert pod_worker.process.wait(timeout=60) == 0, pod_worker.log.read_text(errors="replace")[-3000:]
    assert "Warm shutdown" in pod_worker.log.read_text(errors="replace")
    assert not [child for child in pool if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.integration
@pytest.mark.parametrize("name", [*PROFILES, CHART])
def test_dg_check_defs_passes_under_every_profile(name: str, values, postgres_url: str, tmp_path: Path) -> None:
    import importlib.util

    import sqlalchemy as sa

    if importlib.util.find_spec("dagster_dg_cli") is None:
        missing("dg is not installed: `make install-dev` installs the dev extra")
    env = dict(CONFIG_ENV[name])
    with database_beside(postgres_url, "dagster") as dagster_url:
        if name == CHART:
            # As `helm --set` would point the release at this server and database.
            url = sa.make_url(dagster_url)
            values = yaml.safe_load(yaml.safe_dump(values))
            values["postgresql"].update(
                postgresqlHost=url.host, postgresqlUsername=url.username, postgresqlDatabase=url.database
            )
            values["postgresql"]["service"]["port"] = url.port or 5432
        elif "DAGSTER_PG_URL" in env:
            env["DAGSTER_PG_URL"] = dagster_url
        config = instance_config_file(name, tmp_path, values)
        result = run_in_repo(tmp_path, ["-m", "dagster_dg_cli.cli", "check", "defs"], instance_config=config, **env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully." in result.stdout
