"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions and Anthropic
messages protocols, for tests and benchmarks. Its model solves the embedded world's tasks
(``solver``), judges pairs like an LLM judge (``judge``), or echoes. Faults are scripted per
request: ``server.faults`` is a list consumed in order (429, 500, "slow", "malformed", None).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def solve(text: str) -> str:
    """The reference answer of an embedded-world prompt (what a perfect model writes)."""
    t = text.strip().removesuffix("=")
    if m := re.fullmatch(r"(\d+)([+*-])(\d+)", t):
        a, op, b = int(m[1]), m[2], int(m[3])
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    if t.startswith("rev "):
        return t[4:][::-1]
    if t.startswith("sort "):
        return "".join(sorted(t[5:]))
    if t.startswith("count "):
        _, c, s = t.split()
        return str(s.count(c))
    return "?"


def fenced_blocks(prompt: str) -> dict[str, str]:
    """The judge prompt's QUESTION / ANSWER A / ANSWER B blocks, read with the prompt's own fence
    (the token on its first fence line), as a judge that respects the fence would read them."""
    m = re.search(r"^(###-\w+) QUESTION$", prompt, re.M)
    if m is None:
        return {}
    f = re.escape(m[1])
    return dict(re.findall(rf"^{f} (QUESTION|ANSWER A|ANSWER B)\n(.*?)\n{f} END \1$", prompt, re.S | re.M))


def judge_reply(prompt: str, biased_to: str | None = None) -> str:
    """Read the judge prompt's fenced blocks and prefer the correct answer, as a good judge would."""
    blocks = fenced_blocks(prompt)
    if biased_to:
        return f"Position matters to me. [[{biased_to}>>{'B' if biased_to == 'A' else 'A'}]]"
    ref = solve(blocks.get("QUESTION", ""))
    a_ok = blocks.get("ANSWER A", "").strip() == ref
    b_ok = blocks.get("ANSWER B", "").strip() == ref
    verdict = "A>B" if a_ok and not b_ok else "B>A" if b_ok and not a_ok else "A=B"
    return f"Checked both answers against my own solution.\n[[{verdict}]]"


class FakeAPI:
    """``mode``: solver | judge | echo | biased-A | garbage | script (``script(prompt) -> reply``,
    set by the test). ``delay_s``: latency of every call, or a function of the request's number (1, 2, ...)
    giving its latency."""

    def __init__(self, mode: str = "solver", delay_s: float | Callable[[int], float] = 0.0, wrong_every: int = 0,
                 fail_when=None) -> None:
        self.mode = mode
        self.fail_when = fail_when  # prompt text -> True: that prompt always gets a 500
        self.script = None
        self.delay_s = delay_s
        self.wrong_every = wrong_every
        self.faults: list[Any] = []
        self.reject_max_tokens = False  # answer 400 to `max_tokens`, as reasoning models do
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        handler = self._handler()

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the default backlog (5) would serialise concurrent clients

            def handle_error(self, request, client_address) -> None:  # a client killed mid-call is no error here
                if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                    super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, text: str, n: int) -> str:
        if self.mode == "script":
            return self.script(text)
        if self.mode == "judge":
            return judge_reply(text)
        if self.mode == "biased-A":
            return judge_reply(text, biased_to="A")
        if self.mode == "garbage":
            return "I cannot decide."
        if self.mode == "echo":
            return text
        if self.wrong_every and n % self.wrong_every == 0:
            return "0"
        return solve(text)

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real API servers do (every reply has a length)
            disable_nagle_algorithm = True  # headers and body go out at once, no delayed-ACK stall

            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with api.lock:
                    api.requests.append({"path": self.path, "body": body, "headers": {k.lower(): v for k, v in self.headers.items()},
                                         "t": time.monotonic()})
                    n = len(api.requests)
                    fault = api.faults.pop(0) if api.faults else None
                    api.in_flight += 1
                    api.max_in_flight = max(api.max_in_flight, api.in_flight)
                try:
                    self._answer(body, n, fault)
                finally:
                    with api.lock:
                        api.in_flight -= 1

            def _answer(self, body: dict, n: int, fault: Any) -> None:
                delay = api.delay_s(n) if callable(api.delay_s) else api.delay_s
                if delay:
                    time.sleep(delay)
                if self.path.endswith("/load_lora_adapter"):
                    return self._send(200, {"status": "ok"})
                msgs = body.get("messages") or [{}]
                if api.fail_when is not None and api.fail_when(str(msgs[-1].get("content", ""))):
                    fault = 500
                if fault == 429:
                    return self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                                      {"Retry-After": "1"})
                if fault == "500-no-retry":  # the server says a retry will not help
                    return self._send(500, {"error": {"message": "bad input", "type": "api_error"}},
                                      {"x-should-retry": "false"})
                if fault == "400-retry":  # the server says a retry may help
                    return self._send(400, {"error": {"message": "try again", "type": "api_error"}},
                                      {"x-should-retry": "true"})
                if api.reject_max_tokens and "max_tokens" in body:
                    return self._send(400, {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported "
                                                      "with this model. Use 'max_completion_tokens' instead.",
                                                      "type": "invalid_request_error"}})
                if fault in (400, 401, 404, 500, 503, 529):
                    return self._send(fault, {"error": {"message": "server error", "type": "api_error"}})
                if fault == "slow":
                    time.sleep(3.0)
                if fault == "malformed":
                    return self._send(200, b'{"id": "x", "choices": "not a list"')
                if fault == "empty":
                    return self._send(200, {"id": "x", "object": "chat.completion", "choices": []})
                if self.path.endswith("/chat/completions"):
                    text = body["messages"][-1]["content"]
                    out = api.answer(text, n)
                    return self._send(200, {
                        "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": out}}],
                        "usage": {"prompt_tokens": len(text), "completion_tokens": len(out),
                                  "total_tokens": len(text) + len(out)},
                    })
                if self.path.endswith("/v1/completions"):  # the legacy API: raw text, as vLLM serves it
                    text = body["prompt"]
                    out = api.answer(text, n)
                    return self._send(200, {
                        "id": f"cmpl-{n}", "object": "text_completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "text": out}],
                        "usage": {"prompt_tokens": len(text), "completion_tokens": len(out),
                                  "total_tokens": len(text) + len(out)},
                    })
                if self.path.endswith("/messages"):
                    text = body["messages"][-1]["content"]
                    out = api.answer(text, n)
                    return self._send(200, {
                        "id": f"msg_{n}", "type": "message", "role": "assistant", "model": body["model"],
                        "content": [{"type": "text", "text": out}], "stop_reason": "end_turn",
                        "stop_sequence": None, "usage": {"input_tokens": len(text), "output_tokens": len(out)},
                    })
                return self._send(404, {"error": {"message": f"no route {self.path}"}})

        return Handler
