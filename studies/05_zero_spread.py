"""05 study — groups with no reward spread: how many there are, by group size G and difficulty,
and what they give the gradient.

A group whose G rewards are all equal (all right or all wrong) has a zero advantage under every
per-group baseline: it adds nothing to the policy gradient. Each seed draws its own `--problems`
training problems and samples `--samples` completions of each from three policies: the default
cold start, the weak one (05_failure_modes.py's sparse-reward start, `--weak-sft-steps` of SFT) and
the policy after the chapter's GRPO run on that seed. From them, the expected share of groups with
zero spread at each G. Apart from those, `--bin-samples` completions per problem estimate its own
pass rate, which bins it as hard, medium or easy (below 1/3, up to 2/3, above), so that the bins'
share of groups with a signal is measured on samples that did not choose the bin. Last, on one
batch of each seed's GRPO policy, the gradient norm of the policy-gradient term and of the β·KL
term from the zero-spread groups alone and from the mixed ones. Two more checks on the same
problems: how close the group's baseline (the mean of the other G - 1) and one baseline for all
problems come to each problem's success rate; and the cold start's samples at each of
--temperatures (well-formed, distinct within a problem's group). Claims decide over the seeds
(whole-game §2, §5, §7.3, §8; over-long-generations: the KL term, "When it falls down"; SS-GRPO's
checklist).

    python studies/05_zero_spread.py    # 158 s on 2 CPU cores, beside other jobs;
                                        # writes runs/studies/05_zero_spread/

Figure: zero_spread.png (share of groups with zero spread against G for each policy; share of
groups with a signal in each difficulty bin).
"""

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")

POLICIES = ("cold start", "weak cold start", "after GRPO")
BINS = ("hard", "medium", "easy")  # by the problem's own pass rate: below 1/3, 1/3 to 2/3, above 2/3
WHEN = {"cold start": "at the cold start", "after GRPO": "after GRPO"}  # the policies whose problems are binned
COLORS = dict(zip(POLICIES, ("C0", "C1", "C2")))  # one colour per policy in both panels
MOST = 0.5  # "most" trajectories: more than half


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_zero_spread", "output folder for figures and results.json")
    group_sizes: str = common.arg("2,4,8,16", "group sizes G of the zero-spread table (at most --samples)", item=int)
    seeds: int = common.arg(3, "seeds --seed, --seed + 1, ...: each its own problems, samples and GRPO run")
    problems: int = common.arg(128, "fresh training problems per seed (none held out)")
    samples: int = common.arg(16, "completions per problem and policy for the share of zero-spread groups")
    bin_samples: int = common.arg(32, "further completions per problem that estimate its own pass rate (its bin)")
    weak_sft_steps: int = common.arg(60, "SFT steps of the weak cold start (05_failure_modes.py's sparse one)")
    temperatures: str = common.arg("0.25,1,2", "sampling temperatures of the entropy check at the cold start "
                                   "(1 among them: the others are read against it)", item=float)

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, group_sizes="2", seeds=2, problems=6, samples=2, bin_samples=3,
                 weak_sft_steps=2)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "seeds", "problems", "samples", "bin_samples", "weak_sft_steps")
        common.require(all(2 <= g <= self.samples for g in self.group_list), "--group-sizes must be in 2..--samples")
        common.require(1.0 in self.temperature_list and min(self.temperature_list) > 0,
                       "--temperatures must be positive and hold 1")

    @property
    def group_list(self) -> list[int]:
        return common.as_list(self.group_sizes, int)

    @property
    def temperature_list(self) -> list[float]:
        return common.as_list(self.temperatures, float)


# ---------------------------------------------------------------------------- the measurement
def zero_spread_probability(n: int, c: int, G: int) -> float:
    """The chance that G of n samples (c right), drawn without replacement, are all right or
    all wrong: [C(c, G) + C(n-c, G)] / C(n, G). Unbiased for p^G + (1-p)^G."""
    return (math.comb(c, G) + math.comb(n - c, G)) / math.comb(n, G)


