"""How long the suite takes, per lane and per tier, from the JUnit XML each lane of tools/test.sh writes.

tools/test.sh runs its lanes at once, each writing ``var/test-tmp/<lane>.xml`` (heavy, multi, light; ``make
test-fast`` writes ``unit.xml``). Per lane: its wall time (pytest's session: collection and every test), when it
started and ended, and the tests by outcome; per tier (the ``tier`` property tests/tier_guard.py gives each test:
unit, component, system): the count and the summed test time (setup + call + teardown), over all lanes and per lane.
The suite's span is the first lane's start to the last lane's end. Given a previous layout's XML files
(``--previous``: a folder, or lane=path pairs), each number also gets its ratio to that layout's (new / old).
A test without the property (XML from before the tiers) is counted under "untiered".

Reads only: run the suite first (``make test``), then

    .cache/venvs/control/bin/python bench/suite_timing.py [--lanes var/test-tmp] [--previous old/test-tmp]

Writes bench/results/suite_timing.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LANES = ("heavy", "multi", "light", "unit")  # tools/test.sh's three lanes; unit.xml: make test-fast
OUTCOMES = ("passed", "failed", "error", "skipped")


def lane_files(spec: list[str]) -> dict[str, Path]:
    """``[folder]`` -> its <lane>.xml files that exist; ``[lane=path, ...]`` -> those."""
    if len(spec) == 1 and "=" not in spec[0]:
        folder = Path(spec[0])
        return {lane: folder / f"{lane}.xml" for lane in LANES if (folder / f"{lane}.xml").is_file()}
    files = {}
    for item in spec:
        lane, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"expected lane=path or one folder, got {item!r}")
        files[lane] = Path(path)
    return files


def outcome(case: ET.Element) -> str:
    for child in case:
        if child.tag in ("failure", "error", "skipped"):
            return child.tag.replace("failure", "failed")
    return "passed"


def tier(case: ET.Element) -> str:
    for prop in case.iter("property"):
        if prop.get("name") == "tier":
            return prop.get("value") or "untiered"
    return "untiered"


def read_lane(path: Path) -> dict[str, Any]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    started = min(datetime.fromisoformat(s.get("timestamp", "")) for s in suites)
    wall = sum(float(s.get("time", 0)) for s in suites)
    outcomes: Counter[str] = Counter()
    tiers: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "test_time_s": 0.0})
    for case in root.iter("testcase"):
        outcomes[outcome(case)] += 1
        entry = tiers[tier(case)]
        entry["tests"] += 1
        entry["test_time_s"] += float(case.get("time", 0))
    return {
        "file": str(path),
        "started": started.isoformat(timespec="seconds"),
        "ended": (started + timedelta(seconds=wall)).isoformat(timespec="seconds"),
        "wall_s": round(wall, 1),
        "tests": sum(outcomes.values()),
        "outcomes": {name: outcomes[name] for name in OUTCOMES if outcomes[name]},
        "tiers": {name: {"tests": int(v["tests"]), "test_time_s": round(v["test_time_s"], 1)}
                  for name, v in sorted(tiers.items())},
    }


def summarise(files: dict[str, Path]) -> dict[str, Any]:
    lanes = {lane: read_lane(path) for lane, path in files.items()}
    tiers: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "test_time_s": 0.0})
    for lane in lanes.values():
        for name, v in lane["tiers"].items():
            tiers[name]["tests"] += v["tests"]
            tiers[name]["test_time_s"] += v["test_time_s"]
    span = None
    if lanes:
        start = min(datetime.fromisoformat(lane["started"]) for lane in lanes.values())
        end = max(datetime.fromisoformat(lane["ended"]) for lane in lanes.values())
        span = round((end - start).total_seconds(), 1)
    return {
        "suite_span_s": span,  # first lane's start to the last lane's end (the lanes run at once)
        "lanes": lanes,
        "tiers": {name: {"tests": int(v["tests"]), "test_time_s": round(v["test_time_s"], 1)}
                  for name, v in sorted(tiers.items())},
    }


def ratio(new: float | None, old: float | None) -> float | None:
    return round(new / old, 3) if new is not None and old else None


def compare(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """new / old for the suite's span, each lane both layouts have, and each tier's summed test time."""
    return {
        "suite_span": ratio(now["suite_span_s"], before["suite_span_s"]),
        "lane_wall": {lane: ratio(now["lanes"][lane]["wall_s"], before["lanes"][lane]["wall_s"])
                      for lane in now["lanes"] if lane in before["lanes"]},
        "tier_test_time": {name: ratio(now["tiers"][name]["test_time_s"], before["tiers"][name]["test_time_s"])
                           for name in now["tiers"] if name in before["tiers"]},
        "all_test_time": ratio(sum(t["test_time_s"] for t in now["tiers"].values()),
                               sum(t["test_time_s"] for t in before["tiers"].values())),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", nargs="+", default=[str(ROOT / "var/test-tmp")],
                        help="a folder of <lane>.xml files, or lane=path pairs (default: var/test-tmp)")
    parser.add_argument("--previous", nargs="+", help="a previous layout's XML: a folder, or lane=path pairs")
    parser.add_argument("--out", default=str(ROOT / "bench/results/suite_timing.json"))
    args = parser.parse_args(argv)
    files = lane_files(args.lanes)
    if not files:
        raise SystemExit(f"no lane XML in {args.lanes} (run make test, or name lane=path)")
    result: dict[str, Any] = {"layout": summarise(files)}
    if args.previous:
        previous_files = lane_files(args.previous)
        if not previous_files:
            raise SystemExit(f"no lane XML in {args.previous}")
        result["previous_layout"] = summarise(previous_files)
        result["ratio_to_previous"] = compare(result["layout"], result["previous_layout"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
