"""The reference engine's HTTP server (aiohttp): the SGLang subset of docs/reference/engine-http.md.

Handlers parse and answer; the state and the batching are the scheduler's. The runner cancels a
handler whose client disconnects (aiohttp's `handler_cancellation`), which aborts its request and
frees its KV cache, as SGLang does. Control operations (pause, weight updates) are shielded from
that cancellation: a caller that goes away does not leave them half done.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any, Optional

from aiohttp import web

from . import metrics
from .adapters import AdapterRefused, AdapterRegistry
from .options import EngineOptions
from .chat_template import chat_template_ids, parse_messages, tokenize_text, vocabulary_of
from .protocol import (
    SSE_DONE,
    InvalidRequest,
    SchemaError,
    error_body,
    optional_bool,
    optional_str,
    parse_generate,
    parse_json_object,
    schema_error_body,
    sse_event,
)
from .scheduler import Scheduler, Sequence

log = logging.getLogger("laminar.testing.engine")

ENGINE_VERSION = "laminar-reference-0.1.0"
"""`version` of /get_server_info."""

NO_WEIGHTS = "The reference engine has no weights yet: POST /update_weights_from_disk first (or start it with --model-path or --random-init)."


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status)


def _schema_error(err: SchemaError) -> web.Response:
    return _json(schema_error_body(str(err)), status=400)


class EngineServer:
    """The routes; `app()` builds the aiohttp application."""

    def __init__(self, scheduler: Scheduler, options: EngineOptions) -> None:
        self.scheduler = scheduler
        self.options = options
        self.adapters = AdapterRegistry(options.max_loras)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_fastapi_errors])
        app.add_routes(
            [
                web.post("/generate", self.generate),
                web.put("/generate", self.generate),
                web.post("/abort_request", self.abort_request),
                web.post("/pause_generation", self.pause_generation),
                web.post("/continue_generation", self.continue_generation),
                web.post("/update_weights_from_disk", self.update_weights_from_disk),
                web.post("/load_lora_adapter", self.load_lora_adapter),
                web.post("/unload_lora_adapter", self.unload_lora_adapter),
                web.get("/get_weight_version", self.get_weight_version),
                web.get("/health", self.health),
                web.get("/health_generate", self.health_generate),
                web.get("/get_model_info", self.get_model_info),
                web.get("/get_server_info", self.get_server_info),
                web.post("/tokenize", self.tokenize),
                web.get("/metrics", self.metrics),
                web.get("/slow_down", self.slow_down),
                web.post("/slow_down", self.slow_down),
            ]
        )
        return app

    # ---- /generate -----------------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = parse_json_object(await request.read())
        except SchemaError as err:
            return _schema_error(err)
        config = self.scheduler.config
        if config is None:
            return _json(error_body(NO_WEIGHTS), status=503)
        adapter = None
        try:
            parsed = parse_generate(body, config.vocab_size)
            adapter = self.adapters.acquire(parsed.lora_path)
            seq = self.scheduler.create(parsed, adapter)
        except SchemaError as err:
            self.adapters.release(adapter)
            return _schema_error(err)
        except InvalidRequest as err:
            self.adapters.release(adapter)
            if body.get("stream") is True:
                return await self._stream_error(request, str(err))
            return _json(error_body(str(err)), status=400)
        try:
            if parsed.stream:
                return await self._stream(request, seq)
            return await self._whole(seq)
        finally:
            if not seq.finished:
                self.scheduler.abort(seq.rid, "The client disconnected.")
            self.adapters.release(adapter)

    def chunk(self, seq: Sequence) -> dict[str, Any]:
        """The response object of a request so far (cumulative, as SGLang's default streaming)."""
        meta: dict[str, Any] = {
            "id": seq.rid,
            "finish_reason": seq.finish_reason,
            "prompt_tokens": len(seq.input_ids),
            "weight_version": seq.weight_version,
            "num_retractions": seq.num_retractions,
        }
        if seq.return_logprob:
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [[lp, token, None] for lp, token in zip(seq.logprobs, seq.output_ids)]
        meta["reasoning_tokens"] = 0
        meta["completion_tokens"] = len(seq.output_ids)
        meta["cached_tokens"] = seq.cached_tokens
        if seq.finished_at is not None:
            meta["e2e_latency"] = seq.finished_at - seq.created
        return {"output_ids": list(seq.output_ids), "meta_info": meta}

    async def _stream(self, request: web.Request, seq: Sequence) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        await self.scheduler.enter(seq)
        interval = self.options.stream_interval
        written = 0  # tokens in the last chunk written
        try:
            while True:
                await seq.changed.wait()
                seq.changed.clear()
                last = seq.finished
                # As SGLang's --stream-interval: a chunk once the first token is out, then every
                # `interval` tokens, and the last. Whatever accumulated since the last write goes
                # out as one chunk (a slow reader gets fewer, larger chunks, as with SGLang).
                n = len(seq.output_ids)
                if not last and written > 0 and n - written < interval:
                    continue
                written = n
                await response.write(sse_event(self.chunk(seq)))
                if last:
                    break
            await response.write(SSE_DONE)
            await response.write_eof()
        except ConnectionError:
            log.debug("client of %s went away", seq.rid)
        return response

    async def _whole(self, seq: Sequence) -> web.Response:
        await self.scheduler.enter(seq)
        while not seq.finished:
            await seq.changed.wait()
            seq.changed.clear()
        return _json(self.chunk(seq))

    async def _stream_error(self, request: web.Request, message: str) -> web.StreamResponse:
        """A refused streamed request, as upstream: 200, one error event, then [DONE]."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(sse_event(error_body(message)))
        await response.write(SSE_DONE)
        await response.write_eof()
        return response

    # ---- control -------------------------------------------------------------------------------

    async def abort_request(self, request: web.Request) -> web.Response:
        try:
            body = parse_json_object(await request.read(), allow_empty=True)
            rid = optional_str(body, "rid")
            abort_all = optional_bool(body, "abort_all", False)
        except SchemaError as err:
            return _schema_error(err)
        if abort_all:
            self.scheduler.abort_all("Aborted by AbortReq.", include_held=True)
        elif rid:
            self.scheduler.abort(rid)
        return web.Response(status=200)

    async def pause_generation(self, request: web.Request) -> web.Response:
        try:
            body = parse_json_object(await request.read(), allow_empty=True)
            mode = optional_str(body, "mode") or "abort"
            if mode not in ("abort", "retract", "in_place"):
                raise SchemaError(f"Invalid mode: {mode!r}. Expected one of ['abort', 'retract', 'in_place'].")
        except SchemaError as err:
            return _schema_error(err)
        await asyncio.shield(self.scheduler.pause(mode))
        return _json({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, request: web.Request) -> web.Response:
        try:
            parse_json_object(await request.read(), allow_empty=True)
        except SchemaError as err:
            return _schema_error(err)
        self.scheduler.resume()
        return _json({"message": "Generation continued successfully.", "status": "ok"})

    async def update_weights_from_disk(self, request: web.Request) -> web.Response:
        try:
            body = parse_json_object(await request.read())
            model_path = optional_str(body, "model_path")
            if model_path is None:
                raise SchemaError("model_path: field required (a string)")
            weight_version = optional_str(body, "weight_version")
            load_format = optional_str(body, "load_format")
            abort_all = optional_bool(body, "abort_all_requests", False)
        except SchemaError as err:
            return _schema_error(err)
        update = asyncio.ensure_future(self.scheduler.update_weights(model_path, weight_version, load_format, abort_all))
        success, message = await asyncio.shield(update)
        return _json({"success": success, "message": message, "num_paused_requests": 0}, status=200 if success else 400)

    async def load_lora_adapter(self, request: web.Request) -> web.Response:
        """SGLang's `{lora_name, lora_path}` → `{success, error_message, loaded_adapters}`, 400 when refused."""
        try:
            body = parse_json_object(await request.read())
            name, path = optional_str(body, "lora_name"), optional_str(body, "lora_path")
            if not name or not path:
                raise SchemaError("lora_name and lora_path: both fields are required (strings)")
            optional_bool(body, "pinned", False)  # accepted; nothing is ever evicted here
        except SchemaError as err:
            return _schema_error(err)
        load = self.adapters.load(name, path, self.scheduler.model, _in_thread)
        return await self._adapter_answer(asyncio.ensure_future(load), f"LoRA adapter {name} from {path}")

    async def unload_lora_adapter(self, request: web.Request) -> web.Response:
        """Deferred like SGLang's: the name is refused to new requests at once, the answer comes when
        the requests already using the adapter have finished."""
        try:
            body = parse_json_object(await request.read())
            name = optional_str(body, "lora_name")
            if not name:
                raise SchemaError("lora_name: field required (a string)")
        except SchemaError as err:
            return _schema_error(err)
        return await self._adapter_answer(asyncio.ensure_future(self.adapters.unload(name)), f"unload of LoRA adapter {name}")

    async def _adapter_answer(self, change: "asyncio.Future[None]", what: str) -> web.Response:
        try:
            await asyncio.shield(change)  # a caller that goes away does not leave it half done
        except AdapterRefused as err:
            log.warning("%s refused: %s", what, err)
            return _json({"success": False, "error_message": str(err), "loaded_adapters": None}, status=400)
        log.info("%s done; loaded: %s", what, self.adapters.loaded)
        return _json({"success": True, "error_message": "", "loaded_adapters": self.adapters.loaded})

    async def slow_down(self, request: web.Request) -> web.Response:
        """SGLang's test hook: `{"forward_sleep_time": seconds | null}` makes every step that much slower."""
        try:
            body = parse_json_object(await request.read(), allow_empty=True)
            value = body.get("forward_sleep_time")
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 60):
                raise SchemaError(f"forward_sleep_time must be a number of seconds in [0, 60] or null, got {value!r}")
        except SchemaError as err:
            return _schema_error(err)
        self.scheduler.forward_sleep_time = float(value or 0.0)
        return _json(None)

    # ---- state ---------------------------------------------------------------------------------

    async def get_weight_version(self, request: web.Request) -> web.Response:
        return _json({"weight_version": self.scheduler.weight_version})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def health_generate(self, request: web.Request) -> web.Response:
        ready = self.scheduler.model is not None and not self.scheduler.paused
        return web.Response(status=200 if ready else 503)

    async def get_model_info(self, request: web.Request) -> web.Response:
        return _json(
            {
                "model_path": self.scheduler.model_path,
                "tokenizer_path": None,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": self.scheduler.weight_version,
            }
        )

    async def get_server_info(self, request: web.Request) -> web.Response:
        s = self.scheduler
        config = s.config
        return _json(
            {
                "model_path": s.model_path,
                "served_model_name": self.options.served_model_name,
                "host": self.options.host,
                "port": request.url.port,
                "skip_tokenizer_init": True,
                "enable_metrics": True,
                "enable_deterministic_inference": True,
                "random_seed": self.options.seed,
                "max_running_requests": s.max_running,
                "max_total_num_tokens": s.kv_capacity,
                "disable_radix_cache": s.prefix_cache is None,
                "max_loaded_loras": self.adapters.max_loras,
                "stream_interval": self.options.stream_interval,
                "max_req_input_len": None if config is None else config.max_seq_len - 1,
                "context_length": None if config is None else config.max_seq_len,
                "weight_version": s.weight_version,
                "model_config": None if config is None else config.to_json(),
                "internal_states": [
                    {
                        "last_gen_throughput": s.gen_throughput(),
                        "num_running_reqs": len(s.running),
                        "num_queue_reqs": len(s.waiting),
                        "num_used_tokens": s.kv_used,
                        "paused": s.paused,
                        "pause_mode": s.pause_mode,
                        "weight_update_draining": s.draining,
                        "cache_hit_rate": s.cache_hit_rate(),
                        "num_cached_prefix_tokens": s.cached_prefix_tokens,
                    }
                ],
                "version": ENGINE_VERSION,
            }
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        """The task vocabularies' tokenizer: words named in the vocabulary (`reverse`, `<sep>`,
        `lookup`, ...) or digit runs. `{"prompt": ...}` as SGLang and vLLM; `{"messages": [...]}`
        as vLLM's chat form, through the reference chat template (`chat_template_ids`)."""
        try:
            body = parse_json_object(await request.read())
            prompt = body.get("prompt")
            messages = body.get("messages")
            if messages is not None:
                messages = parse_messages(messages)
            elif not (isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(p, str) for p in prompt))):
                raise SchemaError("prompt must be a string or a list of strings (or give messages)")
            special = optional_bool(body, "add_special_tokens", messages is None)
            generation_prompt = optional_bool(body, "add_generation_prompt", False)
        except SchemaError as err:
            return _schema_error(err)
        config = self.scheduler.config
        vocab = vocabulary_of(config.vocab_size) if config is not None else None
        if config is None or vocab is None:
            return _json(error_body("this model has no tokenizer (the reference engine knows only the digits and lookup tasks' vocabularies)"), status=400)
        try:
            if messages is not None:
                tokens: Any = chat_template_ids(messages, vocab, special, generation_prompt)
                count: Any = len(tokens)
            elif isinstance(prompt, str):
                tokens = tokenize_text(prompt, special, vocab)
                count = len(tokens)
            else:
                tokens = [tokenize_text(p, special, vocab) for p in prompt]
                count = [len(t) for t in tokens]
        except InvalidRequest as err:
            return _json(error_body(str(err)), status=400)
        return _json({"tokens": tokens, "count": count, "max_model_len": config.max_seq_len})

    async def metrics(self, request: web.Request) -> web.Response:
        text = metrics.render(self.scheduler, self.options.served_model_name)
        return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Content-Type": "version=0.0.4"})


async def _in_thread(fn: Any, *args: Any) -> Any:
    """Reading an adapter's files off the event loop (its tensors are checked against the model's
    shapes, which a running step does not change)."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


@web.middleware
async def _fastapi_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """404 and 405 with FastAPI's JSON bodies (`{"detail": "Not Found"}`), as upstream answers them."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _json({"detail": "Not Found"}, status=404)
    except web.HTTPMethodNotAllowed as err:
        return web.json_response({"detail": "Method Not Allowed"}, status=405, headers={"Allow": ", ".join(sorted(err.allowed_methods))})


async def serve(server: EngineServer, host: str, port: int, stop: asyncio.Event, ready: Optional[asyncio.Event] = None) -> int:
    """Runs the HTTP server until `stop` is set; returns after a clean shutdown."""
    runner = web.AppRunner(server.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = next(iter(runner.addresses))[1]
    # The line tests and scripts wait for.
    print(f"engine ready port={bound} host={host}", file=sys.stderr, flush=True)
    if ready is not None:
        ready.set()
    await stop.wait()
    await server.scheduler.stop()
    await runner.cleanup()
    return bound
