"""statekernel.models: models for `Agent` that talk to real LLM APIs.

A model is any async callable `(InferenceRequest) -> InferenceResponse`; a model that
streams also has `streams = True` and `stream(request)`, an async iterator of text pieces
(`str`) ending with the `InferenceResponse`. The adapters here map the kernel's messages,
tool specs and tool calls to a provider's wire format and back, one provider per module.

- `OpenAIChatModel`: the OpenAI Chat Completions format, which vLLM, Ollama, LM Studio and
  LiteLLM proxies speak too (`base_url=...`). Needs the extra `statekernel[openai]`.
"""

from __future__ import annotations

from .._public import publish
from ._openai import OpenAIChatModel

__all__ = ["OpenAIChatModel"]

publish(__name__, globals(), __all__)
del publish
