"""The request bodies the endpoint accepts (OpenAI's fields that a Tinker sampler can honour), and
OpenAI's error format.

Fields OpenAI defines but a sampler cannot honour (tools, response formats, penalties, top
logprobs) are refused with a 400 naming the field, rather than silently ignored; fields this
module does not know are ignored, as OpenAI-compatible servers commonly do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


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
            raise OpenAIError(400, "frequency_penalty and presence_penalty are not supported (use 0)", param="frequency_penalty")
        if self.logit_bias:
            raise OpenAIError(400, "logit_bias is not supported", param="logit_bias")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None

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
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.top_logprobs:
            raise OpenAIError(400, "top_logprobs is not supported: only the sampled token's logprob is returned", param="top_logprobs")
        if self.tools:
            raise OpenAIError(400, "tools are not supported", param="tools")
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
                raise OpenAIError(400, "send one prompt per request (a list of prompts is not supported)", param="prompt")
        if self.echo or self.suffix:
            raise OpenAIError(400, "echo and suffix are not supported", param="echo" if self.echo else "suffix")

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens
