"""Study beside 06: does progress tell a decisive step from a correct but irrelevant one?

Survey §4.5.3: a progress model scores a step by the change it makes in the chance of reaching a
right answer, so "they distinguish between steps that are correct-but-irrelevant and steps that
are correct-and-decisive", where a step's correctness, the same for every right step, cannot.
Survey §4.5.2, the other side: "PRMs also do not distinguish" the two, gold or Monte Carlo labelled.
The task holds both kinds of right step by design (studies/07_lengths.py's task and cold start):
every chain holds one hard step (its one multiplication, at a random place) among easy ones
(additions and subtractions), and the cold start learned from demonstrations that get the hard
step right only --hard-accuracy of the time. Among a chain's right steps, the hard one is
decisive (the policy often gets it wrong, so taking it right settles much of the outcome) and
the easy ones stand for the irrelevant: the answer needs them too (a wrong one makes it wrong),
but the policy gets them right almost surely, so taking them right changes P(success) little, as
a no-op's would. The task holds no step the answer does not depend on (such as restating the
problem). Each kind is named by its operation, not by its progress. No RL: the cold-start
policy is the prover.

  value        V_j = P(success | the problem and the first j lines of its worked solution),
               the share of --rollouts completions from that prefix that reach the right answer
               (06's Math-Shepherd rollouts, from every prefix, the bare problem too)
  progress     of step k (line k of the worked solution): V_{k+1} - V_k
  correctness  06's gold step label: 1 on every line of the worked solution
  ranking      over the right steps (the worked solution's; the policy takes the same ones on a
               right prefix), each score's AUROC for "this is the hard step"; beside progress and
               correctness, what a PRM would learn from Math-Shepherd: the value after the step
               (its soft label) and its hard label (any of the first --label-n rollouts right)
  accuracy     each step's own accuracy after its right prefix (line k of the rollouts from V_k's
               prefix): the premise, that the hard step is harder than the easy ones
Verdicts: per seed (other chains and rollouts), AUROC(progress) - AUROC(correctness), decided by
common.seed_verdict over --repeats seeds; a PRM's label at chance, one claim per label: the gold
correctness exactly (0.5 on every seed), the Math-Shepherd label's AUROC - 0.5 by seed_verdict's
zero rule on both sides, zero within the least one seed's steps tell from chance. Premise of all
three: the hard step is the less accurate on every seed.

Read beside: credit-assignment-problem-survey.txt §4.5.2-4.5.3; 06_prm_qrm.py (Math-Shepherd labels).

    python studies/06_progress.py --smoke                   # seconds
    python studies/06_progress.py     # 87-109 s on 2 CPU cores (3 seeds, beside other jobs; last 99 s);
                                      # writes runs/studies/06_progress/
Without runs/cold_start/ the first run trains studies/07_lengths.py's cold start (about 20 min), cached for both.
"""

from __future__ import annotations

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

prm = importlib.import_module("06_prm_qrm")

SCORES = ("progress", "value after the step", "Math-Shepherd label", "correctness")


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/06_progress", "output folder for figures and results.json")
    steps: int = common.arg(8, "operations per chain: one hard step (a multiplication) at a random place, the rest easy")
    problems: int = common.arg(64, "chains per seed")
    rollouts: int = common.arg(16, "completions rolled out from each prefix of a worked solution")
    label_n: int = common.arg(8, "Math-Shepherd: a step's hard label from the first N rollouts (the paper's N = 8)")
    repeats: int = common.arg(3, "seeds: --seed, --seed + 1, ...")
    hard_accuracy: float = common.arg(0.4, "cold start: share of demonstrations whose hard step is right")
    min_steps: int = common.arg(2, "cold start: fewest operations in a demonstration")
    max_steps: int = common.arg(16, "cold start: most operations in a demonstration")
    sft_steps: int = common.arg(3000, "cold start: SFT steps on demonstrations")
    shortcut_prob: float = common.arg(0.0, "cold start: share of demonstrations that give the bare answer, no steps")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, steps=2, min_steps=2, max_steps=3, problems=3, rollouts=4, label_n=2,
                 repeats=2)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "problems", "rollouts", "label_n", "repeats")
        common.require(2 <= self.steps and self.min_steps <= self.steps <= self.max_steps,
                       "--steps must be at least 2 (a hard step and an easy one) and within --min-steps..--max-steps")
        common.require(self.label_n <= self.rollouts, "--label-n must be in 1..--rollouts")
        common.require(0 < self.hard_accuracy <= 1, "--hard-accuracy must be in (0, 1]")

    @property
    def cold_start(self) -> lm_world.ColdStart:
        return dataclasses.replace(super().cold_start, one_hard_step=True, hard_step_accuracy=self.hard_accuracy)


