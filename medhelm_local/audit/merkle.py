"""RFC 6962 (Certificate Transparency) Merkle tree hash over the audit trail's records.

Leaf hash ``SHA-256(0x00 || record bytes)``, interior node ``SHA-256(0x01 || left || right)``; a tree of
``n`` leaves splits at ``k``, the largest power of two smaller than ``n`` (RFC 6962 section 2.1). The hash
of the empty tree is the hash of the empty string.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    k = 1
    while k << 1 < n:
        k <<= 1
    return k


def root_from_leaf_hashes(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) from the leaves' hashes (already ``leaf_hash``-ed)."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = _split(n)
    return node_hash(root_from_leaf_hashes(leaves[:k]), root_from_leaf_hashes(leaves[k:]))


def merkle_root(entries: Sequence[bytes]) -> bytes:
    return root_from_leaf_hashes([leaf_hash(e) for e in entries])


class MerkleAccumulator:
    """Leaves added one at a time; ``root()`` is MTH of the leaves so far in O(log n).

    The RFC 6962 tree of ``n`` leaves is the right fold of its perfect subtrees (sizes = the bits of ``n``,
    largest first), so a stack of perfect-subtree roots, merged like a binary counter, is enough.
    """

    def __init__(self) -> None:
        self._stack: list[tuple[int, bytes]] = []  # (size, root) of perfect subtrees, largest first
        self.size = 0

    def add_leaf_hash(self, leaf: bytes) -> None:
        size, node = 1, leaf
        while self._stack and self._stack[-1][0] == size:
            left_size, left = self._stack.pop()
            size, node = left_size + size, node_hash(left, node)
        self._stack.append((size, node))
        self.size += 1

    def add(self, data: bytes) -> None:
        self.add_leaf_hash(leaf_hash(data))

    def root(self) -> bytes:
        if not self._stack:
            return hashlib.sha256(b"").digest()
        node = self._stack[-1][1]
        for _, left in reversed(self._stack[:-1]):
            node = node_hash(left, node)
        return node

    def state(self) -> list[list[int | str]]:
        """The perfect-subtree stack, to resume accumulating later (``from_state``)."""
        return [[size, node.hex()] for size, node in self._stack]

    @classmethod
    def from_state(cls, state: list[list[int | str]]) -> MerkleAccumulator:
        accumulator = cls()
        for size, node in state:
            accumulator._stack.append((int(size), bytes.fromhex(str(node))))
            accumulator.size += int(size)
        return accumulator

    def copy(self) -> MerkleAccumulator:
        return MerkleAccumulator.from_state(self.state())
