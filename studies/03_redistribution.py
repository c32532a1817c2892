"""03 study — what the survey promises of a redistribution, and of potential-based shaping.

On the chapter's stored key-to-door episodes and its trained return predictor (03_rudder.py's
default settings), the survey's properties of an optimal redistribution (§4.1.2, §5), for r̃ and
for the delayed reward r alike: the future reward still expected after each (s, a) (zero: TD's
one-step target is unbiased), the variance of the Monte Carlo return given (s, a), and the
optimal policy by dynamic programming on the mean r̃ of each (s, a). Then potential-based shaping,
r'_t = r_t + Φ(s_{t+1}) - Φ(s_t) (Ng et al. 1999), by exact dynamic programming: does it keep the
optimal policy, and does Φ = V^π leave a future reward of zero too?

    python studies/03_redistribution.py   # 6 s on 2 CPU cores (beside other jobs)
    python studies/03_redistribution.py --distractor-prob 0.5   # r's variance is no longer 0
"""

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

rudder = importlib.import_module("03_rudder")


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/03_redistribution", "output folder for figures and results.json")
    corridor: int = common.arg(30, "key-to-door corridor length (the delay)")
    distractor_prob: float = common.arg(0.0, "probability of a distractor reward per corridor step")
    inputs: str = common.arg("difference", "predictor input besides the action: the change of state "
                             "(RUDDER's choice) or the state itself", choices=("difference", "state"))

    SMOKE = dict(corridor=5)

    def __post_init__(self):
        common.require_positive(self, "corridor")
        common.require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")


def chapter_args(args: Args) -> "rudder.Args":
    """The chapter's predictor settings (its smoke settings in a smoke run) on this world."""
    settings = rudder.Args(seed=args.seed, smoke=args.smoke, corridor=args.corridor,
                           distractor_prob=args.distractor_prob, inputs=args.inputs)
    return common.apply_smoke(settings)


# ============================================================================================
# The arithmetic: means and variances given (s, a), and exact dynamic programming
# ============================================================================================
def future_rewards(rewards: torch.Tensor) -> torch.Tensor:
    """Σ_{k>t} r_k at every step t, time-major: what is still to come after step t's reward."""
    return rewards.flip(0).cumsum(0).flip(0) - rewards


def pair_index(episode: dict) -> torch.Tensor:
    """Each step's (s_t, a_t) as one index, 2 s_t + a_t (key-to-door has two actions)."""
    return episode["states"] * common.KeyToDoor.num_actions + episode["actions"]


