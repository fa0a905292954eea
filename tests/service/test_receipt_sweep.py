"""ReceiptSweep step 2 on a real index: only the receipts below stage 1's committed offsets go,
and only once the decision stage has committed past the signatures end offset read after them."""

from __future__ import annotations

from stream_dedup.config import EngineConfig, ServiceConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.service.receipts import ReceiptSweep, receipt_token


def test_sweep_waits_for_the_commit_then_drops_only_lower_offsets(tmp_path) -> None:
    svc = ServiceConfig(input_topic="in", app_id="app")
    sweep = ReceiptSweep(svc)
    with Deduplicator(EngineConfig(), tmp_path / "idx") as d:
        for p in (0, 1):
            for off in range(10):
                d.record_receipt(receipt_token("in", p, off), ("sig", p * 10 + off))
        d.record_receipt(receipt_token("other", 0, 3), ("sig", 99))
        sweep.target = ({0: 5, 1: 8}, 20)   # C read first, then the signatures end offset H = 20
        assert sweep.apply(d, 19) == 0       # not committed past H: copies may still come
        assert d.receipt(receipt_token("in", 0, 0)) is not None
        assert sweep.apply(d, 20) == 2
        assert [d.receipt(receipt_token("in", 0, o)) is None for o in range(10)] == [o < 5 for o in range(10)]
        assert [d.receipt(receipt_token("in", 1, o)) is None for o in range(10)] == [o < 8 for o in range(10)]
        assert d.receipt(receipt_token("other", 0, 3)) is not None  # another topic's receipts stay
        assert sweep.target is None and sweep.done == {0: 5, 1: 8}


def test_receipt_tokens_order_by_partition_then_offset() -> None:
    tokens = [receipt_token("in", p, o) for p in (0, 1, 2) for o in (0, 1, 255, 256, 2**40)]
    assert tokens == sorted(tokens)
    assert len({t[:8] for t in tokens}) == 1 and receipt_token("in2", 0, 0)[:8] != tokens[0][:8]
