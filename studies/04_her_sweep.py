"""04, study: HER against plain DQN as the bit string grows, each relabelling strategy beside.

Bit flipping with n from 5 to 30 bits: DQN, DQN+HER relabelling with "future" (the chapter's
default) and DQN+HER relabelling with "final" (--strategies adds HER's other two, "episode" and
"random"); the chapter's hyperparameters, a budget of 10n cycles, three seeds each (a seed gives
every learner the same initial network and first episodes). The final greedy success against n,
the learning curves, success on near and far goals over training, and the survey's and the HER
paper's claims, decided over the seeds: standard RL fails with the sparse reward (DQN against a
uniformly random policy measured alike, its exact success beside, at every n where that random
policy almost never reaches the goal: its success a zero over the seeds), HER is the ingredient
(DQN+HER against DQN, where DQN fails), "future" against each of the other three
strategies (final success; all four must run), HER as an implicit curriculum (near goals, fewer
than n/2 bits to flip, reach half their final success before far ones), and HER's signal (every
episode holds a rewarded transition once relabelled: exact, on a batch).

    python studies/04_her_sweep.py                      # 160 s on 2 CPU cores, beside other jobs
    python studies/04_her_sweep.py --bits 35,40 --strategies future,final,episode,random --out runs/studies/04_her_sweep_strategies
    python studies/04_her_sweep.py --bits 40,50 --her-seeds 1 --strategies future --out runs/studies/04_her_sweep_large
    python studies/04_her_sweep.py --bits 40 --cycles 25 --her-seeds 1 --strategies future --out runs/studies/04_her_sweep_budget
    python studies/04_her_sweep.py --reanalyse runs/studies/04_her_sweep_strategies/results.json  # claims again, nothing trained

The second (535 s) compares the four strategies where success is off its ceiling:
"future" and "final" near 1 up to n = 30, and at n = 50 "future" reaches 0 in this budget (the third).
The third and fourth go towards the paper's n = 50, with the default budget and with 2.5 times as much.
Writes runs/studies/04_her_sweep/: her_success_vs_bits.png and results.json, whose table (also
printed) has the final success of each seed, the share of reward-0 replays and when the mean
success first reached 90%.
"""

import importlib
import math
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

hindsight = importlib.import_module("04_her_hca")

DQN = "DQN"
STRATEGIES = ("future", "final", "episode", "random")


def arm_name(strategy: str) -> str:
    """The learner's name in tables and metrics: "DQN+HER" relabels with "future", as the chapter's."""
    return DQN if strategy == "none" else "DQN+HER" if strategy == "future" else f"DQN+HER ({strategy})"


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/04_her_sweep", "output folder for figures and results.json")
    bits: str = common.arg("5,10,20,30", "bit-string lengths n, comma-separated", item=int)
    her_seeds: int = common.arg(3, "seeds per (n, learner)")
    cycles: int = common.arg(10, "collect-then-train cycles per bit: n bits get n * cycles cycles")
    strategies: str = common.arg("future,final", "HER goal-sampling strategies, each its own DQN+HER learner",
                                 item=str, choices=STRATEGIES)
    reanalyse: str = common.reanalyse_arg()

    SMOKE = dict(bits="4,6", her_seeds=2, cycles=1, strategies=",".join(STRATEGIES))

    def __post_init__(self):
        common.require_positive(self, "her_seeds", "cycles")
        common.require(all(n >= 1 for n in self.bit_list), "--bits must be positive integers")
        common.require("future" in common.as_list(self.strategies, str),
                       "--strategies must hold future (DQN+HER's, the chapter's)")

    @property
    def bit_list(self) -> list[int]:
        return common.as_list(self.bits, int)

    @property
    def arms(self) -> dict[str, str]:
        """{learner: its relabelling strategy}, plain DQN ("none") first."""
        return {arm_name(s): s for s in ("none", *common.as_list(self.strategies, str))}


def chapter_args(args: Args) -> hindsight.Args:
    """The chapter's hyperparameters (its smoke values in a smoke run), with this study's flags."""
    smoke = hindsight.Args.SMOKE if args.smoke else {}
    return hindsight.Args(**{**smoke, "seed": args.seed, "her_seeds": args.her_seeds, "cycles": args.cycles})


