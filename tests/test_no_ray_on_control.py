"""The Airflow side has no Ray (GitHub issue 53): raylift talks to clusters over their REST APIs, and Ray's own rules
are applied by the cluster's Ray (``raylift/serve/ray_schema_check.py``, run in another process). Managed Airflow
pins another Ray than a user's cluster runs, so an ``import ray`` here would either fail to install or judge the
cluster's config by the wrong version's rules."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "plugins" / "raylift"
# run by the cluster's (or runtime env's) Python, as a file or as ``python -c``: never imported by raylift
RUNS_ELSEWHERE = PACKAGE / "serve" / "ray_schema_check.py"
IMPORTERS = {"import_module", "__import__"}


def _is_ray(name: str) -> bool:
    return name == "ray" or name.startswith("ray.")


def ray_imports(source: str, where: str = "<source>") -> list[str]:
    """Every import of Ray in ``source``, at module or function level: ``import ray...``, ``from ray... import``, and
    ``importlib.import_module("ray...")`` / ``__import__("ray...")``. A string that is code for another process
    (``DRAIN_SCRIPT``) is not an import here."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, where)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee in IMPORTERS and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [f"{where}:{node.lineno}: {name}" for name in names if _is_ray(name)]
    return found


def module_ray_imports(path: Path) -> list[str]:
    return ray_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))


def test_the_scan_finds_every_form_of_import_and_no_string() -> None:
    source = (
        "import os, ray\n"
        "from ray.serve.schema import ServeDeploySchema\n"
        "def f():\n"
        "    import ray.serve\n"
        "    importlib.import_module('ray.serve.config')\n"
        "    return __import__('ray')\n"
        "SCRIPT = 'import ray; ray.init()'\n"  # code for another process: not an import here
        "import rayon, raylift.serve\n"
    )
    assert [hit.split(": ")[1] for hit in ray_imports(source)] == [
        "ray", "ray.serve.schema", "ray.serve", "ray.serve.config", "ray"]


def test_no_module_of_raylift_imports_ray() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50 and RUNS_ELSEWHERE in modules  # the scan sees the package
    found = [hit for path in modules if path != RUNS_ELSEWHERE for hit in module_ray_imports(path)]
    assert found == [], "raylift imports Ray on the Airflow side:\n" + "\n".join(found)
    assert module_ray_imports(RUNS_ELSEWHERE)  # the one exception: the script imports Ray (where it runs)


def test_the_schema_script_is_never_imported_by_raylift() -> None:
    """It is a file run by another Python (or its text sent as a Ray job): importing it here would import Ray."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any("ray_schema_check" in n for n in names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_the_schema_script_imports_nothing_of_raylifts() -> None:
    """Where it runs (a cluster's head) raylift is not installed: the standard library, pydantic and Ray only."""
    tree = ast.parse(RUNS_ELSEWHERE.read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported - {"__future__", "pydantic"} <= set(sys.stdlib_module_names), imported


CHECK_WITHOUT_RAY = """
import json, logging, sys
sys.modules["ray"] = None  # `import ray` (and ray.*) raises ImportError from here on
try:
    import ray.serve.schema
except ImportError:
    pass
else:
    sys.exit("ray is still importable")
from pathlib import Path

from raylift.errors import ServeFitError
from raylift.records import ClusterState
from raylift.release.start import fit_check
from raylift.serve.config import app_kind, load_config, render_app
from raylift.serve.placement import uses_accelerators
from raylift.serve.validation import Cluster, check_fit

configs = Path(sys.argv[1])


def app(name, replicas=None):
    base = load_config(configs / name)
    return render_app(base, app_name="app", working_dir="file:///a.zip", args=base["applications"][0].get("args", {}),
                      replicas=replicas)


gpus = Cluster(totals={"CPU": 144.0, "GPU": 12.0}, nodes=({"CPU": 48.0, "GPU": 4.0},) * 3)
out = {"lines": check_fit(app("llm-gpu-pp3-tp4.yaml"), gpus, vllm=True).lines}
try:
    check_fit(app("translator-gpu.yaml", replicas=28), gpus, vllm=app_kind(app("translator-gpu.yaml")).vllm)
except ServeFitError as exc:
    out["refusal"] = str(exc)
out["accelerators"] = uses_accelerators([app("llm-gpu-tp4.yaml")])


class NoRayJobs:  # a target without the capability (as eks)
    name = "eks"

    def cluster_state(self):
        return ClusterState(nodes=3, resources=dict(gpus.totals), node_resources=list(gpus.nodes))


seen = []
handler = logging.Handler()
handler.emit = lambda record: seen.append(record.getMessage())
logger = logging.getLogger("deploy")
logger.addHandler(handler)
logger.setLevel(logging.INFO)
out["fit_check"] = fit_check(NoRayJobs(), app("llm-gpu-tp4.yaml"), {"applications": []}, log=logger).lines
out["log"] = seen
out["ray_loaded"] = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.") if sys.modules[m] is not None)
print(json.dumps(out))
"""


@pytest.mark.component  # a child Python
def test_the_fit_check_works_with_ray_unimportable() -> None:
    """raylift's arithmetic (check_fit, the deploy's fit_check on a target without a Ray job, placement's accelerator
    test) in a Python where ``import ray`` fails: what an Airflow without Ray runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", CHECK_WITHOUT_RAY, str(ROOT / "serve_apps/configs")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert "GPU: needs 12 = 1 x 12 (LLMServer); cluster has 12, other apps hold 0" in out["lines"]
    assert "GPU: needs 14 = 28 x 0.5 (Translator); cluster has 12" in out["refusal"]
    assert out["accelerators"] is True
    assert "GPU: needs 4 = 1 x 4 (LLMServer); cluster has 12, other apps hold 0" in out["fit_check"]
    assert any("Ray's Serve schema check of app 'app' is left to the cluster at apply" in line for line in out["log"])
    assert out["ray_loaded"] == []
