"""DFG cylinder benchmark (Schaefer & Turek 1996) of Flow2D (issue 13):
``[mpirun -n K] python bench/turek.py [--steady 20,40,80,160] [--periodic 20,40,80]
[--mach 20,40] [--quick] [--time-scale F] [--out DIR] [--smoke]``.

Every flow run is spread over the K ranks of the job (one team); the single-core speed is
measured on rank 0 alone. For each resolution N (nodes per diameter):

- 2D-1 (Re = 20, steady), inflow peak u_lat = 0.2 in lattice units (the incompressible
  equilibrium makes the steady state independent of the Mach number to its cubic lattice
  defect: c_D at N = 20 and 40 moves by 0.1 %, c_L by < 1 % from u_lat = 0.1, measured),
  started from the inflow profile and run to t = 24 s; c_D and c_L are the means over t in
  [12, 24] s (the start launches pressure waves that the long channel damps slowly; the mean
  over many of their periods removes them), with the standard deviation over that window;
- 2D-2 (Re = 100, periodic), u_lat = 0.025, by grid sequencing: the coarsest N starts from
  rest with a transverse kick behind the cylinder at t = 0 (``perturb`` = 1, shedding
  established by t ~ 5 s) and runs to t = 20 s; every finer N starts from the state of the
  one before (:meth:`~hpc_refer.envs.flow2d.Flow2D.continue_from`) and runs T_REFINED = 8 s,
  which its own grid needs to settle (N = 40 from N = 20: c_D,max within 2e-4 of its final
  value after 5 s, and 3.2547 against 3.2548 from a 20 s start; measured). c_D,max and
  c_L,max over the last 2 s (six periods), St = D f / U_mean with f from the mean period
  between upward zero crossings of c_L (interpolated linearly) in that window; the drifts of
  c_D,max and c_L,max from the 2 s before say how periodic the flow is by then.
  The choice of u_lat: the unsteady flow carries the lattice's O(Ma^2) compressibility error
  (Ma = sqrt(3) u_lat at the inflow peak), which the incompressible equilibrium removes from
  steady flows only. ``--mach`` measures it (from the kicked start, 20 s, several u_lat): at
  N = 20 and 40 c_L,max falls by about 0.02 and c_D,max by about 0.007 from u_lat = 0.0656 to
  0.025, in proportion to u_lat^2, and changes by less than 0.003 below 0.025. The runs'
  cost grows as 1 / u_lat; 0.025 keeps the finest 2D-2 run under 15 minutes on 2 cores.

Speed: lattice updates per second (MLUPS) at N = 80, Re = 100 (577,280 nodes, 83 MB of
populations: beyond the 32 MB L3) against the memory-bandwidth bound of the fused two-lattice
kernel, 2 x 9 x 8 = 144 bytes per node update (each population read once and written once),
with the bandwidth measured in the same run as the best of a numpy copy (2 x 256 MiB moved)
and a numpy sum (256 MiB read) of large arrays: on one core the whole step
(Flow2D.advance) and the bulk kernel alone; on K ranks the whole step, its parallel
efficiency MLUPS_K / (K MLUPS_1), and its fraction of the K-rank bound, the summed bandwidth
of K concurrent copies / 144 B.

Writes bench/results/turek.json and bench/results/turek.md (the BENCHMARKS.md section;
``--out``: another directory). ``--time-scale F`` multiplies every simulated time (the runs'
lengths and their windows; 1 by default); ``--smoke`` (bench/common.py) is ``--quick
--time-scale 0.02`` on one rank: N = 20, runs of 0.4 to 0.5 s (too short for a period, so
St is nan), the speed at N = 80 over 20 steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from common import median, parse, smoke, write

from hpc_refer.envs import lbm_kernels as lk
from hpc_refer.envs.flow2d import Flow2D
from hpc_refer.envs.interface import Team
from hpc_refer.parallel.world import world_team

BANDS = {"2D-1": {"cD": (5.57, 5.59), "cL": (0.0104, 0.0110)},
         "2D-2": {"cD_max": (3.22, 3.24), "cL_max": (0.99, 1.01), "St": (0.295, 0.305)}}
U_STEADY, T_STEADY = 0.2, 24.0
U_PERIODIC, T_PERIODIC, T_REFINED, WINDOW = 0.025, 20.0, 8.0, 2.0
U_MACH = (0.0656, 0.045, 0.035, 0.025)
BYTES_PER_UPDATE = 2 * 9 * 8


def steady(team: Team, n: int, scale: float = 1.0) -> dict[str, float]:
    """2D-1 at resolution n: means of c_D, c_L over the second half of the run (T_STEADY,
    times ``scale``)."""
    t0 = time.perf_counter()
    flow = Flow2D(team, resolution=n, reynolds=20.0, u_max_lattice=U_STEADY)
    c = flow.advance(round(scale * T_STEADY / flow.dt))
    late = c[len(c) // 2:]
    return {"N": n, "u_lat": U_STEADY, "cD": float(late[:, 0].mean()),
            "cL": float(late[:, 1].mean()), "cD_std": float(late[:, 0].std()),
            "cL_std": float(late[:, 1].std()), "steps": len(c), "nodes": flow.nx * flow.ny,
            "wall_s": round(time.perf_counter() - t0, 1)}


def periodic(team: Team, n: int, coarse: Flow2D | None = None, u_lat: float = U_PERIODIC,
             scale: float = 1.0) -> tuple[dict[str, float | str], Flow2D]:
    """2D-2 at resolution n, from the kicked start (T_PERIODIC) or from the state of ``coarse``
    (T_REFINED): c_D,max, c_L,max and St over the last WINDOW seconds, and the flow (every
    time times ``scale``)."""
    t0 = time.perf_counter()
    flow = Flow2D(team, resolution=n, reynolds=100.0, u_max_lattice=u_lat,
                  perturb=1.0 if coarse is None else 0.0)
    if coarse is not None:
        flow.continue_from(coarse)
    duration = scale * (T_PERIODIC if coarse is None else T_REFINED)
    window = scale * WINDOW
    c = flow.advance(round(duration / flow.dt))
    t = flow.dt * np.arange(1, len(c) + 1)
    last = t > t[-1] - window
    before = (t > t[-1] - 2 * window) & ~last
    cl = c[:, 1]
    up = np.nonzero((cl[:-1] < 0) & (cl[1:] >= 0) & last[1:])[0]
    crossings = t[up] - cl[up] * flow.dt / (cl[up + 1] - cl[up])
    period = float(np.diff(crossings).mean())
    u_mean = 1.0  # 2D-2: U_mean = 2/3 x 1.5
    return {"N": n, "u_lat": u_lat,
            "start": "kick" if coarse is None else f"N = {coarse.resolution}",
            "time": duration, "cD_max": float(c[last, 0].max()),
            "cL_max": float(cl[last].max()), "St": 0.1 / (period * u_mean),
            "cD_min": float(c[last, 0].min()), "cL_min": float(cl[last].min()),
            "cD_max_drift": float(c[last, 0].max() - c[before, 0].max()),
            "cL_max_drift": float(cl[last].max() - cl[before].max()),
            "periods": len(crossings) - 1, "steps": len(c), "nodes": flow.nx * flow.ny,
            "wall_s": round(time.perf_counter() - t0, 1)}, flow


def mlups(team: Team | None, steps: int, repeats: int, bulk_only: bool = False) -> float:
    """Median node updates per second (millions) at N = 80, Re = 100: of Flow2D.advance (the
    whole step) or, with ``bulk_only``, of the bulk kernel alone (no boundary pass, one
    rank)."""
    flow = Flow2D(team, resolution=80, reynolds=100.0, u_max_lattice=U_PERIODIC, perturb=1.0)
    flow.advance(2)  # compile
    fo, fn = flow.f, flow.f_new
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        if bulk_only:
            for _ in range(steps):
                lk.bulk_step(fo, fn, flow.omega_p, flow.omega_m)
                fo, fn = fn, fo
        else:
            flow.advance(steps)
        out.append(flow.nx * flow.ny * steps / (time.perf_counter() - t0) / 1e6)
    return median(out)


def bandwidth(repeats: int = 5) -> dict[str, float]:
    """Memory bandwidth (GB/s) of a numpy copy (bytes read + written) and a numpy sum."""
    a = np.ones(2**25)
    b = np.zeros_like(a)
    copy, read = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        copy.append(2 * a.nbytes / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        a.sum()
        read.append(a.nbytes / (time.perf_counter() - t0) / 1e9)
    return {"copy_GBps": max(copy), "read_GBps": max(read)}


def speed(team: Team, steps: int) -> dict[str, float]:
    """One core: MLUPS of the whole step and of the bulk kernel against the bandwidth bound.
    K ranks: MLUPS, parallel efficiency, the fraction of the K-rank bound (the summed
    bandwidth of K concurrent copies / 144 B: the ranks share one memory system), and the
    summed MLUPS of K independent one-rank runs at the same time, the most that K ranks of
    this machine can give whatever the decomposition costs."""
    out: dict[str, float] = {}
    if team.rank == 0:
        bw = bandwidth()
        one = mlups(None, steps, 3)
        bulk = mlups(None, steps, 3, bulk_only=True)
        best = max(bw.values())
        bound = best * 1e9 / BYTES_PER_UPDATE / 1e6
        out = {"mlups_1": one, **bw, "bytes_per_update": BYTES_PER_UPDATE,
               "bound_mlups": bound, "fraction_of_bound": one / bound,
               "bulk_mlups_1": bulk, "bulk_fraction_of_bound": bulk / bound}
    team.comm.Barrier()
    if team.size > 1:
        copy = float(team.sum_array(np.array([bandwidth()["copy_GBps"]]))[0])
        team.comm.Barrier()
        alone = float(team.sum_array(np.array([mlups(None, steps, 3)]))[0])
        k = mlups(team, steps, 3)
        bound_k = copy * 1e9 / BYTES_PER_UPDATE / 1e6
        if team.rank == 0:
            out.update({"ranks": team.size, f"mlups_{team.size}": k,
                        "parallel_efficiency": k / (team.size * out["mlups_1"]),
                        "concurrent_copy_GBps": copy, f"bound_mlups_{team.size}": bound_k,
                        f"fraction_of_bound_{team.size}": k / bound_k,
                        "mlups_independent": alone, "decomposition_efficiency": k / alone})
    return out


def markdown(payload: dict) -> str:
    """The BENCHMARKS.md section."""
    m, sp = payload["machine"], payload["speed"]
    scale = payload.get("time_scale", 1.0)
    window, half = scale * WINDOW, scale * T_STEADY / 2
    launch = f"mpirun -n {payload['ranks']} " if payload["ranks"] > 1 else ""
    lines = [f"## Flow2D: DFG cylinder benchmark (issue 13) — `{launch}{payload['command']}` → "
             "`bench/results/turek.json`", "",
             f"D2Q9 TRT lattice Boltzmann, Bouzidi cylinder; {payload['ranks']} rank(s); "
             f"{m['cpu']}, {m['cores']} cores, load {payload['load_start']} at the start, "
             f"{payload['load_end']} at the end; {payload['date']}.", "",
             "Method (hpc_refer/envs/flow2d.py): N nodes per diameter, nodes half a spacing "
             "from the straight walls; incompressible equilibrium (He & Luo), TRT collision "
             "with Lambda = 3/16, halfway bounce-back on the walls, Bouzidi interpolated "
             "bounce-back on the cylinder, Ladd velocity bounce-back at the inlet, "
             "anti-bounce-back at p = 0 at the outlet, forces by momentum exchange. Columns "
             "split over the ranks with one halo column exchanged per step.", "",
             f"2D-1 (Re = 20), u_lat = 0.2, means over t in [{half:g}, {2 * half:g}] s:", "",
             "| N (nodes/D) | nodes | c_D | c_L | wall s |", "|---|---|---|---|---|"]
    for r in payload["runs"]["2D-1"]:
        lines.append(f"| {r['N']} | {r['nodes']:,} | {r['cD']:.4f} | {r['cL']:.5f} | "
                     f"{r['wall_s']} |")
    lines += ["| reference band | | 5.57-5.59 | 0.0104-0.0110 | |", "",
              f"2D-2 (Re = 100), u_lat = {U_PERIODIC}, grid sequencing (each N started from "
              f"the one above it), over the last {window:g} s; the drifts are the changes of "
              f"c_D,max and c_L,max from the {window:g} s before. The finest result took "
              f"**{payload['2D-2']['wall_s']} s** on {payload['ranks']} rank(s), its coarser "
              "starts included:", "",
              "| N | nodes | start | run (s) | c_D,max | c_L,max | St | drifts c_D / c_L | "
              "wall s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in payload["runs"]["2D-2"]:
        lines.append(f"| {r['N']} | {r['nodes']:,} | {r['start']} | {r['time']:g} | "
                     f"{r['cD_max']:.4f} | {r['cL_max']:.4f} | {r['St']:.4f} | "
                     f"{r['cD_max_drift']:+.4f} / {r['cL_max_drift']:+.4f} | {r['wall_s']} |")
    lines += ["| reference band | | | | 3.22-3.24 | 0.99-1.01 | 0.295-0.305 | | |", ""]
    if payload["runs"]["mach"]:
        lines += [f"The lattice Mach number (`--mach`): 2D-2 from the kicked start, "
                  f"{scale * T_PERIODIC:g} s, at several u_lat (Ma = sqrt(3) u_lat at the inflow "
                  "peak):", "", "| N | u_lat | c_D,max | c_L,max | St | wall s |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['N']} | {r['u_lat']} | {r['cD_max']:.4f} | {r['cL_max']:.4f} | "
                  f"{r['St']:.4f} | {r['wall_s']} |" for r in payload["runs"]["mach"]]
        lines.append("")
    if sp:
        lines += ["Speed at N = 80 (577,280 nodes, 83 MB of populations):", "",
                  "| quantity | value | fraction of its bound |", "|---|---|---|",
                  f"| bandwidth, one core: numpy copy / numpy sum | {sp['copy_GBps']:.1f} / "
                  f"{sp['read_GBps']:.1f} GB/s | bound = best / 144 B: "
                  f"{sp['bound_mlups']:.0f} MLUPS |",
                  f"| one core, whole step (Flow2D.advance) | {sp['mlups_1']:.0f} MLUPS | "
                  f"**{sp['fraction_of_bound']:.0%}** |",
                  f"| one core, bulk kernel alone | {sp['bulk_mlups_1']:.0f} MLUPS | "
                  f"**{sp['bulk_fraction_of_bound']:.0%}** |"]
        if "ranks" in sp:
            k = sp["ranks"]
            lines += [f"| bandwidth, {k} concurrent copies (sum) | "
                      f"{sp['concurrent_copy_GBps']:.1f} GB/s | bound "
                      f"{sp[f'bound_mlups_{k}']:.0f} MLUPS |",
                      f"| {k} ranks, whole step | {sp[f'mlups_{k}']:.0f} MLUPS | "
                      f"**{sp[f'fraction_of_bound_{k}']:.0%}** |",
                      f"| parallel efficiency MLUPS_{k} / ({k} MLUPS_1) | "
                      f"**{sp['parallel_efficiency']:.0%}** | |",
                      f"| {k} independent one-rank runs at once (sum) | "
                      f"{sp['mlups_independent']:.0f} MLUPS | |",
                      f"| {k} ranks / {k} independent runs | "
                      f"**{sp['decomposition_efficiency']:.0%}** | |"]
        lines += ["", "The kernel is a fused two-lattice pull (every population read once from one "
                  "array and written once to the other, 144 B per node update in float64; the "
                  "write-allocate traffic of ordinary stores is not counted, as in the copy's "
                  "2 x 256 MiB). The whole step adds the boundary pass (inlet, outlet and "
                  "cylinder nodes, the forces, the solid nodes' reset). The one-core figures "
                  "are taken while the other ranks wait in a barrier. The ranks share one "
                  "memory system: the K-rank bound is what K concurrent copies move, not K "
                  "times one core's, and K independent one-rank runs at once measure what the "
                  "cores give together; the last row is then the cost of the decomposition "
                  "itself (halo exchange, waiting)."]
    lines += ["", "Notes. The unsteady 2D-2 carries the lattice's O(Ma^2) compressibility error: "
              "c_L,max and c_D,max fall with u_lat^2 down to about 0.025 (the table above), so "
              "the 2D-2 runs take u_lat = 0.025. 2D-1 is steady and, with the incompressible "
              "equilibrium, independent of u_lat (0.1 and 0.2 agree to 0.1 % in c_D).", ""]
    return "\n".join(lines) + "\n"


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--quick", "--time-scale", "0.02"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steady", default="20,40,80,160", help="2D-1 resolutions")
    parser.add_argument("--periodic", default="20,40,80", help="2D-2 resolutions")
    parser.add_argument("--mach", default="20,40",
                        help=f"2D-2 resolutions run at every u_lat of {U_MACH} ('' for none)")
    parser.add_argument("--quick", action="store_true", help="N = 20 only, short speed test")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="factor on every simulated time (runs and windows)")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    scale = args.time_scale
    sizes = {case: [int(x) for x in text.split(",") if x]
             for case, text in (("2D-1", args.steady), ("2D-2", args.periodic),
                                ("mach", args.mach))}
    if args.quick:
        sizes = {"2D-1": [20], "2D-2": [20], "mach": []}
    team = world_team()
    load_start = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    sp = speed(team, 20 if args.quick else 200)
    runs: dict[str, list[dict]] = {"2D-1": [], "2D-2": [], "mach": []}

    def record(case: str, result: dict) -> None:
        runs[case].append(result)
        if team.rank == 0:
            print(case, result, flush=True)

    coarse = None
    for n in sizes["2D-2"]:
        result, coarse = periodic(team, n, coarse, scale=scale)
        record("2D-2", result)
    for n in sizes["2D-1"]:
        record("2D-1", steady(team, n, scale))
    for n in sizes["mach"]:
        for u_lat in U_MACH:
            record("mach", periodic(team, n, None, u_lat, scale)[0])
    if team.rank != 0:
        return 0
    fine1, fine2 = runs["2D-1"][-1], runs["2D-2"][-1]
    payload = {"ranks": team.size, "load_start": load_start,
               "load_end": round(os.getloadavg()[0], 2),
               "wall_s": round(time.perf_counter() - t0, 1),
               "2D-1": {"N": fine1["N"], "cD": fine1["cD"], "cL": fine1["cL"]},
               "2D-2": {"N": fine2["N"], "cD_max": fine2["cD_max"], "cL_max": fine2["cL_max"],
                        "St": fine2["St"],
                        "wall_s": round(sum(r["wall_s"] for r in runs["2D-2"]), 1)},
               "bands": BANDS, "runs": runs, "speed": sp, "time_scale": scale}
    path = write("turek", payload)
    (args.out / "turek.md").write_text(markdown(json.loads(path.read_text())))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
