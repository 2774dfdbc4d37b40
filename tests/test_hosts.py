"""Several hosts, for real, on one machine (issue 38, point 1): three network namespaces joined
by a bridge, each a "host" with its own address and host name, and ``mpirun --hostfile`` over
TCP across them: the learner on one host, an environment team on another and a team that spans
two hosts, a run directory on a path all of them see. It trains, checkpoints and finishes, and
machine.json holds every rank's host.

How: Open MPI starts its daemon on each host of the hostfile through its ssh agent
(``plm_ssh_agent``); here the agent is a script that runs the daemon inside the host's
namespace (``ip netns exec``) under a host name of its own (``unshare --uts``), so every byte
between ranks goes over TCP between the namespaces' addresses (the btl is tcp and self only:
no shared memory across "hosts"). The namespaces, bridge and addresses are made and removed by
the test (names and subnet from its pid), and it needs root and iproute2: it is skipped where
it cannot create a namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mpi_launch import mpi_env, mpirun_exe
from test_lost_ranks import stop_of_lost_ranks

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.report.build import write_run_report

pytestmark = pytest.mark.mpi_skip


@dataclass(frozen=True)
class Hosts:
    """The namespaces ``names`` with addresses ``addresses``, the agent that runs a command
    on one of them, and the mpirun flags that use them."""

    names: tuple[str, ...]
    addresses: tuple[str, ...]
    subnet: str
    agent: Path

    def mpirun(self, hostfile: Path) -> list[str]:
        return [mpirun_exe(), "--hostfile", str(hostfile), "--map-by", "slot",
                "--prtemca", "plm_ssh_agent", str(self.agent),
                "--prtemca", "prte_if_include", self.subnet,
                "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", self.subnet]


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def _remove(prefix: str, names: tuple[str, ...]) -> None:
    """Kill whatever still runs in the namespaces, then remove them and the bridge."""
    for ns in names:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                              check=False).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
    subprocess.run(["ip", "link", "delete", f"{prefix}br"], capture_output=True, check=False)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    """Three hosts a, b, c at 10.X.Y.2-4 behind a bridge at .1 (X, Y from the pid)."""
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("unshare")):
        pytest.skip("needs root, iproute2 (ip) and util-linux (unshare)")
    pid = os.getpid()
    prefix = f"hr{pid % 100000}"
    names = tuple(f"{prefix}{h}" for h in "abc")
    base = f"10.{200 + pid % 50}.{pid // 50 % 250}"
    addresses = tuple(f"{base}.{i}" for i in (2, 3, 4))
    try:
        _sh("ip", "netns", "add", names[0])
    except subprocess.CalledProcessError as err:
        pytest.skip(f"cannot create a network namespace here: {err.stderr.decode().strip()}")
    try:
        for ns in names[1:]:
            _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", f"{prefix}br", "type", "bridge")
        _sh("ip", "addr", "add", f"{base}.1/24", "dev", f"{prefix}br")
        _sh("ip", "link", "set", f"{prefix}br", "up")
        for ns, address, h in zip(names, addresses, "abc", strict=True):
            _sh("ip", "link", "add", f"{prefix}v{h}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _sh("ip", "link", "set", f"{prefix}v{h}", "master", f"{prefix}br", "up")
            _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        agent = tmp_path / "agent.sh"
        cases = "\n".join(f"  {a}) ns={ns}; name=host-{h} ;;"
                          for a, ns, h in zip(addresses, names, "abc", strict=True))
        agent.write_text(
            "#!/bin/bash\n# Open MPI's ssh agent: [options] HOST COMMAND -> COMMAND on HOST\n"
            'while [[ "$1" == -* ]]; do shift; done\nhost=$1; shift\ncase $host in\n'
            f'{cases}\n  *) echo "agent: unknown host $host" >&2; exit 255 ;;\nesac\n'
            'exec ip netns exec "$ns" unshare --uts sh -c "hostname $name; $*"\n')
        agent.chmod(0o755)
        yield Hosts(names, addresses, f"{base}.0/24", agent)
    finally:
        _remove(prefix, names)


def test_a_run_over_three_hosts_trains_checkpoints_and_finishes(hosts, tmp_path):
    """mpirun -n 5 over hosts a (1 slot), b (3) and c (1): the learner on a, team 0 (ranks 1,
    2) on b, team 1 (ranks 3, 4) on b and c, teams of 2 ranks (Diffusion1D split over its
    ranks, a halo exchange across the hosts in team 1)."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"{a} slots={n}\n"
                                for a, n in zip(hosts.addresses, (1, 3, 1), strict=True)))
    run_dir = tmp_path / "run"
    command = [*hosts.mpirun(hostfile), "-n", "5", sys.executable, "-m", "hpc_refer.run",
               "--env", "Diffusion1D", "--ranks-per-env", "2", "--steps", "300",
               "--checkpoint-every", "150", "--replay.learn-start", "100", "--replay.size",
               "400", f"--{VRacer.name}.batch", "16", f"--{VRacer.name}.hidden", "8",
               "--chunk-len", "25", "--compile", "off", "--run-dir", str(run_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=mpi_env(),
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (run_dir / "state.txt").read_text() == "finished\n"
    ranks = json.loads((run_dir / "machine.json").read_text())[-1]["ranks"]
    assert [(r["rank"], r["role"], r.get("team"), r["host"]) for r in ranks] == [
        (0, "learner", None, "host-a"), (1, "actor", 0, "host-b"), (2, "solver", 0, "host-b"),
        (3, "actor", 1, "host-b"), (4, "solver", 1, "host-c")]
    steps = [int(p.name.removeprefix("step-"))
             for p in sorted((run_dir / "checkpoints").glob("step-*"))]
    assert len(steps) >= 2 and 150 <= steps[-2] < 300 and steps[-1] == 300, steps
    episodes = (run_dir / "episodes.csv").read_text().splitlines()[1:]
    assert {line.split(",")[1] for line in episodes} == {"1", "3"}, "both teams' episodes"
    record = json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])
    assert record["env_step"] == 300 and record["grad_step"] > 0
    report = write_run_report(run_dir).read_text()
    assert "ranks on 3 hosts: host-a, host-b, host-c" in report


