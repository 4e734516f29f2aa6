"""One attendee's program for the HTTP benchmarks: plain ``tinker`` (no gemlab import), ``STEPS``
RL steps on gemlab/tiny (save a sampler, sample 8 completions, importance-sampling
``forward_backward`` with +-1 advantages, AdamW step), then optionally a checkpoint.

    python benchmarks/tinker_rl_client.py STEPS [save|-] [RANK]

Prints one JSON line: the seconds each step took."""

import json
import sys
import time

import tinker
from tinker import types

steps = int(sys.argv[1])
save = len(sys.argv) > 2 and sys.argv[2] == "save"
rank = int(sys.argv[3]) if len(sys.argv) > 3 else 4
service = tinker.ServiceClient()
training = service.create_lora_training_client(base_model="gemlab/tiny", rank=rank).result()
prompt = [1, 5, 9, 13, 17, 21, 25, 29]
times = []
for _ in range(steps):
    start = time.perf_counter()
    sampler = training.save_weights_and_get_sampling_client()
    result = sampler.sample(types.ModelInput.from_ints(prompt), 8, types.SamplingParams(max_tokens=8)).result()
    datums = []
    for i, seq in enumerate(result.sequences):
        tokens, n = prompt + list(seq.tokens), len(prompt) - 1
        datums.append(types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "logprobs": [0.0] * n + list(seq.logprobs),
                            "advantages": [0.0] * n + [1.0 if i % 2 else -1.0] * len(seq.tokens)}))  # fmt: skip
    training.forward_backward(datums, "importance_sampling").result()
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    times.append(time.perf_counter() - start)
if save:
    training.save_state("end").result()
    training.save_weights_for_sampler("end-sampler").result()
service.close("success").result()
print(json.dumps({"times": times}))
