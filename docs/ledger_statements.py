"""What the four essays say, one checkable statement a row, and the committed claim that answers it:
the hand-kept half of docs/claims_ledger.md. docs/publish.py writes the page from this list and
the claims of docs/results/*.json; tests/test_ledger.py checks that every quote stands verbatim in
its essay and that every claim named here exists.

A row (`said`) holds:
  section, quote   where the essay says it, in its own words (verbatim, short)
  says             the statement in our words, no stronger and no weaker than the essay
  answers          (run, claim): the committed results docs/results/<run>.json and the exact text
                   of its claim whose `holds` is the verdict; several answers give one verdict if
                   they agree, "partly" (each shown) if they do not
  not_checkable    why no run here can check it (the row then names no claim)
  fix              the check does not follow the ledger's rule yet: what the claim must compute
                   instead, in which file and function. The row keeps the claims it has today (or
                   none) and is listed under "checks being rebuilt", with no verdict
  metrics          (run, key): numbers already measured in a committed run, shown beside a check
                   being rebuilt
  how              how the row came over from the hand-written ledger: keep, rephrase, re-point
                   (another claim answers it better) or new (a central statement that had no row)
"""

ESSAYS = {
    "whole-game": "credit-assignment-is-the-whole-game.txt",
    "over-long-generations": "credit-assignment-over-long-generations.txt",
    "survey": "credit-assignment-problem-survey.txt",
    "SS-GRPO article": "ss-grpo-step-sparse-grpo.txt",
}

# the committed runs the rows name (docs/results/<run>.json)
GAE = "02_gae"
RUDDER = "03_rudder"
CH05 = "05_grpo_rloo"
CH06 = "06_prm_qrm"
GRADIENT = "studies/01_gradient_variance"
GRADIENT_99 = "studies/01_gradient_variance_gamma_099"
BLINDNESS = "studies/01_state_blindness"
DILEMMAS = "studies/02_dilemmas"
DILEMMAS_NOISE = "studies/02_dilemmas_noise"
LEARNING = "studies/02_learning"
LEARNING_NOISE = "studies/02_learning_noise"
WATCH = "studies/03_pocket_watch"
REDISTRIBUTION = "studies/03_redistribution"
REDISTRIBUTION_DISTRACTORS = "studies/03_redistribution_distractors"
TRANSPORT = "studies/03_transport"
HCA = "studies/04_hca_tasks"
HER = "studies/04_her_sweep"
HER_STRATEGIES = "studies/04_her_sweep_strategies"
CRITIC = "studies/05_critic"
FAILURES = "studies/05_failure_modes"
FAILURES_PARTS = "studies/05_failure_modes_blame_curriculum"
FAILURES_SUPPORT = "studies/05_failure_modes_support_groups"
FAILURES_PRESSURE = "studies/05_failure_modes_pressure"
SEEDS = "studies/05_seeds"
ZERO = "studies/05_zero_spread"
OVER = "studies/06_overoptimisation"
OVER_CHECKS = "studies/06_overoptimisation_checks"
OVER_MARKS = "studies/06_overoptimisation_marks"
OVER_MITIGATIONS = "studies/06_overoptimisation_mitigations"
OVER_BETAS = "studies/06_overoptimisation_betas"
OVER_GOLD = "studies/06_overoptimisation_gold"
SEEDS_06 = "studies/06_seeds"
PROGRESS = "studies/06_progress"
OVER_LENGTH = "studies/06_overoptimisation_length"
CREDIT = "studies/07_credit"
ESTIMATOR = "studies/07_estimator"
LENGTHS = "studies/07_lengths"

SPREAD = "and decide on its interval over seeds"  # the page's legend spells out the decision


def seeds(where: str, today: str, quantity: str) -> str:
    """The most common fix: the claim decides on one run, or with a round number."""
    return f"{where}: {today}. Compute {quantity} {SPREAD}"


# the exact claim of 05 that answers five rows: GRPO's advantage is the same on every token
PER_TOKEN = ("every token of a completion gets the same advantage A_i: one sequence-level advantage, the completion's, "
             "broadcast to all its tokens")


def said(section: str, quote: str, says: str, *answers: tuple[str, str], fix: str = "", not_checkable: str = "",
         metrics: tuple[tuple[str, str], ...] = (), how: str = "keep") -> dict:
    return {"section": section, "quote": quote, "says": says, "answers": list(answers), "fix": fix,
            "not_checkable": not_checkable, "metrics": list(metrics), "how": how}


# whole-game §7.4's process-reward mitigation: two readings of the process advantage, two parts each
PROCESS_READINGS = (("each step credited by its own process reward; summed to go, the next rows",
                     "each step credited by its own normalised reward, not summed to go", "rephrase"),
                    ("the process reward summed to go, the essay's Ψ_t and DeepSeekMath's advantage",
                     "PRM-GRPO, with DeepSeekMath's reward-to-go process advantage", "new"))
PROCESS_PARTS = (("put the blame on the wrong step",
                  "put more blame on the first wrong step than on the right steps before it"),
                 ("take the blame off the right steps",
                  "take the blame off the right steps: less on the right steps before the first wrong one than GRPO "
                  "gives"))


WHOLE_GAME = [
    said("§1", "Credit assignment then blames the wrong tokens because the real cause left the context.",
         "when the policy sees only a truncated window, the credit lands on the wrong tokens",
         (FAILURES_PARTS, "when the policy sees only a truncated window, credit assignment blames the wrong tokens "
                          "because the real cause left the context (here, on the GRPO policy's samples: with the last "
                          "operation cut from the prompt, more of the completions that are right given what the prompt "
                          "shows get a negative group advantage than of the right completions with the whole prompt)")),
    said("§2, §7.2", "The policy finds a cheap correlate of the score.",
         "reward hacking: the policy finds a cheap correlate of the score (here: a learned PRM's score; e.g. "
         "well-formed work with a wrong final answer, format tricks)",
         (OVER_CHECKS, "reward hacking: RL on a learned score finds a cheap correlate of it: the score of wrong work rises "
                       "(e.g. well-formed work with a wrong final answer)")),
    said("§2, §7.2", "A chat model learns to be sycophantic because preference models like agreement.",
         "preference reward models make a chat model sycophantic",
         not_checkable="needs a task in which the user states a view the model could agree with; our preference "
                       "reward models score arithmetic, where there is no view to agree with"),
    said("§2", 'A flight booker optimized for "confirmation email received" books refundable junk',
         "a proxy reward (confirmation received) makes a booking agent book the wrong thing",
         not_checkable="no tool-using agent or booking environment here"),
    said("§2", "introduce judge error: a wrong step marked correct",
         "step judges (process rewards) mark some wrong steps correct (here: the learned PRM's own marks)",
         (OVER_MARKS, "step judges mark wrong steps correct: of the wrong steps of wrong held-out completions, the "
                      "learned PRM marks some right"),
         how="rephrase"),
    said("§2", "or a creative correct step marked wrong",
         "step judges (process rewards) mark some creative correct steps wrong",
         (OVER_MARKS, "step judges mark creative correct steps wrong: of the lines of right held-out completions that "
                      "leave the worked solution yet are true of the problem (a line of its worked solution in another "
                      "place, or its answer), the learned PRM marks some wrong"),
         how="rephrase"),
    said("§2, §7.2, §7.7", "RM score soars while held-out human preference falls (Goodhart).",
         "optimising a learned reward model over-optimises it: its score rises while the true quality (here "
         "the verifier's, on held-out problems) falls",
         (OVER, "optimising a learned reward model over-optimises it: its score rises while the true quality "
                "(the verifier's, on held-out problems) falls")),
    said("§2", "gradients are noisy, most trajectories teach almost nothing",
         "with a sparse 0/1 verifier most trajectories teach almost nothing (here: with no baseline, a completion with "
         "reward 0 gives no gradient)",
         (ZERO, "with a sparse 0/1 verifier most trajectories teach almost nothing: from the default cold start (1000 "
                "SFT steps), more than half of the sampled completions earn reward 0, and with no baseline a "
                "completion with reward 0 has G_t = 0 on every token (no gradient)"),
         (ZERO, "with a sparse 0/1 verifier most trajectories teach almost nothing: from the weak cold start (60 SFT "
                "steps), more than half of the sampled completions earn reward 0, and with no baseline a completion "
                "with reward 0 has G_t = 0 on every token (no gradient)")),
    said("§2", "gradients are noisy, most trajectories teach almost nothing",
         "with a sparse 0/1 verifier most trajectories teach almost nothing (here: under GRPO's group baseline, a "
         "completion in a group whose rewards are all equal gets A = 0)",
         (ZERO, "with a sparse 0/1 verifier most trajectories teach almost nothing: from the default cold start (1000 "
                "SFT steps), more than half of the sampled completions sit in groups of G = 8 with no reward spread "
                "(A = 0)"),
         (ZERO, "with a sparse 0/1 verifier most trajectories teach almost nothing: from the weak cold start (60 SFT "
                "steps), more than half of the sampled completions sit in groups of G = 8 with no reward spread "
                "(A = 0)"), how="new"),
    said("§2", "gradients are noisy, most trajectories teach almost nothing",
         "with a sparse 0/1 verifier the policy gradient is noisy (here: an update's gradient varies more than its "
         "mean is long, under each group baseline)",
         (CRITIC, "with a sparse 0/1 verifier the gradients are noisy: under each group baseline the update's gradient "
                  "has more variance than its mean's square (tr Cov / |E g|² above 1)"), how="new"),
    said("§2", "early training needs a cold-start policy that can occasionally succeed",
         "early training needs a cold start that can occasionally succeed (here: GRPO on the sparse verifier learns "
         "from a start that succeeds often enough, and gains nothing from one that almost never does)",
         (SEEDS, "from a cold start that can occasionally succeed, GRPO on the sparse verifier reward learns: held-out "
                 "pass@1 rises above the cold start's"),
         (FAILURES, "sparse terminal reward from a cold start that rarely succeeds: the cold start fails (here: GRPO's "
                    "held-out pass@1 gain from the weak cold start is none, below the default cold start's)")),
    said("§3", "reducing variance without (in the classic argument) introducing bias into the policy gradient",
         "a baseline that does not depend on the action lowers the policy gradient's variance",
         (GRADIENT, "a baseline that does not depend on the action lowers the variance of the policy "
                    "gradient (here: a constant, the mean Ψ of a held-out batch)"),
         (GRADIENT_99, "a baseline that does not depend on the action lowers the variance of the policy "
                       "gradient (here: a constant, the mean Ψ of a held-out batch)")),
    said("§3", "reducing variance without (in the classic argument) introducing bias into the policy gradient",
         "a baseline that does not depend on the action adds no bias to the policy gradient",
         (GRADIENT, "a baseline that does not depend on the action adds no bias to the policy gradient "
                    "(here: a constant, the mean Ψ of a held-out batch)"),
         (GRADIENT_99, "a baseline that does not depend on the action adds no bias to the policy gradient "
                       "(here: a constant, the mean Ψ of a held-out batch)")),
    said("§3, App. A", "Step 4 was useless noise, yet it receives the same +1 credit as the cancel step.",
         "with γ = 1 and one terminal reward, every step's reward-to-go is that reward: the useless step gets the "
         "same +1 as the decisive one",
         (DILEMMAS, "with γ = 1 and one terminal reward, every step's reward-to-go is that reward: the useless step "
                    "gets the same +1 as the decisive one")),
    said("§3", "If the verifier had failed ($r_5 = 0$), all $G_t = 0$",
         "if the verifier fails, every reward-to-go is 0",
         (DILEMMAS, "if the verifier fails (r_5 = 0), every G_t = 0")),
    said("§3", "unless you compare it to other samples from the same prompt",
         "a failed sample still teaches once it is compared with its siblings: a group baseline gives it a non-zero "
         "(negative) advantage",
         (CH05, "R = [0, 1, 0, 1]: centred advantages [-0.5, 0.5, -0.5, 0.5]"),
         how="re-point"),
    said("§3", "It assigns credit to everything earlier in wall-clock order, including irrelevant retries.",
         "time-indexed reward-to-go credits everything earlier in wall-clock order, irrelevant retries included "
         "(here: a plain chain, its useless step standing in for the retry)",
         (DILEMMAS, "with γ = 1 and one terminal reward, every step's reward-to-go is that reward: the useless step "
                    "gets the same +1 as the decisive one"), how="re-point"),
    said("§4", r"A sequence-level advantage $\hat{A}(x,y)$ often multiplies every token's logprob gradient",
         "for an LM one sequence-level advantage often multiplies every token's log-probability gradient (here: in "
         "all four group estimators)",
         (CH05, PER_TOKEN), how="rephrase"),
    said("§5", "Yes, and episodes are long / rewards semi-dense: prefer GAE",
         "with a value model you trust and long or semi-dense episodes, GAE is the better choice",
         (CRITIC, "with a value model you trust (and long or semi-dense episodes), prefer GAE: PPO with a "
                  "learned critic and GAE beats GRPO at the same samples")),
    said("§5", "Yes, but value learning is unstable on your data: fall back to Monte Carlo returns or group "
         "baselines",
         "when value learning is unstable on your data, fall back to Monte Carlo returns or group baselines (here "
         "read as a critic whose loss grows over PPO's training, against GRPO's group baseline on Monte Carlo "
         "returns; a critic shown wrong rather than unstable is the 05 page's check)",
         *((CRITIC, "where value learning is unstable, fall back to group baselines: read as a critic whose loss grows "
                    f"over training, GRPO's held-out pass@1 is not below that of {critic}") for critic in (
             "PPO (critic, GAE)", "PPO (value head on the policy)")), how="new"),
    said("§5", "a bad $V$ injects systematic lies into $\\Psi$",
         "a bad V injects systematic (not just noisy) errors into Ψ",
         (CRITIC, "a learned V can be wrong on sparse verifiable rewards, and a bad V injects systematic "
                  "lies into Ψ: its error |V - P(success | prefix)| at step boundaries, and the error of the step "
                  "credit V(after) - V(before) it feeds into Ψ, exceed what the rollouts' noise explains")),
    said("§5", "Only one sample per prompt, terminal reward: classic reward-to-go plus a moving-average baseline, or "
               "train a critic. Variance will hurt.",
         "with one sample per prompt (reward-to-go and a moving-average baseline) the variance hurts",
         not_checkable="every LM run samples a group per prompt; no one-sample run with a moving-average baseline"),
    said("§5", 'A global value head must learn "this problem is hard"; group baselines get that for free '
         "locally.",
         "a per-prompt group baseline gets the prompt's difficulty for free, where one global value head must "
         "learn it",
         (ZERO, "a per-prompt group baseline gets the prompt's difficulty for free, where one baseline for all "
                "prompts must learn it: with nothing learned, the mean of the other completions in the prompt's group "
                "(RLOO's) lies closer to the prompt's success rate than the mean reward over all prompts (here: at the cold start)"),
         (ZERO, "a per-prompt group baseline gets the prompt's difficulty for free, where one baseline for all "
                "prompts must learn it: with nothing learned, the mean of the other completions in the prompt's group "
                "(RLOO's) lies closer to the prompt's success rate than the mean reward over all prompts (here: after GRPO)")),
    said("§5", r"Monte Carlo (MC) return: $\Psi_t = G_t$. Honest about the episode. Noisy.",
         "the Monte Carlo return is unbiased but noisy",
         (GAE, "the Monte Carlo return (λ = 1) is honest but noisy: no bias, more variance than one-step TD's")),
    said("§5", r"Bias-variance dial via $\lambda$.",
         "GAE's λ trades bias for variance: a smaller λ leans on V, with more bias and less variance",
         (DILEMMAS, "GAE's λ is a bias-variance dial: the smaller λ, the more bias² and the less variance at the key "
                    "step"),
         how="re-point"),
    said("§6", "Clipping limits how far token probabilities move per update",
         "PPO's clipping limits how far token probabilities move in one update",
         (SEEDS, "PPO's clipping limits how far token probabilities move in one update")),
    said("§6", "fluent, helpful initialization collapses into high-reward gibberish the RM likes",
         "without KL to the reference, optimising a learned reward makes a fluent model collapse into gibberish (here: "
         "gibberish read as samples that are not well-formed, and the collapse as most samples becoming so)",
         (OVER_BETAS, "without KL to the reference, optimising a learned reward turns a fluent model into gibberish: "
                      "after RL on the learned ORM at β = 0, most samples are no longer well-formed"),
         how="re-point"),
    said("§6", "fluent, helpful initialization collapses into high-reward gibberish the RM likes",
         "without KL to the reference, optimising a learned reward drives the policy to outputs the reward model "
         "scores high while their true quality collapses (here: the collapse read as held-out gold falling below the "
         "cold start's)",
         (OVER, "without KL to the reference, a learned reward drives a fluent policy to outputs it scores high while "
                "their true quality collapses: after RL on the learned ORM at β = 0, the ORM's score has risen and "
                "held-out gold has fallen below the cold start's"), how="new"),
    said("§6", "a wrong search query early poisons later book calls",
         "in tool-use RL one bad early tool call poisons the later ones, and tool-result tokens must be masked",
         not_checkable="no tool-using agent here"),
    said("§7.1", "performance collapses when context is truncated",
         "when the context drops a fact the answer needs, performance collapses",
         (FAILURES, "state blindness: when the context drops a fact the answer needs, performance collapses "
                    "(here: with the last operation missing from the prompt, held-out pass@1 falls below the trained "
                    "policy's and below the cold start's)")),
    said("§7.1", "Put necessary facts into the state explicitly",
         "putting a dropped fact back into the state (Pong: the frame difference) helps recover what its absence cost",
         (BLINDNESS, "state blindness: an observation that drops a fact the decision needs (here: the ball's "
                     "motion) costs the policy, and putting the fact back in the state (the frame difference) "
                     "recovers it: more points won at the end with the difference than on the frame alone")),
    said("§7.2", "verbose padding",
         "reward hacking shows as verbose padding",
         (OVER, "reward hacking shows as verbose padding: after RL on a learned reward, completions carry more "
                "characters past the worked solution than before (Q-RM's token credit as the reward)"),
         (OVER, "reward hacking shows as verbose padding: after RL on a learned reward, completions carry more "
                "characters past the worked solution than before (the ORM as the reward, β = 0)")),
    said("§7.2", "Prefer verifiable checks",
         "against reward hacking, prefer a verifiable check to a learned score",
         (SEEDS_06, "prefer a verifiable check to a learned score: RL with the verifier in the "
                              "reward ends above RL on the learned PRM alone (outcome GRPO (verifier))"),
         (SEEDS_06, "prefer a verifiable check to a learned score: RL with the verifier in the reward ends above RL on "
                    "the learned PRM alone (PRM steps, verifier on the answer step)")),
    said("§7.2", "KL-to-ref; remove cheap heuristic bonuses",
         "against reward hacking, keep KL to the reference",
         (OVER, "against reward hacking keep KL to the reference (the half checked here: no reward here has "
                "a cheap heuristic bonus to remove)"), how="rephrase"),
    said("§7.2", "KL-to-ref; remove cheap heuristic bonuses",
         "against reward hacking, drop cheap heuristic bonuses",
         not_checkable="no reward here has a heuristic bonus to remove (the verifier, the learned ORM, PRM and Q-RM "
                       "score the answer or its steps only)", how="new"),
    said("§7.3", "Gradients tiny; learning only after rare successes; cold start fails.",
         "with a sparse terminal reward the gradients are tiny (here read as: most of each batch gives no gradient at "
         "all, its completions in groups without reward spread, from a cold start that rarely succeeds)",
         (FAILURES, "with a sparse 0/1 verifier most trajectories teach almost nothing (here, from the weak cold start: "
                    "more than half of GRPO's sampled completions sit in groups with zero reward spread, A = 0)"),
         how="rephrase"),
    said("§7.3", "Gradients tiny; learning only after rare successes; cold start fails.",
         "with a sparse terminal reward learning comes only from the rare successes (here read as: from a cold start "
         "that rarely succeeds, GRPO's gradient comes only from the few groups that hold a success, the rest, more "
         "than half of its sampled completions, in groups without reward spread, A = 0)",
         (FAILURES, "with a sparse 0/1 verifier most trajectories teach almost nothing (here, from the weak cold start: "
                    "more than half of GRPO's sampled completions sit in groups with zero reward spread, A = 0)"),
         how="new"),
    said("§7.3", "Gradients tiny; learning only after rare successes; cold start fails.",
         "with a sparse terminal reward a cold start that rarely succeeds fails: RL from it gains nothing",
         (FAILURES, "sparse terminal reward from a cold start that rarely succeeds: the cold start fails (here: GRPO's "
                    "held-out pass@1 gain from the weak cold start is none, below the default cold start's)"),
         how="new"),
    said("§7.3", "SFT cold start on successful traces",
         "mitigation of a sparse reward: an SFT cold start on successful worked solutions",
         (FAILURES, "the mitigation: an SFT cold start on successful traces (here: GRPO gains more held-out "
                    "pass@1 from the default cold start, 1000 SFT steps on demonstrations, than from the weak one, "
                    "60)")),
    said("§7.3, §8", "This is exploration + filter, and often the right Monday tool before full on-policy RL.",
         "mitigation of a sparse reward: rejection sampling (best-of-N) into SFT before on-policy RL",
         (FAILURES, "the mitigation: rejection sampling (best-of-N) into SFT, then GRPO, gets wins into the "
                    "buffer first (here: higher held-out pass@1 than GRPO alone for the same number of completions)")),
    said("§7.3", "curriculum on easier items",
         "mitigation of a sparse reward: a curriculum on easier items",
         (FAILURES_PARTS, "the mitigation: a curriculum on easier items (here, from a weak cold start of 200 SFT steps: "
                          "GRPO that draws only 1-step problems for its first 40 of 80 updates, then the normal mix, ends with "
                          "higher held-out pass@1 than GRPO on the normal mix throughout, for the same number of "
                          "completions)")),
    said("§7.3", "process rewards if judges are trustworthy",
         "mitigation of a sparse reward: process rewards, when the step judge can be trusted",
         (LENGTHS, "process rewards from a trustworthy judge mitigate a sparse reward: each step credited by its own "
                   "gold correctness beats flat GRPO at the longest chain (16 steps)"),
         (LENGTHS, "process rewards from a trustworthy judge mitigate a sparse reward: DeepSeekMath's summed process "
                   "credit on the gold step labels beats flat GRPO at the longest chain (16 steps)")),
    said("§7.3, §7.8", "larger group sizes for GRPO",
         "mitigation of a sparse reward: larger group sizes for GRPO",
         (FAILURES_SUPPORT, "larger group sizes for GRPO mitigate a sparse reward: from the weak cold start, GRPO with "
                            "G = 16 (half the prompts per update, the same completions) ends with higher held-out pass@1 "
                            "than with G = 8"), how="re-point"),
    said("§7.4", "junk steps in correct answers get reinforced",
         "flat credit reinforces the junk steps inside correct answers (here: a wrong line)",
         (CREDIT, "a flawed step in a chain that still reaches the right answer is reinforced by GRPO")),
    said("§7.4", "Harmless tokens drift; useful reasoning style disappears",
         "flat credit makes harmless tokens drift and a useful reasoning style disappear",
         not_checkable="our task has no harmless tokens or unpaid style for flat credit to wash out: the verifier reads "
                       "the last line and every earlier line feeds the answer, and the one style we measure, writing "
                       "the worked steps, is what the verifier pays for, so flat credit can only raise it"),
    *(said("§7.4", "Mitigation: Process rewards", f"mitigation of entangled credit: process rewards {says} (read as "
           f"{reading})", (CREDIT, f"mitigation of entangled credit: process rewards (the gold step verifier's, {form}) "
                                   f"{claim}"), how=how)
      for reading, form, how in PROCESS_READINGS for says, claim in PROCESS_PARTS),
    said("§7.5", "Either policy stuck near SFT (KL too strong)",
         "too strong a KL keeps the policy stuck near the SFT model",
         (FAILURES, "KL too strong: the policy stays stuck near the SFT reference (here, at the sweep's "
                    "strongest β = 5: no held-out pass@1 gain over the cold start)")),
    said("§7.5", "or language quality collapses (KL too weak)",
         "too weak a KL lets the quality of the samples collapse",
         (FAILURES, "KL too weak: the quality of the samples collapses (here: at β = 0 fewer completions are "
                    "well-formed than at the default β and than the reference, the cold start, writes)")),
    said("§7.5", "Wrong KL coefficient or wrong reference.",
         "a wrong reference is one cause of KL trouble, which shows as a policy held back near it (here: a "
         "reference that rarely writes the needed steps)",
         (FAILURES, "a wrong reference: KL to an SFT model that rarely writes the steps holds the policy "
                    "back from the behaviour that pays (here, GRPO at β = 0.5: lower held-out pass@1 than the same β "
                    "anchored to the cold start)")),
    said("§7.5", "reset reference carefully",
         "mitigation: reset the reference carefully",
         (FAILURES, "the mitigation: reset the reference carefully (here: to the current policy every 20 "
                    "updates; higher held-out pass@1 than the poor reference without resets)")),
    said("§7.6", "Answers grow without information gain",
         "length bias: answers grow without information gain, when the reward model prefers length",
         (OVER_LENGTH, "length bias: answers grow without information gain (an RM whose preference data favour "
                       "length)")),
    said("§7.6", "reward correlates with token count",
         "length bias: the reward tracks the token count, when the reward model prefers length",
         (OVER_LENGTH, "length bias: the reward correlates with token count (an RM whose preference data favour "
                       "length)")),
    said("§7.6", "Length-normalize rewards",
         "mitigation of length bias: length-normalise the reward",
         (OVER_LENGTH, "mitigation of length bias: length-normalise the reward (the "
                                                "RM's fitted length trend removed)")),
    said("§7.6", "train RM on length-balanced prefs",
         "mitigation of length bias: train the reward model on length-balanced preferences",
         (OVER_LENGTH, "mitigation of length bias: train the RM on length-balanced "
                                                "preferences")),
    said("§7.6", "cap generation; train RM on length-balanced prefs; penalize empty verbosity in verifiers",
         "mitigation of length bias: cap generation, penalise empty verbosity",
         not_checkable="every run caps generation at one budget of new tokens and none runs uncapped beside it; no "
                       "run penalises empty verbosity; and the padding they would cure is not shown here (the "
                       "length-preferring RM's padding gain is inconclusive over its seeds), so a cap or a penalty arm "
                       "could not show a cure"),
    said("§7.7", "Early stopping on human/AI eval",
         "mitigation of over-optimisation: stop early on an evaluation other than the reward model being optimised",
         (OVER, "mitigation of over-optimisation: stop early on an evaluation other than the RM being optimised (here "
                "the verifier's pass rate on the training batches)")),
    said("§7.7", "KL constraints; reward ensembles; refresh RM",
         "mitigation of over-optimisation: KL constraints",
         (OVER, "against reward hacking keep KL to the reference (the half checked here: no reward here has "
                "a cheap heuristic bonus to remove)"), how="re-point"),
    said("§7.7", "KL constraints; reward ensembles; refresh RM",
         "mitigation of over-optimisation: reward ensembles",
         (OVER_MITIGATIONS, "mitigation of over-optimisation: a reward ensemble (the mean of 3 ORMs) falls less in gold "
                            "at β = 0 than a single ORM"), how="new"),
    said("§7.7", "KL constraints; reward ensembles; refresh RM",
         "mitigation of over-optimisation: refreshing the reward model",
         not_checkable="no run refreshes the reward model on the policy's own samples (it would need new labels from "
                       "the verifier during RL, a loop this study does not have)"),
    said("§7.8", "normalization blows up or flattens",
         "when every sample of a group scores the same, the normalised advantage goes flat (with ε in the denominator)",
         (CH05, "when group rewards are homogeneous (all pass or all fail), the normalisation flattens: with ε in the "
                "denominator every A_i is 0"), how="rephrase"),
    said("§7.8", "normalization blows up or flattens",
         "when every sample of a group scores the same, the normalised advantage blows up (read as the z-score without "
         "ε, 0 / 0)",
         (CH05, "when group rewards are homogeneous, the normalisation blows up, read as the z-score without ε: 0 / 0"),
         how="new"),
    said("§7.8", "normalization blows up or flattens",
         "when a group's scores are nearly the same (learned or continuous scores), the normalisation blows their tiny "
         "differences up to full-size advantages",
         (CH05, "when group rewards are nearly homogeneous, the normalisation blows up, read as tiny differences made "
                "full-size: per unit of reward gap, the advantages lie further apart than for 0/1 rewards"), how="new"),
    said("§7.8", "advantages near zero; all group members get similar scores",
         "groups whose members all score the same get zero advantages and give no policy gradient (here read as "
         "identical scores; nearly equal learned scores are blown up by GRPO's std, not zeroed: the 'blows up' row)",
         (ZERO, "if all G samples get the same reward, the normalised advantage is zero and the policy-gradient term "
                "vanishes (a KL term, if any, still pulls)"),
         how="rephrase"),
    said("§7.8", "Adaptive difficulty",
         "mitigation of group collapse: adaptive difficulty",
         (FAILURES_PARTS, "the mitigation of group collapse, adaptive difficulty: from a weak cold start of 200 SFT "
                          "steps, GRPO whose problems' number of operations moves each update toward a pass rate of "
                          "1/2 (one fewer after a batch below it, one more above) ends with higher held-out pass@1 "
                          "on the normal mix than GRPO on the normal mix throughout, at the same completions"),
         how="rephrase"),
    said("§7.8", "ensure mixed outcomes in groups when possible",
         "mitigation of group collapse: ensure mixed outcomes in groups when possible",
         (FAILURES_PARTS, "the mitigation of group collapse, ensure mixed outcomes in groups when possible: from the "
                          "same start, GRPO that draws 4x the prompts each update and trains on the 16 groups with "
                          "reward spread first (then the rest) ends with higher held-out pass@1 than GRPO, at the same "
                          "updates"), how="rephrase"),
    said("§7.8", "floor on std",
         "mitigation of group collapse: a floor on the group's std (against the normalisation's blow-up)",
         (FAILURES_PARTS, "the mitigation of group collapse, a floor on the std: at the smallest std a group of 0/1 "
                          "rewards with spread has, it leaves the verifier's groups as they are, and near-homogeneous "
                          "scores no longer blow up: per unit of reward gap their advantages lie no further apart than "
                          "a lone right answer's"), how="rephrase"),
    said("§7.9", "Unstable updates; policy and actors disagree; unexplained regressions in distributed setups.",
         "workers acting with stale weights make updates unstable, with regressions",
         (FAILURES, "workers acting with old weights make updates unstable, with regressions (here: rollouts "
                    "8 updates old, taken as on-policy, fall further below their best held-out pass@1 between "
                    "evaluations than on-policy rollouts)")),
    said("§7.9", "importance ratios with clipping (PPO instinct)",
         "mitigation of staleness: importance ratios with clipping",
         (FAILURES, "the mitigation: importance ratios with clipping (here: rollouts 8 updates old, the "
                    "clipped ratio against the policy that sampled, end with higher held-out pass@1 than ignoring "
                    "the staleness)")),
    said("§7.9", "Limit off-policy lag",
         "mitigation of staleness: limit the off-policy lag",
         (FAILURES, "the mitigation: limit the off-policy lag (here: held-out pass@1 is higher, the younger "
                    "the rollouts taken as on-policy, ages 0, 8)")),
    said("§7.10", "train/serve skew is silent poison",
         "train/serve skew (another prompt builder at serving time) hurts; one builder for both fixes it (whether it "
         "does so silently is the next row)",
         (FAILURES, "train/serve skew poisons serving: a serving-time prompt built by another template than "
                    "training's lowers held-out pass@1 (the fix, one builder for both, is the as-trained number)")),
    said("§7.10", "train/serve skew is silent poison",
         "train/serve skew does its harm silently (here read as: its outputs look normal, well-formed)",
         (FAILURES, "train/serve skew does its harm silently, read as outputs that look normal: no fall in the "
                    "well-formed share of the skewed prompt's completions is shown, the top of its interval below the "
                    "fall in pass@1 (the harm)"), how="new"),
    said("§7.10", "train/serve skew is silent poison",
         "train/serve skew does its harm silently, read as: no error is raised",
         not_checkable="nothing in serving here can raise an error (a prompt is text in, text out), so this reading has "
                       "no failure to observe; the outputs' shape is the row above", how="new"),
    said("§7.10", 'Agent "forgets" bookings, double-charges, contradicts earlier tool output',
         "an agent whose state omits durable memory forgets bookings and contradicts tool output",
         not_checkable="no tool-using agent here"),
    said("§8", "Too much: incoherent samples.",
         "too much entropy gives incoherent samples",
         (ZERO, "too much entropy gives incoherent samples: from the cold start, fewer completions are well-formed at "
                "a high temperature than at T = 1")),
    said("§8", "Too little: mode collapse to one template answer.",
         "too little entropy narrows the samples toward one template answer (read as a tendency, as the 'too much' "
         "row reads its side: fewer of a problem's completions are distinct as the temperature falls)",
         (ZERO, "too little entropy narrows a problem's completions toward one: from the cold start, fewer of a "
                "problem's completions are distinct at a low temperature than at T = 1 (one template would leave 1 of "
                "16)"), how="new"),
    said("§8", "Too little: mode collapse to one template answer.",
         "too little entropy collapses the samples to one template answer (read as the collapse itself: one answer "
         "per problem)",
         not_checkable="the essay names no level of entropy at which the samples collapse, and at T → 0 sampling "
                       "becomes greedy decoding, one completion by definition; the tendency is the previous row's"),
    said("§8", "If all $K$ are near-copies, GRPO cannot invent a better mode.",
         "a group of near-copies gives GRPO nothing better to move toward (read at its limit: copies that all score "
         "the same give GRPO's policy-gradient term nothing)",
         (ZERO, "if all G samples get the same reward, the normalised advantage is zero and the policy-gradient term "
                "vanishes (a KL term, if any, still pulls)")),
    said("§8", "If all $K$ are near-copies, GRPO cannot invent a better mode.",
         "a group of near-copies gives GRPO nothing better to move toward (near-copies that score differently)",
         not_checkable="no run controls how diverse a group is, so none has near-copies with different rewards"),
    said("§8", "Later, GRPO on groups improves pass@1.",
         "GRPO on groups raises pass@1",
         (SEEDS, "GRPO on groups improves pass@1")),
    said("§8", "models can learn to be diverse-and-sometimes-right or peaked-and-usually-right",
         "optimisation pressure on pass@1 can make a model peaked-and-usually-right (the pass@k side, "
         "diverse-and-sometimes-right, is the next row)",
         (FAILURES, "optimisation pressure on pass@1 can make a model peaked-and-usually-right: after GRPO a "
                    "problem's samples are less diverse (fewer distinct completions among them) and more often right "
                    "than at the cold start, and right more often than not (held-out pass@1 above 1/2)"),
         how="rephrase"),
    said("§8", "Optimization pressure on pass@1 versus pass@k changes behavior",
         "pressure on pass@k instead of pass@1 changes what a model learns: diverse-and-sometimes-right under pass@k, "
         "peaked-and-usually-right under pass@1 (here: GRPO with pass@4 advantages against GRPO, from the same cold "
         "start)",
         (FAILURES_PRESSURE, "optimisation pressure on pass@1 versus pass@k changes behaviour: under pass@4 pressure "
                             "(GRPO with pass@4 advantages) a model is diverse-and-sometimes-right beside GRPO's "
                             "peaked-and-usually-right: from the same cold start at the same completions, its samples "
                             "are more diverse (more distinct completions among a problem's) and right less often (lower "
                             "held-out pass@1)"), how="new"),
    said("§8", "No estimator fixes a support problem.",
         "when the cold start never succeeds, no estimator fixes the missing support",
         (FAILURES_SUPPORT, "no estimator fixes a support problem: of the held-out problems with no right answer in 16 "
                            "samples at the weak start, none of REINFORCE, RLOO and GRPO solves more than fresh draws of "
                            "the weak start solve by luck")),
    said("App. A", "Simple GRPO-style centered advantages: $A = [-0.5, +0.5, -0.5, +0.5]$.",
         "R = [0, 1, 0, 1] gives centred advantages [−0.5, 0.5, −0.5, 0.5]",
         (CH05, "R = [0, 1, 0, 1]: centred advantages [-0.5, 0.5, -0.5, 0.5]"), how="rephrase"),
    said("App. A", "so advantage $1 - 1/3 = 2/3$",
         "R = [0, 1, 0, 1]: RLOO gives sample 2 the advantage 1 − 1/3 = 2/3",
         (CH05, "R = [0, 1, 0, 1]: RLOO advantage of sample 2 = 1 - 1/3 = 2/3"), how="new"),
    said("App. A", "Masked positions contribute nothing.",
         "masked positions (prompt, padding) contribute no gradient",
         (SEEDS, "masked positions contribute nothing: the loss's gradient at the logits of every position that "
                 "predicts a prompt or padding token is exactly 0")),
]

