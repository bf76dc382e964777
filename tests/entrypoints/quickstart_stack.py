"""The stack the docs' quick starts run on (``test_quickstarts.py``: local and Compose, in the engine lane;
``test_aws_quickstarts.py``: ECS and EKS against moto, beside it in lane 2): a new user's Airflow, the docs' blocks read
out of the markdown, and the stand-ins for what cannot run here. Each test module starts its own, on its own ports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.airflow_server import AirflowServer, running_airflow
from tests.harness.local_stack import CONTROL_BIN
from tests.harness.moto_server import aws_env, reset

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
INFRA = ROOT / "docs" / "infrastructure.md"
RUNTIME_BIN = ROOT / ".cache/venvs/runtime/bin"
DAG = "raylift_deploy"
DAG_IDS = ["raylift_deploy", "raylift_redeploy", "raylift_stage_model", "raylift_teardown", "raylift_undeploy"]
QUEUED_GRACE_S = 90  # an unpaused DAG's queued run starts within one scheduler loop (seconds)
DEPLOY_TIMEOUT_S = 900  # the first deploy of the tiny model on CPU: minutes on a busy 2-core box
AWS_TIMEOUT_S = 420
HF_TOKEN = "hf_quickstart_token_not_a_real_one"  # what the user's $HF_TOKEN holds
ACCOUNT, REGION = "123456789012", "us-west-2"
# Compose's published ports (docker-compose.yaml): the host-side URLs the docs' curl uses
PUBLISHED = {"http://127.0.0.1:8000": "RAYLIFT_SERVE_PORT", "http://127.0.0.1:8265": "RAYLIFT_DASHBOARD_PORT"}
COMPOSE_VOLUME = "/opt/raylift/var"  # RAYLIFT_HOME in every Compose service (docker-compose.yaml)


# -- the docs ----------------------------------------------------------------------------------------------------
def section(doc: Path, heading: str) -> str:
    text = doc.read_text()
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


TRIGGER_END = re.compile(
    r"airflow dags trigger raylift_deploy --conf (?:'[^']*'|\"\$\(cat <<JSON\n.*?\nJSON\n\)\")[^\n]*\n", re.S)


def split_at_trigger(script: str) -> tuple[str, str]:
    """The script up to and including its ``airflow dags trigger raylift_deploy`` command, and the rest."""
    found = TRIGGER_END.search(script)
    assert found, f"the quick start triggers no raylift_deploy run:\n{script}"
    return script[:found.end()], script[found.end():]


# -- stand-ins for what cannot run here ----------------------------------------------------------------------------
AIRFLOW_SHIM = '''#!{python}
"""airflow: Airflow's own CLI main() with these arguments, in a child forked from the stack's warm Airflow."""
import json, os, socket, sys, tempfile
folder = tempfile.mkdtemp(dir=os.environ["QS_CLI_DIR"])
out, err = os.path.join(folder, "out"), os.path.join(folder, "err")
request = {{"argv": ["airflow", *sys.argv[1:]], "cwd": os.getcwd(), "stdout": out, "stderr": err}}
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
    conn.connect({socket_path!r})
    conn.sendall(json.dumps(request).encode() + b"\\n")
    replies = conn.makefile("rb")
    replies.readline()  # the child's pid
    done = json.loads(replies.readline())
for path, stream in ((out, sys.stdout), (err, sys.stderr)):
    with open(path, errors="replace") as f:
        stream.write(f.read())
sys.exit(done["rc"])
'''

TERRAFORM = '''#!{python}
"""terraform: init does nothing; apply records the terraform.tfvars of its folder (the stack's resources are in moto
already); output -json / output -raw NAME print the stack's outputs once applied, those that follow a tfvars
setting as set."""
import json, os, re, sys
state_path = os.environ["QS_TF_STATE"]
state = json.load(open(state_path))
args = [a for a in sys.argv[1:] if not a.startswith("-chdir=")]
if args[:1] == ["init"]:
    sys.exit(0)
if args[:1] == ["apply"]:
    tfvars = {{k: json.loads(v) for k, v in re.findall(r'^(\\w+)\\s*=\\s*(".*"|\\[.*\\])', open("terraform.tfvars").read(), re.M)}}
    state["tfvars"] = tfvars
    json.dump(state, open(state_path, "w"))
    print("Apply complete! (stand-in: the stack's resources were made in moto)")
    sys.exit(0)
if args[:1] == ["output"]:
    if "tfvars" not in state:
        sys.exit("No outputs found (the stack was never applied)")
    outputs = dict(state["outputs"])
    for var, names in state["from_tfvars"].items():
        value = state["tfvars"].get(var)
        for name, derived in names.items():
            outputs[name] = {{"value": value if derived is None else (derived if value else None),
                             "type": "string", "sensitive": False}}
    if args[1:2] == ["-json"]:
        print(json.dumps(outputs))
        sys.exit(0)
    if args[1:2] == ["-raw"] and args[2] in outputs:
        print(outputs[args[2]]["value"], end="")
        sys.exit(0)
sys.exit("terraform stand-in: unsupported " + " ".join(sys.argv[1:]))
'''

DOCKER = '''#!{python}
"""docker: login/build/push (push: the image's manifest put into moto's ECR, as docker push leaves it) and the
Compose CLI's up/ps/down (the stack is up: this Airflow and the Ray cluster standing for ray-head), run (the service
command with the runtime venv's Python and the step's binds) and exec (the command in this Airflow's environment),
addresses and the shared volume's path mapped onto this machine."""
import json, os, re, subprocess, sys
args = sys.argv[1:]
log = open(os.environ["QS_DOCKER_LOG"], "a")
log.write(json.dumps(args) + "\\n")
log.close()
if args[0] == "login":
    sys.stdin.read()
    print("Login Succeeded")
    sys.exit(0)
if args[0] == "build":
    sys.exit(0)
if args[0] == "push":
    import boto3
    registry_repo, tag = args[1].rsplit(":", 1)
    repo = registry_repo.split("/", 1)[1]
    manifest = {{"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {{"mediaType": "application/vnd.docker.container.image.v1+json", "size": 7,
                           "digest": "sha256:" + "c" * 64}}, "layers": []}}
    boto3.client("ecr").put_image(repositoryName=repo, imageManifest=json.dumps(manifest), imageTag=tag)
    print(f"{{tag}}: digest: sha256:{{'c' * 64}}")
    sys.exit(0)
