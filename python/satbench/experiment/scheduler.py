"""A Dask scheduler for satbench's workers (``satbench scheduler``): on
loopback with plain TCP, or anywhere with mutual TLS, and its HTTP server
(health and metrics, no dashboard) on loopback. Dask's own ``dask scheduler``
serves HTTP on every interface unless told otherwise; this one cannot.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Callable

from ..errors import TestbedError
from .cluster import check_scheduler_address, check_tls_config
from .spec import SCHEDULER_RE


def serve_scheduler(address: str, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Run a scheduler at ``address`` (``tls://HOST:PORT``, or ``tcp://`` on
    loopback) until SIGINT or SIGTERM. With TLS, Dask's configuration gives the
    CA and the scheduler's certificate and key (``satbench ca --cluster``)."""
    check_scheduler_address(address)
    check_tls_config(address, "scheduler")
    m = re.fullmatch(SCHEDULER_RE, address)
    assert m is not None  # checked above
    # (Dask takes an IPv6 host in its brackets.)
    asyncio.run(_serve(m.group(1), m.group(2), int(m.group(3) or 8786), on_ready or (lambda _: None)))


async def _serve(protocol: str, host: str, port: int, on_ready: Callable[[str], None]) -> None:
    from distributed import Scheduler  # noqa: PLC0415 - Dask loads only for a cluster

    s = Scheduler(host=host, port=port, protocol=protocol, dashboard_address="127.0.0.1:0", dashboard=False)
    try:
        await s
    except (OSError, RuntimeError) as e:
        # (Dask wraps what stopped the start, a port in use or a bad certificate, in a RuntimeError.)
        cause = e.__cause__ if isinstance(e, RuntimeError) and e.__cause__ is not None else e
        await s.close()
        raise TestbedError(f"scheduler {protocol}://{host}:{port}: cannot listen: {type(cause).__name__}: "
                           f"{cause}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    on_ready(f"satbench scheduler at {s.address}")
    stopping = asyncio.ensure_future(stop.wait())
    finished = asyncio.ensure_future(s.finished())  # type: ignore[no-untyped-call]
    await asyncio.wait([stopping, finished], return_when=asyncio.FIRST_COMPLETED)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    if not finished.done():
        await s.close()
    stopping.cancel()


__all__ = ["serve_scheduler"]
