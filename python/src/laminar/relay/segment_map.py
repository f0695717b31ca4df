"""Mapping a version's segment file into this process, and unmapping it.

Readers map read-only (``Lease``): numpy arrays and torch tensors over the mapping are views of
the relay's shared memory, nothing is copied. Writers map read-write and pre-fault the page
tables at once (``MAP_POPULATE``), as the TypeScript client does, so that the copies that follow
run at memory speed instead of taking a fault per page.

Python's ``mmap.close()`` refuses (``BufferError``) while a view still exports the buffer; the
mapping is then left to the garbage collector, which unmaps it when the last view goes.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from .. import error_codes
from ..errors import LaminarError


def _os_error(err: OSError, what: str) -> LaminarError:
    if err.errno == errno.ENOENT:
        # The relay names only files it holds: a missing one is not visible from this process.
        return LaminarError(
            error_codes.SEGMENT_NOT_VISIBLE,
            f"{what}: it does not exist for this process, which runs in another mount namespace than "
            "the relay (a separate container, ip netns exec) and does not see the relay's file system "
            "there. Run both where the same mounts are visible, give the relay a --shm-dir that is a "
            "tmpfs mounted for both (mount -t tmpfs -o huge=within_size tmpfs <dir>), or start the "
            "relay with --huge-pages off",
        )
    code = errno.errorcode.get(err.errno, "EIO") if err.errno else "EIO"
    return LaminarError(code, f"{what}: {err.strerror or err}")


def map_read_only(path: str) -> mmap.mmap:
    """The whole file at ``path``, mapped shared and read-only."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise _os_error(err, f"cannot open the segment {path}") from err
    try:
        return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except OSError as err:
        raise _os_error(err, f"cannot map the segment {path}") from err
    finally:
        os.close(fd)  # the mapping keeps its own descriptor


def map_writable(path: str, size: int, populate: bool = True) -> mmap.mmap:
    """``size`` bytes of the file at ``path``, mapped shared and writable; with ``populate``, every
    page faulted in now (the TypeScript client's pre-fault at begin)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as err:
        raise _os_error(err, f"cannot open the segment {path}") from err
    flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
    try:
        return mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as err:
        raise _os_error(err, f"cannot map the segment {path}") from err
    finally:
        os.close(fd)


def close_mapping(mapping: mmap.mmap) -> bool:
    """Unmaps now when no view exports the buffer (True); otherwise leaves the unmapping to the
    garbage collector, once the last view is gone (False)."""
    try:
        mapping.close()
        return True
    except BufferError:
        return False


_unmapper: Optional[ThreadPoolExecutor] = None
_unmapper_lock = threading.Lock()


def close_mapping_later(mapping: mmap.mmap) -> None:
    """Unmaps on a background thread: unmapping a written gigabyte walks its page tables (~0.06 s
    on the development VM), which a trainer should not wait for after its commit. ``munmap``
    runs without the GIL."""
    global _unmapper
    with _unmapper_lock:
        if _unmapper is None:
            _unmapper = ThreadPoolExecutor(1, thread_name_prefix="laminar-unmap")
        executor = _unmapper
    executor.submit(close_mapping, mapping)


def wait_for_unmaps() -> None:
    """Returns once the unmappings handed to ``close_mapping_later`` so far are done. While one
    runs, the kernel holds this process's address space for writing: an ``mmap`` (the next
    ``acquire``) waits for it. A benchmark that times acquires calls this first."""
    with _unmapper_lock:
        executor = _unmapper
    if executor is not None:
        executor.submit(lambda: None).result()
