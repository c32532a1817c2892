"""03 study — the RUDDER authors' pocket watch: does Q-learning on r̃ need 10x fewer episodes?

The authors' own demonstration (Arjona-Medina et al., 2019): one decision at t = 0 (repair the
watch or sell it as it is), the sale at the last step, noisy costs on the way. Q-learning on the
delayed reward, Monte Carlo and Q-learning on RUDDER's r̃ (03_rudder.py's redistribution, its
predictor refit as the learner plays), each over a grid of step sizes, until the greedy decision
was optimal in 95% of the last 750 episodes. Also the survey's "the LSTM adds overhead" (§5),
as wall clock per episode, timed over each block of 50 episodes (repeated timings).

    python studies/03_pocket_watch.py   # 201 s on 2 CPU cores

Figure: pocket_watch.png (optimal decisions over episodes at each method's best step size, and
episodes to solve against the step size).
"""

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

rudder = importlib.import_module("03_rudder")

WATCH_METHODS = ("Q-learning (TD)", "Monte Carlo", "RUDDER")
AUTHORS = {"RUDDER": "about 1,900 to 3,800", "Q-learning (TD)": "about 71,800",
           "Monte Carlo": "27,700 to over 240,000"}  # the RUDDER authors' pocket-watch numbers


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/03_pocket_watch", "output folder for figures and results.json")
    seeds: int = common.arg(5, "seeds per method (and per step size)")
    steps: int = common.arg(50, "steps per episode (the delay of the sale)")
    unrepaired: float = common.arg(19.0, "price of an unrepaired watch (our choice; any value in (16.5, 21.5) "
                                   "makes [sell, repair, repair, sell] optimal)")
    alphas: str = common.arg("0.03,0.1,0.3,0.5", "step sizes tried for every method (its best is reported)",
                             item=float)
    epsilon: float = common.arg(0.1, "exploration rate of the decision (ε-greedy)")
    window: int = common.arg(750, "solved when the greedy decision was optimal in ...")
    target: float = common.arg(0.95, "... this share of the last window episodes")
    max_episodes: int = common.arg(50_000, "budget of Q-learning and MC")
    rudder_max_episodes: int = common.arg(6_000, "budget of RUDDER (its model makes an episode dearer)")
    buffer: int = common.arg(1000, "RUDDER: latest episodes the predictor trains on")
    refit_every: int = common.arg(25, "RUDDER: episodes between predictor refits")
    refit_steps: int = common.arg(5, "RUDDER: predictor steps per refit")

    SMOKE = dict(seeds=1, steps=6, alphas="0.3", window=20, max_episodes=60, rudder_max_episodes=60,
                 refit_every=20, refit_steps=2)

    def __post_init__(self):
        common.require_positive(self, "seeds", "steps", "window", "max_episodes", "rudder_max_episodes", "buffer",
                                "refit_every", "refit_steps")
        for name in ("epsilon", "target"):
            common.require(0 <= getattr(self, name) <= 1, f"--{name} must be in [0, 1]")
        common.require(self.steps >= 2, "--steps must be at least 2")
        common.require(all(a > 0 for a in self.alpha_list), "--alphas must be positive")

    @property
    def alpha_list(self) -> list[float]:
        return common.as_list(self.alphas, float)


def predictor_args(args: Args) -> "rudder.Args":
    """The chapter's return-predictor settings (its smoke settings in a smoke run)."""
    return common.apply_smoke(rudder.Args(seed=args.seed, smoke=args.smoke))


