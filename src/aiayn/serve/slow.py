"""Slow clients: uvicorn closes idle keep-alive connections, but waits for ever on a client that sends
half its headers. This protocol closes a connection whose request headers do not arrive in time."""

from __future__ import annotations

from uvicorn.protocols.http.h11_impl import H11Protocol


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing connections that have no request in progress ``timeout_s`` after
    they opened or after their last response (a request in progress has its body timed by the app)."""

    class HeaderTimeoutProtocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self.loop.call_later(timeout_s, self._expire, self.cycle)

        def _expire(self, cycle_then) -> None:
            idle = self.cycle is cycle_then and (self.cycle is None or self.cycle.response_complete)
            if idle and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol
