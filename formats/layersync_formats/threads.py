"""Comment threads as PDF and XFDF carry them: a reply (``/IRT``, ``inreplyto``) may answer
another reply (Acrobat threads that way), while Instant JSON has one root per thread
(``pspdfkit/comment`` records whose ``rootId`` is the root annotation's id, the root
marked ``isCommentThreadRoot``). The PDF import and the XFDF reader both find a reply's
root here.
"""

from __future__ import annotations

from typing import Callable, TypeVar

#: How far a chain of replies (a reply to a reply to ...) is followed to its root.
MAX_REPLY_DEPTH = 64

Node = TypeVar("Node")


def thread_root(node: Node, answers: Callable[[Node], Node | None]) -> Node | None:
    """The root of ``node``'s thread: the first node up the chain that answers nothing.

    ``answers(n)`` is the node ``n`` replies to, or None when ``n`` is not a reply.
    Returns ``node`` itself when it is not a reply, and None for a chain that comes back
    on itself (a cycle of replies) or is longer than :data:`MAX_REPLY_DEPTH`: no
    annotation heads it."""
    for _ in range(MAX_REPLY_DEPTH + 1):
        parent = answers(node)
        if parent is None:
            return node
        node = parent
    return None  # a cycle never ends, so it runs past the limit too
