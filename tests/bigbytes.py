"""bigbytes.py: a short report for a failed == between large byte strings.

pytest explains a failed `assert a == b` with a diff, and for megabytes of
file content that diff runs for many minutes: one failed assertion once
held CI past its time limit. The conftests take the hook below, so such an
assertion reports the two lengths and where the bytes differ instead.
"""

BLOCK = 4096


def pytest_assertrepr_compare(op, left, right):
    kinds = (bytes, bytearray, memoryview)
    if op != "==" or not (isinstance(left, kinds) and isinstance(right, kinds)):
        return None
    left, right = bytes(left), bytes(right)
    n = max(len(left), len(right))
    if n <= BLOCK:
        return None  # pytest's own diff is quick and says more
    blocks = [i for i in range(0, n, BLOCK)
              if left[i:i + BLOCK] != right[i:i + BLOCK]]
    first = next((i for i in range(blocks[0], blocks[0] + BLOCK)
                  if left[i:i + 1] != right[i:i + 1]), blocks[0])
    return [f"{len(left)} bytes == {len(right)} bytes",
            f"first difference at offset {first}: "
            f"{left[first:first + 16]!r} != {right[first:first + 16]!r}",
            f"{len(blocks)} of {(n + BLOCK - 1) // BLOCK} blocks of "
            f"{BLOCK} bytes differ, from offsets "
            + ", ".join(str(b) for b in blocks[:8])
            + (", ..." if len(blocks) > 8 else "")]
