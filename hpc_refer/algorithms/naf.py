"""NAF, normalized advantage functions (Gu et al. 2016), with ReF-ER (spec, section NAF).

One network maps s to the state value V_w(s), the mean m_w(s) = tanh(.) (inside the
normalised action box [-1, 1]) and a lower-triangular L_w(s) whose diagonal is made positive
by ``exp`` (as Gu et al.); with P_w(s) = L_w(s) L_w(s)^T (positive definite),

    Q_w(s, a) = V_w(s) - 1/2 (a - m_w(s))^T P_w(s) (a - m_w(s))          (eq. 4)

so that argmax_a Q_w(s, a) = m_w(s) and max_a Q_w(s, a) = V_w(s). The behaviour policy is
pi_w(.|s) = N(m_w(s), sigma^2 I) with the fixed sigma of the config (0.2), so rho_k and the KL
of eq. 11 exist. Q-learning, per sample, with y_k held fixed:

    L_Q,k = 1/2 (y_k - Q_w(s_k, a_k))^2,   y_k = r_{k+1} + gamma (1 - done_k) V_w'(s_{k+1}),

w' a target network updated after every step by w' <- (1 - tau) w' + tau w.

ReF-ER (eq. 10 on the NAF outputs, see :func:`naf_refer_loss`): Rule 1 removes the TD-error
gradient of far-policy samples from every output; Rule 2 scales by beta only the TD gradient
that reaches w through the mean m_w (V_w and L_w keep the full TD gradient) and adds the
penalty -(1 - beta) g_D, g_D = grad_w KL_k, through m_w.
"""

from __future__ import annotations

import copy

import torch

from hpc_refer.algorithms.kit.base import Algorithm, Losses, TensorBatch, adam
from hpc_refer.algorithms.kit.bodies import (
    BODY_POLICY_FORMAT,
    BodyPolicy,
    heads_with_bodies,
    make_body,
)
from hpc_refer.algorithms.kit.networks import BehaviourPolicy, gaussian_log_prob
from hpc_refer.algorithms.kit.ops import Arrays, Op
from hpc_refer.algorithms.kit.refer import importance_ratio, kl_penalty, near_policy, rule1_mask
from hpc_refer.algorithms.kit.shared import polyak_, squared_td_loss, td_target
from hpc_refer.algorithms.registry import register
from hpc_refer.algorithms.tables.naf import NAFConfig
from hpc_refer.config.tables import AlgorithmConfig, NetworkShape, ReferConfig
from hpc_refer.replay.near import NearBounds
from hpc_refer.report.formats import TreeFormat


def lower_triangular(entries: torch.Tensor, act_dim: int) -> torch.Tensor:
    """L [..., A, A] from A(A+1)/2 network outputs [..., A(A+1)/2] (row-major lower triangle).

    The diagonal entries are exponentiated (L_ii = exp(x_ii) > 0, Gu et al. 2016), the
    strictly lower ones are used as they are and the upper triangle is zero, so that
    P = L L^T is positive definite (L is its Cholesky factor).
    """
    rows, cols = torch.tril_indices(act_dim, act_dim, device=entries.device)
    flat = torch.zeros(*entries.shape[:-1], act_dim * act_dim, dtype=entries.dtype,
                       device=entries.device)
    flat[..., rows * act_dim + cols] = entries
    tril = flat.view(*entries.shape[:-1], act_dim, act_dim)
    diag = torch.diagonal(tril, dim1=-2, dim2=-1)
    return tril - torch.diag_embed(diag) + torch.diag_embed(torch.exp(diag))


def naf_q(value: torch.Tensor, mean: torch.Tensor, tril: torch.Tensor,
          act: torch.Tensor) -> torch.Tensor:
    """Eq. 4: Q_w(s, a) = V_w(s) - 1/2 (a - m)^T L L^T (a - m) = V - 1/2 |L^T (a - m)|^2.

    ``value`` [B], ``mean`` and ``act`` [B, A], ``tril`` = L [B, A, A]; returns Q [B].
    """
    z = torch.einsum("bij,bi->bj", tril, act - mean)
    return value - 0.5 * z.pow(2).sum(-1)


def beta_scaled(mean: torch.Tensor, beta: float | torch.Tensor) -> torch.Tensor:
    """m_beta = beta m + (1 - beta) sg(m): the value of m, its gradient scaled by beta.

    (sg = stop-gradient.) Used inside Q, it makes the TD gradient that flows into w through
    the mean output beta * grad L_Q, and leaves the gradient through V and L untouched.
    (A tensor beta, as in the compiled step, always takes the formula, which is exact at 1.)
    """
    if not isinstance(beta, torch.Tensor) and beta == 1.0:
        return mean
    return beta * mean + (1.0 - beta) * mean.detach()


