"""The OpenAI-compatible backend against a real server on loopback: `transformers serve` with a tiny random
chat model, reached directly or through a small TCP relay that drops, cuts or stalls connections.

The relay is real networking (sockets and threads between the backend and the server), used to make the
failures the backend must survive happen on demand.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")
pytest.importorskip("uvicorn")  # `transformers serve` needs transformers[serving]

from cudaperf.agent.backends.base import ChatMessage, GenerationConfig, load_backend
from cudaperf.agent.backends.openai_compat import parse_target
from cudaperf.agent.backends.tiny import build_tiny_chat_model

USER = [ChatMessage("user", "write a relu kernel")]
SHORT = GenerationConfig(max_new_tokens=8, temperature=0.0)
SERVER_START_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, process: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"transformers serve exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"transformers serve not healthy after {SERVER_START_S} s: {log_path.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base_url, model name) of `transformers serve` running a tiny model on 127.0.0.1."""
    model_dir = build_tiny_chat_model(tmp_path_factory.mktemp("tiny") / "tiny-chat")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    command = [sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve",
               str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
               "--log-level", "warning"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log_path)
        yield url, str(model_dir)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Relay:
    """A TCP relay on 127.0.0.1 in front of `upstream_port`. Per accepted connection, in order, it follows
    `plan` ("forward", "drop": close at once, "cut": forward until `cut_after_bytes` of the reply then
    close, "stall": read and never answer); after the plan runs out it forwards. It counts connections and
    the most open at once."""

    def __init__(self, upstream_port: int, plan: list[str] = (), cut_after_bytes: int = 600) -> None:
        self.upstream_port = upstream_port
        self.plan = list(plan)
        self.cut_after_bytes = cut_after_bytes
        self.accepted = 0
        self.open_now = 0
        self.most_open = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                mode = self.plan.pop(0) if self.plan else "forward"
                self.accepted += 1
            threading.Thread(target=self._serve, args=(client, mode), daemon=True).start()

    def _serve(self, client: socket.socket, mode: str) -> None:
        with self._lock:
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        try:
            if mode == "drop":
                return
            if mode == "stall":
                client.recv(65536)
                time.sleep(30)
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            limit = self.cut_after_bytes if mode == "cut" else None
            up = threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True)
            up.start()
            self._pipe(upstream, client, limit)
            upstream.close()
        finally:
            client.close()
            with self._lock:
                self.open_now -= 1

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while limit is None or sent < limit:
                data = source.recv(65536 if limit is None else min(65536, limit - sent))
                if not data:
                    break
                sink.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closing = True
        self._listener.close()


def _relay(server, plan=(), **kwargs) -> Relay:
    return Relay(int(server[0].rsplit(":", 1)[1]), list(plan), **kwargs)


def _backend(port: int, model: str, **options):
    return load_backend(f"openai:http://127.0.0.1:{port}/v1:{model}", **options)


# -- spec parsing (no server) --------------------------------------------------------------------------


def test_target_with_port_path_and_org_model_splits_after_the_path():
    assert parse_target("http://127.0.0.1:8000/v1:org/model") == ("http://127.0.0.1:8000/v1", "org/model")


def test_target_without_model_leaves_it_to_the_server():
    assert parse_target("https://api.example.com/v1") == ("https://api.example.com/v1", None)


# -- against the server --------------------------------------------------------------------------------


def test_streamed_reply_arrives_in_several_deltas_that_join_to_the_text(server):
    deltas: list[tuple[int, str]] = []
    port = int(server[0].rsplit(":", 1)[1])
    backend = _backend(port, server[1], on_text=lambda i, d: deltas.append((i, d)))
    (g,) = backend.generate([USER], SHORT)
    backend.close()
    assert (g.error, len(deltas) > 1, "".join(d for _, d in deltas)) == (None, True, g.text)


def test_streamed_and_plain_greedy_replies_agree(server):
    port = int(server[0].rsplit(":", 1)[1])
    streamed = _backend(port, server[1]).generate([USER], SHORT)[0]
    plain = _backend(port, server[1], stream=False).generate([USER], SHORT)[0]
    assert (streamed.text, streamed.completion_tokens) == (plain.text, plain.completion_tokens)


def test_reply_at_the_token_limit_reports_length_and_server_usage(server):
    port = int(server[0].rsplit(":", 1)[1])
    (g,) = _backend(port, server[1]).generate([USER], SHORT)
    assert (g.finish_reason, g.completion_tokens, g.prompt_tokens > 0) == ("length", 8, True)


def test_model_is_read_from_the_server_when_the_spec_names_none(server):
    backend = load_backend(f"openai:{server[0]}/v1")
    (g,) = backend.generate([USER], SHORT)
    assert (g.error, backend.name.endswith(server[1])) == (None, True)


def test_connection_dropped_before_a_reply_is_retried(server):
    relay = _relay(server, plan=["drop"])
    (g,) = _backend(relay.port, server[1], retries=2).generate([USER], SHORT)
    relay.close()
    assert (g.error, g.finish_reason, relay.accepted >= 2) == (None, "length", True)


def test_stream_cut_mid_reply_is_retried_from_the_start(server):
    port = int(server[0].rsplit(":", 1)[1])
    whole = _backend(port, server[1]).generate([USER], SHORT)[0]
    relay = _relay(server, plan=["cut"], cut_after_bytes=400)  # past the headers, inside the event stream
    (g,) = _backend(relay.port, server[1], retries=2, backoff_s=0.05).generate([USER], SHORT)
    relay.close()
    assert (g.error, g.text, relay.accepted) == (None, whole.text, 2)


def test_stalled_server_times_out_as_an_error_value(server):
    relay = _relay(server, plan=["stall"] * 5)
    start = time.monotonic()
    (g,) = _backend(relay.port, server[1], retries=0, timeout_s=1.0).generate([USER], SHORT)
    elapsed_s = time.monotonic() - start
    relay.close()
    assert (g.finish_reason, "Timeout" in (g.error or ""), elapsed_s < 10) == ("error", True, True)


def test_unreachable_server_is_an_error_value_not_an_exception():
    (g,) = _backend(_free_port(), "m", retries=0, timeout_s=1.0).generate([USER], SHORT)
    assert (g.text, g.finish_reason, g.error is not None) == ("", "error", True)


def test_concurrency_limit_bounds_open_connections(server):
    relay = _relay(server)
    backend = _backend(relay.port, server[1], concurrency=2)
    results = backend.generate([USER] * 6, SHORT)
    backend.close()
    relay.close()
    assert (all(g.error is None for g in results), relay.most_open) == (True, 2)
