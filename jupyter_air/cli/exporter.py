"""``air exporter``: the Jupyter server's ``jupyter-air/metrics`` for a node without one
(a Ray or Slurm node): the same collector, on prometheus_client's HTTP server, behind
the same bearer token, on loopback unless told otherwise."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from traitlets import TraitError

from ..gpu.sampler import GpuSampler
from ..metrics.collector import AirCollector
from ..metrics.settings import AirMetrics, TokenError, bearer_matches, read_token
from .common import CliError, _service

DEFAULT_LISTEN = "127.0.0.1:9410"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def add_commands(sub: Any) -> None:
    """Register ``air exporter``."""
    exporter = sub.add_parser(
        "exporter",
        help="serve this node's GPU and job metrics to Prometheus (for nodes without Jupyter)",
        description="Serve /metrics in Prometheus's text format: dcgm-exporter's GPU gauges "
        "with the user, job and notebook holding each GPU, GPU-seconds allocated and idle "
        "per user and job, jobs by state (docs/prometheus.md). Every request needs "
        "'Authorization: Bearer TOKEN', the token read from --token-file at each request.",
    )
    exporter.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN}, loopback only; "
        "[::1]:PORT for IPv6)",
    )
    exporter.add_argument(
        "--token-file",
        default=os.environ.get("AIR_METRICS_TOKEN_FILE"),
        help="file holding the bearer token, readable by you only (default "
        "$AIR_METRICS_TOKEN_FILE)",
    )
    exporter.add_argument(
        "--interval", type=float, default=10.0, help="seconds between GPU samples (default 10)"
    )
    exporter.add_argument(
        "--idle-threshold",
        type=float,
        default=AirMetrics.idle_threshold.default_value,
        help="utilization (%%) under which a held GPU counts as idle (default %(default)s)",
    )
    exporter.set_defaults(func=_exporter)


def _exporter(args: argparse.Namespace) -> int:
    if not args.token_file:
        raise CliError("air exporter needs --token-file (or $AIR_METRICS_TOKEN_FILE)")
    try:
        read_token(args.token_file)
        settings = AirMetrics(token_file=args.token_file, idle_threshold=args.idle_threshold)
        sampler = GpuSampler(interval=args.interval)
    except (TokenError, TraitError) as err:
        raise CliError(str(err)) from None
    host, port = _address(args.listen)
    collector = AirCollector(sampler, _service(), settings)
    app = _guarded(make_wsgi_app(collector.registry), settings.token_file)
    try:
        server = make_server(host, port, app, _server_class(host), _QuietHandler)
    except OSError as err:
        raise CliError(f"cannot listen on {args.listen}: {err.strerror or err}") from None
    where = f"[{host}]" if ":" in host else host
    print(f"air exporter: serving http://{where}:{server.server_port}/metrics", flush=True)
    if not _loopback(host):
        print(
            "air exporter: listening beyond loopback; the token travels in clear text "
            "unless a TLS proxy fronts this port",
            file=sys.stderr,
            flush=True,
        )
    sampler.start()
    try:
        server.serve_forever()
    finally:
        server.server_close()
        sampler.stop()
    return 0


def _guarded(app: WsgiApp, token_file: str) -> WsgiApp:
    """``app`` at ``/metrics`` for a request with the token; anything else refused."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            return _plain(start_response, "404 Not Found", "not found: try /metrics")
        try:
            token = read_token(token_file)
        except TokenError as err:
            print(f"air exporter: refused a scrape: {err}", file=sys.stderr, flush=True)
            return _plain(start_response, "503 Service Unavailable", "token not usable")
        if not bearer_matches(environ.get("HTTP_AUTHORIZATION"), token):
            return _plain(start_response, "403 Forbidden", "the metrics token is needed")
        return app(environ, start_response)

    return guarded


def _plain(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [f"{text}\n".encode()]


def _address(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--listen must be HOST:PORT (e.g. {DEFAULT_LISTEN}), got {listen!r}")
    return host, int(port)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _server_class(host: str) -> type[ThreadingWSGIServer]:
    """prometheus_client's threading server, for the address family of ``host``."""
    try:
        family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as err:
        raise CliError(f"cannot listen on {host!r}: {err.strerror}") from None

    class Server(ThreadingWSGIServer):
        address_family = family

    return Server


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
