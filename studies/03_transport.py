"""03 study — reward transport (TRT) against TD and RUDDER, below and beyond the horizon τ_γ.

Key-to-door with a distractor reward (0.1, p = 0.5) at every corridor step and γ = 0.9, so
τ_γ = 1/(1 - γ) = 10 steps. TRT's classifier (03_rudder.py's AttentionClassifier) learns "the
return beats 0.5 + the expected distractors"; at the steps its attention picks out it adds the
rewards from τ_γ steps on (survey §4.1.4, §6). First on stored random episodes (which steps does
transport change?), then as the reward of a Q-learner, beside TD and RUDDER, as the corridor
grows. The learners explore uniformly (ε = 1), so that both branches are seen alike. Last, the
survey's "distracting rewards limit RUDDER" (§5): RUDDER here against RUDDER in the chapter's
delay sweep (no distractors, γ = 1), which this study runs again (same seeds, same numbers).

    python studies/03_transport.py      # 41 s on 2 CPU cores (beside other jobs)

Figure: transport.png (episodes to solve against the corridor length, with τ_γ; TRT's attention
and the transported reward on one episode that took the key).
"""

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

rudder = importlib.import_module("03_rudder")

TRANSPORT_METHODS = ("Q-learning (TD)", "TRT", "RUDDER")


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/03_transport", "output folder for figures and results.json")
    sweep: str = common.arg("5,10,20,40", "corridor lengths of the transport study", item=int)
    gamma: float = common.arg(0.9, "discount (τ_γ = 1 / (1 - γ) steps)")
    distractor_prob: float = common.arg(0.5, "distractor probability per corridor step")
    epsilon: float = common.arg(1.0, "exploration of the learners (1: uniform, both branches seen alike)")
    width: int = common.arg(16, "TRT classifier width")
    focus: float = common.arg(3.0, "a step is important when it receives this many times the uniform attention")
    scale: float = common.arg(1.0, "share of the distant rewards added at an important step")

    SMOKE = dict(sweep="4")

    def __post_init__(self):
        common.require_positive(self, "width")
        for name in ("distractor_prob", "epsilon"):
            common.require(0 <= getattr(self, name) <= 1, f"--{name.replace('_', '-')} must be in [0, 1]")
        common.require(0 < self.gamma < 1, "--gamma must be in (0, 1)")
        common.require(all(L > 0 for L in self.sweep_list), "--sweep: corridor lengths must be positive")

    @property
    def sweep_list(self) -> list[int]:
        return common.as_list(self.sweep, int)


def chapter_args(args: Args) -> "rudder.Args":
    """The chapter's settings (its smoke settings in a smoke run), with TRT's from this study."""
    settings = rudder.Args(seed=args.seed, smoke=args.smoke, trt_width=args.width, trt_focus=args.focus,
                           trt_scale=args.scale)
    return common.apply_smoke(settings)


