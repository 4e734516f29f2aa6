"""What agent harnesses send (issue 19): ``tools`` / ``tool_choice`` rendered into the prompt the
way the model's template does it, tool calls parsed back into ``tool_calls``, and ``top_logprobs``
in OpenAI's shape, all through the official ``openai`` client on loopback."""

from __future__ import annotations

import copy
import json
from typing import Any

import openai
import pytest

from gemlab.openai_endpoint.tools import parse_tool_calls
from tests.serve.conftest import MODEL, ScriptedSampler, serve

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'

# A tool-aware template in the style of Qwen2.5's (tools in the system turn, calls as <tool_call> JSON)
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTOOLS:{% for tool in tools %}{{ tool | tojson }}{% endfor "
    "%}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt "
    "%}<|im_start|>assistant\n{% endif %}"
)


def prompt_text(reply: Any, sampler: Any) -> str:
    return sampler.get_tokenizer().decode(reply.model_extra["prompt_token_ids"], skip_special_tokens=False)


def client_of(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="local", max_retries=0)


def test_a_plain_chatml_template_gets_the_hermes_tools_block(sampler) -> None:
    with serve(sampler) as server:
        reply = client_of(server).chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": "Be brief."}, *ASK],
            tools=[WEATHER, CLOCK],
            max_tokens=4,
            seed=0,
        )
    text = prompt_text(reply, sampler)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(WEATHER) in system and json.dumps(CLOCK) in system and "<tool_call>" in system
    assert text.count("<|im_start|>system") == 1 and text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("tool_choice", "shown"),
    [
        ("none", []),
        ("auto", ["get_weather", "get_time"]),
        ("required", ["get_weather", "get_time"]),
        ({"type": "function", "function": {"name": "get_time"}}, ["get_time"]),
    ],
)
def test_tool_choice_decides_which_tools_the_model_sees(sampler, tool_choice, shown) -> None:
    with serve(sampler) as server:
        reply = client_of(server).chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER, CLOCK], tool_choice=tool_choice, max_tokens=2, seed=0
        )
    text = prompt_text(reply, sampler)
    assert [name for name in ("get_weather", "get_time") if f'"name": "{name}"' in text] == shown


def test_a_named_tool_choice_must_be_one_of_the_tools(sampler) -> None:
    with serve(sampler) as server, pytest.raises(openai.BadRequestError, match="not in tools"):
        client_of(server).chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}
        )


def test_a_tool_aware_template_renders_tools_and_history_itself(sampler) -> None:
    tokenizer = copy.deepcopy(sampler.get_tokenizer())
    tokenizer.chat_template = TOOL_TEMPLATE
    scripted = ScriptedSampler(sampler, "It is sunny.<|im_end|>")
    scripted.get_tokenizer = lambda: tokenizer
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    with serve(scripted) as server:
        reply = client_of(server).chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    text = tokenizer.decode(reply.model_extra["prompt_token_ids"], skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nTOOLS:" + json.dumps(WEATHER) + "<|im_end|>")
    # arguments as an object
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' in text
    assert "<|im_start|>tool\nsunny<|im_end|>" in text
    assert reply.choices[0].message.content == "It is sunny." and reply.choices[0].finish_reason == "stop"


def test_a_tool_call_comes_back_as_tool_calls(sampler) -> None:
    scripted = ScriptedSampler(sampler, "Let me look.\n" + CALL)
    with serve(scripted) as server:
        reply = client_of(server).chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER])
        plain = client_of(server).chat.completions.create(model=MODEL, messages=ASK)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    # no tools offered: text
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "stop"


def test_a_streamed_tool_call_arrives_as_tool_call_deltas(sampler) -> None:
    with serve(ScriptedSampler(sampler, CALL)) as server:
        chunks = list(
            client_of(server).chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], stream=True)
        )
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name, json.loads(d.function.arguments)) for d in deltas] == [
        (0, "get_weather", {"city": "Paris"})
    ]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