def her_sweep(args: Args, device) -> dict:
    """{learner: {n: [one train_bitflip result per seed]}}."""
    chapter, seeds = chapter_args(args), range(args.seed, args.seed + args.her_seeds)
    return {name: {n: [hindsight.train_bitflip(chapter, n, strategy, seed, device)
                       for seed in tqdm(seeds, desc=f"{name}, n = {n}", leave=False)] for n in args.bit_list}
            for name, strategy in args.arms.items()}


# ============================================================================================
# The exact references: a random policy's success, and which episodes relabelling rewards
# ============================================================================================
def random_success(bits: int) -> float:
    """P(a uniformly random policy reaches the goal within n steps), exactly. The Hamming distance
    d to the goal starts Binomial(n, 1/2) and each flip moves it to d - 1 with probability d/n,
    else to d + 1 (an Ehrenfest chain); as in play_bitflip, success is d = 0 after a flip."""
    d = np.arange(bits + 1)
    p = np.array([math.comb(bits, k) for k in d]) / 2.0**bits
    success = 0.0
    for _ in range(bits):
        p = np.append(p[1:] * d[1:] / bits, 0.0) + np.insert(p[:-1] * (bits - d[:-1]) / bits, 0, 0.0)
        success, p[0] = success + p[0], 0.0
    return float(success)


def goal_support(lengths: torch.Tensor, bits: int, strategy: str) -> torch.Tensor:
    """[e, t, t']: may the strategy give transition t of episode e the state reached at step t'
    of the same episode as its goal? (hindsight_goal_steps' draws: "future" any t ≤ t' < T,
    "final" t' = T - 1, "episode" any t' < T; "random" too, its own episode being one of those it
    draws from, and other episodes' states add goals beyond this support.)"""
    t, length = torch.arange(bits, device=lengths.device), lengths[:, None, None]
    step, goal = t[None, :, None], t[None, None, :]
    if strategy == "future":
        return (step <= goal) & (goal < length)
    if strategy == "final":
        return (step < length) & (goal == length - 1)
    if strategy in ("episode", "random"):
        return (step < length) & (goal < length)
    return torch.zeros(len(lengths), bits, bits, dtype=torch.bool, device=lengths.device)


def rewarded_episodes(episodes: dict, strategy: str) -> torch.Tensor:
    """Per episode: does one of its transitions carry reward 0 (success in the −1/0 convention),
    for its own goal or for a goal the strategy can relabel it with?"""
    achieved, lengths = episodes["states"][:, 1:], episodes["lengths"]
    bits = achieved.shape[1]
    steps = torch.arange(bits, device=lengths.device) < lengths[:, None]
    own = (hindsight.goal_reward(achieved, episodes["goals"][:, None]) == 0) & steps
    relabelled = hindsight.goal_reward(achieved[:, :, None], achieved[:, None, :]) == 0
    return own.any(1) | (relabelled & goal_support(lengths, bits, strategy)).any((1, 2))


def random_policy(args: Args, device) -> dict:
    """A uniformly random policy, measured as the learners are (the chapter's number of evaluation
    episodes, per seed): {n: {"success": [per seed], "rewarded": {learner: share of all these
    episodes holding a rewarded transition for it}}}, the latter exact on the batch."""
    chapter, results = chapter_args(args), {}
    for n in args.bit_list:
        q_net = hindsight.QNetwork(n, chapter.hidden).to(device)  # ε = 1: its greedy choice is never used
        batches = [hindsight.play_bitflip(q_net, chapter.eval_episodes, n, 1.0,
                                          torch.Generator(device).manual_seed(seed + 10_000))
                   for seed in range(args.seed, args.seed + args.her_seeds)]
        results[n] = {"success": [float(b["success"].float().mean()) for b in batches],
                      "rewarded": {name: float(torch.cat([rewarded_episodes(b, s) for b in batches]).float().mean())
                                   for name, s in args.arms.items()}}
    return results


# ============================================================================================
# Claims, decided over the seeds
# ============================================================================================


def final_success(runs: list[dict]) -> np.ndarray:
    return np.array([r["final_success"] for r in runs])


