"""A fake policy model for NeMo Gym on loopback: the Responses API, deterministic, with failures on demand.

Standard library only, so it runs under any Python. ``POST /v1/responses`` answers a first turn by the plan
of its user prompt, and a turn that carries a tool's output with a final message. The plan maps a substring
of the user prompt to a cycle of actions; the k-th first turn of a prompt takes action k of its cycle:

- ``call``: a ``get_weather`` function call (the example environment then rewards 1.0);
- ``answer``: a message without a call (reward 0.0);
- ``fail``: HTTP 400, which Gym's model server does not retry, so the rollout fails (``agent_run_error``).

``POST /control/plan`` sets the plan (and resets the counts): ``{"delay": seconds per response,
"prompts": {"substring": ["call", "fail", ...]}, "default": ["call"]}``. ``GET /control/stats`` returns the
first turns answered per action.

    python fake_model.py --port PORT
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"plan": {"delay": 0.0, "prompts": {}, "default": ["call"]}, "seen": {}, "stats": {}}
_ids = iter(range(1, 1 << 62))


def _usage(turn: int) -> dict[str, Any]:
    # Deterministic token counts: 30 input and 6 output tokens on a first turn, 45 and 9 on the second.
    input_tokens, output_tokens = (30, 6) if turn == 1 else (45, 9)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _response(output: list[dict[str, Any]], turn: int) -> dict[str, Any]:
    with _lock:
        number = next(_ids)
    return {
        "id": f"resp_{number}",
        "object": "response",
        "created_at": time.time(),
        "model": "fake",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage(turn),
    }


def _message(text: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": content}


def _user_prompt(items: Any) -> str:
    if isinstance(items, str):
        return items
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _action(prompt: str) -> str:
    with _lock:
        plan = _state["plan"]
        cycle = next((c for key, c in plan["prompts"].items() if key in prompt), plan["default"])
        seen = _state["seen"].get(prompt, 0)
        _state["seen"][prompt] = seen + 1
        action = cycle[seen % len(cycle)]
        _state["stats"][action] = _state["stats"].get(action, 0) + 1
    return str(action)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/control/stats":
            with _lock:
                self._send(200, dict(_state["stats"]))
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path == "/control/plan":
            with _lock:
                _state["plan"] = {"delay": 0.0, "prompts": {}, "default": ["call"], **body}
                _state["seen"], _state["stats"] = {}, {}
            self._send(200, {"ok": True})
            return
        if not self.path.endswith("/responses"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        items = body.get("input", [])
        if isinstance(items, list) and any(
            isinstance(i, dict) and i.get("type") == "function_call_output" for i in items
        ):
            self._send(200, _response([_message("It is cold in San Francisco.")], turn=2))
            return
        action = _action(_user_prompt(items))
        time.sleep(float(_state["plan"].get("delay", 0.0)))
        if action == "fail":
            self._send(400, {"error": {"message": "injected failure", "type": "invalid_request_error"}})
        elif action == "answer":
            self._send(200, _response([_message("I cannot tell.")], turn=1))
        else:
            call = {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": json.dumps({"city": "San Francisco"}),
                "status": "completed",
            }
            self._send(200, _response([call], turn=1))

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    server.daemon_threads = True
    print(f"fake model on http://127.0.0.1:{args.port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
