"""Serve config merging: a deploy changes only its own app."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylift.errors import RayliftValueError
from raylift.serve.config import load_config, merge_app, render_app

ROOT = Path(__file__).resolve().parents[1]


def base() -> dict:
    return load_config(ROOT / "serve_apps/configs/llm-cpu.yaml")


def test_render_fills_working_dir_args_and_replicas() -> None:
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={"model": "/m"}, replicas=3)
    assert app["runtime_env"]["working_dir"] == "file:///a.zip"
    assert app["args"]["model"] == "/m" and app["args"]["served_model_name"] == "tiny-llama"
    assert app["deployments"][0]["num_replicas"] == 3


def test_merge_keeps_other_apps_and_replaces_same_name() -> None:
    other = {"name": "translator", "route_prefix": "/translate", "import_path": "t:app"}
    old = render_app(base(), app_name="llm", working_dir="file:///old.zip", args={})
    current = {"applications": [other, old], "http_options": {"host": "127.0.0.1", "port": 9000}}
    new = render_app(base(), app_name="llm", working_dir="file:///new.zip", args={})
    merged = merge_app(current, new, defaults=base())
    assert [a["name"] for a in merged["applications"]] == ["translator", "llm"]
    assert merged["applications"][1]["runtime_env"]["working_dir"] == "file:///new.zip"
    assert merged["http_options"]["port"] == 9000  # the running cluster's options win


def test_route_prefix_clash_is_refused() -> None:
    current = {"applications": [{"name": "other", "route_prefix": "/"}]}
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={})
    with pytest.raises(RayliftValueError, match="route_prefix '/'"):
        merge_app(current, app, defaults=base())


@pytest.mark.parametrize(("theirs", "ours"), [
    ("/", "/v1"),              # the finding: an app at /v1 took the OpenAI traffic of the app at /
    ("/v1", "/"),              # the other way round: the new root app would lose its /v1 to theirs
    ("/", "/v1/chat"),
    ("/team", "/team/llm"),    # any nesting below the root: the longer prefix takes the shorter's subtree
    ("/team/llm", "/team"),
])
def test_a_route_prefix_that_shadows_another_apps_is_refused(theirs: str, ours: str) -> None:
    """Issue 57: Serve routes a request to the longest matching prefix (ray/serve/_private/proxy_router.py,
    LongestPrefixRouter.match_route: routes sorted longest first, matched at a '/' boundary), so a nested prefix
    silently takes the other app's traffic; only equal prefixes were refused."""
    current = {"applications": [{"name": "other", "route_prefix": theirs}]}
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={}, route_prefix=ours)
    with pytest.raises(RayliftValueError, match=rf"route_prefix {ours!r} of app 'llm'.*'other' at {theirs!r}"):
        merge_app(current, app, defaults=base())


@pytest.mark.parametrize(("theirs", "ours"), [("/", "/translate"), ("/", "/_canary/llm"), ("/team", "/teams"),
                                              ("/a/b", "/a/c"), ("/v1x", "/v1")])
def test_prefixes_that_take_nothing_from_each_other_are_kept(theirs: str, ours: str) -> None:
    """The documented translator at /translate beside the LLM app at / (its OpenAI API lives under /v1), and
    prefixes that share characters but no '/'-segment (Serve matches at a '/' boundary)."""
    current = {"applications": [{"name": "other", "route_prefix": theirs, "import_path": "t:app"}]}
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={}, route_prefix=ours)
    merged = merge_app(current, app, defaults=base())
    assert [a["route_prefix"] for a in merged["applications"]] == [theirs, ours]


def test_an_app_without_an_http_route_shadows_nothing() -> None:
    """route_prefix null: Serve gives the app no HTTP route, so it takes nothing from an app at '/'."""
    current = {"applications": [{"name": "other", "route_prefix": None, "import_path": "t:app"}]}
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={})
    assert len(merge_app(current, app, defaults=base())["applications"]) == 2


def test_first_deploy_takes_defaults() -> None:
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={})
    merged = merge_app({"applications": []}, app, defaults={**base(), "http_options": {"port": 1234}})
    assert merged["http_options"] == {"port": 1234} and len(merged["applications"]) == 1


