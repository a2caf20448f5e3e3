"""SSRF guard: the crawler's `NetworkPolicy`, enforced where sockets are opened.

Each host is resolved once per crawl, every answer is checked, and sockets go only to checked
addresses, so a DNS answer that changes between check and connect (rebinding) cannot get inside.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from ipaddress import ip_address

import httpcore
import httpx

from pipelines_dagster.core.security.network_policy import NetworkPolicy

# hostname -> its A/AAAA answers as address strings; raises OSError when the name does not resolve.
Resolver = Callable[[str], Awaitable[Sequence[str]]]


class AddressError(Exception):
    """A host the crawler must not or cannot connect to; the message says which and why."""


class BlockedAddressError(AddressError):
    """The host resolves to an address the network policy refuses."""


class UnresolvableHostError(AddressError):
    """The host has no address."""


async def resolve_system(host: str) -> list[str]:
    """The system resolver's answers for `host`; getaddrinfo blocks, so asyncio runs it in a thread."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class AddressGuard:
    """Resolves and vouches for hosts during one crawl.

    Answers (and refusals) are cached, so the address that was checked is the one connected to,
    however often the host is contacted.
    """

    def __init__(self, policy: NetworkPolicy, *, resolver: Resolver | None = None) -> None:
        self.policy = policy
        self._resolver = resolver or resolve_system
        self._answers: dict[str, tuple[str, ...] | AddressError] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def addresses(self, host: str) -> tuple[str, ...]:
        """The checked addresses of `host` in resolver order; raises AddressError if any is refused."""
        if host not in self._answers:
            # One lookup per host even when many requests to it start together.
            async with self._locks.setdefault(host, asyncio.Lock()):
                if host not in self._answers:
                    self._answers[host] = await self._lookup(host)
        answer = self._answers[host]
        if isinstance(answer, AddressError):
            raise answer
        return answer

    async def _lookup(self, host: str) -> tuple[str, ...] | AddressError:
        try:
            answers = [ip_address(host)]
            subject = ""
        except ValueError:
            subject = f" for host {host!r}"
            try:
                answers = [ip_address(answer) for answer in await self._resolver(host)]
            except OSError as exc:
                return UnresolvableHostError(f"could not resolve host {host!r}: {exc.strerror or exc}")
            except ValueError as exc:
                return UnresolvableHostError(f"the resolver gave a bad answer for {host!r}: {exc}")
        if not answers:
            return UnresolvableHostError(f"host {host!r} has no addresses")
        for address in answers:
            if (reason := self.policy.refusal(address)) is not None:
                return BlockedAddressError(
                    f"blocked address {address}{subject}: {reason}; the crawler only connects to "
                    "public addresses unless its network policy allows this one"
                )
        return tuple(dict.fromkeys(str(address) for address in answers))


class PinnedNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that opens TCP connections only to addresses the guard vouched for.

    Only the socket address changes: httpcore keeps the hostname for TLS (SNI and the certificate
    check) and httpx keeps it in the Host header.
    """

    def __init__(self, guard: AddressGuard, *, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._guard = guard
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._guard.addresses(host)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host!r} timed out") from None
        *fallbacks, last = addresses
        for address in fallbacks:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout):
                continue  # the host's next address may answer, as browsers assume
        return await self._inner.connect_tcp(
            last, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # httpx's default verifying context. Loading the CA bundle costs tens of milliseconds, a
    # noticeable share of a crawl whose pages are all unchanged, and a context is reusable.
    return httpx.create_ssl_context()


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's default transport with every connection made through an AddressGuard.

    It never uses a proxy: a proxy resolves names itself, out of the guard's reach.
    """

    def __init__(self, guard: AddressGuard, *, limits: httpx.Limits | None = None) -> None:
        # The pool below is built from these too, so httpx's default stands in for None here already.
        limits = limits or httpx.Limits()
        super().__init__(verify=_tls_context(), limits=limits)
        # httpx 0.28 cannot pass a network backend to its pool (encode/httpx#3749), so the pool it
        # built is replaced by one with the same settings on the pinned backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_tls_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PinnedNetworkBackend(guard),
        )
