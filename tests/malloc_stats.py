"""glibc's malloc statistics, for the memory tests and the child processes
they start (which import this module from the tests folder)."""

import ctypes


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


def mmapped_bytes():
    """Bytes glibc has mapped with mmap right now (mallinfo2's hblkhd), or
    None where glibc's mallinfo2 is not available."""
    try:
        function = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function().hblkhd