def fails(her: dict, chance: list[float], n: int) -> tuple[bool | None, str]:
    """Is DQN's success at n no better than a random policy's (`chance`, per seed, measured alike)?
    Its excess, seed by seed, is zero (the interval holds 0) below the gain DQN+HER makes over the
    random policy."""
    gain = float(np.mean(final_success(her["DQN+HER"][n])) - np.mean(chance))
    verdict, text = common.seed_verdict(final_success(her[DQN][n]) - chance, zero_below=gain)
    return verdict, (f"n={n} {text} (random {np.mean(chance):.2g}, exactly {random_success(n):.2g}; zero below "
                     f"DQN+HER's gain {gain:.2f})")


def almost_never(her: dict, chance: list[float], n: int) -> tuple[bool | None, str]:
    """The survey's premise at n, "the agent almost never achieves the intended goal through random
    exploration": a random policy's success (`chance`, per seed) is a zero, its interval holding 0
    below the success DQN+HER reaches on the same goals."""
    verdict, text = common.seed_verdict(chance, zero_below=float(np.mean(final_success(her["DQN+HER"][n]))))
    return verdict, f"n={n} {text}"


def fails_at_every(failing: dict, smallest: int) -> tuple[bool | None, str]:
    """`fails` at every n ≥ smallest ({n: fails(her, n)} given); their texts ("" if none is run)."""
    tried = [failing[n] for n in failing if n >= smallest]
    return (common.all_parts(*(verdict for verdict, _ in tried)), "; ".join(text for _, text in tried)) if tried else (None, "")


def ablation(her: dict, n: int) -> tuple[bool | None, str]:
    """DQN+HER's final success minus DQN's at n, per seed."""
    return common.seed_verdict(final_success(her["DQN+HER"][n]) - final_success(her[DQN][n]))


def ingredient(failing: dict, learns: dict) -> tuple[bool | None, list[int]]:
    """"DQN+HER learns where the same DQN fails", over n: at each n both halves, DQN no better than
    random (`fails`) and DQN+HER above DQN (`ablation`); an n where DQN measurably learns is not one
    the statement speaks of, and drops out. A tendency over the rest (`tends`); and the n dropped."""
    kept = {n: common.all_parts(failing[n][0], learns[n][0]) for n in learns if failing[n][0] is not False}
    return common.tends(*kept.values()), [n for n in learns if n not in kept]


def strategy_gap(her: dict, n: int) -> tuple[bool | None, str]:
    """At n, per seed: "future"'s final success minus each other strategy's, each decided over the
    seeds (> 0: "future" above it); "future" works best where it is above every one (a per-seed
    maximum of the others would bias the comparison against it). And each strategy's mean."""
    success = {s: final_success(her[arm_name(s)][n]) for s in STRATEGIES}
    gaps = {s: common.seed_verdict(success["future"] - success[s]) for s in STRATEGIES if s != "future"}
    texts = ", ".join(f"minus {s} {text}" for s, (_, text) in gaps.items())
    means = ", ".join(f"{s} {np.mean(by_seed):.3f}" for s, by_seed in success.items())
    return common.all_parts(*(v for v, _ in gaps.values())), f"n={n} {texts} (mean final success: {means})"


# ============================================================================================
# The implicit curriculum: success by the goal's distance (bits to flip) over training
# ============================================================================================
def near_far_curves(run: dict) -> dict[str, np.ndarray]:
    """A run's greedy success at each evaluation on near goals (fewer than n/2 bits to flip, n/2
    being the median distance of a uniform goal) and on far goals (more than n/2); NaN where an
    evaluation drew no such goal."""
    episodes = np.array([e["episodes"] for e in run["by_distance"]], dtype=float)  # (evaluations, n + 1)
    successes = np.array([e["successes"] for e in run["by_distance"]], dtype=float)
    distance = np.arange(episodes.shape[1])
    half = (episodes.shape[1] - 1) / 2
    with np.errstate(invalid="ignore"):
        return {near_far: successes[:, goals].sum(1) / episodes[:, goals].sum(1)
                for near_far, goals in (("near", distance < half), ("far", distance > half))}


