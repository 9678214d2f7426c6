"""The agents of a hostile tenant's pods: a real HTTP server on loopback, one address a pod.

`HostileAgents` listens on the port the operator calls every agent on, at each pod's own
loopback address. A pod with an `attack` answers that endpoint with the case's reply
(`stepscope_dev.hostile.replies`) and every other endpoint honestly, so the operator
reaches the call under attack; a peer pod answers everything honestly, so its session gets
past planning and ends. The honest answers are minimal: ranks step every STEP_S (or
stopped long ago, for a hang check), a capture is armed and then fails, or keeps capturing
when the cancel is the call under attack. Every reply names, as the pod that answers,
whichever pod the call names: a hostile pod can, and nothing here checks the operator's
signature either. `serve_apart` runs them in a process of their own, as a tenant's sidecars
run in its own pods, so the CPU their replies take is not a victim's sidecars'.
"""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.api.agent import SERVED_BY_HEADER, TARGET_HEADER
from stepscope_dev.hostile.replies import (
    ARM,
    CANCEL,
    CAPTURE,
    CASES,
    HANG_DUMPS,
    STATUS,
    Body,
    Case,
    Drip,
    Endless,
    Endpoint,
    Silence,
    endpoint_for,
)
from stepscope_dev.net import wait_for_port
from stepscope_dev.processes import start_process

# Outside 127.0.0.0/16 (the pod runner's) and 127.3/16 (the agent fleet's).
HOSTILE_NETWORK = "127.24"
# Honest ranks end a step this often, from step FIRST_STEP (past the operator's
# plan_min_steps); a stalled rank's last step ended STALLED_FOR_S ago.
STEP_S = 0.1
FIRST_STEP = 20
STALLED_FOR_S = 3600.0
# A request's head and body are read to at most these; the operator's are far smaller.
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 8 * 1024 * 1024
# Connections served at once; further ones are closed unanswered. Silent and dripping
# replies hold theirs until the operator gives up on them.
MAX_CONNECTIONS = 512
# How long a wait for the operator's bytes lasts before the server checks whether it was
# stopped, and how long the operator may be slow to take a reply's bytes.
RECV_WAIT_S = 0.5
SEND_TIMEOUT_S = 30.0


def hostile_ip(index: int) -> str:
    return f"{HOSTILE_NETWORK}.{index // 254}.{index % 254 + 1}"


@dataclass
class HostilePod:
    """One pod's agent: `attack` is the endpoint and case it answers with hostility (None
    for a peer, honest throughout); `stalled` ranks stopped stepping long ago."""

    name: str
    ip: str
    ranks: list[int]
    attack: tuple[Endpoint, Case] | None = None
    stalled: bool = False
    armed: dict[str, tuple[int, int]] = field(default_factory=dict)