OVER_LONG = [
    said("intro, Why", "A single response might span 512 to 8192 tokens.",
         "a single response might span 512 to 8,192 tokens",
         not_checkable="a fact about production tokenizers and traces; our policies use a small vocabulary and "
                       "4-144-token completions"),
    said("Why", "0.99^999 ≈ 0.00004",
         "0.99^999 ≈ 0.00004",
         (DILEMMAS, "0.99^999 ≈ 0.00004")),
    said("Why", "every token in a bad response receives the same negative signal regardless of whether it caused the "
                "failure",
         "with γ = 1 every token of a bad response gets the same negative signal (here: the same undiscounted return "
         "on every step, and, below a baseline, the same negative advantage on every token)",
         (DILEMMAS, "with γ = 1 and one negative terminal reward, every step of the bad episode gets the same "
                    "negative reward-to-go, whichever step caused the failure"),
         (CH05, PER_TOKEN), how="rephrase"),
    said("Why", "has variance that grows roughly linearly with episode length",
         "with a terminal reward the gradient's variance grows roughly linearly with the episode's length",
         (GRADIENT, "with one terminal reward (Ψ_t = R on every frame), the policy gradient's variance grows "
                    "roughly linearly with the episode's length"),
         (GRADIENT_99, "with one terminal reward (Ψ_t = R on every frame), the policy gradient's variance "
                       "grows roughly linearly with the episode's length"),
         (LENGTHS, "with one terminal reward, the gradient's variance grows roughly linearly with the length"),
         (CRITIC, "with a terminal reward the gradient's variance grows roughly linearly with episode length")),
    said("Why", "because the same scalar R_n multiplies every per-token log-probability gradient in the "
         "episode",
         "the cause of the variance's roughly linear growth with length: the same scalar R multiplies every per-token "
         "log-probability gradient in the episode",
         (CRITIC, "the gradient's variance grows with length because the same scalar R multiplies every per-token "
                  "log-probability gradient, which makes it a sum of T per-token terms: with the same R on the same "
                  "completions, its variance on every token over its variance on one token grows roughly linearly "
                  "with the length T")),
    said("KL", "This gives the optimiser a dense, per-step signal even when the scalar reward r(x, y) is "
         "terminal.",
         "the KL term, a sum over tokens, gives a dense per-step signal even when the reward is terminal",
         (ZERO, "the KL term, a sum over tokens, gives a dense per-step signal even when the reward is "
                "terminal: in groups with zero reward spread its gradient is non-zero while the policy-gradient "
                "term's is zero")),
    said("KL", "Small beta allows aggressive reward optimisation",
         "a small β optimises the reward more aggressively",
         (FAILURES, "small β allows more aggressive reward optimisation: the training reward rises more at the "
                    "sweep's smallest β than at its largest")),
    said("KL", "opens the door to reward hacking",
         "a small β invites reward hacking (here: β = 0.03 against 0.3)",
         (OVER_BETAS, "a small β invites reward hacking (here β = 0.03 against 0.3)")),
    said("KL", "Large beta keeps the policy close to the SFT baseline",
         "a large β keeps the policy close to the SFT model",
         (FAILURES, "large β keeps the policy close to the SFT reference: the KL to it is smaller at the "
                    "sweep's largest β than at its smallest")),
    said("KL", "but slows learning",
         "a large β slows learning",
         (FAILURES, "large β slows learning: after the same 80 updates, held-out pass@1 is lower at the "
                    "sweep's strongest β (5) than at the default (0.04)")),
    said("GRPO", "the critic is itself a copy of the policy, which roughly doubles memory footprint",
         "PPO's critic, a copy of the policy, roughly doubles the memory; GRPO, without it, saves that (the copy adds "
         "the trained state of parameters, gradients and Adam moments, not the reference)",
         (CRITIC, "PPO's critic, a copy of the policy, roughly doubles the memory footprint (here: the training "
                  "state, against GRPO's)"),
         how="rephrase"),
    said("GRPO", "Each token in response i receives the same advantage A_i.",
         "every token of a response gets the same advantage A_i",
         (CH05, PER_TOKEN), how="rephrase"),
    said("GRPO", "stable variance reduction through within-group normalisation",
         "normalising within the group gives a stable reduction of the gradient's variance",
         (CRITIC, "normalising within the group (GRPO) reduces the gradient's variance: the update's tr "
                  "Cov(h) / ||E h||² is lower under GRPO than under Ψ = R with no baseline"),
         how="rephrase"),
    said("GRPO", "GRPO is the backbone of DeepSeek-R1",
         "GRPO is the backbone of DeepSeek-R1",
         not_checkable="a fact about DeepSeek-R1's training recipe (bibliography): no run measures it"),
    said("Process rewards", "significantly outperforms an outcome reward model (ORM) at the same test-time "
         "compute budget",
         "a PRM trained on step labels beats an ORM at the same test-time compute (Lightman et al.: human step labels, "
         "MATH; here: the task's exact step labels, best-of-N at every N tried)",
         (OVER_GOLD, "best-of-N: a PRM trained on step labels beats an ORM at the same test-time compute, at every N "
                     "tried (here: the task's exact step labels, the nearest stand-in for careful human ones)"),
         how="re-point"),
    said("Process rewards", "Per-step annotation is expensive",
         "per-step annotation is expensive",
         not_checkable="no human labels here"),
    said("Process rewards, When it falls down", "the PRM becomes a second proxy reward model and inherits all "
         "the over-optimisation risks of an ORM",
         "a PRM used as a dense RL reward is itself a learned proxy, open to all the over-optimisation risks of an ORM "
         "(this row: the ORM's Goodhart course, the true quality falling from its peak as the score rises; the ORM's "
         "other risk shown here, wrong work scoring higher, is the next row's; its length padding is not shown here, "
         "so there is none to inherit)",
         (OVER_CHECKS, "a PRM used as a dense RL reward is itself a learned proxy, open to the over-optimisation an "
                       "ORM suffers: under RL on the PRM its score of the policy's work rises while held-out pass@1 "
                       "falls from its peak (the update the training batches pick, as for the ORM)"), how="rephrase"),
    said("Process rewards, When it falls down", "the PRM becomes a second proxy reward model and inherits all "
         "the over-optimisation risks of an ORM",
         "a PRM used as a dense RL reward is itself a learned proxy, open to all the over-optimisation risks of an ORM "
         "(this row: a cheap correlate of the score, wrong work the RM rates higher after RL on it, as well-formed "
         "wrong answers score well on the ORM)",
         (OVER_CHECKS, "reward hacking: RL on a learned score finds a cheap correlate of it: the score of wrong work "
                       "rises (e.g. well-formed work with a wrong final answer)"), how="new"),
    said("Process rewards", "step boundaries in free-form text are ambiguous",
         "step boundaries in free-form text are ambiguous",
         not_checkable="our steps are lines the task delimits"),
    said("Process rewards", "a PRM trained on maths solutions may not transfer to coding or open-ended reasoning",
         "a PRM trained on maths solutions may not transfer to coding or open-ended reasoning",
         not_checkable="one domain"),
    said("Over-optimisation", "proxy reward increases monotonically with KL distance from the reference policy",
         "optimising a proxy RM: the proxy rises monotonically with KL from the reference policy",
         (OVER, "optimising a learned proxy: the proxy rises monotonically with KL")),
    said("Over-optimisation", "but gold reward peaks and then degrades",
         "optimising a proxy RM: the gold reward peaks and then falls",
         (OVER, "optimising a learned proxy: the gold reward peaks and then degrades"),
         (OVER, "optimising a learned proxy: the gold reward peaks and then degrades (best-of-N on the learned ORM, N "
                "the optimisation's strength)")),
    said("Over-optimisation", "gold_reward ≈ α · sqrt(KL) - β · KL",
         "gold ≈ α·√KL − β·KL for small to medium KL",
         (OVER, "gold ≈ α·sqrt(KL) − β·KL for small to medium KL (α, β > 0: the gold rises, peaks and falls "
                "as KL grows): best-of-N"),
         (OVER, "gold ≈ α·sqrt(KL) − β·KL for small to medium KL (α, β > 0: the gold rises, peaks and falls "
                "as KL grows): RL")),
    said("Over-optimisation", "Reward models trained on human preferences often rate longer responses higher "
         "up to a point",
         "reward models trained on human preferences often rate longer responses higher (up to a point)",
         not_checkable="no human preferences here: our reward models learn from verifier outcomes, or from a labeller "
                       "we program"),
    said("Over-optimisation", "so policies learn to pad outputs.",
         "given a reward model that rates longer responses higher, policies learn to pad their outputs (here: RL on "
         "Q-RM's token credit, a reward learned from preference pairs that rates longer answers higher among right "
         "and among wrong ones)",
         (OVER_LENGTH, "reward models rate longer responses higher, so policies learn to pad (Q-RM's token credit as "
                       "the reward)"),
         how="re-point"),
    said("Over-optimisation", "Certain surface patterns (agreement, flattery, confident tone) inflate reward model "
                              "scores independently of content quality.",
         "surface patterns (agreement, flattery, a confident tone) raise the RM score whatever the content",
         not_checkable="agreement, flattery and tone need a chat task and a reward model trained on human preferences; "
                       "the one surface pattern our task has, the worked form, is the next row's check"),
    said("Over-optimisation", "can score well on the reward model while containing incorrect information",
         "well-formatted but wrong answers can score well on a learned reward model",
         (OVER, "format hacking: well-formed outputs can score well on a learned reward model while being "
                "wrong (the form, not the answer, earning the score)")),
    said("When it falls down", "will penalise all 600 tokens equally",
         "with one outcome reward under GRPO, a chain whose only error comes late penalises all its tokens "
         "equally, the right ones before the error included",
         (CREDIT, "GRPO penalises the right steps before a single slip as much as the slip, in a mixed group (a "
                  "failed completion in a group with a success): every token of the failed completion gets its A_i "
                  "< 0"),
         how="re-point"),
    said("When it falls down", "Whether using PPO with a terminal reward or GRPO, every token in a generation "
         "receives the same advantage signal.",
         "with PPO and a terminal reward, too, every token of a generation receives the same advantage",
         (CRITIC, "with PPO and a terminal reward, too, every token of a generation receives the same advantage "
                  "signal")),
    said("When it falls down", "This wastes the policy's capacity to learn which decisions actually matter.",
         "uniform weighting wastes learning on long generations: crediting each step by its own correctness "
         "learns better than flat credit (here: at 16 steps)",
         (LENGTHS, "uniform weighting wastes learning on long generations: each step credited by its own gold "
                   "correctness beats flat GRPO at the longest chain (16 steps)"),
         how="rephrase"),
    said("When it falls down", "assigns step scores that reflect the label distribution, not a ground-truth "
         "value function",
         "a PRM's scores echo the labels it was trained on rather than the true chance of success",
         (OVER, "a PRM assigns step scores that reflect the label distribution, not a ground-truth value "
                "function")),
    said("When it falls down", "the normalised advantage is zero and the gradient vanishes",
         "a group whose samples all score the same gets zero advantage, and its gradient vanishes (read as the "
         "policy-gradient term, the learning signal from the reward; the whole gradient is the next row's)",
         (ZERO, "if all G samples get the same reward, the normalised advantage is zero and the policy-gradient term "
                "vanishes (a KL term, if any, still pulls)"),
         how="rephrase"),
    said("When it falls down", "the normalised advantage is zero and the gradient vanishes",
         "a group whose samples all score the same gets zero advantage, and its gradient vanishes (read as the whole "
         "GRPO gradient, the essay's β·KL term included)",
         (ZERO, "if all G samples get the same reward, the normalised advantage is zero and the gradient vanishes, "
                "read as the whole GRPO gradient (the policy-gradient and β·KL terms together)"), how="new"),
    said("When it falls down", "GRPO provides no learning signal on easy or impossible prompts, which biases "
         "training toward medium-difficulty examples.",
         "GRPO learns nothing on easy or impossible prompts, which favours prompts of medium difficulty",
         (ZERO, "GRPO provides no learning signal on easy or impossible prompts, which biases training toward "
                "medium-difficulty examples (at the cold start: prompts none or all of whose separate samples are "
                "right leave fewer groups with a reward spread than the prompts in between, which so take a larger "
                "share of the groups with a spread than of the prompts)"),
         (ZERO, "GRPO provides no learning signal on easy or impossible prompts, which biases training toward "
                "medium-difficulty examples (after GRPO: prompts none or all of whose separate samples are right "
                "leave fewer groups with a reward spread than the prompts in between, which so take a larger share "
                "of the groups with a spread than of the prompts)"), how="re-point"),
    said("When it falls down", "the KL penalty actively discourages the RL policy from exploring that space",
         "when the SFT reference never writes the reasoning traces the task needs, the KL penalty actively discourages "
         "the policy from exploring them, whatever the reward (here: a reference that rarely writes them)",
         (FAILURES, "KL anchoring breaks when the reference is poor: KL to a reference that rarely writes the worked "
                    "steps discourages the policy from writing them, though the reward pays for them: anchored to it at "
                    "β = 0.5, GRPO's samples write the steps less often than anchored to the cold start at the same β"),
         how="re-point"),
    said("When it falls down", "Long reasoning traces amplify variance even with baselines.",
         "even with a group baseline the gradient's variance grows with the trace's length (our traces: 3-32 "
         "tokens, not 2,000-8,000)",
         (CRITIC, "long reasoning traces amplify variance even with baselines: under each group baseline the "
                  "gradient's variance grows with the completion's length (log-log slope above 0)")),
    said("When it falls down", "Long reasoning traces amplify variance even with baselines.",
         "even with a group baseline the gradient's variance grows with the trace's length (here read per unit of the "
         "advantage's size, which also changes with length; our traces: 3-32 tokens)",
         (CRITIC, "long reasoning traces amplify variance even with baselines, read per unit of the advantage's size: "
                  "under each group baseline the gradient's variance over the advantage's mean square grows with the "
                  "completion's length (log-log slope above 0)"), how="new"),
    said("When it falls down", "The model may converge to surface-level formatting of long chains rather than "
                               "substantively better reasoning.",
         "the model may converge to the surface form of long chains rather than better reasoning",
         not_checkable="the essay places it at chains of 2,000-8,000 tokens; our completions run 3-32 tokens"),
]