def half_time(curve: np.ndarray) -> float:
    """The share of the budget at which a success curve (one evaluation per tenth of training)
    first reaches half its own final value, linear between evaluations (the first evaluation's
    share if it is there already); NaN if the final value is 0 (nothing learned) or a value is NaN."""
    if np.isnan(curve).any() or not curve[-1] > 0:
        return math.nan
    budget = np.arange(1, len(curve) + 1) / len(curve)
    first = int(np.argmax(curve >= curve[-1] / 2))
    if first == 0:
        return float(budget[0])
    # the straight line from the last evaluation below half to the first one at or above it
    below, above = curve[first - 1], curve[first]
    return float(budget[first - 1] + (curve[-1] / 2 - below) / (above - below) * (budget[first] - budget[first - 1]))


def curriculum_gap(runs: list[dict], n: int) -> tuple[bool | None, str | None]:
    """At n, per seed: the share of the budget by which far goals reach half their final success
    later than near goals do (> 0: near goals are learned first); None text where a seed learned
    no near or no far goal."""
    times = [{near_far: half_time(curve) for near_far, curve in near_far_curves(run).items()} for run in runs]
    gaps = np.array([t["far"] - t["near"] for t in times])
    if np.isnan(gaps).any():
        return None, None
    verdict, text = common.seed_verdict(gaps)
    mean = {near_far: np.mean([t[near_far] for t in times]) for near_far in ("near", "far")}
    return verdict, f"n={n} {text} (near {mean['near']:.2f}, far {mean['far']:.2f} of the budget)"


def curriculum_claims(args: Args, her: dict) -> list[dict]:
    """Survey §7: HER is an implicit curriculum, near goals learned before far ones; DQN+HER
    ("future", the chapter's) over the seeds, one claim per n (settings of one run: where they
    disagree, the ledger shows each)."""
    claims = []
    for n in args.bit_list:
        verdict, text = curriculum_gap(her["DQN+HER"][n], n)
        statement = ("HER may be viewed as an implicit curriculum: near goals (fewer than n/2 bits to flip) are "
                     f"learned before far ones (more than n/2 bits to flip), at n = {n}")
        measured = ("DQN+HER (\"future\"): share of the budget at which far goals' greedy success first reaches half "
                    "its final value minus near goals' (> 0: near goals first; linear between the 10 evaluations), "
                    f"mean [95% interval] over {args.her_seeds} seeds: {text}" if text else
                    "premise not met: a seed of DQN+HER learned no near or no far goal")
        claims.append(common.claim("survey §7", statement, measured, verdict))
    return claims


def density_claim(args: Args, her: dict, random: dict) -> dict:
    """Survey §4.2.2: after relabelling every episode is a success for some goal; exact on a batch."""
    relabelling = [name for name in args.arms if name != DQN]
    shares = {n: random[n]["rewarded"] for n in args.bit_list}
    failed = any(shares[n][DQN] < 1 for n in args.bit_list)
    holds = all(shares[n][name] == 1 for n in args.bit_list for name in relabelling) if failed else None
    top = max(args.bit_list)
    replays = ", ".join(f"{name} {np.mean([r['reward_share'] for r in her[name][top]]):.3g}" for name in her)
    by_n = "; ".join(f"n={n} " + ", ".join(f"{name} {s:.3g}" for name, s in shares[n].items()) for n in args.bit_list)
    measured = (f"share of a random policy's episodes ({args.her_seeds} x {chapter_args(args).eval_episodes} per n) "
                "holding a transition with reward 0 (success in the −1/0 convention) for their own goal or, "
                f"relabelled, for a goal the strategy can give it; exact on the batch: {by_n}. Share of the "
                f"replayed transitions with reward 0 at n={top}: {replays}")
    if not failed:
        measured = f"premise not met: no episode failed its goal. {measured}"
    return common.claim("survey §4.2.2 and §7", "HER turns failed episodes into signal: after relabelling, every "
                        "episode is a success for some goal", measured, holds)


def strategy_claim(args: Args, her: dict) -> dict:
    """Survey §7: "future" tends to work best of HER's four goal-sampling strategies; against each
    of the other three, at each n, over the seeds (`strategy_gap`)."""
    statement = ("among HER's goal-sampling strategies (\"future\", \"final\", \"episode\", \"random\"), "
                 "\"future\" tends to work best: the highest final success")
    run = common.as_list(args.strategies, str)
    if set(run) != set(STRATEGIES):
        return common.claim("survey §7", statement, f"premise not met: {len(run)} of the {len(STRATEGIES)} strategies "
                            f"run (--strategies {','.join(STRATEGIES)} runs all)", None)
    verdicts, texts = zip(*(strategy_gap(her, n) for n in args.bit_list))
    measured = ("\"future\"'s final success minus each other strategy's, seed by seed (> 0: \"future\" above it; "
                f"best where above every one), mean [95% interval] over {args.her_seeds} seeds: " + "; ".join(texts))
    return common.claim("survey §7", statement, measured, common.tends(*verdicts))


