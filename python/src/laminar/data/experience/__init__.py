"""The experience buffer from Python: the writer (asyncio, and a blocking front for loops that
are not asyncio), the stream's names and configuration, and a reader of single records."""

from .reader import StoredRecord, read_record
from .stream import BufferNames, buffer_names, chunk_msg_id, ensure_buffer_stream, stream_config
from .sync_writer import SyncExperienceWriter
from .writer import ExperienceWriter, WriterStats, WriteResult

__all__ = [
    "BufferNames",
    "ExperienceWriter",
    "StoredRecord",
    "SyncExperienceWriter",
    "WriteResult",
    "WriterStats",
    "buffer_names",
    "chunk_msg_id",
    "ensure_buffer_stream",
    "read_record",
    "stream_config",
]