def zero_spread_share(correct: list[int], samples: int, G: int) -> float:
    """The expected share of groups of G with zero spread, over problems: also the share of the
    sampled completions that get A = 0 (every group holds G of them)."""
    return float(np.mean([zero_spread_probability(samples, c, G) for c in correct]))


def zero_spread_table(correct: list[int], steps: list[int], samples: int, group_sizes: list[int]) -> dict:
    """Per difficulty (number of steps): pass@1 and, for each G, the expected share of groups
    with zero reward spread, from `samples` completions per problem."""
    table = {}
    for k in sorted(set(steps)):
        counts = [c for c, s in zip(correct, steps) if s == k]
        table[k] = {"pass@1": float(np.mean(counts)) / samples,
                    **{G: zero_spread_share(counts, samples, G) for G in group_sizes}}
    return table


def right_counts(policy, tokenizer, rl: grpo.Args, problems: list, samples: int, salt: int, device) -> list[int]:
    """Right completions of each problem in `samples` (temperature 1); `salt` keeps the draws of
    one seed apart."""
    generator = torch.Generator(device).manual_seed(rl.seed * 1000 + salt)
    return lm_world.evaluate(policy, tokenizer, problems, samples, rl.max_new_tokens, generator, device)["correct"]


def difficulty(c: int, n: int) -> str:
    """The bin of a problem with c right of n."""
    return "hard" if 3 * c < n else "easy" if 3 * c > 2 * n else "medium"


def signal_by_bin(m: dict, args: Args, G: int) -> dict:
    """Per difficulty bin: its problems and the expected share of groups of G with a reward
    spread (NaN where the bin is empty)."""
    bins = [difficulty(c, args.bin_samples) for c in m["bin_correct"]]
    return {b: {"problems": bins.count(b),
                "signal": 1 - zero_spread_share([c for c, d in zip(m["correct"], bins) if d == b], args.samples, G)
                if b in bins else math.nan} for b in BINS}


def gradient_by_spread(policy, reference, tokenizer, args: grpo.Args, device) -> dict:
    """On one batch of the current policy: the gradient norm of the policy-gradient term and of
    the β·KL term, from the zero-spread groups alone and from the mixed groups alone (GRPO); and
    the share of each part's tokens whose KL term pulls (π ≠ π_ref there). NaN for a part with no
    group in the batch."""
    problems = args.task.sample(args.prompts, np.random.default_rng(args.seed + 7))
    completions, rewards = grpo.sample_groups(policy, tokenizer, problems, args,
                                              torch.Generator(device).manual_seed(args.seed + 7), device)
    advantages = grpo.group_advantages(rewards, "grpo").flatten()
    no_spread_rows = grpo.zero_spread(rewards).repeat_interleave(args.group_size)
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    ref_logp = grpo.reference_logprobs(reference, completions)
    norms = {}
    for part, rows in (("zero-spread", no_spread_rows), ("mixed", ~no_spread_rows)):
        mask = completions.completion_mask & rows[:, None]
        for term in ("pg", "kl"):
            policy.zero_grad()
            logp, _ = lm_world.token_logprobs(policy, *batch)
            per_token = -advantages[:, None] * logp if term == "pg" else args.beta * grpo.kl_k3(logp, ref_logp)
            grpo.masked_loss(per_token, mask, "token", args.max_new_tokens).backward()
            grads = [p.grad.norm() for p in policy.parameters() if p.grad is not None]
            norms[f"{part} {term}"] = float(torch.stack(grads).norm()) if rows.any() else math.nan  # no rows
        # d k3 / d log π = 1 - π_ref / π: zero only where the two agree
        moved = (logp.detach() != ref_logp) & mask
        norms[f"{part} kl tokens"] = float(moved.sum() / mask.sum()) if rows.any() else math.nan
    policy.zero_grad()
    norms["zero-spread share"] = float(grpo.zero_spread(rewards).float().mean())
    return norms


