"""The exported policy as data: ``policy.bin`` (every weight, little-endian float32, in one
flat file) and ``policy.json`` (the header that says what they are), written from a policy
file and read by the C routine (``hpc_refer_policy.c``) and the ONNX writer.

The header (format ``hpc_refer-policy``, :data:`FORMAT_VERSION`)::

    state_dim, act_dim     one raw state's values (the solver's), the action's
    obs_dim                the policy's input: k (state_dim + [act_dim]) with the history
    history                {"k": k, "actions": bool}: the last k states (and actions), newest
                           first (:class:`~hpc_refer.envs.history.ObservationStack`)
    carry_dim              the recurrent carry's values (0: feed-forward)
    action_map             {"squash": bool, "bounded": [A], "center": [A], "half": [A]}: the
                           action is c + h tanh(m) (squash) or c + h clip(m, -1, 1) on bounded
                           dimensions, m itself on the others
                           (:class:`~hpc_refer.loop.actor.ActionMap`; c and h float64)
    ops                    the mean m(x) (:mod:`~hpc_refer.algorithms.kit.ops`), each
                           {"op", "in", "out", "offset", "size"} and its attributes: its arrays
                           are ``size`` floats from ``offset`` of the weight file, in the
                           op table's order
    weights                {"file": "policy.bin", "floats": total, "dtype": "<f4"}
    hpc_refer_version, algorithm, run, policy_file, env_step, grad_step: where it came from

Every number that the C routine computes with is in the weight file or is an integer of the
header, except c and h, written as the shortest decimal that reads back to the same float64.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpc_refer import __version__
from hpc_refer.algorithms.kit.ops import Op
from hpc_refer.export.controller import Controller
from hpc_refer.loop.policy_file import PolicyFile

FORMAT, FORMAT_VERSION = "hpc_refer-policy", 1
"""The header's ``format`` and ``format_version`` (the C routine refuses any other)."""
BIN, JSON = "policy.bin", "policy.json"


@dataclass(frozen=True)
class ExportedPolicy:
    """A policy's header and its flat float32 weights (module docstring)."""

    header: dict[str, Any]
    weights: np.ndarray

    def arrays(self, op: dict[str, Any]) -> list[np.ndarray]:
        """The arrays of one of the header's ops, shaped (module docstring's order)."""
        flat = self.weights[op["offset"]:op["offset"] + op["size"]]
        n, m = op["in"], op["out"]
        if op["op"] == "linear":
            shapes = [(n, m), (m,)]
        elif op["op"] in ("gru", "lstm"):
            g = (4 if op["op"] == "lstm" else 3) * op["width"]
            shapes = [(n, g), (g,), (op["width"], g), (g,)]
        else:
            shapes = [(n,)] * {"normalize": 2, "renorm": 4}.get(op["op"], 0)
        out, at = [], 0
        for shape in shapes:
            size = int(np.prod(shape))
            out.append(flat[at:at + size].reshape(shape))
            at += size
        return out


def op_entry(op: Op, width: int, offset: int) -> dict[str, Any]:
    """The header's entry of ``op`` on an input of ``width`` values, its arrays at ``offset``."""
    if op.kind == "take":
        out = int(op.attrs["count"])
    elif op.kind == "linear":
        out = op.arrays[0].shape[1]
    elif op.kind in ("gru", "lstm"):
        out = width + int(op.attrs["width"])
    else:
        out = width
    size = sum(a.size for a in op.arrays)
    return {"op": op.kind, "in": width, "out": out, "offset": offset, "size": size, **op.attrs}


def export_policy(saved: PolicyFile, source: Path) -> ExportedPolicy:
    """The header and weights of the policy file ``saved`` read from ``source`` (its deployed
    form, :class:`~hpc_refer.export.controller.Controller`, gives the history and the box)."""
    controller = Controller.of(saved, source)
    ops = saved.policy.mean_ops()
    entries, chunks, width, offset = [], [], saved.obs_dim, 0
    for op in ops:
        entry = op_entry(op, width, offset)
        entries.append(entry)
        chunks += [a.reshape(-1) for a in op.arrays]
        width, offset = entry["out"], offset + entry["size"]
    if width != saved.act_dim:
        raise ValueError(f"the policy's ops end with {width} values, its actions have "
                         f"{saved.act_dim}")
    weights = (np.concatenate(chunks).astype("<f4") if chunks else np.zeros(0, "<f4"))
    to_env = controller.to_env
    header = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "hpc_refer_version": __version__,
        "algorithm": saved.config["run"]["algorithm"],
        "run": str(source.parent), "policy_file": source.name,
        "env_step": saved.env_step, "grad_step": saved.grad_step,
        "state_dim": controller.state_dim, "act_dim": saved.act_dim, "obs_dim": saved.obs_dim,
        "history": {"k": controller.history.k, "actions": controller.history.actions},
        "carry_dim": controller.carry_dim,
        "action_map": {"squash": to_env.squash, "bounded": to_env.bounded.tolist(),
                       "center": to_env.center.tolist(), "half": to_env.half.tolist()},
        "ops": entries,
        "weights": {"file": BIN, "floats": int(weights.size), "dtype": "<f4"},
    }
    return ExportedPolicy(header, weights)


def write_exported(policy: ExportedPolicy, out: Path) -> None:
    """``out/policy.bin`` and ``out/policy.json`` (the directory is made)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / BIN).write_bytes(policy.weights.astype("<f4").tobytes())
    (out / JSON).write_text(json.dumps(policy.header, indent=1) + "\n")


def read_exported(out: Path) -> ExportedPolicy:
    """What :func:`write_exported` wrote in ``out``; ValueError naming the file when the
    format is another, or the weight file does not hold the header's floats."""
    header = json.loads((out / JSON).read_text())
    if header.get("format") != FORMAT or header.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{out / JSON}: format {header.get('format')!r} version "
                         f"{header.get('format_version')!r}; this hpc_refer reads {FORMAT!r} "
                         f"version {FORMAT_VERSION}")
    raw = (out / header["weights"]["file"]).read_bytes()
    if len(raw) != 4 * header["weights"]["floats"]:
        raise ValueError(f"{out / header['weights']['file']}: {len(raw)} bytes, the header "
                         f"says {header['weights']['floats']} float32 values")
    return ExportedPolicy(header, np.frombuffer(raw, "<f4"))
