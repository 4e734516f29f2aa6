"""An unmodified Tinker-style script runs under ``python -m gemlab.local``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    '''
    """A GEM-style Tinker RL loop: nothing in it knows about gemlab."""
    import asyncio
    import sys

    import tinker
    from tinker import types

    MODEL = "Qwen/Qwen3-4B-Instruct-2507"


    async def main(steps: int) -> None:
        service_client = tinker.ServiceClient()
        training_client = await service_client.create_lora_training_client_async(base_model=MODEL, rank=8, seed=0)
        tokenizer = training_client.get_tokenizer()
        prompt = tokenizer.encode("<|im_start|>user\\nGuess a number.<|im_end|>\\n<|im_start|>assistant\\n")
        for step in range(steps):
            path = training_client.save_weights_for_sampler(name=f"{step:06d}").result().path
            sampling_client = service_client.create_sampling_client(model_path=path)
            params = types.SamplingParams(max_tokens=8, temperature=1.0, stop=[tokenizer.eos_token_id])
            responses = await asyncio.gather(
                *[
                    sampling_client.sample_async(
                        prompt=types.ModelInput.from_ints(prompt), num_samples=1, sampling_params=params
                    )
                    for _ in range(8)
                ]
            )
            datums = []
            for i, response in enumerate(responses):
                seq = response.sequences[0]
                tokens = prompt + seq.tokens
                n = len(prompt) - 1
                datums.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={
                            "target_tokens": tokens[1:],
                            "logprobs": [0.0] * n + list(seq.logprobs),
                            "advantages": [0.0] * n + [1.0 if i % 2 else -1.0] * len(seq.tokens),
                        },
                    )
                )
            fwd_bwd = training_client.forward_backward(datums, "importance_sampling")
            optim = training_client.optim_step(types.AdamParams(learning_rate=1e-3))
            result = fwd_bwd.result()
            optim.result()
            print(f"step {step} loss {result.metrics['loss:sum']:.3f}")
        saved = await (await training_client.save_state_async(name="final")).result_async()
        print("saved", saved.path)
        print("capabilities", [m.model_name for m in service_client.get_server_capabilities().supported_models])


    if __name__ == "__main__":
        asyncio.run(main(int(sys.argv[1])))
    '''
)


def test_tinker_script_runs_unmodified(tmp_path: Path):
    script = tmp_path / "train_tinker.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "GEMLAB_LOCAL_DIR": str(tmp_path / "checkpoints"), "TINKER_API_KEY": ""}
    env.pop("GEMLAB_LOCAL_MODEL", None)
    done = subprocess.run(
        [sys.executable, "-m", "gemlab.local", str(script), "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split(" loss")[0] for line in lines[:2]] == ["step 0", "step 1"]
    saved = next(line for line in lines if line.startswith("saved "))
    run_id = saved.split("local://", 1)[1].split("/")[0]
    assert (tmp_path / "checkpoints" / run_id / "weights" / "final" / "optimizer.pt").is_file()
    assert "gemlab/tiny" in lines[-1]
    mapping = [line for line in done.stderr.splitlines() if "Qwen/Qwen3-4B-Instruct-2507" in line]
    assert len(mapping) == 1 and "gemlab/tiny" in mapping[0]
