"""05 study — where GRPO falls down (the whole-game essay's §7 catalog, the modes that live on a
small LM): the KL weight on both sides, a poor reference and its resets, async staleness, a sparse
reward from a weak cold start, and train/serve skew and state blindness at serving time.

  KL, both sides   GRPO at each β of --betas beside the chapter's default β: the reward-KL
                   frontier, entropy and the quality of the samples (distinct, well-formed)
  poor reference   GRPO anchored to a cold start that rarely writes the steps, at the strongest
                   β; then the same with the reference reset to the current policy
  staleness        rollouts from the weights of k updates ago, π_old in the clipped ratio being
                   the policy that sampled (the importance ratio) or the current one (ignored)
  sparse reward    GRPO from a weak cold start against rejection sampling (best-of-N) into SFT,
                   then GRPO, at the same budget of completions
  serving          the GRPO policy served with another prompt template, and with a fact missing

The loop is the chapter's `train` with what these modes need: rollouts from older weights, the
ratio against them, the drift between the two policies, and reference resets.

    python studies/05_failure_modes.py  # 384 s on 2 CPU cores, measured with the other one busy and
                                        # its two extra cold starts cached (about 100 s more the first
                                        # time); writes runs/studies/05_failure_modes/

Read beside: credit-assignment-is-the-whole-game.txt §7.1, §7.3, §7.5, §7.9, §7.10, §8;
credit-assignment-over-long-generations.txt (the KL weight).
Figures: reward_kl.png (the β sweep), staleness.png (pass@1 and clip fraction with stale
rollouts), support_and_anchor.png (the weak start and its mitigation; the poor reference).
"""

import collections
import copy
import dataclasses
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
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")

SERVING_FORMAT = "Q: {prompt}A:\n"  # a prompt template the policy never saw in training


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_failure_modes", "output folder for figures and results.json")
    betas: str = common.arg("0,0.5", "KL weights β beside the chapter's --beta (the KL study; the largest "
                            "anchors the poor-reference study)", item=float, empty=True)
    stale_lags: str = common.arg("8,32", "the policy ages of the async-staleness study", item=int)
    sparse_sft_steps: int = common.arg(60, "SFT steps of the weak cold start of the sparse-reward study")
    rft_rounds: int = common.arg(2, "rounds of rejection sampling into SFT (best-of-N, then fine-tune)")
    rft_n: int = common.arg(32, "completions per problem in a rejection-sampling round, N")
    rft_sft_steps: int = common.arg(25, "fine-tuning steps on the kept completions, per round")
    rft_lr: float = common.arg(1e-3, "AdamW learning rate of the rejection-sampling fine-tune")
    poor_shortcut_prob: float = common.arg(0.9, "share of bare-answer demonstrations in the poor reference's "
                                                "SFT (the default cold start has --shortcut-prob)")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, betas="0", sparse_sft_steps=2, rft_rounds=1, rft_n=2, rft_sft_steps=1)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "sparse_sft_steps", "rft_rounds", "rft_n", "rft_sft_steps", "rft_lr")
        common.require(0 <= self.poor_shortcut_prob <= 1, "--poor-shortcut-prob must be in [0, 1]")
        common.require(all(lag > 0 for lag in self.lag_list), "--stale-lags must be positive")
        common.require(all(b >= 0 for b in self.beta_list), "--betas must be non-negative")

    @property
    def beta_list(self) -> list[float]:
        return common.as_list(self.betas, float)

    @property
    def lag_list(self) -> list[int]:
        return common.as_list(self.stale_lags, int)


# ============================================================================================
# The chapter's loop, with stale rollouts and reference resets
# ============================================================================================
@dataclass(frozen=True)
class Setting:
    """How a run departs from the chapter's loop: rollouts from the weights of `lag` updates ago,
    π_old in the ratio being the policy that sampled ('importance') or the current one ('ignore',
    as if on-policy); the KL reference reset to the current policy every `ref_reset` updates (0:
    never). The default is the chapter's loop."""
    lag: int = 0
    ratio: str = "importance"
    ref_reset: int = 0

    @property
    def label(self) -> str:
        return f"GRPO age {self.lag} ({self.ratio})" if self.lag else "GRPO"


