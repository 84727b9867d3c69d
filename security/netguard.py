"""Outbound HTTP to user-given URLs: ``audio_url`` downloads and webhook deliveries.

A user-given URL must not reach the service's own networks (spec section 8: every
hop of an ``audio_url`` must be a public address). Checking the host name up front
is not enough: a name can resolve to a private address, resolve differently a moment
later (DNS rebinding), or redirect elsewhere. So the address is enforced where the
socket is opened:

* Every TCP connection goes through :class:`_GuardedBackend`, an httpcore network
  backend. It resolves the host itself (``getaddrinfo``, IPv4 and IPv6), refuses the
  host if *any* address fails the :class:`~security.addresses.AddressPolicy`, and
  connects to a vetted address literal. Resolving and connecting happen in one step, so
  no later DNS answer is ever used. Only the socket address is pinned: httpcore still
  sends the URL's host in ``Host`` and uses it for TLS SNI and certificate verification.
* Redirects are followed by hand, at most five, each hop re-checked by
  :func:`~security.addresses.check_url` (scheme, credentials, literal addresses) before
  it is requested.
* Proxy settings from the environment are ignored; a proxy would connect for us.

Errors:

    NetguardError
    ├── UnsafeURL        the URL, or an address its host resolves to, is not allowed
    ├── DownloadFailed   a download got no usable answer, or is too large (``too_large``)
    └── DeliveryError    a webhook POST got no HTTP answer (``status`` is always None)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from ipaddress import ip_address
from typing import BinaryIO

import httpcore
import httpx

from .addresses import AddressPolicy, IPAddress, NetguardError, UnsafeURL, check_url, parse_host

__all__ = [
    "Resolver", "DeliveryError", "DownloadFailed", "guarded_client", "download", "post_json",
    "MAX_REDIRECTS", "MAX_DOWNLOAD_BYTES", "DOWNLOAD_TIMEOUT_S", "WEBHOOK_TIMEOUT_S",
]

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``(host, port) -> address strings``; the default asks the system resolver."""
MAX_REDIRECTS = 5
MAX_DOWNLOAD_BYTES = 5 * 2**30
DOWNLOAD_TIMEOUT_S = 900.0
WEBHOOK_TIMEOUT_S = 15.0
_USER_AGENT = "a5s/1"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class DeliveryError(NetguardError):
    """A webhook delivery got no HTTP answer (network failure, timeout, refused address)."""

    status: int | None = None


class DownloadFailed(NetguardError):
    """A download was refused, failed, or passed ``max_bytes`` (then ``too_large`` is set)."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


class _TooManyRedirects(NetguardError):
    pass


# --- the pinned connection -------------------------------------------------------------------

async def _system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolve, vet every address, then connect to a vetted address literal."""

    def __init__(self, policy: AddressPolicy, resolver: Resolver | None) -> None:
        self._policy = policy
        self._resolve = resolver or _system_resolve
        self._inner = httpcore.AnyIOBackend()

    async def _addresses(self, host: str, port: int, timeout: float | None) -> list[IPAddress]:
        try:
            literal = parse_host(host)
        except ValueError as exc:
            raise UnsafeURL(str(exc)) from None
        if literal is not None:
            return [literal]
        try:
            async with asyncio.timeout(timeout):
                found = await self._resolve(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = list(dict.fromkeys(ip_address(a.partition("%")[0]) for a in found))
        if not addresses:
            raise httpcore.ConnectError(f"cannot resolve {host}")
        return addresses

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                          ) -> httpcore.AsyncNetworkStream:
        addresses = await self._addresses(host, port, timeout)
        for address in addresses:
            why = self._policy.refusal(address)
            if why:
                raise UnsafeURL(f"{host} resolves to {address}, which is not a public "
                                f"address ({why})")
        error = httpcore.ConnectError(f"cannot connect to {host}")
        for address in addresses:
            try:
                return await self._inner.connect_tcp(str(address), port, timeout=timeout,
                                                     local_address=local_address,
                                                     socket_options=socket_options)
            except httpcore.ConnectError as exc:
                error = exc
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                                  ) -> httpcore.AsyncNetworkStream:
        raise UnsafeURL("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


_HTTPCORE_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _map_httpcore_errors() -> Iterator[None]:
    """httpcore errors become the matching httpx ones, as in httpx's own transport."""
    try:
        yield
    except Exception as exc:
        for source, target in _HTTPCORE_ERRORS:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__) from exc
        raise


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterator[bytes] | Iterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _map_httpcore_errors():
            async for part in self._stream:  # type: ignore[union-attr]
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


