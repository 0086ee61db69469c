"""A study on a two-node Ray cluster survives losing a node: its units are retried elsewhere.

The test starts a head and a second node on this machine (``ray start --block``, 1 CPU each,
token authentication with a token of its own, no dashboard), runs ``oodeval study run
--executor ray --ray-address ... --ray-max-retries 2`` against the head, and kills every process
of the second node (SIGKILL, as a lost machine) while it runs a unit. Ray then re-runs that unit
on the head; the store must hold every unit once, done, with the local executor's numbers.

Processes are found by session: each ``ray start`` runs in a session of its own, which its
raylet, agents and workers inherit, so the test ends exactly the processes it started (never
``ray stop``, which would end every Ray process of this machine).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.study import RunSummary, load_config, load_study, run_study
from oodeval.study.executors import RayExecutor
from tests.helpers.studies import assert_same_store
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
ALGORITHMS = ["ERM", "IRM", "GroupDRO", "VREx"]
SEEDS = [0, 1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _session(sid: int) -> dict[int, str]:
    """Live processes of session `sid`: pid -> command line (zombies left out)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:  # ended meanwhile
            continue
        # fields after the parenthesised command name: state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found[int(entry.name)] = cmdline
    return found


def _kill_session(sid: int, timeout: float = 30) -> None:
    """SIGKILL every process of session `sid`; return once none is left (fail after `timeout`)."""

    def none_left() -> bool:
        pids = _session(sid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not pids

    wait_until(none_left, f"end of session {sid}'s processes", seconds=timeout, every=0.1)


class RayNode:
    """One ``ray start --block`` process (a head or a worker node) in a session of its own."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        self.log = log
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(
                [shutil.which("ray") or str(Path(sys.executable).with_name("ray")), "start"]
                + ["--block", "--disable-usage-stats", *args],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def processes(self) -> dict[int, str]:
        return _session(self.proc.pid)

    def kill(self) -> None:
        """SIGKILL every process of the node at once, as when its machine is lost."""
        _kill_session(self.proc.pid)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (``ray start --block`` then stops its processes), SIGKILL what is left."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        _kill_session(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.wait(timeout=30)


def _nodes(address: str, env: dict[str, str]) -> dict[str, bool]:
    """The cluster's live nodes: node id -> whether it is the head ({} when unreachable)."""
    probe = (
        "import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print(json.dumps({n['NodeID']: 'node:__internal_head__' in n['Resources'] "
        "for n in ray.nodes() if n['Alive']}))"
    )
    try:
        socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), 2).close()
        result = subprocess.run(
            [sys.executable, "-c", probe, address],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):  # the head's GCS is not up (yet)
        return {}
    if result.returncode != 0 or not result.stdout.strip():
        return {}
    return json.loads(result.stdout.strip().splitlines()[-1])


def _wait(condition, timeout: float, what: str, logs: list[Path], procs=()) -> None:
    """Poll `condition`; fail with the logs' ends on timeout or when one of `procs` ended."""

    def tails() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists())

    def done() -> bool:
        if condition():
            return True
        ended = [p.args[:3] for p in procs if p.poll() is not None]
        if ended:
            pytest.fail(f"{ended} ended while waiting for {what}\n{tails()}")
        return False

    wait_until(done, lambda: f"{what}\n{tails()}", seconds=timeout, every=0.2)