def trained(initial, tokenizer, rl: grpo.Args, device):
    """The chapter's GRPO run on this seed (held-out pass@1 only at its start and end)."""
    policy = copy.deepcopy(initial)
    evals = grpo.train(policy, lm_world.frozen_copy(initial), tokenizer, dataclasses.replace(rl, eval_every=rl.rl_steps),
                       "grpo", rl.task.held_out(rl.eval_problems), device)["evals"]
    print(f"  seed {rl.seed}: GRPO, held-out pass@1 {evals[0]['pass@1']:.3f} -> {evals[-1]['pass@1']:.3f}")
    return policy


def temperature_study(policy, tokenizer, rl: grpo.Args, problems: list, args: Args, device) -> dict:
    """At each --temperatures T, --samples completions of each problem: the share that is
    well-formed, and the share of distinct completions among a problem's."""
    found = {}
    for T in args.temperature_list:
        generator = torch.Generator(device).manual_seed(rl.seed * 1000 + 3)
        _, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in problems for _ in range(args.samples)],
                                   rl.max_new_tokens, generator, device, temperature=T)
        found[T] = lm_world.sample_shape(texts, args.samples)
    return found


def seed_study(initial, weak, tokenizer, rl: grpo.Args, args: Args, device) -> dict:
    """One seed: its problems; each policy's right counts on them in --samples completions and,
    drawn apart, in --bin-samples (each problem's own pass rate, where binned); the gradient by
    spread after GRPO."""
    exclude = frozenset(p.prompt for p in rl.task.held_out())
    problems = rl.task.sample(args.problems, np.random.default_rng((rl.seed, 5)), exclude=exclude)
    policies = dict(zip(POLICIES, (initial, weak, trained(initial, tokenizer, rl, device))))
    found = {name: {"correct": right_counts(policy, tokenizer, rl, problems, args.samples, 1, device)}
             for name, policy in policies.items()}
    for name in WHEN:
        found[name]["bin_correct"] = right_counts(policies[name], tokenizer, rl, problems, args.bin_samples, 2, device)
    grads = gradient_by_spread(policies["after GRPO"], lm_world.frozen_copy(initial), tokenizer, rl, device)
    return {"seed": rl.seed, "steps": [len(p.ops) for p in problems], **found, "gradient": grads,
            "temperature": temperature_study(initial, tokenizer, rl, problems, args, device)}


# ---------------------------------------------------------------------------- the claims
def decide(values) -> tuple[bool | None, str]:
    """The ledger's rule on an effect measured once per seed, and its text with the smallest
    effect the seeds can detect (the interval's half-width)."""
    holds, text = common.seed_verdict(values)
    _, low, high = common.mean_interval(values)
    return holds, f"{text} (detectable: {(high - low) / 2:.3f})"



def shares(seeds: list[dict], policy: str, args: Args, G: int) -> list[float]:
    """The share of zero-spread groups of G, one per seed."""
    return [zero_spread_share(s[policy]["correct"], args.samples, G) for s in seeds]