# ============================================================================================
# The world
# ============================================================================================
class PocketWatch:
    """A batch of independent pocket-watch shops, after the RUDDER authors' example.

    At t = 0 a watch of one of 4 brands comes in (uniformly) and the only decision is made:
    sell it as it is (action 0) or repair it (action 1: pay the repair cost now, and the spare
    parts' delivery cost at the end). For the next `steps - 1` steps nothing can be decided,
    and a traffic jam (-0.1, p = 0.1) or a flat tyre (-7, p = 0.05) may cost something at each
    step. At the last step the watch is sold: its brand's price if repaired, `unrepaired` if not.

    State (brand, repaired, t), indexed (2 brand + repaired) steps + t; the terminal state is
    `num_states`. With one decision, an episode is drawn whole: `reset()` gives each shop's
    first state (and the brands in info), `finish(repair)` all steps of the episode, time-major.
    """

    repair_mean, repair_var = (1.0, 4.0, 5.0, 24.5), (2.0, 2.0, 2.0, 1.0)
    price = (18.0, 28.0, 31.0, 59.0)
    delivery_mean, delivery_var = (0.5, 2.5, 4.5, 18.0), 1.5
    jam, jam_prob, tyre, tyre_prob = 0.1, 0.1, 7.0, 0.05
    num_brands, num_actions = 4, 2

    def __init__(self, num_envs: int, steps: int = 50, unrepaired: float = 19.0, seed: int = 0, device="cpu"):
        self.num_envs, self.steps, self.unrepaired = num_envs, steps, unrepaired
        self.num_states = 2 * self.num_brands * steps
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.brand = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def table(self, values) -> torch.Tensor:
        return torch.tensor(values, device=self.device)

    def state(self, brand, repaired, t) -> torch.Tensor:
        return (2 * brand + repaired) * self.steps + t

    def noise(self) -> torch.Tensor:
        """One standard normal draw per shop."""
        return torch.randn(self.num_envs, generator=self.generator, device=self.device)

    def reset(self) -> tuple[torch.Tensor, dict]:
        self.brand = torch.randint(0, self.num_brands, (self.num_envs,), generator=self.generator, device=self.device)
        return self.state(self.brand, 0, 0), {"brand": self.brand}

    def finish(self, repair: torch.Tensor) -> dict:
        T, brand = self.steps, self.brand
        u = torch.rand(T, self.num_envs, generator=self.generator, device=self.device)
        rewards = -torch.where(u < self.tyre_prob, self.tyre, torch.where(u < self.tyre_prob + self.jam_prob, self.jam, 0.0))
        rewards[0] = -repair * (self.table(self.repair_mean)[brand] + self.table(self.repair_var)[brand].sqrt() * self.noise())
        delivery = self.table(self.delivery_mean)[brand] + self.delivery_var ** 0.5 * self.noise()
        rewards[-1] += torch.where(repair == 1, self.table(self.price)[brand] - delivery, self.unrepaired)
        t = torch.arange(T, device=self.device)[:, None]
        states = self.state(brand, repair * (t > 0), t)
        actions = torch.zeros_like(states)
        actions[0] = repair
        next_states = torch.cat([states[1:], torch.full_like(states[:1], self.num_states)])
        return {"states": states, "actions": actions, "rewards": rewards, "next_states": next_states, "brand": brand}

    def expected_returns(self) -> torch.Tensor:
        """E[G | brand, action], (4, 2): the sale minus what was paid, minus the costs on the way."""
        on_the_way = (self.steps - 1) * (self.jam_prob * self.jam + self.tyre_prob * self.tyre)
        repaired = self.table(self.price) - self.table(self.repair_mean) - self.table(self.delivery_mean)
        return torch.stack([torch.full_like(repaired, self.unrepaired), repaired], 1) - on_the_way

    def q_table(self, learners: int) -> torch.Tensor:
        """Zeros for `learners` flattened tables of num_states + 1 rows; the waiting states and the
        terminal state have one action (index 0), so the other is -inf and never the max."""
        Q = torch.zeros(self.num_states + 1, 2, device=self.device)
        waiting = torch.ones(self.num_states + 1, dtype=torch.bool, device=self.device)
        waiting[self.state(torch.arange(self.num_brands, device=self.device), 0, 0)] = False
        Q[waiting, 1] = -torch.inf
        return Q.repeat(learners, 1)