assert args[0] == "compose", args
sub, rest = args[1], args[2:]
if sub in ("up", "ps", "down"):
    sys.exit(0)
ports = {{"8265": os.environ["RAYLIFT_DASHBOARD_PORT"], "8000": os.environ["RAYLIFT_SERVE_PORT"],
         "6379": os.environ["RAYLIFT_RAY_PORT"]}}
binds = {{}}
while rest[0].startswith("-"):
    flag = rest.pop(0)
    if flag in ("-v", "--volume"):
        host, container = rest.pop(0).split(":")[:2]
        binds[container] = host
service, command = rest[0], rest[1:]
def local(word):
    word = re.sub(r"(?<![\\w.@-])ray-head:(\\d+)\\b", lambda m: "127.0.0.1:" + ports[m[1]], word)
    for container, host in binds.items():
        word = word.replace(container, host)
    return word.replace({volume!r}, os.environ["RAYLIFT_HOME"])
command = [local(w) for w in command]
if sub == "run":
    assert service == "ray-head", service
    if command[0] == "python":
        command[0] = {runtime_python!r}
else:
    assert sub == "exec" and service == "airflow-scheduler", args
sys.exit(subprocess.run(command).returncode)
'''

AWS = '''#!{python}
"""aws, where this machine has no AWS CLI: the calls the docs make, through boto3 (its operations and parameter names
from botocore's service models, --query as JMESPath, --output text), the CLI's customizations the docs use
(ecr get-login-password, eks update-kubeconfig) as the CLI does them."""
import base64, json, os, sys
import boto3, jmespath
from botocore import xform_name
service, operation, *rest = sys.argv[1:]
options, key = {{}}, None
for word in rest:
    if word.startswith("--"):
        key = word[2:]
        options[key] = True
    else:
        options[key] = word