# ==== Rollouts from every prefix of a worked solution, and each step's scores
def prefixes(problem: lm_world.ChainProblem) -> list[str]:
    """The problem and the first j lines of its worked solution, j = 0..steps: the bare problem, then 06's step prefixes."""
    return [problem.prompt] + prm.step_prefixes(problem, problem.solution)


def hard_step(problem: lm_world.ChainProblem) -> int:
    """The line of the chain's one multiplication."""
    return next(i for i, (op, _) in enumerate(problem.ops) if op == "*")


def hard_mask(positions: np.ndarray, steps: int) -> np.ndarray:
    """(problems, steps): true on each chain's hard step."""
    return np.arange(steps)[None] == np.asarray(positions)[:, None]


def roll_out(policy, tokenizer, problems: list, args: Args, generator, device) -> dict:
    """--rollouts completions from every prefix of every chain's worked solution: did each reach the
    right answer, and did it write the line after its prefix right? (problems, steps + 1, rollouts) each."""
    per_problem = (args.steps + 1) * args.rollouts
    prompts = [prefix for p in problems for prefix in prefixes(p) for _ in range(args.rollouts)]
    repeated = [p for p in problems for _ in range(per_problem)]
    completions, tails = lm_world.sample(policy, tokenizer, prompts, args.max_new_tokens, generator, device,
                                         chunk=1024)
    solutions = [prompt[len(p.prompt):] + tail for p, prompt, tail in zip(repeated, prompts, tails)]
    success = lm_world.verifier_rewards(repeated, solutions, completions.truncated).numpy().astype(bool)
    shape = (len(problems), args.steps + 1, args.rollouts)
    first_line = [(row // args.rollouts) % (args.steps + 1) for row in range(len(prompts))]  # the rollout's own first
    next_right = [j < len(right) and right[j] for j, right in
                  zip(first_line, (lm_world.steps_right(p, s) for p, s in zip(repeated, solutions)))]
    return {"success": success.reshape(shape), "next_right": np.array(next_right).reshape(shape)}


def step_progress(success: np.ndarray) -> np.ndarray:
    """Each step's progress, (problems, steps), from the rollouts' outcomes (problems, steps + 1, rollouts)."""
    values = success.mean(-1)
    # progress_k = V_{k+1} - V_k = P(success | lines 0..k) - P(success | lines 0..k-1)
    return values[:, 1:] - values[:, :-1]


def step_scores(problems: list, success: np.ndarray, label_n: int) -> dict[str, np.ndarray]:
    """Each score of every step of the worked solutions, (problems, steps): progress; the value after
    the step and Math-Shepherd's hard label, from its prefix's rollouts; the gold correctness."""
    through = success[:, 1:]  # the rollouts from the prefixes through each step
    return {"progress": step_progress(success), "value after the step": through.mean(-1),
            "Math-Shepherd label": np.array([prm.math_shepherd_labels(s, 1.0, label_n)[:-1] for s in through]),
            "correctness": np.array([prm.gold_step_labels(p, p.solution)[:-1] for p in problems], float)}


def ranking(scores: dict[str, np.ndarray], hard: np.ndarray) -> dict[str, float]:
    """Each score's AUROC for "this is the hard step" over the right steps (every step scored here is one)."""
    return {name: lm_world.auroc(s[hard], s[~hard]) for name, s in scores.items()}


def run_seed(policy, tokenizer, args: Args, seed: int, device) -> dict:
    """One seed's chains and rollouts: each score's ranking, the steps' own accuracy, and what the figure draws."""
    problems = args.task.sample(args.problems, np.random.default_rng(seed), steps=args.steps)
    rolled = roll_out(policy, tokenizer, problems, args, torch.Generator(device).manual_seed(seed), device)
    positions = np.array([hard_step(p) for p in problems])
    hard = hard_mask(positions, args.steps)
    scores = step_scores(problems, rolled["success"], args.label_n)
    accuracy = rolled["next_right"].mean(-1)[:, :-1]  # step k's own accuracy after its right prefix
    return {"seed": seed, "auroc": ranking(scores, hard), "hard_accuracy": float(accuracy[hard].mean()),
            "easy_accuracy": float(accuracy[~hard].mean()), "progress_hard": float(scores["progress"][hard].mean()),
            "progress_easy": float(scores["progress"][~hard].mean()), "hard_steps": positions,
            "values": rolled["success"].mean(-1), "progress": scores["progress"]}


# ==== Claim, figure, table
def by_seed(values: list[float]) -> str:
    """One number per seed, "a/b/c"."""
    return "/".join(f"{v:.3f}" for v in values)


def aurocs(per_seed: list[dict]) -> dict[str, list[float]]:
    """Each score's AUROC for the hard step, one per seed."""
    return {name: [s["auroc"][name] for s in per_seed] for name in SCORES}


def decisive(per_seed: list[dict]) -> bool:
    """The premise, exact: the hard step's own accuracy below the easy steps' on every seed."""
    return all(s["hard_accuracy"] < s["easy_accuracy"] for s in per_seed)


def premise_note(per_seed: list[dict]) -> str:
    """What the measured text adds where the premise fails."""
    return "" if decisive(per_seed) else "; premise not met: the hard step is not the less accurate on every seed"


# what every claim compares, in its measured text: the task's easy steps stand for the essay's irrelevant ones
CONTRAST = ("compared: the hard step against the chain's easy steps, which the answer needs (a wrong one makes it "
            "wrong) but the policy gets right almost surely, so that taking them right changes P(success) little; "
            "the task holds no step the answer does not depend on (a no-op such as restating the problem), so how "
            "such a step ranks is not measured")


def progress_claim(args: Args, per_seed: list[dict]) -> dict:
    """Does progress rank the decisive step above the irrelevant right ones better than correctness?
    AUROC(progress) - AUROC(correctness), one per seed, by common.seed_verdict; the premise, exact:
    the hard step's own accuracy below the easy steps' on every seed."""
    auroc = aurocs(per_seed)
    holds, text = common.seed_verdict(np.subtract(auroc["progress"], auroc["correctness"]))

    seed_names = "/".join(str(s["seed"]) for s in per_seed)
    measured = (f"AUROC for the hard step among the right steps of {args.problems} chains of {args.steps} steps per "
                f"seed ({args.rollouts} rollouts per prefix), seeds {seed_names}: progress "
                f"{by_seed(auroc['progress'])}, correctness {by_seed(auroc['correctness'])} (1 on every right step: "
                f"all tied, chance); progress minus correctness, mean [95% interval over {len(per_seed)} seeds]: "
                f"{text}; mean progress of the hard step {np.mean([s['progress_hard'] for s in per_seed]):+.3f}, "
                f"of the easy ones {np.mean([s['progress_easy'] for s in per_seed]):+.3f}; each step's own "
                f"accuracy after its right prefix, hard {by_seed([s['hard_accuracy'] for s in per_seed])}, easy "
                f"{by_seed([s['easy_accuracy'] for s in per_seed])}; {CONTRAST}{premise_note(per_seed)}")
    return common.claim("survey §4.5.3", "progress models distinguish between steps that are correct-but-irrelevant "
                        "and steps that are correct-and-decisive, which step correctness cannot: among the right "
                        "steps of one-hard-step chains, progress (the change in P(success | prefix)) ranks the "
                        "decisive step (the hard multiplication, which the policy often gets wrong) above the "
                        "irrelevant ones (easy additions and subtractions, right almost surely) better than "
                        "correctness does", measured, holds if decisive(per_seed) else None)


def detectable_auroc(hard: int, easy: int) -> float:
    """The least |AUROC - 0.5| one seed's steps tell from chance: the Mann-Whitney test at 95% on
    `hard` decisive and `easy` irrelevant steps, untied scores."""
    # under chance, AUROC's standard error is sqrt((n_1 + n_2 + 1) / (12 n_1 n_2))
    return common.t_quantile(hard + easy - 2) * math.sqrt((hard + easy + 1) / (12 * hard * easy))


def chance_verdict(excess: list[float], detectable: float) -> tuple[bool | None, str]:
    """Is AUROC - 0.5 zero? yes where its 95% interval over seeds holds 0 and lies within
    ±detectable, no where it excludes 0 (ranking the decisive step lower tells it apart too), else
    None: common.seed_verdict's rule for a zero, on both sides."""
    holds, text = common.seed_verdict(excess, zero_below=detectable)
    mirrored, _ = common.seed_verdict(-np.asarray(excess), zero_below=detectable)
    return (holds if holds == mirrored else None), text


def prm_statement(label: str) -> str:
    """The survey's §4.5.2 sentence, on one PRM label: the label at chance for the hard step."""
    return ("PRMs also do not distinguish between correct but irrelevant steps and correct and decisive steps: among "
            f"the right steps of one-hard-step chains, {label} ranks the decisive step (the hard multiplication, "
            "which the policy often gets wrong) neither above nor below the irrelevant ones (easy additions and "
            "subtractions, which the answer needs but the policy gets right almost surely): AUROC 0.5")


def prm_measured(args: Args, per_seed: list[dict], label: str) -> str:
    """A PRM claim's measured text around one label's AUROCs (`label`: its numbers and how they read)."""
    return (f"AUROC for the hard step among the right steps of {args.problems} chains of {args.steps} steps per "
            f"seed, seeds {'/'.join(str(s['seed']) for s in per_seed)}: {label}; progress "
            f"{by_seed(aurocs(per_seed)['progress'])}; {CONTRAST}{premise_note(per_seed)}")


def gold_prm_claim(args: Args, per_seed: list[dict]) -> dict:
    """Does the gold step-correctness label leave the decisive step tied with the irrelevant right
    ones? Exact: AUROC 0.5 on every seed. Same premise as progress_claim."""
    correctness = aurocs(per_seed)["correctness"]
    tied = all(a == 0.5 for a in correctness)
    how = "1 on every right step: all tied, chance on every seed, exact" if tied else "not chance on every seed"
    measured = prm_measured(args, per_seed, f"gold step correctness {by_seed(correctness)} ({how})")
    return common.claim("survey §4.5.2", prm_statement("a PRM's gold step-correctness label (1 on every right step)"),
                        measured, tied if decisive(per_seed) else None)


def math_shepherd_claim(args: Args, per_seed: list[dict]) -> dict:
    """Does Math-Shepherd's automatic label leave the decisive step tied with the irrelevant right
    ones? AUROC - 0.5 per seed by chance_verdict. Same premise as progress_claim."""
    label = aurocs(per_seed)["Math-Shepherd label"]
    detectable = detectable_auroc(args.problems, args.problems * (args.steps - 1))
    holds, text = chance_verdict(np.subtract(label, 0.5), detectable)
    measured = prm_measured(args, per_seed, (
        f"Math-Shepherd's label (any of {args.label_n} rollouts through the step right: a thresholded estimate of "
        f"P(success | the prefix through the step), so that an easy step before the hard one gets 0 when all its "
        f"rollouts then miss the hard step) "
        f"{by_seed(label)}, minus 0.5, mean [95% interval over {len(per_seed)} seeds]: {text} (chance: the interval "
        f"holds 0 within ±{detectable:.3f}, the least one seed's {args.problems} hard and "
        f"{args.problems * (args.steps - 1)} easy steps tell from chance)"))
    return common.claim("survey §4.5.2", prm_statement(
        "a PRM's automatic Math-Shepherd label from Monte Carlo rollouts (1 if any of the first N rollouts through "
        "the step reaches the right answer)"), measured, holds if decisive(per_seed) else None)


def plot(args: Args, per_seed: list[dict], path: Path) -> None:
    """Left: the progress of the hard and the easy right steps (all seeds). Right: P(success | prefix)
    against the prefix's place relative to the hard step, the mean over chains and seeds."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    bins = np.linspace(-1, 1, 41)
    for is_hard, label, colour in ((False, "easy steps (right almost surely)", "C0"), (True, "the hard step", "C3")):
        chosen = np.concatenate([s["progress"][hard_mask(s["hard_steps"], args.steps) == is_hard] for s in per_seed])
        axes[0].hist(chosen, bins, color=colour, alpha=0.6, density=True, label=label)
    axes[0].set(xlabel="progress V(through the step) - V(before it)", ylabel="density",
                title="Progress of the right steps (correctness: 1 on every one)")
    offsets = np.arange(-args.steps + 1, args.steps + 1)  # the prefix's lines minus the hard step's line
    by_offset = {o: [] for o in offsets}
    for s in per_seed:
        for values, h in zip(s["values"], s["hard_steps"]):
            for j, v in enumerate(values):
                by_offset[j - h].append(v)
    kept = [o for o in offsets if by_offset[o]]
    axes[1].plot(kept, [np.mean(by_offset[o]) for o in kept], "o-", color="C2")
    axes[1].axvspan(0, 1, color="C3", alpha=0.12, label="writing the hard step")
    axes[1].set(xlabel="lines of the prefix minus the hard step's line (0: just before it)",
                ylabel="P(success | prefix), mean", ylim=(0, 1.02),
                title=f"Value along the worked solution ({len(per_seed)} seeds)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    common.save_figure(fig, path)


def metrics_of(per_seed: list[dict]) -> dict:
    """Each seed's numbers under seed<N>_, their means, and the table (a row per seed, then the mean)."""
    keys = ("hard_accuracy", "easy_accuracy", "progress_hard", "progress_easy")
    rows, metrics = [], {}
    for s in per_seed:
        numbers = {k: s[k] for k in keys} | {f"auroc[{name}]": s["auroc"][name] for name in SCORES}
        metrics |= {f"seed{s['seed']}_{k}": v for k, v in numbers.items()}
        rows.append([s["seed"], *numbers.values()])
    mean = [float(np.mean([row[i] for row in rows])) for i in range(1, len(rows[0]))]
    metrics |= dict(zip([*keys, *(f"auroc[{name}]" for name in SCORES)], mean))
    header = ["seed", "hard acc", "easy acc", "prog hard", "prog easy", "AUROC: prog", "value", "MS label", "correct"]
    return metrics | {"tables": {"progress": {"header": header, "rows": [*rows, ["mean", *mean]]}}}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, policy, tokenizer, info = lm_world.start_lm_run(args)
    print(f"06 progress: {args.problems} chains of {args.steps} steps x {args.repeats} seeds, {args.rollouts} rollouts "
          f"per prefix; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), device {device}")
    per_seed = [run_seed(policy, tokenizer, args, args.seed + i, device)
                for i in tqdm(range(args.repeats), desc="seeds")]
    claims = [progress_claim(args, per_seed), gold_prm_claim(args, per_seed), math_shepherd_claim(args, per_seed)]
    plot(args, per_seed, out / "progress.png")
    metrics = metrics_of(per_seed)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, seeds=per_seed,
                         cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    table = metrics["tables"]["progress"]
    print("\n" + common.format_table(table["rows"], table["header"]) + "\n\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