@pytest.mark.ray_cluster
@pytest.mark.slow
def test_units_of_a_killed_ray_node_are_retried_on_the_other_node(tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed")
    # Unix socket paths (session dirs) must stay short: not under pytest's deep tmp_path
    temp = Path(tempfile.mkdtemp(prefix="oodray-"))
    token = temp / "token"
    token.write_text(secrets.token_hex(32), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),  # workers import tests.cluster_backend
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        "RAY_USAGE_STATS_ENABLED": "0",
        # the head's GCS declares a silent node dead after ~3 s (default: ~30 s)
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    }
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1"]
    common += ["--object-store-memory", str(100 * 1024**2)]
    gate, trace = tmp_path / "gate", tmp_path / "trace"
    trace.mkdir()
    config = tmp_path / "study.toml"
    config.write_text(
        f"""
name = "ray-two-nodes"
backend = "tests.cluster_backend"
algorithms = {ALGORITHMS!r}
seeds = {SEEDS!r}
steps = 10
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }}]
[unit_options]
gate = "{gate}"
gated_algorithms = {ALGORITHMS!r}
trace = "{trace}"
""".replace("'", '"'),
        encoding="utf-8",
    )
    out = tmp_path / "study"
    logs = [tmp_path / "head.log", tmp_path / "node2.log", tmp_path / "driver.log"]
    nodes: list[RayNode] = []
    driver = None
    try:
        nodes.append(
            RayNode(
                ["--head", "--port", str(port), "--include-dashboard=false"]
                + ["--dashboard-port", str(_free_port())]
                + ["--dashboard-agent-listen-port", str(_free_port())]
                + ["--temp-dir", str(temp / "h"), *common],
                env,
                logs[0],
            )
        )
        _wait(lambda: len(_nodes(address, env)) == 1, 120, "the head", logs, [nodes[0].proc])
        nodes.append(
            RayNode(
                ["--address", address, "--temp-dir", str(temp / "n")]
                + ["--dashboard-agent-listen-port", str(_free_port()), *common],
                env,
                logs[1],
            )
        )
        _wait(
            lambda: len(_nodes(address, env)) == 2,
            120,
            "the second node",
            logs,
            [node.proc for node in nodes],
        )
        head, second = nodes
        ids = _nodes(address, env)
        (head_id,) = [node for node, is_head in ids.items() if is_head]
        (second_id,) = [node for node, is_head in ids.items() if not is_head]

        with logs[2].open("wb") as sink:
            driver = subprocess.Popen(
                [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(config)]
                + ["--out", str(out), "--executor", "ray", "--ray-address", address]
                + ["--ray-max-retries", "2", "--no-progress", "--no-report"],
                cwd=REPO,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

        def unit_on(node: RayNode) -> list[str]:
            """The traces of units started by a worker of `node` (units wait at the gate)."""
            pids = set(node.processes())
            return [p.name for p in trace.iterdir() if int(p.name.rsplit(".", 1)[1]) in pids]

        # every unit waits at the gate: each node runs one (1 CPU each), the others queue
        _wait(
            lambda: unit_on(second) and unit_on(head),
            120,
            "a unit on each node",
            logs,
            [driver, *(node.proc for node in nodes)],
        )
        (lost,) = unit_on(second)
        assert driver.poll() is None
        second.kill()
        assert not second.processes()
        gate.touch()
        driver.wait(timeout=300)
        assert driver.returncode == 0, logs[2].read_text()
        output = logs[2].read_text()
        assert "8 units: 0 already stored, 8 run (8 done, 0 failed)" in output, output
        assert "node it was running on is dead" in output  # Ray's own account of the retry

        # the lost unit ran on the second node, then started again on the head
        traces = {p.name: p.read_text() for p in trace.iterdir()}
        assert traces[lost] == second_id
        algorithm, seed, _ = lost.split(".")
        again = [name for name in traces if name.startswith(f"{algorithm}.{seed}.")]
        assert len(again) == 2 and [traces[n] for n in again if n != lost] == [head_id], traces
        assert set(traces.values()) == {head_id, second_id}

        # every unit stored once, done, with the numbers of the local executor
        units = load_study(out).units
        assert len(units) == units["unit_key"].nunique() == len(ALGORITHMS) * len(SEEDS)
        assert (units["status"] == "done").all()
        assert units["attempts"].tolist() == [1] * len(units)
        reference = tmp_path / "reference"
        run_study(load_config(config), reference, workers=2, progress=False)
        assert_same_store(out, reference)
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
        for node in reversed(nodes):
            node.stop()
        leftovers = {pid: cmd for node in nodes for pid, cmd in node.processes().items()}
        shutil.rmtree(temp, ignore_errors=True)
    assert not leftovers, leftovers


def test_ray_max_retries_option_reaches_the_ray_executor_only(tmp_path, monkeypatch):
    config = tmp_path / "study.toml"
    config.write_text(
        'name = "retries"\nbackend = "oodeval.study.synthetic"\nalgorithms = ["ERM"]\n'
        'seeds = [0]\nsteps = 1\nscenarios = [{ family = "synthetic" }]\n',
        encoding="utf-8",
    )
    chosen = []

    def fake_run_study(config, out, *, executor, **options):
        chosen.append(executor)
        return RunSummary(Path(out), 1, 1, 0, 0, 0, 0.0)

    monkeypatch.setattr("oodeval.study.run_study", fake_run_study)
    args = ["study", "run", str(config), "--out", str(tmp_path / "s"), "--no-report"]
    result = CliRunner().invoke(app, [*args, "--executor", "ray", "--ray-max-retries", "3"])
    assert result.exit_code == 0, result.output
    assert chosen == [RayExecutor(max_retries=3)]
    result = CliRunner().invoke(app, [*args, "--ray-max-retries", "3"])
    assert result.exit_code == 2
    assert "--ray-max-retries applies to --executor ray only (the executor is local)" in (
        result.output
    )
    result = CliRunner().invoke(app, [*args, "--executor", "ray", "--ray-max-retries", "-1"])
    assert result.exit_code == 2
