"""The few calls of a vLLM server the check makes (the same ones laminar's TypeScript vLLM client
makes: src/rollout-agent/vllm-client.ts), over the standard library's HTTP."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any, Optional

from outcome import CheckFailed


class VllmHttp:
    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url.rstrip("/"), model

    def call(self, path: str, body: Optional[dict[str, Any]] = None, method: str = "POST", timeout: float = 600.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as err:
            raise CheckFailed(f"{method} {path}: HTTP {err.code}: {err.read().decode(errors='replace')[:500]}") from None
        return json.loads(text) if text else None

    def rpc(self, method: str, *args: Any, timeout: float = 600.0) -> list[Any]:
        """``/collective_rpc`` (dev mode) on laminar's worker extension: one answer per worker."""
        body = self.call("/collective_rpc", {"method": method, "args": list(args), "timeout": timeout}, timeout=timeout + 5)
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list) or not results:
            raise CheckFailed(f"collective_rpc {method} answered {body!r} (is VLLM_SERVER_DEV_MODE=1 set?)")
        return results

    def greedy(self, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
        """A greedy completion of token ids: the tokens and their logprobs."""
        body = self.call(
            "/v1/completions",
            {
                "model": self.model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "logprobs": 0,
                "return_tokens_as_token_ids": True,
                "repetition_penalty": 1,
            },
        )
        logprobs = body["choices"][0]["logprobs"]
        tokens = []
        for text in logprobs["tokens"]:
            match = re.fullmatch(r"token_id:(\d+)", text)
            if match is None:
                raise CheckFailed(f"a token is not 'token_id:N' (return_tokens_as_token_ids ignored?): {text!r}")
            tokens.append(int(match.group(1)))
        return tokens, [float(v) for v in logprobs["token_logprobs"]]
