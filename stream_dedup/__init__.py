"""stream-dedup: streaming near-duplicate detection for text.

The engine (text -> shingles -> MinHash/SimHash -> RocksDB index -> decision) is a plain
library; the ``dedup`` CLI and the Faust worker are thin adapters around
:class:`stream_dedup.engine.Deduplicator`.
"""

__version__ = "0.1.0"