class RolloutWorker:
    """Who samples: the policy itself (lag 0, on-policy), or an asynchronous worker that runs the
    weights of `lag` updates ago (in the first updates, the oldest weights there are)."""

    def __init__(self, policy, lag: int):
        self.policy, self.lag = policy, lag
        self.actor = copy.deepcopy(policy) if lag else policy
        self.weights = collections.deque([self.snapshot()], maxlen=lag + 1) if lag else None

    def snapshot(self) -> dict:
        return {name: value.detach().clone() for name, value in self.policy.state_dict().items()}

    def model(self):
        if self.lag:
            self.actor.load_state_dict(self.weights[0])
        return self.actor

    def age(self) -> int:
        """Updates between the weights that sample now and the policy's."""
        return len(self.weights) - 1 if self.lag else 0

    def updated(self) -> None:
        """Call after each optimiser step: the worker receives the new weights `lag` updates late."""
        if self.lag:
            self.weights.append(self.snapshot())


@torch.no_grad()
def policy_drift(policy, completions: lm_world.Completions) -> float:
    """Mean |log π_θ(y_t) - log π_old(y_t)| over the completion tokens: how far the policy has moved
    from the one that sampled them (0 on-policy)."""
    now, _ = lm_world.token_logprobs(policy, completions.sequences, completions.attention_mask,
                                   completions.prompt_length)
    mask = completions.completion_mask
    return float(torch.where(mask, (now - completions.logprobs).abs(), 0.0).sum() / mask.sum().clamp(min=1))


def stale_step(policy, optimizer: torch.optim.Optimizer, completions: lm_world.Completions, advantages: torch.Tensor,
               ref_logp: torch.Tensor, args: grpo.Args, behaviour_logp: torch.Tensor | None) -> dict:
    """The chapter's `policy_gradient_step`, but π_old in ρ = π_θ / π_old is the policy that sampled
    when `behaviour_logp` gives its log-probs (stale rollouts: ρ is the importance ratio from the
    first iteration on, and the clip can act at once); None is the chapter's step."""
    mask = completions.completion_mask
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    stats = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
    for iteration in range(args.inner_iters):
        logp, entropy = lm_world.token_logprobs(policy, *batch, with_entropy=iteration == 0)
        if iteration == 0:
            old_logp = logp.detach() if behaviour_logp is None else behaviour_logp
            tokens = mask.sum().clamp(min=1)
            stats["kl"] = float(torch.where(mask, grpo.kl_k3(old_logp, ref_logp), 0.0).sum() / tokens)
            stats["entropy"] = float(torch.where(mask, entropy.detach(), 0.0).sum() / tokens)
        per_token, clip_active = grpo.clipped_surrogate(logp, old_logp, advantages, args.clip_eps)
        if args.beta > 0:
            per_token = per_token + args.beta * grpo.kl_k3(logp, ref_logp)
        loss = grpo.masked_loss(per_token, mask, args.loss_norm, args.max_new_tokens)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
        optimizer.step()
        stats["loss"] += loss.item() / args.inner_iters
        stats["clip_fraction"] += float((clip_active & mask).sum() / tokens) / args.inner_iters
        stats["grad_norm"] += grad_norm.item() / args.inner_iters
    return stats


def train(policy, reference, tokenizer, rl: grpo.Args, held_out: list, device, setting: Setting = Setting()) -> dict:
    """The chapter's `train` for GRPO, with `setting`'s stale rollouts (`RolloutWorker`) and
    reference resets. Each update's record adds the age of the weights that sampled and the
    policy's drift from them."""
    rng = np.random.default_rng(rl.seed)
    generator = torch.Generator(device).manual_seed(rl.seed)
    eval_generator = torch.Generator(device).manual_seed(rl.seed + 1)
    optimizer, schedule = grpo.make_optimizer(policy, rl)
    worker = RolloutWorker(policy, setting.lag)
    exclude = frozenset(p.prompt for p in rl.task.held_out())
    history, evals = [], []

    def held_out_eval(step: int) -> None:
        result = lm_world.evaluate(policy, tokenizer, held_out, rl.eval_samples, rl.max_new_tokens, eval_generator,
                                 device)
        evals.append({"step": step, "samples": step * rl.prompts * rl.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(rl.rl_steps), desc=setting.label, leave=False):
        if step % rl.eval_every == 0:
            held_out_eval(step)
        if setting.ref_reset and step and step % setting.ref_reset == 0:
            reference = lm_world.frozen_copy(policy)  # re-anchor: the KL now measures the drift since this update
        problems = rl.task.sample(rl.prompts, rng, exclude=exclude)
        completions, rewards = grpo.sample_groups(worker.model(), tokenizer, problems, rl, generator, device)
        age = worker.age()
        advantages = grpo.token_advantages(rewards, "grpo", completions.completion_mask)
        ref_logp = grpo.reference_logprobs(reference, completions)
        # stale rollouts: the ratio's π_old is the policy that sampled, or (ignored) the current one
        behaviour = completions.logprobs if setting.lag and setting.ratio == "importance" else None
        drift = policy_drift(policy, completions) if setting.lag else 0.0
        stats = stale_step(policy, optimizer, completions, advantages, ref_logp, rl, behaviour)
        schedule.step()
        worker.updated()
        history.append(grpo.batch_record(completions, rewards) | {"policy_age": age, "policy_drift": drift} | stats)
    held_out_eval(rl.rl_steps)
    return {"history": history, "evals": evals}


def run_grpo(initial, tokenizer, rl: grpo.Args, held_out: list, device, setting: Setting = Setting(),
             reference=None) -> dict:
    """The chapter's `run_method` for GRPO through this loop; the KL reference is the cold start
    itself unless `reference` is given."""
    policy = copy.deepcopy(initial)
    start = time.time()
    result = train(policy, lm_world.frozen_copy(initial if reference is None else reference), tokenizer, rl, held_out,
                   device, setting)
    result["wall_clock_s"] = time.time() - start
    result["final"] = grpo.final_evaluation(policy, tokenizer, rl, held_out, device)
    last = result["history"][-max(1, len(result["history"]) // 10):]
    result["final_kl"] = float(np.mean([h["kl"] for h in last]))
    result["policy"] = policy
    print(f"  {setting.label:24s} β={rl.beta:<5g} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, KL {result['final_kl']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def worst_regression(run: dict) -> float:
    """The largest drop of held-out pass@1 below its best so far, over training."""
    curve = np.array([e["pass@1"] for e in run["evals"]])
    return float((np.maximum.accumulate(curve) - curve).max())


def history_mean(run: dict, key: str) -> float:
    """The mean of a history entry over all of training."""
    return float(np.mean([h[key] for h in run["history"]]))


# ============================================================================================
# The studies
# ============================================================================================
def beta_sweep(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, on_policy: dict) -> dict:
    """GRPO at each β of --betas, beside the default-β run `on_policy`."""
    sweep = {rl.beta: on_policy}
    for beta in args.beta_list:
        if beta not in sweep:
            sweep[beta] = run_grpo(initial, tokenizer, dataclasses.replace(rl, beta=beta), held_out, device)
    return sweep


def sample_quality(policy, tokenizer, rl: grpo.Args, problems: list, device) -> dict:
    """What a KL weight does to the samples: the share of distinct completions among the
    `final_samples` of each problem, the share of well-formed ones, and the share that write at
    least one step before the answer."""
    repeated = [p for p in problems for _ in range(rl.final_samples)]
    _, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in repeated], rl.max_new_tokens,
                             torch.Generator(device).manual_seed(rl.seed + 19), device)
    groups = [texts[i:i + rl.final_samples] for i in range(0, len(texts), rl.final_samples)]
    return {"distinct": float(np.mean([len(set(g)) / len(g) for g in groups])),
            "well_formed": float(np.mean([lm_world.well_formed(t) for t in texts])),
            "writes_steps": float(np.mean(["\n" in t for t in texts]))}


def kl_study(tokenizer, rl: grpo.Args, held_out: list, device, sweep: dict) -> dict:
    """KL mis-tune, both sides: each β of the sweep, its KL, pass@1 and pass@k, entropy (second
    half of training) and `sample_quality`."""
    k = rl.final_samples
    return {beta: {"kl": run["final_kl"], "pass@1": run["final"]["pass@1"], f"pass@{k}": run["final"][f"pass@{k}"],
                   "entropy": grpo.late_mean(run, "entropy"),
                   **sample_quality(run["policy"], tokenizer, rl, held_out[:64], device)}
            for beta, run in sorted(sweep.items())}


def staleness_study(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, on_policy: dict) -> dict:
    """Async staleness: GRPO with rollouts `lag` updates old, π_old in the ratio being the policy
    that sampled (the clipped importance ratio) or the current one (staleness ignored), beside
    the on-policy run."""
    study = {"on-policy": on_policy}
    for lag in args.lag_list:
        for ratio in ("ignore", "importance"):
            study[f"age {lag}, {ratio}"] = run_grpo(initial, tokenizer, rl, held_out, device, Setting(lag, ratio))
    return study


def skew_study(policy, tokenizer, rl: grpo.Args, held_out: list, device) -> dict:
    """Memory / state mismatch at serving time: the GRPO policy evaluated with the prompt built
    as in training, by another template, and with a fact missing (the last operation dropped
    from the prompt; the verifier still wants the full chain's answer)."""
    served = {"as trained": held_out,
              "another template": [dataclasses.replace(p, prompt_format=SERVING_FORMAT) for p in held_out],
              # a prompt_format without {prompt} is the prompt itself: here the question minus its last step
              "last operation missing": [dataclasses.replace(p, prompt_format=lm_world.ChainProblem(p.start, p.ops[:-1]).question)
                                         for p in held_out]}
    return {name: grpo.final_evaluation(policy, tokenizer, rl, problems, device)["pass@1"]
            for name, problems in served.items()}


def rejection_sampling_sft(policy, tokenizer, args: Args, samples: int, device) -> list[dict]:
    """Best-of-N into SFT, in place: each of --rft-rounds rounds samples --rft-n completions of
    fresh training problems, adds those the verifier passes to a buffer of wins, and fine-tunes
    the policy on the buffer (cross-entropy on the completion, prompt masked). Spends `samples`
    completions in all. Returns per round: completions sampled, wins kept (distinct), the share
    of its problems solved, and the buffer's size."""
    rng = np.random.default_rng(args.seed + 23)
    generator = torch.Generator(device).manual_seed(args.seed + 23)
    exclude = frozenset(p.prompt for p in args.task.held_out())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.rft_lr, weight_decay=0.0)
    wins, rounds = [], []
    for _ in range(args.rft_rounds):
        problems = args.task.sample(max(1, samples // (args.rft_rounds * args.rft_n)), rng, exclude=exclude)
        repeated = [p for p in problems for _ in range(args.rft_n)]
        _, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens, generator,
                                 device)
        kept = sorted({(p.prompt, t) for p, t in zip(repeated, texts) if lm_world.verify(p, t)})
        wins += kept
        rounds.append({"sampled": len(texts), "kept": len(kept), "buffer": len(wins),
                       "solved": len({prompt for prompt, _ in kept}) / len(problems)})
        for _ in range(args.rft_sft_steps if wins else 0):
            batch = [wins[i] for i in rng.integers(len(wins), size=args.sft_batch)]
            loss = lm_world.target_nll(policy, *lm_world.text_batch(tokenizer, *zip(*batch), device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return rounds


def unsolved(evaluation: dict) -> float:
    """The share of held-out problems none of whose samples was right."""
    return float(np.mean([c == 0 for c in evaluation["correct"]]))


def still_unsolved(before: dict, after: dict) -> float:
    """Of the held-out problems with no right sample before, the share with none after."""
    never = [a == 0 for b, a in zip(before["correct"], after["correct"]) if b == 0]
    return float(np.mean(never)) if never else math.nan


def sparse_reward_study(tokenizer, rl: grpo.Args, args: Args, held_out: list, device) -> dict:
    """Sparse terminal reward: a weak cold start (--sparse-sft-steps of SFT) that rarely succeeds.
    GRPO from it, against the mitigation at the same budget of completions: rejection sampling
    into SFT with half of them, then GRPO for half the updates."""
    weak, _, _ = lm_world.cold_start_policy(dataclasses.replace(args.cold_start, sft_steps=args.sparse_sft_steps),
                                          device, args.cache, progress=False)
    budget = rl.rl_steps * rl.prompts * rl.group_size
    study = {"weak cold start": {"final": grpo.final_evaluation(weak, tokenizer, rl, held_out, device)}}
    study["GRPO"] = run_grpo(weak, tokenizer, rl, held_out, device)
    rft = copy.deepcopy(weak)
    rounds = rejection_sampling_sft(rft, tokenizer, args, budget // 2, device)
    study["rejection sampling"] = {"final": grpo.final_evaluation(rft, tokenizer, rl, held_out, device),
                                   "rounds": rounds}
    half = dataclasses.replace(rl, rl_steps=max(1, rl.rl_steps // 2))
    study["rejection sampling, then GRPO"] = run_grpo(rft, tokenizer, half, held_out, device)
    return study


def poor_reference_study(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, sweep: dict) -> dict:
    """KL anchoring with a poor reference: GRPO from the cold start, but anchored to an SFT model
    that rarely writes the steps (--poor-shortcut-prob of bare answers), at the sweep's strongest
    β; then the same with the reference reset to the current policy every --eval-every updates.
    Beside them, the sweep's run at that β, anchored to the cold start itself. Each with
    `sample_quality` (does it write the steps that pay?)."""
    poor, _, _ = lm_world.cold_start_policy(dataclasses.replace(args.cold_start, shortcut_prob=args.poor_shortcut_prob),
                                          device, args.cache, progress=False)
    strong = dataclasses.replace(rl, beta=max(sweep))
    study = {"poor reference itself": {"final": grpo.final_evaluation(poor, tokenizer, rl, held_out, device),
                                       **sample_quality(poor, tokenizer, rl, held_out[:64], device)}}
    study["cold start as reference"] = dict(sweep[strong.beta])  # a copy: the quality below is this study's
    for name, setting in {"poor reference": Setting(), "poor reference, reset": Setting(ref_reset=rl.eval_every)}.items():
        study[name] = run_grpo(initial, tokenizer, strong, held_out, device, setting, reference=poor)
    for run in study.values():
        if "policy" in run and "writes_steps" not in run:
            run.update(sample_quality(run["policy"], tokenizer, rl, held_out[:64], device))
    return study


# ============================================================================================
# Figures
# ============================================================================================
def plot_frontier(sweep: dict, before: float, path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for beta, run in sorted(sweep.items()):
        ax.plot(run["final_kl"], run["final"]["pass@1"], "o", markersize=8, label=f"β={beta:g}")
    ax.axhline(before, color="gray", linestyle="--", label="cold start")
    ax.set(xlabel="KL to the reference (k3, per token, last 10% of updates)", ylabel="held-out pass@1",
           title="GRPO: reward vs KL")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_staleness(stale: dict, path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, run in stale.items():
        axes[0].plot([e["samples"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], "o-", label=name)
        axes[1].plot(common.moving_average([h["clip_fraction"] for h in run["history"]], 5), label=name)
    axes[0].set(xlabel="completions sampled", ylabel="held-out pass@1", title="GRPO with stale rollouts")
    axes[1].set(xlabel="update", ylabel="clip fraction (trailing mean of 5)", title="where the clip acts")
    for ax in axes:
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_support_and_anchor(sparse: dict, poor: dict, budget: int, path) -> None:
    """Held-out pass@1 against completions sampled: the weak start's GRPO against rejection
    sampling then GRPO (drawn from where its sampling budget ends); GRPO from the poor reference."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, study, offsets in ((axes[0], sparse, {"rejection sampling, then GRPO": budget // 2}), (axes[1], poor, {})):
        for name, run in study.items():
            if "evals" in run:
                ax.plot([offsets.get(name, 0) + e["samples"] for e in run["evals"]],
                        [e["pass@1"] for e in run["evals"]], "o-", label=name)
        ax.set(xlabel="completions sampled", ylabel="held-out pass@1")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    axes[0].set_title("Sparse reward: a weak cold start")
    axes[1].set_title("KL to a reference that rarely writes the steps")
    common.save_figure(fig, path)


# ============================================================================================
# Claims
# ============================================================================================
def beta_claims(sweep: dict) -> list[dict]:
    """The reward-KL trade: β = 0 drifts furthest from the reference."""
    if 0.0 not in sweep or len(sweep) < 2:
        return []
    free, others = sweep[0.0], {b: r for b, r in sweep.items() if b > 0}
    return [common.claim(
        "over-long-generations", "small β allows more aggressive reward optimisation; large β keeps the "
        "policy close to the reference",
        "; ".join(f"β={b:g}: KL {r['final_kl']:.3f}, pass@1 {r['final']['pass@1']:.3f}" for b, r in sorted(sweep.items())),
        all(free["final_kl"] >= r["final_kl"] for r in others.values()))]


def kl_claims(rl: grpo.Args, before: dict, kl: dict) -> list[dict]:
    """KL mis-tune, both sides: the largest β against --beta, and β = 0 against --beta."""
    if rl.beta not in kl or len(kl) < 2:
        return []
    k = rl.final_samples

    def row(beta: float) -> str:
        r = kl[beta]
        return (f"β={beta:g}: KL {r['kl']:.3f}, pass@1 {r['pass@1']:.3f}, pass@{k} {r[f'pass@{k}']:.3f}, entropy "
                f"{r['entropy']:.3f}, distinct {r['distinct']:.2f}, well-formed {r['well_formed']:.2f}")
    claims, strong = [], max(kl)
    if strong > rl.beta:
        gain, held = (kl[b]["pass@1"] - before["pass@1"] for b in (rl.beta, strong))
        claims.append(common.claim(
            "whole-game §7.5", "KL too strong: the policy stays stuck near the SFT reference (here: less KL and at "
            "most half the pass@1 gain of the default β)", f"{row(rl.beta)}; {row(strong)}",
            kl[strong]["kl"] < kl[rl.beta]["kl"] and held <= gain / 2))
    if 0.0 in kl and rl.beta > 0:
        free, anchored = kl[0.0], kl[rl.beta]
        claims.append(common.claim(
            "whole-game §7.5", "KL too weak: the quality of the samples collapses (here: distinct or well-formed "
            "completions ≥ 5 points below the default β's)", f"{row(0.0)}; {row(rl.beta)}",
            anchored["distinct"] - free["distinct"] >= 0.05 or anchored["well_formed"] - free["well_formed"] >= 0.05))
    return claims


def staleness_claims(args: Args, stale: dict) -> list[dict]:
    """The async-staleness mode at the largest policy age: its symptom, and the clipped ratio."""
    if "on-policy" not in stale or not args.lag_list:
        return []
    lag = max(args.lag_list)
    fresh, ignored, weighted = stale["on-policy"], stale[f"age {lag}, ignore"], stale[f"age {lag}, importance"]

    def row(run: dict) -> str:
        return (f"pass@1 {run['final']['pass@1']:.3f}, worst drop {worst_regression(run):.3f}, clip fraction "
                f"{history_mean(run, 'clip_fraction'):.3f}, |log ρ| {history_mean(run, 'policy_drift'):.3f}")
    return [common.claim("whole-game §7.9", f"workers acting with old weights make updates unstable, with regressions "
                         f"(here: rollouts {lag} updates old, taken as on-policy, end ≥ 3 points below on-policy)",
                         f"on-policy: {row(fresh)}; age {lag}, ignored: {row(ignored)}",
                         fresh["final"]["pass@1"] - ignored["final"]["pass@1"] >= 0.03),
            common.claim("whole-game §7.9", f"the mitigation: importance ratios with clipping (here: at age {lag}, ≥ 3 "
                         "points above ignoring the staleness)", f"age {lag}, clipped importance ratio: {row(weighted)}",
                         weighted["final"]["pass@1"] - ignored["final"]["pass@1"] >= 0.03)]


def skew_claims(skew: dict) -> list[dict]:
    """Memory / state mismatch and state blindness at serving time, on the GRPO policy."""
    if not skew:
        return []
    trained = skew["as trained"]
    return [common.claim("whole-game §7.10", "train/serve skew is silent poison: a serving-time prompt built by "
                         "another template than training's (here: pass@1 ≥ 5 points lower; the fix, one builder for "
                         "both, is the as-trained number)",
                         f"as trained {trained:.3f}; served as {SERVING_FORMAT!r} {skew['another template']:.3f}",
                         trained - skew["another template"] >= 0.05),
            common.claim("whole-game §7.1", "state blindness: when the context drops a fact the answer needs, the "
                         "policy cannot act on it (here: the last operation missing from the prompt halves pass@1 or "
                         "worse)", f"as trained {trained:.3f}; last operation missing {skew['last operation missing']:.3f}",
                         skew["last operation missing"] <= trained / 2 if trained > 0 else None)]


def sparse_claims(rl: grpo.Args, args: Args, sparse: dict, before: dict, runs: dict) -> list[dict]:
    """Sparse terminal reward from a weak cold start: the symptom, the support problem, and two
    mitigations: rejection sampling into SFT, then GRPO, at the same budget of completions; and
    the full SFT cold start on demonstrations (the default one) under the same GRPO."""
    if not sparse or "grpo" not in runs:
        return []
    weak, grpo_run = sparse["weak cold start"]["final"], sparse["GRPO"]
    rft, both = sparse["rejection sampling"], sparse["rejection sampling, then GRPO"]
    k, spread = rl.final_samples, history_mean(grpo_run, "zero_spread")
    gain = grpo_run["final"]["pass@1"] - weak["pass@1"]
    kept = ", ".join(f"{r['kept']} of {r['sampled']}" for r in rft["rounds"])
    return [common.claim(
                "whole-game §7.3", "sparse terminal reward: almost all trajectories get 0, so groups carry no signal "
                "and the cold start fails (here: ≥ 80% of GRPO's groups with zero spread, pass@1 up < 5 points)",
                f"weak cold start pass@1 {weak['pass@1']:.3f}, pass@{k} {weak[f'pass@{k}']:.3f}; GRPO: {spread:.0%} of "
                f"groups with zero spread, pass@1 -> {grpo_run['final']['pass@1']:.3f} ({100 * gain:+.1f} points)",
                spread >= 0.8 and gain < 0.05),
            common.claim(
                "whole-game §8", "no estimator fixes a support problem (here: ≥ 80% of the held-out problems with no "
                f"right answer in {k} samples at the weak start still have none after GRPO)",
                f"{unsolved(weak):.0%} of problems unsolved at the weak start; of those, "
                f"{still_unsolved(weak, grpo_run['final']):.0%} after GRPO, {still_unsolved(weak, both['final']):.0%} "
                "after rejection sampling then GRPO", still_unsolved(weak, grpo_run["final"]) >= 0.8),
            common.claim(
                "whole-game §7.3, §8", "the mitigation: rejection sampling (best-of-N) into SFT, then GRPO, gets wins "
                "into the buffer first (here: ≥ 3 points above GRPO alone for the same number of completions)",
                f"best-of-{args.rft_n} kept {kept}; pass@1 after rejection sampling {rft['final']['pass@1']:.3f}, then "
                f"GRPO for {rl.rl_steps // 2} updates {both['final']['pass@1']:.3f}; GRPO alone for {rl.rl_steps} "
                f"updates {grpo_run['final']['pass@1']:.3f}", both["final"]["pass@1"] - grpo_run["final"]["pass@1"] >= 0.03),
            common.claim(
                "whole-game §7.3, §2", "the mitigation: an SFT cold start on successful traces (here: GRPO from the "
                f"default cold start, {args.sft_steps} SFT steps on demonstrations against {args.sparse_sft_steps}, "
                "gains ≥ 3 points more)", f"weak start {weak['pass@1']:.3f} -> {grpo_run['final']['pass@1']:.3f} "
                f"({100 * gain:+.1f} points); cold start {before['pass@1']:.3f} -> {runs['grpo']['final']['pass@1']:.3f} "
                f"({100 * (runs['grpo']['final']['pass@1'] - before['pass@1']):+.1f} points)",
                runs["grpo"]["final"]["pass@1"] - before["pass@1"] - gain >= 0.03)]


def poor_reference_claims(rl: grpo.Args, poor: dict, strong: float) -> list[dict]:
    """KL anchoring to a reference that rarely writes the steps, at the sweep's strongest β: the
    hold-back, and the reset."""
    if "cold start as reference" not in poor:
        return []

    def row(name: str) -> str:
        r = poor[name]
        return (f"{name}: pass@1 {r['final']['pass@1']:.3f}, writes steps {r['writes_steps']:.2f}, "
                f"KL {r['final_kl']:.3f}")
    reference, good, bad, reset = (poor[name]["final"]["pass@1"] for name in (
        "poor reference itself", "cold start as reference", "poor reference", "poor reference, reset"))
    return [common.claim(
                "whole-game §7.5", "a wrong reference: KL to an SFT model that rarely writes the steps holds the policy "
                f"back from the behaviour that pays (here, GRPO at β = {strong:g}: pass@1 ≥ 3 points below the same β "
                "anchored to the cold start)", f"the poor reference itself: pass@1 {reference:.3f}, writes steps "
                f"{poor['poor reference itself']['writes_steps']:.2f}; {row('cold start as reference')}; "
                f"{row('poor reference')}", good - bad >= 0.03),
            common.claim(
                "whole-game §7.5", f"the mitigation: reset the reference carefully (here: to the current policy every "
                f"{rl.eval_every} updates; ≥ 3 points above the poor reference without resets)",
                f"{row('poor reference, reset')}; {row('poor reference')}", reset - bad >= 0.03)]


# ============================================================================================
# Metrics, report, main
# ============================================================================================
def collect_metrics(rl: grpo.Args, sweep: dict, stale: dict, skew: dict, kl: dict, sparse: dict, poor: dict) -> dict:
    metrics = {}
    for beta, run in sweep.items():
        label = f"grpo_beta{beta:g}"
        metrics |= {f"{label}_pass@{k}": run["final"][f"pass@{k}"] for k in rl.ks}
        metrics |= {f"{label}_kl": run["final_kl"], f"{label}_length": run["final"]["length"],
                    f"{label}_wall_clock_s": run["wall_clock_s"]}
    for name, run in stale.items():
        metrics[f"staleness[{name}]_pass@1"] = run["final"]["pass@1"]
        metrics[f"staleness[{name}]_worst_regression"] = worst_regression(run)
        metrics |= {f"staleness[{name}]_{key}": history_mean(run, key)
                    for key in ("clip_fraction", "policy_drift", "policy_age")}
    metrics |= {f"served[{name}]_pass@1": value for name, value in skew.items()}
    for study, runs in (("sparse", sparse), ("poor_reference", poor)):
        for name, run in runs.items():
            metrics[f"{study}[{name}]_pass@1"] = run["final"]["pass@1"]
            metrics[f"{study}[{name}]_unsolved"] = unsolved(run["final"])
            metrics |= {f"{study}[{name}]_{key}": run[key] for key in ("writes_steps", "final_kl") if key in run}
            if "history" in run:
                metrics[f"{study}[{name}]_zero_spread"] = history_mean(run, "zero_spread")
    metrics |= {f"kl_study[beta={beta:g}]_{key}": value for beta, row in kl.items() for key, value in row.items()}
    return metrics


TITLES = {"staleness": "GRPO with stale rollouts (failure mode: async staleness):",
          "kl": "KL weight, both sides (failure mode: KL mis-tune):",
          "serving": "The GRPO policy served differently from how it was trained (state mismatch, state blindness):",
          "sparse": "A weak cold start (sparse reward) and its mitigation:",
          "poor_reference": "GRPO from a poor reference that rarely writes the steps (KL anchoring):"}


def tables(rl: grpo.Args, stale: dict, skew: dict, kl: dict, sparse: dict, poor: dict) -> dict:
    """Each study as the table it prints and the docs show (keys of TITLES)."""
    k = rl.final_samples
    stale_rows = [[name, run["final"]["pass@1"], worst_regression(run),
                   *(history_mean(run, key) for key in ("policy_age", "clip_fraction", "policy_drift"))]
                  for name, run in stale.items()]
    kl_rows = [[f"{b:g}", r["kl"], r["pass@1"], r[f"pass@{k}"], r["entropy"], r["distinct"], r["well_formed"],
                r["writes_steps"]] for b, r in kl.items()]
    found = {"staleness": {"header": ["rollouts", "pass@1", "worst drop", "policy age", "clip fraction",
                                      "drift (mean abs log ρ)"], "rows": stale_rows},
             "kl": {"header": ["β", "KL", "pass@1", f"pass@{k}", "entropy", "distinct", "well-formed", "writes steps"],
                    "rows": kl_rows},
             "serving": {"header": ["prompt at serving", "pass@1"], "rows": [[n, v] for n, v in skew.items()]}}
    for name, study, columns in (("sparse", sparse, ["KL"]), ("poor_reference", poor, ["writes steps", "KL"])):
        rows = [[label, r["final"]["pass@1"], r["final"][f"pass@{k}"], f"{unsolved(r['final']):.0%}",
                 f"{history_mean(r, 'zero_spread'):.0%}" if "history" in r else "-",
                 *([f"{r['writes_steps']:.0%}"] if "writes steps" in columns else []), r.get("final_kl", "-")]
                for label, r in study.items()]
        found[name] = {"header": ["policy", "pass@1", f"pass@{k}", "unsolved", "zero-spread", *columns], "rows": rows}
    return found


def report(claims: list[dict], found: dict) -> None:
    for name, title in TITLES.items():
        print(f"\n{title}")
        print(common.format_table(found[name]["rows"], found[name]["header"]))
    print("\n" + common.format_claims(claims))


def without_models(study: dict) -> dict:
    """A study's runs without their policy (what results.json can hold)."""
    return {name: {k: v for k, v in run.items() if k != "policy"} for name, run in study.items()}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    rl = lm_world.chapter_lm_args(grpo.Args, args)
    print(f"05 study: failure modes; policy {info['path']}, device {device}")
    held_out = rl.task.held_out(rl.eval_problems)
    before = grpo.final_evaluation(initial, tokenizer, rl, held_out, device)
    on_policy = run_grpo(initial, tokenizer, rl, held_out, device)
    sweep = beta_sweep(initial, tokenizer, rl, args, held_out, device, on_policy)
    stale = staleness_study(initial, tokenizer, rl, args, held_out, device, on_policy)
    sparse = sparse_reward_study(tokenizer, rl, args, held_out, device)
    poor = poor_reference_study(initial, tokenizer, rl, args, held_out, device, sweep)
    skew = skew_study(on_policy["policy"], tokenizer, rl, held_out, device)
    kl = kl_study(tokenizer, rl, held_out, device, sweep)
    plot_frontier(sweep, before["pass@1"], out / "reward_kl.png")
    plot_staleness(stale, out / "staleness.png")
    plot_support_and_anchor(sparse, poor, rl.rl_steps * rl.prompts * rl.group_size, out / "support_and_anchor.png")
    claims = (beta_claims(sweep) + staleness_claims(args, stale) + kl_claims(rl, before, kl) + skew_claims(skew)
              + sparse_claims(rl, args, sparse, before, {"grpo": on_policy}) + poor_reference_claims(rl, poor, max(sweep)))
    metrics = collect_metrics(rl, sweep, stale, skew, kl, sparse, poor)
    metrics["tables"] = tables(rl, stale, skew, kl, sparse, poor)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, chapter_args=dataclasses.asdict(rl), cold_start=before,
                         beta_sweep=without_models(sweep), staleness=without_models(stale), served=skew,
                         kl_study=kl, sparse_reward=without_models(sparse), poor_reference=without_models(poor))
    report(claims, metrics["tables"])
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
