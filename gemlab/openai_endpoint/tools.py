"""Tools for agent harnesses: OpenAI's ``tools`` rendered into the prompt, tool calls parsed back.

Rendering follows the served model's own chat template: a template that takes ``tools`` (Qwen2.5
and Qwen3, Llama 3.1+, Mistral, ... on Hugging Face) gets them through ``apply_chat_template(...,
tools=...)`` with assistant ``tool_calls`` and ``tool`` messages as transformers expects. A
template that does not mention tools (gemlab's tiny models and SmolLM2-135M-Instruct: plain
ChatML) gets the Hermes/Qwen convention written into the messages themselves: a ``# Tools``
block with ``<tools>...</tools>`` in the system message, earlier calls as
``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` in the assistant's text, results as
``<tool_response>...</tool_response>`` in a user turn (what Qwen2.5's template renders).

Parsing reads ``<tool_call>{json}</tool_call>`` blocks (Hermes, Qwen2.5, Qwen3, and the tiny
models' ``<tool_call>`` tokens). Other formats (Llama's bare JSON, Mistral's ``[TOOL_CALLS]``,
gpt-oss's channels) stay in ``content``. A block that is not a JSON object with a string
``name`` leaves the whole reply as text: a malformed call is the model's answer, not a call.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from gemlab.openai_endpoint.schemas import ChatCompletionRequest, ChatMessage, OpenAIError

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

HERMES_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": '
    '<args-json-object>}}\n</tool_call>'
)


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a ``tools`` list itself."""
    return "tools" in (getattr(tokenizer, "chat_template", None) or "")


def offered_tools(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The tool definitions to show the model: all of them, none for ``tool_choice="none"``, or
    the one function a named ``tool_choice`` asks for."""
    tools = [tool.model_dump(exclude_none=True) for tool in request.tools or []]
    choice = request.tool_choice
    if choice is None or choice in ("auto", "required"):
        return tools
    if choice == "none":
        return []
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    named = [tool for tool in tools if tool["function"]["name"] == name]
    if not named:
        raise OpenAIError(400, f"tool_choice names function {name!r}, which is not in tools", param="tool_choice")
    return named


def _arguments(raw: str) -> Any:
    """A call's arguments as an object where they are JSON (templates print objects), else the text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def render_chat(request: ChatCompletionRequest, tokenizer: Any) -> tuple[str, list[dict[str, Any]]]:
    """The prompt text of the conversation and its tools in the model's template, ready for the
    reply; and the messages as rendered (for the recorder)."""
    if not getattr(tokenizer, "chat_template", None):
        raise OpenAIError(400, "this model has no chat template; use /v1/completions", param="messages")
    tools = offered_tools(request)
    if template_takes_tools(tokenizer):
        messages = [_hf_message(m) for m in request.messages]
        text = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False)
    else:
        messages = _hermes_messages(request.messages, tools)
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return text, messages


def _hf_message(message: ChatMessage) -> dict[str, Any]:
    """One message as transformers' tool-aware templates read it."""
    out: dict[str, Any] = {"role": message.role, "content": message.text()}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.role == "tool":
        out.update({k: v for k, v in (("tool_call_id", message.tool_call_id), ("name", message.name)) if v})
    return out


def _hermes_messages(messages: list[ChatMessage], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Plain role/content messages carrying tools, calls and results as Qwen2.5's template writes them."""
    out: list[dict[str, str]] = []
    for message in messages:
        content = message.text()
        if message.tool_calls:
            calls = [
                "<tool_call>\n"
                + json.dumps({"name": c.function.name, "arguments": _arguments(c.function.arguments)})
                + "\n</tool_call>"
                for c in message.tool_calls
            ]
            content = "\n".join(([content] if content else []) + calls)
        if message.role == "tool":
            response = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1]["content"] += "\n" + response  # consecutive results share one turn
            else:
                out.append({"role": "user", "content": response})
            continue
        out.append({"role": message.role, "content": content})
    if tools:
        block = HERMES_TOOLS.format(tools="\n".join(json.dumps(tool) for tool in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def parse_tool_calls(raw: str, special_tokens: list[str]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a reply decoded with its special tokens: the text before the
    first ``<tool_call>`` (special tokens removed; ``None`` if empty) and the calls in OpenAI's
    shape. No calls (and ``content`` the whole visible text) when a block is not a valid call."""
    blocks = list(TOOL_CALL.finditer(raw))
    calls = []
    for block in blocks:
        try:
            call = json.loads(block.group(1))
        except ValueError:
            return None, []
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None, []
        arguments = call.get("arguments", call.get("parameters", {}))
        calls.append({
            "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call["name"], "arguments": arguments if isinstance(arguments,
            str) else json.dumps(arguments)},
        })  # fmt: skip
    if not calls:
        return None, []
    content = raw[: blocks[0].start()]
    for token in special_tokens:
        content = content.replace(token, "")
    return content.strip() or None, calls
