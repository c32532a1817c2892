"""02 study — does the estimator matter for learning? A tabular actor-critic with MC, GAE and TD(0).

The actor is a softmax over tabular logits, stepped along Σ_t Ψ_t ∇log π(a_t|s_t) with
Ψ = GAE(γ = 1, λ): MC at λ = 1, TD(0) at λ = 0, GAE in between. The critic is a tabular V moved
toward the λ-return Ψ + V. Measured: episodes until π(take key | key room) reaches --success, for
each corridor length L, against the survey's §2.1 claim that small value errors compound when
bootstrapped over long horizons (TD(0)'s cost should grow with L faster than MC's); the policy
held uniform, TD(0)'s error at the key room against the exact value after --eval-episodes
episodes, started from the exact values plus a small error and from the exact values alone (the
part the small errors cause, as L grows; MC beside it); and, against §2.3's claim that TD
bootstrapping fails when most states' estimated value is near zero, TD(0)'s episodes to solve
with its critic started at V = 0 (every state), at the exact V^π, and at V^π shuffled over the
states (wrong, but not near zero), the delay held fixed; and whether a run from V = 0 fails
outright (ends at the budget unsolved). Last, against RUDDER's theorem (survey §5) that TD needs
time exponential in the delay to remove its bias: the policy held uniform, the episodes until
TD(0)'s critic, started at V = 0, has halved its bias at the key room, fitted per seed as an
exponential in L and as a power of L (common.exponential_growth, as 03_rudder.py's claims are).
Read beside: credit-assignment-problem-survey.txt §2.1, §2.3, §4.1.1, §5.

    python studies/02_learning.py        # runs/studies/02_learning/
    # noisy rewards: does MC still learn?
    python studies/02_learning.py --noise 0.5 --out runs/studies/02_learning_noise

The default run took 98 s on 2 CPU cores (one thread; the noise run 137 s, the machine shared).

Figure: episodes_to_solve.png (episodes to success vs L, median and spread over seeds).
"""

import importlib
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

gae = importlib.import_module("02_gae")


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/02_learning", "output folder for figures and results.json")
    lengths: str = common.arg("5,10,20,40,80", "corridor lengths L (the delay), comma-separated", item=int)
    distractor_prob: float = common.arg(0.5, "probability of a distractor reward at each corridor step")
    distractor: float = common.arg(0.2, "size of a distractor reward (the key is worth 1)")
    noise: float = common.arg(0.0, "std of Gaussian noise added to every reward")
    learn_seeds: int = common.arg(5, "seeds per (estimator, L)")
    batch: int = common.arg(16, "episodes per actor-critic update")
    max_episodes: int = common.arg(20_000, "actor-critic budget; unsolved runs count as this")
    actor_lr: float = common.arg(0.1, "actor step size (SGD on the tabular logits)")
    critic_lr: float = common.arg(0.2, "critic step size (tabular V)")
    gae_lambda: float = common.arg(0.9, "λ of the GAE learner")
    success: float = common.arg(0.9, "solved once π(take key | key room) reaches this")
    eval_episodes: int = common.arg(800, "policy evaluation alone: episodes the critic learns from, the policy fixed")
    initial_error: float = common.arg(0.1, "policy evaluation alone: std of the small error each state's value starts "
                                      "with, around the exact value")

    SMOKE = dict(lengths="3,6", learn_seeds=2, max_episodes=64, batch=8, eval_episodes=32)

    def __post_init__(self):
        common.require_positive(self, "learn_seeds", "batch", "max_episodes", "actor_lr", "critic_lr", "eval_episodes")
        common.require(self.initial_error >= 0, "--initial-error must be non-negative")
        common.require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")
        common.require(self.noise >= 0, "--noise must be non-negative")
        common.require(0 <= self.gae_lambda <= 1, "--gae-lambda must be in [0, 1]")
        common.require(0 < self.success < 1, "--success must be in (0, 1)")
        common.require(all(L >= 1 for L in self.length_list), "--lengths must be positive integers")

    @property
    def length_list(self) -> list[int]:
        return common.as_list(self.lengths, int)


def critic_step(V: torch.Tensor, states: torch.Tensor, advantages: torch.Tensor, lr: float) -> None:
    """V(s) += lr · the mean over the batch's visits of s of (λ-return - V(s)) = Ψ_t, in place."""
    visits = torch.bincount(states.flatten(), minlength=len(V)).clamp(min=1)
    V += lr * torch.zeros_like(V).index_add_(0, states.flatten(), advantages.flatten()) / visits


