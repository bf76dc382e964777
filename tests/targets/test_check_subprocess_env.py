"""The engine-args check loads the model's (user-supplied) code in a subprocess: it gets a minimal environment, no
credential of the worker's, and it cannot read the worker's through ``/proc/<ancestor>/environ``. The judge: the
real subprocess path (``raylift.local.isolated``), with a stand-in runtime Python that prints the environment it was
given, or walks its ancestors' ``/proc/<pid>/environ`` as a model repo's code could."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from raylift.config import LocalSettings
from raylift.targets.local import LocalTarget

SECRET = "fake-secret-" + "b7c1d9e4"
SECRET_NAMES = ("RAY_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
                "AIRFLOW_CONN_PROD", "AIRFLOW__API_AUTH__JWT_SECRET", "HF_TOKEN", "MY_SERVICE_PASSWORD",
                "GITHUB_TOKEN", "SOME_SECRET", "SIGNING_KEY")
# the stand-in runtime Python: raylift's launcher (raylift/local/launcher.py) runs on the real one, except that the
# check it would run in its own interpreter (``--module``: the real runtime's `-m llm.check_args`) is this stand-in's
# (``--wait``: a child it waits for); anything else is the check, which prints ``body``'s verdict
STAND_IN = """#!{python}
import json, os, sys
if sys.argv[1:3] == ["-I", "-S"] or sys.argv[1].endswith("launcher.py"):
    args = sys.argv[1:]
    if "--module" in args:
        cut = args.index("--")
        args = [a.replace("--module", "--wait") for a in args[:cut]] + ["--", sys.argv[0], "-m", *args[cut + 1:]]
    os.execv({python!r}, [{python!r}, *args])
{body}
"""


def stand_in_runtime(tmp_path: Path, body: str) -> Path:
    runtime = tmp_path / "python"
    runtime.write_text(STAND_IN.format(python=sys.executable, body=textwrap.dedent(body)))
    runtime.chmod(runtime.stat().st_mode | stat.S_IEXEC)
    return runtime


def record_child_env(monkeypatch: pytest.MonkeyPatch, where: str) -> list[dict[str, str]]:
    """The environments the stand-in runtime Python printed, one per real call of ``where`` (``subprocess.run``,
    or ``run_isolated``, which returns the finished process with how it was isolated)."""
    import importlib

    seen: list[dict[str, str]] = []
    module, name = where.rsplit(".", 1)
    owner: Any = importlib.import_module(module) if not module.endswith(".subprocess") else subprocess
    real = getattr(owner, name)

    def recording(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        proc = result[0] if isinstance(result, tuple) else result
        seen.append(json.loads(proc.stdout.splitlines()[-1])["env"])
        return result

    monkeypatch.setattr(where, recording)
    return seen


def test_the_check_subprocess_gets_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = stand_in_runtime(tmp_path, "print(json.dumps({'ok': True, 'env': dict(os.environ)}))")
    for name in SECRET_NAMES:
        monkeypatch.setenv(name, SECRET)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    seen = record_child_env(monkeypatch, "raylift.targets.local.run_isolated")
    settings = LocalSettings(home=tmp_path / "home", runtime_python=runtime, check_cache=tmp_path / "checks")
    LocalTarget(settings=settings).validate_engine_args(str(tmp_path / "model"), {"max_model_len": 64})
    (env,) = seen
    assert SECRET not in json.dumps(env), sorted(k for k, v in env.items() if v == SECRET)
    assert env["PATH"] == os.environ["PATH"] and env["HF_HOME"] == str(tmp_path / "hf")
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_the_serve_schema_check_subprocess_gets_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's Serve schema check runs the runtime env's Python on the config: the same scrubbed environment."""
    runtime = tmp_path / "python"
    runtime.write_text(
        f"#!{sys.executable}\n"
        "import json, os\n"
        "print(json.dumps({'ok': True, 'warnings': [], 'env': dict(os.environ)}))\n"
    )
    runtime.chmod(runtime.stat().st_mode | stat.S_IEXEC)
    for name in ("RAY_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AIRFLOW_CONN_PROD", "HF_TOKEN", "SOME_SECRET"):
        monkeypatch.setenv(name, SECRET)
    seen = record_child_env(monkeypatch, "raylift.serve.validation.subprocess.run")
    settings = LocalSettings(home=tmp_path / "home", runtime_python=runtime, check_cache=tmp_path / "checks")
    assert LocalTarget(settings=settings).check_serve_schema({"applications": []}, "app") == []
    (env,) = seen
    assert SECRET not in json.dumps(env), sorted(k for k, v in env.items() if v == SECRET)
    assert env["PATH"] == os.environ["PATH"]