def pair_means(values: torch.Tensor, pairs: torch.Tensor, num_pairs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean of `values` over the visits of each (s, a) pair, and the visit counts (mean 0
    where a pair was never visited)."""
    counts = torch.bincount(pairs.flatten(), minlength=num_pairs)
    sums = torch.zeros(num_pairs, dtype=values.dtype, device=values.device).index_add_(0, pairs.flatten(), values.flatten())
    return sums / counts.clamp(min=1), counts


def conditional_variance(values: torch.Tensor, pairs: torch.Tensor, num_pairs: int) -> float:
    """E[Var(values | s_t, a_t)]: the mean squared distance of each visit from its pair's mean."""
    means, _ = pair_means(values, pairs, num_pairs)
    return float(((values - means[pairs]) ** 2).mean())


def optimal_q(P: torch.Tensor, R: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Q* by value iteration, Q(s, a) ← R(s, a) + γ Σ_s' P(s'|s, a) max_a' Q(s', a'); as many sweeps
    as states, which is exact on an episodic chain like key-to-door."""
    Q = R.clone()
    for _ in range(len(P)):
        Q = R + gamma * torch.einsum("sat,t->sa", P, Q.max(1).values)
    return Q


def potential_shaping(P: torch.Tensor, R: torch.Tensor, potential: torch.Tensor) -> torch.Tensor:
    """Ng et al.'s shaped reward in expectation, R'(s, a) = R(s, a) + Σ_s' P(s'|s, a) Φ(s') - Φ(s)
    (γ = 1; Φ of the terminal state is 0)."""
    return R + torch.einsum("sat,t->sa", P, potential) - potential[:, None]


# ============================================================================================
# The studies, each returning a dict
# ============================================================================================
def redistribution_properties(env: common.KeyToDoor, episode: dict, redistributed: torch.Tensor) -> dict:
    """What the survey says an optimal redistribution does, measured on the stored episodes, for
    the redistributed reward r̃ and the original r alike:
      expected future reward, max over (s, a) of |E[Σ_{k>t} r_k | s_t = s, a_t = a]| (0: none left);
      the Monte Carlo return-to-go's variance given (s_t, a_t), at the key step and over all steps;
      the optimal policy at the key room and its value by dynamic programming on the mean r̃ of
      each (s, a) (the redistributed MDP) and on the true model."""
    pairs, num_pairs = pair_index(episode), common.KeyToDoor.num_actions * (env.num_states + 1)
    out = {}
    for name, rewards in (("redistributed", redistributed), ("original", episode["rewards"])):
        means, counts = pair_means(future_rewards(rewards), pairs, num_pairs)
        out[f"expected_future_max[{name}]"] = float(means[counts > 0].abs().max())
        to_go = rewards.flip(0).cumsum(0).flip(0)  # Σ_{k≥t} r_k, the Monte Carlo target
        out[f"mc_variance_at_key[{name}]"] = conditional_variance(to_go[:1], pairs[:1], num_pairs)
        out[f"mc_variance_all_steps[{name}]"] = conditional_variance(to_go, pairs, num_pairs)
    P, R = env.model()
    mean_redistributed, _ = pair_means(redistributed.double().cpu(), pairs.cpu(), num_pairs)
    for name, table in (("redistributed", mean_redistributed.view(-1, common.KeyToDoor.num_actions)), ("original", R)):
        Q = optimal_q(P, table)
        out[f"optimal_key_action[{name}]"] = int(Q[0].argmax())
        out[f"optimal_start_value[{name}]"] = float(Q[0].max())
    return out


def shaping_study(args: Args, seed: int) -> dict:
    """Potential-based shaping by exact dynamic programming on key-to-door (γ = 1): with a random
    Φ, does Q* keep its argmax, and is Q*' = Q* - Φ(s) (Ng et al. 1999)? With Φ = V^π (π uniform),
    what future reward does the shaped MDP still expect after each (s, a)?"""
    env = common.KeyToDoor(1, corridor=args.corridor, distractor_prob=args.distractor_prob)
    P, R = env.model()
    potential = torch.randn(len(P), generator=torch.Generator().manual_seed(seed), dtype=R.dtype)
    potential[-1] = 0.0  # the terminal state's
    Q, shaped = optimal_q(P, R), optimal_q(P, potential_shaping(P, R, potential))
    decisive = (Q.max(1).values - Q.min(1).values) > 1e-9  # where the choice matters at all
    uniform = torch.full_like(R, 0.5)
    V, _ = common.evaluate_policy(P, R, uniform, 1.0)
    by_value = potential_shaping(P, R, V)
    _, Q_by_value = common.evaluate_policy(P, by_value, uniform, 1.0)
    return {"decisive_states": int(decisive.sum()),
            "argmax_kept": bool((Q.argmax(1) == shaped.argmax(1))[decisive].all()),
            "identity_gap": float((shaped - (Q - potential[:, None])).abs().max()),
            "value_potential_future_max": float((Q_by_value - by_value)[:-1].abs().max())}


# ============================================================================================
# Claims and main
# ============================================================================================
def redistribution_claims(study: dict, shaping: dict) -> tuple[dict, list[dict]]:
    """The survey's promises for an optimal redistribution, on the predictor's stored episodes,
    and potential-based shaping by exact dynamic programming."""
    keys = [k for k in study if k.startswith(("expected_future_max", "mc_variance", "optimal_"))]
    metrics = {k: study[k] for k in keys}
    metrics.update({f"shaping_{k}": v for k, v in shaping.items()})
    future, future_r = study["expected_future_max[redistributed]"], study["expected_future_max[original]"]
    at_key, at_key_r = study["mc_variance_at_key[redistributed]"], study["mc_variance_at_key[original]"]
    steps, steps_r = study["mc_variance_all_steps[redistributed]"], study["mc_variance_all_steps[original]"]
    action, action_r = study["optimal_key_action[redistributed]"], study["optimal_key_action[original]"]
    value, value_r = study["optimal_start_value[redistributed]"], study["optimal_start_value[original]"]
    variance = (f"Var(Σ_{{k≥t}} r_k | s_t, a_t), r̃ vs r: key step {at_key:.2g} vs {at_key_r:.2g} (equal by "
                f"construction: Σ r̃ = G), all steps {steps:.2g} vs {steps_r:.2g}")
    claims = [
        common.claim("survey §4.1.2, §5", "an optimal redistribution makes the expected future reward zero everywhere",
              f"largest |E[Σ_{{k>t}} r̃_k | s_t, a_t]| over the visited (s, a): {future:.2g} (original reward: "
              f"{future_r:.2g})", future < 0.05 * future_r),
        common.claim("survey §4.1.2, §5", "in the redistributed MDP, TD is unbiased",
              f"a one-step target r̃_t + Q(s_{{t+1}}) with Q not yet learned (0) is off from Q by the expected "
              f"future reward: at most {future:.2g} with r̃, {future_r:.2g} with r", future < 0.05 * future_r),
        common.claim("survey §4.1.2, §5", "in the redistributed MDP, Monte Carlo's variance is minimal",
              variance + ("; not testable here: the stored world is deterministic given (s_t, a_t), so r's "
                          "variance is already 0 (try --distractor-prob 0.5)" if steps_r < 1e-9 else ""),
              None if steps_r < 1e-9 else steps < steps_r),
        common.claim("survey §4.1.2", "the redistributed MDP has the same optimal policy",
              f"dynamic programming on the mean r̃ of each (s, a) vs the true model: optimal action in the key "
              f"room {action} vs {action_r} (1: take the key), optimal value {value:.3f} vs {value_r:.3f}",
              action == action_r and abs(value - value_r) < 0.05),
        common.claim("survey §4.1.2 (Ng et al. 1999)", "potential-based shaping Φ(s') - Φ(s) preserves the optimal policy",
              f"exact dynamic programming, key-to-door, a random Φ: argmax Q* kept in all "
              f"{shaping['decisive_states']} states where the choice matters: {'yes' if shaping['argmax_kept'] else 'no'}; "
              f"largest |Q*' - (Q* - Φ(s))| {shaping['identity_gap']:.1e}",
              shaping["argmax_kept"] and shaping["identity_gap"] < 1e-9),
        common.claim("survey §4.1.2", "zero expected future reward is a stronger property than potential-based "
              "shaping provides",
              f"shaping with Φ = V^π (π uniform) leaves a largest |E[Σ_{{k>t}} r'_k | s_t, a_t]| of "
              f"{shaping['value_potential_future_max']:.1e}: where the state is Markov (key-to-door's holds "
              "the key), a potential gives the same property", shaping["value_potential_future_max"] > 0.05),
    ]
    return metrics, claims


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    torch.set_num_threads(1)  # a small model on small batches: threads only wait on each other
    settings = chapter_args(args)
    print(f"03 study: redistribution and shaping on key-to-door, L = {args.corridor}, device {device}")
    predictor = rudder.predictor_study(settings, device)
    properties = redistribution_properties(predictor["env"], predictor["episode"], predictor["redistributed"])
    shaping = shaping_study(args, args.seed)
    metrics, claims = redistribution_claims(properties, shaping)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims)
    print(common.format_table([[k, v] for k, v in metrics.items()], ["metric", "value"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
