"""05 study — throughput of the chapter's RL step: seconds in generation and in the update
(reference forward + policy-gradient step), completions and tokens per second; our KV-cache
sampling loop against `model.generate` on the same prompts; and, where trl is installed
(`pip install trl accelerate datasets`, optional), trl's GRPOTrainer on the same model and
settings.

    python studies/05_bench.py      # 4 s on 2 CPU cores, measured with the other one busy (more
                                    # where trl is installed); writes runs/studies/05_bench/
    python studies/05_bench.py --min-steps 16 --max-steps 16 --model runs/cold_start/b72eabe5c7
                      # 16-step chains (~128 tokens) on studies/07_lengths.py's cold start (run it first)
"""

import copy
import dataclasses
import importlib
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_bench", "output folder for results.json")
    bench_steps: int = common.arg(5, "RL steps timed")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, bench_steps=1)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "bench_steps")


def timed_steps(policy, tokenizer, rl: grpo.Args, steps: int, device) -> list[dict]:
    """`steps` GRPO updates of the chapter's loop (same problems and draws, no held-out
    evaluation), each timed: seconds sampling and scoring, seconds in the update, mean length."""
    rng = np.random.default_rng(rl.seed)
    generator = torch.Generator(device).manual_seed(rl.seed)
    optimizer, schedule = grpo.make_optimizer(policy, rl)
    reference = lm_world.frozen_copy(policy)
    exclude = frozenset(p.prompt for p in rl.task.held_out())
    timings = []
    for _ in range(steps):
        start = time.time()
        problems = rl.task.sample(rl.prompts, rng, exclude=exclude)
        completions, rewards = grpo.sample_groups(policy, tokenizer, problems, rl, generator, device)
        generated = time.time()
        advantages = grpo.token_advantages(rewards, "grpo", completions.completion_mask)
        grpo.policy_gradient_step(policy, optimizer, completions, advantages,
                                  grpo.reference_logprobs(reference, completions), rl)
        schedule.step()
        timings.append({"generate_s": generated - start, "update_s": time.time() - generated,
                        "length": float(completions.lengths.float().mean())})
    return timings


def benchmark(policy, tokenizer, rl: grpo.Args, args: Args, device) -> dict:
    """Throughput of RL steps (`timed_steps` on a copy of the policy), and model.generate on the
    same number of held-out prompts for comparison with our KV-cache loop."""
    timings = timed_steps(copy.deepcopy(policy), tokenizer, rl, args.bench_steps, device)
    generate_s = sum(t["generate_s"] for t in timings)
    update_s = sum(t["update_s"] for t in timings)
    batch = rl.prompts * rl.group_size
    tokens = sum(t["length"] for t in timings) * batch
    prompts = [p.prompt for p in rl.task.held_out(rl.eval_problems)[:rl.prompts] for _ in range(rl.group_size)]
    ids, mask = lm_world.encode_prompts(tokenizer, prompts, device)
    start = time.time()
    for _ in range(args.bench_steps):
        policy.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=rl.max_new_tokens,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    hf_generate_s = time.time() - start
    return {"completions_per_s": args.bench_steps * batch / (generate_s + update_s),
            "tokens_per_s": tokens / (generate_s + update_s), "generation_share": generate_s / (generate_s + update_s),
            "own_loop_generate_s": generate_s, "update_s": update_s, "hf_generate_s": hf_generate_s,
            "seconds_per_update": (generate_s + update_s) / args.bench_steps,
            "steps": args.bench_steps, "completions_per_step": batch,
            **trl_benchmark(policy, tokenizer, rl, args, device)}


def trl_benchmark(policy, tokenizer, rl: grpo.Args, args: Args, device) -> dict:
    """The same RL steps with trl's GRPOTrainer (optional: `pip install trl`): same model, G,
    prompts per step, completion budget, β and learning rate. Seconds per step from the second
    step on (the first pays for start-up), as completions per second."""
    try:  # optional dependencies: imported here so that the study runs without them
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        return {"trl": "not installed"}
    problems = rl.task.sample((args.bench_steps + 1) * rl.prompts, np.random.default_rng(rl.seed))
    by_prompt = {p.prompt: p for p in problems}

    def reward(prompts, completions, **_):
        return [lm_world.verify(by_prompt[p], c) for p, c in zip(prompts, completions)]

    class StepClock(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_end(self, *_, **__):
            self.ends.append(time.time())

    batch = rl.prompts * rl.group_size
    config = GRPOConfig(output_dir=str(Path(args.out) / "trl"), per_device_train_batch_size=batch,
                        num_generations=rl.group_size, max_completion_length=rl.max_new_tokens,
                        max_steps=args.bench_steps + 1, learning_rate=rl.lr, beta=rl.beta,
                        loss_type="grpo", use_cpu=device.type == "cpu", save_strategy="no", report_to="none",
                        logging_steps=10**6, seed=rl.seed, disable_tqdm=True)
    clock = StepClock()
    trainer = GRPOTrainer(model=copy.deepcopy(policy), reward_funcs=reward, args=config, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": [p.prompt for p in problems]}), callbacks=[clock])
    trainer.train()
    seconds = clock.ends[-1] - clock.ends[0]
    return {"trl": f"GRPOTrainer, trl {version('trl')}", "trl_completions_per_s": args.bench_steps * batch / seconds,
            "trl_seconds_per_step": seconds / args.bench_steps}


def throughput_table(bench: dict, args: Args, device) -> dict:
    """The benchmark as the table it prints and the docs show."""
    batches = f"{args.bench_steps} x {bench['completions_per_step']} completions"
    trl = bench["trl"]
    if "trl_completions_per_s" in bench:
        trl += f": {bench['trl_completions_per_s']:.0f} completions/s, {bench['trl_seconds_per_step']:.2f} s per step"
    rows = [["device, torch threads", f"{device}, {args.threads}"],
            ["completions per second (sampling, scoring and update)", bench["completions_per_s"]],
            ["tokens per second", bench["tokens_per_s"]],
            ["share of the time in generation", f"{bench['generation_share']:.0%}"],
            ["seconds per update", bench["seconds_per_update"]],
            [f"our sampling loop, {batches}, with scoring: seconds", bench["own_loop_generate_s"]],
            [f"model.generate, {batches}: seconds", bench["hf_generate_s"]],
            ["trl", trl]]
    return {"header": ["the chapter's RL step", "measured"], "rows": rows}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    rl = lm_world.chapter_lm_args(grpo.Args, args)
    print(f"05 study: throughput; policy {info['path']}, device {device}")
    bench = benchmark(initial, tokenizer, rl, args, device)
    bench["tables"] = {"throughput": throughput_table(bench, args, device)}
    wall = time.time() - start
    common.write_results(out, args, wall, bench, [], chapter_args=dataclasses.asdict(rl))
    print(common.format_table(bench["tables"]["throughput"]["rows"], bench["tables"]["throughput"]["header"]))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": bench, "claims": []}


if __name__ == "__main__":
    common.run_script(main, Args)