def sparse_claim(failing: dict, rare: dict, first: int | None, seeds: str) -> dict:
    """Survey §7: standard RL fails with the sparse reward, at every n where the premise is shown
    (`almost_never`, given per n as `rare`), DQN against a random policy (`fails`); `first`: the
    n from which DQN fails at every n run (None: none), shown beside."""
    statement = ("standard RL with a sparse binary goal reward fails catastrophically: where random exploration "
                 "almost never reaches the goal, DQN's success is no better than a random policy's")
    sparse = [n for n, (verdict, _) in rare.items() if verdict]
    premise = (f"a random policy's success, {seeds} (almost never: the interval holds 0, below DQN+HER's "
               "success): " + "; ".join(text for _, text in rare.values()))
    if not sparse:
        return common.claim("survey §7", statement, f"premise not met: no n run where random exploration is shown to "
                            f"almost never reach the goal. {premise}", None)
    measured = (f"{premise}. DQN's final success minus a random policy's at n = {', '.join(map(str, sparse))}, "
                f"{seeds}: " + "; ".join(failing[n][1] for n in sparse)
                + (f". DQN is no better than random from n = {first} on" if first is not None else ""))
    return common.claim("survey §7", statement, measured, common.all_parts(*(failing[n][0] for n in sparse)))


def ingredient_claim(failing: dict, learns: dict, seeds: str) -> dict:
    """Survey §7: HER is the ingredient; `ingredient` decides, `fails` and `ablation` per n shown."""
    holds, dropped = ingredient(failing, learns)
    measured = (f"DQN's final success minus a random policy's (zero: DQN fails), {seeds}: "
                + "; ".join(text for _, text in failing.values()) + ". DQN+HER's (\"future\") minus DQN's: "
                + "; ".join(f"n={n} {text}" for n, (_, text) in learns.items())
                + (f". Not at n = {', '.join(map(str, dropped))}, where DQN learns (better than random)"
                   if dropped else ""))
    if len(dropped) == len(learns):
        measured = f"premise not met: DQN learns at every n run. {measured}"
    return common.claim("survey §7", "HER is the ingredient that makes learning possible: DQN+HER learns where the "
                        "same DQN without relabelling fails", measured, holds)


def her_claims(args: Args, her: dict, random: dict) -> list[dict]:
    bits, seeds = args.bit_list, f"mean [95% interval] over {args.her_seeds} seeds"
    success = "; ".join(f"{name}: " + ", ".join(f"n={n} {np.mean(final_success(by_n[n])):.2f}" for n in bits)
                        for name, by_n in her.items())
    failing = {n: fails(her, random[n]["success"], n) for n in bits}
    rare = {n: almost_never(her, random[n]["success"], n) for n in bits}
    paper, paper_text = fails_at_every(failing, 15)
    first = min((n for n in bits if fails_at_every(failing, n)[0]), default=None)  # fails there and beyond
    learns = {n: ablation(her, n) for n in bits}
    learns_text = "; ".join(f"n={n} {text}" for n, (_, text) in learns.items())
    return [
        common.claim("HER paper, Fig. 1", "DQN alone fails beyond about 13-15 bits",
                     f"mean final success: {success}. DQN's success minus a random policy's, {seeds}: "
                     f"{paper_text}; DQN is no better than random from n = {first} on" if paper_text
                     else f"no n ≥ 15 run; mean final success: {success}", paper),
        common.claim("HER paper, Fig. 1", "DQN+HER learns up to 50 bits, where DQN alone fails",
                     f"DQN+HER's success minus DQN's, {seeds}: {learns_text}"
                     + ("" if 50 in learns else "; n = 50 not run (add it to --bits)"),
                     learns[50][0] if 50 in learns else None),
        density_claim(args, her, random),
        strategy_claim(args, her),
        sparse_claim(failing, rare, first, seeds),
        ingredient_claim(failing, learns, seeds),
        *curriculum_claims(args, her)]