def evaluation_error(args: Args, L: int, lam: float, seed: int, device) -> float:
    """Policy evaluation alone: the uniform policy held fixed, the tabular critic started at the
    exact V^π (dynamic programming on the model) plus a small error of std --initial-error on
    every state but the terminal one, then moved toward its λ-return (actor_critic's critic) for
    --eval-episodes episodes; its squared error at the key room against V^π."""
    common.seed_everything(seed)
    env = gae.make_env(args, L, args.batch, seed, device)
    policy = gae.uniform_policy(env)
    truth, _ = gae.exact_truth(env, policy, 1.0)
    error = args.initial_error * torch.randn(len(truth), generator=torch.Generator().manual_seed(seed)).to(device)
    V = truth + error * (torch.arange(len(truth), device=device) < env.num_states)
    for _ in range(args.eval_episodes // args.batch):
        evaluation_step(env, policy, V, lam, args.critic_lr)
    return float((V[0] - truth[0]) ** 2)


def evaluation_step(env, policy: torch.Tensor, V: torch.Tensor, lam: float, lr: float) -> None:
    """One batch of episodes under the fixed `policy`, and the critic's step toward their λ-return."""
    episode = common.play_episodes(env, policy)
    s = episode["states"]
    critic_step(V, s, gae.gae(episode["rewards"], V[s], V[episode["next_states"]], episode["ends"], 1.0, lam), lr)


def bias_removal_time(args: Args, L: int, seed: int, device) -> int:
    """Policy evaluation alone, the uniform policy held fixed, the tabular TD(0) critic started at
    V = 0 (its bias at the key room is all of V^π there): the episodes until that bias is halved,
    |V - V^π| ≤ |V^π| / 2 at the key room (args.max_episodes if never)."""
    common.seed_everything(seed)
    env = gae.make_env(args, L, args.batch, seed, device)
    policy = gae.uniform_policy(env)
    truth = float(gae.exact_truth(env, policy, 1.0)[0][0])
    V = torch.zeros(env.num_states + 1, device=device)
    for episodes in range(args.batch, args.max_episodes + 1, args.batch):
        evaluation_step(env, policy, V, 0.0, args.critic_lr)
        if abs(float(V[0]) - truth) <= abs(truth) / 2:
            return episodes
    return args.max_episodes


STARTS = ("zero", "exact", "shuffled")  # the critic's first values (start_values)


def start_values(env, start: str, seed: int) -> torch.Tensor:
    """The critic's start: "zero" on every state (nothing to bootstrap from), "exact", the V^π of
    the actor's first policy, the uniform one (dynamic programming on the model), or "shuffled",
    those exact values permuted over the non-terminal states: wrong, but not near zero (the
    control that tells "near zero" from "not the truth")."""
    if start == "zero":
        return torch.zeros(env.num_states + 1, device=env.device)
    V = gae.exact_truth(env, gae.uniform_policy(env), 1.0)[0].clone()
    if start == "shuffled":
        V[:env.num_states] = V[torch.randperm(env.num_states, generator=torch.Generator().manual_seed(seed))]
    return V


def actor_critic(args: Args, L: int, lam: float, seed: int, device, start: str = "zero") -> int:
    """Episodes until π(take key | key room) ≥ args.success (args.max_episodes if never).

    Actor: softmax over tabular logits, policy-gradient step with Ψ = GAE(γ=1, λ).
    Critic: tabular V moved toward the λ-return Ψ + V (MC target at λ = 1, TD(0) at λ = 0),
    started at `start` (start_values).
    """
    common.seed_everything(seed)
    env = gae.make_env(args, L, args.batch, seed, device)
    logits = torch.zeros(env.num_states + 1, 2, device=device, requires_grad=True)
    V = start_values(env, start, seed)
    actor = torch.optim.SGD([logits], lr=args.actor_lr)
    for episodes in range(args.batch, args.max_episodes + 1, args.batch):
        episode = common.play_episodes(env, torch.softmax(logits.detach(), 1))
        s, a = episode["states"], episode["actions"]
        advantages = gae.gae(episode["rewards"], V[s], V[episode["next_states"]], episode["ends"], 1.0, lam)
        logp = torch.log_softmax(logits, 1)[s, a]
        actor.zero_grad()
        # sum over steps, mean over episodes: the key step's share does not shrink with L
        (-(logp * advantages).sum(0).mean()).backward()
        actor.step()
        critic_step(V, s, advantages, args.critic_lr)
        if torch.softmax(logits.detach()[0], 0)[1] >= args.success:
            return episodes
    return args.max_episodes


def learning_study(args: Args, device) -> dict:
    """{learner: {L: episodes to solve, one per seed}} for MC, GAE(--gae-lambda) and TD(0)."""
    learners = {"MC (λ=1)": 1.0, f"GAE (λ={args.gae_lambda:g})": args.gae_lambda, "TD(0) (λ=0)": 0.0}
    results = {}
    runs = [(name, lam, L) for name, lam in learners.items() for L in args.length_list]
    for name, lam, L in tqdm(runs, desc="actor-critic", leave=False):
        results.setdefault(name, {})[L] = [actor_critic(args, L, lam, args.seed + i, device)
                                           for i in range(args.learn_seeds)]
    return results


def start_study(args: Args, device) -> dict:
    """{start: {L: episodes to solve, one per seed}} for TD(0) with its critic started at the exact
    V^π and at V^π shuffled over the states (from zero is learning_study's TD(0))."""
    return {start: {L: [actor_critic(args, L, 0.0, args.seed + i, device, start) for i in range(args.learn_seeds)]
                    for L in tqdm(args.length_list, desc=f"TD(0) from {start} values", leave=False)}
            for start in STARTS[1:]}


def bias_time_study(args: Args, device) -> dict:
    """{L: TD(0)'s episodes to halve its bias at the key room, one per seed}."""
    return {L: [bias_removal_time(args, L, args.seed + i, device) for i in range(args.learn_seeds)]
            for L in tqdm(args.length_list, desc="TD(0)'s bias", leave=False)}


TD_EXACT = "TD(0) (λ=0) from V^π exactly"  # policy evaluation's TD(0) without the small initial error


def evaluation_study(args: Args, device) -> dict:
    """{learner: {L: the critic's squared error at the key room, one per seed}} for MC and TD(0)
    started from V^π plus the small error, and TD(0) started from V^π exactly (the same episodes)."""
    arms = (("MC (λ=1)", args, 1.0), ("TD(0) (λ=0)", args, 0.0), (TD_EXACT, replace(args, initial_error=0.0), 0.0))
    return {name: {L: [evaluation_error(setting, L, lam, args.seed + i, device) for i in range(args.learn_seeds)]
                   for L in args.length_list} for name, setting, lam in arms}


def plot_learning(learning: dict, lengths: list[int], path):
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    common.plot_curves(ax, np.array(lengths), {name: np.array([by_L[L] for L in lengths]).T
                                              for name, by_L in learning.items()})
    ax.set(xlabel="corridor length L", ylabel="episodes to 90% success",
           title="Tabular actor-critic: who learns the key fastest?")
    common.save_figure(fig, path)


def learning_claims(learning: dict, lengths: list[int], budget: int) -> list[dict]:
    """Does bootstrapping's cost grow with the delay faster than Monte Carlo's (survey §2.1)? Per
    seed, TD(0)'s growth in episodes to solve from the shortest L to the longest minus MC's, decided
    over the seeds (common.seed_verdict). A run that never solves counts as the budget: a growth
    censored there is a lower bound, so it can confirm a gap (TD's) or refute one (MC's), no more."""
    statement = "small value errors compound when bootstrapped over long horizons"
    td, mc = "TD(0) (λ=0)", "MC (λ=1)"
    short, long = min(lengths), max(lengths)
    if len(lengths) < 2 or max(max(learning[td][short]), max(learning[mc][short])) >= budget:
        return [common.claim("survey §2.1", statement, "needs two corridor lengths, and MC and TD(0) solved at the "
                             f"shortest within the budget of {budget:,} episodes", None)]
    growth = {name: np.divide(by_L[long], by_L[short]) for name, by_L in learning.items()}
    holds, gap = common.seed_verdict(growth[td] - growth[mc])
    censored = {name: max(by_L[long]) >= budget for name, by_L in learning.items()}
    if (censored[td] and holds is not True) or (censored[mc] and holds is not False):
        holds = None
    measured = (f"median episodes to solve, L = {short} → {long}: "
                + ", ".join(f"{name} {np.median(by_L[short]):,.0f} → {np.median(by_L[long]):,.0f} "
                            f"({'≥ ' if censored[name] else ''}{np.median(by_L[long]) / np.median(by_L[short]):.1f}x)"
                            for name, by_L in learning.items())
                + f"; TD(0)'s growth minus MC's per seed, mean [95% interval over {len(growth[td])} seeds]: {gap}"
                + (" (a run at the budget: censored)" if censored[td] or censored[mc] else ""))
    return [common.claim("survey §2.1", statement, measured, holds)]


def compounding_claim(errors: dict, lengths: list[int], episodes: int) -> dict:
    """Survey §2.1 on the value itself: does the small initial errors' effect on TD(0) grow with
    the horizon? Per seed, TD(0)'s squared error at the key room started from V^π plus the small
    error minus started from V^π exactly, on the same episodes (the part the small errors cause),
    at the longest L minus at the shortest (> 0: they compound), decided over the seeds. MC, whose
    error comes from its returns' variance, is context only."""
    td = "TD(0) (λ=0)"
    short, long = min(lengths), max(lengths)
    caused = {L: np.subtract(errors[td][L], errors[TD_EXACT][L]) for L in (short, long)}
    holds, text = common.seed_verdict(caused[long] - caused[short])
    return common.claim(
        "survey §2.1", "small value errors compound when bootstrapped over long horizons: from the exact values plus "
        "a small error on every state, the part of TD(0)'s error at the decisive state that the small errors cause, "
        "after the same episodes of policy evaluation, grows with the horizon",
        f"squared error of V(key room) against the exact V^π (uniform policy) after {episodes:,} episodes, mean of "
        f"the seeds, L = {short} → {long}: " + ", ".join(f"{name} {np.mean(by_L[short]):.3g} → "
                                                   f"{np.mean(by_L[long]):.3g}" for name, by_L in errors.items())
        + f"; the small errors' part (TD(0) minus TD(0) from V^π exactly) {np.mean(caused[short]):.3g} → "
        f"{np.mean(caused[long]):.3g}; its growth per seed, mean [95% interval over {len(caused[long])} seeds]: {text}"
        + ("" if len(lengths) > 1 else "; needs two corridor lengths"), holds if len(lengths) > 1 else None)


def slower(first: list[float], second: list[float], budget: int) -> tuple[bool | None, str]:
    """Does `first` need more episodes than `second`? Per seed, first minus second, decided over the
    seeds. A run at the budget is a lower bound: in `first` it can confirm the gap, in `second`
    refute it, no more."""
    holds, gap = common.seed_verdict(np.subtract(first, second))
    if max(first) < budget and max(second) < budget:
        return holds, gap
    censored = (max(first) >= budget and holds is not True) or (max(second) >= budget and holds is not False)
    return None if censored else holds, f"{gap} (a run at the budget: censored)"


def near_zero_claims(from_zero: dict, starts: dict, lengths: list[int], budget: int) -> list[dict]:
    """Survey §2.3: does TD bootstrapping fail when most states' estimated value is near zero,
    leaving nothing meaningful to bootstrap from? The delay held fixed (the longest L), TD(0)'s
    episodes to solve with its critic started at V = 0 against started at the exact V^π (does the
    near-zero start cost episodes?), and against V^π shuffled over the states (as far from the
    truth, but not near zero: is it the zeros, rather than any wrong values, that cost them?).
    Outright: does a run from V = 0 end at the budget unsolved (exact counts)?"""
    long, n = max(lengths), len(from_zero[max(lengths)])
    than_exact, exact_gap = slower(from_zero[long], starts["exact"][long], budget)
    than_shuffled, shuffled_gap = slower(from_zero[long], starts["shuffled"][long], budget)
    medians = "; ".join(f"L = {L}: from V = 0 {seed_spread(from_zero[L])}, from V^π {seed_spread(starts['exact'][L])}, "
                        f"from V^π shuffled {seed_spread(starts['shuffled'][L])}" for L in lengths)
    episodes = f"TD(0)'s episodes to solve, median (range) of the seeds, {medians}; at L = {long}, per seed, mean [95% " \
               f"interval over {n} seeds]: "
    unsolved = {L: sum(e >= budget for e in from_zero[L]) for L in lengths}
    fails = True if unsolved[long] == n else False if not any(unsolved.values()) else None
    solved = [e for by_seed in from_zero.values() for e in by_seed if e < budget]
    return [common.claim(
        "survey §2.3", "TD bootstrapping struggles when most states have near-zero estimated value: started from V = 0 "
        "(every state's estimate zero), the TD(0) actor-critic needs more episodes to learn to take the key than "
        "started from the exact values V^π, at the same corridor length",
        f"{episodes}from V = 0 minus from V^π {exact_gap}", than_exact),
        common.claim(
        "survey §2.3", "near-zero estimates leave TD nothing meaningful to bootstrap from: started from V = 0, the "
        "TD(0) actor-critic needs more episodes to learn to take the key than started from the exact values shuffled "
        "over the states (wrong, but not near zero), at the same corridor length",
        f"{episodes}from V = 0 minus from V^π shuffled {shuffled_gap}", than_shuffled),
        common.claim(
        "survey §2.3", f"TD bootstrapping fails outright when most states have near-zero estimated value: started from "
        f"V = 0, the TD(0) actor-critic does not learn to take the key within the budget of {budget:,} episodes",
        "runs from V = 0 unsolved at the budget, by L: " + ", ".join(f"{L}: {unsolved[L]} of {n}" for L in lengths)
        + (f"; the slowest solved run took {max(solved):,} episodes" if solved else ""), fails)]


def delay_branching(args: Args, L: int, device) -> int:
    """The most next states any state past the key room can lead to (KeyToDoor's states 2, 3, ...
    are the corridor and the door, 2 · position + has_key), from the exact model: 1 means the
    delay is one path."""
    P, _ = gae.make_env(args, L, 1, args.seed, device).model()
    return int((P[2:-1] > 0).any(1).sum(-1).max())


def exponential_time_claim(times: dict, lengths: list[int], budget: int, branching: int) -> dict:
    """Survey §5 (RUDDER's theorem): does the time TD needs to remove its bias grow exponentially
    with the delay? The episodes to halve it, {L: one per seed}, fitted per seed as an exponential
    in L and as a power of L (common.exponential_growth, the rule 03_rudder.py's delay claims use).
    Where the delay is one path (`branching` 1), TD(0)'s bias moves back one state per update and
    its time grows linearly by construction: the theorem's exponential comes from delays that
    branch, so the premise is not met there (the fit is shown, not decided)."""
    censored = sum(e >= budget for L in lengths for e in times[L])
    holds, text = common.exponential_growth(lengths, times, censored)
    one_path = ("premise not met: past the key room every state leads to one next state (the model's most, "
                f"{branching}), so TD(0)'s bias moves back one state per update and its time grows linearly by "
                "construction; the exponential needs a delay that branches. ") if branching == 1 else ""
    return common.claim(
        "survey §5 (RUDDER paper's theorem)", "TD needs time exponential in the delay to remove its bias: with the "
        "policy held fixed and the critic started at V = 0, the episodes TD(0) needs to halve its bias at the key room "
        "grow exponentially with the corridor length L",
        f"{one_path}episodes to halve the bias, median (range) of the seeds, by L: "
        + ", ".join(f"{L}: {seed_spread(times[L])}" for L in lengths) + f"; {text}"
        + (f"; {censored} runs at the budget: censored" if censored else ""),
        None if one_path else holds)


def seed_spread(values: list[float]) -> str:
    """The median of the seeds' values, with their range where they differ: "992", or "992 (960-1,200)"."""
    low, high = min(values), max(values)
    return f"{np.median(values):,.0f}" + ("" if low == high else f" ({low:,.0f}-{high:,.0f})")


def learning_table(learning: dict, lengths: list[int]) -> dict:
    """Episodes to solve per L (rows) and learner (columns): the median of the seeds, and their range."""
    rows = [[L, *(seed_spread(by_L[L]) for by_L in learning.values())] for L in lengths]
    return {"header": ["L", *learning], "rows": rows}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"02 study: a tabular actor-critic on key-to-door, L in {args.length_list}, device {device}")
    learning = learning_study(args, device)
    plot_learning(learning, args.length_list, out / "episodes_to_solve.png")

    starts = start_study(args, device)
    errors = evaluation_study(args, device)
    bias_times = bias_time_study(args, device)
    claims = learning_claims(learning, args.length_list, args.max_episodes) + [
        compounding_claim(errors, args.length_list, args.eval_episodes),
        *near_zero_claims(learning["TD(0) (λ=0)"], starts, args.length_list, args.max_episodes),
        exponential_time_claim(bias_times, args.length_list, args.max_episodes,
                               delay_branching(args, max(args.length_list), device))]
    metrics = {f"L{L}_episodes_to_solve[{name}]": float(np.median(by_L[L]))
               for L in args.length_list for name, by_L in learning.items()}
    metrics |= {f"L{L}_episodes_to_solve[TD(0) (λ=0) from V^π{' shuffled' * (start == 'shuffled')}]":
                float(np.median(by_L[L])) for start, by_L in starts.items() for L in args.length_list}
    metrics |= {f"L{L}_value_error[{name}]": float(np.mean(by_L[L])) for L in args.length_list
                for name, by_L in errors.items()}
    table = learning_table(learning, args.length_list)
    metrics["tables"] = {"episodes_to_solve": table}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, episodes_to_solve=learning, value_error=errors,
                         td_from_start_values=starts,
                         td_bias_halving_episodes=bias_times)
    print(f"\nEpisodes to solve, median (range) of {args.learn_seeds} seed(s) (budget {args.max_episodes:,}):")
    print(common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
