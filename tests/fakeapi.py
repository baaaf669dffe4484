"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions and Anthropic
messages protocols, for tests and benchmarks. Its model solves the embedded world's tasks
(``solver``), judges pairs like an LLM judge (``judge``), or echoes. Faults are scripted per
request: ``server.faults`` is a list consumed in order (429, 500, "slow", "malformed", None).
A request that asks for ``logprobs`` gets each token's log-probability: a script may return
``(text, [(token, logprob), ...])`` (the tokens spell the text); otherwise every token has 0.0.
"""

from __future__ import annotations

import hashlib
import json
import math
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


TOKEN = re.compile(r"\[\[|\]\]|\w+|\s+|[^\w\s]")


def token_logprobs(text: str) -> list[tuple[str, float]]:
    """``text`` cut into tokens (words, spaces, ``[[``, ``]]``, other characters), each certain."""
    return [(t, 0.0) for t in TOKEN.findall(text)]


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


def _uniform(*parts: object) -> float:
    """A number in [0, 1) drawn by a hash of ``parts`` (the same parts, the same number)."""
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:13], 16) / 16**13


class NoisyJudge:
    """A judge with known noise, for a FakeAPI in ``script`` mode. It reads the judge prompt's fenced
    question and answers, knows the truth (the answer equal to ``solve(question)`` wins; both right or
    both wrong is a tie), and:

    - misreads a battle with probability ``noise``: a wrong verdict (one of the other two, evenly),
      the same in both orders (a judge's mistakes are about the battle, not the order); two identical
      answers it always reads as a tie;
    - with probability ``flip`` per order, prefers the answer in seat A whatever it read (position bias);
    - writes its verdict as one token whose log-probability is its confidence: 1 - u^2 / 2 when it
      read right (mostly sure), 1 - u^0.5 / 2 when it misread (mostly unsure), u uniform per order.

    Every draw is a hash of ``seed``, the question, the answers and the order, so a prompt asked
    again gets the same reply."""

    def __init__(self, noise: float, flip: float = 0.0, seed: int = 0) -> None:
        self.noise, self.flip, self.seed = noise, flip, seed

    def __call__(self, prompt: str) -> tuple[str, list[tuple[str, float]]]:
        blocks = fenced_blocks(prompt)
        q, a, b = blocks.get("QUESTION", ""), blocks.get("ANSWER A", "").strip(), blocks.get("ANSWER B", "").strip()
        ref = solve(q)
        first, second = sorted((a, b))  # the battle, whatever the order
        truth = "tie" if (first == ref) == (second == ref) else (first if first == ref else second)
        read = truth
        if _uniform(self.seed, "misread", q, first, second) < self.noise:
            others = [v for v in ("tie", first, second) if v != truth]
            read = others[int(_uniform(self.seed, "which", q, first, second) * len(others))]
        u = _uniform(self.seed, "confidence", q, a, b)
        confidence = 1 - u**2 / 2 if read == truth else 1 - u**0.5 / 2
        if _uniform(self.seed, "position", q, a, b) < self.flip:
            verdict, confidence = "A>B", 1 - u**2 / 2
        else:
            verdict = "A=B" if read == "tie" or a == b else "A>B" if read == a else "B>A"
        head = "Checked both answers against my own solution.\n[["
        return f"{head}{verdict}]]", [*token_logprobs(head), (verdict, math.log(confidence)), ("]]", 0.0)]


class FakeAPI:
    """``mode``: solver | judge | echo | biased-A | garbage | script (``script(prompt) -> reply``,
    set by the test). ``delay_s``: latency of every call, or a function of the request's number (1, 2, ...)
    giving its latency."""

    def __init__(self, mode: str = "solver", delay_s: float | Callable[[int], float] = 0.0, wrong_every: int = 0,
                 fail_when=None, port: int = 0) -> None:
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

        self.httpd = Server(("127.0.0.1", port), handler)  # port 0: any free one
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

    def answer(self, text: str, n: int) -> str | tuple[str, list[tuple[str, float]]]:
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
                    out, tokens = _split(api.answer(text, n))
                    logprobs = {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                                            for t, lp in tokens]} if body.get("logprobs") else None
                    return self._send(200, {
                        "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": logprobs,
                                     "message": {"role": "assistant", "content": out}}],
                        "usage": {"prompt_tokens": len(text), "completion_tokens": len(out),
                                  "total_tokens": len(text) + len(out)},
                    })
                if self.path.endswith("/v1/completions"):  # the legacy API: raw text, as vLLM serves it
                    text = body["prompt"]
                    out, tokens = _split(api.answer(text, n))
                    logprobs = {"tokens": [t for t, _ in tokens], "token_logprobs": [lp for _, lp in tokens],
                                "top_logprobs": None, "text_offset": None} if body.get("logprobs") else None
                    return self._send(200, {
                        "id": f"cmpl-{n}", "object": "text_completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "text": out, "logprobs": logprobs}],
                        "usage": {"prompt_tokens": len(text), "completion_tokens": len(out),
                                  "total_tokens": len(text) + len(out)},
                    })
                if self.path.endswith("/messages"):
                    text = body["messages"][-1]["content"]
                    out, _ = _split(api.answer(text, n))
                    return self._send(200, {
                        "id": f"msg_{n}", "type": "message", "role": "assistant", "model": body["model"],
                        "content": [{"type": "text", "text": out}], "stop_reason": "end_turn",
                        "stop_sequence": None, "usage": {"input_tokens": len(text), "output_tokens": len(out)},
                    })
                return self._send(404, {"error": {"message": f"no route {self.path}"}})

        return Handler


def _split(answer: str | tuple[str, list[tuple[str, float]]]) -> tuple[str, list[tuple[str, float]]]:
    """(text, its tokens with log-probabilities) of a reply: a script's own, else each token certain."""
    if isinstance(answer, tuple):
        return answer[0], list(answer[1])
    return answer, token_logprobs(answer)
