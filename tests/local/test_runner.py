"""An unmodified Tinker-style script runs under ``python -m tinker_emulator``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import gem_train

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



def _run_gemlab_local(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m tinker_emulator ARGS`` in ``tmp_path`` (checkpoints under it, Tinker names mapped to
    the default local model, ``env`` added); it must succeed."""
    environment = {**os.environ, "GEMLAB_LOCAL_DIR": str(tmp_path / "checkpoints"), **env}
    environment.pop("GEMLAB_LOCAL_MODEL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tinker_emulator", *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_tinker_script_runs_unmodified(tmp_path: Path):
    script = tmp_path / "train_tinker.py"
    script.write_text(SCRIPT)
    done = _run_gemlab_local(tmp_path, str(script), "2", TINKER_API_KEY="")
    lines = done.stdout.splitlines()
    assert [line.split(" loss")[0] for line in lines[:2]] == ["step 0", "step 1"]
    saved = next(line for line in lines if line.startswith("saved "))
    run_id = saved.split("local://", 1)[1].split("/")[0]
    assert (tmp_path / "checkpoints" / run_id / "weights" / "final" / "optimizer.pt").is_file()
    assert "gemlab/tiny" in lines[-1]
    mapping = [line for line in done.stderr.splitlines() if "Qwen/Qwen3-4B-Instruct-2507" in line]
    assert len(mapping) == 1 and "gemlab/tiny" in mapping[0]


@pytest.mark.slow
def test_gems_tinker_train_py_unchanged_loads_its_tokenizer_by_tinker_name(tmp_path: Path):
    """GEM's examples/train_tinker/tinker_train.py as published calls AutoTokenizer.from_pretrained(model_name)
    with a Tinker model name: offline, it gets the training client's tokenizer, and the sampler agrees
    with the learner."""
    assert gem_train.script_is_upstreams(), "tests/fixtures/gem/tinker_train.py differs from GEM's file"
    done = _run_gemlab_local(tmp_path, str(gem_train.SCRIPT), *gem_train.ARGS, TINKER_API_KEY="", **gem_train.ENV)
    steps = gem_train.step_metrics(done.stdout)
    assert [row["step"] for row in steps] == [0, 1]
    assert all(abs(row["train/kl_sample_train_v1"]) < 1e-4 for row in steps)
    assert done.stderr.count(f"{gem_train.MODEL} is not available locally; using gemlab/tiny-chat") == 1


MODULE = textwrap.dedent(
    '''
    """Run as python -m tinker_job: what a Tinker script reaches is local."""
    import sys

    import tinker
    from transformers import AutoTokenizer

    from tinker_emulator import TINY_CHAT
    from tinker_emulator.models import load_tokenizer

    assert __name__ == "__main__" and sys.argv[1:] == ["--flag", "x"], sys.argv
    service = tinker.ServiceClient()
    assert AutoTokenizer.from_pretrained("Qwen/Qwen3-4B-Instruct-2507") is load_tokenizer(TINY_CHAT)
    sampler = service.create_sampling_client(base_model="Qwen/Qwen3-4B-Instruct-2507").result()
    assert tinker.SamplingClient.from_sampler_handle(sampler.get_sampler_handle()) is sampler
    training = service.create_lora_training_client(base_model="Qwen/Qwen3-4B-Instruct-2507", rank=4).result()
    path = training.save_state("only").result().path
    rest = tinker.RestClient()
    assert [c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints] == [path]
    assert service.create_rest_client().get_training_run_by_tinker_path(path).result().lora_rank == 4
    print("module ok", type(service).__name__, type(rest).__name__)
    '''
)


@pytest.mark.slow
def test_runner_runs_a_module_with_tinker_patched(tmp_path: Path):
    (tmp_path / "tinker_job.py").write_text(MODULE)
    done = _run_gemlab_local(tmp_path, "-m", "tinker_job", "--flag", "x", HF_HUB_OFFLINE="1")
    assert done.stdout.strip().splitlines()[-1] == "module ok LocalServiceClient LocalRestClient"


@pytest.mark.parametrize("module", ["no_such_module_here", "tinker.no_such_part"])
def test_runner_refuses_a_missing_module_in_one_line(module: str):
    from tinker_emulator.runner import main

    with pytest.raises(SystemExit) as exited:
        main(["-m", module])
    assert exited.value.code == f"tinker_emulator: no module named {module!r}"


def test_import_runs_before_the_program_and_a_missing_one_is_refused_in_one_line(tmp_path: Path, monkeypatch) -> None:
    from tinker_emulator.runner import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    # what the module takes from tinker at import is already the local backend's
    (tmp_path / "registers.py").write_text(
        "import builtins\nfrom tinker import ServiceClient\nbuiltins.registered_by_import = ServiceClient.__name__\n"
    )
    (tmp_path / "program.py").write_text("import builtins\nprint('program sees', builtins.registered_by_import)\n")
    with pytest.raises(SystemExit) as exited:
        main(["--import", "no_such_module_here", str(tmp_path / "program.py")])
    assert exited.value.code == "tinker_emulator: --import no_such_module_here: no module named 'no_such_module_here'"
    done = subprocess.run(
        [sys.executable, "-m", "tinker_emulator", "--import", "registers", "program.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.stdout.strip().splitlines()[-1] == "program sees LocalServiceClient", done.stderr[-2000:]


def test_patch_tinker_undoes_everything(monkeypatch):
    monkeypatch.delenv("GEMLAB_LOCAL_MODEL", raising=False)
    import tinker
    from transformers import AutoTokenizer

    from tinker_emulator import patch_tinker

    before = (tinker.ServiceClient, tinker.RestClient, AutoTokenizer.__dict__["from_pretrained"])
    handle = tinker.SamplingClient.__dict__["from_sampler_handle"]
    undo = patch_tinker()
    assert tinker.ServiceClient is not before[0] and tinker.RestClient is not before[1]
    assert os.environ["GEMLAB_LOCAL_MODEL"] == "gemlab/tiny-chat"  # a Tinker program's model names run on the stand-in
    undo()
    assert (tinker.ServiceClient, tinker.RestClient, AutoTokenizer.__dict__["from_pretrained"]) == before
    assert "GEMLAB_LOCAL_MODEL" not in os.environ
    assert tinker.SamplingClient.__dict__["from_sampler_handle"] is handle
