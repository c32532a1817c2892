"""02 study — the survey's two dilemmas, the essays' discount arithmetic, and Diagram 4.

Discount (survey §2.1, §3): with γ < 1 the exact credit reaching the key shrinks as γ^(L+1), the
door being L + 1 steps after it. Dilution (survey §3, §5): with γ = 1 and no critic the credit at
the key is the whole return R, whose variance grows with L as the distractors pile up, so the
signal-to-noise ratio falls. Then the essays' arithmetic (0.99^500, 0.999^999, 0.99^999, the
five-step reward-to-go toy) computed, and the whole-game essay's Diagram 4 on one trajectory: the
flat broadcast R - V(s_0) next to per-step GAE. Last, GAE's λ as a dial between the two, with
02_gae.py's noisy critics at the longest L. The claims decide over seeds: the episodes split into
--seeds independent batches (02_gae.py's study gives each batch its own noisy critic). Read beside:
credit-assignment-problem-survey.txt §2.1, §3, §4.1.1, §5; credit-assignment-is-the-whole-game.txt
§3 (the toy), §5 (Diagram 4, the λ dial); credit-assignment-over-long-generations.txt (0.99^999).

    python studies/02_dilemmas.py          # runs/studies/02_dilemmas/

The default run took 2 s on 2 CPU cores, beside other jobs.

Figures: dilemmas.png (credit vs L per γ; variance and signal²/variance vs L), diagram4.png.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

gae = importlib.import_module("02_gae")

DISCOUNTS = (0.9, 0.99, 0.999, 1.0)


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/02_dilemmas", "output folder for figures and results.json")
    lengths: str = common.arg("5,10,20,40,80", "corridor lengths L (the delay), comma-separated", item=int)
    distractor_prob: float = common.arg(0.5, "probability of a distractor reward at each corridor step")
    distractor: float = common.arg(0.2, "size of a distractor reward (the key is worth 1)")
    noise: float = common.arg(0.0, "std of Gaussian noise added to every reward")
    episodes: int = common.arg(20_000, "sampled episodes per corridor length for the dilution dilemma")
    seeds: int = common.arg(8, "independent batches the episodes are split into: the claims' seeds")
    gae_lambda: float = common.arg(0.9, "λ of the per-step GAE drawn in Diagram 4")

    SMOKE = dict(lengths="3,6", episodes=256, seeds=2)

    def __post_init__(self):
        common.require_positive(self, "episodes", "seeds")
        common.require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")
        common.require(self.noise >= 0, "--noise must be non-negative")
        common.require(0 <= self.gae_lambda <= 1, "--gae-lambda must be in [0, 1]")
        common.require(all(L >= 1 for L in self.length_list), "--lengths must be positive integers")

    @property
    def length_list(self) -> list[int]:
        return common.as_list(self.lengths, int)


def return_at_key(R: torch.Tensor, took: torch.Tensor) -> tuple[float, float]:
    """The return's variance within each action (averaged) and signal² / variance, the signal
    being the sampled contrast take minus leave (truth 1)."""
    signal = float(R[took].mean() - R[~took].mean())
    variance = float((R[took].var() + R[~took].var()) / 2)
    return variance, signal**2 / variance


def dilemmas(args: Args, device) -> dict:
    """Discount: the exact γ-discounted advantage of taking the key, relative to γ = 1 (DP).
    Dilution: with γ = 1 and no critic (V = 0), the sampled credit at the key is R; its
    variance and the signal-to-noise ratio A² / Var as L grows, on all the episodes and on
    each of the --seeds batches they split into ("seeds_var", "seeds_snr": per L, per seed)."""
    out = {"lengths": args.length_list, "relative_credit": {}, "key_var": [], "snr": [], "seeds_var": [],
           "seeds_snr": []}
    for gamma in DISCOUNTS:
        credit = []
        for L in args.length_list:
            env = gae.make_env(args, L, 1, args.seed, device)
            _, A = gae.exact_truth(env, gae.uniform_policy(env), gamma)
            credit.append(float(A[0, 1] - A[0, 0]))  # take vs leave, in the key room
        out["relative_credit"][gamma] = credit
    for L in args.length_list:
        env = gae.make_env(args, L, args.episodes, args.seed, device)
        episode = common.play_episodes(env, gae.uniform_policy(env))
        R, took = episode["rewards"].sum(0), episode["actions"][0] == 1
        for key, value in zip(("key_var", "snr"), return_at_key(R, took)):
            out[key].append(value)
        per_seed = [return_at_key(R[part], took[part]) for part in torch.arange(len(R)).chunk(args.seeds)]
        out["seeds_var"].append([v for v, _ in per_seed])
        out["seeds_snr"].append([snr for _, snr in per_seed])
    return out


def lambda_dial(args: Args, device) -> dict:
    """02_gae.py's study at the longest L, its seeds (noisy critics, each on its own batch of the
    episodes): bias² at the key step (net of its sampling variance) and variance, per seed (rows)
    and λ (columns)."""
    L = max(args.length_list)
    settings = gae.Args(seed=args.seed, lengths=str(L), distractor_prob=args.distractor_prob, nsteps="1",
                        distractor=args.distractor, noise=args.noise, episodes=args.episodes, critics=1,
                        seeds=args.seeds)
    seeds = gae.exact_truth_study(settings, device)[L]["seeds"]
    table = {m: [[seed[gae.gae_name(lam)][m] for lam in settings.lambda_list] for seed in seeds]
             for m in ("key_bias2_net", "key_var")}
    return {"L": L, "lambdas": settings.lambda_list, "value_noise": settings.value_noise, **table}


def diagram4(args: Args, device) -> dict:
    """The essay's Diagram 4 on one trajectory that took the key (second corridor length):
    {title: Ψ_t per step} for the flat broadcast and for per-step GAE with the exact V."""
    L = args.length_list[min(1, len(args.length_list) - 1)]
    env = gae.make_env(args, L, 64, args.seed, device)
    policy = gae.uniform_policy(env)
    V, _ = gae.exact_truth(env, policy, gamma=1.0)
    episode = common.play_episodes(env, policy)
    n = int(torch.nonzero(episode["actions"][0] == 1)[0])  # the first trajectory that took the key
    r, ends = episode["rewards"][:, n:n + 1], episode["ends"][:, n:n + 1]
    v, v_next = V[episode["states"][:, n:n + 1]], V[episode["next_states"][:, n:n + 1]]
    bars = {"flat: R - V(s_0) on every step": gae.flat_broadcast(r, v, ends),
            f"GAE(γ=1, λ={args.gae_lambda:g}), exact V": gae.gae(r, v, v_next, ends, 1.0, args.gae_lambda)}
    return {title: psi[:, 0].cpu().tolist() for title, psi in bars.items()}


def plot_dilemmas(dilemma: dict, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for gamma, credit in dilemma["relative_credit"].items():
        axes[0].plot(dilemma["lengths"], credit, "o-", label=f"γ={gamma:g}")
    axes[0].set(title="discount dilemma: exact credit reaching the key", xlabel="corridor length L",
                ylabel="A(take) - A(leave), γ-discounted (γ=1: 1)")
    axes[0].legend(fontsize="small")
    axes[1].plot(dilemma["lengths"], dilemma["key_var"], "o-", label="Var of the return at the key (γ=1)")
    axes[1].plot(dilemma["lengths"], dilemma["snr"], "s--", label="signal² / variance")
    axes[1].set(title="dilution dilemma (γ = 1, no critic)", xlabel="corridor length L",
                xscale="log", yscale="log")
    axes[1].legend(fontsize="small")
    for ax in axes:
        ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_diagram4(diagram: dict, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, (title, psi) in zip(axes, diagram.items()):
        ax.bar(np.arange(len(psi)), psi, color=["tab:red"] + ["tab:blue"] * (len(psi) - 1))
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set(title=title, xlabel="step (0: key taken; last: door)")
    axes[0].set_ylabel("advantage Ψ_t")
    common.save_figure(fig, path)


def decay_steps(gamma: float, fraction: float) -> float:
    """The delay d at which γ^d = fraction: d = ln(fraction) / ln(γ)."""
    return math.log(fraction) / math.log(gamma)


def toy_reward_to_go(rewards: list[float]) -> list[float]:
    """G_t with γ = 1 of one episode given as a list of rewards (the essays' toy trajectories)."""
    ends = torch.zeros(len(rewards), 1, dtype=torch.bool)
    ends[-1] = True
    return gae.reward_to_go(torch.tensor(rewards, dtype=torch.float32)[:, None], ends, 1.0)[:, 0].tolist()


def as_stated(value: float, stated: str) -> bool:
    """Does `value`, rounded to as many significant figures as `stated` is written with, read `stated`?"""
    figures = len(stated.replace(".", "").lstrip("0"))
    return float(f"{value:.{figures}g}") == float(stated)


def arithmetic_claims() -> list[dict]:
    """The essays' discount arithmetic and their five-step toy, computed."""
    passed, failed = toy_reward_to_go([0, 0, 0, 0, 1]), toy_reward_to_go([0, 0, 0, 0, 0])
    punished = toy_reward_to_go([0, 0, 0, 0, -1])
    return [
        common.claim("survey §2.1", "0.99^500 ≈ 0.0066", f"0.99^500 = {0.99**500:.4f}",
                     as_stated(0.99**500, "0.0066")),
        common.claim("survey §3", "with γ = 0.999, γ^999 ≈ 0.00043", f"0.999^999 = {0.999**999:.3f}, "
                     f"{0.999**999 / 0.00043:.0f}x the essay's number; 0.00043 needs a delay of "
                     f"{decay_steps(0.999, 0.00043):,.0f} steps at γ = 0.999 (or {decay_steps(0.99, 0.00043):.0f} "
                     "at γ = 0.99)", as_stated(0.999**999, "0.00043")),
        common.claim("over-long-generations", "0.99^999 ≈ 0.00004", f"0.99^999 = {0.99**999:.2e}",
                     as_stated(0.99**999, "0.00004")),
        common.claim("whole-game §3 (and App. A)", "with γ = 1 and one terminal reward, every step's "
                     "reward-to-go is that reward: the useless step gets the same +1 as the decisive one",
                     f"G_t of r = [0, 0, 0, 0, 1]: {passed}", all(g == 1 for g in passed)),
        common.claim("whole-game §3", "if the verifier fails (r_5 = 0), every G_t = 0",
                     f"G_t of r = [0, 0, 0, 0, 0]: {failed}", all(g == 0 for g in failed)),
        common.claim("over-long-generations (Why)", "with γ = 1 and one negative terminal reward, every step of the "
                     "bad episode gets the same negative reward-to-go, whichever step caused the failure",
                     f"G_t of r = [0, 0, 0, 0, -1]: {punished}", all(g == -1 for g in punished)),
    ]



def every_step(changes: list[list[float]]) -> tuple[bool | None, str]:
    """One verdict over several steps, each measured once per seed (> 0 in the statement's
    direction): yes if every step's holds, no if one's fails (common.seed_verdict), else None;
    with the steps' texts."""
    verdicts, texts = zip(*(common.seed_verdict(change) for change in changes)) if changes else ((None,), ("",))
    return common.all_parts(*verdicts), "; ".join(texts)


def dilemma_claims(dilemma: dict) -> list[dict]:
    """The discount dilemma as a formula, and the dilution dilemma's two halves (survey §3, §5),
    these decided over the seeds."""
    lengths, var, snr = dilemma["lengths"], dilemma["seeds_var"], dilemma["seeds_snr"]
    credit = dilemma["relative_credit"]
    # the door's reward is L + 1 steps after the key step
    formula_gap = max(abs(c / gamma ** (L + 1) - 1) for gamma, by_L in credit.items() for L, c in zip(lengths, by_L))
    steps = range(len(lengths) - 1)
    grows, grows_text = every_step([np.subtract(var[i + 1], var[i]) for i in steps])
    fades, fades_text = every_step([np.subtract(snr[i], snr[i + 1]) for i in steps])
    slope, slope_text = common.seed_verdict([common.loglog_slope(lengths, v) for v in np.transpose(var)])
    by_L = "; ".join(f"{L}: {np.mean(v):.3g} and {np.mean(r):.3g}" for L, v, r in zip(lengths, var, snr))
    where = f"γ = 1, no critic, {len(var[0])} seeds (batches of episodes)"
    return [
        common.claim("survey §2.1", "a reward d steps after the decisive action reaches it discounted by γ^d",
                     f"exact credit of taking the key (DP) against γ^(L+1), every γ in {list(credit)} and L in "
                     f"{lengths}: largest relative gap {formula_gap:.1e}; at γ = 0.9, L = {lengths[-1]}: "
                     f"{credit[0.9][-1]:.2g}", formula_gap < 1e-6),
        common.claim("survey §3", "pushing γ to 1 preserves the signal's magnitude",
                     f"exact credit of taking the key at γ = 1: {', '.join(f'{c:.3f}' for c in credit[1.0])} "
                     f"at L = {', '.join(map(str, lengths))}",
                     all(math.isclose(c, 1.0, rel_tol=1e-6) for c in credit[1.0])),
        common.claim("survey §3", "with γ = 1 the credit is diluted: the estimate's variance grows and the "
                     "signal from the decisive action washes out",
                     f"{where}: the return's variance at the key and signal²/variance, mean of the seeds, by L: "
                     f"{by_L}. Each step up in L, mean [95% interval]: variance's rise {grows_text}; "
                     f"signal²/variance's fall {fades_text}" if steps else "one corridor length: no trend",
                     common.all_parts(grows, fades) if steps else None),
        common.claim("survey §5", "Monte Carlo's variance grows with the trajectory length",
                     f"{where}: log-log slope of the return's variance at the key against L ({lengths[0]} → "
                     f"{lengths[-1]}) per seed, mean [95% interval] {slope_text} (1: in proportion to L)"
                     if steps else "one corridor length: no slope to fit", slope if steps else None),
    ]


def rank_trend(xs, ys) -> float:
    """Spearman's rank correlation of ys with xs (+1: ys rises at every step of xs)."""
    return common.pearson(np.argsort(np.argsort(xs)), np.argsort(np.argsort(ys)))


def dial_claims(dial: dict) -> list[dict]:
    """GAE's λ as a dial (survey §4.1.1, whole-game §5): per seed, the rank correlation with λ of
    bias² and of variance at the key step; decided over the seeds."""
    lambdas, seeds = dial["lambdas"], len(dial["key_var"])
    falls, falls_text = common.seed_verdict([-rank_trend(lambdas, b) for b in dial["key_bias2_net"]])
    rises, rises_text = common.seed_verdict([rank_trend(lambdas, v) for v in dial["key_var"]])
    grid = ", ".join(f"λ={lam:g} {b:.2g} and {v:.2g}" for lam, b, v in
                     zip(lambdas, np.mean(dial["key_bias2_net"], 0), np.mean(dial["key_var"], 0)))
    measured = (f"at the key, L={dial['L']}, critics off by N(0, {dial['value_noise']:g}²) per state, {seeds} seeds "
                f"(each its own critic and batch of episodes): bias² (net of its sampling variance) and variance, "
                f"mean of the seeds, {grid}; their rank correlation with λ per seed, mean [95% interval]: bias² "
                f"{falls_text} (sign flipped: > 0 falls with λ), variance {rises_text}")
    if len(lambdas) < 3:
        falls, rises, measured = None, None, measured + "; a trend needs three λ"
    return [common.claim("survey §4.1.1", "multi-step returns reduce the bias of an inaccurate critic: the further "
                         "GAE looks ahead (the larger λ), the smaller the bias² at the key step", measured, falls),
            common.claim("whole-game §5", "GAE's λ is a bias-variance dial: the smaller λ, the more bias² and the "
                         "less variance at the key step", measured, common.all_parts(falls, rises))]


def dilemma_table(dilemma: dict) -> dict:
    """Per L: the exact credit reaching the key at each γ, and the return at the key with γ = 1
    and no critic (its variance, and the sampled signal²/variance)."""
    rows = [[L, *(dilemma["relative_credit"][g][i] for g in DISCOUNTS), dilemma["key_var"][i], dilemma["snr"][i]]
            for i, L in enumerate(dilemma["lengths"])]
    return {"header": ["L", *(f"credit γ={g:g}" for g in DISCOUNTS), "Var R (γ=1)", "signal²/Var"], "rows": rows}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"02 study: discount and dilution on key-to-door, L in {args.length_list}, device {device}")
    dilemma = dilemmas(args, device)
    diagram = diagram4(args, device)
    dial = lambda_dial(args, device)
    plot_dilemmas(dilemma, out / "dilemmas.png")
    plot_diagram4(diagram, out / "diagram4.png")

    claims = arithmetic_claims() + dilemma_claims(dilemma) + dial_claims(dial)
    metrics = {}
    for i, L in enumerate(args.length_list):
        metrics[f"L{L}_key_return_var_gamma1"] = dilemma["key_var"][i]
        metrics[f"L{L}_credit_gamma0.99"] = dilemma["relative_credit"][0.99][i]
    table = dilemma_table(dilemma)
    metrics["tables"] = {"dilemmas": table}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, dilemmas=dilemma, diagram4=diagram, lambda_dial=dial)
    print("\nCredit reaching the key (γ-discounted, exact), and the return at the key with γ = 1:")
    print(common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