def watch_features(episode: dict, steps: int) -> torch.Tensor:
    """The predictor's input, (T, N, 8): brand one-hot, repaired, the decision (at t = 0 only),
    and the reward just received (/10), so that costs on the way can be explained as they come."""
    T, N = episode["rewards"].shape
    brand = rudder.one_hot(episode["brand"], PocketWatch.num_brands).expand(T, N, -1)
    repaired = ((episode["states"] // steps) % 2).float()[..., None]
    decision = rudder.one_hot(episode["actions"], 2) * (torch.arange(T, device=brand.device) == 0)[:, None, None]
    return torch.cat([brand, repaired, decision, episode["rewards"][..., None] / 10], dim=-1)


# ============================================================================================
# The learners, one episode at a time, sharing one Q table
# ============================================================================================
class WatchRedistribution:
    """RUDDER for the watch learners: one return predictor per learner, each refit every
    `refit_every` episodes on its latest `buffer` episodes."""

    def __init__(self, args: Args, learners: int, device):
        self.args, self.count = args, 0
        settings = predictor_args(args)
        self.fitters = [rudder.return_predictor(settings, 8, device, seed=args.seed + i) for i in range(learners)]
        self.x = torch.zeros(args.steps, args.buffer, learners, 8, device=device)
        self.returns = torch.zeros(args.buffer, learners, device=device)

    def __call__(self, episode: dict) -> torch.Tensor:
        x, returns = watch_features(episode, self.args.steps), episode["rewards"].sum(0)
        slot = self.count % self.args.buffer
        self.x[:, slot], self.returns[slot] = x, returns
        self.count += 1
        if self.count % self.args.refit_every == 0:
            stored = min(self.count, self.args.buffer)
            for i, fitter in enumerate(self.fitters):
                fitter.fit(self.x[:, :stored, i], self.returns[:stored, i], self.args.refit_steps)
        with torch.no_grad():
            predictions = torch.cat([f.model(x[:, i:i + 1]) for i, f in enumerate(self.fitters)], dim=1)
        return rudder.redistribute(predictions, returns)


def watch_learn(args: Args, method: str, alphas: list[float], device) -> dict:
    """len(alphas) x seeds independent learners, one episode each per iteration, until
    each one's greedy decision was optimal in ≥ target of its last window episodes
    (checked every 50 episodes). Returns episodes to solve (alphas, seeds), the budget when
    never, the curves and the wall-clock seconds per iteration, overall and over each block of 50
    iterations (the timings). The learners share one Q table, each in its own block of rows."""
    seeds = args.seeds
    learners = len(alphas) * seeds
    env = PocketWatch(learners, args.steps, args.unrepaired, seed=args.seed, device=device)
    Q = env.q_table(learners)
    rows = env.num_states + 1
    alpha = torch.tensor(alphas, device=device).repeat_interleave(seeds * rows * 2)  # one per Q entry
    offset = torch.arange(learners, device=device) * rows  # each learner's first row
    optimal = env.expected_returns().argmax(1)
    shaper = WatchRedistribution(args, learners, device) if method == "RUDDER" else None
    budget = args.max_episodes if method != "RUDDER" else args.rudder_max_episodes
    correct = torch.zeros(budget, learners, device=device)
    solved = torch.full((learners,), budget, device=device)
    start = block = time.time()
    timings = []
    for i in tqdm(range(budget), desc=f"pocket watch, {method}", leave=False, mininterval=1):
        first, info = env.reset()
        greedy = Q[first + offset].argmax(1)
        explore = torch.rand(learners, generator=env.generator, device=device) < args.epsilon
        coin = torch.randint(0, 2, (learners,), generator=env.generator, device=device)
        episode = env.finish(torch.where(explore, coin, greedy))
        correct[i] = (greedy == optimal[info["brand"]]).float()
        in_shared_table = dict(episode, states=episode["states"] + offset,
                               next_states=episode["next_states"] + offset)
        if method == "Monte Carlo":
            rudder.mc_update(Q, in_shared_table, alpha)
        else:
            rudder.q_learning_update(Q, in_shared_table, shaper(episode) if shaper else episode["rewards"], alpha)
        if (i + 1) % 50 == 0:  # a block's wall clock per episode
            timings.append((time.time() - block) / 50)
            block = time.time()
        if i + 1 >= args.window and (i + 1) % 50 == 0:
            rate = correct[i + 1 - args.window:i + 1].mean(0)
            solved = torch.where((rate >= args.target) & (solved == budget), i + 1, solved)
            if (solved < budget).all():
                break
    return {"episodes": solved.view(len(alphas), seeds).cpu().numpy(), "budget": budget,
            "correct": correct[: i + 1].view(i + 1, len(alphas), seeds).cpu().numpy(),
            "seconds_per_episode": (time.time() - start) / (i + 1),  # one episode of every learner
            "timings": timings}


def watch_study(args: Args, device) -> dict:
    """Each method on the pocket watch over every step size."""
    return {m: watch_learn(args, m, args.alpha_list, device) for m in WATCH_METHODS}


# ============================================================================================
# Figure, claims and main
# ============================================================================================
def best_alpha(result: dict) -> int:
    """Index of the step size with the lowest median episodes to solve."""
    return int(np.argmin(np.median(result["episodes"], axis=1)))


def plot_watch(args: Args, study: dict, path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for method, result in study.items():
        i = best_alpha(result)
        rates = np.array([common.moving_average(c, args.window) for c in result["correct"][:, i].T])
        common.plot_curves(left, np.arange(1, rates.shape[1] + 1), {f"{method}, α={args.alpha_list[i]}": rates})
        right.plot(args.alpha_list, np.median(result["episodes"], axis=1), "o-", label=method)
    left.axhline(args.target, color="k", ls=":", lw=1)
    left.set(xscale="log", xlabel="episodes", ylabel=f"optimal decisions (last {args.window})",
             title="Pocket watch: learning the repair decision")
    right.set(xscale="log", yscale="log", xlabel="step size α", ylabel="median episodes to solve",
              title=f"budget: {args.max_episodes:,} (RUDDER {args.rudder_max_episodes:,})")
    right.set_xticks(args.alpha_list, [str(a) for a in args.alpha_list], minor=False)
    right.minorticks_off()
    right.legend(fontsize="small")
    right.grid(alpha=0.3)
    common.save_figure(fig, path)


def fewer_episodes(episodes: float, budget: int, other: float, other_budget: int) -> bool | None:
    """Did a learner solve in fewer episodes than another? A median at a learner's budget means
    unsolved: it decides only against one that solved within that budget (False), or one that
    never solved either (None); and a learner that solved beats one that never did (True)."""
    solved, other_solved = episodes < budget, other < other_budget
    if not solved:
        return False if other_solved and other <= budget else None
    if not other_solved:
        return True if episodes <= other_budget else None
    return episodes < other


def watch_claims(args: Args, study: dict) -> tuple[dict, list[dict]]:
    metrics, medians = {}, {}
    for method, result in study.items():
        i = best_alpha(result)
        medians[method] = float(np.median(result["episodes"][i]))
        metrics[f"watch_episodes_to_solve[{method}]"] = medians[method]
        metrics[f"watch_best_alpha[{method}]"] = args.alpha_list[i]
        for alpha, row in zip(args.alpha_list, result["episodes"]):
            metrics[f"watch_episodes_to_solve[{method}, α={alpha}]"] = float(np.median(row))
    ratio = medians["Q-learning (TD)"] / medians["RUDDER"]
    same_alpha = {a: metrics[f"watch_episodes_to_solve[Q-learning (TD), α={a}]"]
                  / metrics[f"watch_episodes_to_solve[RUDDER, α={a}]"] for a in args.alpha_list}
    metrics["watch_ratio_Q_over_RUDDER"] = ratio

    def spread(method: str) -> str:
        result = study[method]
        row = result["episodes"][best_alpha(result)]
        unsolved = int((row >= result["budget"]).sum())
        text = (f"median {np.median(row):,.0f} (range {row.min():,.0f}-{row.max():,.0f}) "
                f"at α={metrics[f'watch_best_alpha[{method}]']}")
        return text + (f", {unsolved} of {len(row)} seeds unsolved in {result['budget']:,}" if unsolved else "")

    claims = [common.claim("RUDDER authors, pocket watch", f"{m} needs {AUTHORS[m]} episodes", "ours: " + spread(m), None)
              for m in WATCH_METHODS]
    claims.append(common.claim("RUDDER authors, pocket watch (ratio 19-38x)",
                        "RUDDER needs at least 10x fewer episodes than Q-learning on the pocket watch",
                        f"{ratio:.1f}x, each at its best step size; at equal step sizes "
                        + ", ".join(f"α={a}: {r:.1f}x" for a, r in same_alpha.items())
                        + f"; no learner can finish under the {args.window}-episode window",
                        ratio >= 10))
    versus_mc = ", ".join(f"α={a}: {metrics[f'watch_episodes_to_solve[RUDDER, α={a}]']:,.0f} vs "
                          f"{metrics[f'watch_episodes_to_solve[Monte Carlo, α={a}]']:,.0f}" for a in args.alpha_list)
    claims.append(common.claim("RUDDER authors, pocket watch", "RUDDER needs fewer episodes than Monte Carlo",
                        f"RUDDER {medians['RUDDER']:,.0f} vs MC {medians['Monte Carlo']:,.0f}, each at its best step "
                        f"size; at equal step sizes {versus_mc}",
                        fewer_episodes(medians["RUDDER"], study["RUDDER"]["budget"],
                                       medians["Monte Carlo"], study["Monte Carlo"]["budget"])))
    seconds = {m: study[m]["seconds_per_episode"] for m in WATCH_METHODS}
    metrics.update({f"watch_seconds_per_episode[{m}]": t for m, t in seconds.items()})
    blocks = min(len(study["RUDDER"]["timings"]), len(study["Q-learning (TD)"]["timings"]))
    extra, extra_text = common.seed_verdict(np.subtract(study["RUDDER"]["timings"][:blocks],
                                                        study["Q-learning (TD)"]["timings"][:blocks]))
    claims.append(common.claim("survey §5", "the LSTM return predictor adds computational overhead",
                        f"pocket watch, wall clock per episode (all {len(args.alpha_list) * args.seeds} "
                        "learners at once): " + ", ".join(f"{m} {1000 * t:.2g} ms" for m, t in seconds.items())
                        + f"; RUDDER / Q-learning {seconds['RUDDER'] / seconds['Q-learning (TD)']:.0f}x; RUDDER's "
                        f"minus Q-learning's, paired over {blocks} repeated timings (blocks of 50 episodes), mean "
                        f"[95% interval] in seconds: {extra_text}", extra))
    return metrics, claims


def watch_table(args: Args, study: dict) -> dict:
    """Per method (rows) and step size (columns): episodes to solve over the seeds, beside the
    RUDDER authors' numbers."""
    def cell(episodes: np.ndarray, budget: int) -> str:
        return f"> {budget:,}" if np.median(episodes) >= budget else rudder.seed_spread(episodes)

    rows = [[m, *(cell(row, study[m]["budget"]) for row in study[m]["episodes"]), AUTHORS[m]] for m in WATCH_METHODS]
    return {"header": ["method", *(f"α={a}" for a in args.alpha_list), "RUDDER authors"], "rows": rows}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    torch.set_num_threads(1)  # small models stepped one episode at a time: threads only wait on each other
    print(f"03 study: the pocket watch, {args.seeds} seeds at α = {args.alphas}, device {device}")
    watch = watch_study(args, device)
    plot_watch(args, watch, out / "pocket_watch.png")
    metrics, claims = watch_claims(args, watch)
    table = watch_table(args, watch)
    metrics["tables"] = {"pocket_watch": table}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, pocket_watch={m: r["episodes"] for m, r in watch.items()})
    print(f"\nPocket watch, episodes until the greedy decision was optimal in ≥{args.target:.0%} of the last "
          f"{args.window}: median (range) of the seeds, or > the budget where the median never got there:")
    print(common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
