"""tools/kuberay_crds.sh: the KubeRay CRDs the manifest tests validate against are found, or fetched (pinned, sha256
checked), or the run stops before the tests with one message naming RAYLIFT_KUBERAY_CRDS.

The script runs as tools/test.sh runs it, in a checkout with no ``../shared`` beside it (``RAYLIFT_ROOT`` is a
temporary folder) and a fresh cache; "no network" is a fetch URL nothing answers (a closed port on 127.0.0.1), and a
corrupted download is a ``file://`` URL serving other bytes.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.infra.terraform_model import TerraformModule, unquote

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "kuberay_crds.sh"
NEEDED = ("ray.io_rayservices.yaml", "ray.io_rayclusters.yaml")
CRD = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x.ray.io\n"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    checkout = tmp_path / "clone" / "raylift"  # ../shared does not exist beside it
    checkout.mkdir(parents=True, exist_ok=True)
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAYLIFT_ROOT": str(checkout),
            "RAYLIFT_CACHE": str(tmp_path / "cache"),
            "KUBERAY_CRDS_URL": f"http://127.0.0.1:{closed_port()}/crds"}  # fmt: skip
    return subprocess.run(["bash", str(SCRIPT)], env={**base, **env}, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip


def crd_folder(path: Path, names: tuple[str, ...] = NEEDED) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (path / name).write_text(CRD)
    return path


def test_absent_and_unfetchable_stops_with_one_message(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "RAYLIFT_KUBERAY_CRDS" in lines[0] and "could not be fetched" in lines[0]
    assert "ray.io_rayservices.yaml" in lines[0] and "v1.7.0" in lines[0]
    assert not (tmp_path / "cache" / "kuberay-crds").exists()  # nothing half-fetched left behind


def test_a_download_with_other_bytes_is_refused_and_not_kept(tmp_path: Path) -> None:
    served = crd_folder(tmp_path / "mirror", (*NEEDED, "ray.io_rayjobs.yaml"))
    done = run(tmp_path, KUBERAY_CRDS_URL=served.as_uri())
    assert done.returncode == 2 and done.stdout == ""
    assert re.search(r"ray.io_rayservices.yaml has sha256 [0-9a-f]{64}, not KubeRay v1.7.0's pinned "
                     r"0a8fc325e6e22b9231c1f282b309555e2ecf94227ca20a03df3d1d9a403907ab .*refused", done.stderr)
    assert not (tmp_path / "cache" / "kuberay-crds").exists()


def test_a_corrupted_cached_file_is_refused(tmp_path: Path) -> None:
    crd_folder(tmp_path / "cache" / "kuberay-crds")
    done = run(tmp_path)
    assert done.returncode == 2
    assert "the cached ray.io_rayservices.yaml has sha256" in done.stderr and "Delete " in done.stderr


def test_a_folder_that_holds_them_is_printed(tmp_path: Path) -> None:
    given = crd_folder(tmp_path / "given")
    done = run(tmp_path, RAYLIFT_KUBERAY_CRDS=str(given))
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, str(given), "")
    shared = tmp_path / "clone" / "shared" / "reference" / "kuberay"  # the reference copy beside it
    real = ROOT.parent / "shared" / "reference" / "kuberay"
    if all((real / name).is_file() for name in NEEDED):  # KubeRay's own files: used as they are
        shared.mkdir(parents=True)
        for name in NEEDED:
            (shared / name).write_bytes((real / name).read_bytes())
        done = run(tmp_path)
        assert (done.returncode, done.stdout.strip()) == (0, str(shared))


def test_a_reference_copy_with_other_bytes_is_refused(tmp_path: Path) -> None:
    """The copy beside the checkout is checksummed like a fetched one (it is used first, and never fetched over)."""
    crd_folder(tmp_path / "clone" / "shared" / "reference" / "kuberay")
    done = run(tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "the reference copy ray.io_rayservices.yaml has sha256" in done.stderr and "refused" in done.stderr


def test_a_named_folder_without_them_is_refused_not_replaced(tmp_path: Path) -> None:
    crd_folder(tmp_path / "clone" / "shared" / "reference" / "kuberay")  # not reached: the named folder decides
    done = run(tmp_path, RAYLIFT_KUBERAY_CRDS=str(crd_folder(tmp_path / "partial", NEEDED[:1])))
    assert done.returncode == 1 and done.stdout == ""
    assert "RAYLIFT_KUBERAY_CRDS=" in done.stderr and "does not hold KubeRay's CRDs" in done.stderr


def test_the_pinned_release_is_the_one_terraform_installs() -> None:
    pinned = re.search(r"^KUBERAY_VERSION=v(\S+)$", SCRIPT.read_text(), re.M)
    eks = TerraformModule.load(ROOT / "terraform" / "modules" / "eks_ray")
    assert pinned and pinned.group(1) == unquote(eks.variables["kuberay_operator_version"]["default"])


@pytest.mark.parametrize("name", NEEDED)
def test_every_fetched_file_has_a_pin(name: str) -> None:
    assert re.search(rf"\[{re.escape(name)}\]=[0-9a-f]{{64}}$", SCRIPT.read_text(), re.M)


@pytest.mark.parametrize("name", NEEDED)
def test_the_reference_copy_is_the_pinned_release(name: str) -> None:
    """The copy beside the checkout (used first) and a fetched one are one KubeRay release, the one terraform installs:
    the suite judges every clone's manifests by the same schemas."""
    import hashlib

    shared = ROOT.parent / "shared" / "reference" / "kuberay" / name
    if not shared.is_file():
        pytest.skip(f"no reference copy at {shared} (the fetched copy is checked against the pins instead)")
    pin = re.search(rf"\[{re.escape(name)}\]=([0-9a-f]{{64}})$", SCRIPT.read_text(), re.M)
    assert pin and hashlib.sha256(shared.read_bytes()).hexdigest() == pin.group(1), f"{shared} is another release"
