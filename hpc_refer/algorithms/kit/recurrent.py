"""Recurrent networks for partially observed tasks: a GRU or LSTM cell over the states, its
carry stored with every state, and truncated backpropagation through time over W steps. The
cell is here; the network body around it, the per-row step and the unroll, is
:class:`~hpc_refer.algorithms.kit.bodies.RecurrentBody`.

The cell (``cell = gru | lstm``, width H; equations as ``torch.nn.GRUCell`` and
``torch.nn.LSTMCell``, written out so that the numpy actors and the compiled step trace the
same maths)::

    GRU   r = sigma(W_r x + U_r h + b_r)      z = sigma(W_z x + U_z h + b_z)
          n = tanh(W_n x + b_n + r * (U_n h + b'_n))        h' = (1 - z) * n + z * h
    LSTM  [i, f, g, o] = W x + U h + b        c' = sigma(f) c + sigma(i) tanh(g)
          h' = sigma(o) tanh(c')

with x the normalised state. The carry c_t is h (GRU, H values) or [h, c] (LSTM, 2H).

Stored state (R2D2, Kapturowski et al. 2019). An actor runs the cell on every state it sees
and stores with state s_t the carry it entered the step with, c_{t-1} (zero at an episode's
start), as extra columns of the state's row: ``[s_t, c_{t-1}]``. Every path that moves
states (the chunks, the MPI messages, the replay's columns, checkpoints, the re-sharding of a
restart on other learners) carries it unchanged, and a row alone determines the actor's
computation at that step. The learner uses it twice:

* one row at a time (ingest, the bootstrap values V_w(s_T), the refresh of rho after a
  step): the cell is applied once from the stored carry;
* in the gradient step: sequences of W consecutive steps of one episode (``sequences`` of
  them per minibatch, or B / W), unrolled from the carry of their first row, the gradient
  flowing back through all W steps. The loss, rho and the KL are per step (the algorithm's
  equations, unchanged), and V-tbc stays the replay's (eq. 8).

The stored carry was made by the policy that acted, so it is stale by the updates since; the
unroll makes the carries of the sequence's later steps the learner's own, but its first
step starts from the stale one. R2D2 (Kapturowski et al. 2019, Sec. 3) measured that drift
and fixed it with a *burn-in*: its replay held sequences of m = 80 steps (adjacent ones
overlapping by 40, none crossing an episode's boundary, 64 per minibatch); a prefix of
l steps of each (l = 20 or 40 in its experiments) was used only to unroll the network from
the stored state, without gradient, and the network was updated on the rest of the
sequence. So R2D2's burn-in is a fixed prefix of each replayed sequence, not a replay from
the episode's start (which would cost up to an episode of forward steps per sequence).
Here ``burn_in`` = b does the same over the replay's links: the b steps before the sampled
sequence (fewer where its episode begins closer; none at an episode's first step, whose
carry 0 is exact) are run through the current cell from the stored carry of the earliest of
them, without gradient (:meth:`~hpc_refer.algorithms.kit.base.Algorithm.burn_in`), and the
carry they reach replaces the sequence's stored one. Those b steps are in neither the losses
nor the refresh of rho after the step, so not in Rule 1's far-policy count either; the
sequence's own W steps are sampled as without burn-in.

What the staleness does, measured (BENCHMARKS section 25, CueRecall): the critics' TD error
at a sequence's first step is larger from the stored carry than from one recomputed from the
episode's start (1.5x for a network trained without burn-in, 4.8x for one trained with
b = 8), and falls along the unroll. |log rho| at those steps is *smaller* from the stored
carry, so a burn-in raises the far-policy count of the first steps a little rather than
lowering it (a hypothesis for why: mu acted under that very carry, and a fresher one moves
pi_w away from it).
"""

from __future__ import annotations

import torch
from torch import nn

from hpc_refer.algorithms.kit.ops import Arrays, Op, copied
from hpc_refer.config.modes import Cell


class RecurrentCell(nn.Module):
    """A GRU or LSTM cell (see the module docstring): ``forward(x, carry)`` -> (h', carry')."""

    def __init__(self, cell: Cell, in_dim: int, width: int) -> None:
        super().__init__()
        if cell is Cell.NONE:
            raise ValueError("a RecurrentCell needs cell gru or lstm")
        self.lstm = cell is Cell.LSTM
        self.width = width
        gates = 4 if self.lstm else 3
        self.ih = nn.Linear(in_dim, gates * width)
        self.hh = nn.Linear(width, gates * width)
        bound = 1.0 / width ** 0.5  # torch's GRUCell / LSTMCell initialisation
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-bound, bound)

    @property
    def carry_dim(self) -> int:
        return (2 if self.lstm else 1) * self.width

    def forward(self, x: torch.Tensor, carry: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: the output h' [..., H] and the new carry [..., carry_dim]."""
        w = self.width
        h = carry[..., :w]
        gx, gh = self.ih(x), self.hh(h)
        if self.lstm:
            g = gx + gh
            c = torch.sigmoid(g[..., w:2 * w]) * carry[..., w:] + torch.sigmoid(
                g[..., :w]) * torch.tanh(g[..., 2 * w:3 * w])
            h_new = torch.sigmoid(g[..., 3 * w:]) * torch.tanh(c)
            return h_new, torch.cat([h_new, c], dim=-1)
        r = torch.sigmoid(gx[..., :w] + gh[..., :w])
        z = torch.sigmoid(gx[..., w:2 * w] + gh[..., w:2 * w])
        n = torch.tanh(gx[..., 2 * w:] + r * gh[..., 2 * w:])
        h_new = (1.0 - z) * n + z * h
        return h_new, h_new

    def unroll(self, x: torch.Tensor, carry: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The outputs [n, T, H] and carries after each step [n, T, carry_dim] of sequences
        x [n, T, d] from the carries [n, carry_dim] of their first step."""
        outs, carries = [], []
        for t in range(x.shape[1]):
            h, carry = self(x[:, t], carry)
            outs.append(h)
            carries.append(carry)
        return torch.stack(outs, dim=1), torch.stack(carries, dim=1)

    def op(self, arrays: Arrays = copied) -> Op:
        """This cell as an op (:mod:`~hpc_refer.algorithms.kit.ops`; its numpy step is
        :func:`~hpc_refer.algorithms.kit.program.run_ops`)."""
        return Op("lstm" if self.lstm else "gru",
                  arrays(self.ih.weight.T, self.ih.bias, self.hh.weight.T, self.hh.bias),
                  {"width": self.width})
