"""03 study — what the survey promises of a redistribution, and of potential-based shaping.

On stored key-to-door episodes and the return predictor trained on them (03_rudder.py's settings,
for --steps), once per seed (each its own episodes and predictor: the claims' seeds), the survey's
properties of an optimal redistribution (§4.1.2, §5), for r̃ and for the delayed reward r alike:
where r̃ puts the credit, the future reward still expected after each (s, a) (zero: TD's one-step
target is unbiased; also for the exact optimal redistribution r̃* by dynamic programming on the true
model, as the learned r̃ is optimal only where shown so), the variance of the Monte Carlo return
given (s, a), and, under r̃*, of the immediate reward alone (all Monte Carlo averages once no future
reward is expected), and the optimal policy by dynamic programming on the mean r̃ of each (s, a).
Then potential-based shaping, r'_t = r_t + Φ(s_{t+1}) - Φ(s_t) (Ng et al. 1999), by exact dynamic
programming: does it keep the optimal policy, what future reward does a generic (random) Φ leave, and
does Φ = V^π, the one potential that can leave none, leave none? And, for context, the least future
reward a potential of the position alone (blind to the key) can leave.

    python studies/03_redistribution.py   # 16 s on 2 CPU cores (shared)
    python studies/03_redistribution.py --distractor-prob 0.5 --out runs/studies/03_redistribution_distractors
                                          # 17 s; r's variance is no longer 0
"""

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

rudder = importlib.import_module("03_rudder")
seed_verdict = common.seed_verdict


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/03_redistribution", "output folder for figures and results.json")
    corridor: int = common.arg(30, "key-to-door corridor length (the delay)")
    distractor_prob: float = common.arg(0.0, "probability of a distractor reward per corridor step")
    inputs: str = common.arg("difference", "predictor input besides the action: the change of state "
                             "(RUDDER's choice) or the state itself", choices=("difference", "state"))
    seeds: int = common.arg(3, "return predictors, each with its own seed and stored episodes: the claims' seeds")
    steps: int = common.arg(800, "training steps of each predictor (the chapter's: 1,500; 3 of them must fit the time)")

    SMOKE = dict(corridor=5, seeds=2, steps=5)

    def __post_init__(self):
        common.require_positive(self, "corridor", "seeds", "steps")
        common.require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")


def chapter_args(args: Args, seed: int) -> "rudder.Args":
    """The chapter's predictor settings (its smoke settings in a smoke run) on this world, seeded."""
    settings = rudder.Args(seed=seed, smoke=args.smoke, corridor=args.corridor,
                           distractor_prob=args.distractor_prob, inputs=args.inputs, steps=args.steps)
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


def mean_square_future(rewards: torch.Tensor, pairs: torch.Tensor, num_pairs: int) -> float:
    """Σ_p n_p μ_p² / Σ_p n_p with μ_p = E[Σ_{k>t} r_k | (s_t, a_t) = p], over the pairs visited at
    least twice, each μ_p² estimated without bias as m_p² - v_p / n_p (m_p the mean of the n_p
    visits, v_p their unbiased variance: a pair is visited at most once per episode, so the visits
    are independent). 0 exactly when the expected future reward is 0 at every such pair; sampling
    noise averages out instead of adding up, as it would in a mean of |m_p|."""
    future = future_rewards(rewards).double()
    means, counts = pair_means(future, pairs, num_pairs)
    squares, _ = pair_means(future ** 2, pairs, num_pairs)
    twice = counts >= 2
    n, m = counts[twice].double(), means[twice]
    variance = (squares[twice] - m ** 2) * n / (n - 1)
    return float((n * (m ** 2 - variance / n)).sum() / n.sum())