# -- app kinds, autoscaling, route prefixes; every config against Ray Serve's own schema ---------------
CONFIGS = sorted((ROOT / "serve_apps/configs").glob("*.yaml"))
SEED_AUTOSCALING = {  # the KubeRay seed's numbers
    "target_ongoing_requests": 2, "max_ongoing_requests": 5, "min_replicas": 0, "max_replicas": 5,
    "downscale_delay_s": 600,
}


def rendered(config: Path, **kw: object) -> dict:
    base_config = load_config(config)
    return render_app(base_config, app_name="app", working_dir="file:///a.zip", args={}, **kw)


def test_every_config_names_a_known_app_kind() -> None:
    from raylift.serve.config import app_kind

    kinds = {c.name: app_kind(load_config(c)["applications"][0]).name for c in CONFIGS}
    assert {k for name, k in kinds.items() if name.startswith("llm-")} == {"llm"}
    assert {k for name, k in kinds.items() if name.startswith("translator-")} == {"translator"}
    assert {k for name, k in kinds.items() if name.startswith("llamacpp-")} == {"llamacpp"}
    assert {"llm-gpu.yaml", "llm-gpu-tp4.yaml", "llm-gpu-pp3-tp4.yaml", "llm-neuron.yaml", "llm-cpu.yaml"} <= set(kinds)


def test_an_import_path_outside_serve_apps_is_refused() -> None:
    from raylift.serve.config import app_kind

    with pytest.raises(RayliftValueError, match=r"imports 'my_mod:app'.*llm\.app:build_app"):
        app_kind({"name": "x", "import_path": "my_mod:app"})


def test_autoscaling_params_replace_fixed_replicas() -> None:
    from raylift.serve.config import apply_autoscaling

    app = apply_autoscaling(rendered(ROOT / "serve_apps/configs/llm-cpu.yaml", replicas=3), SEED_AUTOSCALING)
    dep = app["deployments"][0]
    assert "num_replicas" not in dep and dep["max_ongoing_requests"] == 5
    assert dep["autoscaling_config"] == {
        "target_ongoing_requests": 2, "min_replicas": 0, "max_replicas": 5, "downscale_delay_s": 600
    }
    assert apply_autoscaling(app, {}) == app


def test_autoscaling_params_merge_over_the_configs_own() -> None:
    from raylift.serve.config import apply_autoscaling

    app = apply_autoscaling(rendered(ROOT / "serve_apps/configs/llm-gpu.yaml"), {"min_replicas": 1})
    assert app["deployments"][0]["autoscaling_config"]["min_replicas"] == 1
    assert app["deployments"][0]["autoscaling_config"]["max_replicas"] == 5  # the config's
    with pytest.raises(RayliftValueError, match=r"unknown key\(s\) \['min'\]"):
        apply_autoscaling(app, {"min": 1})


def test_route_prefix_override_and_app_url() -> None:
    from raylift.serve.config import app_url

    app = rendered(ROOT / "serve_apps/configs/translator-cpu.yaml", route_prefix="/translate")
    assert app["route_prefix"] == "/translate"
    assert app_url("http://127.0.0.1:8000/", app) == "http://127.0.0.1:8000/translate"
    assert app_url("http://127.0.0.1:8000", rendered(ROOT / "serve_apps/configs/llm-cpu.yaml")) == "http://127.0.0.1:8000"


def test_configs_and_rendered_apps_pass_ray_serves_own_schema() -> None:
    """Ray Serve's ServeDeploySchema (runtime env) accepts every YAML as is, and as raylift renders it
    with the seed's autoscaling: what `serve deploy` and the REST API would take."""
    import json
    import subprocess

    from raylift.config import local_settings
    from raylift.serve.config import apply_autoscaling

    docs = [load_config(c) for c in CONFIGS]
    for c in CONFIGS:
        app = apply_autoscaling(rendered(c, replicas=2, route_prefix="/x"), SEED_AUTOSCALING)
        docs.append({"applications": [app]})
    docs.append({"applications": [{**rendered(CONFIGS[0]), "deployments": [{"name": "D", "num_replicas": -1}]}]})
    code = (
        "import json, sys\nfrom ray.serve.schema import ServeDeploySchema\n"
        "for doc in json.load(sys.stdin):\n"
        "    try:\n        ServeDeploySchema.model_validate(doc); print('ok')\n"
        "    except Exception as exc:\n        print('bad', type(exc).__name__)\n"
    )
    proc = subprocess.run(
        [str(local_settings().runtime_python), "-c", code], input=json.dumps(docs),
        capture_output=True, text=True, timeout=300,
    )
    verdicts = proc.stdout.split()
    assert verdicts == ["ok"] * (2 * len(CONFIGS)) + ["bad", "ValidationError"], proc.stderr[-2000:]


@pytest.mark.parametrize(
    "conf",
    [
        {"autoscaling": {"min_replicas": -1}},
        {"autoscaling": {"max_replicas": 0}},
        {"autoscaling": {"target_ongoing_requests": 0}},
        {"autoscaling": {"min": 1}},
        {"route_prefix": "no-slash"},
    ],
)
def test_the_params_form_refuses_bad_autoscaling_and_route_prefix(conf: dict) -> None:
    from airflow.sdk.definitions.param import ParamsDict

    from raylift.dag_params import deploy_params

    params = ParamsDict(deploy_params())
    with pytest.raises(Exception, match=f"param {next(iter(conf))}"):  # ParamsDict validates on update
        params.update(conf)
        params.validate()


def test_the_params_form_takes_the_kuberay_seeds_autoscaling() -> None:
    from airflow.sdk.definitions.param import ParamsDict

    from raylift.dag_params import deploy_params

    params = ParamsDict(deploy_params())
    params.update({"autoscaling": SEED_AUTOSCALING, "route_prefix": "/translate"})
    assert params.validate()["autoscaling"] == SEED_AUTOSCALING


def test_replicas_under_autoscaling_are_the_floor_never_dropped() -> None:
    """llm-gpu.yaml scales 0-5: the replicas asked for become its floor (Serve starts there), not nothing."""
    from raylift.serve.config import apply_autoscaling

    dep = rendered(ROOT / "serve_apps/configs/llm-gpu.yaml", replicas=2)["deployments"][0]
    assert "num_replicas" not in dep
    assert dep["autoscaling_config"]["min_replicas"] == 2 and dep["autoscaling_config"]["max_replicas"] == 5
    with pytest.raises(RayliftValueError, match=r"6 replica\(s\) asked for .* at most 5 \(max_replicas\)"):
        rendered(ROOT / "serve_apps/configs/llm-gpu.yaml", replicas=6)
    # a fixed profile turned autoscaling by the Param keeps its count as the floor, unless the Param names one
    fixed = rendered(ROOT / "serve_apps/configs/llm-cpu.yaml", replicas=3)
    assert apply_autoscaling(fixed, {"max_replicas": 4})["deployments"][0]["autoscaling_config"]["min_replicas"] == 3
    assert apply_autoscaling(fixed, {"min_replicas": 1})["deployments"][0]["autoscaling_config"]["min_replicas"] == 1
    with pytest.raises(RayliftValueError, match=r"at most 2 \(max_replicas\)"):
        apply_autoscaling(fixed, {"max_replicas": 2})


@pytest.mark.parametrize(("given", "served"), [("/foo/", "/foo"), ("//", "/"), ("/a//b/", "/a/b"), ("/", "/"),
                                               ("/team-a/llm_1.0", "/team-a/llm_1.0")])
def test_a_route_prefix_is_normalised_as_serve_routes_it(given: str, served: str) -> None:
    """Issue 45 item 5: '/foo/' and '//' were written as given (Serve refuses a trailing '/')."""
    assert rendered(ROOT / "serve_apps/configs/translator-cpu.yaml", route_prefix=given)["route_prefix"] == served


@pytest.mark.parametrize(("given", "why"), [("foo", "must start with '/'"), ("/a/{x}", "holds '{}'"),
                                            ("/a/../b", "'.' or '..' segment")])
def test_a_route_prefix_serve_cannot_route_is_refused_naming_why(given: str, why: str) -> None:
    with pytest.raises(RayliftValueError, match=f"route_prefix {given!r} .*{__import__('re').escape(why)}"):
        rendered(ROOT / "serve_apps/configs/translator-cpu.yaml", route_prefix=given)