class HostileAgents:
    """The agents of every hostile pod, on `port` of each pod's own loopback address."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._pods: dict[str, HostilePod] = {}
        self._listeners: list[socket.socket] = []
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._started = time.time()

    def add(self, pod: HostilePod) -> None:
        self._pods[pod.ip] = pod

    def start(self) -> None:
        """Listen on every pod's address and answer, in this process."""
        for pod in self._pods.values():
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((pod.ip, self.port))
            listener.listen(64)
            listener.setblocking(False)
            self._listeners.append(listener)
            self._selector.register(listener, selectors.EVENT_READ, pod)
            # The large replies are built once, here, not while the operator waits for them.
            if pod.attack is not None and isinstance(pod.attack[1].reply, Body | Drip):
                pod.attack[1].reply.parts()
        threading.Thread(target=self._accept, name="hostile-accept", daemon=True).start()

    def serve_apart(self, log_path: Path) -> subprocess.Popen:
        """Answer from a process of its own, as a tenant's sidecars run in its own pods: the
        CPU and memory its replies take are not those of whoever started it (a test's
        fleet of honest sidecars). Returns once every address listens; `stop_pid` ends it."""
        spec = log_path.with_suffix(".json")
        spec.write_text(json.dumps({"port": self.port, "pods": [_spec(p) for p in self.pods]}))
        argv = [sys.executable, "-m", "stepscope_dev.hostile.agents", str(spec)]
        process = start_process(argv, log_path, die_with_parent=True)
        for pod in self.pods:
            wait_for_port(self.port, timeout=60, host=pod.ip)
        return process

    @property
    def pods(self) -> list[HostilePod]:
        return list(self._pods.values())

    def stop(self) -> None:
        self._stop.set()
        for listener in self._listeners:
            listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                try:
                    conn, _ = key.fileobj.accept()
                except OSError:
                    continue
                if not self._slots.acquire(blocking=False):
                    conn.close()
                    continue
                threading.Thread(
                    target=self._serve, args=(conn, key.data), name="hostile-reply", daemon=True
                ).start()

    def _serve(self, conn: socket.socket, pod: HostilePod) -> None:
        try:
            with conn:
                conn.settimeout(RECV_WAIT_S)
                request = self._read_request(conn)
                if request is None:
                    return
                method, path, headers, body = request
                # Whatever pod the call names, this agent says it is: a hostile pod can.
                served_by = headers.get(TARGET_HEADER.lower(), "")
                endpoint = endpoint_for(method, path)
                if pod.attack is not None and endpoint == pod.attack[0]:
                    self._attack(conn, pod.attack[1], served_by)
                else:
                    status, reply = self._honest(pod, endpoint, path, body)
                    _send(conn, status, json.dumps(reply).encode(), served_by)
        except OSError:
            pass  # the operator hung up: that is what these replies are for
        finally:
            self._slots.release()

    def _read_request(self, conn: socket.socket) -> tuple[str, str, dict[str, str], bytes] | None:
        """Method, path, headers (by lower-case name) and body of the one request."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self._recv(conn)
            if not chunk or len(data) > MAX_HEAD_BYTES:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        length = min(int(headers.get("content-length", "0")), MAX_BODY_BYTES)
        while len(body) < length:
            chunk = self._recv(conn)
            if not chunk:
                return None
            body += chunk
        return method, path, headers, body

    def _recv(self, conn: socket.socket) -> bytes:
        while not self._stop.is_set():
            try:
                return conn.recv(65536)
            except TimeoutError:
                continue
        return b""

    def _hold(self, conn: socket.socket) -> None:
        """Keep the connection until the operator closes it (or the server stops)."""
        while self._recv(conn):
            pass

    def _attack(self, conn: socket.socket, case: Case, served_by: str) -> None:
        reply = case.reply
        if isinstance(reply, Silence):
            self._hold(conn)
        elif isinstance(reply, Body):
            parts = reply.parts()
            length = reply.declared or sum(map(len, parts))
            _send_all(conn, _head(reply.status, f"Content-Length: {length}", served_by), *parts)
            self._hold(conn)
        elif isinstance(reply, Drip):
            body = b"".join(reply.parts())
            _send_all(conn, _head(200, f"Content-Length: {len(body)}", served_by))
            for byte in body:
                if self._stop.wait(reply.interval_s):
                    return
                _send_all(conn, bytes([byte]))
        elif isinstance(reply, Endless):
            _send_all(conn, _head(200, "Transfer-Encoding: chunked", served_by))
            framed = b"%x\r\n%s\r\n" % (len(reply.chunk), reply.chunk)
            while not self._stop.is_set():
                _send_all(conn, framed)

    def _honest(
        self, pod: HostilePod, endpoint: Endpoint | None, path: str, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        """The answer of an agent that tells the truth about ranks that step (or stopped)."""
        now = time.time()
        capture_id = path.rsplit("/", 1)[-1]
        if endpoint == STATUS:
            return 200, self._status(pod, now)
        if endpoint == ARM:
            request = json.loads(body)
            start = request["startStep"]
            pod.armed[request["captureId"]] = (start, start + request["steps"] - 1)
            return 201, _capture(pod, request["captureId"], "armed")
        if endpoint in (CAPTURE, CANCEL) and capture_id in pod.armed:
            if endpoint == CANCEL:
                return 200, _capture(pod, capture_id, "cancelled")
            # A peer's capture fails; a pod whose cancel is attacked captures on, so the
            # operator has to cancel it at the deadline.
            under_attack = pod.attack is not None and pod.attack[0] == CANCEL
            return 200, _capture(pod, capture_id, "capturing" if under_attack else "failed")
        if endpoint == HANG_DUMPS:
            unanswered = {"answered": False, "notes": ["an honest peer of a hostile pod"]}
            return 200, {"pod": pod.name, "ranks": [{"rank": r, **unanswered} for r in pod.ranks]}
        return 404, {"error": f"this agent knows no {path}"}

    def _status(self, pod: HostilePod, now: float) -> dict[str, Any]:
        if pod.stalled:
            step, last = FIRST_STEP, now - STALLED_FOR_S
        else:
            step, last = FIRST_STEP + int((now - self._started) / STEP_S), now
        ranks = [
            {
                "rank": rank,
                "localRank": local,
                "pid": 1000 + local,
                "globalStep": step,
                "stepTimeMs": STEP_S * 1000,
                "stepTimeP95Ms": STEP_S * 1000,
                "lastStepAt": last,
            }
            for local, rank in enumerate(pod.ranks)
        ]
        return {
            "pod": pod.name,
            "ranks": ranks,
            "currentStep": step,
            "stepTimeMs": STEP_S * 1000,
            "agentTime": now,
            "agentVersion": "hostile",
        }


def _capture(pod: HostilePod, capture_id: str, state: str) -> dict[str, Any]:
    start, end = pod.armed[capture_id]
    reason = "an honest peer of a hostile pod; its capture fails on purpose"
    ranks = [
        {"rank": rank, "state": state, **({"reason": reason} if state == "failed" else {})}
        for rank in pod.ranks
    ]
    return {
        "captureId": capture_id,
        "state": state,
        "startStep": start,
        "endStep": end,
        "ranks": ranks,
    }


def _head(status: int, length_header: str, served_by: str) -> bytes:
    return (
        f"HTTP/1.1 {status} Hostile\r\nContent-Type: application/json\r\n"
        f"{SERVED_BY_HEADER}: {served_by}\r\n"
        f"{length_header}\r\nConnection: close\r\n\r\n"
    ).encode()


def _send(conn: socket.socket, status: int, body: bytes, served_by: str) -> None:
    _send_all(conn, _head(status, f"Content-Length: {len(body)}", served_by) + body)


def _send_all(conn: socket.socket, *parts: bytes) -> None:
    """Send every part, waiting up to SEND_TIMEOUT_S for a reader that is slow to take
    them; reading goes back to short waits, so a held connection notices `stop`."""
    conn.settimeout(SEND_TIMEOUT_S)
    for part in parts:
        conn.sendall(part)
    conn.settimeout(RECV_WAIT_S)


def _spec(pod: HostilePod) -> dict[str, Any]:
    attack = None if pod.attack is None else [str(pod.attack[0]), pod.attack[1].name]
    return {
        "name": pod.name,
        "ip": pod.ip,
        "ranks": pod.ranks,
        "attack": attack,
        "stalled": pod.stalled,
    }


def _pod(spec: dict[str, Any]) -> HostilePod:
    attack = None
    if spec["attack"] is not None:
        endpoint = next(e for e in CASES if str(e) == spec["attack"][0])
        case = next(c for c in CASES[endpoint] if c.name == spec["attack"][1])
        attack = (endpoint, case)
    return HostilePod(spec["name"], spec["ip"], spec["ranks"], attack, spec["stalled"])


def main(argv: list[str]) -> None:
    """``python -m stepscope_dev.hostile.agents SPEC.json``: serve the pods `serve_apart`
    wrote down until stopped."""
    spec = json.loads(Path(argv[0]).read_text())
    agents = HostileAgents(spec["port"])
    for pod in spec["pods"]:
        agents.add(_pod(pod))
    agents.start()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