SURVEY = [
    said("§2.1", "$0.99^{500} ≈ 0.0066$ — less than 1% of the original signal",
         "0.99^500 ≈ 0.0066, under 1% of the signal",
         (DILEMMAS, "0.99^500 ≈ 0.0066")),
    said("§2.1", "or the discount factor $γ$ shrinking contributions exponentially",
         "a reward d steps after the decisive action reaches it discounted by γ^d",
         (DILEMMAS, "a reward d steps after the decisive action reaches it discounted by γ^d")),
    said("§2.1", "Small value or Q-function estimation errors compound when bootstrapped repeatedly over long "
                 "horizons",
         "small errors of a bootstrapped value estimate compound as the horizon grows",
         (LEARNING, "small value errors compound when bootstrapped over long horizons: from the exact values plus a "
                    "small error on every state, the part of TD(0)'s error at the decisive state that the small errors "
                    "cause, after the same episodes of policy evaluation, grows with the horizon"),
         (LEARNING_NOISE, "small value errors compound when bootstrapped over long horizons: from the exact values plus a "
                          "small error on every state, the part of TD(0)'s error at the decisive state that the small errors "
                          "cause, after the same episodes of policy evaluation, grows with the horizon")),
    said("§2.2", "many actions co-occur with success but did not cause it",
         "correlated but non-causal actions may pick up spurious credit",
         (HCA, "correlated but non-causal actions may pick up spurious credit: REINFORCE credits the actions that "
               "change nothing (their exact gradient is 0)")),
    said("§2.3", "TD bootstrapping methods fail when most states have near-zero estimated value",
         "TD bootstrapping fails when almost every state's estimated value is near zero (read literally: it does not "
         "learn)",
         (LEARNING, "TD bootstrapping fails outright when most states have near-zero estimated value: started from V = "
                    "0, the TD(0) actor-critic does not learn to take the key within the budget of 20,000 episodes"),
         (LEARNING_NOISE, "TD bootstrapping fails outright when most states have near-zero estimated value: started "
                          "from V = 0, the TD(0) actor-critic does not learn to take the key within the budget of "
                          "20,000 episodes")),
    said("§2.3", "TD bootstrapping methods fail when most states have near-zero estimated value",
         "TD bootstrapping struggles when almost every state's estimated value is near zero (read as: it needs more "
         "episodes from near-zero estimates than from the true values)",
         (LEARNING, "TD bootstrapping struggles when most states have near-zero estimated value: started from V = 0 "
                    "(every state's estimate zero), the TD(0) actor-critic needs more episodes to learn to take the key "
                    "than started from the exact values V^π, at the same corridor length"),
         (LEARNING_NOISE, "TD bootstrapping struggles when most states have near-zero estimated value: started from "
                          "V = 0 (every state's estimate zero), the TD(0) actor-critic needs more episodes to learn to "
                          "take the key than started from the exact values V^π, at the same corridor length")),
    said("§3", "$γ^{999} ≈ 0.00043$",
         "with γ = 0.999 over 1,000 tokens, γ^999 ≈ 0.00043",
         (DILEMMAS, "with γ = 0.999, γ^999 ≈ 0.00043")),
    said("§3", "This preserves signal magnitude",
         "with γ = 1 the decisive action receives the reward at full size",
         (DILEMMAS, "pushing γ to 1 preserves the signal's magnitude")),
    said("§3", "The result is high-variance gradient estimates",
         "with γ = 1 one outcome broadcast to every token gives noisier gradient estimates than credit on the tokens "
         "that mattered (read as signal per unit of noise, the same advantage on the same completions; whether those "
         "tokens are few is the next row's)",
         (CRITIC, "one advantage on every token gives noisier gradient estimates than credit on the tokens that "
                  "mattered: GRPO's gradient with its advantage on every token carries less signal per unit of noise "
                  "than the same advantage on the tokens that mattered (here: a failed completion's first wrong line, "
                  "every line of a right one)"),
         how="re-point"),
    said("§3", "wash out the signal from the few tokens that actually mattered",
         "the broadcast washes out the signal of the tokens that mattered (here: the decisive tokens of a failed "
         "completion, the result of its first wrong line, and every token of a right one; whether they are few is "
         "the next row's)",
         (CRITIC, "the broadcast washes out the signal of the tokens that mattered (the decisive ones)")),
    said("§3", "the few tokens that actually mattered",
         "of a long chain's tokens (filler words, formatting, reasoning), only a few actually matter",
         (CRITIC, "of a long chain's tokens (filler words, formatting, reasoning), only a few actually matter: the "
                  "tokens that decided a failed completion are a few of its tokens"), how="rephrase"),
    said("§4.1.1", "multi-step methods reduce the bias that comes from inaccurate value estimates at nearby states",
         "looking further ahead before bootstrapping reduces the bias of an inaccurate critic",
         (DILEMMAS, "multi-step returns reduce the bias of an inaccurate critic: the further GAE looks ahead (the "
                    "larger λ), the smaller the bias² at the key step")),
    said("§4.1.1", "λ = 0 gives 1-step TD (low variance, high bias), λ = 1 gives Monte Carlo (high variance, zero bias)",
         "λ = 0 is one-step TD (low variance, high bias), λ = 1 is Monte Carlo (high variance, no bias)",
         (GAE, "λ = 0 is one-step TD (low variance, high bias); λ = 1 is Monte Carlo (high variance, no bias)")),
    said("§4.1.1", "is the default in PPO, GRPO, and most modern policy gradient methods",
         "GAE is the default in GRPO",
         (CH05, "GAE is the default in GRPO (the survey says so of PPO, GRPO and most modern policy gradient "
                "methods)"),
         how="rephrase"),
    said("§4.1.1", "is the default in PPO, GRPO, and most modern policy gradient methods",
         "GAE is the default in PPO and most policy-gradient methods",
         not_checkable="a statement about practice (05's PPO uses GAE by construction)"),
    said("§4.1.1", "GAE with any λ reduces to the Monte Carlo return",
         "with γ = 1, GAE with any λ reduces to the Monte Carlo return",
         (GAE, "with γ = 1, GAE with any λ reduces to the Monte Carlo return")),
    said("§4.1.2, §5", "the redistributed rewards sum to the original return",
         "redistributed per-step credits sum to the original return",
         (RUDDER, "the redistributed rewards sum to the original return")),
    said("§4.1.2", "a new MDP with the same optimal policy but much denser feedback",
         "redistributing the reward leaves the optimal policy unchanged",
         (REDISTRIBUTION, "the redistributed MDP has the same optimal policy")),
    said("§4.1.2, §5", "then TD methods become unbiased in the new MDP",
         "with an optimal redistribution TD is unbiased",
         (REDISTRIBUTION, "in the redistributed MDP, TD is unbiased"),
         (REDISTRIBUTION_DISTRACTORS, "in the redistributed MDP, TD is unbiased")),
    said("§4.1.2, §5", "MC methods have minimal variance",
         "with an optimal redistribution Monte Carlo's variance is minimal (read as: reduced to the immediate "
         "reward's, below the original reward-to-go's)",
         (REDISTRIBUTION, "an optimal redistribution leaves Monte Carlo only the immediate reward to average: its "
                          "variance, Var(r̃*_t | s, a), is below the original reward-to-go's Var(Σ_{k≥t} r_k | s, a)"),
         (REDISTRIBUTION_DISTRACTORS, "an optimal redistribution leaves Monte Carlo only the immediate reward to "
                                      "average: its variance, Var(r̃*_t | s, a), is below the original reward-to-go's "
                                      "Var(Σ_{k≥t} r_k | s, a)"), how="new"),
    said("§4.1.2, §5", "MC methods have minimal variance",
         "with an optimal redistribution Monte Carlo's variance is minimal (read as: the lowest of any "
         "redistribution's)",
         (REDISTRIBUTION, "in the redistributed MDP, Monte Carlo's variance is minimal"),
         (REDISTRIBUTION_DISTRACTORS, "in the redistributed MDP, Monte Carlo's variance is minimal"), how="new"),
    said("§4.1.2, §5", "The key events get concentrated reward signal while irrelevant steps get near-zero signal",
         "the redistributed reward piles up on the decisive event and is about zero elsewhere",
         (REDISTRIBUTION, "the return predictor's jump, and so the redistributed reward, sits at the decisive step "
                          "and is near zero elsewhere")),
    said("§4.1.2", "adds a shaped reward Φ(s') − Φ(s) that preserves the optimal policy",
         "potential-based shaping Φ(s') − Φ(s) keeps the optimal policy",
         (REDISTRIBUTION, "potential-based shaping Φ(s') - Φ(s) preserves the optimal policy")),
    said("§4.1.2", "RUDDER shows that optimal redistribution makes the expected future reward zero everywhere",
         "an optimal redistribution makes the expected future reward zero everywhere",
         (REDISTRIBUTION, "an optimal redistribution makes the expected future reward zero everywhere"),
         (REDISTRIBUTION_DISTRACTORS, "an optimal redistribution makes the expected future reward zero everywhere")),
    said("§4.1.2", "which is a stronger property than potential-based shaping provides",
         "zero expected future reward is a stronger property than potential-based shaping gives (shaping guarantees "
         "only the optimal policy)",
         (REDISTRIBUTION, "potential-based shaping guarantees only the optimal policy: a generic potential leaves "
                          "non-zero expected future reward, and zero needs the one potential Φ = V^π, which an optimal "
                          "redistribution supplies")),
    said("§4.1.3", "temporal abstraction compresses long-horizon problems into fewer high-level decisions",
         "options cut a long problem to a few decisions, so credit is assigned among fewer of them",
         not_checkable="no hierarchical RL here", how="new"),
    said("§4.1.3", "the wrong sub-goal decomposition introduces new credit assignment problems at the option level",
         "a wrong sub-goal decomposition makes credit assignment harder, with new problems at the option level",
         not_checkable="no hierarchical RL here", how="rephrase"),
    said("§4.1.4", "identify a small number of critical steps via attention, augment those steps' rewards",
         "transport finds the few critical steps by attention and augments their rewards",
         (TRANSPORT, "transport augments the critical step (the key room), not steps at random")),
    said("§4.1.4", "and leave the rest unchanged",
         "transport leaves the rewards of the other steps (those its attention does not pick) unchanged",
         (TRANSPORT, "transport leaves the rewards of the steps its attention does not pick unchanged")),
    said("§4.1.5", "have been the most successful methods",
         "transport methods (TVT, TRT) have worked best, ahead of RUDDER",
         not_checkable="a statement about the published record across tasks; one toy comparison cannot check it (the "
                       "next row is that comparison)"),
    said("§4.1.5", "have been the most successful methods",
         "transport methods have worked best, ahead of RUDDER (here: TRT against RUDDER on key-to-door; TVT not run)",
         (TRANSPORT, "transport methods (TVT, TRT) are more successful than RUDDER")),
    said("§4.2.1", "Only the 3 decisive actions will have significantly elevated ratios.",
         "only the decisive actions get significantly elevated hindsight ratios; the irrelevant ones stay near 1",
         (HCA, "only the decisive action gets a significantly elevated hindsight ratio: h/π - 1 of the action "
               "taken, under what followed, lies above 0 at the decisive action and above that of the irrelevant "
               "actions, whose mean h/π - 1 is zero (their ratio stays near 1)")),
    said("§4.2.2", "giving the agent a steady stream of positive examples to learn from",
         "HER turns failed episodes into signal: every episode is a success for some goal",
         (HER, "HER turns failed episodes into signal: after relabelling, every episode is a success for "
               "some goal")),
    said("§4.3.1", "UVFAs enable learning in environments where no single goal would provide enough signal on its own",
         "combined with HER, a goal-conditioned value (UVFA) learns where one goal's own signal would not suffice "
         "(here: the same goal-conditioned DQN without relabelling)",
         (HER, "HER is the ingredient that makes learning possible: DQN+HER learns where the same DQN without "
               "relabelling fails")),
    said("§4.3.2", "GVF predictions are dense and informative",
         "GVFs give dense auxiliary signal",
         not_checkable="no run implements GVFs"),
    said("§4.4.1", "there are typically fewer predecessors of the goal than successors of the start state",
         "backward search from the goal typically explores fewer branches than forward search",
         (HCA, "there are fewer predecessors of the goal than successors of the start: searching backward from the "
               "goal reaches fewer states in all, and no more at any depth, than searching forward from the start"),
         (HCA, "there are fewer predecessors of the goal than successors of the start: searching backward from the goal "
               "reaches fewer states in all, and no more at any depth, than searching forward from the start (bit "
               "flipping)")),
    said("§4.5", "vocabulary size ~100K",
         "LLM vocabularies hold about 100K tokens",
         not_checkable="a fact about production tokenizers"),
    said("§4.5.1", "all tokens in a response share the same advantage",
         "with an ORM, all tokens of a response share one advantage under GRPO or RLOO",
         (CH05, PER_TOKEN), how="rephrase"),
    said("§4.5.2", "PRMs also do not distinguish between correct but irrelevant steps and correct and decisive steps",
         "a PRM, measuring step correctness, scores a correct but irrelevant step like a correct decisive one",
         (OVER_MARKS, "a PRM, measuring step correctness, scores a correct but irrelevant step like a correct decisive "
                      "one (here: the lines of right completions that are true of the problem but off the worked "
                      "solution, against the right steps)"), how="re-point"),
    said("§4.5.2", "a step might be labeled \"correct\" because a lucky rollout happened to reach the right answer",
         "automatic Monte Carlo step labels are noisy: a lucky rollout can mark a wrong step correct",
         (OVER, "automatic (Monte Carlo) step labels are noisy: a step may be labelled correct because a lucky rollout "
                "reached the right answer")),
    said("§4.5.3", "they distinguish between steps that are correct-but-irrelevant and steps that are "
         "correct-and-decisive",
         "progress (the change in P(correct)) tells decisive steps from correct but irrelevant ones, which "
         "step correctness cannot",
         not_checkable="the cold start's right completions hold a few correct but irrelevant lines (true of the "
                       "problem, off the worked solution: the §4.5.2 row counts them), but no run measures progress on "
                       "them; studies/06_progress compares the decisive step with needed but near-certain steps "
                       "instead, a different question", how="rephrase"),
    said("§4.5.4", "requires strong inductive biases or large amounts of comparative data",
         "with hundreds of tokens per response, picking out the few decisive tokens needs strong inductive biases or "
         "much comparative data (here on a few-step version: without a strong prior, Q-RM localises the first wrong "
         "step from many pairs and not from few; our solutions run tens of tokens, not hundreds)",
         (OVER_CHECKS, "token-level credit needs large amounts of comparative data (the half checked here; strong "
                       "inductive biases are the other): with no strong prior, Q-RM localises the first wrong step from "
                       "many (right, wrong) pairs and not from few"), how="rephrase"),
    said("§4.5.4, §9", "DPO-derived reward models (DPO-RM) tend to assign high rewards to structural tokens like line "
                       "breaks",
         "DPO-implicit rewards pile up on structural tokens such as line breaks",
         not_checkable="no DPO-trained model here: reading DPO's implicit per-token reward needs a policy trained "
                       "by DPO, a method no chapter implements (Q-RM, the token-level credit we train, is the §9 "
                       "rows')"),
    said("§4.6, §9", "Q-RM (token-level credit) can replace GAE within PPO",
         "Q-RM's token-level credit can replace GAE inside PPO (or REINFORCE)",
         (OVER_CHECKS, "Q-RM's token-level credit can replace GAE inside PPO (or REINFORCE)")),
    said("§5", "TD methods take time exponential in the length of the delay to remove bias",
         "the time TD needs to unlearn its bias grows exponentially with the delay (RUDDER's theorem)",
         (LEARNING, "TD needs time exponential in the delay to remove its bias: with the policy held fixed and the "
                    "critic started at V = 0, the episodes TD(0) needs to halve its bias at the key room grow "
                    "exponentially with the corridor length L"),
         (LEARNING_NOISE, "TD needs time exponential in the delay to remove its bias: with the policy held fixed and the "
                          "critic started at V = 0, the episodes TD(0) needs to halve its bias at the key room grow "
                          "exponentially with the corridor length L"), how="re-point"),
    said("§5", "MC methods, while unbiased, suffer from variance that scales with the trajectory length",
         "Monte Carlo's variance grows with the trajectory's length",
         (DILEMMAS, "Monte Carlo's variance grows with the trajectory length"),
         (DILEMMAS_NOISE, "Monte Carlo's variance grows with the trajectory length")),
    said("§5", "RUDDER is exponentially faster than TD, MC, and MC Tree Search",
         "RUDDER is exponentially faster than TD on delayed rewards",
         (RUDDER, "RUDDER is exponentially faster than TD on delayed rewards")),
    said("§5", "RUDDER is exponentially faster than TD, MC, and MC Tree Search",
         "RUDDER is exponentially faster than Monte Carlo on delayed rewards",
         (RUDDER, "RUDDER is exponentially faster than Monte Carlo on delayed rewards")),
    said("§5", "RUDDER is exponentially faster than TD, MC, and MC Tree Search",
         "RUDDER is exponentially faster than Monte Carlo tree search on (artificial) tasks with delayed rewards",
         not_checkable="no tree search here: the comparison needs a Monte Carlo Tree Search learner on "
                       "key-to-door, a method this project does not implement (the TD and Monte Carlo comparisons "
                       "are the rows beside it)"),
    said("§5", "RUDDER augmenting PPO set new state-of-the-art results",
         "RUDDER with PPO set the state of the art on Venture and Bowling in a fraction of the time",
         not_checkable="needs Atari-scale training"),
    said("§5", "When sporadic intermediate rewards exist, the improvements may be limited.",
         "sporadic intermediate (distracting) rewards may limit RUDDER's gains",
         (TRANSPORT, "sporadic intermediate (distracting) rewards limit RUDDER's improvements")),
    said("§5", "The LSTM return predictor adds computational overhead",
         "training the return predictor costs extra compute",
         (WATCH, "the LSTM return predictor adds computational overhead")),
    said("§6", "The improvement is most pronounced when the delay exceeds the discount factor timescale",
         "TRT's gain is largest when the delay exceeds τ_γ = 1/(1 − γ)",
         (TRANSPORT, "TRT's gain over the plain learner is largest when the delay exceeds τ_γ = 10")),
    said("§6", "A2C+TRT consistently outperforms baseline A2C",
         "TRT consistently beats the plain learner (A2C in the paper, Q-learning here)",
         (TRANSPORT, "TRT consistently beats the plain learner (Q-learning here): fewer episodes to solve at every "
                     "length where a reward lies beyond τ_γ")),
    said("§6", "TRT can increase the classifier's learning rate without destabilizing the actor-critic",
         "TRT's classifier learning rate can rise without destabilising the actor-critic",
         (TRANSPORT, "TRT's classifier learning rate can rise (33x here) without destabilising the actor-critic "
                     "that learns from its reward")),
    said("§6", "the attention mechanism may distribute weight too broadly",
         "with many weakly correlated actions TRT's attention may spread too broadly and transport weaken",
         not_checkable="no task here has actions weakly correlated with the reward: key-to-door's corridor "
                       "actions change nothing and its distractors are rewards, not actions; the check needs a world "
                       "whose actions each nudge the reward a little, with its own exact model, which this project "
                       "does not have"),
    said("§7", "Standard RL with this sparse binary reward fails catastrophically",
         "standard RL with a sparse binary goal reward fails catastrophically",
         (HER, "standard RL with a sparse binary goal reward fails catastrophically: where random exploration almost "
               "never reaches the goal, DQN's success is no better than a random policy's")),
    said("§7", 'the "future" strategy — sampling goals from states visited later in the same episode — tends '
         "to work best",
         "among relabelling strategies, 'future' tends to work best",
         (HER_STRATEGIES, "among HER's goal-sampling strategies (\"future\", \"final\", \"episode\", \"random\"), "
                          "\"future\" tends to work best: the highest final success")),
    said("§7", "may be viewed as a form of implicit curriculum",
         "HER may be viewed as an implicit curriculum (near goals first)",
         *((HER, "HER may be viewed as an implicit curriculum: near goals (fewer than n/2 bits to flip) are learned "
                 f"before far ones (more than n/2 bits to flip), at n = {n}") for n in (5, 10, 20, 30))),
    said("§7", "Ablation studies confirm that HER is the crucial ingredient enabling learning in these "
         "environments.",
         "HER is the ingredient that makes learning possible: without it the same learner fails (here: bit "
         "flipping, DQN against DQN+HER)",
         (HER, "HER is the ingredient that makes learning possible: DQN+HER learns where the same DQN "
               "without relabelling fails"),
         how="new"),
    said("§7", "DDPG+HER successfully learns all three tasks and the learned policies transfer to a physical robot",
         "DDPG + HER learns push, slide and pick-and-place and transfers to a robot; DDPG alone fails",
         not_checkable="robotics; the bit-flipping analogue is the row on HER as the crucial ingredient"),
    said("§8", r"$Q(x, a) = E_z [ \frac{h(a|x,z) }{ π(a|x)} · z ]$",
         "Q(x, a) = E_z[h(a | x, z) / π(a | x) · z]",
         (HCA, "Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]")),
    said("§8", "Return-conditional HCA is more appealing",
         "return-conditional HCA is more appealing than state-conditional HCA (here read as the lower-variance "
         "gradient; the essay's reason, a scalar instead of a high-dimensional state, is the next row)",
         *((HCA, f"{task}: return-conditional HCA is preferable to state-conditional HCA")
           for task in ("shortcut", "delayed effect")), how="rephrase"),
    said("§8", "instead of conditioning on high-dimensional states, it conditions on a scalar outcome",
         "return-conditional HCA is more appealing because it conditions on a scalar outcome instead of a "
         "high-dimensional state",
         not_checkable="our tasks are tabular with a handful of states, so conditioning on the state is no harder "
                       "to learn here than on the return: the reason needs states of many dimensions", how="new"),
    said("§8", "HCA can directly determine the relevance of a past action to a particular outcome, regardless "
         "of temporal distance.",
         "HCA judges a past action's relevance whatever its distance in time",
         (HCA, "HCA judges a past action's relevance whatever its distance in time: return HCA's hindsight ratio for the "
               "decisive action is elevated, above the irrelevant ones', at every distance from its reward, and does "
               "not fade as that distance grows (the return's noise the same at every distance)")),
    said("§8", "the spurious contributions that cause HCA to degrade toward the REINFORCE estimator",
         "when the later state reveals the action, state-conditional HCA degrades toward REINFORCE",
         (HCA, "when the later state reveals the action, state HCA degrades toward REINFORCE")),
    said("§8", "This reduces the variance and eliminates the spurious contributions",
         "COCOA lowers the variance and removes spurious contributions",
         not_checkable="COCOA is not implemented"),
    said("§9", "low Q-values to tokens in the rejected trajectory that caused failure",
         "Q-RM, trained from preference pairs only, gives low Q to the tokens that caused a failure",
         (SEEDS_06, "Q-RM assigns low credit to the tokens that caused the failure, from pairs "
                              "alone (no step labels)"),
         (OVER, "Q-RM assigns low credit to the tokens that caused the failure, from pairs alone (no step "
                "labels)")),
    said("§9", "improves average Pass@1 scores by approximately 5 points on mathematical reasoning tasks "
         "compared to ORM baselines",
         "Q-RM raises pass@1 over ORM baselines (Chen et al.'s size, about 5 points on their benchmarks, is the "
         "paper's anchor; here: our arithmetic task, at our scale, and a 'no' must rule out their 5 points)",
         (OVER, "Q-RM raises pass@1 over an ORM baseline (Chen et al.: by about 5 points)")),
    said("§9", "by approximately 4-5 points compared to token-level PRM counterparts",
         "Q-RM raises pass@1 by about 4-5 points over token-level PRMs",
         not_checkable="the comparison is with token-level PRMs; ours scores steps (the step-level comparison, "
                       "a different statement, is measured in studies/06_overoptimisation.py)"),
    said("§9", "RL training with Q-RM converges 12× faster than ORM on GSM8K",
         "RL with Q-RM converges 12x faster than with an ORM on GSM8K (here: our arithmetic task, at our scale)",
         (OVER, "RL with Q-RM converges 12x faster than with an ORM (GSM8K; here GRPO on the learned ORM)")),
    said("§9", "11× faster than step-level PRM on MATH",
         "RL with Q-RM converges 11x faster than with a step-level PRM on MATH (here: our arithmetic task, at our scale)",
         (OVER, "RL with Q-RM converges 11x faster than with a step-level PRM (MATH)")),
    said("§10", "localizing error to the step where reasoning went astray",
         "a PRM points at the step where a solution first goes wrong",
         (SEEDS_06, "a PRM localises the error to the step where reasoning went astray"),
         (OVER, "a PRM localises the error to the step where reasoning went astray")),
    said("§10", 'the "min" aggregation strategy tends to outperform mean aggregation because it catches the '
         "first error",
         "for best-of-N, min aggregation of step scores tends to beat mean aggregation",
         (OVER, "for best-of-N, min aggregation of step scores tends to outperform mean aggregation (it catches "
                "the first error)")),
    said("§10", "PRMs require step boundaries to be well-defined",
         "PRMs need well-defined step boundaries",
         not_checkable="our steps are lines by construction, so every PRM here has well-defined boundaries; the "
                       "check needs a PRM whose steps are cut elsewhere (Monte Carlo labels at those cuts, and a way "
                       "to score its localisation against line-level gold labels), a pipeline of its own that no run "
                       "has", how="rephrase"),
    said("§10", "PRMs also tend to be domain-specific: a PRM trained on math may not transfer to code or general reasoning",
         "a PRM trained on one domain (math) may not transfer to another",
         not_checkable="one domain here (arithmetic chains)", how="new"),
]