@pytest.mark.parametrize(
    ("raw", "content", "calls"),
    [
        (CALL, None, [("get_weather", {"city": "Paris"})]),
        (
            'ok <tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call>\n<tool_call>{"name": "b"}</tool_call>',
            "ok",
            [("a", {"x": 1}), ("b", {})],
        ),
        ("<tool_call>{not json}</tool_call>", None, []),
        ('<tool_call>{"arguments": {}}</tool_call>', None, []),
        ('<tool_call>{"name": "a"', None, []),
        ("no call here<|im_end|>", None, []),
    ],
    ids=["one-call", "two-calls-and-parameters", "bad-json", "no-name", "unclosed", "plain-text"],
)
def test_parse_tool_calls(raw: str, content: str | None, calls: list) -> None:
    got_content, got_calls = parse_tool_calls(raw, ["<|im_end|>"])
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got_calls] == calls


def test_an_agent_that_always_sends_its_tools_plays_several_turns(sampler) -> None:
    """Like an agent framework: the same tool list on every request, the history growing with the
    assistant's replies, its calls and the tool results; every request is served."""
    with serve(sampler) as server:
        client = client_of(server)
        messages: list[Any] = [{"role": "system", "content": "You can use tools."}, *ASK]
        for turn in range(3):
            reply = client.chat.completions.create(
                model=MODEL, messages=messages, tools=[WEATHER, CLOCK], tool_choice="auto", max_tokens=12, seed=turn
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            messages.append(
                {"role": "tool", "tool_call_id": f"call_{turn}", "content": "sunny"}
                if message.tool_calls
                else {"role": "user", "content": "And tomorrow?"}
            )
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": f"c{turn}", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": "12:00"})
            assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert "<tool_response>\n12:00\n</tool_response>" in prompt_text(reply, sampler)


def test_top_logprobs_come_from_the_samplers_top_k_in_openai_shape(sampler) -> None:
    scripted = ScriptedSampler(sampler, "Paris<|im_end|>")
    tokenizer = sampler.get_tokenizer()
    with serve(scripted) as server:
        reply = client_of(server).chat.completions.create(model=MODEL, messages=ASK, logprobs=True, top_logprobs=3)
        completion = client_of(server).completions.create(model=MODEL, prompt="Paris is", logprobs=2)
    assert scripted.calls[0]["topk"] == 3 and scripted.calls[1]["topk"] == 2
    tokens = tokenizer.encode("Paris<|im_end|>", add_special_tokens=False)
    for entry, token in zip(reply.choices[0].logprobs.content, tokens, strict=True):
        expected = [tokenizer.decode([token + j]) for j in range(3)]
        assert [t.token for t in entry.top_logprobs] == expected
        assert [t.logprob for t in entry.top_logprobs] == [-0.5, -1.5, -2.5]
        assert entry.top_logprobs[0].bytes == list(expected[0].encode())
    assert completion.choices[0].logprobs.top_logprobs[0] == {
        tokenizer.decode([tokens[0]]): -0.5,
        tokenizer.decode([tokens[0] + 1]): -1.5,
    }


def test_the_local_samplers_top_logprobs_through_the_openai_client(sampler) -> None:
    """Greedy: 3 alternatives per token, most likely first, and the first is the chosen token with
    its logprob. Sampled: the chosen token is never more likely than the first alternative."""
    with serve(sampler) as server:
        client = client_of(server)
        greedy = client.chat.completions.create(
            model=MODEL, messages=ASK, logprobs=True, top_logprobs=3, max_tokens=6, temperature=0
        )
        drawn = client.chat.completions.create(
            model=MODEL, messages=ASK, logprobs=True, top_logprobs=3, max_tokens=6, seed=1
        )
    content = greedy.choices[0].logprobs.content
    assert content and all(len(entry.top_logprobs) == 3 for entry in content)
    for entry in content:
        first = entry.top_logprobs[0]
        assert (first.token, first.logprob) == (entry.token, pytest.approx(entry.logprob, abs=1e-6))
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
    for entry in drawn.choices[0].logprobs.content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= entry.top_logprobs[0].logprob + 1e-6