def vanish_claims(rl: grpo.Args, seeds: list[dict]) -> list[dict]:
    """Exact on each seed's batch that holds zero-spread groups: they give no policy gradient,
    while their KL term pulls (where the policy has left its reference and β > 0), so the whole
    GRPO gradient of those groups vanishes only where both norms are 0."""
    grads = [s["gradient"] for s in seeds if s["gradient"]["zero-spread share"] > 0]
    pg_zero = all(g["zero-spread pg"] == 0.0 for g in grads)
    pulls = all(g["zero-spread kl"] > 0 for g in grads)
    still = all(g["zero-spread kl"] == 0.0 for g in grads)
    moved = all(g["zero-spread kl tokens"] > 0 or g["mixed kl tokens"] > 0 for g in grads)

    def per_seed(key: str, spec: str) -> str:
        return ", ".join(format(g[key], spec) for g in grads)

    measured = (f"one batch of {rl.prompts} groups of G = {rl.group_size} per seed, after GRPO, β = {rl.beta:g}; "
                f"the {len(grads)} of {len(seeds)} batches with zero-spread groups ({per_seed('zero-spread share', '.0%')}"
                f" of their groups): their policy-gradient norm {per_seed('zero-spread pg', '.1e')} (mixed groups "
                f"{per_seed('mixed pg', '.2g')}); their KL term's norm {per_seed('zero-spread kl', '.2g')}, pulling on "
                f"{per_seed('zero-spread kl tokens', '.0%')} of their tokens (π ≠ π_ref)")
    missing = "" if grads else "; premise not met: no batch had a zero-spread group"
    no_kl = ("" if rl.beta > 0 and moved else
             f"; premise not met: {'β = 0, no KL term' if rl.beta == 0 else 'a policy still at its reference'}")
    return [
        common.claim("over-long-generations", "if all G samples get the same reward, the normalised advantage is zero "
                     "and the policy-gradient term vanishes (a KL term, if any, still pulls)", measured + missing, pg_zero if grads else None),
        common.claim("over-long-generations", "if all G samples get the same reward, the normalised advantage is zero "
                     "and the gradient vanishes, read as the whole GRPO gradient (the policy-gradient and β·KL terms "
                     "together)", measured + missing, pg_zero and still if grads else None),
        common.claim("over-long-generations", "the KL term, a sum over tokens, gives a dense per-step signal even "
                     "when the reward is terminal: in groups with zero reward spread its gradient is non-zero while "
                     "the policy-gradient term's is zero", measured + missing + no_kl,
                     pg_zero and pulls if grads and not no_kl else None),
    ]


def most_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    """whole-game §2: from each cold start, is the share of completions that earn reward 0 above one
    half (the plain sparse reward, no baseline: such a completion's G_t is 0 on every token, so it
    gives no gradient)? And, with group baselines, the share in zero-spread groups (A = 0)?
    Decided over seeds."""
    G, claims = rl.group_size, []
    starts = (("cold start", f"the default cold start ({args.sft_steps} SFT steps)"),
              ("weak cold start", f"the weak cold start ({args.weak_sft_steps} SFT steps)"))
    for policy, start in starts:
        failed = [1 - np.mean(s[policy]["correct"]) / args.samples for s in seeds]
        holds, text = decide(np.subtract(failed, MOST))
        mean, low, high = common.mean_interval(failed)
        claims.append(common.claim(
            "whole-game §2", f"with a sparse 0/1 verifier most trajectories teach almost nothing: from {start}, more "
            "than half of the sampled completions earn reward 0, and with no baseline a completion with reward 0 has "
            "G_t = 0 on every token (no gradient)",
            f"share of completions with reward 0, {args.problems} training problems and {args.samples} completions "
            f"each per seed, mean [95% interval over {len(seeds)} seeds]: {mean:.3f} [{low:.3f}, {high:.3f}]; minus "
            f"one half {text}", holds))
    for policy, start in starts:
        values = shares(seeds, policy, args, G)
        holds, text = decide(np.subtract(values, MOST))
        mean, low, high = common.mean_interval(values)
        pass1 = np.mean([np.mean(s[policy]["correct"]) / args.samples for s in seeds])
        claims.append(common.claim(
            "whole-game §2", f"with a sparse 0/1 verifier most trajectories teach almost nothing: from {start}, more "
            f"than half of the sampled completions sit in groups of G = {G} with no reward spread (A = 0)",
            f"pass@1 {pass1:.3f}; share of completions in zero-spread groups, {args.problems} training problems and "
            f"{args.samples} completions each per seed, mean [95% interval over {len(seeds)} seeds]: {mean:.3f} "
            f"[{low:.3f}, {high:.3f}]; minus one half {text}", holds))
    return claims