query, output = options.pop("query", None), options.pop("output", "json")
region = options.pop("region", None)
client = boto3.client(service, region_name=region)
if (service, operation) == ("ecr", "get-login-password"):
    token = client.get_authorization_token()["authorizationData"][0]["authorizationToken"]
    print(base64.b64decode(token).decode().split(":", 1)[1])
    sys.exit(0)
if (service, operation) == ("eks", "update-kubeconfig"):
    cluster = client.describe_cluster(name=options["name"])["cluster"]
    path = os.path.join(os.environ["HOME"], ".kube", "config")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    config = {{"apiVersion": "v1", "kind": "Config", "current-context": cluster["arn"],
              "clusters": [{{"name": cluster["arn"], "cluster": {{"server": cluster["endpoint"]}}}}],
              "contexts": [{{"name": cluster["arn"], "context": {{"cluster": cluster["arn"], "user": cluster["arn"]}}}}],
              "users": [{{"name": cluster["arn"], "user": {{}}}}]}}
    with open(path, "w") as f:
        json.dump(config, f)
    print(f"Added new context {{cluster['arn']}} to {{path}}")
    sys.exit(0)
method = xform_name(operation.replace("-", "_"))
members = client.meta.service_model.operation_model(client.meta.method_to_api_mapping[method]).input_shape.members
names = {{m.lower(): m for m in members}}
reply = getattr(client, method)(**{{names[k.replace("-", "")]: v for k, v in options.items()}})
reply.pop("ResponseMetadata", None)
value = jmespath.search(query, reply) if query else reply
print(value if output == "text" and not isinstance(value, (dict, list)) else json.dumps(value, default=str))
'''

KUBECTL = '''#!{python}
"""kubectl: the command recorded (there is no Kubernetes here); `get` lists nothing, `create secret` says created."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["QS_KUBECTL_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if "get" in args:
    print("No resources found")
elif "create" in args and "secret" in args:
    print("secret/" + args[args.index("generic") + 1] + " created")
'''


def write_stub(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)


# -- the stack ---------------------------------------------------------------------------------------------------
@dataclass
class QuickStart:
    server: AirflowServer
    checkout: Path  # shaped like the repository's root: where the docs' blocks run
    shell_env: dict[str, str]
    moto_url: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return Path(self.server.stack.env["RAYLIFT_HOME"])

    def bash(self, script: str, *, timeout: float, extra_env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
        """``script`` as written, in bash from the checkout's root; errors stop it (``set -eo pipefail``)."""
        return subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=self.checkout,
                              env={**self.shell_env, **(extra_env or {})}, capture_output=True, text=True,
                              timeout=timeout)

    def as_created(self) -> None:
        """raylift_deploy paused, as Airflow created it (checked below) and as a new user's Airflow has it: every
        quick start starts there, whatever the one before it unpaused, so each must unpause it itself."""
        self.server.set_paused(DAG, True)
        assert self.server.ok("GET", f"/dags/{DAG}")["is_paused"] is True

    def run_ids(self) -> set[str]:
        runs = self.server.ok("GET", f"/dags/{DAG}/dagRuns", params={"limit": 100})["dag_runs"]
        return {r["dag_run_id"] for r in runs}

    def new_run(self, before: set[str]) -> str:
        """The run the trigger made: the one run the API lists now and did not before."""
        made = self.run_ids() - before
        assert len(made) == 1, f"the quick start's trigger made {len(made)} runs of {DAG}: {sorted(made)}"
        return made.pop()

    def wait(self, run_id: str, timeout_s: float) -> dict[str, Any]:
        """The run, once success/failed. A run still queued after QUEUED_GRACE_S with its DAG paused fails at once:
        the scheduler never starts it."""
        started = time.monotonic()
        run = self.server.run(DAG, run_id)
        while run["state"] not in ("success", "failed"):
            waited = time.monotonic() - started
            if run["state"] == "queued" and waited > QUEUED_GRACE_S:
                paused = self.server.ok("GET", f"/dags/{DAG}")["is_paused"]
                assert not paused, (
                    f"run {run_id} is still queued after {waited:.0f} s and {DAG} is paused (is_paused: {paused}): "
                    "Airflow creates DAGs paused and its scheduler never starts a paused DAG's run, so the quick "
                    "start's steps never get it going; they must unpause the DAG before the trigger")
            assert waited < timeout_s, f"run {run_id} still {run['state']} after {timeout_s:.0f} s: " + \
                self.server.failure_report(DAG, run_id)
            time.sleep(3)
            run = self.server.run(DAG, run_id)
        return run

    def failed_task_error(self, run_id: str, task_id: str) -> str:
        return self.server.task_log(DAG, run_id, task_id)[-4000:]

    def replicas(self, app: str = "llm") -> list[str]:
        """The Serve app's replica ids on the local cluster (Ray Serve's own state, through the dashboard)."""
        reply = httpx.get(f"{self.server.stack.dashboard_url}/api/serve/applications/", timeout=30).json()
        deployments = (reply["applications"].get(app) or {}).get("deployments", {})
        return sorted(r["replica_id"] for d in deployments.values() for r in d.get("replicas", []))


