"""``policy.onnx``: the exported policy (:mod:`~hpc_refer.export.weights`) as one self-contained
ONNX graph (opset :data:`OPSET`, weights inside), raw solver states in, actions in the solver's
units out, batch dimension N dynamic.

A policy without history or carry is a function::

    state  float64 [N, state_dim]  ->  action  float64 [N, act_dim]

A policy with ``env.history`` or a recurrent cell keeps what it remembers in an explicit
memory, as ONNX graphs do (they hold no state between runs)::

    state   float64 [N, state_dim]      action      float64 [N, act_dim]
    memory  float32 [N, M]          ->  memory_out  float32 [N, M]
    start   bool    [N]             (true at an episode's first state: memory is ignored)

with M = (k - 1) state_dim (the past states, newest first) + k_a act_dim (the actions
a_t, ..., a_{t-k_a+1}; k_a = k with ``history_actions``, else 0) + carry_dim; the caller passes
``memory_out`` back as the next step's ``memory`` (:class:`OnnxPolicy` does). The graph computes
what :class:`~hpc_refer.export.controller.Controller` computes: the state rounded to float32,
the stack, the ops of :mod:`~hpc_refer.algorithms.kit.ops` in float32, and the map into the
action box in float64.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hpc_refer.export.controller import checked_state
from hpc_refer.export.weights import ExportedPolicy

OPSET = 18
"""The ONNX operator set written (onnxruntime >= 1.14 runs it)."""
ONNX = "policy.onnx"


class _Graph:
    """Nodes and initializers of one ONNX graph, named in order."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, value: np.ndarray | np.generic, stem: str = "c") -> str:
        name = self.name(stem)
        self.inits.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def __call__(self, op: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        name = out or self.name(op.lower())
        self.nodes.append(self.helper.make_node(op, list(inputs), [name], **attrs))
        return name

    def cols(self, x: str, start: int, stop: int) -> str:
        """x[:, start:stop]."""
        return self("Slice", x, self.const(np.array([start], np.int64)),
                    self.const(np.array([stop], np.int64)), self.const(np.array([1], np.int64)))

    def sigmoid(self, v: str) -> str:
        """(1 + tanh(v / 2)) / 2, the cells' form of the logistic function."""
        half = self.const(np.float32(0.5))
        return self("Mul", self("Add", self.const(np.float32(1.0)),
                                self("Tanh", self("Mul", v, half))), half)


def _cell(g: _Graph, op: dict[str, Any], arrays: list[np.ndarray], x: str, carry: str
          ) -> tuple[str, str]:
    """One GRU or LSTM step (:mod:`~hpc_refer.algorithms.kit.recurrent`): (h', carry')."""
    w = op["width"]
    w_ih, b_ih, w_hh, b_hh = (g.const(a) for a in arrays)
    gx = g("Add", g("MatMul", x, w_ih), b_ih)
    gh = g("Add", g("MatMul", g.cols(carry, 0, w), w_hh), b_hh)
    if op["op"] == "lstm":
        gates = g("Add", gx, gh)
        i, f, c_in, o = (g.cols(gates, j * w, (j + 1) * w) for j in range(4))
        c = g("Add", g("Mul", g.sigmoid(f), g.cols(carry, w, 2 * w)),
              g("Mul", g.sigmoid(i), g("Tanh", c_in)))
        h = g("Mul", g.sigmoid(o), g("Tanh", c))
        return h, g("Concat", h, c, axis=1)
    r = g.sigmoid(g("Add", g.cols(gx, 0, w), g.cols(gh, 0, w)))
    z = g.sigmoid(g("Add", g.cols(gx, w, 2 * w), g.cols(gh, w, 2 * w)))
    n = g("Tanh", g("Add", g.cols(gx, 2 * w, 3 * w), g("Mul", r, g.cols(gh, 2 * w, 3 * w))))
    h = g("Add", g("Mul", g("Sub", g.const(np.float32(1.0)), z), n),
          g("Mul", z, g.cols(carry, 0, w)))
    return h, h


def _mean(g: _Graph, policy: ExportedPolicy, x: str, carry: str | None) -> tuple[str, str | None]:
    """The ops of the header on x [N, obs_dim]: (the mean [N, act_dim], the new carry)."""
    for op in policy.header["ops"]:
        arrays = policy.arrays(op)
        kind = op["op"]
        if kind == "normalize":
            x = g("Mul", g("Sub", x, g.const(arrays[0])), g.const(arrays[1]))
        elif kind in ("gru", "lstm"):
            assert carry is not None
            h, carry = _cell(g, op, arrays, x, carry)
            x = g("Concat", x, h, axis=1)
        elif kind == "linear":
            x = g("Add", g("MatMul", x, g.const(arrays[0])), g.const(arrays[1]))
        elif kind == "softsign":
            x = g("Div", x, g("Add", g("Abs", x), g.const(np.float32(1.0))))
        elif kind == "relu":
            x = g("Relu", x)
        elif kind == "tanh":
            x = g("Tanh", x)
        elif kind == "renorm":
            mean, var, scale, bias = (g.const(a) for a in arrays)
            root = g("Sqrt", g("Add", var, g.const(np.float32(op["eps"]))))
            x = g("Add", g("Mul", scale, g("Div", g("Sub", x, mean), root)), bias)
        elif kind == "take":
            x = g.cols(x, op["start"], op["start"] + op["out"])
        else:
            raise ValueError(f"op {kind!r} has no ONNX form")
    return x, carry


def _to_env(g: _Graph, box: dict[str, Any], u: str) -> str:
    """The map into the action box (:class:`~hpc_refer.loop.actor.ActionMap`), float64."""
    squashed = (g("Tanh", u) if box["squash"]
                else g("Clip", u, g.const(np.float32(-1.0)), g.const(np.float32(1.0))))
    mapped = g("Add", g.const(np.array(box["center"], np.float64)),
               g("Mul", g.const(np.array(box["half"], np.float64)),
                 g("Cast", squashed, to=11)))
    if all(box["bounded"]):
        return g("Identity", mapped, out="action")
    return g("Where", g.const(np.array(box["bounded"], bool)), mapped, g("Cast", u, to=11),
             out="action")


def onnx_model(policy: ExportedPolicy) -> Any:
    """The ONNX model of an exported policy (module docstring)."""
    from onnx import TensorProto, checker, helper

    h = policy.header
    sd, A, k, C = h["state_dim"], h["act_dim"], h["history"]["k"], h["carry_dim"]
    ka = k if h["history"]["actions"] else 0
    memory_dim = (k - 1) * sd + ka * A + C
    g = _Graph()
    state = g("Cast", "state", to=1)
    inputs = [helper.make_tensor_value_info("state", TensorProto.DOUBLE, ["N", sd])]
    outputs = [helper.make_tensor_value_info("action", TensorProto.DOUBLE, ["N", A])]
    carry = None
    if memory_dim:
        inputs += [helper.make_tensor_value_info("memory", TensorProto.FLOAT, ["N", memory_dim]),
                   helper.make_tensor_value_info("start", TensorProto.BOOL, ["N"])]
        outputs.append(helper.make_tensor_value_info("memory_out", TensorProto.FLOAT,
                                                     ["N", memory_dim]))
        start = g("Unsqueeze", "start", g.const(np.array([1], np.int64)))
    x = observed = state
    if k > 1:
        pushed = g("Concat", state, g.cols("memory", 0, (k - 1) * sd), axis=1)
        observed = g("Where", start, g("Tile", state, g.const(np.array([1, k], np.int64))),
                     pushed)
        x = observed
    at = (k - 1) * sd
    if ka:
        actions = g("Where", start, g.const(np.zeros((1, ka * A), np.float32)),
                    g.cols("memory", at, at + ka * A))
        x = g("Concat", observed, actions, axis=1)
    if C:
        carry = g("Where", start, g.const(np.zeros((1, C), np.float32)),
                  g.cols("memory", at + ka * A, memory_dim))
    mean, carry = _mean(g, policy, x, carry)
    action = _to_env(g, h["action_map"], mean)
    if memory_dim:
        parts = [g.cols(observed, 0, (k - 1) * sd)] if k > 1 else []
        if ka:
            parts.append(g("Cast", action, to=1))
            if ka > 1:
                parts.append(g.cols(actions, 0, (ka - 1) * A))
        if carry is not None:
            parts.append(carry)
        g("Concat", *parts, axis=1, out="memory_out") if len(parts) > 1 else g(
            "Identity", parts[0], out="memory_out")
    graph = helper.make_graph(g.nodes, "hpc_refer_policy", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="hpc_refer", producer_version=h["hpc_refer_version"])
    model.ir_version = 8  # (read by onnxruntime >= 1.14)
    helper.set_model_props(model, {
        **{key: str(h[key]) for key in ("algorithm", "run", "env_step", "grad_step",
                                        "state_dim", "act_dim")},
        "memory_dim": str(memory_dim)})
    checker.check_model(model, full_check=True)
    return model


def write_onnx(policy: ExportedPolicy, out: Path) -> Path:
    """``out/policy.onnx`` (one file, the weights inside)."""
    import onnx

    path = out / ONNX
    onnx.save_model(onnx_model(policy), str(path))
    return path


class OnnxPolicy:
    """``policy.onnx`` run by onnxruntime with the interface of
    :class:`~hpc_refer.export.controller.Controller` (``act`` of one raw state or K, ``reset``),
    keeping the memory between calls."""

    def __init__(self, path: Path) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(str(path), options,
                                                        providers=["CPUExecutionProvider"])
        except Exception as err:  # (onnxruntime's own classes: Fail, InvalidProtobuf, ...)
            raise ValueError(f"{path}: onnxruntime cannot load it ({err})") from None
        props = self.session.get_modelmeta().custom_metadata_map
        if not {"state_dim", "act_dim", "memory_dim", "env_step", "grad_step"} <= set(props):
            raise ValueError(f"{path}: an ONNX file not written by python -m hpc_refer.export "
                             f"(its metadata lacks state_dim, act_dim, memory_dim)")
        self.state_dim, self.act_dim = int(props["state_dim"]), int(props["act_dim"])
        self.memory_dim = int(props["memory_dim"])
        self.env_step, self.grad_step = (None if props[k] == "None" else int(props[k])
                                         for k in ("env_step", "grad_step"))
        """The run's environment and gradient steps when the policy was saved."""
        self._memory: np.ndarray | None = None

    def reset(self) -> None:
        """The next state is an episode's first."""
        self._memory = None

    def act(self, state: np.ndarray) -> np.ndarray:
        """As :meth:`Controller.act <hpc_refer.export.controller.Controller.act>` (the same
        ValueErrors for a state of another width, agent count or with NaN)."""
        x = checked_state(state, self.state_dim)
        rows = x.reshape(-1, self.state_dim).astype(np.float64)  # (exact: the graph's Cast)
        feed: dict[str, np.ndarray] = {"state": rows}
        if self.memory_dim:
            start = self._memory is None
            if self._memory is not None and len(self._memory) != len(rows):
                raise ValueError(f"a state of shape {x.shape} inside an episode of "
                                 f"{len(self._memory)} agents: the agent count changes only "
                                 f"at an episode's start (reset())")
            feed["memory"] = (np.zeros((len(rows), self.memory_dim), np.float32)
                              if self._memory is None else self._memory)
            feed["start"] = np.full(len(rows), start)
            action, self._memory = self.session.run(None, feed)
        else:
            (action,) = self.session.run(None, feed)
        return action.reshape(*x.shape[:-1], self.act_dim)
