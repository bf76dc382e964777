"""The local target's engine-args check (vLLM in the runtime env, ~20 s a call) runs once per hash of
what decides it: the args, the model's config files, the installed vLLM and the check's code. The verdict is
the machine's, not a home's: another RAYLIFT_HOME on the same machine does not ask vLLM again."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from raylift.errors import RayliftValueError
from tests.harness.local_stack import tiny_model_path


def test_an_accepted_check_is_kept_and_anything_that_changes_it_runs_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raylift.targets import get_target

    monkeypatch.setenv("RAYLIFT_CHECK_CACHE", str(tmp_path / "checks"))
    model = tmp_path / "model"
    shutil.copytree(tiny_model_path(), model)
    timings = {}
    for label, home in (("first", "home"), ("again", "home"), ("another home", "home2")):
        monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / home))
        started = time.monotonic()
        get_target("local").validate_engine_args(str(model), {"max_model_len": 512})
        timings[label] = time.monotonic() - started
    assert timings["again"] < 1.0 < timings["first"], timings
    assert timings["another home"] < 1.0, timings
    assert [p.suffix for p in (tmp_path / "checks/engine-args").iterdir()] == [".json"]
    target = get_target("local")
    # a changed model config is checked again, and vLLM still refuses what it refuses
    config = model / "config.json"
    config.write_text(config.read_text().replace('"max_position_embeddings": 2048', '"max_position_embeddings": 256'))
    with pytest.raises(RayliftValueError, match="max_model_len"):
        target.validate_engine_args(str(model), {"max_model_len": 512})
    with pytest.raises(RayliftValueError, match="field 'max_model_lenn'"):
        target.validate_engine_args(str(model), {"max_model_lenn": 512})