# What a model repo's code (trust_remote_code) could do in the check's process: walk its parent chain to the top and
# read each ancestor's first environment, which /proc keeps for the process's whole life (os.environ edits do not
# reach it). The worker below is started with the secrets in that first environment, as an Airflow worker is.
ANCESTOR_READER = """
chain, leaked, pid = [], [], os.getppid()
while pid > 0 and pid not in chain:
    chain.append(pid)
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            leaked += [(pid, k.decode()) for k, _, v in (e.partition(b"=") for e in f.read().split(b"\\0")) if SECRET in v]
    except OSError:
        pass
    with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
leaked += [("self", k) for k, v in os.environ.items() if v == SECRET.decode()]
with open(VERDICT, "w") as f:
    json.dump({"chain": chain, "leaked": leaked}, f)
print(json.dumps({"ok": True}))
"""

WORKER = """
import json, os, sys
from pathlib import Path
from raylift.config import LocalSettings
from raylift.targets.local import LocalTarget

tmp = Path(sys.argv[1])
target = LocalTarget(settings=LocalSettings(home=tmp / "home", runtime_python=tmp / "python",
                                            check_cache=tmp / "checks"))
target.cluster_conn_id, target.allow_remote_code = "dev", True  # the connection allows remote code
target.validate_engine_args(str(tmp / "model"), {"trust_remote_code": True})
print(json.dumps({"worker": os.getpid(), **json.loads((tmp / "verdict.json").read_text())}))
"""


def test_remote_code_in_the_check_cannot_read_any_worker_secret(tmp_path: Path) -> None:
    """With the connection allowing remote code, the check's process reads every ancestor's /proc/<pid>/environ
    (its parent's first): none holds a secret of the worker's, and its own environment holds none."""
    stand_in_runtime(tmp_path, f"SECRET, VERDICT = {SECRET.encode()!r}, {str(tmp_path / 'verdict.json')!r}\n"
                     + ANCESTOR_READER)
    env = {**os.environ, **dict.fromkeys(SECRET_NAMES, SECRET)}
    done = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = json.loads(done.stdout.splitlines()[-1])
    assert verdict["chain"], verdict  # it did walk its ancestors
    assert verdict["worker"] not in verdict["chain"], verdict
    assert verdict["leaked"] == [], verdict


NODE = """
import time
from pathlib import Path
from raylift.config import LocalSettings
from raylift.local.cluster import LocalRayCluster

tmp = Path(sys.argv[1])
cluster = LocalRayCluster(LocalSettings(home=tmp / "home", runtime_python=tmp / "python", serve_ingress="proxy"))
node = cluster._spawn("head", ["--head"])
deadline = time.monotonic() + 30
while not (tmp / "verdict.json").is_file() and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"worker": os.getpid(), "node": node.pid, **json.loads((tmp / "verdict.json").read_text())}))
"""


