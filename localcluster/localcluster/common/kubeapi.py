"""A small JSON client for the Kubernetes API (stdlib only: http.client + ssl).

The node agent uses it instead of the generated Python client so that it sees objects
exactly as the API serves them (plain dicts) and controls every request.
"""
from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from typing import Any, Iterator


class ApiError(Exception):
    """An API request got a non-2xx answer. ``status`` is the HTTP code, ``body`` the
    decoded Status object (or raw text)."""

    def __init__(self, status: int, body: Any):
        self.status = status
        self.body = body
        msg = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"HTTP {status}: {msg}")


class KubeClient:
    """Client-certificate authenticated client for ``https://host:port``.

    ``ca``, ``cert``, ``key`` are PEM file paths. Each request opens its own connection,
    so one client can be shared by threads.
    """

    def __init__(self, server: str, ca: str, cert: str, key: str, timeout: float = 30.0):
        u = urllib.parse.urlparse(server)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 443
        self.timeout = timeout
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.ctx.load_cert_chain(str(cert), str(key))

    def _conn(self, timeout: float | None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout or self.timeout)

    def request(self, method: str, path: str, body: Any = None,
                params: dict | None = None, content_type: str = "application/json",
                timeout: float | None = None) -> Any:
        """Send one request; return the decoded JSON answer (None if empty).

        Raises ApiError for a non-2xx answer and OSError/http.client errors on transport
        failures.
        """
        if params:
            path = path + "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        conn = self._conn(timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        if resp.status >= 300:
            raise ApiError(resp.status, decoded)
        return decoded

    def get(self, path: str, **params) -> Any:
        """GET ``path`` with query ``params``. Raises ApiError."""
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: Any, **params) -> Any:
        """POST a JSON body. Raises ApiError."""
        return self.request("POST", path, body, params=params or None)

    def put(self, path: str, body: Any) -> Any:
        """PUT a JSON body. Raises ApiError."""
        return self.request("PUT", path, body)

    def merge_patch(self, path: str, body: Any) -> Any:
        """PATCH with ``application/merge-patch+json`` (lists are replaced). Raises ApiError."""
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, body: Any = None) -> Any:
        """DELETE with optional DeleteOptions. Raises ApiError."""
        return self.request("DELETE", path, body)

    def watch(self, path: str, params: dict, timeout_seconds: int = 240) -> Iterator[dict]:
        """Stream watch events ``{"type", "object"}`` until the server closes the watch.

        Raises ApiError if the watch is refused; the caller handles ``ERROR`` events
        (e.g. 410 Gone) and re-lists.
        """
        q = dict(params)
        q["watch"] = "true"
        q["timeoutSeconds"] = str(timeout_seconds)
        q.setdefault("allowWatchBookmarks", "true")
        conn = self._conn(timeout_seconds + 30)
        try:
            conn.request("GET", path + "?" + urllib.parse.urlencode(q),
                         headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status >= 300:
                raw = resp.read()
                try:
                    raise ApiError(resp.status, json.loads(raw))
                except ValueError:
                    raise ApiError(resp.status, raw.decode(errors="replace")) from None
            while True:
                line = resp.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            conn.close()