@functools.cache
def _ssl_context(verify: bool) -> ssl.SSLContext:
    """One context per setting for the process: building one reads the whole CA bundle
    (about 20 ms of CPU), once per download without this."""
    return httpx.create_ssl_context(verify=verify, trust_env=False)


class _PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose connections are vetted and pinned."""

    def __init__(self, policy: AddressPolicy, resolver: Resolver | None,
                 verify: ssl.SSLContext | bool = True) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify if isinstance(verify, ssl.SSLContext) else _ssl_context(verify),
            network_backend=_GuardedBackend(policy, resolver),
            max_connections=4, http1=True, http2=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                             port=request.url.port, target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        with _map_httpcore_errors():
            response = await self._pool.handle_async_request(core)
        return httpx.Response(status_code=response.status, headers=response.headers,
                              stream=_ResponseStream(response.stream),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()


def guarded_client(policy: AddressPolicy, *, resolver: Resolver | None = None,
                   verify: ssl.SSLContext | bool = True, timeout: httpx.Timeout | float = 30.0,
                   ) -> httpx.AsyncClient:
    """An httpx client whose every connection is vetted by ``policy`` and pinned.

    It never follows redirects and ignores proxy environment variables; use
    :func:`download` or :func:`post_json` unless you follow redirects yourself
    (re-checking each hop with :func:`check_url`).

    Args:
        resolver: replaces the system resolver (tests map names to local servers).
        verify: False, or an SSL context trusting a private CA; default system CAs.
    """
    return httpx.AsyncClient(
        transport=_PinnedTransport(policy, resolver, verify), follow_redirects=False,
        trust_env=False, timeout=timeout, headers={"User-Agent": _USER_AGENT})


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


@contextlib.asynccontextmanager
async def _exchange(client: httpx.AsyncClient, request: httpx.Request, policy: AddressPolicy,
                    *, max_redirects: int, follow: frozenset[int], too_many_fails: bool,
                    keep_cross_origin: frozenset[str] | None = None,
                    ) -> AsyncIterator[httpx.Response]:
    """Send ``request``, following redirects whose status is in ``follow``; yield the last
    response with its body unread. Every hop is checked before it is requested.

    A redirect beyond ``max_redirects`` raises when ``too_many_fails``, else is yielded.
    """
    first = _origin(request.url)
    for hop in range(max_redirects + 1):
        check_url(request.url, policy)
        response = await client.send(request, stream=True)
        try:
            redirect = response.status_code in follow and response.next_request is not None
            if not redirect or (hop == max_redirects and not too_many_fails):
                yield response
                return
            if hop == max_redirects:
                raise _TooManyRedirects(f"more than {max_redirects} redirects")
            request = response.next_request
        finally:
            await response.aclose()
        if keep_cross_origin is not None and _origin(request.url) != first:
            for name in [n for n in request.headers if n.lower() not in keep_cross_origin]:
                del request.headers[name]


# --- public operations -----------------------------------------------------------------------

def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "the server did not answer in time"
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect ({exc})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def download(url: str, dst: BinaryIO, *, policy: AddressPolicy,
                   max_bytes: int = MAX_DOWNLOAD_BYTES,
                   timeout_s: float = DOWNLOAD_TIMEOUT_S,
                   resolver: Resolver | None = None) -> int:
    """Stream ``url`` into ``dst`` and return the number of bytes written.

    The body is never held in memory; writes to ``dst`` are synchronous, chunk by
    chunk. Redirects (at most five) are followed, each hop checked. The whole
    download, redirects included, must finish within ``timeout_s``.

    Raises:
        DownloadFailed: ``too_large`` when ``Content-Length`` or the bytes received
            exceed ``max_bytes`` (the download stops there); otherwise a refused address
            or URL, too many redirects, an HTTP status of 300 or more, a network failure
            or a timeout, with a message saying which.
    """
    too_large = f"larger than {max_bytes} bytes"
    timeouts = httpx.Timeout(min(60.0, timeout_s), connect=min(30.0, timeout_s))
    try:
        async with asyncio.timeout(timeout_s), guarded_client(
                policy, resolver=resolver, timeout=timeouts) as client:
            request = client.build_request("GET", url, headers={"Accept-Encoding": "identity"})
            async with _exchange(client, request, policy, max_redirects=MAX_REDIRECTS,
                                 follow=_REDIRECTS, too_many_fails=True) as response:
                if response.status_code >= 300:
                    raise DownloadFailed(f"the server answered HTTP {response.status_code} "
                                         f"{response.reason_phrase}".rstrip())
                declared = response.headers.get("Content-Length", "")
                if (declared.isdigit() and int(declared) > max_bytes
                        and "Content-Encoding" not in response.headers):
                    raise DownloadFailed(too_large, too_large=True)
                written = 0
                async for chunk in response.aiter_bytes():
                    written += len(chunk)
                    if written > max_bytes:
                        raise DownloadFailed(too_large, too_large=True)
                    dst.write(chunk)
                return written
    except (UnsafeURL, _TooManyRedirects) as exc:
        raise DownloadFailed(str(exc)) from exc
    except httpx.InvalidURL as exc:  # the URL, or a redirect's Location, httpx cannot parse
        raise DownloadFailed(f"not a valid URL ({exc})") from exc
    except TimeoutError as exc:
        raise DownloadFailed(f"it did not finish within {timeout_s:g} seconds") from exc
    except httpx.HTTPError as exc:
        raise DownloadFailed(_describe(exc)) from exc


_CROSS_ORIGIN_HEADERS = frozenset({"host", "content-type", "content-length", "user-agent",
                                   "webhook-id", "webhook-timestamp", "webhook-signature"})


async def post_json(url: str, body: bytes, headers: dict[str, str], *, policy: AddressPolicy,
                    timeout_s: float = WEBHOOK_TIMEOUT_S, max_redirects: int = 0,
                    resolver: Resolver | None = None) -> int:
    """POST a webhook body and return the receiver's HTTP status (any status).

    Only 307 and 308 redirects are followed, up to ``max_redirects``, since they keep
    the method and body; other redirects, and one past the limit, are returned as the
    status. On a redirect
    to another origin, only the content and signature headers travel on, so a
    receiver's auth header never reaches a host it did not name. The response body
    is not read.

    Raises:
        DeliveryError: no HTTP answer within ``timeout_s`` (for the whole exchange),
            a network failure, a refused address or too many redirects.
    """
    try:
        async with asyncio.timeout(timeout_s), guarded_client(
                policy, resolver=resolver, timeout=timeout_s) as client:
            sent = httpx.Headers({"Content-Type": "application/json"})
            sent.update(headers)
            request = client.build_request("POST", url, content=body, headers=sent)
            async with _exchange(client, request, policy, max_redirects=max_redirects,
                                 follow=frozenset({307, 308}), too_many_fails=False,
                                 keep_cross_origin=_CROSS_ORIGIN_HEADERS) as response:
                return response.status_code
    except UnsafeURL as exc:
        raise DeliveryError(f"webhook_url is not allowed: {exc}") from exc
    except httpx.InvalidURL as exc:
        raise DeliveryError(f"webhook_url is not a valid URL ({exc})") from exc
    except TimeoutError as exc:
        raise DeliveryError(f"no answer within {timeout_s:g} seconds") from exc
    except httpx.HTTPError as exc:
        raise DeliveryError(_describe(exc)) from exc
