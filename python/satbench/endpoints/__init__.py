"""The endpoints of a trial: clients that load pages and servers that serve
them, each behind its interface (:mod:`.base`), and the registries that map
a kind to its class.

Adding a kind of client or server: write one module with one class that
implements :class:`~.base.Client` or :class:`~.base.Server`, add its kind to
:class:`~satbench.model.ClientKind` or :class:`~satbench.model.ServerKind`,
and add one line below. The registries name classes by import path, so a
command that needs no browser never imports a browser driver.
"""

from __future__ import annotations

import importlib

from ..model import ClientKind, ServerKind
from .base import Client, LoadRequest, Server, ServeRequest

CLIENTS: dict[ClientKind, str] = {
    ClientKind.CHROMIUM: "satbench.endpoints.chromium:Chromium",
    ClientKind.FIREFOX: "satbench.endpoints.firefox:Firefox",
    ClientKind.LOADER: "satbench.endpoints.loader:Loader",
    ClientKind.CURL: "satbench.endpoints.curl:Curl",
}

SERVERS: dict[ServerKind, str] = {
    ServerKind.SATBENCH: "satbench.endpoints.satbench_server:SatbenchServer",
    ServerKind.NGINX: "satbench.endpoints.thirdparty:NginxServer",
    ServerKind.CADDY: "satbench.endpoints.thirdparty:CaddyServer",
}


def _load(path: str) -> type:
    module, _, name = path.partition(":")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def client_class(kind: ClientKind) -> type[Client]:
    cls = _load(CLIENTS[kind])
    assert issubclass(cls, Client) and cls.kind is kind, cls
    return cls


def server_class(kind: ServerKind) -> type[Server]:
    cls = _load(SERVERS[kind])
    assert issubclass(cls, Server) and cls.kind is kind, cls
    return cls


__all__ = ["CLIENTS", "SERVERS", "Client", "LoadRequest", "ServeRequest", "Server", "client_class", "server_class"]