def falls_with_G(seeds: list[dict], policy: str, args: Args) -> tuple[bool | None, str]:
    """Does the share of zero-spread groups fall at every step up in G? Each step decided over seeds."""
    Gs = args.group_list
    by_G = {G: shares(seeds, policy, args, G) for G in Gs}
    steps = [(small, large, *decide(np.subtract(by_G[small], by_G[large]))) for small, large in zip(Gs, Gs[1:])]
    return common.all_parts(*(holds for _, _, holds, _ in steps)), (
        f"{policy}, by G: " + ", ".join(f"{G}: {np.mean(v):.3f}" for G, v in by_G.items()) + "; its fall, "
        + "; ".join(f"G = {small} → {large}: {text}" for small, large, _, text in steps))


def group_size_claims(args: Args, seeds: list[dict]) -> list[dict]:
    """Larger groups, fewer without spread (whole-game §7.3): every step up in G, from both cold
    starts; and, from the default one, G = 8 against G = 4 (SS-GRPO's checklist) and K = 2 against
    K = 4 (SS-GRPO's trade-offs: a group without spread holds no success-failure contrast)."""
    where = (f"share of zero-spread groups, {args.problems} training problems and {args.samples} completions each "
             f"per seed, mean [95% interval over {len(seeds)} seeds]")
    (default, default_text), (weak, weak_text) = (falls_with_G(seeds, p, args) for p in POLICIES[:2])
    several = len(args.group_list) > 1
    claims = [common.claim(
        "whole-game §7.3, §7.8", "larger groups leave fewer groups without reward spread, so fewer samples without "
        "signal: the share of zero-spread groups falls at each step up in G, from the default and the weak cold start",
        f"{where}: {default_text}. {weak_text}" if several else "premise not met: one group size",
        common.all_parts(default, weak) if several else None)]
    pairs = {(4, 8): ("this study", "fewer groups have no reward spread (no advantage to normalise) at G = 8 than at "
                               "G = 4 (the SS-GRPO checklist's 'at least 8' asks for stability, which names no level: "
                               "not checked here)"),
             (2, 4): ("SS-GRPO article (Trade-offs)", "with groups smaller than 4 the contrastive signal is weak: "
                      "fewer groups hold both a success and a failure (a contrast to learn from) at K = 2 than at K = 4")}
    for (small, large), (source, statement) in pairs.items():
        if {small, large} <= set(args.group_list):
            holds, text = decide(np.subtract(shares(seeds, "cold start", args, small),
                                             shares(seeds, "cold start", args, large)))
            claims.append(common.claim(source, statement, f"{where}, default cold start: at G = {small} minus at "
                                       f"G = {large} {text}", holds))
    return claims


def medium_claim(rl: grpo.Args, args: Args, seeds: list[dict], policy: str) -> dict:
    """Over-long-generations: do medium prompts (by their own pass rate under `policy`) get more
    groups with a signal than hard and than easy ones? Premise: every bin holds a problem on every seed."""
    G = rl.group_size
    bins = [signal_by_bin(s[policy], args, G) for s in seeds]
    empty = {b: sum(found[b]["problems"] == 0 for found in bins) for b in BINS}
    gaps = {b: decide([found["medium"]["signal"] - found[b]["signal"] for found in bins])
            for b in ("hard", "easy") if not empty[b] and not empty["medium"]}
    by_bin = ", ".join(f"{b} {np.mean([f[b]['signal'] for f in bins]):.3f} ({sum(f[b]['problems'] for f in bins)} "
                       "problems)" for b in BINS)
    measured = (f"own pass rate from {args.bin_samples} completions per problem, the signal from {args.samples} others; "
                f"share of groups of G = {G} with a reward spread, mean of {len(seeds)} seeds, by bin: {by_bin}"
                + "".join(f"; medium minus {b}, mean [95% interval]: {text}" for b, (_, text) in gaps.items()))
    lacking = [f"the {b} bin is empty on {n} of {len(seeds)} seeds" for b, n in empty.items() if n]
    return common.claim(
        "over-long-generations", "GRPO gives no signal on easy or impossible prompts, which biases training toward "
        f"medium-difficulty examples (prompts binned by their own pass rate {WHEN[policy]}: below 1/3 hard, above 2/3 "
        "easy)",
        measured + ("; premise not met: " + ", ".join(lacking) if lacking else ""),
        None if lacking else common.all_parts(*(holds for holds, _ in gaps.values())))


