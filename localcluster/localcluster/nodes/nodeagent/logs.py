"""The kubelet API subset the apiserver calls: ``/containerLogs/<ns>/<pod>/<container>``
(previous, follow, tailLines, limitBytes) and ``/healthz``, over HTTPS with client certs."""
from __future__ import annotations

import http.server
import socketserver
import ssl
import threading
import time
import urllib.parse

from localcluster.nodes.nodeagent.shared import log


class LogServer:
    """Container logs of an :class:`~.agent.Agent`'s pods, live or from the state dir."""

    def find_log(self, ns: str, pod: str, container: str, previous: bool):
        """(log path, is_running()) for a container of a pod on this node, or None."""
        with self.lock:
            w = next((w for w in self.workers.values()
                      if w.ns == ns and w.pod_name == pod), None)
        if w is not None:
            d = w.dir
            c = next((c for c in w.inits + w.mains if c.name == container), None)
            running = (lambda: c is not None and c.proc is not None and c.proc.poll() is None)
        else:
            dirs = sorted((self.state / "pods").glob(f"{ns}_{pod}_*"), key=lambda p: p.stat().st_mtime)
            if not dirs:
                return None
            d = dirs[-1]
            running = (lambda: False)
        p = d / (f"{container}.previous.log" if previous else f"{container}.log")
        if not p.exists():
            return None
        return p, running

    def serve_logs(self) -> http.server.HTTPServer:
        """Start the HTTPS server on 127.0.0.1:<kubelet port> (client certs from our CA)."""
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                log.debug("kubelet-api: " + fmt, *args)

            def _text(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                u = urllib.parse.urlparse(self.path)
                q = urllib.parse.parse_qs(u.query)
                parts = u.path.strip("/").split("/")
                if u.path in ("/healthz", "/healthz/"):
                    return self._text(200, "ok")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    return self._text(404, "not found")
                found = agent.find_log(parts[1], parts[2], parts[3],
                                       q.get("previous", ["false"])[0] == "true")
                if found is None:
                    return self._text(404, f"no logs for {parts[1]}/{parts[2]}/{parts[3]}")
                path, running = found
                follow = q.get("follow", ["false"])[0] == "true"
                data = path.read_bytes()
                if "tailLines" in q:
                    n = int(q["tailLines"][0])
                    data = b"".join(data.splitlines(keepends=True)[-n:]) if n > 0 else b""
                if "limitBytes" in q:
                    data = data[: int(q["limitBytes"][0])]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def chunk(b: bytes) -> None:
                    if b:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
                        self.wfile.flush()
                try:
                    chunk(data)
                    if follow:
                        pos = path.stat().st_size
                        while True:
                            alive = running()
                            with open(path, "rb") as f:
                                f.seek(pos)
                                more = f.read()
                            pos += len(more)
                            chunk(more)
                            if not alive and not more:
                                break
                            time.sleep(0.2)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        srv = Server(("127.0.0.1", self.node.kubelet_port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.certs["serving_crt"]), str(self.certs["serving_key"]))
        ctx.load_verify_locations(str(self.state / "pki" / "ca.crt"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, name="kubelet-api", daemon=True).start()
        return srv
