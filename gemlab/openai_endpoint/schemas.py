"""The request bodies the endpoint accepts (OpenAI's fields that a Tinker sampler can honour), and
OpenAI's error format.

Fields OpenAI defines but a sampler cannot honour (response formats, penalties, logit bias) are
refused with a 400 naming the field, rather than silently ignored; fields this module does not
know are ignored, as OpenAI-compatible servers commonly do. Every string in a body must be valid
Unicode: a lone surrogate (JSON ``"\\ud800"``) is a 400, not a tokenizer crash.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class OpenAIError(Exception):
    """An error answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _check_unicode(value: Any, where: str = "") -> None:
    """Raise ``ValueError`` naming the first string in ``value`` that is not valid Unicode."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"text must be valid Unicode; {where or 'a string'} holds {value[exc.start]!r} (a lone "
                f"surrogate) at character {exc.start}"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode(key, where)
            _check_unicode(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_unicode(item, f"{where}.{index}")


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    """Sampling fields shared by both endpoints."""

    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=64)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        _check_unicode(data)
        return data

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: str | list[str] | None) -> list[str]:
        items = [value] if isinstance(value, str) else list(value or [])
        if any(not s for s in items) or len(items) > 4:
            raise ValueError("stop must be up to 4 non-empty strings")
        return items

    def refuse_unsupported(self) -> None:
        """400 for OpenAI features a Tinker sampler does not have."""
        if self.frequency_penalty or self.presence_penalty:
            raise OpenAIError(
                400, "frequency_penalty and presence_penalty are not supported (use 0)", param="frequency_penalty"
            )
        if self.logit_bias:
            raise OpenAIError(400, "logit_bias is not supported", param="logit_bias")


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    """One entry of ``tools``: a function the model may call."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class FunctionCall(BaseModel):
    name: str
    arguments: str = "{}"


class ToolCall(BaseModel):
    """A call the assistant made earlier in the conversation."""

    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text; content parts must all be text."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise OpenAIError(400, "only text content parts are supported", param="messages")
            parts.append(part["text"])
        return "".join(parts)


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None

    @property
    def top_k(self) -> int:
        """How many top alternatives to report per sampled token (0: none)."""
        return (self.top_logprobs or 0) if self.logprobs else 0

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.top_logprobs and not self.logprobs:
            raise OpenAIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
        if self.response_format and self.response_format.get("type") != "text":
            raise OpenAIError(400, "only response_format {'type': 'text'} is supported", param="response_format")

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Common):
    """``POST /v1/completions``: one prompt, as text or token ids."""

    prompt: str | list[int] | list[str]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for completions
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str):
            if len(self.prompt) != 1:
                raise OpenAIError(
                    400, "send one prompt per request (a list of prompts is not supported)", param="prompt"
                )
        if self.echo or self.suffix:
            raise OpenAIError(400, "echo and suffix are not supported", param="echo" if self.echo else "suffix")

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    @property
    def top_k(self) -> int:
        return self.logprobs or 0