def extremes(m: dict, args: Args, G: int) -> dict:
    """Prompts split by the statement's own categories, from their --bin-samples separate completions:
    "extreme" where none or all are right (impossible or easy), "between" otherwise. Per group: the
    prompts, and their expected groups of G with a reward spread (sum over the prompts)."""
    ends = [c in (0, args.bin_samples) for c in m["bin_correct"]]
    signal = [1 - zero_spread_probability(args.samples, c, G) for c in m["correct"]]
    return {name: {"problems": sum(e is side for e in ends),
                   "signal": sum(s for s, e in zip(signal, ends) if e is side)}
            for name, side in (("extreme", True), ("between", False))}


def extremes_claim(rl: grpo.Args, args: Args, seeds: list[dict], policy: str) -> dict:
    """Over-long-generations, with the statement's own categories: do prompts that are impossible or
    easy for `policy` (none or all of their separate samples right) leave fewer groups with a reward
    spread than the prompts in between, and do those in between so take a larger share of the groups
    with a spread than of the prompts? Each decided over the seeds; premise: both kinds on every seed."""
    G = rl.group_size
    found = [extremes(s[policy], args, G) for s in seeds]
    missing = sum(f["extreme"]["problems"] == 0 or f["between"]["problems"] == 0 for f in found)
    per = {k: [f[k]["signal"] / max(f[k]["problems"], 1) for f in found] for k in ("extreme", "between")}
    less, less_text = decide(np.subtract(per["between"], per["extreme"]))
    total = [f["extreme"]["signal"] + f["between"]["signal"] for f in found]
    share = [f["between"]["signal"] / t - f["between"]["problems"] / (f["between"]["problems"] + f["extreme"]["problems"])
             if t > 0 else math.nan for f, t in zip(found, total)]
    biased, biased_text = decide(share)
    measured = (f"own pass rate from {args.bin_samples} completions per problem, groups from {args.samples} others; "
                f"per seed, prompts none or all of whose {args.bin_samples} are right: "
                + ", ".join(str(f["extreme"]["problems"]) for f in found) + f" of {args.problems}; share of groups of "
                f"G = {G} with a reward spread, mean of {len(seeds)} seeds: those prompts {np.mean(per['extreme']):.3f}, "
                f"the prompts in between {np.mean(per['between']):.3f}; in between minus extreme, mean [95% interval]: "
                f"{less_text}; the in-between prompts' share of the groups with a spread minus their share of the "
                f"prompts: {biased_text}")
    return common.claim(
        "over-long-generations", "GRPO provides no learning signal on easy or impossible prompts, which biases "
        f"training toward medium-difficulty examples ({WHEN[policy]}: prompts none or all of whose separate samples "
        "are right leave fewer groups with a reward spread than the prompts in between, which so take a larger share "
        "of the groups with a spread than of the prompts)",
        measured + ("; premise not met: a seed without both kinds of prompt" if missing else ""),
        None if missing else common.all_parts(less, biased))


def baseline_errors(correct: list[int], n: int, G: int) -> tuple[float, float]:
    """Two baselines' mean squared error against each problem's own success rate p, unbiased from
    c right of n per problem: one for all problems, the mean reward (at least the spread of
    difficulties Var(p): its own noise only adds), and the mean of the other G - 1 completions of
    the problem's group (RLOO's: p(1 - p) / (G - 1))."""
    c = np.asarray(correct, dtype=float)
    p_q = c * (n - c) / (n * (n - 1))  # unbiased p(1 - p), problem by problem
    spread = np.var(c / n, ddof=1) - p_q.mean() / n  # Var(p) over the problems, the sampling noise taken out
    return float(spread), float(p_q.mean() / (G - 1))