@contextmanager
def quick_stack(moto_url: str, tmp_path_factory: pytest.TempPathFactory, *, port_base: int) -> Iterator[QuickStart]:
    """A new user's Airflow (``airflow standalone``'s four components, shipped defaults) on ports from ``port_base``
    (thousands apart), a checkout-shaped folder and the stand-ins the docs' blocks call: one per test module."""
    started = time.monotonic()
    reset(moto_url)
    home = tmp_path_factory.mktemp("quickstarts")
    (home / "var").mkdir()
    # the stack's ports, all in port_base + 0-999 but gRPC's direct ingress (the HTTP ports + 10000, raylift's rule)
    ports = {"RAYLIFT_DIRECT_INGRESS_PORT": str(port_base + 600), "RAYLIFT_HAPROXY_METRICS_PORT": str(port_base + 700)}
    with running_airflow(home / "var", port_base=port_base, extra_env=aws_env(moto_url) | ports,
                         shipped_defaults=True) as server:
        stack = server.stack
        stack.start_warm_cli()  # with the stack's final environment
        server.wait_dags(DAG_IDS)
        stack.airflow("version")  # the warm Airflow is up: the shim talks to its socket
        assert stack.warm_cli is not None
        checkout = home / "checkout"
        checkout.mkdir()
        for name in ("tools", "images", ".cache"):
            (checkout / name).symlink_to(ROOT / name)
        (checkout / "var").symlink_to(home / "var")
        for example in ("ecs", "eks"):
            shutil.copytree(ROOT / "terraform/examples" / example, checkout / "terraform/examples" / example)
        stubs, cli = home / "stubs", home / "cli"
        stubs.mkdir()
        cli.mkdir()
        python = str(CONTROL_BIN / "python")
        write_stub(stubs, "airflow", AIRFLOW_SHIM.format(python=python, socket_path=str(stack.warm_cli.socket_path)))
        write_stub(stubs, "terraform", TERRAFORM.format(python=python))
        write_stub(stubs, "docker", DOCKER.format(python=python, volume=COMPOSE_VOLUME,
                                                  runtime_python=str(RUNTIME_BIN / "python")))
        write_stub(stubs, "kubectl", KUBECTL.format(python=python))
        if shutil.which("aws") is None:  # the AWS CLI, where this machine has one (the docs' own client)
            write_stub(stubs, "aws", AWS.format(python=python))
        user_home = home / "user"
        user_home.mkdir()
        shell_env = {
            **stack.env,
            "PATH": f"{stubs}:{CONTROL_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(user_home),  # aws eks update-kubeconfig writes ~/.kube/config
            "HF_TOKEN": HF_TOKEN,
            "COLUMNS": "400",
            "QS_CLI_DIR": str(cli),
            "QS_DOCKER_LOG": str(home / "docker.log"),
            "QS_KUBECTL_LOG": str(home / "kubectl.log"),
        }
        missing = [tool for tool in ("bash", "curl", "jq", "python3") if not shutil.which(tool, path=shell_env["PATH"])]
        assert not missing, f"the docs' blocks call {missing}, which this machine lacks"
        print(f"quick-start Airflow up in {time.monotonic() - started:.0f} s")
        yield QuickStart(server, checkout, shell_env, moto_url)