SS_GRPO = [
    said("The Problem", "That advantage is then broadcast to every token in the completion.",
         "GRPO broadcasts one scalar advantage to every token of a completion",
         (CH05, PER_TOKEN), how="rephrase"),
    said("The Problem", "If a model generates a chain-of-thought with a flawed step that happens to lead to the right "
                        "answer, GRPO reinforces the flawed step.",
         "GRPO reinforces a flawed step in a chain that still reaches the right answer",
         (CREDIT, "a flawed step in a chain that still reaches the right answer is reinforced by GRPO")),
    said("The Problem", "a correct step followed by a single arithmetic slip gets penalized",
         "GRPO penalises a correct step that a later slip spoils",
         (CREDIT, "GRPO penalises the right steps before a single slip as much as the slip, in a mixed group (a "
                  "failed completion in a group with a success): every token of the failed completion gets its A_i "
                  "< 0")),
    said("The Problem", "The result is slow convergence, reward hacking, and brittle reasoning.",
         "the broadcast slows convergence: step-level credit should converge faster",
         (CREDIT, "the broadcast of one advantage slows convergence: the gold step credit (PRM-GRPO) reaches "
                  "GRPO's halfway mark in fewer samples")),
    said("The Problem", "The result is slow convergence, reward hacking, and brittle reasoning.",
         "the broadcast causes reward hacking",
         (OVER_MITIGATIONS, "broadcasting one sequence-level advantage to every token causes reward hacking: on the same "
                            "learned PRM, GRPO with its score broadcast as one sequence reward games it more than GRPO "
                            "with the PRM as step credit (its score of wrong steps rises more, and held-out pass@1 falls "
                            "further from its peak)")),
    said("The Problem", "The result is slow convergence, reward hacking, and brittle reasoning.",
         "the broadcast causes brittle reasoning",
         (CREDIT, "flat credit (GRPO's broadcast) makes reasoning brittle: more of its right answers are reached "
                  "through a wrong line than under step credit (the gold PRM-GRPO)"), how="new"),
    said("The Problem", "for a 1000-token rollout, per-step evaluation multiplies inference cost by 1000×",
         "evaluating every step of a 1,000-token rollout separately multiplies the inference cost by 1,000 (read in "
         "the tokens the evaluator reads; in its passes, the next row)",
         (CREDIT, "for a 1000-token rollout, per-step evaluation multiplies inference cost by 1000x, read as "
                  "tokens processed"), how="rephrase"),
    said("The Problem", "for a 1000-token rollout, per-step evaluation multiplies inference cost by 1000×",
         "evaluating every step of a 1,000-token rollout separately multiplies the inference cost by 1,000 (read in "
         "evaluator passes of fixed cost, as a simulator's: one per token against one for the outcome; in tokens "
         "read, the previous row)",
         (CREDIT, "for a 1000-token rollout, per-step evaluation multiplies inference cost by 1000x, read as "
                  "evaluator calls (one per token)"), how="rephrase"),
    said("Mechanics", "we can infer step-level advantages by comparing the final outcome of a rollout against "
         "a counterfactual baseline constructed from other rollouts in the same group",
         "SS-GRPO infers step-level advantages (here: where the steps of one solution differ, in a right solution "
         "its flawed step gets less credit than its right steps, and in a failed one its first wrong step more blame "
         "than the right steps before it)",
         (CREDIT, "SS-GRPO's step weight credits the flawed step less: in a right solution it gets less "
                  "credit than the solution's right steps"),
         (CREDIT, "SS-GRPO's step weight blames the first wrong step more: in a failed solution it gets more blame "
                  "than the right steps before it"), how="rephrase"),
    said("Engineering decisions", "The contrastive loss uses normalized rewards within the group",
         "the article's estimator is trained with a contrastive loss on within-group normalised rewards (its code, "
         "train_step_estimator; read as a loss that compares a group's rollouts with one another; the article's own "
         "definition in Mechanics is the next row)",
         (CREDIT, "the estimator is trained with a contrastive loss (one that compares a group's rollouts)")),
    said("Mechanics", "for two rollouts in the same group with different outcomes, the step weights should be higher "
                      "for steps that appear more frequently in successful rollouts",
         "the estimator's objective (the article's own definition of 'contrastive'): for rollouts of one group with "
         "different outcomes, steps that appear more frequently in the successful ones get higher weights (read on "
         "the article's own train_step_estimator, 'more frequently' both as in more successful rollouts and as a "
         "larger share of the step's appearances)",
         (CREDIT, "the estimator's objective, the article's definition: steps that appear more often in a group's "
                  "successful rollouts get higher weights")),
    said("Checklist", "Monitor the entropy of step weights; if it collapses to uniform, increase the "
         "contrastive margin.",
         "if the step weights' entropy collapses to uniform, raising the contrastive margin helps (read on the "
         "article's code, its train_step_estimator)",
         (CREDIT, "if the entropy of the step weights collapses to uniform, increasing the contrastive margin helps, "
                  "read on the article's code (its train_step_estimator)"), how="new"),
    said("Checklist", "Monitor the entropy of step weights; if it collapses to uniform, increase the "
         "contrastive margin.",
         "if the step weights' entropy collapses to uniform, raising the contrastive margin helps (read on a loss "
         "whose margin acts)",
         not_checkable="no loss here has a margin that acts: the article's code takes a margin argument but never "
                       "uses it (the previous row), and this chapter's estimator_loss has none; a margin loss "
                       "would be a method the article does not give"),
    said("Why it works", "The estimator learns to identify steps that are causally correlated with success.",
         "the learned weight picks out the steps that drive success",
         (CREDIT, "SS-GRPO: the estimator learns to identify steps causally correlated with success")),
    said("Why it works", "we only use the final outcome reward and the step's textual content",
         "SS-GRPO needs no per-step evaluation: the outcome reward is its only external signal",
         (CREDIT, "SS-GRPO needs no per-step evaluation: its credit reads only the outcome reward (one "
                  "verifier call per rollout) and the steps' text")),
    said("Why it works", "The only extra cost is a forward pass of a tiny model per step, which is negligible "
                         "compared to the LLM's generation cost.",
         "the estimator's forward pass per step is negligible next to a 7B policy's generation (read in FLOPs, with "
         "the article's own bound, < 1%, as 'negligible', on its code: each step read alone)",
         (CREDIT, "the estimator's forward pass costs below 1% of a 7B policy's generation (FLOPs, attention included; "
                  "read on the article's code, whose estimator reads each step's tokens alone)")),
    said("Why it works", "The only extra cost is a forward pass of a tiny model per step, which is negligible "
                         "compared to the LLM's generation cost.",
         "the estimator's forward pass per step is negligible next to a 7B policy's generation (read in FLOPs, with "
         "the article's own bound, < 1%, as 'negligible', on its prose: each step read with the prompt)",
         (CREDIT, "the estimator's forward pass costs below 1% of a 7B policy's generation (FLOPs, attention included; "
                  "read on the article's prose, where f(s, P) reads each step with the prompt)"), how="new"),
    said("Why it works", "The only extra cost is a forward pass of a tiny model per step, which is negligible "
                         "compared to the LLM's generation cost.",
         "that forward pass is the only extra cost",
         (CREDIT, "the only extra cost is the estimator's forward pass, read against its table (1.05x inference "
                  "per rollout; 24 and 28 training hours for GRPO and SS-GRPO)")),
    said("Engineering decisions", "to keep overhead <1% of LLM inference",
         "the estimator is made tiny to keep the overhead below 1% of LLM inference, and does (read as the overhead "
         "the article itself states, in rollout time: its 5% and 1.05x)",
         (CREDIT, "the tiny estimator keeps the overhead below 1% of LLM inference, read as the article's own "
                  "stated overheads (each below it)")),
    said("Engineering decisions", "to keep overhead <1% of LLM inference",
         "the estimator is made tiny to keep the overhead below 1% of LLM inference, and does (read in FLOPs against a "
         "7B policy's generation, on the article's code: each step read alone)",
         (CREDIT, "the estimator's forward pass costs below 1% of a 7B policy's generation (FLOPs, attention included; "
                  "read on the article's code, whose estimator reads each step's tokens alone)"), how="rephrase"),
    said("Engineering decisions", "to keep overhead <1% of LLM inference",
         "the estimator is made tiny to keep the overhead below 1% of LLM inference, and does (read in FLOPs against a "
         "7B policy's generation, on the article's prose: each step read with the prompt)",
         (CREDIT, "the estimator's forward pass costs below 1% of a 7B policy's generation (FLOPs, attention included; "
                  "read on the article's prose, where f(s, P) reads each step with the prompt)"), how="new"),
    said("Engineering decisions", "avoiding sequence-length dependence",
         "a fixed-size (mean-pooled) step representation avoids dependence on the step's length (read on the "
         "article's code, which pools the step's tokens with no positions)",
         (CREDIT, "a mean-pooled, fixed-size step representation avoids dependence on the step's length: the same "
                  "step's tokens repeated k times get the same w(s) (its estimator, as its code builds it)"),
         how="rephrase"),
    said("Engineering decisions", "The policy loss applies the same clipping as PPO but with per-step advantages, "
                                  "preserving stability.",
         "clipping as in PPO keeps training with per-step advantages stable",
         (ESTIMATOR, "the clip on per-step advantages preserves stability: over several passes per batch, training with "
                    "the clip falls back less from its best held-out pass@1 than without it")),
    said("Performance", "We benchmarked SS-GRPO against vanilla GRPO and a full PRM-based approach on a math "
                        "reasoning dataset (GSM8K) using a 7B model.",
         "at 7B on GSM8K: GRPO 72.3%, PRM 78.1%, SS-GRPO 77.5%; 24 / 120 / 28 h; 1x / 1000x / 1.05x inference",
         not_checkable="needs a 7B model; our policy has about 0.2M parameters"),
    said("Performance", "SS-GRPO achieves 97% of the accuracy gain of a full PRM",
         "SS-GRPO gets 97% of the PRM's accuracy gain (checked on the article's own table)",
         (CREDIT, "SS-GRPO achieves 97% of the accuracy gain of a full PRM (its table: GRPO 72.3%, PRM 78.1%, SS-GRPO "
                  "77.5%)")),
    said("Performance", "at 4% of the training cost",
         "SS-GRPO trains at 4% of the PRM's training cost (read on the article's table as total training hours)",
         (CREDIT, "...at 4% of the PRM's training cost, read as total training hours (its table: 24/120/28 h for "
                  "GRPO/PRM/SS-GRPO)")),
    said("Performance", "at 4% of the training cost",
         "SS-GRPO trains at 4% of the PRM's training cost (read on the article's table as the hours each spends beyond "
         "GRPO's, as its '97% of the accuracy gain' is a share of the gain over GRPO)",
         (CREDIT, "...at 4% of the PRM's training cost, read as the hours each spends beyond GRPO's"), how="rephrase"),
    said("Performance", "The estimator adds only 5% overhead to rollout generation",
         "the estimator adds only 5% overhead to rollout generation (here read on the article's own table, as its "
         "accuracy and cost rows are; its rollout time is the next row)",
         (CREDIT, "the estimator adds only 5% overhead to rollout generation (its table: 1.05x inference per "
                  "rollout)"), how="rephrase"),
    said("Performance", "The estimator adds only 5% overhead to rollout generation",
         "the estimator adds only 5% overhead to rollout generation (read as rollout time, what the article "
         "measured)",
         not_checkable="the 5% is rollout time on the article's hardware at 7B, which nothing here can time: FLOPs "
                       "do not stand in for it (a small model's separate calls run far below a 7B policy's batched "
                       "use of the hardware, so a FLOPs share of under 1%, the 'negligible' rows, fits a time share "
                       "of 5% as well as of 0.5%), and our own policy is smaller than our estimator, so our time "
                       "share says nothing of theirs", how="rephrase"),
    said("Performance", "SS-GRPO (ours)77.5%",
         "SS-GRPO beats GRPO (here: at our scale, same samples and updates)",
         (CREDIT, "SS-GRPO beats GRPO (here: at our scale; its table's 5.2 points at 7B on GSM8K are not a size that "
                  "carries over)")),
    said("Trade-offs", "The estimator introduces a small latency (≈2ms per step)",
         "the estimator costs about 2 ms per step",
         not_checkable="hardware- and scale-specific"),
    said("Trade-offs", "For very long rollouts (>5000 tokens), the estimator's cost becomes non-negligible",
         "for rollouts over 5,000 tokens the estimator's cost becomes non-negligible (read in FLOPs against a 7B "
         "policy's generation, on the article's code, whose estimator reads each step alone: at or above the article's "
         "own 1% overhead bound)",
         (CREDIT, "for very long rollouts (>5000 tokens) the estimator's cost becomes non-negligible (FLOPs against a "
                  "7B policy's generation, attention included; read on the article's code, whose estimator reads each "
                  "step's tokens alone)")),
    said("Trade-offs", "For very long rollouts (>5000 tokens), the estimator's cost becomes non-negligible",
         "for rollouts over 5,000 tokens the estimator's cost becomes non-negligible (read in FLOPs on the article's "
         "prose, where the estimator reads each step with the prompt: the rollout's length makes it reach the "
         "article's own 1% bound)",
         (CREDIT, "for very long rollouts (>5000 tokens) the estimator's cost becomes non-negligible (FLOPs against a "
                  "7B policy's generation, attention included; read on the article's prose, where f(s, P) reads each "
                  "step with the prompt)")),
    said("Trade-offs", "For very long rollouts (>5000 tokens), the estimator's cost becomes non-negligible",
         "for rollouts over 5,000 tokens the estimator's latency becomes non-negligible",
         not_checkable="latency is hardware- and implementation-specific (the bullet's ≈2 ms per step); only the "
                       "FLOPs reading is computed here"),
    said("Trade-offs", "The estimator adds ~1M parameters",
         "the estimator has about 1M parameters (its own StepValueEstimator)",
         (CREDIT, "the estimator adds ~1M parameters")),
    said("Trade-offs", "storing step-level weights for all rollouts increases memory by ~10%",
         "keeping a weight per step for every rollout costs about 10% more memory",
         not_checkable="the article names neither the memory its 10% is of nor its rollouts' steps per token, and the "
                       "share is one number per step over that memory: our toy rollouts' shape would answer for ours, "
                       "not for its 7B rollouts (studies/07_credit shows the range over plausible buffers on ours)",
         how="rephrase"),
    said("Trade-offs", "If the group size is too small (K<4), the contrastive signal is weak.",
         "with groups smaller than 4 the contrastive signal is weak (here read as: the estimator trained on groups of "
         "K = 2 learns less than at K = 4)",
         (ESTIMATOR, "with groups smaller than 4 the contrastive signal is weak: the estimator trained at K = 2 tells "
                    "right from failed solutions less well than at K = 4")),
    said("Trade-offs", "If the group size is too small (K<4), the contrastive signal is weak.",
         "with groups smaller than 4 the contrastive signal is weak (here read as: fewer groups hold both a success "
         "and a failure to contrast)",
         (ZERO, "with groups smaller than 4 the contrastive signal is weak: fewer groups hold both a success and a "
                "failure (a contrast to learn from) at K = 2 than at K = 4"), how="new"),
    said("Checklist", "Start with a group size of at least 8 to ensure stable advantage normalization.",
         "groups of 8 or more make the normalised advantages stable",
         not_checkable="'stable' names no level to reach: every measure of the normalisation's noise (the share of "
                       "groups without spread, the group std's relative error) falls smoothly with G for any success "
                       "rate, so no check here could single out 8, or fail"),
    said("Checklist", "Re-train the estimator every N policy updates to avoid distribution shift.",
         "retraining the estimator every N updates avoids distribution shift",
         (ESTIMATOR, "retraining the estimator every N updates avoids distribution shift: on the final policy's samples "
                    "the estimator retrained every N = 5 updates tells right from failed solutions better than one "
                    "frozen after its first 20 updates")),
    said("Summary", "we recover most of the benefits of process reward models",
         "learning the step weight from outcomes alone recovers most of a PRM's benefit (here: at our scale, the "
         "accuracy gain over GRPO of PRM-GRPO on the gold step labels)",
         (CREDIT, "SS-GRPO recovers most (over half) of the PRM's accuracy gain over GRPO"), how="rephrase"),
    said("Summary", "we recover most of the benefits of process reward models",
         "learning the step weight from outcomes alone recovers most of a PRM's benefit (here read as its step credit: "
         "in a right solution, the flawed step credited below the right steps before it)",
         (CREDIT, "SS-GRPO recovers most of the benefits of process reward models, read as their step credit: in a "
                  "right solution, SS-GRPO credits the flawed step below the right steps before it by over half "
                  "PRM-GRPO's gap"), how="new"),
    said("Summary", "at a fraction of the cost",
         "learning the step weight costs a fraction of what a PRM costs (read on the article's own table, which the "
         "sentence sums up)",
         (CREDIT, "SS-GRPO trains at a fraction of the PRM's cost, read on its table: fewer training hours and less "
                  "inference per rollout than the PRM (24/120/28 h; 1x/1000x/1.05x for GRPO/PRM/SS-GRPO)"),
         how="rephrase"),
]