def test_local_ray_nodes_get_no_secret_and_cannot_read_the_workers(tmp_path: Path) -> None:
    """A local Ray node (it runs the replicas' code) started by a worker whose first environment holds secrets:
    its own environment holds none, and no ancestor's /proc/<pid>/environ does. The stand-in ``ray`` records both."""
    stand_in_runtime(tmp_path, "")
    ray = tmp_path / "ray"
    ray.write_text(f"#!{sys.executable}\nimport json, os\n"
                   f"SECRET, VERDICT = {SECRET.encode()!r}, {str(tmp_path / 'verdict.json.tmp')!r}\n"
                   + ANCESTOR_READER + f"os.replace(VERDICT, {str(tmp_path / 'verdict.json')!r})\n")
    ray.chmod(ray.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, **dict.fromkeys(SECRET_NAMES, SECRET), "RAY_DEDUP_LOGS": "1"}
    done = subprocess.run([sys.executable, "-c", WORKER.split("from raylift")[0] + NODE, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = json.loads(done.stdout.splitlines()[-1])
    assert verdict["chain"] and verdict["worker"] not in verdict["chain"], verdict
    assert verdict["leaked"] == [], verdict


def test_remote_code_is_not_run_where_an_ancestor_of_the_worker_would_adopt_it(tmp_path: Path) -> None:
    """A worker that adopts orphans itself (a subreaper, as Airflow run as a container's PID 1 without an init is):
    the check's process would have the worker as its grandparent, so model code the connection allows is refused
    before it runs (the stand-in check never writes its verdict); args that run no model code are still checked."""
    stand_in_runtime(tmp_path, f"SECRET, VERDICT = {SECRET.encode()!r}, {str(tmp_path / 'verdict.json')!r}\n"
                     + ANCESTOR_READER)
    subreaper = "import ctypes; ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER\n"
    worker = WORKER.replace("target.validate_engine_args", subreaper + "target.validate_engine_args")
    done = subprocess.run([sys.executable, "-c", worker, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, **dict.fromkeys(SECRET_NAMES, SECRET)}, timeout=120)
    assert done.returncode != 0 and "no init above the worker" in done.stderr, done.stderr[-2000:]
    assert "ClusterError" in done.stderr and not (tmp_path / "verdict.json").exists()
    plain = worker.replace('{"trust_remote_code": True}', '{"max_model_len": 64}')
    done = subprocess.run([sys.executable, "-c", plain, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, **dict.fromkeys(SECRET_NAMES, SECRET)}, timeout=120)
    assert done.returncode == 0 and (tmp_path / "verdict.json").exists(), done.stderr[-2000:]


def test_a_module_run_in_the_launchers_interpreter_cannot_read_any_worker_secret(tmp_path: Path) -> None:
    """The check's own path (``python -m llm.check_args`` runs in the launcher's interpreter, one start-up fewer):
    a module that walks its ancestors finds none holding the worker's secrets, with its exit status and output back."""
    (tmp_path / "reader.py").write_text(
        f"import json, os, sys\nSECRET, VERDICT = {SECRET.encode()!r}, {str(tmp_path / 'verdict.json')!r}\n"
        + ANCESTOR_READER + "sys.exit(3)\n")
    (tmp_path / "python").symlink_to(sys.executable)
    worker = (
        "import json, os, sys\nfrom pathlib import Path\nfrom raylift.local.isolated import run_isolated\n"
        "tmp = Path(sys.argv[1])\n"
        "proc, iso = run_isolated([str(tmp / 'python'), '-m', 'reader'], python=tmp / 'python', env={'PATH': '/bin'},"
        " cwd=tmp, timeout=60)\n"
        "print(json.dumps({'worker': os.getpid(), 'rc': proc.returncode, 'out': proc.stdout, 'pid': iso.pid,"
        " **json.loads((tmp / 'verdict.json').read_text())}))\n")
    done = subprocess.run([sys.executable, "-c", worker, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, **dict.fromkeys(SECRET_NAMES, SECRET)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = json.loads(done.stdout.splitlines()[-1])
    assert verdict["rc"] == 3 and verdict["out"] == '{"ok": true}\n', verdict
    assert verdict["chain"] and verdict["worker"] not in verdict["chain"] and verdict["leaked"] == [], verdict


def test_a_ray_nodes_environment_keeps_settings_and_only_the_credentials_given_by_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's, the accelerators' and AWS's where-and-how settings reach a node; no secret does, but what whoever runs
    Airflow names in RAYLIFT_RAY_NODE_ENV (a local cluster reading an s3:// store with keys)."""
    from raylift.local.cluster import LocalRayCluster

    for name in SECRET_NAMES:
        monkeypatch.setenv(name, SECRET)
    settings = {"RAY_DEDUP_LOGS": "0", "NCCL_DEBUG": "INFO", "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
                "AWS_DEFAULT_REGION": "us-west-2", "OMP_NUM_THREADS": "2"}
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    cluster = LocalRayCluster(LocalSettings(home=tmp_path, runtime_python=tmp_path / "python", serve_ingress="proxy"))
    env = cluster._env()
    assert SECRET not in json.dumps(env), sorted(k for k, v in env.items() if v == SECRET)
    assert {k: env.get(k) for k in settings} == {**settings, "RAY_DEDUP_LOGS": "0"}
    monkeypatch.setenv("RAYLIFT_RAY_NODE_ENV", "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,NOT_SET")
    env = cluster._env()
    assert sorted(k for k, v in env.items() if v == SECRET) == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert cluster._env()["RAY_AUTH_TOKEN"] == SECRET  # a token-auth cluster's own token: every node needs it


@pytest.mark.parametrize(("cmdline", "init"), [
    (b"/usr/bin/dumb-init\0--\0/entrypoint\0airflow\0celery\0worker\0", True),  # the official image
    (b"/sbin/docker-init\0--\0airflow\0standalone\0", True),  # Compose's init: true
    (b"/home/airflow/.local/bin/airflow\0celery\0worker\0", False),  # Airflow as PID 1, no init
    (b"/usr/local/bin/python3.12\0/usr/local/bin/airflow\0scheduler\0", False),
])
def test_pid_1_counts_as_the_workers_own_when_it_is_airflow_itself(
        cmdline: bytes, init: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """PID 1 adopts the keeper where no subreaper does: it holds the worker's environment when it is Airflow itself,
    so model code is refused there (``strict``); an init is another process."""
    from raylift.local import isolated

    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: cmdline if str(self) == "/proc/1/cmdline" else real(self))
    assert isolated._pid1_is_init() is init
    command = isolated._command(Path("python"), 3, "wait", ["x"])
    assert ("1" in command[command.index("--avoid") + 1].split(",")) is not init