def _kill_ranks_of(ns: str, count: int) -> None:
    """Kill the ranks of namespace ``ns`` (the processes of hpc_refer there: ``count``)."""
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                          check=True).stdout.split()
    ranks = [p for p in pids
             if b"hpc_refer.run" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(ranks) == count, f"{ns} runs {len(ranks)} ranks, not {count}"
    for pid in ranks:
        subprocess.run(["kill", "-9", pid], capture_output=True, check=False)


def test_a_lost_host_stops_the_run_with_a_record_that_names_its_ranks(hosts, tmp_path):
    """The layout of the test above under ``mpirun --with-ft ulfm``; host c (team 1's
    solver rank 4, and Open MPI's daemon there) is killed mid-run. The learner hears of the
    lost rank from MPI, checkpoints without team 1, and the job ends (status 1) with a stop
    record naming rank 4 and host-c. ``--restart`` on hosts a and b (one team) resumes from
    that checkpoint and finishes; no episode written before it is lost, and the report's
    starts-and-stops table shows the gap."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"{a} slots={n}\n"
                                for a, n in zip(hosts.addresses, (1, 3, 1), strict=True)))
    run_dir = tmp_path / "run"
    train = ["--env", "Diffusion1D", "--ranks-per-env", "2", "--steps", "100000",
             "--checkpoint-every", "100000", "--log-every", "50", "--replay.learn-start", "100",
             "--replay.size", "400", f"--{VRacer.name}.batch", "16",
             f"--{VRacer.name}.hidden", "8", "--chunk-len", "25", "--compile", "off",
             "--run-dir", str(run_dir)]
    proc = subprocess.Popen([*hosts.mpirun(hostfile), "--with-ft", "ulfm", "-n", "5",
                             sys.executable, "-m", "hpc_refer.run", *train],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=mpi_env())
    stopped = stop_of_lost_ranks(proc, run_dir, 300,
                                 lambda: _kill_ranks_of(hosts.names[2], 1), "4 (host-c)")
    last = run_dir / "checkpoints" / f"step-{stopped:012d}"
    assert sorted(p.name for p in last.iterdir()) == [
        "actor-0.h5", "learner-0.h5", "manifest.json"], "team 1 is lost: no part of it"
    before = (run_dir / "episodes.csv").read_text().splitlines()
    assert len(before) > 1

    (hosts_ab := tmp_path / "hosts-ab").write_text(
        "".join(f"{a} slots={n}\n" for a, n in zip(hosts.addresses[:2], (1, 2), strict=True)))
    more = subprocess.run([*hosts.mpirun(hosts_ab), "-n", "3", sys.executable, "-m",
                           "hpc_refer.run", "--restart", str(run_dir), "--steps",
                           str(stopped + 200)],
                          capture_output=True, text=True, timeout=600, env=mpi_env(),
                          check=False)
    assert more.returncode == 0, more.stdout[-3000:] + more.stderr[-3000:]
    assert (run_dir / "state.txt").read_text() == "finished\n"
    after = (run_dir / "episodes.csv").read_text().splitlines()
    assert after[:len(before)] == before, "every episode before the checkpoint is kept"
    assert len(after) > len(before)
    ranks = json.loads((run_dir / "machine.json").read_text())[-1]["ranks"]
    assert {r["host"] for r in ranks} == {"host-a", "host-b"}
    report = write_run_report(run_dir).read_text()
    assert "stopped: MPI ranks lost: 4 (host-c)" in report
    assert "0 steps taken again" in report