STATEMENTS = {"whole-game": WHOLE_GAME, "over-long-generations": OVER_LONG, "survey": SURVEY,
              "SS-GRPO article": SS_GRPO}

LEFT_OUT = {
    "whole-game": (
        "the MDP vocabulary and A = Q − V (definitions, §1); the reward hypothesis (a framing, §2); 'if you can write "
        "a supervised target, do that first' (advice, §2, §9); the Pong learning rule as Karpathy describes it (a "
        "description, §3); causality's reward-to-go (a definition, §4: the essay does not say it lowers the "
        "variance); continuous and discrete policies share one gradient (a framing, §4); the GAE formula, GRPO's and "
        "RLOO's advantages (definitions, §5; App. A's numbers are checked); clipping as a trust-region cousin and "
        "constrained credit assignment (framings, §6); process rewards put non-zero r_t on reasoning tokens (a "
        "definition, §6); 'group comparisons so bad-with-pass and good-with-fail are distinguished' (a framing, "
        "§7.4); human spot checks, sweeping the KL coefficient, the reward-KL frontier, measuring policy age (advice, "
        "§7); the Monday / curiosity checklists and the takeaways (advice, §9-10). Dropped from the hand-written "
        "ledger as not the essay's statements: 'flat broadcast learns slower than reward-to-go with a baseline' (the "
        "essay never compares them), 'process rewards then learn better' (§7.4 lists them as a mitigation, not as "
        "learning faster), Dr. GRPO's loss normaliser (§7.6's 'no length normalization' is about the reward), and "
        "our learned ORM's length correlation (the §7.6 symptom is checked on a reward that prefers length)."),
    "over-long-generations": (
        "one terminal reward for a whole proof (a description of the setting, intro); preference and verifiable "
        "rewards are given once per response (a description, Why); text has no external state change that localises "
        "an error (a framing, Why); the REINFORCE estimator and the InstructGPT objective (definitions); β is often "
        "scheduled or adapted (a remark on practice, KL); the critic makes a coupled optimisation problem (a framing, "
        "GRPO); GRPO's advantage formula and its token-level ratio ρ_i (definitions, GRPO); GRPO was introduced in "
        "DeepSeekMath; InstructGPT used PPO (bibliography); the PRM's per-step signal R_total = Σ γ^t r_t "
        "(a definition, Process rewards: the hand-written ledger read it as 'RL with a PRM beats outcome-only', "
        "which the essay does not say); ReST-MCTS* (a description of a method); monitor KL drift and keep a held-out "
        "human evaluation (advice)."),
    "survey": (
        "Minsky coined the term (bibliography, §1); perfect credit would turn RL into supervised learning (a "
        "framing, §1); 'leaving nothing meaningful to bootstrap from' (§2.3's reason for its statement: with V = 0 "
        "the bootstrapped term γV(s') is 0 by definition; whether the zeros cost TD more than other wrong values is "
        "studies/02_learning's shuffled control, not the essay's statement); the strategy game's 80 decisions and the maze's 10,000 steps (illustrations, §2); neither "
        "discounting extreme solves the problem (a conclusion, §3); n-step and λ windows use temporal distance as a "
        "proxy for relevance (a framing, §4.1.1); transport bypasses discounting by construction (a description, "
        "§4.1.4); GRPO-λ and GTPO exist (bibliography, §4.5.4); RUDDER's LSTM, its contribution analysis and "
        "monotonic LSTM (method descriptions, §5); how TRT's classifier works (a description, §6); HER needs an "
        "off-policy learner and a goal-reward map (requirements, §7); Q-RM's logits are token-level Q values "
        "(theory, §9); PRM labels +1/0/−1 and PRMs give dense rewards for RL (definitions, §10); Math-Shepherd's "
        "'any completion' rule (a definition, §10); open problems. Dropped from the hand-written ledger: its three "
        "§10 rows on Lightman et al.'s best-of-N numbers (PRM against ORM, PRM and ORM against majority vote): the "
        "survey makes no such comparison (over-long-generations does, and keeps its row). 'High-variance gradient "
        "estimates' read as raw variance, R on every token against R on one token (studies/05_critic shows it): a sum "
        "of T terms against one term is larger by its size alone and has another expected gradient, so it is not a "
        "reading of §3's statement."),
    "SS-GRPO article": (
        "GRPO is the de-facto algorithm and powers DeepSeek-R1 (bibliography and opinion, The Problem); the estimator "
        "f(s, P), w(s) ∈ [0, 1] and A_i(s) = A_i · w(s) (the method's definition); the benchmark set-up: GSM8K, a 7B "
        "model, 8×A100 (a description); the code listing's details (padding, pad id 0, stacking); keep the estimator "
        "at ≤ 2 layers and ≤ 128 wide, validate against a full PRM, retrain against bias (advice). Dropped from the "
        "hand-written ledger as not the article's statements: 'SS-GRPO beats GRPO at the same step size' (our "
        "control for its mechanism), its overhead and cost figures recomputed at our scale (the article states them "
        "for a 7B policy, where the estimator is tiny; ours is bigger than our policy), 'more as chains grow' (not in "
        "the article), the signed variant (ours), mean pooling tested on our trained estimators (their learned positions "
        "and the prompt change w when a step's tokens repeat: positional invariance, which the article does not "
        "claim), and '97% of the PRM's gain' at our scale (the article states it for 7B "
        "on GSM8K only; its own table is checked)."),
}