def optimal_redistribution(env: common.KeyToDoor, episode: dict) -> torch.Tensor:
    """The exact optimal redistribution of the stored episodes, by dynamic programming on the true
    model: r̃*_t = r_t + V^π(s_{t+1}) - V^π(s_t), plus V^π(s_0) at the first step (π uniform, the
    episodes' policy; V of the terminal state 0). Σ_t r̃*_t = G, and after (s_t, a_t) it leaves
    E[Σ_{k>t} r_k] - E[V^π(s_{t+1})] = (Q^π - R) - (Q^π - R) = 0: RUDDER's definition of optimal."""
    P, R = env.model()
    V, _ = common.evaluate_policy(P, R, torch.full_like(R, 0.5), 1.0)
    V = V.to(episode["rewards"].device)
    optimal = episode["rewards"].double() + V[episode["next_states"]] - V[episode["states"]]
    optimal[0] += V[episode["states"][0]]
    return optimal


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
      where r̃ puts the credit: the spread (standard deviation) over episodes of r̃_t at each step t,
      what differs between episodes (r̃ only; the first step's mean return is the same for all),
      and its mean over episodes at each step (its size where nothing is decided);
      the expected future reward E[Σ_{k>t} r_k | s_t = s, a_t = a]: its largest size over the
      visited pairs (0: none left), and its mean square over the visits (mean_square_future), this
      also for the exact optimal redistribution r̃*;
      the Monte Carlo return-to-go's variance given (s_t, a_t), at the key step and over all steps
      (over all steps also for r̃*), and the immediate reward's, Var(r̃_t | s_t, a_t), over all steps
      (Monte Carlo's whole target once no future reward is expected);
      the optimal policy at the key room and its value by dynamic programming on the mean r̃ of
      each (s, a) (the redistributed MDP) and on the true model."""
    pairs, num_pairs = pair_index(episode), common.KeyToDoor.num_actions * (env.num_states + 1)
    out = {"reward_spread_by_step": redistributed.std(1).tolist(), "reward_mean_by_step": redistributed.mean(1).tolist()}
    for name, rewards in (("redistributed", redistributed), ("original", episode["rewards"])):
        means, counts = pair_means(future_rewards(rewards), pairs, num_pairs)
        out[f"expected_future_max[{name}]"] = float(means[counts > 0].abs().max())
        to_go = rewards.flip(0).cumsum(0).flip(0)  # Σ_{k≥t} r_k, the Monte Carlo target
        out[f"mc_variance_at_key[{name}]"] = conditional_variance(to_go[:1], pairs[:1], num_pairs)
    optimal = optimal_redistribution(env, episode)
    for name, rewards in (("redistributed", redistributed), ("original", episode["rewards"]), ("optimal", optimal)):
        out[f"future_mean_square[{name}]"] = mean_square_future(rewards, pairs, num_pairs)
        to_go = rewards.flip(0).cumsum(0).flip(0)
        out[f"mc_variance_all_steps[{name}]"] = conditional_variance(to_go, pairs, num_pairs)
        out[f"immediate_variance[{name}]"] = conditional_variance(rewards, pairs, num_pairs)
    P, R = env.model()
    mean_redistributed, counts = pair_means(redistributed.double().cpu(), pairs.cpu(), num_pairs)
    Qs = {}
    for name, table in (("redistributed", mean_redistributed.view(-1, common.KeyToDoor.num_actions)), ("original", R)):
        Qs[name] = optimal_q(P, table)
        out[f"optimal_key_action[{name}]"] = int(Qs[name][0].argmax())
        out[f"optimal_start_value[{name}]"] = float(Qs[name][0].max())
    # every state the episodes reach with both actions where the true choice matters (the actions' Q* differ)
    both = counts.view(-1, common.KeyToDoor.num_actions).gt(0).all(1)
    true_Q = Qs["original"][:len(both)]
    decisive = both & (true_Q[:, 1] - true_Q[:, 0]).abs().gt(1e-9)
    out["decisive_states"] = int(decisive.sum())
    out["decisive_states_agree"] = int((Qs["redistributed"][:len(both)].argmax(1) == true_Q.argmax(1))[decisive].sum())
    return out


def position_potential(P: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """The potential of the position alone (the same for both has_key states of a position; the
    terminal's 0) that leaves the least largest expected future reward. After shaping, that future
    is E[Σ_{k>t} r'_k | s, a] = Σ_s' P(s'|s, a) (V^π(s') - Φ(s')); key-to-door's moves are certain,
    so it is V^π - Φ at the one next state, and at each position the midpoint of the values of its
    states that some (s, a) reaches leaves half their range, the least any one number can."""
    n = len(P) - 1
    reached = P[:n].amax((0, 1)) > 0  # the states some non-terminal (s, a) leads to
    potential = torch.zeros_like(V)
    for position in range(n // 2):
        states = torch.arange(2 * position, 2 * position + 2)
        values = V[states][reached[states]]
        if len(values):
            potential[states] = (values.max() + values.min()) / 2
    return potential


def shaping_future(P: torch.Tensor, R: torch.Tensor, potential: torch.Tensor) -> torch.Tensor:
    """E[Σ_{k>t} r'_k | s_t, a_t] at each non-terminal pair after shaping with `potential`, π
    uniform: Q^π' - R' by exact policy evaluation."""
    shaped = potential_shaping(P, R, potential)
    _, Q = common.evaluate_policy(P, shaped, torch.full_like(R, 0.5), 1.0)
    return (Q - shaped)[:-1]


def shaping_future_max(P: torch.Tensor, R: torch.Tensor, potential: torch.Tensor) -> float:
    """The largest |E[Σ_{k>t} r'_k | s_t, a_t]| over the non-terminal pairs after shaping with `potential`."""
    return float(shaping_future(P, R, potential).abs().max())


def shaping_study(args: Args, seed: int) -> dict:
    """Potential-based shaping by exact dynamic programming on key-to-door (γ = 1): with a random
    Φ, does Q* keep its argmax, and is Q*' = Q* - Φ(s) (Ng et al. 1999)? With Φ = V^π (π uniform),
    which sees the key, with the random Φ, and with the best Φ of the position alone, what future
    reward does the shaped MDP still expect after each (s, a)? (Φ = V^π is the exact optimal
    redistribution r̃*.) And is that future Σ_s' P(s'|s, a) (V^π(s') - Φ(s')) (checked on the random
    Φ)? Then Φ = V^π, at every state some pair reaches, is the one potential that leaves none."""
    env = common.KeyToDoor(1, corridor=args.corridor, distractor_prob=args.distractor_prob)
    P, R = env.model()
    potential = torch.randn(len(P), generator=torch.Generator().manual_seed(seed), dtype=R.dtype)
    potential[-1] = 0.0  # the terminal state's
    Q, shaped = optimal_q(P, R), optimal_q(P, potential_shaping(P, R, potential))
    decisive = (Q.max(1).values - Q.min(1).values) > 1e-9  # where the choice matters at all
    V, _ = common.evaluate_policy(P, R, torch.full_like(R, 0.5), 1.0)
    # shaping with Φ shifts V^π to V^π - Φ, so the future after (s, a) is Σ_s' P(s'|s, a) (V^π(s') - Φ(s'))
    formula = torch.einsum("sat,t->sa", P, V - potential)[:-1]
    return {"decisive_states": int(decisive.sum()),
            "argmax_kept": bool((Q.argmax(1) == shaped.argmax(1))[decisive].all()),
            "identity_gap": float((shaped - (Q - potential[:, None])).abs().max()),
            "value_potential_future_max": shaping_future_max(P, R, V),
            "random_potential_future_max": shaping_future_max(P, R, potential),
            "future_formula_gap": float((shaping_future(P, R, potential) - formula).abs().max()),
            "position_potential_future_min": shaping_future_max(P, R, position_potential(P, V))}


# ============================================================================================
# Claims and main
# ============================================================================================
SCALARS = ("expected_future_max", "future_mean_square", "mc_variance_at_key", "mc_variance_all_steps",
           "immediate_variance", "optimal_key_action", "optimal_start_value")


NOT_SHOWN_OPTIMAL = ("the learned redistribution is not shown optimal (RUDDER calls a redistribution optimal "
                     "when its expected future reward is zero, and the learned one's is not shown zero)")
DETERMINISTIC = ("premise not met: the stored world is deterministic given (s_t, a_t), so r's variance is already 0 "
                 "(--distractor-prob 0.5 adds noise)")


def future_reward_verdict(seeds: list[dict], seeds_text: str) -> tuple[bool | None, bool | None, str]:
    """Does an optimal redistribution leave zero expected future reward? Per seed, the mean square
    of E[Σ_{k>t} r̃_k | s_t, a_t] over the visits (mean_square_future): for the learned r̃, for
    the exact optimal r̃* (dynamic programming on the true model, same episodes) and for r. Zero
    (common.seed_verdict): the interval over the seeds holds 0 and lies below the half-width of
    r's own interval, the resolution at which these seeds measure an expected future at all.
    "Shown optimal" is RUDDER's definition, so it is the learned r̃ shown zero; where it is not,
    the premise is not met (a predictor that falls short says nothing of the optimum). No: the
    exact optimum, optimal by construction, is shown to leave some. Returns the verdict, whether
    the learned r̃ is shown optimal, and the measured text (less the premise's words)."""
    learned, exact, original = (np.array([seed[f"future_mean_square[{name}]"] for seed in seeds])
                                for name in ("redistributed", "optimal", "original"))
    _, low, high = common.mean_interval(original)
    resolution = (high - low) / 2
    shown, learned_text = seed_verdict(learned, zero_below=resolution)
    exact_zero, exact_text = seed_verdict(exact, zero_below=resolution)
    _, original_text = seed_verdict(original)
    text = (f"the mean square of E[Σ_{{k>t}} r̃_k | s_t, a_t] over the visits of each (s, a) (pairs visited twice or "
            f"more, each square without its sampling bias), mean [95% interval] over {seeds_text}: learned r̃ "
            f"{learned_text}, the exact optimal r̃* (dynamic programming on the true model, same episodes) "
            f"{exact_text}, r {original_text}; zero where the interval holds 0 and stays below r's half-width "
            f"{resolution:.2g} (the seeds' own spread)")
    if exact_zero is False:
        return False, shown, text
    return (True, shown, text) if shown else (None, shown, text)


def immediate_variance_verdict(seeds: list[dict], seeds_text: str) -> tuple[bool | None, str]:
    """Monte Carlo under the exact optimal redistribution r̃*: no future reward is expected after
    (s_t, a_t), so Q(s_t, a_t) = E[r̃*_t | s_t, a_t] and r̃*_t alone is the target to average. Per
    seed, over all steps, r's reward-to-go variance given (s_t, a_t) minus r̃*_t's: below where the
    interval over the seeds lies above 0 (common.seed_verdict); premise not met where r's is 0."""
    original, optimal, learned = (np.array([seed[key] for seed in seeds]) for key in (
        "mc_variance_all_steps[original]", "immediate_variance[optimal]", "immediate_variance[redistributed]"))
    below, text = seed_verdict(original - optimal)
    measured = (f"Monte Carlo's target for Q(s_t, a_t), over all steps, mean of the {seeds_text}: with r, the "
                f"reward-to-go, E[Var(Σ_{{k≥t}} r_k | s_t, a_t)] {original.mean():.2g}; under the exact optimal "
                f"redistribution r̃* (dynamic programming on the true model, same episodes), whose expected future "
                f"reward is zero by construction, so Q(s_t, a_t) = E[r̃*_t | s_t, a_t], r̃*_t alone: "
                f"E[Var(r̃*_t | s_t, a_t)] {optimal.mean():.2g} (the learned r̃'s r̃_t: {learned.mean():.2g}); r's "
                f"minus r̃*'s per seed, mean [95% interval]: {text}; below where the interval lies above 0")
    if original.mean() < 1e-9:
        return None, f"{DETERMINISTIC}. {measured}"
    return below, measured


def redistribution_claims(seeds: list[dict], shaping: dict) -> tuple[dict, list[dict]]:
    """The survey's promises for an optimal redistribution, on each seed's stored episodes and
    predictor, decided over the seeds (common.seed_verdict); potential-based shaping by exact
    dynamic programming. Metrics: each property's mean over the seeds."""
    metrics = {f"{k}[{name}]": float(np.mean([seed[f"{k}[{name}]"] for seed in seeds]))
               for k in SCALARS for name in ("redistributed", "original")}
    for k in ("future_mean_square", "mc_variance_all_steps", "immediate_variance"):
        metrics[f"{k}[optimal]"] = float(np.mean([seed[f"{k}[optimal]"] for seed in seeds]))
    metrics.update({f"shaping_{k}": v for k, v in shaping.items()})
    n, seeds_text = len(seeds), f"{len(seeds)} seeds (each its own episodes and predictor)"
    # where r̃ puts the credit: the key step against the largest elsewhere
    sizes = np.array([seed["reward_spread_by_step"] for seed in seeds])
    piles_up, pile_text = seed_verdict(sizes[:, 0] - sizes[:, 1:].max(1))
    # and its size elsewhere: per seed, the mean r̃_t (sign kept) at the step t ≥ 1 where it is largest
    means = np.array([seed["reward_mean_by_step"] for seed in seeds])[:, 1:]
    largest = means[np.arange(n), np.abs(means).argmax(1)]
    near_zero, zero_text = seed_verdict(largest, zero_below=sizes[:, 0].mean())
    jump = False if False in (piles_up, near_zero) else None if None in (piles_up, near_zero) else True
    zero, shown, left = future_reward_verdict(seeds, seeds_text)
    premise = f"premise not met: {NOT_SHOWN_OPTIMAL}. " if zero is None else ""
    # Monte Carlo's variance, the learned r̃ against the exact optimal r̃*: if optimal meant minimal, they would
    # agree (the learned one is optimal only where shown so); r's variance is the scale
    steps, optimum, steps_r = (metrics[f"mc_variance_all_steps[{name}]"]
                               for name in ("redistributed", "optimal", "original"))
    minimal, minimal_text = seed_verdict([s["mc_variance_all_steps[redistributed]"] - s["mc_variance_all_steps[optimal]"]
                                          for s in seeds], zero_below=steps_r)
    variance = (f"Var(Σ_{{k≥t}} r_k | s_t, a_t), mean of the {seeds_text}: key step r̃ vs r "
                f"{metrics['mc_variance_at_key[redistributed]']:.2g} vs {metrics['mc_variance_at_key[original]']:.2g} "
                f"(equal by construction: Σ r̃ = G); all steps, learned r̃ {steps:.2g}, exact optimal r̃* (dynamic "
                f"programming on the true model, same episodes) {optimum:.2g}, r {steps_r:.2g}")
    if steps_r < 1e-9:
        minimal, variance = None, f"{DETERMINISTIC}. {variance}"
    else:
        variance += (f"; the learned r̃'s minus r̃*'s over all steps per seed, mean [95% interval]: {minimal_text}; "
                     "minimal where the interval holds 0 and stays below r's variance; where it excludes 0, two "
                     "redistributions both shown optimal differ, so being optimal does not make it minimal")
    if shown is not True and minimal is not None:  # "minimal" is said of an optimal redistribution
        minimal, variance = None, f"premise not met: {NOT_SHOWN_OPTIMAL}. {variance}"
    below, immediate = immediate_variance_verdict(seeds, seeds_text)
    keeps = shaping["argmax_kept"] and shaping["identity_gap"] < 1e-9
    position, by_value = shaping["position_potential_future_min"], shaping["value_potential_future_max"]
    generic, formula_gap = shaping["random_potential_future_max"], shaping["future_formula_gap"]
    # exact values: a generic Φ (the random one) leaves some future reward, Φ = V^π (r̃*) none, and the
    # future any Φ leaves is Σ_s' P(s'|s, a) (V^π(s') - Φ(s')), so V^π is the one Φ that leaves none
    only_value = keeps and generic > 1e-9 and by_value <= 1e-9 and formula_gap <= 1e-9
    actions = [seed["optimal_key_action[redistributed]"] for seed in seeds]
    truth = seeds[0]["optimal_key_action[original]"]
    claims = [
        common.claim("survey §5", "the return predictor's jump, and so the redistributed reward, sits "
                     "at the decisive step and is near zero elsewhere",
                     f"the spread of r̃_t over the episodes (its standard deviation: what differs between them), "
                     f"mean of the {seeds_text}: key step {sizes[:, 0].mean():.3g}, largest elsewhere "
                     f"{sizes[:, 1:].max(1).mean():.2g}; the key step's minus the largest elsewhere per seed, mean "
                     f"[95% interval]: {pile_text}; the mean r̃_t at the step t ≥ 1 where it is largest (sign kept) "
                     f"per seed: {zero_text}, near zero where the interval holds 0 and stays below the key step's "
                     f"spread {sizes[:, 0].mean():.3g}", jump),
        common.claim("survey §4.1.2, §5", "an optimal redistribution makes the expected future reward zero everywhere",
                     premise + left, zero),
        common.claim("survey §4.1.2, §5", "in the redistributed MDP, TD is unbiased",
                     f"{premise}a one-step target r̃_t + Q(s_{{t+1}}) with Q not yet learned (0) is off from Q by "
                     f"the expected future reward: {left}", zero),
        common.claim("survey §4.1.2, §5", "in the redistributed MDP, Monte Carlo's variance is minimal", variance,
                     minimal),
        common.claim("survey §4.1.2, §5", "an optimal redistribution leaves Monte Carlo only the immediate reward to "
                     "average: its variance, Var(r̃*_t | s, a), is below the original reward-to-go's "
                     "Var(Σ_{k≥t} r_k | s, a)", immediate, below),
        common.claim("survey §4.1.2", "the redistributed MDP has the same optimal policy",
                     f"dynamic programming on the mean r̃ of each (s, a) vs the true model, each of {n} seeds: optimal "
                     f"action in the key room {actions} vs {truth} (1: take the key); at every state the episodes "
                     f"reach with both actions where the true choice matters, the same best action in "
                     f"{[s['decisive_states_agree'] for s in seeds]} of {[s['decisive_states'] for s in seeds]} "
                     f"states; optimal value {metrics['optimal_start_value[redistributed]']:.3f} vs "
                     f"{metrics['optimal_start_value[original]']:.3f} (mean of the seeds)",
                     all(a == truth for a in actions)
                     and all(s["decisive_states_agree"] == s["decisive_states"] for s in seeds)),
        common.claim("survey §4.1.2 (Ng et al. 1999)", "potential-based shaping Φ(s') - Φ(s) preserves the optimal policy",
              f"exact dynamic programming, key-to-door, a random Φ: argmax Q* kept in all "
              f"{shaping['decisive_states']} states where the choice matters: {'yes' if shaping['argmax_kept'] else 'no'}; "
              f"largest |Q*' - (Q* - Φ(s))| {shaping['identity_gap']:.1e}",
              keeps),
        common.claim("survey §4.1.2", "potential-based shaping guarantees only the optimal policy: a generic potential "
              "leaves non-zero expected future reward, and zero needs the one potential Φ = V^π, which an optimal "
              "redistribution supplies",
              f"exact dynamic programming, key-to-door, π uniform: the optimal policy kept (claim above): "
              f"{'yes' if keeps else 'no'}; the largest |E[Σ_{{k>t}} r'_k | s_t, a_t]| that shaping leaves: the "
              f"random Φ above {generic:.3g}; Φ = V^π, the exact optimal redistribution r̃* (plus V^π(s_0) at the "
              f"first step) {by_value:.1e}; the future any Φ leaves is Σ_s' P(s'|s, a) (V^π(s') - Φ(s')) (largest "
              f"gap on the random Φ {formula_gap:.1e}), so none is left only where Φ = V^π at every state some "
              f"(s, a) reaches; for context, the best Φ of the position alone (blind to the key) {position:.3g}; "
              "zero below 1e-9 (float precision)", only_value),
    ]
    return metrics, claims


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    torch.set_num_threads(1)  # a small model on small batches: threads only wait on each other
    print(f"03 study: redistribution and shaping on key-to-door, L = {args.corridor}, {args.seeds} seeds, "
          f"device {device}")
    seeds = []
    for i in range(args.seeds):  # each seed: its own stored episodes and return predictor
        predictor = rudder.predictor_study(chapter_args(args, args.seed + i), device)
        seeds.append(redistribution_properties(predictor["env"], predictor["episode"], predictor["redistributed"]))
    shaping = shaping_study(args, args.seed)
    metrics, claims = redistribution_claims(seeds, shaping)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims)
    print(common.format_table([[k, v] for k, v in metrics.items()], ["metric", "value"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
