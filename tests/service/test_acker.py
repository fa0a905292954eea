"""At-least-once at unit level: a batch is acked only after all its sends are acknowledged, and
never when one of them fails."""

from __future__ import annotations

import asyncio

from stream_dedup.service.app import _Acker


class FakeStream:
    def __init__(self):
        self.acked = []

    async def ack(self, event):
        self.acked.append(event)
        return True


class FakeWorker:
    def __init__(self):
        self.crashed = []

    async def _crash(self, where, exc):
        self.crashed.append((where, exc))


def test_acks_after_every_send_is_acknowledged_and_out_of_order_batches():
    async def run():
        stream, worker = FakeStream(), FakeWorker()
        acker = _Acker(worker, stream, "stage", limit=4)
        loop = asyncio.get_running_loop()
        f1, f2, f3 = loop.create_future(), loop.create_future(), loop.create_future()
        done = []
        await acker.submit(["e1", "e2"], [f1, f2], after=lambda: done.append("b1"))
        await acker.submit(["e3"], [f3], after=lambda: done.append("b2"))
        await asyncio.sleep(0)
        assert stream.acked == []
        f3.set_result("meta")  # the second batch completes first
        await asyncio.sleep(0.01)
        assert stream.acked == ["e3"] and done == ["b2"]
        f1.set_result("meta")
        await asyncio.sleep(0.01)
        assert stream.acked == ["e3"]  # e2's send is still in flight: nothing of batch 1
        f2.set_result("meta")
        await asyncio.sleep(0.01)
        assert stream.acked == ["e3", "e1", "e2"] and done == ["b2", "b1"]
        assert worker.crashed == []

    asyncio.run(run())


def test_failed_send_crashes_and_acks_nothing():
    async def run():
        stream, worker = FakeStream(), FakeWorker()
        acker = _Acker(worker, stream, "stage 2", limit=2)
        loop = asyncio.get_running_loop()
        ok, bad = loop.create_future(), loop.create_future()
        await acker.submit(["e1", "e2"], [ok, bad])
        ok.set_result("meta")
        bad.set_exception(RuntimeError("broker gone"))
        await asyncio.sleep(0.01)
        assert stream.acked == []
        assert worker.crashed and worker.crashed[0][0] == "stage 2"

    asyncio.run(run())


def test_in_flight_limit_applies_backpressure():
    async def run():
        stream, worker = FakeStream(), FakeWorker()
        acker = _Acker(worker, stream, "s", limit=1)
        loop = asyncio.get_running_loop()
        f1 = loop.create_future()
        await acker.submit(["e1"], [f1])
        second = asyncio.ensure_future(acker.submit(["e2"], []))
        await asyncio.sleep(0.01)
        assert not second.done()  # waits for a free slot
        f1.set_result(None)
        await asyncio.wait_for(second, 1)
        await asyncio.sleep(0.01)
        assert stream.acked == ["e1", "e2"]

    asyncio.run(run())
