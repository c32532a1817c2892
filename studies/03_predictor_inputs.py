"""03 study — what the return predictor reads: the change of state (RUDDER's choice) or the state?

03_rudder.py's return predictor reads, besides the action, what changed at each step: where the
agent is, and the change in "has the key", non-zero only at the step the key is picked up
(--inputs difference). Fed the state one-hot instead (--inputs state), carrying the key shows at
every step after it. Here the chapter's predictor_study (its settings, its stored key-to-door
episodes, its initial weights: each predictor starts from the seed, as the chapter's does) is
run with each input and each training length: the predictor's error, and where r̃ puts the
credit, on the key step and on the step after it, where the key first shows in the state.

    python studies/03_predictor_inputs.py   # 18 s on 2 CPU cores (beside other jobs)

Figure: credit_by_step.png (the share of r̃'s variance across episodes on each step, per input and
training length).
"""

import dataclasses
import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

rudder = importlib.import_module("03_rudder")

INPUTS = ("difference", "state")


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/03_predictor_inputs", "output folder for figures and results.json")
    steps: str = common.arg("400,1500", "predictor training steps to compare (the chapter trains 1500)", item=int)

    SMOKE = dict(steps="3,5")

    def __post_init__(self):
        common.require(all(n > 0 for n in self.step_list), "--steps must be positive integers")

    @property
    def step_list(self) -> list[int]:
        return common.as_list(self.steps, int)


def chapter_args(args: Args, inputs: str, steps: int) -> "rudder.Args":
    """The chapter's predictor settings (its smoke settings in a smoke run), with this input and
    training length."""
    settings = common.apply_smoke(rudder.Args(seed=args.seed, smoke=args.smoke, inputs=inputs))
    return dataclasses.replace(settings, steps=steps)


def inputs_study(args: Args, device) -> dict:
    """{(input, training steps): the predictor's error, the share of r̃'s variance on every step,
    and the largest |Σ r̃ - G|}, each predictor drawn from the seed as the chapter's is."""
    results = {}
    for inputs in INPUTS:
        for steps in args.step_list:
            common.seed_everything(args.seed)
            study = rudder.predictor_study(chapter_args(args, inputs, steps), device)
            results[(inputs, steps)] = {"predictor_final_mse": study["predictor_final_mse"],
                                        "credit_share": rudder.credit_share(study["redistributed"]).tolist(),
                                        "max_abs_sum_minus_return": study["max_abs_sum_minus_return"]}
    return results


def plot_credit(study: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (inputs, steps), result in study.items():
        ax.plot(result["credit_share"], "o-" if inputs == "difference" else "s--", label=f"{inputs}, {steps} steps")
    ax.set(xlabel="step (0: key room)", ylabel="share of r̃'s variance across episodes", yscale="log",
           title="Where the return predictor puts the credit")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def inputs_metrics(study: dict) -> dict:
    """Flat metrics, and the table the run prints: per input and training length, the error, the
    credit on the key step and on the step after it, and the largest |Σ r̃ - G|."""
    metrics, rows = {}, []
    for (inputs, steps), result in study.items():
        key, after = result["credit_share"][:2]
        found = {"predictor_final_mse": result["predictor_final_mse"], "credit_share_at_key": key,
                 "credit_share_after_key": after, "max_abs_sum_minus_return": result["max_abs_sum_minus_return"]}
        metrics.update({f"{name}[{inputs}, {steps} steps]": value for name, value in found.items()})
        rows.append([inputs, steps, *found.values()])
    header = ["input", "steps", "error (last step)", "credit: key step", "step after", "largest |Σ r̃ - G|"]
    metrics["tables"] = {"inputs": {"header": header, "rows": rows}}
    return metrics


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    torch.set_num_threads(1)  # as the chapter: a small model on small batches, threads only wait on each other
    print(f"03 study: the return predictor's input, {', '.join(INPUTS)}, trained {args.steps} steps, device {device}")
    study = inputs_study(args, device)
    plot_credit(study, out / "credit_by_step.png")
    metrics = inputs_metrics(study)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, [], credit_share={f"{i}, {s} steps": r["credit_share"]
                                                                     for (i, s), r in study.items()})
    table = metrics["tables"]["inputs"]
    print("\nThe return predictor by input and training length (credit: share of r̃'s variance across episodes):")
    print(common.format_table(table["rows"], table["header"]))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": []}


if __name__ == "__main__":
    common.run_script(main, Args)
