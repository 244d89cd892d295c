"""A small HTTP/3 client on aioquic (an independent QUIC implementation), for tests.

    python h3client.py HOST PORT CAFILE SERVER_NAME OUTDIR PATH...

With $H3CLIENT_TICKET naming a file, the session ticket is kept there and the
next run resumes with it, sending its requests as 0-RTT early data.

Fetches every PATH over one QUIC connection, all requests at once, writes each
body to OUTDIR (named by its index) and prints one JSON object with the status,
length and SHA-256 of each, and the negotiated ALPN.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import sys
from pathlib import Path

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class H3Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiters: dict[int, asyncio.Future[None]] = {}
        self.headers: dict[int, dict[bytes, bytes]] = {}
        self.bodies: dict[int, bytearray] = {}

    def quic_event_received(self, event):  # type: ignore[no-untyped-def]
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived):
                self.headers[ev.stream_id] = dict(ev.headers)
            elif isinstance(ev, DataReceived):
                self.bodies.setdefault(ev.stream_id, bytearray()).extend(ev.data)
            if isinstance(ev, (HeadersReceived, DataReceived)) and ev.stream_ended:
                w = self.waiters.pop(ev.stream_id, None)
                if w and not w.done():
                    w.set_result(None)

    async def get(self, authority: str, path: str) -> tuple[dict[bytes, bytes], bytes]:
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
                                   (b":path", path.encode())], end_stream=True)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters[sid] = fut
        self.transmit()
        await asyncio.wait_for(fut, timeout=120)
        return self.headers.get(sid, {}), bytes(self.bodies.get(sid, b""))


async def main(host: str, port: int, cafile: str, name: str, out: Path, paths: list[str],
               ticket_file: Path | None = None) -> dict:
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=name, max_data=64 << 20,
                            max_stream_data=16 << 20)
    cfg.load_verify_locations(cafile)
    tickets = []
    if ticket_file is not None and ticket_file.exists():
        cfg.session_ticket = pickle.loads(ticket_file.read_bytes())  # resume, and send 0-RTT if allowed
    results = []
    async with connect(host, port, configuration=cfg, create_protocol=H3Client,
                       session_ticket_handler=tickets.append, wait_connected=cfg.session_ticket is None) as c:
        for i in range(0, len(paths), 100):  # within the server's limit of concurrent streams
            results += await asyncio.gather(*(c.get(f"{name}:{port}", p) for p in paths[i:i + 100]))
        alpn = c._quic.tls.alpn_negotiated
        await asyncio.sleep(0.05)  # let a session ticket arrive
    if ticket_file is not None and tickets:
        ticket_file.write_bytes(pickle.dumps(tickets[-1]))
    rows = []
    for i, (p, (h, body)) in enumerate(zip(paths, results)):
        (out / str(i)).write_bytes(body)
        rows.append({"path": p, "status": int(h.get(b":status", b"0")), "bytes": len(body),
                     "sha256": hashlib.sha256(body).hexdigest()})
    return {"alpn": alpn, "responses": rows}


if __name__ == "__main__":
    host, port, cafile, name, outdir, *paths = sys.argv[1:]
    Path(outdir).mkdir(parents=True, exist_ok=True)
    ticket = os.environ.get("H3CLIENT_TICKET")  # a file to keep the session ticket in, for resumption
    print(json.dumps(asyncio.run(main(host, int(port), cafile, name, Path(outdir), paths,
                                      Path(ticket) if ticket else None))))