# ============================================================================================
# Figure, table, main
# ============================================================================================
def plot_her(her: dict, bits: list[int], path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    common.plot_curves(axes[0], np.array(bits), {
        name: np.array([final_success(by_n[n]) for n in bits]).T for name, by_n in her.items()})
    axes[0].plot(bits, [random_success(n) for n in bits], "k:", label="random policy (exact)")
    axes[0].legend(fontsize="small")
    axes[0].set(xlabel="number of bits n", ylabel="final greedy success rate",
                title="Bit flipping: success vs n", ylim=(-0.05, 1.05))
    for name, style in zip(her, ("--", "-", ":", "-.", (0, (1, 3)))):
        for n in bits:
            curves = np.array([r["curve"] for r in her[name][n]])
            axes[1].plot(np.linspace(0.1, 1, curves.shape[1]), curves.mean(0), linestyle=style, label=f"{name} n={n}")
    axes[1].set(xlabel="fraction of the training budget", ylabel="greedy success rate (mean over seeds)",
                title="Learning curves (budget grows with n)")
    axes[1].legend(fontsize="x-small", ncol=3)
    axes[1].grid(alpha=0.3)
    for n in bits:
        curves = [near_far_curves(r) for r in her["DQN+HER"][n]]
        for near_far, style in (("near", "-"), ("far", "--")):
            mean = np.nanmean([c[near_far] for c in curves], 0)
            axes[2].plot(np.linspace(0.1, 1, len(mean)), mean, style, label=f"n={n} {near_far}")
    axes[2].set(xlabel="fraction of the training budget", ylabel="greedy success rate (mean over seeds)",
                title="DQN+HER: near (< n/2 bits to flip) and far (> n/2) goals")
    axes[2].legend(fontsize="x-small", ncol=2)
    axes[2].grid(alpha=0.3)
    common.save_figure(fig, path)


def success_table(args: Args, her: dict) -> dict:
    """Per n and learner: the final greedy success (the mean and each seed's), the share of
    replayed transitions with reward 0, and after what share of the budget the mean success first
    reached 90% ("–": never)."""
    def reached_90(runs: list[dict]) -> str:
        curve = np.mean([r["curve"] for r in runs], 0)
        above = np.flatnonzero(curve >= 0.9)
        return f"{(above[0] + 1) / len(curve):.0%}" if len(above) else "–"

    rows = [[n, name, float(np.mean(final_success(runs))), ", ".join(f"{s:.3g}" for s in final_success(runs)),
             float(np.mean([r["reward_share"] for r in runs])), reached_90(runs)]
            for n in args.bit_list for name, runs in ((m, her[m][n]) for m in her)]
    return {"title": f"Bit flipping, {args.her_seeds} seeds, {args.cycles}n cycles",
            "header": ["n", "learner", "final greedy success", "per seed", "share of reward-0 replays", "90% after"],
            "rows": rows}


def stored_claims(args: Args, stored: dict) -> list[dict]:
    """The claims again from a results.json's per-seed runs and random-policy measurements."""
    if "random_policy" not in stored:
        common.fail(f"--reanalyse {args.out}: no random-policy measurements stored (an older run: run it again)")
    return her_claims(args, stored["her"], stored["random_policy"])


def main(args: Args) -> dict:
    if args.reanalyse:
        return {"claims": common.reanalyse(args, stored_claims)}
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"04 study: {', '.join(args.arms)} on bit flipping, n in {args.bit_list}; device {device}")
    her = her_sweep(args, device)
    random = random_policy(args, device)
    plot_her(her, args.bit_list, out / "her_success_vs_bits.png")
    metrics = {f"bits{n}_success[{name}]": float(np.mean(final_success(runs)))
               for name, by_n in her.items() for n, runs in by_n.items()}
    metrics |= {f"bits{n}_success[random policy]": float(np.mean(random[n]["success"])) for n in args.bit_list}
    metrics["tables"] = {"success": success_table(args, her)}
    claims = her_claims(args, her, random)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, her=her, random_policy=random)
    table = metrics["tables"]["success"]
    print(f"\n{table['title']}:\n" + common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    torch.set_num_threads(1)  # every tensor here is small: on a CPU, threads cost more than they save
    common.run_script(main, Args)
