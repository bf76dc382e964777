"""The suite's three tiers as pytest markers, assigned at collection, and the guard that keeps ``unit`` honest.

- ``system``: real Ray, vLLM or Airflow stacks. Every test under ``SYSTEM_DIRS`` (the folders the heavy and
  multi-worker lanes of tools/test.sh run) and every test marked ``integration``.
- ``component``: a process, a server or a local socket: moto, an in-process stand-in on 127.0.0.1, a forked or
  spawned Airflow, a child Python in the runtime venv, terraform/docker CLIs. A test is component when it uses one
  of ``COMPONENT_FIXTURES`` (fixtures that start such a thing), when it is skipped without the runtime venv (a
  ``skipif`` whose reason names the "runtime env": that venv is reached only through its Python), or when it (or its
  module) is in ``COMPONENT`` — the tests the guard was seen to stop, each with what it starts.
- ``unit``: everything else: pure functions, records, renders, decisions. While a unit test is set up and runs,
  starting a process (``subprocess``, ``os.fork``/``posix_spawn``/``system``, ``multiprocessing``) or connecting,
  binding or sending on a socket of any family but AF_UNIX fails it, with a message saying to mark it component.

A test's own ``@pytest.mark.unit/component/system`` (or a module's ``pytestmark``) wins over the rule.
``RAYLIFT_TIER_MEASURE=1`` ignores ``COMPONENT``, so that every candidate runs as unit under the guard; with
``RAYLIFT_TIER_VIOLATIONS=<file>`` each stopped call is appended there as JSON (how ``COMPONENT`` was measured:
bench/README.md, "Test tiers").
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import subprocess
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

TIERS = ("unit", "component", "system")
RUNTIME_REASON = re.compile(r"runtime (env|venv)", re.IGNORECASE)

SYSTEM_DIRS = ("tests/integration/", "tests/entrypoints/", "tests/multiworker/", "tests/install/")

# Fixtures that start a process or a server (their tests are component whatever their module).
COMPONENT_FIXTURES = {
    "moto_url": "a moto server process (tests/conftest.py)",
    "aws": "a moto server process (tests/conftest.py)",
    "s3_proxy": "a proxy to moto on 127.0.0.1 (tests/aws/conftest.py)",
    "stub": "the stub OpenAI server in a child process (tests/bench/conftest.py)",
    "kube_api": "the Kubernetes API stand-in on 127.0.0.1 (tests/fixtures/kube_api.py)",
    "kube_jobs": "the Kubernetes API stand-in on 127.0.0.1 (tests/fixtures/kube_jobs.py)",
    "kube_rayclusters": "the Kubernetes API stand-in on 127.0.0.1 (tests/fixtures/kube_rayclusters.py)",
}

# The tests the guard stopped when every candidate ran as unit (RAYLIFT_TIER_MEASURE=1 over the light lane's
# candidates, bench/README.md "Test tiers"): module -> (what they start, their names), ALL for the whole module.
# A name is a function (or Class::function): all its parameter sets, or those whose ids match "name[pattern]".
ALL: tuple[str, ...] = ()
COMPONENT: dict[str, tuple[str, tuple[str, ...]]] = {
    "tests/aws/test_hardware_profile.py": ("parses the DAGs in a child Python", (
        "test_the_profile_is_checked_first_and_everything_that_applies_waits_for_it",
    )),
    "tests/aws/test_identity.py": ("connects to 127.0.0.1:9 (an unreachable endpoint)", ALL),
    "tests/aws/test_tarball.py": ("a download server on 127.0.0.1", (
        "test_download_retries_then_extracts_single_top_folder",
        "test_gives_up_after_attempts_without_leaking_query",
        "test_path_traversal_is_refused",
        "test_truncated_archive_is_refused",
    )),
    "tests/bench/test_airflow_forkserver.py": ("airflow db migrate and forked Airflow commands", ALL),
    "tests/bench/test_engine_metrics.py": ("a metrics server on 127.0.0.1", (
        "test_a_level_is_summarised_from_the_scrapes_while_it_ran",
        "test_a_round_ends_even_when_the_sampler_misses_its_cancel",
    )),
    "tests/bench/test_http1.py": ("an HTTP server on 127.0.0.1", (
        "test_read_timestamps_are_arrival_times_not_processing_times",
        "test_server_closing_mid_body_is_an_error_record",
        "test_stream_without_done_is_a_truncated_error_record",
        "test_refused_connection_is_an_error_record",
    )),
    "tests/bench/test_regression_gate.py": ("the stub server (tests/harness/stub_server.py) in a child process", (
        "test_a_level_cut_off_by_the_time_limit_fails_the_gate",
        "test_too_few_requests_per_level_fail_the_gate_naming_how_many_would_decide",
        "test_a_request_cut_off_counts_as_an_error",
    )),
    "tests/bench/test_run_cost.py": ("an HTTP server on 127.0.0.1", (
        "test_the_report_shows_the_cost_and_sets_other_runs_beside_it",
    )),
    "tests/bench/test_side_by_side.py": ("connects to 127.0.0.1:9 (an unreachable endpoint)", ALL),
    "tests/dags/test_dagbag.py": ("parses the DAGs in a child Python", ALL),
    "tests/dags/test_param_defaults.py": ("parses the DAGs in a child Python", (
        "test_the_table_covers_every_param_of_the_deploy_dag",
        "test_every_dag_param_default_is_the_tables",
        "test_the_operators_signature_defaults_are_the_tables",
        "test_the_deploy_form_groups_every_param_in_its_section",
    )),
    "tests/dags/test_redeploy_run.py": ("airflow db migrate, then a DAG run", ALL),
    "tests/hooks/test_connection_credentials.py": ("an HTTP server on 127.0.0.1", (
        "test_a_pasted_newline_is_trimmed_and_no_form_of_the_token_is_logged",
    )),
    "tests/hooks/test_ray_dashboard.py": ("a dashboard stand-in on 127.0.0.1", (
        "test_a_put_waits_past_the_hooks_read_timeout_while_serve_starts",
        "test_proxies_not_up_in_rays_bound_sends_the_same_config_again",
        "test_any_500_is_sent_again_and_the_error_names_the_tracebacks_last_line",
        "test_any_other_refusal_is_not_sent_again",
        "test_a_read_timeout_says_the_dashboard_did_not_answer_not_that_it_is_unreachable",
        "test_a_job_sent_before_the_heads_job_agent_is_up_is_sent_again",
        "test_every_dashboard_call_shares_one_tls_context",
    )),
    "tests/hooks/test_ray_drain.py": ("ray start (a real Ray head and worker)", ALL),
    "tests/hooks/test_cluster_identity.py": ("airflow db migrate and Airflow's CLI", (
        "test_a_connection_in_the_metadata_database_to_a_cluster_another_drives_is_refused",
    )),
    "tests/hooks/test_raylift_cluster.py": ("a dashboard stand-in on 127.0.0.1", (
        "test_a_params_url_gets_no_token_and_the_run_is_refused_by_name",
        "test_the_connections_own_host_gets_its_token",
        "test_a_params_url_without_a_token_anywhere_still_works_and_sends_none",
    )),
    "tests/images/test_dockerfiles.py": ("hadolint, awk and bash -n as subprocesses", (
        "test_hadolint_is_clean",
        "test_hadolint_flags_a_bad_dockerfile",
        "test_gpu_constraint_merge_keeps_one_pin_per_package",
        "test_buildspec_is_valid_and_complete",
        "test_buildspec_check_catches_a_broken_buildspec",
    )),
    "tests/images/test_image_vllm_options.py": ("the runtime venv's Python; fetches the image's vLLM wheel", (
        "test_the_images_own_vllm_parses_the_options_the_app_writes",
        "test_the_parse_run_here_is_the_images_own_vllm_file_for_file",
        "test_the_checker_names_each_option_vllm_refuses",
        "test_the_stand_in_packages_are_within_what_the_wheel_requires",
        "test_the_neuron_profile_leaves_block_size_to_the_neuron_platform",
    )),
    "tests/images/test_image_vllm_wheels.py": ("fetches the image's vLLM wheel", (
        "test_the_images_python_fits_its_vllm_wheel_and_the_project",
        "test_every_vllm_name_the_app_imports_is_in_the_images_wheel",
        "test_the_vllm_functions_the_app_calls_by_name_need_only_what_it_supplies",
    )),
    "tests/infra/test_compose.py": ("tools/setup.sh tools and the compose validator", ALL),
    "tests/infra/test_compose_layout.py": ("tools/setup.sh tools", (
        "test_the_compose_layout_builds_the_artifact",
        "test_either_image_fills_the_shared_volume_with_folders_both_sides_can_write",
    )),
    "tests/infra/test_iam_from_calls.py": ("a child pytest recording the moto-backed tests' AWS calls", (
        "test_every_recorded_call_is_granted_to_its_principal",
        "test_the_airflow_policy_grants_nothing_raylift_does_not_call",
    )),
    "tests/infra/test_kuberay_crds.py": ("tools/kuberay_crds.sh against a file server on 127.0.0.1", (
        "test_absent_and_unfetchable_stops_with_one_message",
        "test_a_download_with_other_bytes_is_refused_and_not_kept",
        "test_a_corrupted_cached_file_is_refused",
        "test_a_folder_that_holds_them_is_printed",
        "test_a_named_folder_without_them_is_refused_not_replaced",
        "test_a_reference_copy_with_other_bytes_is_refused",
    )),
    "tests/infra/test_terraform.py": ("checkov (tools/setup.sh tools)", (
        "test_checkov_passes",
    )),
    "tests/infra/test_tf_outputs_to_airflow.py": ("tools/tf_outputs_to_airflow.py and the airflow CLI as subprocesses", (
        "test_prints_connection_variables_and_target_options",
        "test_terraform_to_tool_to_target_gives_options_the_target_accepts",
        "test_staging_runs_beside_the_cluster_when_the_stack_has_a_staging_image_else_on_the_worker",
        "test_the_eks_worker_node_group_is_picked_by_key",
        "test_every_command_is_accepted_by_airflows_cli_parser",
        "test_sensitive_and_credential_like_outputs_are_never_printed",
        "test_reads_a_file_argument",
        "test_refuses_what_is_not_a_raylift_stack",
    )),
    "tests/local/test_cluster_drain.py": ("a dashboard stand-in on 127.0.0.1", (
        "test_a_worker_is_found_by_its_tag",
        "test_replicas_that_do_not_fit_elsewhere_refuse_the_scale_down_before_any_drain",
        "test_a_worker_without_replicas_is_stopped_without_a_drain",
    )),
    "tests/local/test_cluster_ingress.py": ("reads Ray's constants in the runtime venv's Python", (
        "test_the_default_ingress_is_haproxy_and_proxy_is_serves_own",
        "test_haproxy_ingress_is_what_ray_reads_on_this_clusters_own_ports",
        "test_each_clusters_replicas_serve_on_their_own_ports",
        "test_each_clusters_fallback_proxy_is_its_own",
        "test_a_stopping_replica_drains_for_raylifts_period_not_the_external_balancers_30_s",
    )),
    "tests/local/test_cluster_workers.py": ("connects to a GCS port on 127.0.0.1", ALL),
    "tests/local/test_front.py": ("the blue/green front (HAProxy) on 127.0.0.1", (
        "test_the_switch_sends_new_requests_to_green_and_lets_blue_finish_its_own",
        "test_stop_leaves_no_process_and_a_restart_serves_the_colour_it_is_given",
        "test_an_unknown_colour_is_refused",
    )),
    "tests/local/test_haproxy_loopback.py": ("Ray's HAProxy binary", ALL),
    "tests/local/test_process_safety.py": ("starts and stops real processes (sleep, ray, haproxy)", (
        "test_a_serve_haproxy_under_the_folder_of_an_older_raylift_is_stopped_with_its_cluster",
        "test_a_stale_record_naming_a_reused_pid_stops_nothing",
        "test_a_recorded_node_is_stopped_with_its_process_group",
        "test_an_older_raylifts_record_of_a_running_node_is_still_stopped",
        "test_rays_haproxy_config_goes_under_this_clusters_folder",
        "test_a_second_checkouts_teardown_leaves_the_first_stacks_haproxy",
        "test_a_node_recorded_right_after_its_exec_holds_its_command_line",
    )),
    "tests/operators/test_bad_input.py": ("connects to a dashboard port on 127.0.0.1", (
        "test_deploy_without_a_cluster_says_to_scale_first",
    )),
    "tests/operators/test_canary_release.py": ("a Serve stand-in on 127.0.0.1", ALL),
    "tests/operators/test_deploy_cold_start.py": ("a dashboard stand-in on 127.0.0.1", ALL),
    "tests/test_no_ray_on_control.py": ("a child Python with Ray unimportable", (
        "test_the_fit_check_works_with_ray_unimportable",
    )),
    "tests/operators/test_rollback_guard.py": ("a Serve stand-in on 127.0.0.1", (
        "test_a_benchmark_exception_after_apply_is_rolled_back_to_the_last_good",
        "test_a_proven_run_and_a_run_that_applied_nothing_are_left_alone",
        "test_an_app_changed_by_someone_else_since_is_not_reverted",
        "test_a_changed_served_name_that_failed_later_is_rolled_back",
        "test_a_non_json_smoke_answer_fails_the_smoke_test_and_the_rollback_step_restores",
        "test_a_retried_deploy_after_its_worker_died_post_put_keeps_the_first_snapshot",
        "test_a_hand_deploy_during_the_benchmark_survives_the_gate_failure",
        "test_an_undeploy_during_the_run_is_not_undone_by_its_failure",
        "test_rollback_restores_what_this_run_replaced_not_an_older_last_good",
        "test_a_full_cluster_rolls_back_stop_before_start_within_the_fit",
        "test_a_roomy_cluster_rolls_back_with_the_runs_surge",
        "test_the_rollback_waits_for_the_restored_app_as_long_as_the_runs_deploy_timeout",
        "test_a_hand_scale_up_during_a_direct_release_survives_its_rollback",
        "test_a_hand_scale_up_of_the_serving_app_during_a_canary_survives_its_rollback",
    )),
    "tests/operators/test_undeploy_and_writers.py": ("a Serve stand-in on 127.0.0.1", (
        "test_undeploy_removes_one_app_and_keeps_the_other_as_it_was",
        "test_undeploy_waits_while_serve_lists_the_app_deleting",
        "test_undeploy_defers_on_the_targets_removal_trigger",
        "test_a_write_built_on_a_stale_read_is_refused_naming_the_change",
        "test_a_deploy_racing_another_writer_fails_naming_the_conflict_and_reverts_nothing",
        "test_writers_take_turns_on_the_cluster_lock_so_both_apps_stay",
        "test_a_stuck_lock_holder_is_named_after_the_wait",
        "test_a_step_holding_the_lease_writes_inside_it_and_a_lost_lease_writes_nothing",
        "test_a_code_update_whose_surge_does_not_fit_is_refused_before_anything_is_applied",
    )),
    "tests/serve_apps/test_engine_args_check.py": ("the runtime venv's Python (tiny model, vLLM's parser)", ALL),
    "tests/serve_apps/test_llamacpp.py": ("llama.cpp in the runtime venv's Python", ALL),
    "tests/serve_apps/test_llm_app.py": ("the runtime venv's Python (tiny model, vLLM)", (
        "test_every_pinned_vllm_path_exists_in_the_locked_version",
        "test_the_locked_vllm_gets_the_newest_path_of_every_name",
        "test_app_args_become_vllm_serves_own_namespace",
        "test_vllm_refuses_bad_options_with_its_own_message",
    )),
    "tests/serve_apps/test_translator.py": ("the runtime venv's Python (tiny T5)", ALL),
    "tests/serve_apps/test_warmup_cache.py": ("an S3-like server on 127.0.0.1; replicas in the runtime venv's Python", (
        "test_a_good_artifact_is_unpacked_into_the_fresh_cache_folder",
        "test_a_node_unpacks_an_artifact_once",
        "test_an_ignored_artifact_leaves_what_the_node_compiled",
        "test_a_corrupted_artifact_is_ignored_with_a_log_line",
        "test_a_stale_artifact_is_ignored_with_a_log_line",
        "test_another_vllm_looks_under_another_key_and_starts_cold",
        "test_two_replicas_publishing_one_key_leave_one_artifact",
    )),
    "tests/staging/test_hub_staging.py": ("a hub stand-in on 127.0.0.1 and the tiny model (runtime venv's Python)", (
        "test_public_repo_is_staged_without_duplicate_weight_formats",
        "test_patterns_from_params_choose_the_files",
        "test_gated_repo_needs_a_token_and_takes_it_from_the_environment",
        "test_gated_repo_with_the_token_of_an_airflow_connection",
    )),
    "tests/staging/test_stage.py": ("a hub stand-in on 127.0.0.1", (
        "test_hub_repo_not_found_names_the_repo",
    )),
    "tests/targets/test_check_subprocess_env.py": ("the engine-args check's subprocess", ALL),
    "tests/targets/test_eks_endpoint.py": ("an HTTP server on 127.0.0.1", (
        "test_a_resolvable_host_goes_on_to_the_requests",
    )),
    "tests/targets/test_eks_scale_in.py": ("the drain script in the runtime venv's Python", ALL),
    "tests/targets/test_local_app_runtime.py": ("probes runtimes' Pythons", ALL),
    "tests/targets/test_local_blue_green.py": ("a recorded cluster's processes (sleep)", (
        "test_another_runtime_than_the_serving_cluster_runs_is_a_cluster_change",
        "test_a_blue_green_release_without_the_front_is_refused_naming_the_setting",
        "test_the_front_is_switched_after_the_record_and_a_lost_worker_leaves_a_rollback_that_keeps_it_serving",
    )),
    "tests/targets/test_local_deploy_wait.py": ("a dashboard stand-in on 127.0.0.1", ALL),
    "tests/targets/test_ray_cluster.py": ("a dashboard stand-in on 127.0.0.1", (
        "test_scale_and_teardown_leave_the_cluster_as_it_is",
        "test_a_cluster_that_does_not_answer_is_named",
    )),
    "tests/targets/test_target_options.py": ("an HTTP server on 127.0.0.1", (
        "test_refused_when_built_before_anything_is_called",
    )),
    "tests/test_layers.py": ("lint-imports as a subprocess", ALL),
    "tests/test_lease.py": ("lease holders in child Pythons", (
        "test_processes_with_their_own_homes_take_turns_and_tokens_grow",
        "test_exactly_one_of_simultaneous_claims_wins",
        "test_a_killed_holder_loses_the_lease_when_it_expires",
        "test_a_paused_holder_finds_its_lease_taken_over_and_cannot_take_it_back",
        "test_serve_writer_lock_holds_across_raylift_homes",
        "test_a_writer_paused_after_its_fence_check_is_refused_by_the_store",
        "test_the_release_records_are_written_fenced_under_the_lease",
    )),
    "tests/test_reports_app.py": ("the reports app served on 127.0.0.1; a child Python", ALL),
    "tests/test_serve_config.py": ("Ray Serve's schema in the runtime venv's Python", (
        "test_configs_and_rendered_apps_pass_ray_serves_own_schema",
    )),
    "tests/test_serve_status.py": ("Ray's enum in the runtime venv's Python", (
        "test_mirrors_rays_own_enum",
    )),
    "tests/test_serve_validation.py": ("a fresh child Python (what an import pulls in)", (
        "test_ray_serve_schema_is_not_imported_with_the_module",
    )),
    "tests/triggers/test_polling.py": ("a dashboard stand-in on 127.0.0.1", ALL),
    "tests/triggers/test_ray_job.py": ("a dashboard stand-in on 127.0.0.1", ALL),
    "tests/triggers/test_rayservice.py": ("a fresh child Python (what an import pulls in)", (
        "test_trigger_and_manifest_modules_import_no_heavy_clients",
    )),
    "tests/triggers/test_serve.py": ("a dashboard stand-in on 127.0.0.1", (
        "test_a_refused_token_fails_at_once_instead_of_waiting_for_the_deadline",
    )),
}


class TierViolation(RuntimeError):
    """A unit test started a process or used a network socket."""


def _declared(item: pytest.Item) -> str | None:
    marks = {mark.name for mark in item.iter_markers()}
    for tier in ("system", "component", "unit"):  # the heaviest declared wins
        if tier in marks:
            return tier
    return "system" if "integration" in marks else None


def _listed(nodeid: str) -> bool:
    module, _, rest = nodeid.partition("::")
    if module not in COMPONENT:
        return False
    names = COMPONENT[module][1]
    if names == ALL:
        return True
    base, _, params = rest.partition("[")
    for name in names:  # "name" (every parameter set) or "name[pattern]" (fnmatch on the ids, e.g. "*-ray_fit")
        name_base, _, pattern = name.partition("[")
        if name_base == base and (not pattern or fnmatch.fnmatchcase(params[:-1], pattern[:-1])):
            return True
    return False


def _needs_runtime_venv(item: pytest.Item) -> bool:
    """Skipped without the runtime venv: the control venv never imports Ray or vLLM, so such a test reaches them
    through the runtime venv's Python (a process), and `make test-fast` does not build that venv."""
    return any(RUNTIME_REASON.search(str(mark.kwargs.get("reason", "")))
               for mark in item.iter_markers() if mark.name in ("skipif", "skip"))