def naf_refer_loss(l_q: torch.Tensor, kl: torch.Tensor | None, keep: torch.Tensor,
                   beta: float | torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Eq. 10 on NAF's outputs, as the minibatch loss

        1/B sum_k w_k [ keep_k L_Q,k(V, m_beta, L) + (1 - beta) KL_k(m) ]

    with keep_k = 1[k near] under Rule 1 (else 1), L_Q,k evaluated with m_beta of
    :func:`beta_scaled`, KL_k of eq. 11 (None without Rule 2, where beta = 1) and w_k the
    prioritized-replay weights.

    Why this is the spec's rule: by the chain rule, grad_w L_Q,k = dL/dV grad V +
    dL/dL grad L + dL/dm_beta (d m_beta / dm) grad m, and d m_beta / dm = beta. So the
    descent direction is -grad L_Q (= the TD gradient g) on V's and L's parameters' paths and
    beta g - (1 - beta) g_D on the mean's path (KL_k depends on w only through m, sigma being
    fixed); a far-policy sample (keep_k = 0) gives -(1 - beta) g_D only. With plain ER
    (keep = 1, beta = 1, no KL) it is the Q-learning loss of Gu et al.
    """
    per_sample = keep * l_q
    if kl is not None:
        per_sample = per_sample + (1.0 - beta) * kl
    return (weight * per_sample).mean()


class NAFNet(BodyPolicy):
    """rows -> (V_w(s) [B], m_w(s) [B, A], L_w(s) [B, A, A]) over a body of
    1 + A + A(A+1)/2 outputs (V, pre-tanh mean, lower triangle of L;
    :mod:`~hpc_refer.algorithms.kit.bodies`).

    It is also the behaviour module: ``policy(s)`` = (m_w(s), sigma), sigma a fixed buffer.
    The output layer starts small, so that V ~ 0, m ~ 0 and L ~ I at initialisation.
    """

    sigma: torch.Tensor

    def __init__(self, obs_dim: int, act_dim: int, network: NetworkShape, sigma: float) -> None:
        super().__init__(make_body(obs_dim, 1 + act_dim + act_dim * (act_dim + 1) // 2,
                                   network))
        self.act_dim = act_dim
        self.register_buffer("sigma", torch.full((act_dim,), float(sigma)))

    def split(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """V [B], m = tanh(.) [B, A] and L [B, A, A] from the body's outputs."""
        a = self.act_dim
        return out[..., 0], torch.tanh(out[..., 1 : 1 + a]), lower_triangular(out[..., 1 + a :], a)

    def forward(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """V, m and L at rows, each from its stored carry."""
        return self.split(self.body.rows(rows).out)

    def read(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The behaviour N(m_w(s), sigma^2 I): mean [B, A] and std [A]."""
        return torch.tanh(out[..., 1 : 1 + self.act_dim]), self.sigma

    def read_ops(self, arrays: Arrays) -> tuple[list[Op], list[Op]]:
        """tanh of the outputs after V, and sigma."""
        return ([Op("take", attrs={"start": 1, "count": self.act_dim}), Op("tanh")],
                [Op("const", arrays(self.sigma))])


@register
class NAF(Algorithm):
    """NAF: one network (V, m, L), its Polyak-averaged target copy, Adam, ReF-ER's step."""

    name = "naf"
    Config = NAFConfig
    state_format = TreeFormat("algorithm", (heads_with_bodies("net", "target"),))
    policy_format = BODY_POLICY_FORMAT

    def __init__(self, obs_dim: int, act_dim: int, config: NAFConfig, refer: ReferConfig,
                 seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.config: NAFConfig = config
        self.net = NAFNet(obs_dim, act_dim, config.network, config.sigma)
        self.target = copy.deepcopy(self.net)
        self.target.requires_grad_(False)
        self.modules = {"net": self.net, "target": self.target}
        self.optimizers = {"adam": adam(self.net.parameters(), config.lr)}

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, NAFConfig)
        return NAFNet(obs_dim, act_dim, config.network, config.sigma)

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.net

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds, resting: frozenset[str] = frozenset()) -> Losses:
        """ReF-ER loss of a minibatch (:func:`naf_refer_loss`), its diagnostics, rho_k and the
        pre-step TD error y_k - Q_w(s_k, a_k) (detached)."""
        act = batch.act
        mode = self.refer_config.mode
        if not mode.rule2:
            beta = 1.0
        now = self.net.body.sequences(batch.obs, self.config.sequence_length)
        value, mean, tril = self.net.split(now.out)
        sigma = self.net.sigma
        rho = importance_ratio(gaussian_log_prob(act, mean.detach(), sigma), batch.log_mu)
        near = near_policy(rho, bounds)
        keep = rule1_mask(near, mode, value)
        with torch.no_grad():
            v_next = self.target.split(self.target.body.after(batch.next_obs, now.carry).out)[0]
            y = td_target(batch.rew, batch.done, self.config.gamma, v_next)
        q = naf_q(value, beta_scaled(mean, beta), tril, act)
        l_q = squared_td_loss(y, q)
        kl = (kl_penalty(batch.mu_mean, batch.mu_std, mean, sigma,
                         self.refer_config.kl_direction) if mode.rule2 else None)
        loss = naf_refer_loss(l_q, kl, keep, beta, batch.weight)
        stats = {"loss_q": l_q, "q": q, "v": value}
        if kl is not None:
            stats["kl"] = kl
        stats["near_fraction"] = near
        return Losses(loss, stats, rho.detach(), None, (y - q).detach())

    def after_step(self, t: int) -> None:
        """The target follows: w' <- (1 - tau) w' + tau w."""
        polyak_(self.target, self.net, self.config.tau)