def transport_demo(args: Args, settings: "rudder.Args", device) -> dict:
    """Train TRT's classifier on stored random episodes with distractors; what does it mark?"""
    env, episode = rudder.uniform_episodes(settings, args.distractor_prob, device)
    x = rudder.encode(episode, env.num_states, "difference")
    fitter = rudder.transport_classifier(settings, x.shape[-1], device)
    fitter.fit(x, (episode["rewards"].sum(0) > rudder.key_threshold(env)).float(), settings.steps // 3, progress=True)
    with torch.no_grad():
        weights = rudder.importance(fitter.model(x)[1])
    horizon = rudder.discount_horizon(args.gamma)
    transported = rudder.transport(episode["rewards"], weights, horizon, settings.trt_focus, settings.trt_scale)
    changed = (transported != episode["rewards"]).float()
    return {"episode": episode, "weights": weights, "transported": transported, "horizon": horizon,
            "share_of_steps_changed": float(changed.mean()), "share_changed_at_key": float(changed[0].mean())}


def transport_study(args: Args, settings: "rudder.Args", device) -> dict:
    """Key-to-door with γ < 1 and distractors: TD, TRT and RUDDER below and beyond τ_γ."""
    return rudder.sweep(settings, TRANSPORT_METHODS, args.sweep_list, device, "transport study",
                        gamma=args.gamma, distractor_prob=args.distractor_prob, epsilon=args.epsilon)


def plot_transport(args: Args, transport_sweep: dict, demo: dict, path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    curves = {m: np.array([by_L[L] for L in args.sweep_list]).T for m, by_L in transport_sweep.items()}
    common.plot_curves(left, np.array(args.sweep_list), curves)
    left.set(xlabel="corridor length L (delay)", ylabel="episodes to solve", yscale="log",
             title=f"γ = {args.gamma}, distractors p = {args.distractor_prob}")
    left.axvline(demo["horizon"], color="k", ls=":", lw=1, label="τ_γ")
    took = int(torch.nonzero(demo["episode"]["actions"][0] == 1)[0])
    steps = np.arange(len(demo["weights"]))
    right.bar(steps - 0.2, demo["episode"]["rewards"][:, took].cpu().numpy(), width=0.4, label="reward r_t")
    right.bar(steps + 0.2, demo["transported"][:, took].cpu().numpy(), width=0.4, label="after transport")
    right.plot(steps, demo["weights"][:, took].cpu().numpy() / demo["weights"].shape[0], "k.-",
               label="attention received (share)")
    right.set(xlabel="step (0: key room)", title="TRT on one episode that took the key")
    right.legend(fontsize="small")
    common.save_figure(fig, path)


def transport_claims(args: Args, results: dict, demo: dict) -> tuple[dict, list[dict]]:
    horizon = demo["horizon"]
    medians = {m: [float(np.median(results[m][L])) for L in args.sweep_list] for m in TRANSPORT_METHODS}
    metrics = {f"trt_L{L}_episodes_to_solve[{m}]": medians[m][i]
               for m in TRANSPORT_METHODS for i, L in enumerate(args.sweep_list)}
    gains = [td / trt for td, trt in zip(medians["Q-learning (TD)"], medians["TRT"])]
    short = [g for g, L in zip(gains, args.sweep_list) if L + 1 < horizon]
    long = [g for g, L in zip(gains, args.sweep_list) if L + 1 >= horizon]
    metrics.update(trt_share_of_steps_changed=demo["share_of_steps_changed"],
                   trt_share_changed_at_key=demo["share_changed_at_key"])
    claims = [common.claim("survey §6", f"TRT's gain over the plain learner is largest when the delay exceeds "
                           f"τ_γ = {horizon}",
                           "TD / TRT episodes to solve at L = "
                           + ", ".join(f"{L}: {g:.1f}x" for L, g in zip(args.sweep_list, gains)),
                           (max(long) > max(short)) if short and long else None),
              common.claim("survey §4.1.4", "transport augments a few critical steps and leaves the rest unchanged",
                           f"{demo['share_of_steps_changed']:.1%} of all steps changed; "
                           f"{demo['share_changed_at_key']:.1%} of key-room steps",
                           demo["share_of_steps_changed"] < 0.2)]
    trt_wins = sum(a < b for a, b in zip(medians["TRT"], medians["RUDDER"]))
    versus = ", ".join(f"{L}: {a:,.0f} vs {b:,.0f}" for L, a, b in zip(args.sweep_list, medians["TRT"], medians["RUDDER"]))
    claims.append(common.claim("survey §4.1.5", "transport methods (TVT, TRT) are more successful than RUDDER",
                               f"episodes to solve, TRT vs RUDDER, at L = {versus}; TRT needs fewer at {trt_wins} "
                               f"of {len(args.sweep_list)}", trt_wins > len(args.sweep_list) / 2))
    return metrics, claims


def distractor_claim(args: Args, settings: "rudder.Args", delay: dict, transport_sweep: dict) -> dict:
    """Do sporadic intermediate rewards slow RUDDER down? Its episodes to solve in this study
    (distractor rewards) against the chapter's delay sweep (none), at the lengths both ran."""
    statement = "sporadic intermediate (distracting) rewards limit RUDDER's improvements"
    common_lengths = [L for L in args.sweep_list if L in settings.sweep_list]
    if not common_lengths:
        return common.claim("survey §5", statement, "not checked: the two sweeps share no corridor length", None)

    def medians(results: dict, method: str) -> np.ndarray:
        return np.array([np.median(results[method][L]) for L in common_lengths])

    with_, without = medians(transport_sweep, "RUDDER"), medians(delay, "RUDDER")
    lead_with = medians(transport_sweep, "Q-learning (TD)") / with_
    lead_without = medians(delay, "Q-learning (TD)") / without
    slower = sum(a > b for a, b in zip(with_, without))
    return common.claim("survey §5", statement,
                        f"RUDDER's episodes to solve with distractor rewards (p = {args.distractor_prob}) vs without, "
                        "L = " + ", ".join(f"{L}: {a:,.0f} vs {b:,.0f}" for L, a, b in zip(common_lengths, with_, without))
                        + "; its lead over TD " + ", ".join(f"{a:.1f}x vs {b:.1f}x" for a, b in zip(lead_with, lead_without))
                        + f" (the studies also differ in γ, {args.gamma} vs 1, and ε, {args.epsilon} vs {settings.epsilon})",
                        bool(slower > len(common_lengths) / 2))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    torch.set_num_threads(1)  # small models stepped one batch at a time: threads only wait on each other
    settings = chapter_args(args)
    print(f"03 study: TRT, γ = {args.gamma}, distractors p = {args.distractor_prob}, L in {args.sweep}, device {device}")
    # the models draw their initial weights from torch's global generator in turn: keep this order
    delay = rudder.delay_study(settings, device)
    demo = transport_demo(args, settings, device)
    transport_sweep = transport_study(args, settings, device)

    plot_transport(args, transport_sweep, demo, out / "transport.png")
    metrics, claims = transport_claims(args, transport_sweep, demo)
    claims.append(distractor_claim(args, settings, delay, transport_sweep))
    rows = [[L, *(rudder.seed_spread(by_L[L]) for by_L in transport_sweep.values())] for L in args.sweep_list]
    table = {"header": ["corridor L", *transport_sweep], "rows": rows}
    metrics["tables"] = {"transport": table}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, transport_sweep=transport_sweep, delay_sweep=delay)
    print(f"\nTransport study (γ = {args.gamma}, distractors), episodes to solve: median (range) of the seeds:")
    print(common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