def tier_of(item: pytest.Item) -> str:
    declared = _declared(item)
    if declared:
        return declared
    nodeid = item.nodeid
    if nodeid.startswith(SYSTEM_DIRS):
        return "system"
    if COMPONENT_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
        return "component"
    if _needs_runtime_venv(item):
        return "component"
    if not os.environ.get("RAYLIFT_TIER_MEASURE") and _listed(nodeid):
        return "component"
    return "unit"


def assign(items: list[pytest.Item]) -> None:
    """Give each item its tier's marker (run before ``-m`` deselects)."""
    for item in items:
        tier = tier_of(item)
        if not any(item.iter_markers(tier)):
            item.add_marker(tier)
        item.stash[TIER_KEY] = tier
        item.user_properties.append(("tier", tier))  # in each lane's JUnit XML, for bench/suite_timing.py


TIER_KEY = pytest.StashKey[str]()


# -- the guard ---------------------------------------------------------------------------------------------------
def _where(sock: socket.socket, address: Any) -> str:
    return f"{socket.AddressFamily(sock.family).name} {address!r}"


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


# The standard library's probes of the interpreter and its host, which libraries run once on import, whichever test
# first imports them (croniter's platform.architecture() runs `file -b python`): not the test's own process.
_PROBES = tuple(os.path.join(_STDLIB, name) for name in ("platform.py", "ctypes/util.py", "uuid.py"))