def difficulty_claim(rl: grpo.Args, args: Args, seeds: list[dict], policy: str) -> dict:
    """whole-game §5 under `policy`: does a group baseline carry each prompt's difficulty without
    learning it, where one baseline for all prompts does not? Per seed, the all-problems
    baseline's error minus the group's (> 0: the group's is closer), decided over seeds."""
    G = rl.group_size
    errors = [baseline_errors(s[policy]["correct"], args.samples, G) for s in seeds]
    holds, text = decide([every - group for every, group in errors])
    return common.claim(
        "whole-game §5", "a per-prompt group baseline gets the prompt's difficulty for free, where one baseline for "
        "all prompts must learn it: with nothing learned, the mean of the other completions in the prompt's group "
        f"(RLOO's) lies closer to the prompt's success rate than the mean reward over all prompts (here: {WHEN[policy]})",
        f"mean squared error against each of {args.problems} training problems' success rate {WHEN[policy]} "
        f"({args.samples} completions each; unbiased), the mean reward over all problems against the mean of the "
        f"other {G - 1} in a group of G = {G}, mean of the seeds: one baseline {np.mean([e for e, _ in errors]):.4f}, "
        f"the group's {np.mean([g for _, g in errors]):.4f}; per seed their difference, mean [95% interval over "
        f"{len(seeds)} seeds]: {text}", holds)


def entropy_claims(args: Args, seeds: list[dict]) -> list[dict]:
    """whole-game §8 at the cold start, one claim for each end: fewer well-formed completions at the
    highest temperature than at T = 1 (incoherent), and fewer distinct completions per problem at
    the lowest (narrower: a tendency toward one template, not the collapse itself, which greedy
    decoding, T → 0, gives by definition); each decided over seeds."""
    low, high = min(args.temperature_list), max(args.temperature_list)

    def at(T: float, key: str) -> np.ndarray:
        return np.array([s["temperature"][T][key] for s in seeds])

    incoherent, incoherent_text = decide(at(1.0, "well_formed") - at(high, "well_formed"))
    narrower, narrower_text = decide(at(1.0, "distinct") - at(low, "distinct"))
    levels = "; ".join(f"T = {T:g}: well-formed {at(T, 'well_formed').mean():.3f}, distinct {at(T, 'distinct').mean():.3f}"
                       for T in args.temperature_list)
    samples = f"{args.samples} completions of each of {args.problems} problems per seed (mean of the seeds) at {levels}"
    per_seed = f"per seed, mean [95% interval over {len(seeds)} seeds]"
    hot = "" if high > 1 else "; premise not met: --temperatures needs one above 1"
    cold = "" if low < 1 else "; premise not met: --temperatures needs one below 1"
    return [common.claim(
        "whole-game §8", "too much entropy gives incoherent samples: from the cold start, fewer completions are "
        "well-formed at a high temperature than at T = 1",
        f"{samples}; {per_seed}: well-formed, T = 1 minus T = {high:g}, {incoherent_text}" + hot,
        None if hot else incoherent),
        common.claim(
        "whole-game §8", "too little entropy narrows a problem's completions toward one: from the cold start, fewer "
        f"of a problem's completions are distinct at a low temperature than at T = 1 (one template would leave 1 of "
        f"{args.samples})", f"{samples}; {per_seed}: distinct, T = 1 minus T = {low:g}, {narrower_text}" + cold,
        None if cold else narrower)]


def check_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    return (vanish_claims(rl, seeds) + most_claims(rl, args, seeds) + group_size_claims(args, seeds)
            + [medium_claim(rl, args, seeds, policy) for policy in WHEN]
            + [extremes_claim(rl, args, seeds, policy) for policy in WHEN]
            + [difficulty_claim(rl, args, seeds, policy) for policy in WHEN] + entropy_claims(args, seeds))


# ---------------------------------------------------------------------------- the report
def pooled_tables(args: Args, seeds: list[dict]) -> dict:
    """Per policy, the zero-spread table by number of steps, the seeds' problems pooled."""
    steps = [k for s in seeds for k in s["steps"]]
    return {policy: zero_spread_table([c for s in seeds for c in s[policy]["correct"]], steps, args.samples,
                                      args.group_list) for policy in POLICIES}


