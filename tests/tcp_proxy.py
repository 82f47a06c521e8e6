"""A TCP proxy of the tests' own between a client and a server on 127.0.0.1, which can stop
forwarding: the network fault no server restart makes (a connection that stays open and
stops answering, as behind a dead NAT entry or a hung load balancer).

It runs in the test's event loop: `stall()` keeps every connection open and forwards nothing
more, in either direction, until `resume()`; `cut()` closes every connection at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["TcpProxy", "tcp_proxy"]


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.stalled_bytes = 0  # held by `stall` so far, in either direction
        self._server: asyncio.Server | None = None

    def stall(self) -> None:
        """Forward nothing more until `resume`; connections stay open."""
        self._flowing.clear()
        self.stalled_bytes = 0

    def resume(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        """Close every connection through the proxy now."""
        for writer in list(self._writers):
            writer.transport.abort()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.resume()
        self.cut()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        await self._flowing.wait()  # a stalled proxy answers no new connection either
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self._writers.discard(end)
                end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                if not self._flowing.is_set():
                    self.stalled_bytes += len(data)
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


@contextlib.asynccontextmanager
async def tcp_proxy(target_port: int) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(target_port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