def _stdlib_probe() -> bool:
    return any(frame.filename in _PROBES for frame in traceback.extract_stack()[:-2])


def _caller() -> str:
    """`` from <file>:<line>``: the innermost frame outside the standard library (the code that asked for it)."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if not frame.filename.startswith(_STDLIB) and frame.filename != __file__:
            return f" from {os.path.relpath(frame.filename)}:{frame.lineno}"
    return ""


class Guard:
    """Patches the entry points of processes and network sockets while a unit test is set up and runs.

    Calls from threads that were running before the test (a server a component test left behind) pass; calls from
    the test's thread and from threads it starts are stopped (TierViolation) and recorded, so that a test which
    catches the error still fails afterwards."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.seen: list[str] = []
        self._before = [t for t in threading.enumerate() if t is not threading.current_thread()]  # objects: idents recur
        self._saved: list[tuple[Any, str, Any]] = []

    def stop(self, what: str) -> None:
        current = threading.current_thread()
        if any(current is thread for thread in self._before):
            return
        if _stdlib_probe():
            return
        what += _caller()
        self.seen.append(what)
        path = os.environ.get("RAYLIFT_TIER_VIOLATIONS")
        if path:
            with open(path, "a") as handle:
                handle.write(json.dumps({"test": self.nodeid, "call": what}) + "\n")
        raise TierViolation(self.message(what))

    def message(self, what: str) -> str:
        return (f"unit test {self.nodeid} {what}. The unit tier starts no process and opens no network socket "
                f"(tests/tier_guard.py): mark the test component (@pytest.mark.component, or list its module in "
                f"COMPONENT in tests/tier_guard.py), or keep it unit without the process/socket.")

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        self._saved.append((owner, name, vars(owner).get(name)))  # None: inherited, so deleted again
        setattr(owner, name, make(original))

    def _process(self, label: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def guarded(*args: Any, **kwargs: Any) -> Any:
                self.stop(f"started a process ({label})")
                return original(*args, **kwargs)
            return guarded
        return make

    def _socket(self, op: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def guarded(sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
                if sock.family != socket.AF_UNIX:
                    address = args[-1] if op == "sendto" and args else (args[0] if args else None)
                    self.stop(f"called socket.{op} on {_where(sock, address)}")
                return original(sock, *args, **kwargs)
            return guarded
        return make

    def __enter__(self) -> Guard:
        import multiprocessing.process

        def popen(original: Any) -> Any:
            def _execute_child(popen_self: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
                shown = args if isinstance(args, (str, bytes)) else list(args)[:4]
                self.stop(f"started a process (subprocess.Popen {shown!r})")
                return original(popen_self, args, *rest, **kwargs)
            return _execute_child

        self._patch(subprocess.Popen, "_execute_child", popen)
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            self._patch(os, name, self._process(f"os.{name}"))
        self._patch(multiprocessing.process.BaseProcess, "start", self._process("multiprocessing Process.start"))
        try:
            import _posixsubprocess  # multiprocessing's spawn and forkserver start methods

            self._patch(_posixsubprocess, "fork_exec", self._process("_posixsubprocess.fork_exec"))
        except ImportError:  # not POSIX
            pass
        for op in ("connect", "connect_ex", "bind", "sendto"):
            self._patch(socket.socket, op, self._socket(op))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in reversed(self._saved):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._saved.clear()


@contextmanager
def guarded(item: pytest.Item) -> Iterator[None]:
    """Run a phase of a unit item under the guard; fail it if the guard stopped a call its code swallowed."""
    if item.stash.get(TIER_KEY, None) != "unit":
        yield
        return
    with Guard(item.nodeid) as guard:
        yield
    if guard.seen:
        raise TierViolation(guard.message(guard.seen[0]) + (f" ({len(guard.seen)} calls stopped)"
                                                            if len(guard.seen) > 1 else ""))


class TierPlugin:
    """Registered by tests/conftest.py."""

    @pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        assign(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        with guarded(item):  # fixtures of any scope that this item sets up count as its own
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        with guarded(item):
            return (yield)