def plot_zero_spread(rl: grpo.Args, args: Args, seeds: list[dict], path) -> None:
    """Left: the share of zero-spread groups against G per policy; right: the share of groups
    with a signal per difficulty bin. Means and 95% intervals over seeds."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    Gs = args.group_list
    for policy in POLICIES:
        mean, low, high = np.array([common.mean_interval(shares(seeds, policy, args, G)) for G in Gs]).T
        left.errorbar(Gs, mean, yerr=[mean - low, high - mean], fmt="o-", capsize=3, label=policy, color=COLORS[policy])
    left.set(xlabel="group size G", ylabel="share of groups with zero spread", xscale="log", title="by group size")
    left.set_xticks(Gs, [str(G) for G in Gs])
    left.minorticks_off()
    for offset, policy in zip((-0.15, 0.15), WHEN):
        signal = [[signal_by_bin(s[policy], args, rl.group_size)[b]["signal"] for s in seeds] for b in BINS]
        mean, low, high = np.array([common.mean_interval(v) for v in signal]).T
        right.errorbar(np.arange(len(BINS)) + offset, mean, yerr=[mean - low, high - mean], fmt="o", capsize=3,
                       label=policy, color=COLORS[policy])
    right.set(xlabel="difficulty (own pass rate)", ylabel=f"share of groups of G = {rl.group_size} with a signal",
              title="by difficulty")
    right.set_ylim(bottom=0)
    right.set_xticks(range(len(BINS)), ["hard (< 1/3)", "medium", "easy (> 2/3)"])
    for ax in (left, right):
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def collect_metrics(rl: grpo.Args, args: Args, seeds: list[dict], tables: dict) -> dict:
    """The pooled tables by steps, each policy's share per G (mean of seeds), the gradient norms
    (mean of seeds), and the printed table."""
    metrics = {f"zero_spread[{name}][steps={k}][G={G}]": row[G]
               for name, table in tables.items() for k, row in table.items() for G in args.group_list}
    metrics |= {f"zero_spread[{policy}][G={G}]": float(np.mean(shares(seeds, policy, args, G)))
                for policy in POLICIES for G in args.group_list}
    metrics |= {f"grad_norm[{k}]": common.mean_or_nan([s["gradient"][k] for s in seeds]) for k in seeds[0]["gradient"]}
    metrics |= {f"temperature[{T:g}]_{k}": float(np.mean([s["temperature"][T][k] for s in seeds]))
                for T in args.temperature_list for k in ("well_formed", "distinct")}
    rows = [[name, steps, row["pass@1"], *(f"{row[G]:.0%}" for G in args.group_list)]
            for name, table in tables.items() for steps, row in table.items()]
    metrics["tables"] = {"zero_spread": {"header": ["policy", "steps", "pass@1", *(f"G = {G}" for G in args.group_list)],
                                         "rows": rows}}
    return metrics


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    rl = lm_world.chapter_lm_args(grpo.Args, args)
    weak, _, _ = lm_world.cold_start_policy(dataclasses.replace(args.cold_start, sft_steps=args.weak_sft_steps),
                                          device, args.cache, progress=False)
    print(f"05 study: groups with no reward spread; policy {info['path']}, {args.seeds} seeds, device {device}")
    seeds = [seed_study(initial, weak, tokenizer, dataclasses.replace(rl, seed=args.seed + i), args, device)
             for i in range(args.seeds)]
    tables = pooled_tables(args, seeds)
    plot_zero_spread(rl, args, seeds, out / "zero_spread.png")
    claims = check_claims(rl, args, seeds)
    metrics = collect_metrics(rl, args, seeds, tables)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, zero_spread=tables, seeds=seeds)
    print("\nShare of groups with zero reward spread (no policy gradient), by policy, difficulty and G "
          f"({args.seeds} seeds pooled):")
    print(common.format_table(metrics["tables"]["zero_spread"]["rows"], metrics["tables"]["zero_spread"]["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
